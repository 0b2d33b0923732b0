#!/usr/bin/env bash
# Installs the E2B Python SDK suite's pinned packages (requirements.txt) into
# test/sdk-e2b-py/.venv, made with the system's python3 (3.10 or newer). Run by
# scripts/test.sh before `make test`'s go test, and by test/e2e TestSDKE2BPy when the venv is
# missing. A venv whose installed set is the current requirements.txt is left as it is;
# any other is made afresh, so nothing outside the pins is ever in it.
set -euo pipefail
cd "$(dirname "$0")"
stamp=.venv/requirements.installed
if [[ -x .venv/bin/python ]] && cmp -s requirements.txt "$stamp"; then
	exit 0
fi
python=${SANDGATE_PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
	echo "sdk-e2b-py: $python is older than 3.10; the E2B Python SDK needs 3.10 or newer" >&2
	exit 1
}
rm -rf .venv
"$python" -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check --no-input --require-virtualenv -r requirements.txt
cp requirements.txt "$stamp"
