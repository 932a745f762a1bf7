package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

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
		pts[i] = metrics.Point{Name: fmt.Sprintf("container_metric_number_%02d_megabytes", i), Value: float64(i) * 1.5}
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
		if err := s.Ack("mlflow", "r", seq); err != nil {
			b.Fatal(err)
		}
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
