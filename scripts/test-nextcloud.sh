#!/usr/bin/env bash
# Runs the app and the sidecar against a real Nextcloud 31 + Talk 21 (sidecar/e2e/realnc):
# the app-store tarball installed into custom_apps, occ istota:setup, the tarball's own
# sidecar with the real claude CLI in bwrap, users talking to the bot over Nextcloud's
# HTTP APIs, and the settings pages in Chromium.
#
# The Nextcloud comes from NEXTCLOUD_BUNDLE (a folder with serve.sh and the server tarball,
# like ../shared/nextcloud beside this repository). Without one this says so and skips.
#
#   scripts/test-nextcloud.sh [go test flags…]     e.g. -run 'TestNextcloud/(install|talk)$'
# ISTOTA_BENCH_OUT=FILE also writes the figures measured on the way (make bench does).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bundle=${NEXTCLOUD_BUNDLE:-$repo/../shared/nextcloud}
if [ ! -f "$bundle/serve.sh" ]; then
	echo "test-nextcloud: SKIPPED: no Nextcloud bundle at $bundle (set NEXTCLOUD_BUNDLE to a folder with serve.sh)"
	exit 0
fi
bundle=$(cd "$bundle" && pwd)
version=$(xmllint --xpath 'string(/info/version)' "$repo/appinfo/info.xml")
tarball=$repo/build/appstore/istota-$version.tar.gz
[ -f "$tarball" ] || { echo "test-nextcloud: $tarball is missing: run make appstore" >&2; exit 1; }
echo "test-nextcloud: Nextcloud from $bundle, app from $tarball"
cd "$repo"
ISTOTA_NEXTCLOUD_BUNDLE=$bundle ISTOTA_APPSTORE_TARBALL=$tarball \
	exec go test -tags sqlite_fts5 -count=1 -timeout 45m -v "$@" ./sidecar/e2e/realnc/
