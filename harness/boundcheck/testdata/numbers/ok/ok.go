// Package ok gives JSON encoders floats only through metrics.Float or a
// type that writes itself, and adds points through Batch.Add.
package ok

import (
	"encoding/json"
	"strconv"

	"github.com/bridge-dev/bridge/metrics"
)

type figures struct {
	Name  string         `json:"name"`
	Value *metrics.Float `json:"value,omitempty"`
	Count int            `json:"count"`
	Skip  float64        `json:"-"`
}

func marshalFigures(v float64) ([]byte, error) {
	return json.Marshal(figures{Name: "x", Value: metrics.FloatOf(v)})
}

func mapOfFloats(v float64) map[string]any {
	f, _ := metrics.Finite(v)
	return map[string]any{"v": f, "n": 3, "c": 1.5, "s": strconv.FormatFloat(v, 'g', -1, 64)}
}

// values write themselves with AppendJSONFloat.
type values map[string]float64

func (vs values) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for k, v := range vs {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(strconv.AppendQuote(b, k), ':'), metrics.AppendJSONFloat(nil, v)...)
	}
	return append(b, '}'), nil
}

func marshalValues(vs values) ([]byte, error) { return json.Marshal(vs) }

var desc = &metrics.Desc{Name: "x_count", Unit: metrics.UnitCount}

func add(b *metrics.Batch, v float64) {
	b.Add(desc, v, "src")
	_ = metrics.At(desc, v)
}

func formatted(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
