#!/bin/busybox sh
# /init of the cgroup v2 guest. It sets up a cgroup v2 hierarchy, runs every
# case in sequence and writes what bridge reported, with the kernel's own
# files read right after, to the second serial port as sections:
#   @@BEGIN case / @@FILE name / content / @@END case
# The test on the host parses them. MLflow's address and the experiment come
# from the kernel command line (unknown name=value parameters become init's
# environment): E2E_MLFLOW, E2E_EXPERIMENT.
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 none /sys/fs/cgroup
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net virtio_blk; do
  insmod /lib/modules/$m.ko || echo "init: insmod $m failed"
done
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
for i in $(seq 50); do [ -b /dev/vda ] && break; sleep 0.1; done

OUT=/dev/ttyS1
CG=/sys/fs/cgroup
ALL="+memory +cpu +cpuset +pids +io"
echo "$ALL" > $CG/cgroup.subtree_control
export MLFLOW_TRACKING_URI="$E2E_MLFLOW" MLFLOW_EXPERIMENT_NAME="$E2E_EXPERIMENT"
export BRIDGE_LOG_LEVEL=warn

# put NAME FILE: one file into the current section.
put() { echo "@@FILE $1"; cat "$2" 2>&1; echo; }
# val NAME TEXT
val() { echo "@@FILE $1"; echo "$2"; }
# enter DIR CMD...: run CMD inside cgroup DIR.
enter() { d=$1; shift; sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$d" "$@"; }
# waitfile FILE: the workload's "load in place" marker.
waitfile() { for i in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done; echo "init: $1 never appeared"; }
section() { echo "@@BEGIN $1"; }
done_() { echo "@@END $1"; }
# supervise NAME DIR CMD...: bridge runs CMD inside DIR, posting to MLflow.
# $WRAP, when set, is a command that execs bridge (workload nocap).
WRAP=
supervise() {
  name=$1 d=$2; shift 2
  rm -f /tmp/spool-$name.jsonl
  enter "$d" env BRIDGE_SPOOL=/tmp/spool-$name.jsonl $WRAP bridge --interval=500ms --fast-interval=250ms \
    --scopes=container,node,process --trackers=mlflow --run-name="$name" -- "$@" >/tmp/out-$name 2>/tmp/err-$name
  val exit_code $?
  put stdout /tmp/out-$name
  put stderr /tmp/err-$name
  put spool /tmp/spool-$name.jsonl
}

{
val kernel "$(uname -r)"
val nproc "$(grep -c ^processor /proc/cpuinfo)"

# 1. Limits: a tighter memory.max on the parent ("pod"), cpu.max quota on the
#    container, two burning threads under it. Counters are read by the kernel
#    right before and after bridge's sample: bridge's cumulative values must
#    lie between them, its rate match theirs.
section limits
P=$CG/pod1; C=$P/ctr
mkdir -p $C && echo "$ALL" > $P/cgroup.subtree_control
echo 150M > $P/memory.max; echo 200M > $C/memory.max; echo "50000 100000" > $C/cpu.max
enter $C env WORKLOAD_READY=/tmp/burn.ready workload burn 2 30s >/tmp/wl1 2>&1 &
wl=$!
waitfile /tmp/burn.ready; sleep 1
put t0 /proc/uptime; put cpu.stat.0 $C/cpu.stat
enter $C bridge sample --json --window=8s --scopes=container >/tmp/s1 2>/tmp/e1
val sample_rc $?
put t1 /proc/uptime; put cpu.stat.1 $C/cpu.stat
put sample /tmp/s1; put sample_err /tmp/e1
put pod.memory.max $P/memory.max; put ctr.memory.max $C/memory.max; put ctr.cpu.max $C/cpu.max
put ctr.cpuset.cpus.effective $C/cpuset.cpus.effective
for r in cpu memory io; do put ctr.$r.pressure $C/$r.pressure; done
kill $wl 2>/dev/null; wait
done_ limits

# 2. A cpuset smaller than the guest's CPUs is the CPU limit when tighter
#    than the quota.
section cpuset
C=$CG/cpuset1; mkdir -p $C
echo "150000 100000" > $C/cpu.max; echo 0 > $C/cpuset.cpus
enter $C bridge sample --json --window=0s --scopes=container >/tmp/s2 2>/tmp/e2
val sample_rc $?
put sample /tmp/s2; put sample_err /tmp/e2
put cpu.max $C/cpu.max; put cpuset.cpus.effective $C/cpuset.cpus.effective
done_ cpuset

# 3. Working set with page cache present: the workload reads 96 MiB of the
#    disk (page cache) and holds 32 MiB of its own.
section workingset
C=$CG/ws1; mkdir -p $C; echo 400M > $C/memory.max
enter $C env WORKLOAD_READY=/tmp/ws.ready workload read /dev/vda 96 32 60s >/tmp/wl3 2>&1 &
wl=$!
waitfile /tmp/ws.ready
put memory.current.0 $C/memory.current; put memory.stat.0 $C/memory.stat
enter $C bridge sample --json --window=0s --scopes=container >/tmp/s3 2>/tmp/e3
val sample_rc $?
put memory.current.1 $C/memory.current; put memory.stat.1 $C/memory.stat
put sample /tmp/s3; put sample_err /tmp/e3
kill $wl 2>/dev/null; wait
done_ workingset

# 4. A cgroup namespace: the container sees its own cgroup as the root.
section cgns
C=$CG/ns1; mkdir -p $C; echo 180M > $C/memory.max; echo "30000 100000" > $C/cpu.max
enter $C workload cgns sh -c 'cat /proc/self/cgroup > /tmp/ns.cgroup; exec bridge sample --json --window=0s --scopes=container' >/tmp/s4 2>/tmp/e4
val sample_rc $?
put self.cgroup /tmp/ns.cgroup; put sample /tmp/s4; put sample_err /tmp/e4
put memory.max $C/memory.max; put cpu.max $C/cpu.max
done_ cgns

# 5. A real OOM kill at the container's own limit.
section oom_ctr
P=$CG/pod5; C=$P/ctr; mkdir -p $C && echo "$ALL" > $P/cgroup.subtree_control
echo 100M > $C/memory.max
supervise oom_ctr $C workload alloc 8 600 0s
put ctr.memory.events $C/memory.events; put ctr.memory.peak $C/memory.peak; put ctr.memory.max $C/memory.max
done_ oom_ctr

# 6. An OOM kill at the parent's (pod's) tighter limit.
section oom_pod
P=$CG/pod6; C=$P/ctr; mkdir -p $C && echo "$ALL" > $P/cgroup.subtree_control
echo 100M > $P/memory.max; echo 300M > $C/memory.max
supervise oom_pod $C workload alloc 8 600 0s
put pod.memory.events $P/memory.events; put ctr.memory.events $C/memory.events
put pod.memory.max $P/memory.max; put ctr.memory.peak $C/memory.peak
done_ oom_pod

# 7. memory.oom.group=1: the whole group is killed (bridge too, unless its
#    oom_score_adj of -1000 spares it). A second attempt on the same spool
#    then reports a lost first attempt.
section oom_group
C=$CG/grp7; mkdir -p $C; echo 100M > $C/memory.max; echo 1 > $C/memory.oom.group
supervise oom_group $C workload alloc 8 600 0s
put memory.events $C/memory.events
C2=$CG/grp7b; mkdir -p $C2
enter $C2 env BRIDGE_SPOOL=/tmp/spool-oom_group.jsonl bridge --interval=500ms --scopes=container \
  --trackers=mlflow --run-name=oom_group -- true >/tmp/out-oom_group2 2>/tmp/err-oom_group2
val exit_code2 $?
put stderr2 /tmp/err-oom_group2; put spool2 /tmp/spool-oom_group.jsonl
done_ oom_group

# 7b. The same without CAP_SYS_RESOURCE (Docker's default set): bridge cannot
#     lower its oom_score_adj and dies with the group; the next attempt on the
#     same spool reports the lost one.
section oom_group_nocap
C=$CG/grp7c; mkdir -p $C; echo 100M > $C/memory.max; echo 1 > $C/memory.oom.group
# bridge says at debug level that it could not lower its oom_score_adj.
WRAP="env BRIDGE_LOG_LEVEL=debug workload nocap"
supervise oom_group_nocap $C workload alloc 8 600 0s
WRAP=
put memory.events $C/memory.events
C2=$CG/grp7d; mkdir -p $C2
enter $C2 env BRIDGE_SPOOL=/tmp/spool-oom_group_nocap.jsonl bridge --interval=500ms --scopes=container \
  --trackers=mlflow --run-name=oom_group_nocap -- true >/tmp/out-oom_group_nocap2 2>/tmp/err-oom_group_nocap2
val exit_code2 $?
put stderr2 /tmp/err-oom_group_nocap2; put spool2 /tmp/spool-oom_group_nocap.jsonl
done_ oom_group_nocap

# 8. memory.high reached: page cache beyond it is reclaimed, the high counter
#    rises, nothing is killed.
section high
C=$CG/high8; mkdir -p $C; echo 48M > $C/memory.high; echo 400M > $C/memory.max
supervise high $C workload read /dev/vda@128 120 8 2s
put memory.events $C/memory.events; put memory.pressure $C/memory.pressure; put memory.high $C/memory.high
done_ high

# 9. pids.max reached: forks fail, the cgroup's pids.events counts them.
section pids
C=$CG/pids9; mkdir -p $C; echo 64 > $C/pids.max
supervise pids $C workload fork 80 2s
put pids.events $C/pids.events; put pids.max $C/pids.max
done_ pids

# 10. A cgroup jobs share: an earlier process leaves memory.peak at about
#     160 MiB, then bridge runs a small job there. Where the kernel resets
#     memory.peak for one open file (Linux 6.12), bridge's mark is the
#     job's; otherwise the mark predates the job and bridge's figures are
#     the sampled ones. reset_probe is the kernel's answer to a write by
#     the shell (its own open file: nothing the case reads is reset).
section peak_shared
C=$CG/shared10; mkdir -p $C; echo 400M > $C/memory.max
enter $C workload alloc 16 160 0s >/dev/null 2>&1
put memory.peak.before $C/memory.peak
if ( echo reset > $C/memory.peak ) 2>/tmp/probe.err; then val reset_probe ok; else val reset_probe "refused: $(cat /tmp/probe.err)"; fi
WRAP="env BRIDGE_LOG_LEVEL=debug"
supervise peak_shared $C workload sleep 1s
WRAP=
put memory.peak.after $C/memory.peak
done_ peak_shared
} >$OUT 2>&1
echo "@@DONE" >$OUT
sync
poweroff -f
