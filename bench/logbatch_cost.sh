#!/usr/bin/env bash
# bench/logbatch_cost.sh: what one runs/log-batch request costs an MLflow
# server (BACKEND sqlite or postgres, WORKERS workers, 127.0.0.1, started
# here), per request, per distinct key and per point, and what runs/get
# costs (bench/logbatch_cost.py). Requests go one after another, so the
# figure is the server's own work (with postgres, the database's too), not
# contention.
#
#   bench/logbatch_cost.sh                 # sqlite, 2 workers, 300 requests a shape
#   BACKEND=postgres REQUESTS=500 WORKERS=1 bench/logbatch_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-300}
WORKERS=${WORKERS:-2}
BACKEND=${BACKEND:-sqlite}
PYTHON=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d /tmp/bridge-logbatch.XXXXXX)
. bench/mlflow_server.sh
cleanup() {
	stop_mlflow "$tmp"
	rm -rf "$tmp"
}
trap cleanup EXIT
MLFLOW_BACKEND=$BACKEND MLFLOW_WORKERS=$WORKERS start_mlflow "$tmp" "$PYTHON"
echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); MLflow $("$PYTHON" -c 'import mlflow; print(mlflow.__version__)') on $BACKEND, $WORKERS workers; $REQUESTS requests a shape" >&2
# shellcheck disable=SC2086 # process groups, one word each
"$PYTHON" bench/logbatch_cost.py "http://127.0.0.1:$mlflow_port" "$REQUESTS" "$mlflow_pid" $mlflow_pg_pgid
