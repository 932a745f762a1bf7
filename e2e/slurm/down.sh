#!/usr/bin/env bash
# down.sh DIR: tears down the cluster that up.sh started in DIR: every
# process in its network namespaces (slurmd, slurmstepd, job tasks,
# slurmctld), munged, the namespaces and the bridge. Leaves DIR's files (the
# logs) in place. Safe to run twice, or on a cluster that up.sh left half
# made.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
[ -f "$dir/cluster.env" ] || exit 0
# shellcheck source=/dev/null
. "$dir/cluster.env"
exec 9>"$dir/run/down.lock" && flock 9

# The watchdog, unless this is the watchdog (it execs down.sh).
if [ -f "$dir/run/watchdog.pid" ]; then
  w=$(cat "$dir/run/watchdog.pid")
  [ "$w" != $$ ] && kill "$w" 2>/dev/null
fi

# pids: every process in the cluster's namespaces, and munged.
pids() {
  for ns in $NETNS; do
    [ -e "/run/netns/$ns" ] && ip netns pids "$ns" 2>/dev/null
  done
  [ -f "$dir/run/munged.pid" ] && cat "$dir/run/munged.pid"
}
signal() {
  local p
  for p in $(pids); do kill "-$1" "$p" 2>/dev/null; done
}
signal TERM
for _ in $(seq 1 100); do
  alive=0
  for p in $(pids); do kill -0 "$p" 2>/dev/null && alive=1; done
  [ "$alive" = 0 ] && break
  sleep 0.1
done
[ "$alive" = 0 ] || { echo "down.sh: killing what did not stop in 10 s" >&2; signal KILL; }
rm -f "$dir/run/munged.pid"

for ns in $NETNS; do
  [ -e "/run/netns/$ns" ] && ip netns delete "$ns"
done
ip link show "$BRIDGE_IF" >/dev/null 2>&1 && ip link delete "$BRIDGE_IF"
exit 0
