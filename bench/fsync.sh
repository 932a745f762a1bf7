#!/usr/bin/env bash
# bench/fsync.sh: what one durable spool line costs the process that writes
# it, by way of asking (bench/fsynccost): no fsync, fsync, fdatasync, a raw
# fsync (the Go scheduler not told), and an fdatasync of an overwrite (no
# journal commit). All side by side, one line a second, N lines each, in
# files under DIR (default: a temp dir on /var/tmp, the disk a spool is on).
#
#   bench/fsync.sh                 # 40 lines a mode, 1 s apart
#   N=100 INTERVAL=100ms DIR=/data bench/fsync.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-40}
INTERVAL=${INTERVAL:-1s}
dir=${DIR:-/var/tmp}
tmp=$(mktemp -d "$dir/bridge-fsync.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/fsynccost" ./bench/fsynccost
echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $(df -T "$tmp" | awk 'NR==2{print $2" on "$1}'); $N lines, $INTERVAL apart" >&2
pids=()
for m in none fsync fdatasync raw overwrite; do
	"$tmp/fsynccost" -mode "$m" -n "$N" -interval "$INTERVAL" -file "$tmp/$m" &
	pids+=($!)
	sleep 0.17 # not all in the same instant: one journal commit each
done
for p in "${pids[@]}"; do wait "$p"; done
