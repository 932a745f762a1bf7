#!/usr/bin/env bash
# up.sh [--watch-stdin] DIR: starts a Slurm cluster on this one machine, all of
# its files in DIR (an existing, empty directory), and returns once every node
# is idle. Tear it down with down.sh DIR.
#
#   munged      in the root namespaces, its socket in DIR (Unix sockets cross
#               network namespaces)
#   slurmctld   network namespace and hostname "ctl", 10.N.M.2
#   slurmd      one per node, each in its own network and UTS namespace:
#               hostnames n1..nK, 10.N.M.11..
#   login side  the root network namespace, 10.N.M.1 on a Linux bridge that
#               joins the namespaces' veths: srun, sbatch and scontrol run
#               here with SLURM_CONF=DIR/slurm.conf
#
# NODES (default 3) sets the number of nodes. With --watch-stdin a watchdog
# tears the cluster down when its standard input reaches end of file (the
# test that started it died without calling down.sh).
#
# Writes DIR/cluster.env (sourced by down.sh; read by the Go tests):
# SLURM_CONF, CLUSTER_NAME, NODES, HOST_ADDR, and what down.sh removes.
# Needs root, iproute2, util-linux, munge and Debian's slurmctld, slurmd and
# slurm-client (prepare.sh installs them).
set -euo pipefail

watch=0
if [ "${1:-}" = --watch-stdin ]; then watch=1; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [--watch-stdin] DIR" >&2; exit 2; }
dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
nodes=${NODES:-3}
cluster=bridgee2e

die() { echo "up.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (network namespaces, munged, slurmd)"
for c in ip nsenter unshare setsid flock munged mungekey slurmctld slurmd srun sbatch scontrol sinfo; do
  command -v "$c" >/dev/null || die "$c not found: run e2e/slurm/prepare.sh as root"
done
[ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
case $nodes in [1-9]) ;; *) die "NODES=$nodes: want 1 to 9" ;; esac

mkdir -p "$dir"/{munge,state,spool,log,run}
chmod 711 "$dir" "$dir/munge"

# Names and a /24 unused on this machine, chosen under a lock so that two
# clusters started at once (two test runs) get different ones.
exec 9>/run/bridge-e2e-slurm.lock
flock 9
tag=$(printf '%04x' $((RANDOM % 65536)))
while ip link show "sl${tag}br" >/dev/null 2>&1; do tag=$(printf '%04x' $((RANDOM % 65536))); done
net=
for i in $(seq 16 254); do
  # (not grep -q: with pipefail, ip's SIGPIPE would read as "unused")
  if ! ip -4 addr show | grep " 10\.231\.$i\." >/dev/null; then net=10.231.$i; break; fi
done
[ -n "$net" ] || die "no free 10.231.x.0/24 for the cluster network"

br=sl${tag}br
ctl_ns=bridge-e2e-$tag-ctl
node_ns=()
node_names=()
for i in $(seq 1 "$nodes"); do
  node_ns+=("bridge-e2e-$tag-n$i")
  node_names+=("n$i")
done

# What down.sh needs, written before anything is created so that a failure
# halfway is still torn down.
cat >"$dir/cluster.env" <<EOF
SLURM_CONF=$dir/slurm.conf
CLUSTER_NAME=$cluster
NODES="${node_names[*]}"
HOST_ADDR=$net.1
BRIDGE_IF=$br
NETNS="$ctl_ns ${node_ns[*]}"
EOF

up=0
trap '[ "$up" = 1 ] || { echo "up.sh: failed; logs in $dir/log" >&2; "$here/down.sh" "$dir" >&2 || true; }' EXIT

ip link add "$br" type bridge
ip addr add "$net.1/24" dev "$br"
ip link set "$br" up
# plug NS NAME ADDR: a veth from the bridge into network namespace NS.
plug() {
  ip netns add "$1"
  ip link add "sl${tag}$2" type veth peer name eth0 netns "$1"
  ip link set "sl${tag}$2" master "$br" up
  ip -n "$1" addr add "$3/24" dev eth0
  ip -n "$1" link set eth0 up
  ip -n "$1" link set lo up
}
flock -u 9
exec 9>&-
plug "$ctl_ns" c "$net.2"
for i in $(seq 1 "$nodes"); do plug "${node_ns[$((i - 1))]}" "n$i" "$net.$((10 + i))"; done

node_lines=
for i in $(seq 1 "$nodes"); do
  node_lines+="NodeName=n$i NodeHostname=n$i NodeAddr=$net.$((10 + i)) CPUs=2 State=UNKNOWN"$'\n'
done
# Why each setting is there: README.md beside this script.
cat >"$dir/slurm.conf" <<EOF
ClusterName=$cluster
SlurmctldHost=ctl($net.2)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmctldDebug=info
SlurmdDebug=info
$node_lines
PartitionName=e2e Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

# start NAME [--ns NS HOST] CMD...: a daemon in its own session, stdin closed,
# output to DIR/log/NAME.out, its pid in DIR/run/NAME.pid; with --ns,
# in network namespace NS and a new UTS namespace whose hostname is HOST.
# (exec keeps the pid through nsenter, unshare and sh.)
start() {
  local name=$1
  shift
  if [ "$1" = --ns ]; then
    set -- nsenter --net="/run/netns/$2" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$3" "${@:4}"
  fi
  setsid "$@" </dev/null >"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/run/$name.pid"
}

mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
start munged munged --foreground --force --socket="$dir/munge/munge.socket" \
  --key-file="$dir/munge/munge.key" --pid-file="$dir/run/munged.pid.own" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
for _ in $(seq 1 100); do [ -S "$dir/munge/munge.socket" ] && break; sleep 0.1; done
[ -S "$dir/munge/munge.socket" ] || die "munged did not create its socket; see $dir/log/munged.log"

export SLURM_CONF="$dir/slurm.conf"
start slurmctld --ns "$ctl_ns" ctl slurmctld -D -f "$dir/slurm.conf"
for i in $(seq 1 "$nodes"); do
  start "slurmd-n$i" --ns "${node_ns[$((i - 1))]}" "n$i" slurmd -D -f "$dir/slurm.conf"
done

if [ "$watch" = 1 ]; then
  # Holds the read end of the caller's pipe; EOF means the caller is gone.
  # (Through fd 3: a background job's standard input is /dev/null.)
  exec 3<&0
  setsid bash -c 'read -r _ <&3 || true; exec 3<&-; exec "$0" "$1"' "$here/down.sh" "$dir" >"$dir/log/watchdog.out" 2>&1 &
  exec 3<&-
  echo $! >"$dir/run/watchdog.pid"
fi

# Every node idle (registered and schedulable), within a minute.
deadline=$((SECONDS + 60))
while :; do
  # (sinfo fails until slurmctld answers)
  idle=$(timeout 10 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l) || idle=0
  [ "$idle" = "$nodes" ] && break
  if [ $SECONDS -ge $deadline ]; then
    timeout 10 sinfo -N >&2 || true
    die "$idle of $nodes nodes idle after 60 s"
  fi
  sleep 0.1
done
up=1
echo "cluster $cluster up: ${node_names[*]} on $net.0/24, SLURM_CONF=$dir/slurm.conf"
