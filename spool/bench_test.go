package spool

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/bridge-dev/bridge/metrics"
)

// BenchmarkOutageMemory measures the heap a spool holds when a tracker acks
// nothing for one and for three days at a 10 s interval (8640 samples of 60
// metrics a day): the figures for docs/reliability.md.
func BenchmarkOutageMemory(b *testing.B) {
	for _, days := range []int64{1, 3} {
		b.Run(fmt.Sprintf("days=%d", days), func(b *testing.B) { outageMemory(b, days*8640) })
	}
}

func outageMemory(b *testing.B, day int64) {
	pts := make([]metrics.Point, 60)
	for i := range pts {
		pts[i] = metrics.Named(fmt.Sprintf("container_metric_number_%02d_megabytes", i), float64(i)*1.5)
	}
	for b.Loop() {
		s, err := OpenWith(filepath.Join(b.TempDir(), "s.jsonl"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		s.Track("mlflow", "r")
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := int64(0); i < day; i++ {
			s.Append(metrics.Sample{Seq: i, Time: time.UnixMilli(i * 10_000), Points: pts})
			settle(s) // written before the next, as 10 s apart
		}
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "MiB")
		if n := s.PendingCount("mlflow", "r"); int64(n) != day {
			b.Fatalf("pending %d", n)
		}
		s.Close()
	}
}

// BenchmarkAppend is one sample's steady-state cost in the spool: the
// sample encoded, written and fsynced, then the tracker's acknowledgement of
// it recorded, with 37 series (every scope, no GPU). sync=0 fsyncs every
// write (Options.SyncEvery 0); sync=1s is group commit at bridge's default.
// Each record is waited for until the writer's goroutine has written it
// (Append itself returns before), so the figure is the whole cost.
func BenchmarkAppend(b *testing.B) {
	for _, every := range []time.Duration{0, time.Second} {
		b.Run("sync="+every.String(), func(b *testing.B) { benchAppend(b, every) })
	}
}

func benchAppend(b *testing.B, every time.Duration) {
	pts := benchSample(37).Points
	s, err := OpenWith(filepath.Join(b.TempDir(), "s.jsonl"), Options{SyncEvery: every})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Track("mlflow", "r"); err != nil {
		b.Fatal(err)
	}
	seq := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Append(metrics.Sample{Seq: seq, Time: time.UnixMilli(seq * 1000), Points: pts}); err != nil {
			b.Fatal(err)
		}
		settle(s)
		if err := s.Ack("mlflow", "r", seq); err != nil {
			b.Fatal(err)
		}
		settle(s)
		seq++
	}
}

// BenchmarkEncodeSample is the encoding of one sample of 37 series; json is
// the encoding/json path it replaced (for comparison).
func BenchmarkEncodeSample(b *testing.B) {
	smp := benchSample(37)
	b.Run("encoder", func(b *testing.B) {
		var e encoder
		b.ReportAllocs()
		for b.Loop() {
			e.sample(&smp)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			jsonSample(b, smp)
		}
	})
}

