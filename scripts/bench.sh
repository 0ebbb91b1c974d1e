#!/usr/bin/env bash
# make bench: every figure the issues name, measured in one run on this machine, ending
# with one table of the figures beside their goals (scripts/bench-table.sh). Output in
# bench.txt. Timings are figures here, never test failures.
set -uo pipefail
cd "$(dirname "$0")/.."
tags=sqlite_fts5
out=bench.txt
: >"$out"
status=0
run() { "$@" 2>&1 | tee -a "$out"; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1; }

run go test -tags $tags -run '^$' -bench Intake -benchtime 3000x -count 1 ./sidecar/internal/httpapi
run go test -tags $tags -run '^$' -bench TalkRoundTrip -benchtime 10x -count 1 -timeout 20m ./sidecar/e2e
run go test -tags $tags -run '^$' -bench . -count 1 -timeout 20m ./sidecar/internal/sandbox
run go test -tags $tags -run '^$' -bench . -count 1 -timeout 30m ./sidecar/internal/memory
run go test -tags $tags -run '^$' -bench Fairness -benchtime 1x -count 1 -timeout 10m ./sidecar/internal/worker
# Several processes sharing one PostgreSQL (issue 15): throughput with one, two, three.
run env ISTOTA_BENCH_MULTIHOST=1 go test -tags $tags -run '^TestMultiHostThroughput$' -v -count 1 -timeout 30m ./sidecar/e2e

# On the real Nextcloud (skipped, saying so, without a Nextcloud bundle): the answer's
# path, a new user, 10,000 files, a burst of 200 and the chaos run.
mkdir -p build
rm -f build/bench-nextcloud.txt
if scripts/test-nextcloud.sh -run 'TestNextcloud/(install|figures|load)$' >build/bench-nextcloud.log 2>&1; then
	if [ -f build/bench-nextcloud.txt ]; then cat build/bench-nextcloud.txt >>"$out"; else grep -m1 SKIPPED build/bench-nextcloud.log | tee -a "$out"; fi
else
	tail -60 build/bench-nextcloud.log
	status=1
fi
scripts/bench-table.sh "$out" | tee -a "$out"
exit $status
