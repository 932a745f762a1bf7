#!/usr/bin/env bash
# bench/overhead.sh: CPU per sample and RSS of bridge (all scopes, and
# --scopes container,node) beside MLflow's system-metrics monitor and W&B's
# (offline), all started together, same interval, measured over the same
# window by bench/measure.py (scheduler run time of every thread).
#
#   bench/overhead.sh                      # 100 ms interval, 30 s window
#   INTERVAL_MS=1000 WINDOW=60 bench/overhead.sh
#   BRIDGE_BIN=/tmp/bridge-before bench/overhead.sh   # another build
#   BRIDGE_BIN_BASE=/tmp/bridge-before bench/overhead.sh  # also that build, same run
#   TRACKER=mlflow bench/overhead.sh       # both post to a real MLflow server, as in use
#
# Needs: go (unless BRIDGE_BIN), PYTHON (default .venv/bin/python) with mlflow
# and wandb; psutil (MLflow's monitors use it) is installed into
# $BENCH_PYDEPS (default ~/.cache/bridge-bench/pydeps) if missing, never into
# the venv. No server and no network: bridge runs with --trackers none (the
# spool on disk), W&B with WANDB_MODE=offline, MLflow's monitor classes are
# driven without a run (bench/mlflow_monitor.py; its idle twin is subtracted).
# TRACKER=mlflow starts a real MLflow server (sqlite, 127.0.0.1, one worker;
# bench/mlflow_server.sh): bridge runs with --trackers mlflow (each its own
# run; a sample acknowledged by the server needs no fsync), MLflow's own
# SystemMetricsMonitor runs on a run of it (bench/mlflow_monitor_run.py: its
# get_run a sample and log_batch), and the server's CPU for all of them is
# shown on its own line. W&B stays offline.
# The machine is whatever it is: prefer the ratios, taken in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
INTERVAL_MS=${INTERVAL_MS:-100}
WINDOW=${WINDOW:-30}
WARMUP=${WARMUP:-8}
PYTHON=${PYTHON:-.venv/bin/python}
PYDEPS=${BENCH_PYDEPS:-$HOME/.cache/bridge-bench/pydeps}
TRACKER=${TRACKER:-none}
case $TRACKER in none | mlflow) ;; *) echo "TRACKER must be none or mlflow, not \"$TRACKER\"" >&2; exit 2 ;; esac
tmp=$(mktemp -d /tmp/bridge-overhead.XXXXXX)
pids=()
. bench/mlflow_server.sh
cleanup() {
	for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
	sleep 1
	for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
	stop_mlflow "$tmp"
	rm -rf "$tmp"
}
trap cleanup EXIT

if ! PYTHONPATH=$PYDEPS "$PYTHON" -c 'import psutil' 2>/dev/null; then
	echo "== installing psutil into $PYDEPS (MLflow's monitors need it)" >&2
	"$PYTHON" -m pip install -q --target "$PYDEPS" psutil >&2
fi
export PYTHONPATH=$PYDEPS${PYTHONPATH:+:$PYTHONPATH}

