#!/usr/bin/env bash
# bench/job_ui.sh: how MLflow's UI shows a job of N real bridges as bridge
# writes it (docs/multinode.md, "The job's run and the nodes' runs"): the
# job's run with a state line a node, a run a node under it. Starts a real
# MLflow server (sqlite), runs N bridges of one job on this machine (a
# Slurm step's variables, node ids from BRIDGE_NODE_ID, --interval INTERVAL
# and --run-tick TICK, 1s by default so that the lines move and the job's
# series have points; children of DUR seconds, default 20), node 11
# failing (exit 1) and the others ending cleanly, then saves the screenshots
# of bench/jobsize_ui.mjs (the experiment's runs, expanded, the chart view
# grouped by bridge.job, the job's run, node 11's run) into OUT_DIR.
#
#   OUT_DIR=/tmp/job-ui N=16 bench/job_ui.sh
#   INTERVAL=5s TICK=5s DUR=120 bench/job_ui.sh   # a busy machine
#
# Needs: go, node, Debian's chromium, e2e/browser's node_modules
# (cd e2e/browser && npm ci), BRIDGE_TEST_PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
N=${N:-16}
OUT_DIR=${OUT_DIR:-/tmp/job-ui}
. bench/mlflow_server.sh
dir=$(mktemp -d /tmp/bridge-job-ui.XXXXXX)
trap 'stop_mlflow "$dir"; rm -rf "$dir"' EXIT
[[ -d e2e/browser/node_modules/playwright-core ]] || { echo "run: cd e2e/browser && npm ci" >&2; exit 1; }
mkdir -p "$OUT_DIR"
go build -o "$dir/bridge" ./cmd/bridge
start_mlflow "$dir" "$PY"
url=http://127.0.0.1:$mlflow_port
job=$(date +%s)
(
	cd "$dir"
	export MLFLOW_TRACKING_URI=$url MLFLOW_EXPERIMENT_NAME=job-ui
	for ((i = 0; i < N; i++)); do
		code=0
		((i == 11)) && code=1
		mkdir -p "n$i"
		# A Slurm step's variables, as srun sets them: the key, the node
		# count and each node's rank, so that node 0's lead evaluates.
		(cd "n$i" && SLURM_CLUSTER_NAME=ui SLURM_JOB_ID=$job SLURM_STEP_ID=0 SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 \
			SLURM_JOB_NUM_NODES=$N SLURM_STEP_NUM_NODES=$N SLURM_JOB_START_TIME=$job BRIDGE_NODE_ID=node-$i TMPDIR=$PWD \
			../bridge --interval "${INTERVAL:-1s}" --run-tick "${TICK:-1s}" --run-name train.py \
			--start-timeout 2m -- sh -c "sleep ${DUR:-20}; exit $code" >../node$i.log 2>&1 || true) &
	done
	wait
)
exp=$(curl -fsS "$url/api/2.0/mlflow/experiments/get-by-name?experiment_name=job-ui" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["experiment"]["experiment_id"])')
curl -fsS -H 'Content-Type: application/json' -d "{\"experiment_ids\":[\"$exp\"],\"max_results\":1000}" "$url/api/2.0/mlflow/runs/search" |
	"$PY" -c '
import json, sys
runs = json.load(sys.stdin)["runs"]
tags = lambda r: {t["key"]: t["value"] for t in r["data"].get("tags", [])}
job = [r for r in runs if tags(r).get("bridge.job_key")]
assert len(job) == 1, "want one job run, got %d" % len(job)
parent = job[0]["info"]["run_id"]
children = {tags(r)["bridge.node_id"]: r["info"]["run_id"] for r in runs if tags(r).get("mlflow.parentRunId") == parent}
print(json.dumps({"experiment": sys.argv[1], "parent": parent, "children": children}))
' "$exp" >"$dir/job.json"
cat "$dir/job.json"
curl -fsS "$url/api/2.0/mlflow/runs/get?run_id=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["parent"])' "$dir/job.json")" |
	"$PY" -c 'import json,sys; b=sys.stdin.read(); r=json.loads(b)["run"]; print("job run:", r["info"]["status"], len(b), "bytes of runs/get;", {t["key"]: t["value"] for t in r["data"]["tags"]}.get("bridge.job.first_failure"))'
node bench/jobsize_ui.mjs --url "$url" --job "$dir/job.json" --out "$OUT_DIR"
