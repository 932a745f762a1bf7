package process

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/collecttest"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkCollect measures one sample of a real tree of three processes
// (sh and two sleeps; BRIDGE_BENCH_TREE: another shell command) on this machine's /proc, by each way of finding the
// tree that the machine allows. Compare "scan" with the others under
// bench/spawn.sh's 2,000 idle processes: only the scan grows.
//
//	go test -run '^$' -bench Collect -benchmem ./metrics/process/
func BenchmarkCollect(b *testing.B) {
	// BRIDGE_BENCH_TREE replaces the tree, e.g. processes with many threads:
	// BRIDGE_BENCH_TREE="exec python3 ../../bench/threads.py 8".
	tree := "sleep 600 & sleep 600 & wait"
	if t := os.Getenv("BRIDGE_BENCH_TREE"); t != "" {
		tree = t
	}
	cmd := exec.Command("sh", "-c", tree)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Skipf("SKIP: cannot start sh: %v", err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	root := cmd.Process.Pid
	ctx := kfile.Bounded(context.Background()) // as the Sampler gives it: its reads run inline
	for _, method := range []string{viaChildren, viaCgroup, viaScan} {
		b.Run(method, func(b *testing.B) {
			c := newCollector(b, TreeOptions{RootPID: func() int { return root }, Adopter: func() int { return os.Getpid() },
				Cgroups: realCgroups(b)})
			// Wait (at most 15 s) until the tree has its processes and has
			// stopped growing for a second.
			last, stable := 0, time.Now()
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				n := len(c.mustTree(b, root, os.Getpid()))
				if n != last {
					last, stable = n, time.Now()
				}
				if n >= 3 && time.Since(stable) > time.Second {
					break
				}
			}
			if !c.force(method) {
				b.Skipf("SKIP: finding the tree by %s is not possible on this machine", method)
			}
			if _, err := collecttest.Collect(ctx, c); err != nil {
				b.Fatal(err)
			}
			var pts metrics.Batch // reused, as the Sampler does
			for b.Loop() {
				pts.Reset()
				if err := c.Collect(ctx, &pts); err != nil || len(pts.Points) < 4 {
					b.Fatalf("Collect = %v, %v", pts.Points, err)
				}
			}
			b.ReportMetric(float64(len(c.tree.all)), "stats/op")
		})
	}
}

// BenchmarkParseStat measures parsing one /proc/<pid>/stat line.
func BenchmarkParseStat(b *testing.B) {
	line := []byte(fakeProc{pid: 103, ppid: 101, comm: "pt_data_worker", utime: 7, stime: 3, threads: 4, start: 900, rssPages: 321}.statLine())
	for b.Loop() {
		if _, err := parseStat(line); err != nil {
			b.Fatal(err)
		}
	}
}

func (c *Collector) mustTree(b *testing.B, root, adopter int) []procStat {
	b.Helper()
	s, err := c.tree.read(kfile.Bounded(context.Background()), root, adopter)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// force makes the finder use method; false when it cannot work here.
func (c *Collector) force(method string) bool {
	f := &c.tree.find
	f.choose(kfile.Bounded(context.Background()), f.root, f.adopter)
	f.both = false // no reconsidering: measure this method alone
	switch method {
	case viaChildren:
		return f.method == viaChildren
	case viaCgroup:
		// choose prefers children links; look the cgroups up directly.
		d := f.cgroupDir(kfile.Bounded(context.Background()), f.root)
		if d == "" {
			return false
		}
		f.cgroupDirs = []string{d}
		if a := f.cgroupDir(kfile.Bounded(context.Background()), f.adopter); a != "" && a != d {
			f.cgroupDirs = append(f.cgroupDirs, a)
		}
	}
	f.method = method
	return true
}
