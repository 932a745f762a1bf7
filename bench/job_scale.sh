#!/usr/bin/env bash
# bench/job_scale.sh: a job of many real bridges at the default 10 s
# interval and 1-minute run tick, node ids from Slurm's variables, against
# MLflow on PostgreSQL behind mocks/faultproxy failing about 20% of all
# calls (cmd/bridge/job_scale_e2e_test.go, TestJobScaleUnderFailures; CI
# runs 8 nodes a job). For each N: a clean job (FINISHED) and a job with
# one node's child OOM-killed in a memory cgroup of its own (FAILED, that
# node first), side by side; each asserts what CI asserts and prints its
# figures: when every line was live and when the job ended, calls and
# faults through the proxy, the job run's runs/get size, each node's end
# recorded, and `bridge report`'s rows and time. Needs root (cgroup v1).
#
#   bench/job_scale.sh                  # N = 128
#   NS="128 256" JOBS=clean bench/job_scale.sh
#
# Needs: go, postgresql (Debian), BRIDGE_TEST_PYTHON (default .venv/bin/python)
# with mlflow and psycopg2.
set -euo pipefail
cd "$(dirname "$0")/.."
export BRIDGE_TEST_PYTHON=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true
export BRIDGE_TEST_SCALE_JOBS=${JOBS:-clean oom}
export BRIDGE_TEST_SCALE_PACE=default # bridge's 10 s interval and 1-minute run tick
[ -n "${SEED:-}" ] && export BRIDGE_TEST_SCALE_SEED=$SEED
for n in ${NS:-128}; do
	echo "== $n nodes a job ($BRIDGE_TEST_SCALE_JOBS); $(nproc) CPUs, $(free -g | awk '/^Mem/{print $7}') GiB available, load $(cut -d' ' -f1-3 /proc/loadavg)"
	start=$(date +%s)
	BRIDGE_TEST_SCALE_NODES=$n go test -count=1 -timeout 1h -v -run '^TestJobScaleUnderFailures$' ./cmd/bridge |
		grep -E '^ *--- |^(ok|FAIL|PASS)|figure: |job_scale_e2e_test.go' || true
	echo "== $n nodes: took $(($(date +%s) - start)) s wall (the build included); load $(cut -d' ' -f1-3 /proc/loadavg)"
done
