#!/usr/bin/env bash
# Sets up everything the tests use on a fresh machine and runs them:
#   a Python venv with pinned mlflow, wandb and psycopg2 (.venv), Debian's
#   postgresql (the multi-node tests start MLflow on it), Debian's chromium and
#   playwright-core for the MLflow UI test, Debian's Slurm and munge for the
#   launcher tests (e2e/slurm), one MLflow server on 127.0.0.1 for
#   the suite (stopped however the tests end), then go vet and go test -race.
# Extra arguments go to `go test` (e.g. scripts/test.sh -run TestMLflow ./cmd/...).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
# Tests reach only 127.0.0.1: the Python clients' telemetry stays off.
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true WANDB_ERROR_REPORTING=false

log() { printf '== %s\n' "$*" >&2; }

# QEMU, kernel and busybox for the cgroup v2 guest test (e2e/cgroupv2).
bash e2e/cgroupv2/prepare.sh >/dev/null || log "cgroup v2 guest unavailable: TestCgroupV2Guest will skip"

# Python clients (reused when the pins are already installed).
if ! .venv/bin/python -c 'import mlflow, wandb, psycopg2, sys; sys.exit(0 if (mlflow.__version__, wandb.__version__, psycopg2.__version__.split()[0]) == ("3.17.2", "0.31.0", "2.9.13") else 1)' 2>/dev/null; then
  log "creating .venv with $(grep -v '^#' scripts/requirements-test.txt | xargs)"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
fi
export BRIDGE_TEST_PYTHON="$root/.venv/bin/python"

# Browser for the MLflow UI test (skipped by the test itself if missing).
if [ -d e2e/browser ]; then
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing Debian chromium"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      log "chromium missing and cannot be installed here: the browser test will skip"
    fi
  fi
  if [ -f e2e/browser/package.json ] && [ ! -d e2e/browser/node_modules ]; then
    log "installing playwright-core"
    (cd e2e/browser && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

# PostgreSQL for the multi-node tests' MLflow server (harness/mlflowtest
# starts a throwaway cluster from it, as the postgres user, per test process).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian postgresql"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  else
    log "postgresql missing and cannot be installed here: the multi-node tests will skip"
  fi
fi

# Prometheus and node-exporter for the exporter and --scrape tests.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v prometheus-node-exporter >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian prometheus and prometheus-node-exporter"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-node-exporter >/dev/null
  else
    log "prometheus missing and cannot be installed here: the Prometheus tests will skip"
  fi
fi

# FUSE for the stalled-disk tests (harness/stallfs mounts with mount(2) as
# root: no fusermount, only the fuse module and /dev/fuse).
if [ ! -e /dev/fuse ] && [ "$(id -u)" = 0 ]; then
  modprobe fuse 2>/dev/null || true
  mknod -m 0666 /dev/fuse c 10 229 2>/dev/null || log "no /dev/fuse: the stalled-disk tests will skip"
fi

# Slurm and munge for the launcher tests (e2e/slurm: a cluster of network
# namespaces on this machine).
bash e2e/slurm/prepare.sh || log "Slurm unavailable: the e2e/slurm tests will skip"

# One MLflow server for the suite; tests that stop and restart a server start
# their own.
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log "starting mlflow server on 127.0.0.1:$port"
# In $tmp: python -m puts its working directory first on sys.path, where a
# folder of the repository could stand in for a module MLflow imports.
(cd "$tmp" && MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false exec setsid "$BRIDGE_TEST_PYTHON" -m mlflow server --host 127.0.0.1 --port "$port" \
  --backend-store-uri "sqlite:///$tmp/mlflow.db" --default-artifact-root "$tmp/artifacts" \
  --artifacts-destination "$tmp/mlartifacts" --workers 1 >"$tmp/mlflow.log" 2>&1) &
server=$!
cleanup() {
  kill -TERM -- "-$server" 2>/dev/null || true
  sleep 1
  kill -KILL -- "-$server" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
for i in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then log "mlflow server died:"; tail -50 "$tmp/mlflow.log" >&2; exit 1; fi
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$port/health" >/dev/null || { log "mlflow server did not answer in 60 s"; tail -50 "$tmp/mlflow.log" >&2; exit 1; }
export BRIDGE_TEST_MLFLOW_URI="http://127.0.0.1:$port"

log "go vet ./... && go test -race ./..."
go vet ./...
if [ $# -gt 0 ]; then
  go test -race -count=1 "$@"
  exit
fi
# The whole suite (CI): a test that skips here fails the run unless
# .ci/allowed-skips says the skip is legitimate on this machine (no GPU), and
# tests must write only into temporary directories, never the repository.
untracked() { git status --porcelain --ignored=matching --untracked-files=all 2>/dev/null | grep -E '^(\?\?|!!) ' | sort || true; }
before=$(untracked)
go test -race -count=1 -timeout 30m -parallel 4 -json ./... | go run ./harness/testbin/skipcheck -allow .ci/allowed-skips
after=$(untracked)
added=$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | sed '/^$/d')
if [ -n "$added" ]; then
  log "the tests left files in the repository (they must write only into t.TempDir()):"
  printf '%s\n' "$added" >&2
  exit 1
fi
