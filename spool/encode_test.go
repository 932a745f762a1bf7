package spool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// jsonSample is how Append encoded a sample before the encoder: a map of the
// values in a Record through encoding/json. The encoder must match it byte
// for byte.
func jsonSample(t testing.TB, smp metrics.Sample) []byte {
	vals := make(Values, len(smp.Points))
	for _, p := range smp.Points {
		vals[p.Name()] = p.Value
	}
	seq := smp.Seq
	b, err := json.Marshal(Record{Type: TypeSample, Seq: &seq, TS: smp.Time.UnixMilli(), Metrics: vals})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func jsonAck(t testing.TB, sink, run string, seq int64) []byte {
	b, err := json.Marshal(Record{Type: TypeAck, Sink: sink, Run: run, Seq: &seq})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// Names and values that exercise every branch of encoding/json's output:
// HTML and control characters, invalid UTF-8, U+2028/2029, non-finite and
// extreme floats, repeated and unsorted names, no points, time zero.
func TestEncoderMatchesJSON(t *testing.T) {
	names := []string{
		"container_memory_working_set_megabytes", "", "a\"b\\c", "<script>&amp;</script>",
		"tab\there\nnl\r\b\f\x00\x01\x1f\x7f", "caf\xc3\xa9", "bad\xff\xfeutf8", "\xe2\x80\xa8\xe2\x80\xa9",
		"half\xe2\x80", "emoji😀", "z", "a", "a",
	}
	values := []float64{0, 1.5, -2, math.NaN(), math.Inf(1), math.Inf(-1), 1e21, 1e20, 1e-6, 1e-7,
		-1e-7, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Copysign(0, -1), 5e-324}
	var e encoder
	check := func(smp metrics.Sample) {
		t.Helper()
		if got, want := e.sample(&smp), jsonSample(t, smp); !bytes.Equal(got, want) {
			t.Fatalf("sample %+v:\n got %s\nwant %s", smp, got, want)
		}
	}
	for i, n := range names {
		check(metrics.Sample{Seq: int64(i), Time: time.UnixMilli(1_700_000_000_123), Points: []metrics.Point{metrics.Named(n, values[i%len(values)])}})
	}
	for i, v := range values {
		check(metrics.Sample{Seq: -int64(i), Time: time.UnixMilli(int64(i) * 7), Points: []metrics.Point{metrics.Named("v", v)}})
	}
	var all []metrics.Point
	for i, n := range names {
		all = append(all, metrics.Named(n, values[i%len(values)]))
	}
	check(metrics.Sample{Seq: math.MaxInt64, Time: time.UnixMilli(-5), Points: all}) // unsorted, repeated
	check(metrics.Sample{Seq: 3})                                                    // no points, time zero
	check(metrics.Sample{Seq: 3, Time: time.Unix(0, 0), Points: []metrics.Point{}})
	for _, n := range names {
		for _, run := range []string{"", "r1", n} {
			if got, want := e.ack(n, run, 42), jsonAck(t, n, run, 42); !bytes.Equal(got, want) {
				t.Fatalf("ack %q %q:\n got %s\nwant %s", n, run, got, want)
			}
		}
	}
}

// FuzzAppendSample compares the encoder with encoding/json on arbitrary
// names (names holds them split by NUL bytes) and values, seqs and times.
func FuzzAppendSample(f *testing.F) {
	f.Add("container_cpu_usage_percent\x00node_memory_used_megabytes", 1.5, -2.25, int64(7), int64(1_700_000_000_000))
	f.Add("b\x00a\x00b", math.Inf(1), math.NaN(), int64(0), int64(0))
	f.Add("<&>\x00\xff\x00\u2028\x00\"\\\n\t", 1e21, 1e-7, int64(-1), int64(-3))
	f.Add("", 0.0, 0.0, int64(1), int64(1))
	f.Fuzz(func(t *testing.T, names string, v1, v2 float64, seq, ts int64) {
		var pts []metrics.Point
		if names != "" {
			for i, n := range bytes.Split([]byte(names), []byte{0}) {
				v := v1
				if i%2 == 1 {
					v = v2*float64(i) + v1
				}
				pts = append(pts, metrics.Named(string(n), v))
			}
		}
		smp := metrics.Sample{Seq: seq, Time: time.UnixMilli(ts), Points: pts}
		var e encoder
		if got, want := e.sample(&smp), jsonSample(t, smp); !bytes.Equal(got, want) {
			t.Fatalf("sample differs:\n got %s\nwant %s", got, want)
		}
		if len(pts) > 0 {
			if got, want := e.ack(pts[0].Name(), names, seq), jsonAck(t, pts[0].Name(), names, seq); !bytes.Equal(got, want) {
				t.Fatalf("ack differs:\n got %s\nwant %s", got, want)
			}
		}
	})
}

// The encoder allocates nothing once its buffers have grown.
func TestEncoderAllocs(t *testing.T) {
	smp := benchSample(37)
	var e encoder
	e.sample(&smp)
	if n := testing.AllocsPerRun(100, func() { e.sample(&smp) }); n != 0 {
		t.Errorf("%v allocations a sample, want 0", n)
	}
	smp.Points[0], smp.Points[1] = smp.Points[1], smp.Points[0] // the sorting path
	e.sample(&smp)
	if n := testing.AllocsPerRun(100, func() { e.sample(&smp) }); n != 0 {
		t.Errorf("%v allocations an unsorted sample, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { e.ack("mlflow", "0123456789abcdef", 99) }); n != 0 {
		t.Errorf("%v allocations an ack, want 0", n)
	}
}

func benchSample(n int) metrics.Sample {
	pts := make([]metrics.Point, n)
	for i := range pts {
		pts[i] = metrics.Named(fmt.Sprintf("container_metric_number_%02d_megabytes", i), float64(i)*1.5)
	}
	return metrics.Sample{Seq: 12345, Time: time.UnixMilli(1_700_000_000_000), Points: pts}
}
