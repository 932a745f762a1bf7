package metrics

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// The range check, one row an edge: a batch as one collector adds it, and
// the names that leave it.
func TestCheck(t *testing.T) {
	pct := &Desc{Name: "x_percentage", Unit: UnitPercentage}
	ratio := &Desc{Name: "x_ratio", Unit: UnitRatio}
	mb := &Desc{Name: "x_megabytes", Unit: UnitMegabytes}
	rate := &Desc{Name: "x_megabytes_per_second", Unit: UnitMegabytesPerSecond}
	temp := &Desc{Name: "x_celsius", Unit: UnitCelsius}
	watts := &Desc{Name: "x_watts", Unit: UnitWatts}
	joules := &Desc{Name: "x_joules", Unit: UnitJoules}
	count := &Desc{Name: "x_count", Unit: UnitCount}
	mhz := &Desc{Name: "x_mhz", Unit: UnitMHz}
	secs := &Desc{Name: "x_seconds", Unit: UnitSeconds}
	cores := &Desc{Name: "x_cores", Unit: UnitCores}
	load := &Desc{Name: "x_load", Unit: UnitLoad}
	free := &Desc{Name: "prom_x"} // passed through: no unit
	over := &Desc{Name: "x_over_percentage", Unit: UnitPercentage, Valid: Range{0, 1000}}
	total := &Desc{Name: "mem_total_megabytes", Unit: UnitMegabytes}
	used := &Desc{Name: "mem_used_megabytes", Unit: UnitMegabytes, Total: total}
	gpuTotal := &Desc{Name: "memory_total_megabytes", Unit: UnitMegabytes, PerGPU: true}
	gpuUsed := &Desc{Name: "memory_used_megabytes", Unit: UnitMegabytes, PerGPU: true, Total: gpuTotal}
	portTotal := &Desc{Name: "p_<port>_total_count", Unit: UnitCount, Instance: []string{"port"}}
	portUsed := &Desc{Name: "p_<port>_used_count", Unit: UnitCount, Instance: []string{"port"}, Total: portTotal}

	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name string
		pts  []Point
		kept []string
	}{
		{"percentage at its bounds", []Point{At(pct, 0), At(over, 100)}, []string{"x_percentage", "x_over_percentage"}},
		{"percentage below 0", []Point{At(pct, -1e-9)}, nil},
		{"percentage above 100", []Point{At(pct, 100.000001)}, nil},
		{"amdgpu busy of INT64_MAX", []Point{At(pct, math.MaxInt64)}, nil},
		{"NaN", []Point{At(pct, nan)}, nil},
		{"+Inf", []Point{At(mb, inf)}, nil},
		{"-Inf", []Point{At(free, math.Inf(-1))}, nil},
		{"NaN without a unit", []Point{At(free, nan)}, nil},
		{"any finite value without a unit", []Point{At(free, 1e306), At(pct, 5)}, []string{"prom_x", "x_percentage"}},
		{"a declared range over the unit's", []Point{At(over, 999)}, []string{"x_over_percentage"}},
		{"past a declared range", []Point{At(over, 1000.5)}, nil},
		{"ratio", []Point{At(ratio, 1)}, []string{"x_ratio"}},
		{"ratio above 1", []Point{At(ratio, 1.01)}, nil},
		{"megabytes 0", []Point{At(mb, 0)}, []string{"x_megabytes"}},
		{"megabytes negative", []Point{At(mb, -1)}, nil},
		{"megabytes of an exporter's 1e306", []Point{At(mb, 1e306)}, nil},
		{"a rate negative", []Point{At(rate, -0.5)}, nil},
		{"a rate past any bus", []Point{At(rate, 1.6e10)}, nil},
		{"absolute zero", []Point{At(temp, -273.15)}, []string{"x_celsius"}},
		{"below absolute zero", []Point{At(temp, -300)}, nil},
		{"a chip at 95 °C", []Point{At(temp, 95)}, []string{"x_celsius"}},
		{"a sensor's 255 °C", []Point{At(temp, 255)}, nil},
		{"watts negative", []Point{At(watts, -5)}, nil},
		{"RAPL's false wrap", []Point{At(watts, 261827), At(joules, 262e3)}, []string{"x_watts", "x_joules"}},
		{"joules negative", []Point{At(joules, -1)}, nil},
		{"count of a full 64-bit counter", []Point{At(count, math.MaxUint64)}, []string{"x_count"}},
		{"count negative", []Point{At(count, -1)}, nil},
		{"MHz negative", []Point{At(mhz, -1)}, nil},
		{"seconds negative", []Point{At(secs, -1)}, nil},
		{"cores negative", []Point{At(cores, -0.1)}, nil},
		{"load negative", []Point{At(load, -1)}, nil},
		{"no descriptor", []Point{Named("named", 1)}, nil},
		{"used at its total", []Point{At(used, 10), At(total, 10)}, []string{"mem_used_megabytes", "mem_total_megabytes"}},
		{"used above its total after it", []Point{At(used, 20), At(total, 10)}, []string{"mem_total_megabytes"}},
		{"used above its total before it", []Point{At(total, 10), At(used, 20)}, []string{"mem_total_megabytes"}},
		{"used without its total", []Point{At(used, 20)}, []string{"mem_used_megabytes"}},
		{"used beside a refused total", []Point{At(used, 20), At(total, nan)}, []string{"mem_used_megabytes"}},
		{"used refused by its own range first", []Point{At(used, -1), At(total, 10)}, []string{"mem_total_megabytes"}},
		{"GPU used above its own GPU's total", []Point{At(gpuUsed.ForGPU(0), 20), At(gpuTotal.ForGPU(0), 10)}, []string{"gpu_0_memory_total_megabytes"}},
		{"GPU used against another GPU's total", []Point{At(gpuUsed.ForGPU(0), 20), At(gpuTotal.ForGPU(1), 10)}, []string{"gpu_0_memory_used_megabytes", "gpu_1_memory_total_megabytes"}},
		{"MIG used above its slice's total", []Point{At(gpuUsed.ForMIG(0, 1), 20), At(gpuTotal.ForMIG(0, 1), 10)}, []string{"gpu_0_mig_1_memory_total_megabytes"}},
		{"a port's used above its total", []Point{At(portUsed.For("1"), 3), At(portTotal.For("1"), 2), At(portTotal.For("2"), 9)}, []string{"p_1_total_count", "p_2_total_count"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSampler([]Collector{fixed{name: "c"}}, time.Second, quiet())
			b := Batch{Points: append([]Point(nil), tc.pts...), Explain: true}
			for _, p := range tc.pts {
				b.Sources = append(b.Sources, "src:"+p.Name())
			}
			s.check(0, &b)
			var got []string
			for k, p := range b.Points {
				got = append(got, p.Name())
				if b.Sources[k] != "src:"+p.Name() {
					t.Errorf("point %s has the source %q", p.Name(), b.Sources[k])
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.kept, ",") {
				t.Errorf("kept %v, want %v", got, tc.kept)
			}
			h := s.Health()[0]
			if want := len(tc.pts) - len(tc.kept); h.Refused != want || (want > 0) != (h.LastRefused != "") {
				t.Errorf("health counts %d refused (last %q), want %d", h.Refused, h.LastRefused, want)
			}
		})
	}
}

