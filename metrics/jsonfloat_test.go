package metrics

import (
	"encoding/json"
	"math"
	"testing"
)

// Finite values are written exactly as encoding/json writes them, and every
// value reads back as itself.
func TestAppendJSONFloat(t *testing.T) {
	for _, v := range []float64{0, -0.5, 1, 1500000, 123456789012, 1e20, 1e21, 1e-6, 1e-7, 3.5e-9, -2.5e300, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(AppendJSONFloat(nil, v)); got != string(want) {
			t.Errorf("%v: got %s, want %s", v, got, want)
		}
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		b := AppendJSONFloat([]byte("x"), v)
		var s string
		if err := json.Unmarshal(b[1:], &s); err != nil {
			t.Fatalf("%v: %s is not a JSON string: %v", v, b, err)
		}
		got, ok := ParseJSONNonFinite(s)
		if !ok || (math.IsNaN(v) != math.IsNaN(got)) || (!math.IsNaN(v) && got != v) {
			t.Errorf("%v: read back as %v, %v", v, got, ok)
		}
	}
	if _, ok := ParseJSONNonFinite("nan"); ok {
		t.Error(`"nan" accepted`)
	}
}

// A Float is finite whatever it was made from, and reads back only from a
// finite JSON number.
func TestFloat(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if f, ok := Finite(v); ok || f.Float64() != 0 || FloatOf(v) != nil {
			t.Errorf("%v made a Float", v)
		}
	}
	for _, v := range []float64{0, -1.5, 1e306, math.MaxFloat64, 3.5e-9} {
		f := FloatOf(v)
		b, err := json.Marshal(f)
		want, _ := json.Marshal(v)
		if err != nil || string(b) != string(want) {
			t.Errorf("%v: marshalled %s, %v; want %s", v, b, err, want)
		}
		var back *Float
		if err := json.Unmarshal(b, &back); err != nil || back.Float64() != v {
			t.Errorf("%v: read back %v, %v", v, back, err)
		}
	}
	var s struct {
		A *Float `json:"a"`
		B Float  `json:"b"`
	}
	for _, in := range []string{`{"a":1e999}`, `{"a":"NaN"}`, `{"a":"Infinity"}`, `{"b":-1e400}`, `{"a":"1"}`, `{"a":true}`} {
		if err := json.Unmarshal([]byte(in), &s); err == nil {
			t.Errorf("%s read as %+v", in, s)
		}
	}
	if err := json.Unmarshal([]byte(`{"a":null,"b":null}`), &s); err != nil || s.A != nil {
		t.Errorf("null: %+v, %v", s, err)
	}
}
