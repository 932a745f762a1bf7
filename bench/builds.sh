#!/usr/bin/env bash
# bench/builds.sh: CPU and context switches a sample of bridge builds run side
# by side over one window (every thread's, from /proc), by default sending
# to a real MLflow server (sqlite, 127.0.0.1, started here): what a sample
# costs with its log-batch, its acknowledgement and the spool's fsync policy,
# which bench/overhead.sh (--trackers none, beside the other monitors)
# leaves out. TRACKERS=none compares the builds alone, ARGS adds flags to
# every one.
#
#   BRIDGE_BINS="/tmp/bridge-old /tmp/bridge-new" bench/builds.sh
#   INTERVAL=100ms WINDOW=20 SCOPES=all BRIDGE_BINS=... bench/builds.sh
#   TRACKERS=none ARGS="--spool-sync 1m" BRIDGE_BINS=... bench/builds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
INTERVAL=${INTERVAL:-1s}
WINDOW=${WINDOW:-30}
SCOPES=${SCOPES:-container,node}
PYTHON=${PYTHON:-.venv/bin/python}
TRACKERS=${TRACKERS:-mlflow}
read -r -a args <<<"${ARGS:-}"
read -r -a bins <<<"${BRIDGE_BINS:?BRIDGE_BINS: the bridge binaries to compare, space-separated}"
tmp=$(mktemp -d /tmp/bridge-builds.XXXXXX)
pids=()
. bench/mlflow_server.sh
cleanup() {
	for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
	stop_mlflow "$tmp"
	sleep 1 # a grace for the builds to exit before their spools are removed
	rm -rf "$tmp"
}
trap cleanup EXIT
if [[ $TRACKERS == mlflow ]]; then
	start_mlflow "$tmp" "$PYTHON" || exit 1
	export MLFLOW_TRACKING_URI=http://127.0.0.1:$mlflow_port MLFLOW_EXPERIMENT_NAME=builds
fi
scopes=()
[[ $SCOPES != all ]] && scopes=(--scopes "$SCOPES")
interval_s=$("$PYTHON" -c "import sys; v=sys.argv[1]; print(float(v[:-2])/1000 if v.endswith('ms') else float(v[:-1]))" "$INTERVAL")
labels=()
for i in "${!bins[@]}"; do
	setsid "${bins[$i]}" --trackers "$TRACKERS" --interval "$INTERVAL" ${scopes[@]+"${scopes[@]}"} ${args[@]+"${args[@]}"} \
		--spool "$tmp/$i.jsonl" -- sleep "$((WINDOW + 30))" >"$tmp/$i.log" 2>&1 &
	pids+=($!)
	labels+=("$i:${bins[$i]}=${pids[-1]}")
done
sleep 8 # runs created, first samples sent
echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); interval $INTERVAL, window $WINDOW s, scopes $SCOPES, trackers $TRACKERS${ARGS:+, $ARGS}" >&2
out=$("$PYTHON" bench/measure.py "$WINDOW" "$interval_s" "${labels[@]}")
printf '| build | CPU ms/sample | context switches/sample | RSS MiB |\n|---|---|---|---|\n'
while IFS=$'\t' read -r label cpu rss _ cs; do
	printf '| %s | %s | %s | %s |\n' "${label#*:}" "$cpu" "$cs" "$rss"
done <<<"$out"
if grep -il 'level=ERROR' "$tmp"/*.log >/dev/null; then echo "== errors in bridge logs:" >&2; grep -ih 'level=ERROR' "$tmp"/*.log | head >&2; fi
