#!/usr/bin/env bash
# CI several times in a row, each on a fresh clone of this repository's
# HEAD, with SHELL unset as in CI, while stress-ng keeps one core busy:
# the "green N times in a row under load" check. Stops at the first
# failure; each run's output is in $OUT/ci-run<i>.log, the summary in
# $OUT/summary.
#
#   RUNS=3 OUT=/tmp/ci-repeat bash bench/ci-repeat.sh
set -u
runs=${RUNS:-3}
out=${OUT:-/tmp/ci-repeat}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
stress-ng --cpu 1 --timeout 6h >/dev/null 2>&1 &
stress=$!
trap 'kill $stress 2>/dev/null' EXIT
for i in $(seq 1 "$runs"); do
	d=$(mktemp -d)
	git clone -q "$repo" "$d/bridge"
	echo "run $i: $(git -C "$d/bridge" log --oneline -1), start $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary"
	s=$(date +%s)
	(cd "$d/bridge" && env -u SHELL CI=true bash .ci/run >"$out/ci-run$i.log" 2>&1)
	rc=$?
	echo "run $i: exit $rc after $(($(date +%s) - s)) s" | tee -a "$out/summary"
	rm -rf "$d"
	[ "$rc" -eq 0 ] || exit "$rc"
done
