#!/usr/bin/env bash
# bench/jobsize_ui.sh: how MLflow's UI shows a job of N nodes in the nested
# design (a parent run, a child run a node; docs/multinode.md "A job at
# scale"). Starts a real MLflow server (sqlite), records a job of N nodes
# with bench/jobsize_ui.py (the tags and series a real 2-node job of
# bridges wrote, read as bench/jobsize.sh reads them), and saves
# screenshots of the experiment page, the chart view, the job's run and a
# node's run into OUT_DIR.
#
#   OUT_DIR=/tmp/jobsize-ui N=16 bench/jobsize_ui.sh
#
# Needs: go, node, Debian's chromium, e2e/browser's node_modules
# (cd e2e/browser && npm ci), BRIDGE_TEST_PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
N=${N:-16}
OUT_DIR=${OUT_DIR:-/tmp/jobsize-ui}
. bench/mlflow_server.sh
dir=$(mktemp -d /tmp/bridge-jobsize-ui.XXXXXX)
trap 'stop_mlflow "$dir"; rm -rf "$dir"' EXIT
[[ -d e2e/browser/node_modules/playwright-core ]] || { echo "run: cd e2e/browser && npm ci" >&2; exit 1; }
mkdir -p "$OUT_DIR"
go build -o "$dir/bridge" ./cmd/bridge
start_mlflow "$dir" "$PY"
url=http://127.0.0.1:$mlflow_port
(
	cd "$dir"
	export MLFLOW_TRACKING_URI=$url MLFLOW_EXPERIMENT_NAME=jobsize-capture
	for i in 0 1; do
		./bridge --job-key capture:1 --node-id node-$i --nodes 2 --interval 1s -- sh -c 'sleep 3' >capture$i.log 2>&1 &
	done
	wait
)
exp=$(curl -fsS "$url/api/2.0/mlflow/experiments/get-by-name?experiment_name=jobsize-capture" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["experiment"]["experiment_id"])')
curl -fsS -H 'Content-Type: application/json' -d "{\"experiment_ids\":[\"$exp\"],\"filter\":\"tags.\`bridge.elected\` = 'true'\"}" \
	"$url/api/2.0/mlflow/runs/search" >"$dir/captured.json"
"$PY" bench/jobsize_ui.py "$url" "$dir/captured.json" cmd/bridge/testdata/golden/wire-mlflow.txt docs/metrics.md "$N" >"$dir/job.json"
cat "$dir/job.json"
node bench/jobsize_ui.mjs --url "$url" --job "$dir/job.json" --out "$OUT_DIR"
