package wandb

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
)

// summaryKey holds the job's report in a shared run's summary: "nodes"
// (each node's end, the same facts as its MLflow end tags, under its
// label), "first_failure" (as MLflow's bridge.job.first_failure) and
// "report" (the report's summary, a line for the job and one a node).
const summaryKey = "bridge"

// runSummaryQuery reads a run's summary (the public API's run.summary).
const runSummaryQuery = `query RunSummary($project: String, $entity: String, $name: String!) {
	model(name: $project, entityName: $entity) {
		bucket(name: $name, missingOk: true) {
			id
			summaryMetrics
		}
	}
}`

// upsertSummaryMutation sets the run's summary as the public API's
// run.summary.update() does: the whole of it.
const upsertSummaryMutation = `mutation UpsertBucket($name: String, $project: String, $entity: String, $summaryMetrics: JSONString) {
	upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, summaryMetrics: $summaryMetrics}) {
		bucket {
			id
		}
	}
}`

// recordJobSummary adds who's end to the job's report in the run's
// summary and makes the report again from every node's end there: the
// first failure (never replaced by a later one) and the report's lines.
// The rest of the summary (the child's) is kept. W&B has no
// compare-and-set: nodes ending at the same moment may each write over
// the other's end; the MLflow run's tags are the record.
func (s *Sink) recordJobSummary(ctx context.Context, end tracker.EndInfo, who string) error {
	v := map[string]any{"name": s.cfg.RunID, "project": nilIfEmpty(s.project), "entity": nilIfEmpty(s.entity)}
	var resp struct {
		Model *struct {
			Bucket *struct {
				Summary *string `json:"summaryMetrics"`
			} `json:"bucket"`
		} `json:"model"`
	}
	if err := s.graphql(ctx, "RunSummary", runSummaryQuery, v, &resp); err != nil {
		return err
	}
	if resp.Model == nil || resp.Model.Bucket == nil {
		return nil
	}
	sum := map[string]any{}
	if raw := resp.Model.Bucket.Summary; raw != nil && *raw != "" {
		if err := json.Unmarshal([]byte(*raw), &sum); err != nil {
			// Writing it back would lose the child's summary.
			return fmt.Errorf("the run's summary is no JSON object bridge can keep: %w", err)
		}
	}
	b, _ := sum[summaryKey].(map[string]any)
	if b == nil {
		b = map[string]any{}
	}
	nodes, _ := b["nodes"].(map[string]any)
	if nodes == nil {
		nodes = map[string]any{}
	}
	rec := nodeEnd(end)
	// A failed attempt is kept past a later clean one, as MLflow's
	// bridge.failed.<node>: the first failure it was stays one.
	if prev, _ := nodes[who].(map[string]any); prev != nil {
		if f, _ := prev["failed"].(string); f != "" {
			rec["failed"] = f
		} else if st, _ := prev["status"].(string); st != "" && st != tracker.StatusFinished {
			rec["failed"] = st
		}
	}
	nodes[who] = rec
	recorded, _ := b["first_failure"].(string)
	rep := jobReport(s.cfg.RunID, nodes, recorded)
	// The report's first failure is the recorded one where that agrees
	// with the nodes and is earlier, else the records'.
	if f := rep.FirstFailure; f != nil {
		b["first_failure"] = f.Tag()
	}
	b["nodes"], b["report"] = nodes, rep.Summary()
	sum[summaryKey] = b
	js, err := json.Marshal(sum)
	if err != nil {
		return tracker.Permanent(fmt.Errorf("encoding the run's summary: %w", err))
	}
	v["summaryMetrics"] = string(js)
	var out struct {
		UpsertBucket *struct{} `json:"upsertBucket"`
	}
	return s.graphql(ctx, "UpsertBucket", upsertSummaryMutation, v, &out)
}

// nodeEnd is a node's end as the summary keeps it: its end tags without
// "bridge.", its status and its end time (ms), all strings.
func nodeEnd(end tracker.EndInfo) map[string]any {
	rec := map[string]any{}
	for k, v := range end.Tags {
		if rest, ok := strings.CutPrefix(k, "bridge."); ok {
			rec[rest] = v
		}
	}
	rec["status"] = tracker.TerminalStatus(end)
	if !end.Time.IsZero() {
		rec["ended"] = strconv.FormatInt(end.Time.UnixMilli(), 10)
	}
	return rec
}

// jobReport is the report of the nodes' ends the summary holds, read as
// the MLflow run's tags would be. Its status is FAILED or KILLED as the
// worst of the nodes' ends, else none: W&B's run state is the child's, and
// how many nodes are still to end is not known here.
func jobReport(run string, nodes map[string]any, firstFailure string) *report.Report {
	tags := map[string]string{report.TagJobKey: run, report.TagFirstFailure: firstFailure}
	status := ""
	for id, n := range nodes {
		m, _ := n.(map[string]any)
		for k, v := range m {
			if sv, ok := v.(string); ok {
				tags["bridge.node."+id+"."+k] = sv
			}
		}
		if f, _ := m["failed"].(string); f != "" {
			tags["bridge.failed."+id] = f
		}
		if st, _ := m["status"].(string); tracker.Severity(st) > tracker.Severity(status) {
			status = st
		}
	}
	if status == tracker.StatusFinished {
		status = ""
	}
	rep, _ := report.Build(context.Background(), report.Run{ID: run, Status: status, Tags: tags}, nil) // no series: no error
	return rep
}
