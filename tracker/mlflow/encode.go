package mlflow

import (
	"encoding/json"
	"strconv"

	"github.com/bridge-dev/bridge/metrics"
)

// batch builds one runs/log-batch body by hand, so that its exact size is
// known before a metric is added and the server's 1e6-byte limit is never
// crossed.
type batch struct {
	head       []byte // {"run_id":"...","metrics":[
	buf        []byte // metrics, comma separated
	count      int
	maxMetrics int
	maxBody    int
}

const batchTail = "]}"

func newBatch(runID string, maxMetrics, maxBody int) *batch {
	id, _ := json.Marshal(runID) // a string always marshals
	head := append([]byte(`{"run_id":`), id...)
	head = append(head, `,"metrics":[`...)
	return &batch{head: head, maxMetrics: maxMetrics, maxBody: maxBody}
}

// fits reports whether m can join the batch. An empty batch takes any one
// metric: a single metric is a few hundred bytes at most (keys are limited
// to 250 characters).
func (b *batch) fits(m []byte) bool {
	if b.count == 0 {
		return true
	}
	size := len(b.head) + len(b.buf) + 1 + len(m) + len(batchTail)
	return b.count < b.maxMetrics && size <= b.maxBody
}

func (b *batch) add(m []byte) {
	if b.count > 0 {
		b.buf = append(b.buf, ',')
	}
	b.buf = append(b.buf, m...)
	b.count++
}

func (b *batch) reset() {
	b.buf = b.buf[:0]
	b.count = 0
}

// body returns a fresh copy: resty may hold the slice after the call.
func (b *batch) body() []byte {
	out := make([]byte, 0, len(b.head)+len(b.buf)+len(batchTail))
	out = append(out, b.head...)
	out = append(out, b.buf...)
	return append(out, batchTail...)
}

// encodeMetric renders one metric as protobuf JSON (non-finite values by
// metrics.AppendJSONFloat).
func encodeMetric(key string, value float64, timestampMS, step int64) []byte {
	k, _ := json.Marshal(key)
	m := make([]byte, 0, len(k)+80)
	m = append(m, `{"key":`...)
	m = append(m, k...)
	m = append(m, `,"value":`...)
	m = metrics.AppendJSONFloat(m, value)
	m = append(m, `,"timestamp":`...)
	m = strconv.AppendInt(m, timestampMS, 10)
	m = append(m, `,"step":`...)
	m = strconv.AppendInt(m, step, 10)
	return append(m, '}')
}
