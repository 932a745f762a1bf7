package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// writeFile writes a fixture file under root, creating its directories.
func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cpuLine is the aggregate or per-CPU line of /proc/stat, in ticks.
type cpuLine struct {
	user, nice, system, idle, iowait, irq, softirq, steal, guest, guestNice int
}

func (l cpuLine) format(name string) string {
	return fmt.Sprintf("%s %d %d %d %d %d %d %d %d %d %d\n", name,
		l.user, l.nice, l.system, l.idle, l.iowait, l.irq, l.softirq, l.steal, l.guest, l.guestNice)
}

// statFile is a real-shaped /proc/stat with total as the aggregate line and
// ncpu per-CPU lines.
func statFile(total cpuLine, ncpu int) string {
	s := total.format("cpu ")
	for i := range ncpu {
		s += cpuLine{user: total.user / ncpu, idle: total.idle / ncpu}.format(fmt.Sprintf("cpu%d", i))
	}
	return s + "intr 1405632 0 9 0 0 0 0 0 0 0 0\n" +
		"ctxt 2822411\n" +
		"btime 1764682500\n" +
		"processes 12640\n" +
		"procs_running 3\n" +
		"procs_blocked 0\n" +
		"softirq 244204 0 28422 7 9917 92727 0 335 47517 1 65278\n"
}

// meminfoFile is a real-shaped /proc/meminfo; avail < 0 leaves MemAvailable out.
func meminfoFile(totalKB, availKB int) string {
	s := fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\n", totalKB, totalKB/2)
	if availKB >= 0 {
		s += fmt.Sprintf("MemAvailable:   %d kB\n", availKB)
	}
	return s + "Buffers:           25676 kB\nCached:          1286528 kB\nSwapCached:            0 kB\n" +
		"Active:           288528 kB\nInactive:        1023060 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n"
}

type ifCounters struct {
	name   string
	rx, tx uint64
}

// netDevFile is a real-shaped /proc/net/dev.
func netDevFile(ifs ...ifCounters) string {
	s := "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	for _, i := range ifs {
		s += fmt.Sprintf("%6s: %8d %7d    0    0    0     0          0         0 %8d %7d    0    0    0     0       0          0\n",
			i.name, i.rx, i.rx/1000, i.tx, i.tx/1000)
	}
	return s
}

func psiFile(some, full float64, withFull bool) string {
	s := fmt.Sprintf("some avg10=%.2f avg60=1.94 avg300=1.12 total=7000569\n", some)
	if withFull {
		s += fmt.Sprintf("full avg10=%.2f avg60=1.54 avg300=0.89 total=5785092\n", full)
	}
	return s
}

// fakeClock advances by step on every call after the first.
type fakeClock struct {
	t    time.Time
	step time.Duration
	n    int
}

func (c *fakeClock) now() time.Time {
	if c.n > 0 {
		c.t = c.t.Add(c.step)
	}
	c.n++
	return c.t
}

// newFixture returns a collector over root with a fake clock stepping 10 s.
func newFixture(t *testing.T, root string) *Collector {
	t.Helper()
	c, err := New(Options{ProcRoot: root, SysRoot: filepath.Join(root, "sys"), RootfsPath: root})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1764682500, 0), step: 10 * time.Second}
	c.now = clk.now
	return c
}

func collect(t *testing.T, c *Collector) map[string]explained {
	t.Helper()
	b, err := collectBatch(c)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return byName(t, b)
}

// collectBatch is one Collect that says where each point came from.
func collectBatch(c *Collector) (*metrics.Batch, error) {
	b := &metrics.Batch{Explain: true}
	return b, c.Collect(context.Background(), b)
}

// explained is a point and its source.
type explained struct {
	metrics.Point
	Source string
}

// byName indexes b's points by name, checking that each is one the
// collector's registration declares, and only once.
func byName(t *testing.T, b *metrics.Batch) map[string]explained {
	t.Helper()
	m := map[string]explained{}
	for i, p := range b.Points {
		if !slices.Contains(Series, p.Desc) {
			t.Errorf("point %s is not among Series", p.Name())
		}
		if _, dup := m[p.Name()]; dup {
			t.Errorf("point %s emitted twice", p.Name())
		}
		e := explained{Point: p}
		if b.Explain {
			e.Source = b.Sources[i]
		}
		m[p.Name()] = e
	}
	return m
}

func near(a, b, tol float64) bool { return a-b <= tol && b-a <= tol }
