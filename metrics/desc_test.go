package metrics

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Megabytes back to bytes is exact for every byte count below 2^51: the
// property the "same value in Prometheus and MLflow" promise rests on.
func TestBytesRoundTripExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1_000_000; i++ {
		b := float64(r.Int64N(1 << 51))
		if i < 1000 {
			b = float64(i)
		}
		if got := UnitMegabytes.Base(MB(b)); got != b {
			t.Fatalf("%v bytes -> %v MB -> %v bytes", b, MB(b), got)
		}
	}
	if UnitMegabytes.Base(MB(math.MaxUint32)) != math.MaxUint32 {
		t.Fatal("4 GiB - 1")
	}
	if UnitMegabytesPerSecond.Base(1.25) != 1.25e6 || UnitPercentage.Base(12.5) != 12.5 {
		t.Fatal("rates scale by 10^6, other units not at all")
	}
}
