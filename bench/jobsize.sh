#!/usr/bin/env bash
# bench/jobsize.sh: what a multi-node job's run costs MLflow as the job
# grows, for three designs (issue 39; docs/multinode.md, "A job at scale"):
# (c) today's one run, (a) a parent run with a child run a node, (b) one
# run with per-node keys bounded. Starts a real MLflow server (sqlite, or
# PostgreSQL with BACKEND=postgres; one worker, so that its CPU a request
# is its own), runs a real 2-node job of bridges on it (one on the stand-in
# NVML of harness/testbin when a C compiler is there) to read the tags and
# series a node records, then bench/jobsize.py fills each design's runs up
# to N nodes and measures the requests.
#
#   bench/jobsize.sh                                  # sqlite, N = 8 ... 1024
#   BACKEND=postgres bench/jobsize.sh
#   NS=8,16 SHAPES=cpu DESIGNS=a bench/jobsize.sh     # a quick look
#   OUT=/tmp/jobsize.jsonl bench/jobsize.sh           # keep every figure
#
# Needs: go, cc (for the GPU node's tags; without it the GPU shape's tags
# are the CPU node's plus the catalogue's), BRIDGE_TEST_PYTHON (default
# .venv/bin/python) with mlflow (and psycopg2 for postgres).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
BACKEND=${BACKEND:-sqlite}
NS=${NS:-8,16,64,128,300,1024}
SHAPES=${SHAPES:-cpu,gpu8}
DESIGNS=${DESIGNS:-c,a,b}
K=${K:-8}
OUT=${OUT:-/dev/null}
. bench/mlflow_server.sh
dir=$(mktemp -d /tmp/bridge-jobsize.XXXXXX)
trap 'stop_mlflow "$dir"; rm -rf "$dir"' EXIT

go build -o "$dir/bridge" ./cmd/bridge
gpuenv=()
if command -v cc >/dev/null; then
	# The stand-in libnvidia-ml.so.1 (testbin.FakeNVML's recipe): one fake
	# Hopper GPU, every other nvml* symbol answering NOT_SUPPORTED.
	mkdir "$dir/nvml"
	nm -D --undefined-only "$dir/bridge" | awk '$2 ~ /^nvml/ {print "__attribute__((weak)) int " $2 "(void) { return 3; }"}' >"$dir/nvml/weak.c"
	cc -shared -fPIC -O2 -o "$dir/nvml/libnvidia-ml.so.1" harness/testbin/testdata/fakenvml.c "$dir/nvml/weak.c"
	gpuenv=(env "LD_LIBRARY_PATH=$dir/nvml" "FAKE_NVML_REPORT=$dir/nvml/report")
fi

MLFLOW_BACKEND=$BACKEND MLFLOW_WORKERS=1 start_mlflow "$dir" "$PY"
url=http://127.0.0.1:$mlflow_port
echo "== $(date -u +%FT%TZ) MLflow $("$PY" -c 'import mlflow; print(mlflow.__version__)') on $BACKEND, 1 worker; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

# What a node records: a real job of two nodes, to its end.
(
	cd "$dir"
	export MLFLOW_TRACKING_URI=$url MLFLOW_EXPERIMENT_NAME=jobsize-capture
	./bridge --job-key capture:1 --node-id node-0 --nodes 2 --interval 1s -- sh -c 'sleep 4' >capture0.log 2>&1 &
	"${gpuenv[@]}" ./bridge --job-key capture:1 --node-id node-1 --nodes 2 --interval 1s -- sh -c 'sleep 4' >capture1.log 2>&1 &
	wait
)
exp=$(curl -fsS "$url/api/2.0/mlflow/experiments/get-by-name?experiment_name=jobsize-capture" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["experiment"]["experiment_id"])')
curl -fsS -H 'Content-Type: application/json' -d "{\"experiment_ids\":[\"$exp\"],\"filter\":\"tags.\`bridge.elected\` = 'true'\"}" \
	"$url/api/2.0/mlflow/runs/search" >"$dir/captured.json"

# shellcheck disable=SC2086 # process groups, one word each
"$PY" bench/jobsize.py --url "$url" --pgids "$mlflow_pid${mlflow_pg_pgid:+,$mlflow_pg_pgid}" \
	--captured "$dir/captured.json" --golden cmd/bridge/testdata/golden/wire-mlflow.txt --metrics-doc docs/metrics.md \
	--ns "$NS" --shapes "$SHAPES" --designs "$DESIGNS" --k "$K" --out "$OUT"
echo "== done $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)"