// BenchmarkOpen reads a spool of 200000 small samples, as a restarted bridge
// does before its child starts (a long outage's file): it must stay linear.
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "s.jsonl")
	var buf []byte
	buf = append(buf, `{"type":"start","time":1,"runs":{"mlflow":"r"}}`+"\n"...)
	for i := range 200000 {
		buf = fmt.Appendf(buf, `{"type":"sample","seq":%d,"ts":%d,"metrics":{"a":1,"b":2}}`+"\n", i, 1000+i)
	}
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// The spool's bounds count what a sample holds in memory
// (metrics.Sample.MemBytes): it must not be less than what the heap really
// holds for it, whether its names are shared with the collector (appended)
// or its own (read back from the file), for bridge's own samples, for
// passed-through series at the scrape's bounds, and for short names (where
// line bytes alone would undercount sevenfold). The ratios are logged.
func TestHeldBoundsTheHeap(t *testing.T) {
	long := strings.Repeat("v", 220)
	for _, tc := range []struct {
		name string
		n    int // samples
		pt   func(i int) metrics.Point
		pts  int
	}{
		{"own 60 series", 2000, func(i int) metrics.Point {
			return metrics.Named(fmt.Sprintf("container_metric_number_%02d_megabytes", i), float64(i)*1.5+1234.567)
		}, 60},
		{"1990 passed-through 247-byte names", 50, func(i int) metrics.Point {
			return metrics.Named(fmt.Sprintf("prom_maxkept__i_%07d__l_%s", i, long), 1)
		}, 1990},
		{"2000 short names", 100, func(i int) metrics.Point {
			return metrics.Named(fmt.Sprintf("prom_%d", i), 0)
		}, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts := make([]metrics.Point, tc.pts)
			for i := range pts {
				pts[i] = tc.pt(i)
			}
			opt := Options{MemSamples: 1 << 20, MemBytes: 1 << 40}
			path := filepath.Join(t.TempDir(), "s.jsonl")
			var s *Spool
			appended := heapGrowth(func() {
				var err error
				if s, err = OpenWith(path, opt); err != nil {
					t.Fatal(err)
				}
				s.Track("mlflow", "r")
				for i := range tc.n {
					s.Append(metrics.Sample{Seq: int64(i), Time: time.UnixMilli(1_700_000_000_000 + int64(i)*1000), Points: pts})
					settle(s) // as in bridge: one sample an interval, written before the next
				}
			})
			counted, line := s.ix.inMemBytes, s.ix.pend[0].n
			s.Close()
			s = nil // not counted as the reopened spool's
			readBack := heapGrowth(func() {
				var err error
				if s, err = OpenWith(path, opt); err != nil {
					t.Fatal(err)
				}
				s.Track("mlflow", "r")
			})
			defer s.Close()
			if s.ix.inMem != tc.n || s.ix.inMemBytes != counted {
				t.Fatalf("read back: %d samples counted %d bytes, want %d and %d", s.ix.inMem, s.ix.inMemBytes, tc.n, counted)
			}
			// Besides the samples: the index (an entry each, its slice up to
			// twice that) and the writer's and encoder's buffers of a line.
			slack := int64(tc.n)*2*int64(unsafe.Sizeof(entry{})) + 2*int64(line) + 64<<10
			for what, got := range map[string]int64{"appended": appended, "read back": readBack} {
				if got > counted+slack {
					t.Errorf("%s: the heap grew %d bytes, the spool counted %d (+%d slack)", what, got, counted, slack)
				}
			}
			per := func(b int64) float64 { return float64(b) / float64(tc.n) / float64(line) }
			t.Logf("line %d bytes; heap per line byte: appended %.2f, read back %.2f; counted %.2f",
				line, per(appended), per(readBack), per(counted))
		})
	}
}

// heapGrowth is how much the live heap grew over f.
func heapGrowth(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// BenchmarkWriteStartManyTags writes a start record whose tags describe
// many InfiniBand ports (four tags a port, as the collector's Tags):
// 10,000 ports are past the record's bound, so most are left out. The
// time is what it adds before the child starts.
func BenchmarkWriteStartManyTags(b *testing.B) {
	for _, ports := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("ports=%d", ports), func(b *testing.B) {
			info := map[string]string{"bridge.version": "dev", "bridge.hostname": "node-a"}
			for i := range ports {
				k := fmt.Sprintf("bridge.infiniband.mlx5_%d.%d.", i/100, i%100+1)
				info[k+"state"], info[k+"phys_state"], info[k+"link_layer"], info[k+"rate"] = "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/s"
			}
			for b.Loop() {
				s, err := OpenWith(filepath.Join(b.TempDir(), "s.jsonl"), Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.WriteStart(Record{Time: 1, PID: 1, Info: info}); err != nil {
					b.Fatal(err)
				}
				settle(s)
				s.Close()
			}
		})
	}
}
