#!/usr/bin/env bash
# bench/job_cost.sh: what a multi-node job costs an MLflow server as bridge
# builds it (docs/multinode.md, "Server capacity"), in two parts:
#
#  1. counted: N real bridges of one job (a Slurm step's variables, as
#     srun sets them, so that node 0's lead evaluates; node ids from
#     BRIDGE_NODE_ID; the default 10 s interval and 1 m run tick; node-1 on
#     the stand-in NVML of harness/testbin when a C compiler is there) run a
#     child of DUR seconds against a real MLflow server (sqlite, one
#     worker) through bench/countproxy.py, which writes down every request;
#     bench/job_cost.py classifies them (start, each minute while the job
#     runs, the end) and the server's own CPU over the minutes counted is
#     read from /proc.
#  2. measured: bench/job_cost.py fills a job of each size in NS (the job
#     run with a line a node as the real job wrote them, a run a node)
#     on a fresh server (sqlite, then PostgreSQL unless BACKENDS says
#     otherwise) and times each kind of request a node makes at that size
#     from the server's CPU (its process groups, the database's included).
#
# Then it prints the table: requests and server CPU a node a minute while
# the job runs and at its end, at N = 16, 128, 1,024, for CPU nodes and
# 8-GPU nodes (whose sample is about 360 points, docs/metrics.md's
# catalogue), counted requests times measured costs.
#
#   bench/job_cost.sh                          # N=16, DUR=330; sqlite and postgres
#   N=128 DUR=360 bench/job_cost.sh
#   NS=16,128 BACKENDS=sqlite bench/job_cost.sh
#   BACKENDS=none bench/job_cost.sh            # count only
#   OUT=/tmp/job_cost bench/job_cost.sh        # keep requests and figures
#
# Needs: go, BRIDGE_TEST_PYTHON (default .venv/bin/python) with mlflow (and
# psycopg2 for postgres), cc for the stand-in NVML (optional).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
N=${N:-16}
DUR=${DUR:-330}
NS=${NS:-16,128,1024}
BACKENDS=${BACKENDS:-sqlite,postgres}
[[ $BACKENDS == none ]] && BACKENDS=
. bench/mlflow_server.sh
dir=$(mktemp -d /tmp/bridge-job-cost.XXXXXX)
OUT=${OUT:-$dir/out}
mkdir -p "$OUT"
proxy= ticker=
cleanup() {
	for p in $proxy $ticker; do kill "$p" 2>/dev/null || true; done
	stop_mlflow "$dir/count"
	for b in ${BACKENDS//,/ }; do stop_mlflow "$dir/$b"; done
	rm -rf "$dir"
}
trap cleanup EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }

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

# 1. Counted. The server's pool sized as docs/mlflow.md says (its default
# 5 + 10 connections time out when a hundred bridges start at once).
mkdir "$dir/count"
MLFLOW_SQLALCHEMYSTORE_POOL_SIZE=${MLFLOW_SQLALCHEMYSTORE_POOL_SIZE:-20} MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW=${MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW:-21} \
	MLFLOW_WORKERS=1 start_mlflow "$dir/count" "$PY"
pport=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$PY" bench/countproxy.py --listen "$pport" --upstream "http://127.0.0.1:$mlflow_port" --out "$OUT/requests.jsonl" &
proxy=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$pport/health" >/dev/null 2>&1 && break; sleep 0.1; done
echo "== $(date -u +%FT%TZ) counting: $N bridges, child of ${DUR}s, MLflow $("$PY" -c 'import mlflow; print(mlflow.__version__)') (sqlite, 1 worker, pool ${MLFLOW_SQLALCHEMYSTORE_POOL_SIZE:-20} + ${MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW:-21}); $(nproc) CPUs, load $(load)"
job=$(date +%s)
# The server's CPU (its process group, /proc) every 5 s, for the minutes counted.
"$PY" -c '
import sys, time
sys.path.insert(0, "bench")
from load_helper import ticks
while True:
    print(time.time(), ticks([int(sys.argv[1])]), flush=True)
    time.sleep(5)
' "$mlflow_pid" >"$OUT/ticks.txt" &
ticker=$!
t0=$(date +%s.%N)
(
	cd "$dir"
	export MLFLOW_TRACKING_URI=http://127.0.0.1:$pport MLFLOW_EXPERIMENT_NAME=job-cost
	for ((i = 0; i < N; i++)); do
		mkdir -p "n$i"
		env=()
		((i == 1)) && env=("${gpuenv[@]}")
		(cd "n$i" && SLURM_CLUSTER_NAME=bench SLURM_JOB_ID=$job SLURM_STEP_ID=0 SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 \
			SLURM_JOB_NUM_NODES=$N SLURM_STEP_NUM_NODES=$N SLURM_JOB_START_TIME=$job BRIDGE_NODE_ID=node-$i TMPDIR=$PWD \
			"${env[@]}" ../bridge --run-name train.py --start-timeout 2m \
			-- sh -c "sleep $DUR" >../node$i.log 2>&1 || echo "node-$i: exit $?" >&2) &
	done
	wait
)
t1=$(date +%s.%N)
sleep 6
kill "$proxy" "$ticker"
proxy= ticker=
stop_mlflow "$dir/count"
echo "== bridges ended $(date -u +%FT%TZ); load $(load)"
"$PY" bench/job_cost.py count --requests "$OUT/requests.jsonl" --nodes "$N" --t0 "$t0" --t1 "$t1" --dur "$DUR" \
	--ticks "$OUT/ticks.txt" --out "$OUT/counted.json"

# 2. Measured, on a fresh server of each backend.
for b in ${BACKENDS//,/ }; do
	mkdir "$dir/$b"
	MLFLOW_BACKEND=$b MLFLOW_WORKERS=1 start_mlflow "$dir/$b" "$PY"
	echo "== $(date -u +%FT%TZ) measuring on $b; load $(load)"
	"$PY" bench/job_cost.py measure --url "http://127.0.0.1:$mlflow_port" --pgids "$mlflow_pid${mlflow_pg_pgid:+,$mlflow_pg_pgid}" \
		--counted "$OUT/counted.json" --metrics-doc docs/metrics.md --ns "$NS" --backend "$b" --out "$OUT/costs-$b.jsonl"
	stop_mlflow "$dir/$b"
done
[[ -n $BACKENDS ]] && "$PY" bench/job_cost.py table --counted "$OUT/counted.json" $(for b in ${BACKENDS//,/ }; do echo "--costs $OUT/costs-$b.jsonl"; done)
echo "== done $(date -u +%FT%TZ); load $(load)"
