package spool

import (
	"encoding/json"
	"fmt"
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
	Attempt  int               `json:"attempt,omitempty"`
	PID      int               `json:"pid,omitempty"`
	Version  string            `json:"version,omitempty"`
	Runs     map[string]string `json:"runs,omitempty"` // start: sink -> run id
	ExitCode *int              `json:"exit_code,omitempty"`
	Info     map[string]string `json:"info,omitempty"` // free-form facts (limits, reason)
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

// UnmarshalJSON accepts numbers and the non-finite strings.
func (v *Values) UnmarshalJSON(b []byte) error {
	raw := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Values, len(raw))
	for k, r := range raw {
		var f float64
		if err := json.Unmarshal(r, &f); err == nil {
			out[k] = f
			continue
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return fmt.Errorf("metric %q: not a number", short(k))
		}
		f, ok := metrics.ParseJSONNonFinite(s)
		if !ok {
			return fmt.Errorf("metric %q: a string that is not NaN, Infinity or -Infinity", short(k))
		}
		out[k] = f
	}
	*v = out
	return nil
}

// short keeps a bad name or value out of a message at a readable length.
func short(s string) string {
	const n = 40
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
