package amdgpu

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// amdgpu's files pass through the collector as the driver wrote them; the
// Sampler's range check leaves out what no GPU can read, one fixture a
// case, and counts it in the collector's health.
func TestOutOfRangeReadings(t *testing.T) {
	const h = "sys/class/drm/card0/device/hwmon/hwmon3/"
	const d = "sys/class/drm/card0/device/"
	for _, tc := range []struct {
		name    string
		change  files
		refused []string // left out of the sample, each counted
	}{
		{"in range", nil, nil},
		{"gpu_busy_percent of INT64_MAX", files{d + "gpu_busy_percent": "9223372036854775807\n"}, []string{"gpu_0_utilization_percentage"}},
		{"mem_busy_percent above 100", files{d + "mem_busy_percent": "101\n"}, []string{"gpu_0_memory_controller_utilization_percentage"}},
		{"negative power", files{h + "power1_average": "-5000000\n"}, []string{"gpu_0_power_usage_watts", "gpu_0_power_usage_percentage"}},
		{"VRAM used at twice the total", files{d + "mem_info_vram_used": "137405399040\n"}, []string{"gpu_0_memory_used_megabytes", "gpu_0_memory_usage_percentage"}},
		{"-300 °C", files{h + "temp1_input": "-300000\n"}, []string{"gpu_0_temperature_celsius"}},
		{"a sensor's 255 °C", files{h + "temp1_input": "255000\n"}, []string{"gpu_0_temperature_celsius"}},
		{"negative clock", files{h + "freq1_input": "-1\n"}, []string{"gpu_0_sm_clock_mhz"}},
		{"a power cap of INT64_MAX", files{h + "power1_cap": "9223372036854775807\n"}, []string{"gpu_0_power_limit_watts"}},
		{"GTT used above its total", files{d + "mem_info_gtt_used": "134180323329\n"}, []string{"gpu_0_memory_gtt_used_megabytes"}},
		{"GTT of INT64_MAX", files{d + "mem_info_gtt_total": "9223372036854775807\n", d + "mem_info_gtt_used": "9223372036854775807\n"},
			[]string{"gpu_0_memory_gtt_total_megabytes", "gpu_0_memory_gtt_used_megabytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := amdCard(kfdNodes(files{}, [2]int{1234, 128}), 0, 128, "0000:03:00.0", "2ea8c1e4a2b6f0d3")
			for k, v := range tc.change {
				f[k] = v
			}
			write(t, root, f)
			c, err := newIn(t, root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := metrics.NewSampler([]metrics.Collector{c}, 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
			defer s.Close()
			smp := s.Sample(context.Background())
			want := mi210("0")
			for _, name := range tc.refused {
				if _, ok := smp.Value(name); ok {
					t.Errorf("%s reached the sample", name)
				}
				delete(want, name)
			}
			for name := range want {
				if _, ok := smp.Value(name); !ok && !slices.Contains(tc.refused, name) {
					t.Errorf("%s, in range, is missing", name)
				}
			}
			if h := s.Health()[0]; h.Refused != len(tc.refused) || !h.OK {
				t.Errorf("health %+v: want %d values refused and the run ok", h, len(tc.refused))
			}
		})
	}
}
