#!/usr/bin/env bash
# CI's check of the pip route (docs/wheel.md); .ci/run runs it after
# scripts/test.sh. On a fresh machine it needs what scripts/test.sh sets up
# (Go, .venv with mlflow and wandb), PyPI for the wheel tools, and installs
# Debian's qemu-user and aarch64 glibc (as root) to run the aarch64 binary.
#   1. Builds the x86_64 and aarch64 wheels; `file` must say ARM aarch64.
#   2. Builds the x86_64 wheel again from a copy of the tree at another path
#      with empty Go and zig caches, and compares the bytes.
#   3. The tags are true: scripts/wheel/glibc.py passes on both wheels and
#      fails on the x86_64 one named for an older floor; auditwheel agrees.
#   4. go test -tags wheel ./e2e/wheel/: the x86_64 wheel installed with
#      --no-index into fresh venvs (bridge version and the metadata, command
#      -v bridge, a job into a real MLflow run, attach() from Python into a
#      real MLflow run and into the W&B mock, the GPU path without a driver
#      and with a stand-in libnvidia-ml, pip uninstall), and the aarch64
#      binary under qemu-user (version, the same GPU path).
#   5. scripts/gpu-check.sh with BRIDGE_BIN in a venv: on a machine without
#      an NVIDIA driver it checks the no-driver path and exits 2.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tools=$root/.wheel-tools
log() { printf '== %s\n' "$*" >&2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH

for arch in x86_64 aarch64; do
	log "1. building the $arch wheel"
	start=$(date +%s)
	DIST=$tmp/dist bash scripts/wheel.sh $arch
	log "built in $(($(date +%s) - start)) s"
done
whl=$(echo "$tmp"/dist/*x86_64.whl)
arm=$(echo "$tmp"/dist/*aarch64.whl)
ls -l "$tmp"/dist/*.whl
unzip -q -d "$tmp/arm" "$arm" '*.data/scripts/bridge'
file -b "$tmp"/arm/*.data/scripts/bridge | tee "$tmp/file.txt"
grep -q 'ELF 64-bit LSB executable, ARM aarch64' "$tmp/file.txt"

log "2. building the x86_64 wheel again from a copy at $tmp/copy, with empty Go and zig caches"
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

log "3. the platform tags against the binaries' symbol versions"
"$tools/bin/python" scripts/wheel/glibc.py "$whl" "$arm"
older=$tmp/older/$(basename "$whl" | sed 's/manylinux_2_17_x86_64\.manylinux2014_x86_64/manylinux_2_3_x86_64/')
mkdir -p "$(dirname "$older")"
cp "$whl" "$older"
if "$tools/bin/python" scripts/wheel/glibc.py "$older" >"$tmp/older.txt"; then
	cat "$tmp/older.txt"
	log "glibc.py accepted a manylinux_2_3 tag for a binary that needs GLIBC_2.3.3: the check cannot fail"
	exit 1
fi
for a in x86_64 aarch64; do
	w=$(echo "$tmp"/dist/*"$a".whl)
	"$tools/bin/auditwheel" show "$w" | tee "$tmp/auditwheel.txt"
	# auditwheel names the oldest policy the binary meets, which may be older.
	if ! tr '\n' ' ' <"$tmp/auditwheel.txt" | grep -Eq "platform tag: \"manylinux_2_(5|12|17)_$a\""; then
		log "auditwheel does not find $w consistent with manylinux_2_17_$a or older"
		exit 1
	fi
done

log "4. the wheels' checks (go test -tags wheel ./e2e/wheel/)"
if ! command -v qemu-aarch64 >/dev/null || [ ! -e /usr/aarch64-linux-gnu/lib/libc.so.6 ]; then
	log "installing Debian qemu-user and libc6-arm64-cross, to run the aarch64 binary"
	[ "$(id -u)" = 0 ] || { log "that needs root (apt-get); install them and run again"; exit 1; }
	apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user libc6-arm64-cross >/dev/null
fi
go vet -tags wheel ./e2e/wheel/
BRIDGE_TEST_WHEEL=$whl BRIDGE_TEST_WHEEL_AARCH64=$arm \
	BRIDGE_TEST_ZIG=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))') \
	bash scripts/test.sh -tags wheel -v ./e2e/wheel/

log "5. scripts/gpu-check.sh with the wheel's bridge"
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
echo "wheel-check: passed"
