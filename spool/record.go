package spool

import (
	"encoding/json"
	"sort"

	"github.com/bridge-dev/bridge/metrics"
)

// Record types.
const (
	TypeStart  = "start"
	TypeSample = "sample"
	TypeAck    = "ack"
	TypeEnd    = "end"
	// TypeRun records a run a sink got after its attempt's start record was
	// written (the tracker was down at start): readers merge it into that
	// start record, as if it had been known then.
	TypeRun = "run"
)

// Record is one line of the file. Fields not used by a type are omitted.
type Record struct {
	Type     string            `json:"type"`
	Seq      *int64            `json:"seq,omitempty"`
	TS       int64             `json:"ts,omitempty"`   // sample time, unix ms
	Time     int64             `json:"time,omitempty"` // start/end time, unix ms
	Metrics  Values            `json:"metrics,omitempty"`
	Sink     string            `json:"sink,omitempty"`
	Run      string            `json:"run,omitempty"`
	Attempt  int               `json:"attempt,omitempty"` // start: its number; run: the attempt it names (0: the last)
	PID      int               `json:"pid,omitempty"`
	Version  string            `json:"version,omitempty"`
	Runs     map[string]string `json:"runs,omitempty"` // start: sink -> run id
	ExitCode *int              `json:"exit_code,omitempty"`
	Info     map[string]string `json:"info,omitempty"` // free-form facts (limits, reason)

	badValues int // sample values that are not numbers, left out of Metrics
}

// Values are a sample's metric values by name.
type Values map[string]float64

// MarshalJSON writes values in metrics.AppendJSONFloat's form (non-finite
// ones as strings, which encoding/json refuses).
func (v Values) MarshalJSON() ([]byte, error) {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	buf := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		kb, _ := json.Marshal(k)
		buf = append(buf, kb...)
		buf = append(buf, ':')
		buf = metrics.AppendJSONFloat(buf, v[k])
	}
	return append(buf, '}'), nil
}

// UnmarshalJSON accepts numbers and the non-finite strings. A value that is
// neither (a string, null, a number beyond float64) is left out: one bad
// value costs only itself, not its sample.
func (v *Values) UnmarshalJSON(b []byte) error {
	out, _, err := parseValues(b)
	if err != nil {
		return err
	}
	*v = out
	return nil
}

// parseValues reads a metrics object, leaving out (and counting) the values
// that are not numbers; only an object that is not one is an error.
func parseValues(b []byte) (Values, int, error) {
	raw := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, 0, err
	}
	out := make(Values, len(raw))
	bad := 0
	for k, r := range raw {
		if f, ok := parseValue(r); ok {
			out[k] = f
		} else {
			bad++
		}
	}
	return out, bad, nil
}

func parseValue(r json.RawMessage) (float64, bool) {
	if string(r) == "null" { // decodes into a float64 as nothing at all
		return 0, false
	}
	var f float64
	if err := json.Unmarshal(r, &f); err == nil {
		return f, true
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return 0, false
	}
	return metrics.ParseJSONNonFinite(s)
}
