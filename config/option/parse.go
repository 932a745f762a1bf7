package option

import (
	"encoding"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Parse reads raw, what viper holds for an option, as a T: one rule for
// every source.
//   - A value of type T (a default, a flag pflag has parsed) is taken.
//   - Anything else is read as text without surrounding whitespace: a
//     flag's or a variable's, a file's string, and the file's numbers and
//     booleans as they are written. So a number in the file means what
//     it means in a variable: `interval: 20` is refused (not 20ns),
//     `nodes: 1.5` too (not 1), and `node-id: 7` is "7".
//   - A list ([]string) is a file's list of such texts, or one text
//     split at commas; each item is trimmed.
//   - nil (a YAML null) is T's zero value.
//
// Its error says why, without the value (Value adds it).
func Parse[T any](raw any) (T, error) {
	var out T
	if l, ok := any(&out).(*[]string); ok {
		var err error
		*l, err = texts(raw)
		return out, err
	}
	switch r := raw.(type) {
	case nil:
		return out, nil
	case string: // a T of kind string is trimmed too
	case T:
		return r, nil
	}
	s, ok := text(raw)
	if !ok {
		return out, fmt.Errorf("not a valid %s (a %s)", kind(&out), yamlKind(raw))
	}
	return out, fromText(&out, s)
}

// text is a scalar's text, trimmed; false for a list or a map.
func text(raw any) (string, bool) {
	switch r := raw.(type) {
	case string:
		return strings.TrimSpace(r), true
	case float64: // as written: 1e6 is "1000000", not "1e+06"
		return strconv.FormatFloat(r, 'f', -1, 64), true
	case bool, int, int64, uint64:
		return fmt.Sprint(r), true
	}
	return "", false
}

// texts reads a list: a file's list of scalars, or text split at commas.
func texts(raw any) ([]string, error) {
	var items []string
	switch r := raw.(type) {
	case nil:
		return nil, nil
	case []string:
		items = r
	case []any:
		for _, e := range r {
			s, ok := text(e)
			if !ok {
				return nil, fmt.Errorf("not a valid list item (a %s)", yamlKind(e))
			}
			items = append(items, s)
		}
	default:
		s, ok := text(raw)
		if !ok {
			return nil, fmt.Errorf("not a valid list (a %s)", yamlKind(raw))
		}
		if s == "" {
			return []string{}, nil
		}
		items = strings.Split(s, ",")
	}
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = strings.TrimSpace(s)
	}
	return out, nil
}

// fromText parses s into *p, by p's type.
func fromText(p any, s string) error {
	var err error
	switch p := p.(type) {
	case *string:
		*p = s
	case *bool:
		*p, err = strconv.ParseBool(s)
	case *int:
		*p, err = strconv.Atoi(s)
	case *float64:
		*p, err = strconv.ParseFloat(s, 64)
	case *time.Duration:
		if *p, err = time.ParseDuration(s); err != nil {
			if _, e := strconv.ParseFloat(s, 64); e == nil {
				return fmt.Errorf("a number without a unit: write it with one, e.g. %ss or %sms", s, s)
			}
			return fmt.Errorf("not a valid %s", kind(p)) // time's words repeat the value
		}
	case **regexp.Regexp:
		*p = nil
		if s != "" {
			*p, err = regexp.Compile(s)
		}
	case encoding.TextUnmarshaler:
		// Its own words, which say what it wants.
		return p.UnmarshalText([]byte(s))
	default:
		panic(fmt.Sprintf("option: no parser for options of type %T", p))
	}
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			err = ne.Err // the value is shown once, by the caller
		}
		return fmt.Errorf("not a valid %s (%w)", kind(p), err)
	}
	return nil
}

// kind names the type p points to in the user's words.
func kind(p any) string {
	switch p.(type) {
	case *time.Duration:
		return "Go duration (e.g. 10s, 500ms, 1m)"
	case *string:
		return "string"
	case *bool:
		return "boolean (true or false)"
	case *int:
		return "whole number"
	case *float64:
		return "number"
	case *[]string:
		return "list"
	case **regexp.Regexp:
		return "regular expression (RE2)"
	}
	return "value"
}

// yamlKind names what the file gave instead of a scalar.
func yamlKind(raw any) string {
	switch raw.(type) {
	case []any:
		return "list"
	case map[string]any:
		return "map"
	}
	return fmt.Sprintf("%T", raw)
}

// shown is raw as a message shows it: text trimmed, a list option's value
// joined by commas as a flag takes it.
func shown(raw any) any {
	if l, ok := raw.([]string); ok {
		return strings.Join(l, ",")
	}
	if s, ok := text(raw); ok {
		return s
	}
	return raw
}
