package metrics

import (
	"fmt"
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

// Float is a float64 that is finite by construction: the one form a float
// takes to a JSON encoder outside the samples' path (AppendJSONFloat), so
// that no encode fails on NaN or an infinity (encoding/json refuses them)
// and no arithmetic that overflowed reaches a report or a tag. It is made
// only by Finite and FloatOf, which refuse what is not finite; the zero
// value is 0. It marshals as a JSON number and unmarshals only from one
// that fits a float64.
type Float struct{ v float64 }

// Finite is v as a Float; ok is false (and the Float 0) for NaN and the
// infinities.
func Finite(v float64) (f Float, ok bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return Float{}, false
	}
	return Float{v}, true
}

// FloatOf is v as a *Float, nil for NaN and the infinities: a figure that
// is absent rather than not finite.
func FloatOf(v float64) *Float {
	f, ok := Finite(v)
	if !ok {
		return nil
	}
	return &f
}

// Float64 is f's value.
func (f Float) Float64() float64 { return f.v }

// MarshalJSON implements json.Marshaler: a JSON number, as encoding/json
// writes a float64.
func (f Float) MarshalJSON() ([]byte, error) { return AppendJSONFloat(nil, f.v), nil }

// UnmarshalJSON implements json.Unmarshaler: a JSON number within a
// float64's range (1e999 is refused, not made an infinity); null leaves f
// as it is, as encoding/json does for a float64.
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	// encoding/json has checked the grammar: b is a number, or another
	// JSON value ParseFloat refuses (a string, "NaN" among them).
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(v, 0) {
		return fmt.Errorf("metrics: %.40q is not a finite JSON number", b)
	}
	f.v = v
	return nil
}
