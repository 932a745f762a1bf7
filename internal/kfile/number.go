package kfile

import (
	"bytes"
	"math"
)

// Uint parses the one decimal count a sysfs attribute holds (energy_uj, a
// port counter), surrounding white space allowed, without allocating: a
// sample reads many such files. ok is false for anything else (empty,
// signed, not a number, past 2^64 - 1); the caller words the error.
func Uint(b []byte) (v uint64, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// Int is Uint for a value that may be negative (a hwmon temperature).
func Int(b []byte) (v int64, ok bool) {
	b = bytes.TrimSpace(b)
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := Uint(b)
	if !ok || len(b) == 0 || b[0] == '+' {
		return 0, false
	}
	switch {
	case neg && u <= 1<<63:
		return -int64(u-1) - 1, true
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}
