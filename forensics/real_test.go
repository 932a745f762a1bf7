package forensics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/supervisor"
)

// These tests classify real deaths: a helper process in a real v1 memory
// cgroup limited to 200 MiB is OOM-killed by the kernel, or killed with
// SIGKILL far from the limit, and the real cgroup collector's samples go
// through FromRun and Classify.

const helperEnv = "BRIDGE_FORENSICS_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper waits for "go" on stdin (sent once it is inside the cgroup), then
// allocates: "alloc" until the kernel kills it, "hold" 20 MB and waits.
func helper(mode string) int {
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		fmt.Fprintln(os.Stderr, "helper: no go:", line, err)
		return 2
	}
	var keep [][]byte
	touch := func(mb int) {
		for i := 0; i < mb; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
	}
	switch mode {
	case "alloc":
		// Far past the 200 MiB limit; reaching the end means no OOM kill.
		touch(1024)
		fmt.Fprintln(os.Stderr, "helper: allocated 1 GiB without being killed")
		return 3
	case "hold":
		touch(20)
		fmt.Println("ready")
		time.Sleep(time.Hour)
	}
	_ = keep
	return 2
}

type realRun struct {
	exit    supervisor.Exit
	acc     *summary.Accumulator
	version cgroup.Mode // the cgroup layout's mode
}

// runInCgroup starts the helper inside g, samples the cgroup until the
// helper ends (act may kill it), takes a final sample after the exit as
// bridge does, and returns what FromRun needs.
func runInCgroup(t *testing.T, g *cgrouptest.Group, mode string, act func(pid int, stdout *bufio.Reader)) realRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard, not a timing check
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", g.ShellEnter()+`exec "$0" -test.run=^$`, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitInCgroup(t, pid, g.Memory)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := cgroup.FindLayout(cgroup.Options{PID: pid, Log: log})
	if err != nil {
		t.Fatalf("cgroup layout for pid %d: %v", pid, err)
	}
	c := cgroup.New(l, log)
	// The mark before the job allocates, as bridge reads it at its start.
	ps := c.StartPeak(context.Background())
	if !ps.Known {
		t.Fatalf("the memory high-water mark of %s was not read: %s", g.Memory, ps.Why)
	}
	c.UsePeak(ps)
	acc := summary.NewWith(summary.Options{PeakStart: &summary.PeakStart{MB: metrics.MB(float64(ps.Bytes)), Reset: ps.Reset}})
	var seq int64
	sampleNow := func() {
		pts, err := collecttest.Collect(context.Background(), c)
		if err != nil {
			t.Logf("collect: %v", err)
		}
		acc.Add(metrics.Sample{Seq: seq, Time: time.Now(), Points: pts})
		seq++
	}
	sampleNow()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var state *os.ProcessState
	go func() {
		defer close(done)
		_ = cmd.Wait()
		state = cmd.ProcessState
	}()
	if act != nil {
		act(pid, bufio.NewReader(stdoutPipe))
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			sampleNow()
		}
	}
	exitAt := time.Now()
	sampleNow() // the final sample, after the exit
	ws := state.Sys().(syscall.WaitStatus)
	exit := supervisor.Exit{Code: ws.ExitStatus(), Time: exitAt}
	if ws.Signaled() {
		exit.Signal, exit.Code = ws.Signal(), 128+int(ws.Signal())
	}
	return realRun{exit: exit, acc: acc, version: l.Mode()}
}

// waitInCgroup waits until the shell has moved itself into dir.
func waitInCgroup(t *testing.T, pid int, dir string) {
	t.Helper()
	want := dir[strings.Index(dir, "/bridge-test-"):]
	for i := 0; i < 500; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err == nil && strings.Contains(string(b), want) {
			return
		}
		if errors.Is(err, os.ErrNotExist) {
			t.Fatalf("helper %d exited before joining %s", pid, dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("helper %d did not join %s", pid, dir)
}

func TestRealCgroupOOMKill(t *testing.T) {
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 << 20, QuotaUs: -1, PeriodUs: 100000})
	r := runInCgroup(t, g, "alloc", nil)
	e := forensics.FromRun(forensics.Run{Exit: r.exit, Acc: r.acc, CgroupVersion: string(r.version)})
	v := forensics.Classify(e)
	t.Logf("%d samples; %s (%s): %s", e.Samples, v.Reason, v.Rule, v.Summary)
	if r.exit.Signal != syscall.SIGKILL || r.exit.Code != 137 {
		t.Fatalf("helper exit %+v, want SIGKILL (137)", r.exit)
	}
	if !e.OOMKill.Known || !e.OOMKill.AtExit {
		t.Fatalf("no oom_kill counter after the exit: %+v", e.OOMKill)
	}
	if d := e.OOMKill.Delta(); d < 1 {
		t.Errorf("oom_kill delta %v, want >= 1", d)
	}
	if v.Reason != forensics.ReasonCgroupOOMKill {
		t.Errorf("reason %s, want %s", v.Reason, forensics.ReasonCgroupOOMKill)
	}
	// The kernel's high-water mark saw the limit even when the samples did not.
	if m := e.Memory; !m.PeakUsageMB.Known || m.PeakUsageMB.Value < 0.99*m.LimitMB {
		t.Errorf("peak usage %+v MB, want >= 99%% of the limit %v MB", m.PeakUsageMB, m.LimitMB)
	}
	if tags := v.Tags(e); tags[forensics.TagOOMKillCount] == "0" || tags[forensics.TagExitCode] != "137" {
		t.Errorf("tags %v", tags)
	}
}

func TestRealSIGKILLFarFromLimit(t *testing.T) {
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 200 << 20, QuotaUs: -1, PeriodUs: 100000})
	r := runInCgroup(t, g, "hold", func(pid int, out *bufio.Reader) {
		if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
			t.Errorf("helper said %q, %v", line, err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Errorf("kill -9 %d: %v", pid, err)
		}
	})
	e := forensics.FromRun(forensics.Run{Exit: r.exit, Acc: r.acc, CgroupVersion: string(r.version)})
	v := forensics.Classify(e)
	t.Logf("%d samples; %s (%s): %s", e.Samples, v.Reason, v.Rule, v.Summary)
	if r.exit.Signal != syscall.SIGKILL {
		t.Fatalf("helper exit %+v, want SIGKILL", r.exit)
	}
	if !e.OOMKill.Steady() {
		t.Errorf("oom_kill %+v, want known and steady", e.OOMKill)
	}
	if v.Reason != forensics.ReasonKilledBySignal || v.Evidence["forwarded"] != "false" {
		t.Errorf("reason %s forwarded=%s, want %s forwarded=false", v.Reason, v.Evidence["forwarded"], forensics.ReasonKilledBySignal)
	}
}