bin=${BRIDGE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/bridge
	go build -o "$bin" ./cmd/bridge
fi
interval_s=$(awk "BEGIN{print $INTERVAL_MS/1000}")
life=$((WARMUP + WINDOW + 30))

# Each tool in its own process group (setsid), so cleanup ends all of it.
# Logs are named by the program, or by the script for Python.
start() {
	local name=${1##*/}
	[[ $name == python* ]] && name=${2##*/}
	setsid "$@" >"$tmp/$name.$RANDOM.log" 2>&1 &
	pids+=($!)
}
srv=()
if [[ $TRACKER == mlflow ]]; then
	start_mlflow "$tmp" "$PYTHON" || exit 1
	srv=("mlflow-server=$mlflow_pid")
	export MLFLOW_TRACKING_URI=http://127.0.0.1:$mlflow_port MLFLOW_EXPERIMENT_NAME=bench-overhead
fi
# bridge LABEL BUILD SPOOL [FLAGS...]
bridge() {
	local label=$1 build=$2 spool=$3
	shift 3
	start "$build" --trackers "$TRACKER" --interval "${INTERVAL_MS}ms" --run-name "$label" --spool "$tmp/$spool" "$@" -- sleep "$life"
}
bridge bridge-all "$bin" all.jsonl
all=${pids[-1]}
bridge bridge-container,node "$bin" cn.jsonl --scopes container,node
cn=${pids[-1]}
base=()
if [[ -n ${BRIDGE_BIN_BASE:-} ]]; then
	bridge base-all "$BRIDGE_BIN_BASE" base-all.jsonl
	base+=("base-all=${pids[-1]}")
	bridge base-container,node "$BRIDGE_BIN_BASE" base-cn.jsonl --scopes container,node
	base+=("base-container,node=${pids[-1]}")
fi
if [[ $TRACKER == mlflow ]]; then
	monitor=(bench/mlflow_monitor_run.py "$MLFLOW_TRACKING_URI")
else
	monitor=(bench/mlflow_monitor.py)
fi
start "$PYTHON" "${monitor[@]}" "$interval_s" --count-file "$tmp/mlflow.count"
ml=${pids[-1]}
start "$PYTHON" "${monitor[@]}" "$interval_s" --idle
mlidle=${pids[-1]}
WANDB_MODE=offline WANDB_DIR=$tmp WANDB_SILENT=true start "$PYTHON" bench/wandb_monitor.py "$interval_s"
wb=${pids[-1]}

# Wait (bounded) until MLflow's loop runs (mlflow is slow to import on a
# loaded machine) and W&B has started its service, then a warm-up.
for _ in $(seq 240); do
	[[ -s $tmp/mlflow.count ]] && [[ -n $(cat /proc/"$wb"/task/*/children 2>/dev/null) ]] && break
	sleep 0.5
done
[[ -s $tmp/mlflow.count ]] || { echo "MLflow's monitor loop did not start: $(cat "$tmp"/mlflow_monitor*.log)" >&2; exit 1; }
sleep "$WARMUP"
echo "== $(date -u +%FT%TZ) $(nproc) CPUs, $(ls /proc | grep -c '^[0-9]') processes, load $(cut -d' ' -f1-3 /proc/loadavg); interval ${INTERVAL_MS} ms, window ${WINDOW} s, trackers $TRACKER; bridge $bin${BRIDGE_BIN_BASE:+, base $BRIDGE_BIN_BASE}" >&2
out=$("$PYTHON" bench/measure.py "$WINDOW" "$interval_s" \
	"bridge-all=$all" "bridge-container,node=$cn" ${base[@]+"${base[@]}"} "mlflow-monitor=$ml:mlflow-idle" "mlflow-idle=$mlidle" "wandb-monitor=$wb" ${srv[@]+"${srv[@]}"})

# Series per sample: bridge's from its spool, MLflow's from its monitors.
points() {
	"$PYTHON" - "$1" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    try:
        rec = json.loads(line)
    except ValueError:
        continue
    if rec.get("type") == "sample":
        n = max(n, len(rec.get("metrics", {})))
print(n)
PY
}
declare -A series=([bridge-all]=$(points "$tmp/all.jsonl") [bridge-container,node]=$(points "$tmp/cn.jsonl")
	[base-all]=$( [[ -f $tmp/base-all.jsonl ]] && points "$tmp/base-all.jsonl") [base-container,node]=$( [[ -f $tmp/base-cn.jsonl ]] && points "$tmp/base-cn.jsonl")
	[mlflow-monitor]=$(cat "$tmp/mlflow.count" 2>/dev/null || echo '?') [mlflow-idle]=0 [wandb-monitor]='?' [mlflow-server]='-')
mlcpu=$(awk -F'\t' '$1=="mlflow-monitor"{print $2}' <<<"$out")
printf '| tool | CPU ms/sample | x MLflow | RSS MiB | series | processes | context switches/sample |\n|---|---|---|---|---|---|---|\n'
while IFS=$'\t' read -r label cpu rss procs cs; do
	ratio=$(awk "BEGIN{ if ($mlcpu > 0) printf \"%.2f\", $cpu/$mlcpu; else print \"-\" }")
	printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$cpu" "$ratio" "$rss" "${series[$label]}" "$procs" "$cs"
done <<<"$out"
