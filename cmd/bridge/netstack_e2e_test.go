package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
	nodemetrics "github.com/bridge-dev/bridge/metrics/node"
)

// A bridge and its veth, made by the real kernel in a network namespace
// of the test's own: bridge runs there (its sysfs mounted for
// --sys-root), a peer namespace sends 2,000 UDP datagrams to the bridge's
// address over the veth, and the kernel counts each of them twice in that
// namespace's /proc/net/dev: received on the veth (v1) and again on the
// bridge (br0). netns_network_receive_megabytes counts them once, the
// veth's; the run's start says v1 was counted and br0 left out.
func TestNetStackingEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes network and mount namespaces, a bridge and a veth pair (scripts/test.sh runs as root)")
	}
	var tools []string
	for _, tool := range []string{"ip", "nsenter", "unshare", "mount", "python3"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("needs %s (iproute2, util-linux, python3) to make the namespaces and send the traffic", tool)
		}
		tools = append(tools, p)
	}
	python := tools[4]
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	spoolFile := filepath.Join(dir, "spool.jsonl")
	// The child sends the traffic from the peer once told to, with
	// /proc/net/dev (bridge's namespace's) before and after.
	child := `while [ ! -e go ]; do sleep 0.05; done
cat /proc/net/dev > before
nsenter -t "$(cat peer)" -n "$PY" -c 'import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(2000):
    s.sendto(b"x" * 1400, ("10.77.0.1", 9))'
cat /proc/net/dev > after
touch sent
while [ ! -e stop ]; do sleep 0.05; done`
	script := `set -e
mount -t sysfs sysfs "$DIR/sys"
ip link set lo up
ip link add br0 type bridge
ip link add v1 type veth peer name v2
ip link set v1 master br0
ip addr add 10.77.0.1/24 dev br0
ip link set br0 up
ip link set v1 up
unshare -n sleep 600 </dev/null >/dev/null 2>&1 &
peer=$!
echo $peer > "$DIR/peer"
while [ "$(readlink /proc/$peer/ns/net)" = "$(readlink /proc/self/ns/net)" ]; do sleep 0.01; done
ip link set v2 netns $peer
nsenter -t $peer -n sh -c 'ip link set lo up && ip addr add 10.77.0.2/24 dev v2 && ip link set v2 up'
exec "$@"`
	job := exec.Command("sh", "-c", script, "sh", testbin.Bridge(t), "--interval=1s", "--trackers=none", "--sys-root="+filepath.Join(dir, "sys"),
		"--", "sh", "-c", child)
	job.Dir = dir
	job.Env = cleanEnv("DIR="+dir, "PY="+python, "BRIDGE_SPOOL="+spoolFile, "HOME="+dir)
	job.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET}
	var out syncbuf.Buffer
	job.Stdout, job.Stderr = &out, &out
	// The peer namespace's process: bridge's child after the exec, not
	// the job's, so it outlives the job unless killed.
	killPeer := func() {
		if b, err := os.ReadFile(filepath.Join(dir, "peer")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	j := startStoppable(t, job, dir, killPeer)
	stop, exited := j.stop, j.exited
	samples := func() []metrics.Sample { return spoolSamples(t, spoolFile) }
	received := func(s metrics.Sample) (float64, bool) { return s.Value(nodemetrics.NetnsReceive.Name) }
	waitfor.Cond(t, 2*time.Minute, "a spooled sample with the namespace's traffic", func() bool {
		return slices.ContainsFunc(samples(), func(s metrics.Sample) bool { _, ok := received(s); return ok })
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 2*time.Minute, "the child's traffic sent", func() bool {
		_, err := os.Stat(filepath.Join(dir, "sent"))
		return err == nil
	})
	rx := func(file, iface string) float64 {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			name, rest, ok := strings.Cut(line, ":")
			if ok && strings.TrimSpace(name) == iface {
				v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		t.Fatalf("no %s in %s:\n%s", iface, file, b)
		return 0
	}
	v1, br0 := rx("after", "v1")-rx("before", "v1"), rx("after", "br0")-rx("before", "br0")
	if v1 < 2000*1400 || br0 < 2000*1400 {
		t.Fatalf("the kernel counted %v bytes received on v1 and %v on br0; want the 2,000 datagrams on each", v1, br0)
	}
	// A sample after the traffic: the total holds the veth's bytes once,
	// with room for what the namespace received before the child's
	// "before" (IPv6 neighbour discovery: a few hundred bytes).
	var total float64
	waitfor.Cond(t, 2*time.Minute, "a spooled sample with the traffic counted", func() bool {
		for _, s := range samples() {
			if v, ok := received(s); ok && v >= metrics.MB(v1) {
				total = v
				return true
			}
		}
		return false
	})
	if total > metrics.MB(v1+10_000) {
		t.Errorf("netns_network_receive_megabytes %v: want the veth's %v MB once (the bridge's %v MB again would make %v)",
			total, metrics.MB(v1), metrics.MB(br0), metrics.MB(v1+br0))
	}

	killPeer()
	stop()
	select {
	case <-exited:
		if code := exitCode(t, j.err); code != 0 {
			t.Fatalf("bridge exited %d, want the child's 0\n%s", code, &out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("bridge did not exit 2 minutes after its child was told to stop\n%s", &out)
	}
	_, _, attempts, err := spooltest.ReadFile(spoolFile)
	if err != nil || len(attempts) == 0 {
		t.Fatalf("no attempt in the spool: %v\n%s", err, &out)
	}
	info := attempts[0].Start.Info
	if info[nodemetrics.TagNetnsCounted] != "v1" || info[nodemetrics.TagNetnsLeftOut] != "br0: a bridge over v1" {
		t.Errorf("start tags %s=%q, %s=%q; want v1 counted, br0 left out as a bridge over v1",
			nodemetrics.TagNetnsCounted, info[nodemetrics.TagNetnsCounted], nodemetrics.TagNetnsLeftOut, info[nodemetrics.TagNetnsLeftOut])
	}
}
