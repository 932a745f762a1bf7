#!/usr/bin/env bash
# Fuzzes every parser of outside input for a bounded time (FUZZTIME, default
# 10s each): the spool reader, the cgroup file parsers, MLflow's and W&B's
# response handling, configuration and flag parsing, and argv redaction.
# Seed corpora live in each package's testdata/fuzz/ and also run in the
# ordinary `go test`. A crasher fails the run; add it to the corpus as a
# regression case (go test writes it under testdata/fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
t=${FUZZTIME:-10s}
targets=(
  "./spool/ FuzzScan" "./spool/ FuzzOpen"
  "./metrics/cgroup/ FuzzParseMemoryMax" "./metrics/cgroup/ FuzzParseCPUMax"
  "./metrics/cgroup/ FuzzParseV1Quota" "./metrics/cgroup/ FuzzParseCPUList"
  "./metrics/cgroup/ FuzzParseFlatKeyed" "./metrics/cgroup/ FuzzParsePSI"
  "./metrics/cgroup/ FuzzParseStatKeys" "./metrics/cgroup/ FuzzParseCgroupUint"
  "./metrics/cgroup/ FuzzStripRoot"
  "./tracker/mlflow/ FuzzResponse" "./tracker/wandb/ FuzzResponse"
  "./config/ FuzzLoad" "./config/ FuzzArgs" "./redact/ FuzzArgv"
)
for tg in "${targets[@]}"; do
  read -r pkg name <<<"$tg"
  printf '== fuzz %s %s for %s\n' "$pkg" "$name" "$t" >&2
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$t" -fuzzminimizetime 5s "$pkg"
done
echo "fuzz: ${#targets[@]} targets, no crasher"
