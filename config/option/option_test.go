package option

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestList(t *testing.T) {
	for _, tc := range []struct {
		in, allowed, want []string
		bad               bool
	}{
		{in: []string{" a", "b ", "", "a"}, want: []string{"a", "b"}},
		{in: []string{"a", "c"}, allowed: []string{"a", "b"}, bad: true},
		{in: []string{"0", "\x07"}, bad: true},
		{in: nil, want: nil},
	} {
		got, err := List(tc.in, tc.allowed)
		if (err != nil) != tc.bad || (!tc.bad && !slices.Equal(got, tc.want)) {
			t.Errorf("List(%q, %q) = %q, %v", tc.in, tc.allowed, got, err)
		}
	}
}

func TestWithin(t *testing.T) {
	check := Within(10*time.Millisecond, time.Minute, true)
	for d, ok := range map[time.Duration]bool{0: true, 10 * time.Millisecond: true, time.Minute: true,
		time.Millisecond: false, 2 * time.Minute: false, -time.Second: false} {
		if _, err := check(d); (err == nil) != ok {
			t.Errorf("%v: %v", d, err)
		}
	}
	if _, err := Within(time.Second, time.Minute, false)(0); err == nil {
		t.Error("0 taken where it may not be")
	}
}

// Get is the loaded value, else the default; Value parses, runs Valid and
// refuses what does not parse; every refusal is a *Bad with the value to
// show.
func TestOf(t *testing.T) {
	o := &Of[int]{Key: "n", Default: 3, Valid: func(v int) (int, error) {
		if v < 0 {
			return v, &Bad{Value: "below zero", Why: "must not be negative"}
		}
		if v > 10 {
			return v, errors.New("must be at most 10")
		}
		return v * 2, nil
	}}
	if o.Get(nil) != 3 || o.Get(Values{"n": 5}) != 5 || o.Get(Values{"n": "x"}) != 3 {
		t.Errorf("Get: %d %d %d", o.Get(nil), o.Get(Values{"n": 5}), o.Get(Values{"n": "x"}))
	}
	for raw, want := range map[any]any{4: 8, " 4\n": 8, 4.0: 8} {
		if v, err := o.Value(raw); v != want || err != nil {
			t.Errorf("Value(%#v) = %v, %v; want %v", raw, v, err, want)
		}
	}
	for raw, want := range map[any]Bad{
		-1:     {Value: "below zero", Why: "must not be negative"},
		" 11 ": {Value: "11", Why: "must be at most 10"},
		"4.5":  {Value: "4.5", Why: "not a valid whole number (invalid syntax)"},
		4.5:    {Value: "4.5", Why: "not a valid whole number (invalid syntax)"},
	} {
		var b *Bad
		if _, err := o.Value(raw); !errors.As(err, &b) || *b != want {
			t.Errorf("Value(%#v) = %v (%#v), want %#v", raw, err, b, want)
		}
	}
	if sp := o.Spec(); sp.Key != "n" || sp.Default != 3 {
		t.Errorf("Spec %+v", sp)
	}
}
