#!/bin/sh
# Runs the web inspector's tests with the browser tests enabled: they drive
# headless Chromium from Debian (apt-get install -y chromium). Extra
# arguments go to go test, e.g. ./web/browsertest.sh -run Forum -v
# or ./web/browsertest.sh -update-screenshots to refresh the committed ones.
set -eu
cd "$(dirname "$0")/.."
FORGE_TEST_CHROMIUM="${FORGE_TEST_CHROMIUM:-$(command -v chromium || true)}"
if [ -z "$FORGE_TEST_CHROMIUM" ]; then
	echo "chromium not found: apt-get install -y chromium, or set FORGE_TEST_CHROMIUM" >&2
	exit 1
fi
export FORGE_TEST_CHROMIUM FORGE_TEST_REQUIRE_SERVICES=1
exec go test -race ./web/ "$@"
