// Package option declares a setting of bridge: bridge's own in package
// config, a collector's in its package, carried by its registration
// (metrics.Registration.Options). Package config loads every declared option
// the same way: flag --<key>, variable BRIDGE_<KEY>, key <key> in the
// --config file, then the default; each value goes through one parse step
// (Parse) and the option's check (Of.Valid), and a bad value is a usage
// error naming where it came from. The README's flag table is generated from
// the same declarations (docgen).
package option

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Spec is what config and the docs need of any option.
type Spec struct {
	// Key is the flag's name; the variable is BRIDGE_<KEY> (dashes as
	// underscores), the file key the same as the flag.
	Key string
	// Default is the value when nothing sets it, of the option's type (one
	// Parse reads): bool, int, float64, string, []string, time.Duration,
	// *regexp.Regexp (given as a string, "" for none), or a type whose
	// pointer is an encoding.TextUnmarshaler (config.ByteSize).
	Default any
	// Usage is the flag's line in `bridge --help`.
	Usage string
	// Doc is the option's meaning in the README's flag table; "" is Usage.
	Doc string
	// Shown is the default as the README's flag table shows it (Markdown);
	// "" is the flag's default value in backticks.
	Shown string
}

// Option is one declared setting. Of is the implementation; config loads
// options through this interface without knowing their types.
type Option interface {
	Spec() Spec
	// Value is the value to use from raw, what the configuration holds for
	// the key (a flag's value, a variable's text, the YAML file's value, or
	// the default): raw read as the option's type by Parse, then checked by
	// Valid. Its error is a *Bad: why raw is refused, and the value a
	// message may show.
	Value(raw any) (any, error)
}

// Of is an option whose value has type T.
type Of[T any] struct {
	Key, Usage, Doc, Shown string
	Default                T
	// Valid checks a value and returns the one to use (lists trimmed and
	// without repeats, say); its error says why it is refused, without
	// naming the option (config names where the value came from). Nil:
	// every value of type T is taken as it is.
	Valid func(T) (T, error)
}

// Spec implements Option.
func (o *Of[T]) Spec() Spec {
	return Spec{Key: o.Key, Default: o.Default, Usage: o.Usage, Doc: o.Doc, Shown: o.Shown}
}

// Value implements Option.
func (o *Of[T]) Value(raw any) (any, error) {
	v, err := Parse[T](raw)
	if err != nil {
		return nil, &Bad{Value: shown(raw), Why: err.Error()}
	}
	if o.Valid == nil {
		return v, nil
	}
	out, err := o.Valid(v)
	if err != nil {
		var b *Bad
		if errors.As(err, &b) {
			return nil, b
		}
		return nil, &Bad{Value: shown(v), Why: err.Error()}
	}
	return out, nil
}

// Get is the option's value in vs, its Default when vs has none (a
// configuration not made by config.Load, as in tests).
func (o *Of[T]) Get(vs Values) T {
	if v, ok := vs[o.Key].(T); ok {
		return v
	}
	return o.Default
}

// Values are the loaded values of declared options, by key: what
// config.Config.Options holds, and a collector's Build reads with Get.
type Values map[string]any

// Bad is a refusal of a value: why, and the value a message shows (one
// entry of a list, a URL with its secret redacted, when Valid says so).
type Bad struct {
	Value any    // what the message shows as the value
	Why   string // why it is refused
}

func (b *Bad) Error() string { return b.Why }

// List cleans a list setting: items trimmed, empty and repeated ones
// dropped, each checked against allowed (nil: anything). Control
// characters are refused: a value must print as it is.
func List(in, allowed []string) ([]string, error) {
	var out []string
	for _, p := range in {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if allowed != nil && !slices.Contains(allowed, p) {
			return nil, fmt.Errorf("unknown value %q; known: %s", p, strings.Join(allowed, ", "))
		}
		if strings.ContainsFunc(p, IsControl) {
			return nil, errors.New("control character in " + fmt.Sprintf("%q", p))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// IsControl reports whether r is a control character (C0 or DEL).
func IsControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Within checks a duration: not negative, 0 when zeroOK, else from lo to
// hi.
func Within(lo, hi time.Duration, zeroOK bool) func(time.Duration) (time.Duration, error) {
	return func(d time.Duration) (time.Duration, error) {
		switch {
		case d < 0:
			return d, errors.New("must not be negative")
		case d == 0 && zeroOK:
		case d < lo:
			return d, errors.New("must be at least " + lo.String())
		case d > hi:
			return d, errors.New("must be at most " + hi.String())
		}
		return d, nil
	}
}
