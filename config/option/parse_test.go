package option

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// size stands for a type of its own with a text form (config.ByteSize).
type size int64

func (s *size) UnmarshalText(p []byte) error {
	n, err := strconv.ParseInt(strings.TrimSuffix(string(p), "k"), 10, 64)
	if err != nil {
		return fmt.Errorf("not a size: %q", p)
	}
	if strings.HasSuffix(string(p), "k") {
		n <<= 10
	}
	*s = size(n)
	return nil
}

// parsed is Parse's value and error as one comparable string.
func parsed[T any](raw any) string {
	v, err := Parse[T](raw)
	if err != nil {
		return "error: " + err.Error()
	}
	if l, ok := any(v).([]string); ok {
		return fmt.Sprintf("%q", l)
	}
	return fmt.Sprint(v)
}

// One rule for every source: a value of the type is taken, any scalar is
// read as its text without surrounding whitespace (so a file's number means
// what a variable's does), a list is a file's list or text split at
// commas, null is the zero value; what cannot be the type is refused.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		// durations: text with a unit; a number without one is refused
		// (a YAML `interval: 20` is not 20ns), 0 is 0
		{"duration typed", parsed[time.Duration](5 * time.Second), "5s"},
		{"duration text", parsed[time.Duration](" 250ms\n"), "250ms"},
		{"duration file int", parsed[time.Duration](20), "error: a number without a unit: write it with one, e.g. 20s or 20ms"},
		{"duration file float", parsed[time.Duration](1.5), "error: a number without a unit: write it with one, e.g. 1.5s or 1.5ms"},
		{"duration text number", parsed[time.Duration]("1"), "error: a number without a unit: write it with one, e.g. 1s or 1ms"},
		{"duration file zero", parsed[time.Duration](0), "0s"},
		{"duration bad", parsed[time.Duration]("ten"), "error: not a valid Go duration (e.g. 10s, 500ms, 1m)"},
		{"duration list", parsed[time.Duration]([]any{1}), "error: not a valid Go duration (e.g. 10s, 500ms, 1m) (a list)"},
		{"duration map", parsed[time.Duration](map[string]any{"a": 1}), "error: not a valid Go duration (e.g. 10s, 500ms, 1m) (a map)"},
		// integers: a fraction is refused, not truncated
		{"int text", parsed[int]("\t42 "), "42"},
		{"int file", parsed[int](2000), "2000"},
		{"int file whole float", parsed[int](8.0), "8"},
		{"int file 1e6", parsed[int](1e6), "1000000"},
		{"int file fraction", parsed[int](1.5), "error: not a valid whole number (invalid syntax)"},
		{"int text fraction", parsed[int]("1.5"), "error: not a valid whole number (invalid syntax)"},
		{"int text exponent", parsed[int]("1e3"), "error: not a valid whole number (invalid syntax)"},
		{"int too large", parsed[int]("99999999999999999999"), "error: not a valid whole number (value out of range)"},
		{"int file too large", parsed[int](1e21), "error: not a valid whole number (value out of range)"},
		// numbers
		{"float file int", parsed[float64](50), "50"},
		{"float text", parsed[float64](" 12.5"), "12.5"},
		{"float NaN", parsed[float64]("NaN"), "NaN"}, // a Valid refuses it
		{"float bad", parsed[float64]("high"), "error: not a valid number (invalid syntax)"},
		// strings: a file's number or boolean is its text
		{"string file int", parsed[string](7), "7"},
		{"string file float", parsed[string](7.25), "7.25"},
		{"string file bool", parsed[string](true), "true"},
		{"string trimmed", parsed[string](" node-3\n"), "node-3"},
		{"string list", parsed[string]([]any{"a"}), "error: not a valid string (a list)"},
		// booleans
		{"bool typed", parsed[bool](true), "true"},
		{"bool text", parsed[bool]("true\n"), "true"},
		{"bool bad", parsed[bool]("maybe"), "error: not a valid boolean (true or false) (invalid syntax)"},
		// lists
		{"list text", parsed[[]string](" node, container "), `["node" "container"]`},
		{"list empty text", parsed[[]string](""), `[]`},
		{"list typed", parsed[[]string]([]string{" a", "b "}), `["a" "b"]`},
		{"list file", parsed[[]string]([]any{0, "b ", 1.5, true}), `["0" "b" "1.5" "true"]`},
		{"list file scalar", parsed[[]string](0), `["0"]`},
		{"list file nested", parsed[[]string]([]any{[]any{1}}), "error: not a valid list item (a list)"},
		{"list file map", parsed[[]string](map[string]any{"a": 1}), "error: not a valid list (a map)"},
		// regular expressions: "" is none
		{"regexp", parsed[*regexp.Regexp](" ^DCGM_ "), "^DCGM_"},
		{"regexp none", parsed[*regexp.Regexp](""), "<nil>"},
		{"regexp bad", parsed[*regexp.Regexp]("("), "error: not a valid regular expression (RE2) (error parsing regexp: missing closing ): `(`)"},
		// a type of its own reads its text
		{"text unmarshaler", parsed[size](" 4k\n"), "4096"},
		{"text unmarshaler file int", parsed[size](0), "0"},
		{"text unmarshaler typed", parsed[size](size(7)), "7"},
		{"text unmarshaler bad", parsed[size]("4q"), `error: not a size: "4q"`},
		// a YAML null is the zero value
		{"null", parsed[time.Duration](nil), "0s"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, tc.got, tc.want)
		}
	}
}

// A type Parse has no reading for is a programming error, caught at once.
func TestParseUnsupported(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for an option of type uint8")
		}
	}()
	_, _ = Parse[uint8]("1")
}

// shown is what a refusal shows: trimmed text, a list joined.
func TestShown(t *testing.T) {
	for _, tc := range []struct {
		raw  any
		want string
	}{{" ten\n", "ten"}, {[]string{"a", "b"}, "a,b"}, {[]any{1, "x"}, "[1 x]"}, {1e6, "1000000"}, {time.Second, "1s"}} {
		if got := fmt.Sprint(shown(tc.raw)); got != tc.want {
			t.Errorf("shown(%#v) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}
