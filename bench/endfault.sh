#!/usr/bin/env bash
# bench/endfault.sh: the end of a multi-node job under failures
# (docs/reliability.md, "The end, retried"). ROUNDS rounds of a job of
# NODES real bridges behind mocks/faultproxy failing about 20% of all calls
# (503s, resets before and after the server applied the request), against
# MLflow on PostgreSQL; every round asserts what CI asserts in one round of
# 16 (cmd/bridge/endwrite_e2e_test.go, TestEndUnderFailuresMultinode): one
# run, every node's samples in it, every node's end recorded, FINISHED.
# Each round logs its seed; SEED=N replays one.
#
#   bench/endfault.sh                    # 10 rounds of 32 nodes
#   ROUNDS=3 NODES=64 bench/endfault.sh
#
# Needs: go, postgresql (Debian), BRIDGE_TEST_PYTHON (default .venv/bin/python)
# with mlflow and psycopg2.
set -euo pipefail
cd "$(dirname "$0")/.."
export BRIDGE_TEST_PYTHON=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true
export BRIDGE_TEST_ENDFAULT_ROUNDS=${ROUNDS:-10} BRIDGE_TEST_ENDFAULT_NODES=${NODES:-32}
[ -n "${SEED:-}" ] && export BRIDGE_TEST_ENDFAULT_SEED=$SEED
echo "== $BRIDGE_TEST_ENDFAULT_ROUNDS rounds of $BRIDGE_TEST_ENDFAULT_NODES nodes; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
go test -count=1 -timeout 4h -v -run '^TestEndUnderFailuresMultinode$' ./cmd/bridge |
	grep -E '^ *--- |^(ok|FAIL|PASS)|endwrite_e2e_test.go' || true
echo "== took $(($(date +%s) - start)) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
