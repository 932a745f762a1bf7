#!/usr/bin/env bash
# bench/soak.sh: bridge's RSS over a long run (default 1 hour at 1 s, all
# scopes, spool on disk, no tracker; MLFLOW=1: one sink, a real MLflow server
# on 127.0.0.1 that the script starts), read from /proc/<pid>/status every
# STEP seconds. Prints a TSV (seconds, VmRSS, VmHWM, RssAnon, RssFile, all
# MiB) and a summary: flat means the last reading is near the first after
# warm-up. RssFile is the binary's (and libc's) page cache mapped in; how
# much of it is mapped depends on how the file came into the cache, so
# COLD=1 (the default) drops the binary's cached pages first, as on a node
# that did not just write it, and COLD=0 keeps them (a binary just built or
# copied).
#
#   bench/soak.sh                         # 3600 s
#   DURATION=600 STEP=30 BRIDGE_BIN=/tmp/bridge bench/soak.sh
#   MLFLOW=1 bench/soak.sh                # with one sink (needs .venv's mlflow)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-3600}
STEP=${STEP:-60}
INTERVAL=${INTERVAL:-1s}
tmp=$(mktemp -d /tmp/bridge-soak.XXXXXX)
bpid=
. bench/mlflow_server.sh
cleanup() {
	[[ -n $bpid ]] && kill -TERM "$bpid" 2>/dev/null
	stop_mlflow "$tmp"
	sleep 1 # a grace for bridge to exit before its spool is removed
	rm -rf "$tmp"
}
trap cleanup EXIT
trackers=(--trackers none)
if [[ ${MLFLOW:-0} == 1 ]]; then
	py=${PYTHON:-.venv/bin/python}
	start_mlflow "$tmp" "$py" || exit 1
	port=$mlflow_port
	export MLFLOW_TRACKING_URI=http://127.0.0.1:$port MLFLOW_EXPERIMENT_NAME=bridge-soak
	trackers=(--trackers mlflow)
fi
bin=${BRIDGE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/bridge
	go build -o "$bin" ./cmd/bridge
fi
if [[ ${COLD:-1} == 1 ]]; then
	sync "$bin"
	python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$bin"
fi
"$bin" "${trackers[@]}" --interval "$INTERVAL" --spool "$tmp/soak.jsonl" -- sleep $((DURATION + 60)) >"$tmp/bridge.log" 2>&1 &
bpid=$!
echo "== $(date -u +%FT%TZ) bridge $bin ${trackers[*]}, interval $INTERVAL, $DURATION s, RSS every $STEP s" >&2
printf 'seconds\trss_mib\thwm_mib\tanon_mib\tfile_mib\n'
# The first reading is one STEP in (warm-up): at once, bridge may not have
# exec'd yet and its status reads zeros.
for ((t = STEP; t <= DURATION; t += STEP)); do
	sleep "$STEP"
	awk -v t="$t" '/^VmRSS:/{r=$2} /^VmHWM:/{h=$2} /^RssAnon:/{a=$2} /^RssFile:/{f=$2} END{printf "%d\t%.1f\t%.1f\t%.1f\t%.1f\n", t, r/1024, h/1024, a/1024, f/1024}' "/proc/$bpid/status"
done | tee "$tmp/rss.tsv"
awk -F'\t' 'NR==2{first=$2; fa=$4; max=$2} NR>=2{last=$2; if($2>max)max=$2; a=$4; f=$5} END{printf "== RSS after warm-up %.1f MiB (anonymous %.1f), at the end %.1f MiB (anonymous %.1f, file %.1f), max %.1f MiB, growth %.1f MiB\n", first, fa, last, a, f, max, last-first}' "$tmp/rss.tsv" >&2
echo "== samples spooled: $(grep -c '"type":"sample"' "$tmp/soak.jsonl")" >&2
