package mlflow

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Run is what runs/get answers, reduced to what bridge reads.
type Run struct {
	Info RunInfo `json:"info"`
	Data RunData `json:"data"`
}

// RunInfo is a run's identity and status.
type RunInfo struct {
	RunID          string `json:"run_id"`
	RunName        string `json:"run_name"`
	ExperimentID   string `json:"experiment_id"`
	Status         string `json:"status"`
	LifecycleStage string `json:"lifecycle_stage"`
	ArtifactURI    string `json:"artifact_uri"`
	StartTime      Int64  `json:"start_time"`
	EndTime        Int64  `json:"end_time"`
}

// RunData holds the run's latest metric values and its tags.
type RunData struct {
	Metrics []Metric `json:"metrics"`
	Tags    []Tag    `json:"tags"`
	Params  []Tag    `json:"params"` // same shape as a tag: key and value
}

// TagMap returns the tags as a map.
func (d RunData) TagMap() map[string]string {
	m := make(map[string]string, len(d.Tags))
	for _, t := range d.Tags {
		m[t.Key] = t.Value
	}
	return m
}

// Tag is one run tag.
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Metric is one stored metric point.
type Metric struct {
	Key       string  `json:"key"`
	Value     Float64 `json:"value"`
	Timestamp Int64   `json:"timestamp"` // milliseconds since the epoch
	Step      Int64   `json:"step"`
}

// Float64 decodes MLflow's metric values: JSON numbers, and the protobuf
// JSON strings "NaN", "Infinity", "-Infinity".
type Float64 float64

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float64) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := parseSpecialFloat(s)
		if err != nil {
			return err
		}
		*f = Float64(v)
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("metric value %s: %w", b, err)
	}
	*f = Float64(v)
	return nil
}

func parseSpecialFloat(s string) (float64, error) {
	switch s {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// Int64 decodes int64 fields sent as JSON numbers or, as protobuf JSON may,
// as strings.
type Int64 int64

// UnmarshalJSON implements json.Unmarshaler.
func (n *Int64) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("int64 field %s: %w", b, err)
		}
		*n = Int64(v)
		return nil
	}
	var v int64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("int64 field %s: %w", b, err)
	}
	*n = Int64(v)
	return nil
}

type experiment struct {
	ExperimentID   string `json:"experiment_id"`
	Name           string `json:"name"`
	LifecycleStage string `json:"lifecycle_stage"`
}

type runResponse struct {
	Run Run `json:"run"`
}

type createRunRequest struct {
	ExperimentID string `json:"experiment_id"`
	RunName      string `json:"run_name,omitempty"`
	StartTime    int64  `json:"start_time"`
	Tags         []Tag  `json:"tags,omitempty"`
}

type updateRunRequest struct {
	RunID   string `json:"run_id"`
	Status  string `json:"status"`
	EndTime int64  `json:"end_time"`
}

type logBatchTags struct {
	RunID string `json:"run_id"`
	Tags  []Tag  `json:"tags"`
}

// maxTagValue is MLflow's limit in characters (code points); longer values
// are a 400 unless the server truncates (MLFLOW_TRUNCATE_LONG_VALUES).
const maxTagValue = 8000

// tagList returns tags sorted by key, so requests are reproducible, with
// values cut to MLflow's limit.
func tagList(tags map[string]string) []Tag {
	list := make([]Tag, 0, len(tags))
	for k, v := range tags {
		list = append(list, Tag{Key: k, Value: truncateRunes(v, maxTagValue)})
	}
	slices.SortFunc(list, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	return list
}

// truncateRunes keeps the first n code points of s.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}
