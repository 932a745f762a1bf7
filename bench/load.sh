#!/usr/bin/env bash
# bench/load.sh: many bridges, one tracker (issue 12). N bridges at a 1 s
# interval against one real MLflow server (uvicorn, WORKERS workers) backed by
# a private PostgreSQL cluster, both started here on 127.0.0.1 and stopped at
# the end. For each N: samples lost (spool vs MLflow's metric history),
# HTTP requests per sample (the server's access log), server CPU per sample
# (mlflow's process group + postgres's), bridge CPU per sample, and the delay
# from sample to visible in MLflow (p50/p99, from a poller). Not part of the
# default test run.
#
#   bench/load.sh                          # N = 10 50 100, 120 s each
#   NS="10 50" DURATION=60 bench/load.sh
#   BRIDGE_BIN=/tmp/bridge WORKERS=2 SCOPES=container,node bench/load.sh
#   MLFLOW_SQLALCHEMYSTORE_POOL_SIZE=20 MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW=21 bench/load.sh
#
# With MLflow's default pool (5 + 10 a worker) the server deadlocks once 15
# log-batches are inside one worker (each holds a connection and waits for a
# second, until the 30 s pool timeout): more than 40 connections a worker
# (its thread count) is the fix; see docs/performance.md.
#
# Needs root (apt-get install postgresql if missing; the cluster runs as the
# postgres user), go (unless BRIDGE_BIN), PYTHON (default .venv/bin/python)
# with mlflow. psycopg2-binary is installed into $BENCH_PGDEPS (default
# ~/.cache/bridge-bench/pgdeps), never into the venv, and is on PYTHONPATH
# for the server only.
set -euo pipefail
cd "$(dirname "$0")/.."
NS=${NS:-10 50 100}
DURATION=${DURATION:-120}
WORKERS=${WORKERS:-2}
SCOPES=${SCOPES:-container,node}
POLL_RUNS=${POLL_RUNS:-10}
PYTHON=${PYTHON:-.venv/bin/python}
PGDEPS=${BENCH_PGDEPS:-$HOME/.cache/bridge-bench/pgdeps}
helper=$PWD/bench/load_helper.py
tmp=$(mktemp -d /tmp/bridge-load.XXXXXX)
chmod 755 "$tmp"
pids=()
pgbin=
cleanup() {
	for p in ${pids[@]+"${pids[@]}"}; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 20); do
		alive=0
		for p in ${pids[@]+"${pids[@]}"}; do kill -0 -- "-$p" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.5
	done
	for p in ${pids[@]+"${pids[@]}"}; do kill -KILL -- "-$p" 2>/dev/null || true; done
	if [[ -n $pgbin && -f $tmp/pg/postmaster.pid ]]; then
		runuser -u postgres -- "$pgbin/pg_ctl" -D "$tmp/pg" -m fast -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
freeport() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# PostgreSQL: the Debian package, a private cluster in $tmp.
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
	echo "== installing postgresql (Debian package)" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
pgbin=$(find /usr/lib/postgresql -maxdepth 2 -name bin | sort -V | tail -1)
pgport=$(freeport)
mkdir "$tmp/pg" && chown postgres "$tmp/pg"
runuser -u postgres -- "$pgbin/initdb" -D "$tmp/pg" -A trust -U postgres >"$tmp/initdb.log" 2>&1
runuser -u postgres -- "$pgbin/pg_ctl" -D "$tmp/pg" -l "$tmp/pg/server.log" -w \
	-o "-p $pgport -k $tmp/pg -c listen_addresses=127.0.0.1 -c max_connections=400" start >/dev/null
runuser -u postgres -- "$pgbin/createdb" -h 127.0.0.1 -p "$pgport" mlflow
pgpid=$(head -1 "$tmp/pg/postmaster.pid")
pgpgid=$(ps -o pgid= -p "$pgpid" | tr -d ' ')

if ! PYTHONPATH=$PGDEPS "$PYTHON" -c 'import psycopg2' 2>/dev/null; then
	echo "== installing psycopg2-binary into $PGDEPS" >&2
	"$PYTHON" -m pip install -q --target "$PGDEPS" psycopg2-binary >&2
fi

# MLflow server, in its own process group; uvicorn's access log counts requests.
port=$(freeport)
url=http://127.0.0.1:$port
PYTHONPATH=$PGDEPS${PYTHONPATH:+:$PYTHONPATH} MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_DISABLE_TELEMETRY=true \
	setsid "$(dirname "$PYTHON")/mlflow" server --backend-store-uri "postgresql+psycopg2://postgres@127.0.0.1:$pgport/mlflow" \
	--default-artifact-root "$tmp/artifacts" --host 127.0.0.1 --port "$port" --workers "$WORKERS" \
	>"$tmp/server.log" 2>&1 &
pids+=($!)
server=$!
for _ in $(seq 240); do
	curl -fs "$url/health" >/dev/null 2>&1 && break
	kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
	sleep 0.5
done
curl -fs "$url/health" >/dev/null || { echo "server did not answer /health" >&2; tail "$tmp/server.log" >&2; exit 1; }

