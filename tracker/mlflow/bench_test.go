package mlflow

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkEncodeBatch is one sample's log-batch body: 37 metrics under
// system/ encoded as MLflow's protobuf JSON, as Send builds it (the
// request itself is MLflow's cost, measured by bench/load.sh).
func BenchmarkEncodeBatch(b *testing.B) {
	keys := make([]string, 37)
	for i := range keys {
		keys[i] = fmt.Sprintf("system/container_metric_number_%02d_megabytes", i)
	}
	bt := newBatch("0123456789abcdef0123456789abcdef", maxMetricsPerBatch, maxBodyBytes)
	b.ReportAllocs()
	var body []byte
	for b.Loop() {
		bt.reset()
		for i, k := range keys {
			m := encodeMetric(k, float64(i)*1.25, 1_764_000_000_000, 42)
			if !bt.fits(m) {
				b.Fatal("one sample does not fit one batch")
			}
			bt.add(m)
		}
		body = bt.body()
	}
	if !json.Valid(body) {
		b.Fatalf("invalid body %s", body)
	}
}
