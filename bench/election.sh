#!/usr/bin/env bash
# bench/election.sh: the multi-node election at scale (docs/multinode.md,
# "Timing"). Starts a real MLflow server (sqlite, WORKERS uvicorn workers,
# 127.0.0.1), measures the service time of each request the election makes
# (bench/election measure: the server's own CPU time a request, read from
# /proc), then runs the election of N nodes (the real protocol code) against
# a server model fitted to those figures (bench/election sim), for several N
# and worker counts.
#
#   bench/election.sh
#   NS="64 1024" MODEL_WORKERS="2 4 8" SEEDS=5 SPREAD=2s bench/election.sh
#
# Needs: go, BRIDGE_TEST_PYTHON (default .venv/bin/python) with mlflow.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/mlflow_server.sh
PY=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
WORKERS=${WORKERS:-2}
NS=${NS:-64 256 1024}
MODEL_WORKERS=${MODEL_WORKERS:-2 4 8}
SEEDS=${SEEDS:-3}
SPREAD=${SPREAD:-0s}
dir=$(mktemp -d /tmp/bridge-election.XXXXXX)
trap 'stop_mlflow "$dir"; rm -rf "$dir"' EXIT
MLFLOW_WORKERS=$WORKERS start_mlflow "$dir" "$PY"
echo "== MLflow $("$PY" -c 'import mlflow; print(mlflow.__version__)') (sqlite, $WORKERS workers) on 127.0.0.1:$mlflow_port; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
go run ./bench/election measure -url "http://127.0.0.1:$mlflow_port" -pgid "$mlflow_pid" | tee "$dir/measure.txt"
model=$(sed -n 's/^model flags (server CPU): //p' "$dir/measure.txt")
echo "== the election against that model (service time = the server's CPU a request), $SEEDS seeds, starts spread over $SPREAD"
for w in $MODEL_WORKERS; do
	for n in $NS; do
		go run ./bench/election sim -nodes "$n" -workers "$w" -seeds "$SEEDS" -spread "$SPREAD" $model
	done
done
