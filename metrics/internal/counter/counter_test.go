package counter

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The counter rule, one row an edge: readings one second apart (unless
// secs says otherwise), and what each interval after the first gives.
func TestUpdate(t *testing.T) {
	const raplMax = 262143328850 // max_energy_range_uj of an Intel package
	const raplRate = 1000e6      // 1 kW in µJ a second
	type step struct {
		delta uint64
		skip  Skip
	}
	for _, tc := range []struct {
		name      string
		max       uint64
		maxRate   float64
		readings  []uint64
		secs      []float64 // between readings; nil: 1 s each
		steps     []step    // per reading after the first
		wantTotal float64
	}{
		{"rising", 0, 0, []uint64{10, 20, 50}, nil, []step{{10, Counted}, {30, Counted}}, 40},
		{"flat", 0, 0, []uint64{10, 10}, nil, []step{{0, Counted}}, 0},
		{"back by 1 without a wrap: a glitch", 0, 0, []uint64{1000, 999, 1010}, nil, []step{{0, WentBack}, {11, Counted}}, 11},
		{"reset: not counted, counted on from the new reading", 0, 0, []uint64{1000, 1200, 50, 80}, nil, []step{{200, Counted}, {0, WentBack}, {30, Counted}}, 230},
		{"reset to zero", 0, 0, []uint64{1000, 0, 30}, nil, []step{{0, WentBack}, {30, Counted}}, 30},
		{"wrap near the maximum", 100, 20, []uint64{90, 5}, nil, []step{{15, Counted}}, 15},
		{"wrap from the maximum to zero", 100, 20, []uint64{100, 0}, nil, []step{{0, Counted}}, 0},
		{"back far from the maximum: not a wrap", 100, 20, []uint64{50, 49}, nil, []step{{0, WentBack}}, 0},
		{"back just past one step of the maximum", 100, 20, []uint64{77, 5}, nil, []step{{0, WentBack}}, 0},
		{"back within one longer step of the maximum", 100, 20, []uint64{77, 5}, []float64{2}, []step{{28, Counted}}, 28},
		{"a wrapping counter with no known rate cannot wrap", 100, 0, []uint64{99, 5}, nil, []step{{0, WentBack}}, 0},
		{"back beyond the range", 50, 20, []uint64{90, 5}, nil, []step{{0, WentBack}}, 0},
		{"RAPL 1 µJ back mid-range (the 262 kJ false wrap)", raplMax, raplRate, []uint64{5e9, 5e9 - 1, 5e9 + 20e6}, nil, []step{{0, WentBack}, {20e6 + 1, Counted}}, 20e6 + 1},
		{"RAPL wrap at full power", raplMax, raplRate, []uint64{raplMax - 400e6, 300e6}, nil, []step{{700e6, Counted}}, 700e6},
		{"RAPL wrap that would be too fast", raplMax, raplRate, []uint64{raplMax - 900e6, 900e6}, nil, []step{{0, TooFast}}, 0},
		{"InfiniBand 1 back (the 16 GB/s spike)", 0, 3.125e9, []uint64{1 << 32, 1<<32 - 1}, nil, []step{{0, WentBack}}, 0},
		{"at the link rate", 0, 100, []uint64{0, 100}, nil, []step{{100, Counted}}, 100},
		{"within the slack for the reads' timing", 0, 100, []uint64{0, 110}, nil, []step{{110, Counted}}, 110},
		{"above the link rate", 0, 100, []uint64{0, 111, 150}, nil, []step{{0, TooFast}, {39, Counted}}, 39},
		{"no time passed", 0, 100, []uint64{0, 5, 10}, []float64{1, 0}, []step{{5, Counted}, {0, NoTime}}, 5},
		{"a clock that went back", 0, 0, []uint64{0, 5}, []float64{-1}, []step{{0, NoTime}}, 0},
		{"a full 64-bit counter", 0, 0, []uint64{math.MaxUint64 - 5, math.MaxUint64}, nil, []step{{5, Counted}}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Counter{Max: tc.max, MaxRate: tc.maxRate}
			now := time.Unix(1700000000, 0)
			if st := c.Update(tc.readings[0], now); st.Skip != Baseline || st.Counted() {
				t.Fatalf("the first reading gave %+v", st)
			}
			for i, r := range tc.readings[1:] {
				secs := 1.0
				if tc.secs != nil && i < len(tc.secs) {
					secs = tc.secs[i]
				}
				now = now.Add(time.Duration(secs * float64(time.Second)))
				st := c.Update(r, now)
				if st.Delta != tc.steps[i].delta && st.Counted() || st.Skip != tc.steps[i].skip {
					t.Errorf("reading %d (%d): %+v; want delta %d skip %d", i+1, r, st, tc.steps[i].delta, tc.steps[i].skip)
				}
				if st.Counted() && st.Rate() != float64(st.Delta)/secs || !st.Counted() && st.Rate() != 0 {
					t.Errorf("reading %d: rate %v", i+1, st.Rate())
				}
				if !st.Counted() && st.Skip != NoTime && st.Why(r, &c) == "" {
					t.Errorf("reading %d: skipped (%d) without saying why", i+1, st.Skip)
				}
				if last, had := c.Last(); last != r || !had {
					t.Errorf("reading %d: last %d %v", i+1, last, had)
				}
			}
			if c.Total != tc.wantTotal {
				t.Errorf("total %v, want %v", c.Total, tc.wantTotal)
			}
		})
	}
}

// Set counts from the value it is given, as a reading that is not counted.
func TestSet(t *testing.T) {
	var c Counter
	now := time.Unix(0, 0)
	c.Set(0, now)
	if st := c.Update(40, now.Add(time.Second)); st.Delta != 40 || !st.Counted() || c.Total != 40 {
		t.Errorf("from 0 to 40: %+v total %v", st, c.Total)
	}
	c.Set(100, now.Add(2*time.Second))
	if st := c.Update(130, now.Add(3*time.Second)); st.Delta != 30 || !st.Counted() || c.Total != 70 {
		t.Errorf("set 100, then 130: %+v total %v", st, c.Total)
	}
}

// The note for a false wrap says what ruled it out.
func TestWhyWentBack(t *testing.T) {
	c := Counter{Max: 262143328850, MaxRate: 1e9}
	now := time.Unix(0, 0)
	c.Update(5e9, now)
	st := c.Update(5e9-1, now.Add(time.Second))
	if why := st.Why(5e9-1, &c); !strings.Contains(why, "not a wrap") || !strings.Contains(why, "went back from 5000000000 to 4999999999") {
		t.Errorf("why: %q", why)
	}
}
