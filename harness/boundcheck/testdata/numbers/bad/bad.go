// Package bad lets a float reach a JSON encoder unguarded, and adds points
// without a descriptor, in every way the numbers rule knows; each function
// is one way.
package bad

import (
	"encoding/json"
	"io"

	"github.com/bridge-dev/bridge/metrics"
)

func marshalFloat(v float64) ([]byte, error) { return json.Marshal(v) }

type figures struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	skip  float64 // unexported: never encoded
}

func marshalStruct(f figures) ([]byte, error) { return json.Marshal(f) }

func encodeSlice(w io.Writer, vs []float64) error { return json.NewEncoder(w).Encode(vs) }

func indentMap(m map[string]float64) ([]byte, error) { return json.MarshalIndent(m, "", " ") }

func mapOfAny(v float64) map[string]any { return map[string]any{"v": v, "ok": 1.5} }

func assignAny(m map[string]any, v float64) {
	m["v"] = v
	m["w"], _ = two(v)
}

func two(v float64) (float64, error) { return v, nil }

func appendAny(s []any, v float32) []any { return append(s, v) }

func returnAny(v float64) any { return v }

type point struct{ Value any }

func fieldAny(v float64) point { return point{Value: v} }

func named(b *metrics.Batch) { b.Points = append(b.Points[:0], metrics.Named("x", 1)) }

func pointLiteral() []metrics.Point { return []metrics.Point{{Value: 1}} }

func nilDesc(b *metrics.Batch) { b.Add(nil, 1, "") }

func rawPoints(b *metrics.Batch, p []metrics.Point) { b.Points = p }

type request struct{ Value float64 }

func send(w io.Writer, body any) error { return json.NewEncoder(w).Encode(body) }

func post(w io.Writer, body any) error { return send(w, body) }

func throughWrapper(w io.Writer, v float64) error { return post(w, request{Value: v}) }
