package gpu

import (
	"reflect"
	"testing"
)

func TestDecodeThrottle(t *testing.T) {
	tests := []struct {
		name   string
		mask   uint64
		flags  []float64
		active int
	}{
		{"none", 0, []float64{0, 0, 0, 0, 0, 0, 0, 0}, 0},
		{"idle is not a slowdown", 1, []float64{1, 0, 0, 0, 0, 0, 0, 0}, 0},
		{"power cap and hw thermal", 4 | 64, []float64{0, 0, 1, 0, 0, 0, 1, 0}, 2},
		{"every known bit", 255, []float64{1, 1, 1, 1, 1, 1, 1, 1}, 7},
		{"unknown bits ignored", 256 | 512 | 8, []float64{0, 0, 0, 1, 0, 0, 0, 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags, active := decodeThrottle(tt.mask)
			if !reflect.DeepEqual(flags, tt.flags) || active != tt.active {
				t.Errorf("decodeThrottle(%#x) = %v, %d; want %v, %d", tt.mask, flags, active, tt.flags, tt.active)
			}
		})
	}
}
