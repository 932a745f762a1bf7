#!/usr/bin/env bash
# bench/logbatch_cost.sh: what one runs/log-batch request costs an MLflow
# server (sqlite, WORKERS workers, 127.0.0.1, started here), per request, per
# distinct key and per point, and what runs/get costs (bench/logbatch_cost.py).
# Requests go one after another, so the figure is the server's own work, not
# contention.
#
#   bench/logbatch_cost.sh                 # 300 requests a shape, 2 workers
#   REQUESTS=500 WORKERS=1 bench/logbatch_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-300}
PYTHON=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d /tmp/bridge-logbatch.XXXXXX)
cleanup() {
	[[ -n ${mlflow_pid:-} ]] && { kill -TERM -- "-$mlflow_pid" 2>/dev/null || true; sleep 1; kill -KILL -- "-$mlflow_pid" 2>/dev/null || true; }
	rm -rf "$tmp"
}
trap cleanup EXIT
. bench/mlflow_server.sh
MLFLOW_WORKERS=${WORKERS:-2} start_mlflow "$tmp" "$PYTHON"
echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); MLflow $("$PYTHON" -c 'import mlflow; print(mlflow.__version__)') on sqlite, ${WORKERS:-2} workers; $REQUESTS requests a shape" >&2
"$PYTHON" bench/logbatch_cost.py "http://127.0.0.1:$mlflow_port" "$REQUESTS" "$mlflow_pid"