// A value left out is counted every sample and said once a series: in the
// collector's health, never in the sample.
func TestCheckCountsAndWarnsOnce(t *testing.T) {
	busy := (&Desc{Name: "utilization_percentage", Unit: UnitPercentage, PerGPU: true}).ForGPU(0)
	temp := (&Desc{Name: "temperature_celsius", Unit: UnitCelsius, PerGPU: true}).ForGPU(0)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := NewSampler([]Collector{
		fixed{name: "amdgpu", pts: []Point{At(busy, math.MaxInt64), At(temp, -300)}},
		fixed{name: "ok", pts: []Point{At(&Desc{Name: "node_x_count", Unit: UnitCount}, 3)}},
	}, time.Second, log)
	defer s.Close()
	for range 3 {
		smp := s.Sample(context.Background())
		if got := names(smp); len(got) != 1 || got[0] != "node_x_count" {
			t.Fatalf("sample holds %v, want only node_x_count", got)
		}
	}
	h := s.Health()
	if h[0].Refused != 6 || !h[0].OK || !strings.HasPrefix(h[0].LastRefused, "gpu_0_temperature_celsius: -300 outside its range") {
		t.Errorf("amdgpu's health %+v: want 6 refused, its runs ok, the last one named", h[0])
	}
	if h[1].Refused != 0 {
		t.Errorf("ok's health %+v", h[1])
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 {
		t.Errorf("%d warnings, want one a series:\n%s", n, logs.String())
	}
	for _, series := range []string{"gpu_0_utilization_percentage", "gpu_0_temperature_celsius"} {
		if !strings.Contains(logs.String(), "series="+series) {
			t.Errorf("no warning names %s:\n%s", series, logs.String())
		}
	}
}

// Every unit bridge declares has a finite range, and a declared Valid wins
// over it.
func TestUnitRanges(t *testing.T) {
	for _, u := range []Unit{UnitMegabytes, UnitMegabytesPerSecond, UnitPercentage, UnitCores, UnitSeconds, UnitHours, UnitCount,
		UnitRatio, UnitWatts, UnitJoules, UnitCelsius, UnitMHz, UnitLoad, ""} {
		r := u.Range()
		if math.IsInf(r.Min, 0) || math.IsInf(r.Max, 0) || r.Min >= r.Max {
			t.Errorf("unit %q: range %+v", u, r)
		}
		if u != "" && u != UnitCelsius && r.Min != 0 {
			t.Errorf("unit %q may be negative: %+v", u, r)
		}
	}
	d := &Desc{Name: "x_percentage", Unit: UnitPercentage, Valid: Range{0, 1000}}
	if d.Range() != (Range{0, 1000}) || (&Desc{Unit: UnitPercentage}).Range() != (Range{0, 100}) {
		t.Error("a declared range does not win over the unit's")
	}
}
