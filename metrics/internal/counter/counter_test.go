package counter

import "testing"

// One case a kind of counter: reset (interfaces, ports, GPU energy) and
// wrapping (RAPL), with the edges of each.
func TestUpdate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wraps     bool
		max       uint64
		readings  []uint64
		deltas    []uint64 // per reading after the first
		oks       []bool
		wantTotal float64
	}{
		{"rising", false, 0, []uint64{10, 20, 50}, []uint64{10, 30}, []bool{true, true}, 40},
		{"flat", false, 0, []uint64{10, 10}, []uint64{0}, []bool{true}, 0},
		{"reset counts from zero", false, 0, []uint64{1000, 1200, 50}, []uint64{200, 50}, []bool{true, true}, 250},
		{"reset to zero", false, 0, []uint64{1000, 0, 30}, []uint64{0, 30}, []bool{true, true}, 30},
		{"wrap", true, 100, []uint64{90, 5}, []uint64{15}, []bool{true}, 15},
		{"wrap to zero", true, 100, []uint64{100, 0}, []uint64{0}, []bool{true}, 0},
		{"rising wrapper", true, 100, []uint64{10, 20, 50}, []uint64{10, 30}, []bool{true, true}, 40},
		{"back without range", true, 0, []uint64{90, 5, 7}, []uint64{0, 2}, []bool{false, true}, 2},
		{"back beyond range", true, 50, []uint64{90, 5}, []uint64{0}, []bool{false}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Counter{Wraps: tc.wraps, Max: tc.max}
			if _, ok := c.Update(tc.readings[0]); ok {
				t.Fatal("the first reading gave a delta")
			}
			for i, r := range tc.readings[1:] {
				d, ok := c.Update(r)
				if d != tc.deltas[i] || ok != tc.oks[i] {
					t.Errorf("reading %d (%d): delta %d ok %v; want %d %v", i+1, r, d, ok, tc.deltas[i], tc.oks[i])
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
	c.Set(0)
	if d, ok := c.Update(40); d != 40 || !ok || c.Total != 40 {
		t.Errorf("from 0 to 40: %d %v total %v", d, ok, c.Total)
	}
	c.Set(100)
	if d, ok := c.Update(130); d != 30 || !ok || c.Total != 70 {
		t.Errorf("set 100, then 130: %d %v total %v", d, ok, c.Total)
	}
}

func TestGrowth(t *testing.T) {
	for _, tc := range []struct{ prev, cur, want uint64 }{
		{0, 0, 0}, {0, 7, 7}, {5, 9, 4}, {9, 5, 5}, {1 << 63, 1<<64 - 1, 1<<63 - 1},
	} {
		if got := Growth(tc.prev, tc.cur); got != tc.want {
			t.Errorf("Growth(%d, %d) = %d, want %d", tc.prev, tc.cur, got, tc.want)
		}
	}
}
