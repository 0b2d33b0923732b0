#!/usr/bin/env bash
# `make run`, once scripts/run-build.sh made the gateway and the default image: the
# gateway on local Docker with the embedded store. The large images (the code
# interpreter, the E2B templates) are built by the gateway itself once it serves
# (SANDGATE_IMAGE_BUILDS), one after the other: GET /v1/images and the console show
# their progress, and a create that names one before it is ready gets
# SANDBOX::IMAGE_BUILDING (retry shortly). A second `make run` finds them built.
#
# Generates an API key (kept in .sandgate/api-key so that it survives restarts) unless
# SANDGATE_API_KEY is set. The key is the platform admin's: .sandgate is its owner's
# alone (0700, the key 0600), also when an earlier run left them readable.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(cat VERSION)
(umask 077 && mkdir -p .sandgate)
chmod 700 .sandgate

# The images the gateway builds once it serves, in this order: the E2B door's base
# template (small), the code interpreter (and the name OpenSandbox's SDKs default to),
# the E2B door's code interpreter template (made from it). Each is skipped when present.
if [ -z "${SANDGATE_IMAGE_BUILDS+set}" ]; then
	ci="sandgate/code-interpreter:$VERSION"
	ci_cmd="images/code-interpreter.sh $VERSION"
	case "${SANDGATE_OPENSANDBOX_ALIAS:-on}" in
	off | 0 | false | no) ;;
	*)
		ci="$ci+${SANDGATE_OPENSANDBOX_ALIAS_IMAGE:-opensandbox/code-interpreter:latest}"
		ci_cmd="$ci_cmd && images/opensandbox-alias.sh $VERSION"
		;;
	esac
	SANDGATE_IMAGE_BUILDS="sandgate/e2b-base:$VERSION=images/e2b.sh $VERSION base,$ci=$ci_cmd,sandgate/e2b-code-interpreter:$VERSION=images/e2b.sh $VERSION code-interpreter"
fi
export SANDGATE_IMAGE_BUILDS

if [ -z "${SANDGATE_API_KEY:-}" ]; then
	[ -s .sandgate/api-key ] || (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >.sandgate/api-key)
	chmod 600 .sandgate/api-key
	SANDGATE_API_KEY=$(cat .sandgate/api-key)
fi
export SANDGATE_API_KEY
export SANDGATE_LISTEN=${SANDGATE_LISTEN:-:8080}
port=${SANDGATE_LISTEN##*:}
host=${SANDGATE_LISTEN%:*}
[ -n "$host" ] || host=localhost
cat <<MSG

  sandgate $VERSION on local Docker, embedded store
  API:      http://$host:$port/v1   (OpenAPI: http://$host:$port/v1/openapi.json)
  Console:  http://$host:$port/console/
  API key:  $SANDGATE_API_KEY
  Default image: sandgate/base:$VERSION
  Built in the background (progress: GET /v1/images, the console):
            code interpreter, E2B templates

  Try:  curl -s -H "OPEN-SANDBOX-API-KEY: $SANDGATE_API_KEY" http://$host:$port/v1/sandboxes

MSG
exec bin/sandgate run
