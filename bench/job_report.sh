#!/usr/bin/env bash
# bench/job_report.sh: a restarted node of a large job finds its runs, and
# `bridge report` on the job's run answers, at N nodes (issue 39; default
# 1,024). Runs TestMultinodeRestartIn300NodeJob with
# BRIDGE_TEST_RESTART_NODES=N against MLflow on PostgreSQL: two real
# bridges (node-0; node-7, then node-7 requeued) and N-2 nodes' runs and
# end lines written as bridges write them. Prints the test's figure line:
# the job's runs/get in bytes, and the rows and time of `bridge report`.
#
#   bench/job_report.sh              # N = 1024
#   N=300 bench/job_report.sh
#
# Needs: go, BRIDGE_TEST_PYTHON (default .venv/bin/python) with mlflow and
# psycopg2, Debian's postgresql (scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
export BRIDGE_TEST_PYTHON=${BRIDGE_TEST_PYTHON:-$PWD/.venv/bin/python}
export BRIDGE_TEST_RESTART_NODES=${N:-1024}
go test -count=1 -timeout 30m -v -run '^TestMultinodeRestartIn300NodeJob$' ./cmd/bridge/ 2>&1 |
	grep -E "node job's run|^(--- |ok|FAIL|PASS)" 
