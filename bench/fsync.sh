#!/usr/bin/env bash
# bench/fsync.sh: what one durable spool line costs the process that writes
# it, by way of asking (bench/fsynccost): no fsync, fsync, fdatasync, a raw
# fsync (the Go scheduler not told), and an fdatasync of an overwrite (no
# journal commit). All side by side, one line an interval, measured over the
# same window by bench/measure.py (as bench/overhead.sh measures bridge), in
# files under DIR (default /var/tmp, the disk a spool is on).
#
#   bench/fsync.sh                              # 1 s apart, 40 s window
#   INTERVAL_MS=100 WINDOW=20 DIR=/data bench/fsync.sh
set -euo pipefail
cd "$(dirname "$0")/.."
INTERVAL_MS=${INTERVAL_MS:-1000}
WINDOW=${WINDOW:-40}
WARMUP=${WARMUP:-3}
PYTHON=${PYTHON:-python3}
dir=${DIR:-/var/tmp}
tmp=$(mktemp -d "$dir/bridge-fsync.XXXXXX")
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/fsynccost" ./bench/fsynccost
args=()
for m in none fsync fdatasync raw overwrite; do
	"$tmp/fsynccost" -mode "$m" -interval "${INTERVAL_MS}ms" -file "$tmp/$m" &
	pids+=($!)
	args+=("$m=$!")
	sleep 0.17 # not all in the same instant: one journal commit each
done
sleep "$WARMUP"
echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $(df -T "$tmp" | awk 'NR==2{print $2" on "$1}'); a line every ${INTERVAL_MS} ms, window ${WINDOW} s" >&2
echo "| mode | CPU ms a line | context switches a line |"
echo "|---|---|---|"
"$PYTHON" bench/measure.py "$WINDOW" "$(awk "BEGIN{print $INTERVAL_MS/1000}")" "${args[@]}" |
	awk -F'\t' '{printf "| %s | %s | %s |\n", $1, $2, $5}'
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "fsynccost $p stopped early" >&2; exit 1; }; done
