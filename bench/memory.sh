#!/usr/bin/env bash
# bench/memory.sh: what bridge adds to the job's memory cgroup, in the
# figures the kubelet and the OOM killer go by. Each run makes two fresh
# memory cgroups: one for bridge alone, one for its child (`sleep`, which
# moves itself there before it execs), starts bridge in the first, lets it
# sample for SETTLE seconds (at the default 10 s interval unless ARGS says
# otherwise), then reads the first:
#   - the cgroup's working set as kubelet computes it: usage minus inactive
#     file pages (v1: memory.usage_in_bytes - memory.stat total_inactive_file;
#     v2: memory.current - inactive_file);
#   - the cgroup's anonymous memory (v1 total_rss, v2 anon) and its usage;
#   - bridge's RssAnon and RssFile (/proc/<pid>/status), for reference: VmRSS
#     is not what the kubelet counts.
# The binary's page cache is dropped first (COLD=1, the default), so that
# its pages are read and charged in bridge's cgroup, as on a node that did
# not just write the file; COLD=0 keeps them (charged to whoever read them).
# TRACKER=mlflow gives bridge one sink, a real MLflow server (sqlite,
# 127.0.0.1, started here, outside both cgroups; bench/mlflow_server.sh).
#
#   BRIDGE_BIN=/tmp/bridge bench/memory.sh
#   RUNS=3 SETTLE=60 ARGS="--interval 1s" TRACKER=mlflow bench/memory.sh
#
# Needs root and a writable cgroup memory controller (v1, or v2 with memory
# in the parent's cgroup.subtree_control); TRACKER=mlflow needs PYTHON
# (default .venv/bin/python) with mlflow.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-2}
SETTLE=${SETTLE:-25}
TRACKER=${TRACKER:-none}
PYTHON=${PYTHON:-.venv/bin/python}
case $TRACKER in none | mlflow) ;; *) echo "TRACKER must be none or mlflow, not \"$TRACKER\"" >&2; exit 2 ;; esac
read -r -a args <<<"${ARGS:-}"
tmp=$(mktemp -d /tmp/bridge-memory.XXXXXX)
bin=${BRIDGE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/bridge
	go build -o "$bin" ./cmd/bridge
fi
if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then
	v=2 parent=/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
else
	v=1 parent=/sys/fs/cgroup/memory$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
fi
cg= child= bpid=
. bench/mlflow_server.sh
rmcg() {
	local d
	for d in "$@"; do
		[[ -n $d ]] || continue
		for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$d" 2>/dev/null && break; sleep 0.5; done
	done
}
cleanup() {
	[[ -n $bpid ]] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null
	rmcg "$cg" "$child"
	stop_mlflow "$tmp"
	rm -rf "$tmp"
}
trap cleanup EXIT
if [[ $TRACKER == mlflow ]]; then
	start_mlflow "$tmp" "$PYTHON" || exit 1
	export MLFLOW_TRACKING_URI=http://127.0.0.1:$mlflow_port MLFLOW_EXPERIMENT_NAME=bench-memory
fi
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$bpid/status"; }
stat_key() { awk -v k="$1" '$1 == k {print $2}' "$cg/memory.stat"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r); $bin, trackers $TRACKER, cgroup v$v under $parent, $SETTLE s of sampling${ARGS:+, $ARGS}, COLD=${COLD:-1}" >&2
printf '| run | cgroup working set MiB | cgroup anon MiB | cgroup usage MiB | bridge RssAnon MiB | bridge RssFile MiB |\n|---|---|---|---|---|---|\n'
for ((run = 1; run <= RUNS; run++)); do
	if [[ ${COLD:-1} == 1 ]]; then
		sync "$bin"
		python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$bin"
	fi
	cg=$parent/bridge-memory-$$-$run child=$parent/bridge-memory-$$-$run-child
	mkdir "$cg" "$child"
	[[ -e $cg/memory.stat ]] || { echo "no memory controller in $cg" >&2; exit 1; }
	mkdir -p "$tmp/$run"
	# The shell joins bridge's cgroup, then becomes bridge: every page bridge
	# touches is charged there. Its child joins the other cgroup before it
	# becomes sleep (the anonymous pages its shell touched in bridge's are
	# freed by that exec). The spool goes to the run's directory.
	(cd "$tmp/$run" && exec sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
		"$bin" --trackers "$TRACKER" ${args[@]+"${args[@]}"} -- \
		sh -c 'echo $$ >"$1/cgroup.procs" && exec sleep "$2"' sh "$child" $((SETTLE + 60)) >"$tmp/$run.log" 2>&1) &
	bpid=$!
	sleep "$SETTLE"
	others=$(grep -vx "$bpid" "$cg/cgroup.procs" || true)
	[[ -z $others ]] || { echo "bridge's cgroup holds more than bridge: $others" >&2; exit 1; }
	anon=$(($(kib RssAnon) * 1024)) file=$(($(kib RssFile) * 1024))
	if [[ $v == 1 ]]; then
		usage=$(<"$cg/memory.usage_in_bytes") inactive=$(stat_key total_inactive_file) canon=$(stat_key total_rss)
	else
		usage=$(<"$cg/memory.current") inactive=$(stat_key inactive_file) canon=$(stat_key anon)
	fi
	printf '| %d | %s | %s | %s | %s | %s |\n' "$run" "$(mib $((usage > inactive ? usage - inactive : 0)))" \
		"$(mib "$canon")" "$(mib "$usage")" "$(mib "$anon")" "$(mib "$file")"
	kill -TERM "$bpid"
	wait "$bpid" || true # the child's SIGTERM status
	bpid=
	rmcg "$cg" "$child"
	cg= child=
done
if grep -l 'level=ERROR' "$tmp"/*.log >/dev/null 2>&1; then echo "== errors in bridge's log:" >&2; grep -h 'level=ERROR' "$tmp"/*.log | head >&2; fi
