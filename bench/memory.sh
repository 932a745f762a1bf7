#!/usr/bin/env bash
# bench/memory.sh: what bridge adds to the job's memory cgroup, in the
# figures the kubelet and the OOM killer go by. Each run makes a fresh
# memory cgroup, starts `bridge --trackers none -- sleep` in it, lets it
# sample for SETTLE seconds (at the default 10 s interval unless ARGS says
# otherwise), then reads:
#   - bridge's anonymous memory (RssAnon of /proc/<pid>/status), and its
#     mapped file pages (RssFile) for reference;
#   - the cgroup's working set as kubelet computes it: usage minus inactive
#     file pages (v1: memory.usage_in_bytes - total_inactive_file; v2:
#     memory.current - inactive_file), and its anonymous memory.
# The binary's page cache is dropped first (COLD=1, the default), so that
# its pages are read and charged in that cgroup, as on a node that did not
# just write the file; COLD=0 keeps them (charged to whoever read them).
#
#   BRIDGE_BIN=/tmp/bridge bench/memory.sh
#   RUNS=3 SETTLE=60 ARGS="--interval 1s" BRIDGE_BIN=/tmp/bridge bench/memory.sh
#
# Needs root and a writable cgroup memory controller (v1, or v2 with memory
# in the parent's cgroup.subtree_control).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-2}
SETTLE=${SETTLE:-25}
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
cg= bpid=
cleanup() {
	[[ -n $bpid ]] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null
	[[ -n $cg ]] && for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 0.5; done
	rm -rf "$tmp"
}
trap cleanup EXIT
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$bpid/status"; }
stat_key() { awk -v k="$1" '$1 == k {print $2}' "$cg/memory.stat"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

echo "== $(date -u +%FT%TZ) $bin, cgroup v$v under $parent, $SETTLE s of sampling${ARGS:+, $ARGS}, COLD=${COLD:-1}" >&2
printf '| run | bridge anon MiB | bridge file MiB | cgroup working set MiB | cgroup anon MiB | cgroup usage MiB |\n|---|---|---|---|---|---|\n'
for ((run = 1; run <= RUNS; run++)); do
	if [[ ${COLD:-1} == 1 ]]; then
		sync "$bin"
		python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$bin"
	fi
	cg=$parent/bridge-memory-$$-$run
	mkdir "$cg"
	[[ -e $cg/memory.stat ]] || { echo "no memory controller in $cg" >&2; exit 1; }
	mkdir -p "$tmp/$run"
	# The shell joins the cgroup, then becomes bridge: every page bridge
	# touches is charged there. The spool goes to the run's directory.
	(cd "$tmp/$run" && exec sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
		"$bin" --trackers none ${args[@]+"${args[@]}"} -- sleep $((SETTLE + 60)) >"$tmp/$run.log" 2>&1) &
	bpid=$!
	sleep "$SETTLE"
	anon=$(($(kib RssAnon) * 1024)) file=$(($(kib RssFile) * 1024))
	if [[ $v == 1 ]]; then
		usage=$(<"$cg/memory.usage_in_bytes") inactive=$(stat_key total_inactive_file) canon=$(stat_key total_rss)
	else
		usage=$(<"$cg/memory.current") inactive=$(stat_key inactive_file) canon=$(stat_key anon)
	fi
	printf '| %d | %s | %s | %s | %s | %s |\n' "$run" "$(mib "$anon")" "$(mib "$file")" \
		"$(mib $((usage > inactive ? usage - inactive : 0)))" "$(mib "$canon")" "$(mib "$usage")"
	kill -TERM "$bpid"
	wait "$bpid" || true # the child's SIGTERM status
	bpid=
	for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 0.5; done
	cg=
done
