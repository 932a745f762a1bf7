#!/usr/bin/env bash
# bench/spawn.sh: N idle processes unrelated to bridge (default 2,000), for
# the "cost does not grow with the node's processes" figures; moved to the
# root memory cgroup when it is writable, as another container's would be.
#
#   bench/spawn.sh start 2000     # prints nothing; the group's pid in $PIDFILE
#   bench/spawn.sh stop
set -euo pipefail
PIDFILE=${PIDFILE:-/tmp/bridge-bench-spawn.pid}
case ${1:-} in
start)
	n=${2:-2000}
	setsid bash -c "for i in \$(seq $n); do sleep 1000000 & done; wait" </dev/null >/dev/null 2>&1 &
	echo $! >"$PIDFILE"
	for _ in $(seq 120); do # bounded wait until all are forked
		have=$(wc -w </proc/"$(cat "$PIDFILE")"/task/"$(cat "$PIDFILE")"/children 2>/dev/null || echo 0)
		((have >= n)) && break
		sleep 0.5
	done
	root=/sys/fs/cgroup/memory/cgroup.procs
	if [[ -w $root ]]; then
		for p in $(cat /proc/"$(cat "$PIDFILE")"/task/*/children) "$(cat "$PIDFILE")"; do echo "$p" >"$root" 2>/dev/null || true; done
	fi
	echo "== $(ls /proc | grep -c '^[0-9]') processes on the machine" >&2
	;;
stop)
	kill -KILL -- "-$(cat "$PIDFILE")" 2>/dev/null || true
	rm -f "$PIDFILE"
	;;
*)
	echo "usage: $0 start [N] | stop" >&2
	exit 2
	;;
esac
