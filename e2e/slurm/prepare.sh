#!/usr/bin/env bash
# Installs what the Slurm cluster of e2e/slurm needs, when it is missing:
# Debian's slurmctld, slurmd, slurm-client (Slurm 22.05 on bookworm) and
# munge, and iproute2. Idempotent; needs root and apt-get to install. The
# packages' services are not used (up.sh starts its own daemons), and where
# no init system runs, apt starts none.
set -euo pipefail
log() { printf '== slurm: %s\n' "$*" >&2; }
need=
for c in slurmctld slurmd srun munged ip; do
  command -v "$c" >/dev/null 2>&1 || need=1
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  log "slurmctld, slurmd, slurm-client or munge missing and cannot be installed here (needs root and apt-get)"
  exit 1
fi
log "installing Debian slurmctld slurmd slurm-client munge iproute2"
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  slurmctld slurmd slurm-client munge iproute2 >/dev/null
