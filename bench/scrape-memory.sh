#!/usr/bin/env bash
# bench/scrape-memory.sh: bridge's peak memory under hostile --scrape
# exporters (bench/hostileexporter). For each exporter, with and without
# --scrape-passthrough, the real binary runs `sleep DURATION` with
# --trackers none, sampling every INTERVAL, alone in a fresh cgroup v1 memory
# cgroup limited to LIMIT (so a bridge without bounds cannot take the machine
# down: it is OOM-killed at the limit instead). Prints, per run: bridge's
# exit status, its peak RSS (wait4's ru_maxrss, GNU time %M), the cgroup's
# peak (memory.max_usage_in_bytes: bridge, its child, page cache) and the
# OOM kills in the cgroup.
#
#   bench/scrape-memory.sh                       # every mode, 10 s each
#   MODES="series gzip" DURATION=20 bench/scrape-memory.sh
#   BRIDGE_BIN=/tmp/bridge-before bench/scrape-memory.sh   # another build
#   OUTAGE=1 MODES=maxkept INTERVAL=100ms DURATION=130 bench/scrape-memory.sh
#       # an MLflow tracker that is down all along: the spool holds up to
#       # 1024 unacknowledged samples, 16 MiB, in memory (--trackers mlflow)
#   DISKFULL=1 OUTAGE=1 MODES=maxkept INTERVAL=100ms DURATION=130 bench/scrape-memory.sh
#       # and the spool on a full tmpfs: samples wait in memory for the
#       # file too (at most 4096, 64 MiB)
#
# Needs root and a writable cgroup v1 memory hierarchy (and for DISKFULL,
# to mount a tmpfs); go (unless BRIDGE_BIN), GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
MODES=${MODES:-small series gzip label endless drip maxkept churn}
DURATION=${DURATION:-10}
INTERVAL=${INTERVAL:-1s}
LIMIT=${LIMIT:-1G}
OUTAGE=${OUTAGE:-}
DISKFULL=${DISKFULL:-}
tmp=$(mktemp -d /tmp/bridge-scrape-memory.XXXXXX)
exporter=
cg=
full=
cleanup() {
	[[ -n $exporter ]] && kill "$exporter" 2>/dev/null || true
	[[ -n $cg && -d $cg ]] && rmdir "$cg" 2>/dev/null || true
	[[ -n $full ]] && umount "$full" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
spools=$tmp
if [[ -n $DISKFULL ]]; then
	full=$tmp/full
	mkdir "$full"
	mount -t tmpfs -o size=256k,mode=0700 tmpfs "$full"
	dd if=/dev/zero of="$full/filler" bs=64k 2>/dev/null || true # until ENOSPC
	spools=$full
fi

bin=${BRIDGE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/bridge
	go build -o "$bin" ./cmd/bridge
fi
go build -o "$tmp/hostileexporter" ./bench/hostileexporter
own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
mem=/sys/fs/cgroup/memory$own
[[ -w $mem ]] || { echo "needs a writable cgroup v1 memory hierarchy (got $mem)" >&2; exit 1; }

echo "== $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); bridge $("$bin" version 2>&1 | head -1); --interval $INTERVAL, ${DURATION} s, cgroup limit $LIMIT${OUTAGE:+, tracker down all along}${DISKFULL:+, spool on a full disk}" >&2
echo "| exporter | passthrough | exit | bridge peak RSS MiB | cgroup peak MiB | OOM kills |"
echo "|---|---|---|---|---|---|"
for mode in $MODES; do
	"$tmp/hostileexporter" -mode "$mode" >"$tmp/addr" 2>"$tmp/exporter.log" &
	exporter=$!
	for _ in $(seq 100); do [[ -s $tmp/addr ]] && break; sleep 0.1; done
	url="http://$(cat "$tmp/addr")/metrics"
	for pass in no yes; do
		args=(--interval="$INTERVAL" --scrape="$url" --spool="$spools/spool-$mode-$pass.jsonl")
		if [[ -n $OUTAGE ]]; then
			# Port 9 (discard) on loopback: connection refused, all along.
			args+=(--trackers=mlflow --start-timeout=100ms)
			export MLFLOW_TRACKING_URI=http://127.0.0.1:9
		else
			args+=(--trackers=none)
		fi
		[[ $pass == yes ]] && args+=(--scrape-passthrough)
		cg=$mem/bridge-scrape-memory-$$-$mode-$pass
		mkdir "$cg"
		echo "$LIMIT" >"$cg/memory.limit_in_bytes"
		set +e
		# The shell joins the cgroup, then becomes GNU time, which runs bridge.
		sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
			/usr/bin/time -f %M -o "$tmp/rss" "$bin" "${args[@]}" -- sleep "$DURATION" >/dev/null 2>"$tmp/bridge.log"
		code=$?
		set -e
		rss=$(tail -1 "$tmp/rss" | awk '{printf "%.1f", $1/1024}')
		peak=$(awk '{printf "%.1f", $1/1048576}' "$cg/memory.max_usage_in_bytes")
		ooms=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control")
		echo "| $mode | $pass | $code | $rss | $peak | ${ooms:-?} |"
		# A killed bridge leaves its child behind in the cgroup.
		for p in $(cat "$cg/cgroup.procs"); do kill -KILL "$p" 2>/dev/null || true; done
		for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
		cg=
	done
	kill "$exporter" 2>/dev/null || true
	wait "$exporter" 2>/dev/null || true
	exporter=
	rm -f "$tmp/addr"
done
