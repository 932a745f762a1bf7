//go:build linux && cgo

package gpu

import (
	"context"
	"log/slog"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/metrics/cgroup"
	"github.com/bridge-dev/bridge/metrics/process"
)

// BenchmarkCollect is one sample of eight H100s through go-nvml's mock
// (no driver here): the collector's own cost per sample, without the
// driver's, with GPM off (as before Hopper) and on (one sample and one
// metrics call per GPU). scripts/gpu-check.sh measures a real GPU.
func BenchmarkCollect(b *testing.B) {
	for _, gpm := range []bool{false, true} {
		b.Run(map[bool]string{false: "gpm-off", true: "gpm-on"}[gpm], func(b *testing.B) {
			s := fakeServer(dgxh100.New(), 8)
			var drv *gpmDriver
			if gpm {
				drv = newGPMDriver(b, s)
			}
			c, err := New(Options{Lib: s})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if drv != nil {
				c.now = drv.clock.now
			}
			b.ReportAllocs()
			var pts metrics.Batch // reused, as the Sampler does
			for b.Loop() {
				if drv != nil {
					drv.clock.add(time.Second)
				}
				pts.Reset()
				if err := c.Collect(context.Background(), &pts); err != nil || len(pts.Points) == 0 {
					b.Fatalf("Collect: %d points, %v", len(pts.Points), err)
				}
			}
		})
	}
}

// BenchmarkSampleWithTree is one sample of the process collector and eight
// mock H100s whose compute processes are a real tree (sh and two sleeps):
// what the child's tree costs when both follow it. cpu-ns/op is the
// process's CPU time (every thread, GC included) per sample.
//
//	go test -run '^$' -bench SampleWithTree -benchmem ./metrics/gpu/
func BenchmarkSampleWithTree(b *testing.B) {
	cmd := exec.Command("sh", "-c", "sleep 600 & sleep 600 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Skipf("SKIP: cannot start sh: %v", err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	root := cmd.Process.Pid
	var cgroups *cgroup.Layout
	if l, err := cgroup.FindLayout(cgroup.Options{Log: slog.New(slog.DiscardHandler)}); err == nil {
		cgroups = l
	}
	tree, err := process.NewTree(process.TreeOptions{RootPID: func() int { return root }, Cgroups: cgroups})
	if err != nil {
		b.Fatal(err)
	}
	defer tree.Close()
	var pids []int
	for deadline := time.Now().Add(15 * time.Second); len(pids) < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if pids, err = tree.PIDs(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if len(pids) < 3 {
		b.Fatalf("tree of sh = %v, want sh and two sleeps", pids)
	}
	s := fakeServer(dgxh100.New(), 8)
	var infos []nvml.ProcessInfo
	for _, pid := range pids {
		infos = append(infos, nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: 1 << 30})
	}
	for i := range s.Devices {
		dev(s, i).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return infos, nvml.SUCCESS }
	}
	g, err := New(Options{Lib: s, ProcessTree: tree})
	if err != nil {
		b.Fatal(err)
	}
	p := process.New(tree, nil)
	smp := metrics.NewSampler([]metrics.Collector{p, g}, 5*time.Second, slog.New(slog.DiscardHandler))
	defer smp.Close()
	ctx := context.Background()
	smp.Sample(ctx)
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if smp := smp.Sample(ctx); len(smp.Points) == 0 {
			b.Fatal("empty sample")
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
