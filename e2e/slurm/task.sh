#!/bin/sh
# task.sh NAME CMD...: runs CMD as one process of a test job and records it in
# $E2E_SLURM_JOBDIR under a<attempt>.t<rank>.NAME (attempt: SLURM_RESTART_COUNT,
# 0 on the first run; rank: SLURM_PROCID):
#   .host  the node's hostname
#   .env   the environment CMD gets, NUL-separated, complete before CMD starts
#   .out   CMD's standard output, .err its standard error
#   .exit  CMD's exit status, once it has ended (absent if it was killed)
# The test harness (cluster.go) runs every task as `task.sh task CMD...`; a
# test wraps bridge's child as `task.sh child CMD...` to see what bridge gave it.
set -u
name=$1
shift
p=$E2E_SLURM_JOBDIR/a${SLURM_RESTART_COUNT:-0}.t$SLURM_PROCID.$name
uname -n >"$p.host"
env -0 >"$p.env.tmp" && mv "$p.env.tmp" "$p.env"
"$@" >"$p.out" 2>"$p.err"
rc=$?
echo "$rc" >"$p.exit.tmp" && mv "$p.exit.tmp" "$p.exit"
exit "$rc"
