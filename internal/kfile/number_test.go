package kfile

import (
	"math"
	"testing"
)

func TestNumbers(t *testing.T) {
	for _, tc := range []struct {
		in  string
		u   uint64
		uok bool
		i   int64
		iok bool
	}{
		{"0\n", 0, true, 0, true},
		{"262143328850\n", 262143328850, true, 262143328850, true},
		{"  42  ", 42, true, 42, true},
		{"18446744073709551615\n", math.MaxUint64, true, 0, false},
		{"18446744073709551616\n", 0, false, 0, false},
		{"9223372036854775807", math.MaxInt64, true, math.MaxInt64, true},
		{"-9223372036854775808", 0, false, math.MinInt64, true},
		{"-9223372036854775809", 0, false, 0, false},
		{"-5000\n", 0, false, -5000, true},
		{"-", 0, false, 0, false},
		{"+5", 0, false, 0, false},
		{"", 0, false, 0, false},
		{"\n", 0, false, 0, false},
		{"1.5", 0, false, 0, false},
		{"12ab", 0, false, 0, false},
		{"N/A (no PMA)", 0, false, 0, false},
		{"1 2", 0, false, 0, false},
	} {
		u, uok := Uint([]byte(tc.in))
		i, iok := Int([]byte(tc.in))
		if u != tc.u || uok != tc.uok || i != tc.i || iok != tc.iok {
			t.Errorf("%q: Uint %d %v, Int %d %v; want %d %v, %d %v", tc.in, u, uok, i, iok, tc.u, tc.uok, tc.i, tc.iok)
		}
	}
}

func TestNumbersDoNotAllocate(t *testing.T) {
	b := []byte("262143328850\n")
	if n := testing.AllocsPerRun(100, func() { Uint(b); Int(b) }); n != 0 {
		t.Errorf("%v allocations a parse", n)
	}
}
