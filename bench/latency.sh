#!/usr/bin/env bash
# bench/latency.sh: the child's start delay under bridge and bridge's exit
# after the child, against a real MLflow server (sqlite, 127.0.0.1) that this
# script starts and stops. The goals: start delay under 50 ms with
# MLFLOW_RUN_ID set, exit within 1 s of the child on a healthy tracker.
#
#   bench/latency.sh                 # 20 runs per mode
#   RUNS=50 bench/latency.sh
#   BRIDGE_BIN=/tmp/bridge-before bench/latency.sh
#   COLD=1 bench/latency.sh          # bridge's binary not in the page cache
#
# COLD=1 drops the binary's cached pages before every run, so that every
# build starts from disk, as on a node that has not run it yet.
#
# Needs: go (unless BRIDGE_BIN), PYTHON (default .venv/bin/python) with mlflow.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
PYTHON=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d /tmp/bridge-latency.XXXXXX)
. bench/mlflow_server.sh
cleanup() {
	stop_mlflow "$tmp"
	rm -rf "$tmp"
}
trap cleanup EXIT

bin=${BRIDGE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/bridge
	go build -o "$bin" ./cmd/bridge
fi
start_mlflow "$tmp" "$PYTHON" || exit 1
port=$mlflow_port
echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $RUNS runs per mode; bridge $bin" >&2
"$PYTHON" bench/latency.py "$bin" "http://127.0.0.1:$port" "$RUNS"
