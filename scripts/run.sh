#!/usr/bin/env bash
# `make run`: the gateway on local Docker with the embedded store. Generates an API key
# (kept in .sandgate/api-key so that it survives restarts) unless SANDGATE_API_KEY is set.
# The key is the platform admin's: .sandgate is its owner's alone (0700, the key 0600),
# also when an earlier run left them readable.
set -euo pipefail
cd "$(dirname "$0")/.."
(umask 077 && mkdir -p .sandgate)
chmod 700 .sandgate
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

  sandgate $(cat VERSION) on local Docker, embedded store
  API:      http://$host:$port/v1   (OpenAPI: http://$host:$port/v1/openapi.json)
  Console:  http://$host:$port/console/
  API key:  $SANDGATE_API_KEY
  Default image: sandgate/base:$(cat VERSION)

  Try:  curl -s -H "OPEN-SANDBOX-API-KEY: $SANDGATE_API_KEY" http://$host:$port/v1/sandboxes

MSG
exec bin/sandgate run
