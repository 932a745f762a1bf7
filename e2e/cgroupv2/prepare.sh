#!/usr/bin/env bash
# Prepares what the cgroup v2 guest test (e2e/cgroupv2) needs, idempotently:
#   qemu-system-x86 (installed, as root, when missing), and the Debian kernel
#   that linux-image-amd64 depends on plus busybox-static, downloaded and
#   unpacked into a cache directory (not installed). The kernel's bzImage is
#   decompressed to an ELF vmlinux, which QEMU boots directly (PVH note) in
#   about half the time of the bzImage under TCG.
# Prints the cache directory; the test finds it at the same default place,
# or at $BRIDGE_CGROUPV2_CACHE.
set -euo pipefail
cache="${BRIDGE_CGROUPV2_CACHE:-/var/cache/bridge-cgroupv2}"
log() { printf '== cgroupv2: %s\n' "$*" >&2; }

if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || { log "qemu-system-x86_64 missing and not root: install qemu-system-x86"; exit 1; }
  log "installing qemu-system-x86"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi

mkdir -p "$cache"
cd "$cache"
if [ -s vmlinux ] && [ -x busybox ] && [ -s modules/virtio_blk.ko ] && [ -s kernel-version ]; then
  echo "$cache"
  exit 0
fi

kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$kpkg" ]; then
  apt-get update -qq >/dev/null
  kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$kpkg" ] || { log "cannot tell which kernel linux-image-amd64 depends on"; exit 1; }
kver=${kpkg#linux-image-}
log "downloading $kpkg and busybox-static into $cache"
rm -rf dl && mkdir dl
(cd dl && apt-get download -qq "$kpkg" busybox-static)
rm -rf root && mkdir root
for d in dl/*.deb; do dpkg-deb -x "$d" root; done

# The bzImage carries an xz-compressed ELF: find the xz magic and decompress
# from there (xz stops at the end of its stream; trailing bytes are ignored).
bz=$(ls root/boot/vmlinuz-*)
off=$(grep -abo $'\xfd7zXZ\x00' "$bz" | head -1 | cut -d: -f1)
[ -n "$off" ] || { log "no xz payload in $bz"; exit 1; }
tail -c +"$((off + 1))" "$bz" | xz -dc 2>/dev/null >vmlinux.tmp || true
head -c 4 vmlinux.tmp | grep -q $'\x7fELF' || { log "decompressed kernel from $bz is not an ELF"; exit 1; }
mv vmlinux.tmp vmlinux

cp root/bin/busybox busybox
# Only the modules the guest loads: virtio networking, and virtio-blk for a
# disk whose reads fill the page cache (an initramfs's files are not on the
# LRU lists, so they make no inactive_file).
rm -rf modules && mkdir modules
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net virtio_blk; do
  f=$(find root/lib/modules -name "$m.ko*" | head -1)
  [ -n "$f" ] || { log "module $m not in $kpkg"; exit 1; }
  case "$f" in
    *.xz) xz -dc "$f" >"modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" >"modules/$m.ko" ;;
    *) cp "$f" "modules/$m.ko" ;;
  esac
done
echo "$kver" >kernel-version
rm -rf dl root
log "ready: kernel $kver"
echo "$cache"
