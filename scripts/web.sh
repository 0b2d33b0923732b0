#!/usr/bin/env bash
# `make web`: build the console (web/) into web/dist, which the binary embeds. Installs
# the npm packages only when the lockfile changed, and builds only when a source is newer
# than the last build.
set -euo pipefail
cd "$(dirname "$0")/../web"
if ! command -v npm >/dev/null; then
	echo "make web: npm is missing; install Node.js 20.19 or newer with npm (for example: apt-get install nodejs npm)" >&2
	exit 1
fi
# Vite 7 needs Node.js 20.19+ (or 22.12+).
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=12)||(a===20&&b>=19)?0:1)'; then
	echo "make web: Node.js $(node --version) is too old; the console's build (Vite 7) needs 20.19 or newer" >&2
	exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund
fi
stamp=dist/index.html
if [ -f "$stamp" ] && [ -z "$(find src index.html vite.config.ts tsconfig.json package-lock.json scripts -newer "$stamp" -print -quit)" ]; then
	echo "web: dist is up to date"
	exit 0
fi
npm run build
