package gpu

import (
	"testing"
	"time"
)

// The energy counter's readings (mJ), one second apart, and the joules
// since the first: the counter rule (metrics/internal/counter) with the
// GPU's bound.
func TestEnergyAdd(t *testing.T) {
	tests := []struct {
		name     string
		readings []uint64
		want     []float64 // -1: no value
	}{
		{"baseline, then the increase", []uint64{1_000_000, 1_002_000, 1_010_500}, []float64{-1, 2, 10.5}},
		{"not moving: no value, not 0", []uint64{7, 7, 7}, []float64{-1, -1, -1}},
		{"moves late", []uint64{7, 7, 1007, 1007}, []float64{-1, -1, 1, 1}},
		{"reset: that interval not counted, then on from the new reading", []uint64{5000, 9000, 300, 1300}, []float64{-1, 4, 4, 5}},
		{"two resets", []uint64{5000, 6000, 100, 50, 1050}, []float64{-1, 1, 1, 1, 2}},
		{"back by 1 mJ: a glitch", []uint64{5000, 6000, 5999, 7000}, []float64{-1, 1, 1, 2.001}},
		{"reset to 0 at start of counting", []uint64{5000, 0, 0, 2000}, []float64{-1, -1, -1, 2}},
		{"faster than any GPU draws", []uint64{5000, 6000, 6000 + 4_000_000, 6000 + 4_001_000}, []float64{-1, 1, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e energy
			now := time.Unix(1700000000, 0)
			for i, v := range tt.readings {
				got, _, ok := e.add(v, now.Add(time.Duration(i)*time.Second))
				switch want := tt.want[i]; {
				case want < 0 && ok:
					t.Errorf("reading %d (%d mJ): %v J, want none", i, v, got)
				case want >= 0 && (!ok || got < want-1e-12 || got > want+1e-12):
					t.Errorf("reading %d (%d mJ): %v J (%v), want %v", i, v, got, ok, want)
				}
			}
		})
	}
}
