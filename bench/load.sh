#!/usr/bin/env bash
# bench/load.sh: many bridges, one tracker, beside MLflow's own system
# metrics. For each N, two sides run at once, each against its own MLflow
# server of the same kind (uvicorn, WORKERS workers, BACKEND postgres or
# sqlite), started here on 127.0.0.1 and stopped at the end:
#   bridge:  N bridges (--interval INTERVAL, --scopes SCOPES), each its own run;
#   monitor: N processes running MLflow's own SystemMetricsMonitor on a run
#            (bench/mlflow_monitor_run.py, sampling every INTERVAL, as
#            mlflow.start_run(log_system_metrics=True) starts it).
# Both are measured over the same window (every bridge has its run .. 3 s
# before the jobs end), so a busy machine weighs on both alike. Each side's
# line: samples in the window, HTTP requests (/api/, the server's access log)
# and metric rows (the server's `metrics` table) a sample in the window, the
# server's CPU a sample (its process groups: mlflow, and postgres with
# BACKEND=postgres), the clients' CPU a sample, the delay from sample to
# visible (p50/p99/max, from a poller), samples lost (bridge: spool vs the
# runs' history) and clients whose log has an error. "x monitor" is the
# bridge side's server CPU a sample over the monitor side's. Not part of the
# default test run.
#
#   bench/load.sh                          # N = 10 50 100, 120 s each
#   NS=10 DURATION=60 BACKEND=sqlite bench/load.sh
#   NS=100 MONITOR=0 bench/load.sh         # bridges alone (the delay at N = 100)
#   POLL=0 bench/load.sh                   # no pollers: the server's cost of the clients alone
#   BRIDGE_BIN=/tmp/bridge WORKERS=2 SCOPES=container,node bench/load.sh   # default: all scopes
#   MLFLOW_SQLALCHEMYSTORE_POOL_SIZE=20 MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW=21 bench/load.sh
#   KEEP=/tmp/keep bench/load.sh           # keep the spools, logs and delays
#   PYSPY=/tmp/prof/bin/py-spy KEEP=/tmp/keep bench/load.sh   # and profiles
#
# With PYSPY (py-spy, from PyPI into a venv of your own), each side's server
# (every worker) is profiled over the window into KEEP/nN/profile-SIDE.txt,
# py-spy's raw format (collapsed stacks and counts; bench/pyspy_split.py
# sums them by part). py-spy's sampling costs the servers CPU: take the cost
# figures from a run without it.
#
# The pollers (one a side, POLL=1, the default) read the newest timestamp of
# up to POLL_RUNS runs every 0.5 s with one /ajax-api runs/search: the
# server's CPU includes it (not its requests, which are not under /api/).
#
# Past a few dozen bridges, size MLflow's pool (MLFLOW_SQLALCHEMYSTORE_*):
# docs/mlflow.md, "Sizing an MLflow server for many bridges".
#
# Needs root (apt-get install postgresql if missing; each cluster runs as the
# postgres user), go (unless BRIDGE_BIN), PYTHON (default .venv/bin/python)
# with mlflow; psutil (MLflow's monitor) and psycopg2-binary are installed
# into $BENCH_PYDEPS (default ~/.cache/bridge-bench/pydeps) if missing, never
# into the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
NS=${NS:-10 50 100}
DURATION=${DURATION:-120}
INTERVAL=${INTERVAL:-1}
WORKERS=${WORKERS:-2}
SCOPES=${SCOPES:-all}
BACKEND=${BACKEND:-postgres}
MONITOR=${MONITOR:-1}
POLL=${POLL:-1}
POLL_RUNS=${POLL_RUNS:-10}
PYTHON=${PYTHON:-.venv/bin/python}
PYDEPS=${BENCH_PYDEPS:-$HOME/.cache/bridge-bench/pydeps}
case $BACKEND in postgres | sqlite) ;; *) echo "BACKEND must be postgres or sqlite, not \"$BACKEND\"" >&2; exit 2 ;; esac
[[ $PYTHON == /* ]] || PYTHON=$PWD/$PYTHON
helper=$PWD/bench/load_helper.py
tmp=$(mktemp -d /tmp/bridge-load.XXXXXX)
chmod 755 "$tmp"
pids=()
dirs=()
cleanup() {
	for p in ${pids[@]+"${pids[@]}"}; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 20); do
		alive=0
		for p in ${pids[@]+"${pids[@]}"}; do kill -0 -- "-$p" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.5
	done
	for p in ${pids[@]+"${pids[@]}"}; do kill -KILL -- "-$p" 2>/dev/null || true; done
	for d in ${dirs[@]+"${dirs[@]}"}; do stop_mlflow_pg "$d"; done
	rm -rf "$tmp"
}
trap cleanup EXIT
. bench/mlflow_server.sh

need=()
PYTHONPATH=$PYDEPS "$PYTHON" -c 'import psutil' 2>/dev/null || need+=(psutil)
[[ $BACKEND == postgres ]] && { PYTHONPATH=$PYDEPS "$PYTHON" -c 'import psycopg2' 2>/dev/null || need+=(psycopg2-binary); }
if ((${#need[@]})); then
	echo "== installing ${need[*]} into $PYDEPS" >&2
	"$PYTHON" -m pip install -q --target "$PYDEPS" "${need[@]}" >&2
fi
export PYTHONPATH=$PYDEPS${PYTHONPATH:+:$PYTHONPATH}

# server SIDE: an MLflow server with its own store in $tmp/SIDE; sets
# url[SIDE], db[SIDE] (the store's URI), groups[SIDE] (process groups whose
# CPU is the server's) and log[SIDE].
declare -A url db groups log
server() {
	local side=$1 dir=$tmp/$1
	mkdir -p "$dir"
	dirs+=("$dir")
	if ! MLFLOW_BACKEND=$BACKEND MLFLOW_WORKERS=$WORKERS start_mlflow "$dir" "$PYTHON"; then
		[[ -n ${mlflow_pid:-} ]] && pids+=("$mlflow_pid")
		echo "the $side side's MLflow server did not start" >&2
		exit 1
	fi
	pids+=("$mlflow_pid")
	url[$side]=http://127.0.0.1:$mlflow_port db[$side]=$mlflow_db log[$side]=$dir/mlflow.log
	groups[$side]="$mlflow_pid $mlflow_pg_pgid"
}
sides=(bridge)
((MONITOR)) && sides+=(monitor)
for s in "${sides[@]}"; do server "$s"; done

scopes=()
[[ $SCOPES == all ]] || scopes=(--scopes "$SCOPES")
bin=${BRIDGE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/bridge
	go build -o "$bin" ./cmd/bridge
fi
hz=$(getconf CLK_TCK)
# The clients' requests: everything under /api/ (the pollers use /ajax-api/).
reqs() { grep -c '"[A-Z]* /api/2.0/mlflow/' "${log[$1]}" || true; }
ms() { date +%s%3N; }

echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); MLflow $("$PYTHON" -c 'import mlflow; print(mlflow.__version__)') (uvicorn, $WORKERS workers, pool ${MLFLOW_SQLALCHEMYSTORE_POOL_SIZE:-5} + ${MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW:-10} connections a worker) on $BACKEND, a server a side; bridge $bin --interval ${INTERVAL}s --scopes $SCOPES; MLflow's monitor every ${INTERVAL} s; ${DURATION} s per N, pollers $( ((POLL)) && echo on || echo off)" >&2
printf '| N | side | samples in window | requests/sample | rows/sample | server CPU ms/sample | x monitor | client CPU ms/sample | delay p50 ms | delay p99 ms | delay max ms | lost | clients with errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for n in $NS; do
	d=$tmp/n$n
	mkdir -p "$d"
	# MLflow's monitors first: importing mlflow takes seconds each on a busy
	# machine; each writes its run id once its first metrics are in the run.
	mp=()
	if ((MONITOR)); then
		for i in $(seq "$n"); do
			MLFLOW_DISABLE_TELEMETRY=true setsid "$PYTHON" bench/mlflow_monitor_run.py "${url[monitor]}" "$INTERVAL" \
				--experiment "load-n$n" --run-file "$d/m$i.run" >"$d/m$i.log" 2>&1 &
			pids+=($!)
			mp+=($!)
		done
		for _ in $(seq 600); do
			k=$(cat "$d"/m*.run 2>/dev/null | grep -c . || true)
			((k == n)) && break
			sleep 0.5
		done
	fi
	bp=()
	for i in $(seq "$n"); do
		MLFLOW_TRACKING_URI=${url[bridge]} MLFLOW_EXPERIMENT_NAME=load-n$n \
			setsid "$bin" --interval "${INTERVAL}s" "${scopes[@]}" --trackers mlflow --spool "$d/s$i.jsonl" -- sleep "$DURATION" \
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
	declare -A runs=()
	runs[bridge]=$(for i in $(seq "$(( n < POLL_RUNS ? n : POLL_RUNS ))"); do "$PYTHON" "$helper" runs "$d/s$i.jsonl" 2>/dev/null || true; done | xargs)
	((MONITOR)) && runs[monitor]=$(cat $(for i in $(seq "$(( n < POLL_RUNS ? n : POLL_RUNS ))"); do echo "$d/m$i.run"; done) 2>/dev/null | xargs)
	pollers=()
	if ((POLL)); then
		for s in "${sides[@]}"; do
			[[ -n ${runs[$s]} ]] || continue
			# shellcheck disable=SC2086 # run ids, one word each
			setsid "$PYTHON" "$helper" poll "${url[$s]}" "$d/delay-$s" ${runs[$s]} 2>"$d/poll-$s.log" &
			pids+=($!)
			pollers+=($!)
		done
	fi
	declare -A s0 s1 r0 r1 rows0 rows1
	w0=$(ms)
	for s in "${sides[@]}"; do
		# shellcheck disable=SC2086 # process groups, one word each
		s0[$s]=$("$PYTHON" "$helper" ticks ${groups[$s]})
		r0[$s]=$(reqs "$s")
		rows0[$s]=$("$PYTHON" "$helper" rows "${db[$s]}")
	done
	b0=$("$PYTHON" "$helper" ticks "${bp[@]}")
	m0=$( ((MONITOR)) && "$PYTHON" "$helper" ticks "${mp[@]}" || echo 0)
	left=$(( t0 + DURATION - 3 - $(date +%s) ))
	profilers=()
	if [[ -n ${PYSPY:-} ]] && ((left > 1)); then
		for s in "${sides[@]}"; do
			"$PYSPY" record --subprocesses --nonblocking --rate 100 --duration "$((left - 1))" --format raw \
				--output "$d/profile-$s.txt" --pid "${groups[$s]%% *}" >"$d/pyspy-$s.log" 2>&1 &
			profilers+=($!)
		done
	fi
	((left > 0)) && sleep "$left"
	for p in ${profilers[@]+"${profilers[@]}"}; do wait "$p" || true; done
	w1=$(ms)
	for s in "${sides[@]}"; do
		# shellcheck disable=SC2086
		s1[$s]=$("$PYTHON" "$helper" ticks ${groups[$s]})
		r1[$s]=$(reqs "$s")
		rows1[$s]=$("$PYTHON" "$helper" rows "${db[$s]}")
	done
	b1=$("$PYTHON" "$helper" ticks "${bp[@]}")
	m1=$( ((MONITOR)) && "$PYTHON" "$helper" ticks "${mp[@]}" || echo 0)
	# Let every bridge end (job end, final flush), then stop the monitors
	# and the pollers.
	for p in "${bp[@]}"; do wait "$p" 2>/dev/null || true; done
	sleep 2
	for p in ${mp[@]+"${mp[@]}"} ${pollers[@]+"${pollers[@]}"}; do kill -TERM -- "-$p" 2>/dev/null || true; done
	# Samples taken in the window: bridge's from its spools, the monitors'
	# from their runs (one point of every series a sample).
	declare -A win lost errs
	win[bridge]=$(cat "$d"/s*.jsonl | "$PYTHON" "$helper" window "$w0" "$w1")
	read -r _ _ lost[bridge] _ noruns < <("$PYTHON" "$helper" loss "${url[bridge]}" "$d"/s*.jsonl)
	((noruns > 0)) && lost[bridge]+=" ($noruns bridges without a run)"
	errs[bridge]=$(grep -il 'cannot send\|error' "$d"/b*.log | wc -l || true)
	if ((MONITOR)); then
		win[monitor]=$("$PYTHON" "$helper" steps "${db[monitor]}" "$w0" "$w1" system/cpu_utilization_percentage)
		lost[monitor]=-
		errs[monitor]=$(grep -il 'error\|warning' "$d"/m*.log | wc -l || true)
	fi
	declare -A cpu=([bridge]=$((s1[bridge] - s0[bridge])))
	((MONITOR)) && cpu[monitor]=$((s1[monitor] - s0[monitor]))
	declare -A client=([bridge]=$((b1 - b0)) [monitor]=$((m1 - m0)))
	for s in "${sides[@]}"; do
		read -r p50 p99 pmax _ < <("$PYTHON" "$helper" pct "$d/delay-$s" 2>/dev/null || echo "- - - 0")
		awk -v n="$n" -v side="$s" -v win="${win[$s]}" -v req=$((r1[$s] - r0[$s])) -v rows=$((rows1[$s] - rows0[$s])) \
			-v cpu="${cpu[$s]}" -v mcpu="${cpu[monitor]:-0}" -v mwin="${win[monitor]:-0}" -v client="${client[$s]}" -v hz="$hz" \
			-v p50="$p50" -v p99="$p99" -v pmax="$pmax" -v lost="${lost[$s]}" -v errs="${errs[$s]}" 'BEGIN{
			per = win ? cpu * 1000 / hz / win : 0
			mper = mwin ? mcpu * 1000 / hz / mwin : 0
			printf "| %d | %s | %d | %.2f | %.1f | %.2f | %s | %.2f | %s | %s | %s | %s | %d |\n", n, side, win,
				(win ? req / win : 0), (win ? rows / win : 0), per, (mper ? sprintf("%.2f", per / mper) : "-"),
				(win ? client * 1000 / hz / win : 0), p50, p99, pmax, lost, errs }'
	done
	unset runs s0 s1 r0 r1 rows0 rows1 win lost errs cpu client
	if [[ -n ${KEEP:-} ]]; then cp -r "$d" "$KEEP/" 2>/dev/null || true; fi
done
if [[ -n ${KEEP:-} ]]; then for s in "${sides[@]}"; do cp "${log[$s]}" "$KEEP/server-$s.log" 2>/dev/null || true; done; fi
