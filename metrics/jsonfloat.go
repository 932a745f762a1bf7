package metrics

import (
	"math"
	"strconv"
)

// The one JSON form of a metric value, for the spool and the trackers that
// take non-finite values (MLflow): numbers as encoding/json writes them, and
// NaN and the infinities as protobuf JSON's strings "NaN", "Infinity" and
// "-Infinity" (which encoding/json refuses to write).
const (
	jsonNaN    = "NaN"
	jsonInf    = "Infinity"
	jsonNegInf = "-Infinity"
)

// AppendJSONFloat appends v in that form.
func AppendJSONFloat(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, `"`+jsonNaN+`"`...)
	case math.IsInf(v, 1):
		return append(b, `"`+jsonInf+`"`...)
	case math.IsInf(v, -1):
		return append(b, `"`+jsonNegInf+`"`...)
	}
	// encoding/json's (ES6) choice: plain decimals except for very large or
	// small magnitudes, so that a spooled byte count stays readable.
	format := byte('f')
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	n := len(b)
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if m := len(b) - n; m >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b
}

// ParseJSONNonFinite reads the string form of a non-finite value (without
// its quotes); ok is false for any other string.
func ParseJSONNonFinite(s string) (v float64, ok bool) {
	switch s {
	case jsonNaN:
		return math.NaN(), true
	case jsonInf:
		return math.Inf(1), true
	case jsonNegInf:
		return math.Inf(-1), true
	}
	return 0, false
}
