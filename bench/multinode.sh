#!/usr/bin/env bash
# bench/multinode.sh: multi-node jobs at scale (docs/multinode.md). ROUNDS
# rounds of N = 2, 8 and 32 real bridges of one job started together, each
# with a Slurm step's environment and its own node id, against MLflow on
# PostgreSQL; every round asserts what CI asserts in one
# (cmd/bridge/multinode_e2e_test.go: exactly one active run, every child
# saw it, every node's samples in it under its node id, nothing posted to
# a deleted candidate, FINISHED set once). Then a node that starts LATE
# (two minutes) after the others, and the child-start delay: p50/p99 of
# the election's next to today's single-node figure (a bridge with no job
# key creating its run on the same server).
#
#   bench/multinode.sh                   # 20 rounds, a node 2m late
#   ROUNDS=5 LATE=30s bench/multinode.sh
#   ROUNDS=3 NS="64 128" ONLY=rounds bench/multinode.sh   # larger jobs, rounds only
#
# The delay is from just before the bridge process starts to the child's
# first instruction (`date +%s%N`), per node. --job-settle is its default
# (1s) and --start-timeout generous (3m): the figure is the election's
# own, not a timeout's.
#
# Needs: go, postgresql (Debian), BRIDGE_TEST_PYTHON (default .venv/bin/python)
# with mlflow and psycopg2.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
LATE=${LATE:-2m}
NS=${NS:-2 8 32}
tests='^(TestMultinodeRounds|TestSingleNodeUnchanged|TestMultinodeLateNode)$'
[ "${ONLY:-}" = rounds ] && tests='^TestMultinodeRounds$'

export BRIDGE_TEST_PYTHON=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true
report=$(mktemp /tmp/bridge-multinode.XXXXXX)
trap 'rm -f "$report"' EXIT

echo "== $ROUNDS rounds of N = $NS; a node $LATE late; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
BRIDGE_TEST_MULTINODE_ROUNDS=$ROUNDS BRIDGE_TEST_MULTINODE_REPORT=$report BRIDGE_TEST_MULTINODE_LATE=$LATE BRIDGE_TEST_MULTINODE_NS=$NS \
	go test -count=1 -timeout 4h -v -run "$tests" ./cmd/bridge |
	grep -E '^ *--- |^(ok|FAIL|PASS)' || true
echo "== took $(($(date +%s) - start)) s; load $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$report" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["kind"], r["n"]), []).append(r["delay_ms"])
def pct(xs, p):  # nearest rank
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, -(-p * len(xs) // 100) - 1))]
print("child-start delay (ms), from the bridge's exec to the child's first instruction")
print(f"{'':12}{'N':>4}{'starts':>8}{'p50':>8}{'p99':>8}{'max':>8}{'> 5 s':>8}")
for (kind, n), xs in sorted(by.items(), key=lambda kv: (kv[0][0] != "single", kv[0][1])):
    name = "no job key" if kind == "single" else "election"
    late = sum(x > 5000 for x in xs)  # past the default --start-timeout
    print(f"{name:12}{n:>4}{len(xs):>8}{pct(xs, 50):>8.0f}{pct(xs, 99):>8.0f}{max(xs):>8.0f}{late:>8}")
PY