bin=${BRIDGE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/bridge
	go build -o "$bin" ./cmd/bridge
fi
hz=$(getconf CLK_TCK)
# Bridge's own requests: everything under /api/ (the poller uses /ajax-api/).
reqs() { grep -c '"[A-Z]* /api/2.0/mlflow/' "$tmp/server.log" || true; }

echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); MLflow $("$PYTHON" -c 'import mlflow; print(mlflow.__version__)') (uvicorn, $WORKERS workers, pool ${MLFLOW_SQLALCHEMYSTORE_POOL_SIZE:-5} + ${MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW:-10} connections a worker) on PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}'); bridge $bin --interval 1s --scopes $SCOPES; ${DURATION} s per N" >&2
printf '| N | duration s | samples | in MLflow | lost | requests/sample | server CPU ms/sample | bridge CPU ms/sample | delay p50 ms | delay p99 ms | delay max ms | bridge errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for n in $NS; do
	d=$tmp/n$n
	mkdir -p "$d"
	r0=$(reqs)
	bp=()
	for i in $(seq "$n"); do
		MLFLOW_TRACKING_URI=$url MLFLOW_EXPERIMENT_NAME=load-n$n \
			setsid "$bin" --interval 1s --scopes "$SCOPES" --trackers mlflow --spool "$d/s$i.jsonl" -- sleep "$DURATION" \
			>"$d/b$i.log" 2>&1 &
		pids+=($!)
		bp+=($!)
	done
	# Window: from when every bridge has its run to 3 s before the jobs end.
	t0=$(date +%s)
	while (($(date +%s) < t0 + DURATION / 3)); do
		k=$("$PYTHON" "$helper" runs "$d"/s*.jsonl 2>/dev/null | grep -c . || true)
		((k == n)) && break
		sleep 1
	done
	runs=()
	for i in $(seq "$(( n < POLL_RUNS ? n : POLL_RUNS ))"); do
		r=$("$PYTHON" "$helper" runs "$d/s$i.jsonl" 2>/dev/null || true)
		[[ -n $r ]] && runs+=("$r")
	done
	if ((${#runs[@]})); then
		setsid "$PYTHON" "$helper" poll "$url" "$d/delay" "${runs[@]}" 2>"$d/poll.log" &
		pids+=($!)
		poller=$!
	fi
	w0=$(date +%s.%N)
	s0=$("$PYTHON" "$helper" ticks "$server" "$pgpgid")
	b0=$("$PYTHON" "$helper" ticks "${bp[@]}")
	left=$(( t0 + DURATION - 3 - $(date +%s) ))
	((left > 0)) && sleep "$left"
	s1=$("$PYTHON" "$helper" ticks "$server" "$pgpgid")
	b1=$("$PYTHON" "$helper" ticks "${bp[@]}")
	w1=$(date +%s.%N)
	# Samples taken in the window, from the spools.
	win=$(cat "$d"/s*.jsonl | "$PYTHON" -c '
import json, sys
lo, hi = float(sys.argv[1]) * 1000, float(sys.argv[2]) * 1000
n = 0
for line in sys.stdin:
    try: r = json.loads(line)
    except ValueError: continue
    if r.get("type") == "sample" and lo <= r.get("ts", 0) < hi: n += 1
print(n)' "$w0" "$w1")
	# Let every bridge end (job end, final flush), then stop the poller.
	for p in "${bp[@]}"; do wait "$p" 2>/dev/null || true; done
	sleep 2
	[[ -n ${poller:-} ]] && { kill -TERM -- "-$poller" 2>/dev/null || true; }
	poller=
	r1=$(reqs)
	read -r total got lost nruns noruns < <("$PYTHON" "$helper" loss "$url" "$d"/s*.jsonl)
	read -r p50 p99 pmax _ < <("$PYTHON" "$helper" pct "$d/delay" 2>/dev/null || echo "- - - 0")
	errs=$(grep -il 'cannot send\|error' "$d"/b*.log | wc -l || true)
	awk -v n="$n" -v dur="$DURATION" -v total="$total" -v got="$got" -v lost="$lost" -v req=$((r1 - r0)) \
		-v s=$((s1 - s0)) -v b=$((b1 - b0)) -v hz="$hz" -v win="$win" -v p50="$p50" -v p99="$p99" -v pmax="$pmax" -v errs="$errs" -v noruns="$noruns" 'BEGIN{
		printf "| %d | %d | %d | %d | %d%s | %.2f | %.2f | %.2f | %s | %s | %s | %d |\n", n, dur, total, got, lost,
			(noruns > 0 ? sprintf(" (%d bridges without a run)", noruns) : ""),
			(total ? req/total : 0), (win ? s*1000/hz/win : 0), (win ? b*1000/hz/win : 0), p50, p99, pmax, errs }'
	if [[ -n ${KEEP:-} ]]; then cp -r "$d" "$KEEP/" 2>/dev/null || true; fi
done
if [[ -n ${KEEP:-} ]]; then cp "$tmp/server.log" "$KEEP/" 2>/dev/null || true; fi
