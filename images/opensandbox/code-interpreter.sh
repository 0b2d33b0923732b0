#!/bin/sh
# The entrypoint OpenSandbox's code-interpreter SDKs and examples start sandboxes with
# (/opt/code-interpreter/code-interpreter.sh, and /opt/opensandbox/code-interpreter.sh in
# newer ones), as sandgate's alias image opensandbox/code-interpreter:latest provides it.
#
# In sandgate the kernel gateway belongs to the sandbox agent: it starts Jupyter Server
# (loopback only, with a token the workload never sees) on the first code call, and
# stops it with the sandbox; the SDKs' readiness probe of 127.0.0.1:44771 reaches the
# agent, which starts Jupyter in the background then. So this script checks that the interpreter stack the agent
# will start is installed (which also brings it into the page cache, so the first call
# starts faster), then keeps running, as the SDK expects of a sandbox's entrypoint,
# until the sandbox is stopped. OpenSandbox's language selection variables
# (PYTHON_VERSION, NODE_VERSION, JAVA_VERSION, GO_VERSION) are accepted and ignored: this
# image has one Python.
set -eu
if ! err=$(python3 -c 'import jupyter_server, ipykernel' 2>&1); then
	echo "code-interpreter: jupyter-server and ipykernel are not importable: $err" >&2
	exit 1
fi
echo "code-interpreter: ready (the sandbox agent starts Jupyter on the first code call)"
trap 'exit 0' TERM INT HUP
while :; do
	sleep 3600 &
	wait $! || true
done
