#!/usr/bin/env bash
# CI's check of the pip route (docs/wheel.md); .ci/run runs it after
# scripts/test.sh. On a fresh machine it needs what scripts/test.sh sets up
# (Go, .venv with mlflow and wandb) and PyPI for the wheel tools.
#   1. Builds the x86_64 wheel, then again from a copy of the tree at another
#      path with empty Go and zig caches, and compares the bytes.
#   2. The tag is true: scripts/wheel/glibc.py passes on the wheel and fails
#      on the same wheel named for an older floor; auditwheel show agrees.
#   3. The wheel installed with --no-index into fresh venvs:
#      go test -tags wheel ./e2e/wheel/ (bridge version and the metadata,
#      command -v bridge, a job into a real MLflow run, attach() from Python
#      into a real MLflow run and into the W&B mock, the GPU path without a
#      driver and with a fake libnvidia-ml, pip uninstall).
#   4. scripts/gpu-check.sh with BRIDGE_BIN in a venv: on a machine without
#      an NVIDIA driver it checks the no-driver path and exits 2.
#   5. Cross-builds the aarch64 wheel: `file` says ARM aarch64, the tag is true.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tools=$root/.wheel-tools
log() { printf '== %s\n' "$*" >&2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH

log "1. building the x86_64 wheel"
start=$(date +%s)
DIST=$tmp/dist bash scripts/wheel.sh x86_64
log "built in $(($(date +%s) - start)) s"
whl=$(echo "$tmp"/dist/*x86_64.whl)

log "1. building it again from a copy at $tmp/copy, with empty Go and zig caches"
mkdir "$tmp/copy"
# The tracked and new files, as the build sees them (ignored ones are not read).
git ls-files -z -co --exclude-standard | xargs -0 cp -P --parents -t "$tmp/copy"
start=$(date +%s)
(cd "$tmp/copy" && DIST=$tmp/again GOCACHE=$tmp/gocache ZIG_GLOBAL_CACHE_DIR=$tmp/zigcache WHEEL_TOOLS=$tools \
	bash scripts/wheel.sh x86_64)
log "built in $(($(date +%s) - start)) s"
if ! cmp "$whl" "$tmp"/again/*x86_64.whl; then
	log "the two builds differ: the wheel is not reproducible"
	exit 1
fi
log "reproducible: $(sha256sum "$whl" | cut -c1-64) both times, $(stat -c %s "$whl") bytes"

log "2. the platform tag against the binary's symbol versions"
"$tools/bin/python" scripts/wheel/glibc.py "$whl"
older=$tmp/older/$(basename "$whl" | sed 's/manylinux_2_17_x86_64\.manylinux2014_x86_64/manylinux_2_3_x86_64/')
mkdir -p "$(dirname "$older")"
cp "$whl" "$older"
if "$tools/bin/python" scripts/wheel/glibc.py "$older" >"$tmp/older.txt"; then
	cat "$tmp/older.txt"
	log "glibc.py accepted a manylinux_2_3 tag for a binary that needs GLIBC_2.3.3: the check cannot fail"
	exit 1
fi
"$tools/bin/auditwheel" show "$whl" | tee "$tmp/auditwheel.txt"
# auditwheel names the lowest policy the binary meets, which may be older.
if ! grep -Eq 'platform tag: "manylinux_2_(5|12|17)_x86_64"' <(tr '\n' ' ' <"$tmp/auditwheel.txt"); then
	log "auditwheel does not find the wheel consistent with manylinux_2_17_x86_64 or older"
	exit 1
fi

log "3. the wheel installed into fresh venvs (go test -tags wheel ./e2e/wheel/)"
go vet -tags wheel ./e2e/wheel/
BRIDGE_TEST_WHEEL=$whl bash scripts/test.sh -tags wheel -v ./e2e/wheel/

log "4. scripts/gpu-check.sh with the wheel's bridge"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --no-index --disable-pip-version-check "$whl"
rc=0
BRIDGE_BIN=$tmp/venv/bin/bridge DURATION=10 bash scripts/gpu-check.sh "$tmp/gpu" || rc=$?
case $rc in
0) log "gpu-check passed on a GPU" ;;
2) log "gpu-check took the no-driver path (no NVIDIA driver here)" ;;
*)
	log "gpu-check failed with $rc"
	exit 1
	;;
esac

log "5. cross-building the aarch64 wheel"
start=$(date +%s)
DIST=$tmp/dist bash scripts/wheel.sh aarch64
log "built in $(($(date +%s) - start)) s"
arm=$(echo "$tmp"/dist/*aarch64.whl)
unzip -q -d "$tmp/arm" "$arm" '*.data/scripts/bridge'
file -b "$tmp"/arm/*.data/scripts/bridge | tee "$tmp/file.txt"
grep -q 'ELF 64-bit LSB executable, ARM aarch64' "$tmp/file.txt"
"$tools/bin/python" scripts/wheel/glibc.py "$arm"
ls -l "$tmp"/dist/*.whl
echo "wheel-check: passed"
