package wandb

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/tracker"
)

// A job's run keeps the job's records in its summary, under summaryKey
// (its nodes' series are in runs of their own: noderun.go): "nodes" (each node's end, the same facts as its MLflow end
// tags, under its label), "first_failure" (as MLflow's
// bridge.job.first_failure) and "report" (the report's summary, a line for
// the job and one a node). The sink records its node's end there
// (recordNodeEnd); as a run store (GetRun, SetTags) it gives package
// jobrun the records and takes the first failure and the report. What
// W&B's API does not allow, the store does not offer: the run's status is
// the child's, there is no compare-and-set (nodes ending at the same
// moment may each write over the other's record; the MLflow run's tags
// are the record), and bridge reads no series history or artifacts.
const summaryKey = "bridge"

// runSummaryQuery reads a run's summary (the public API's run.summary).
const runSummaryQuery = `query RunSummary($project: String, $entity: String, $name: String!) {
	model(name: $project, entityName: $entity) {
		bucket(name: $name, missingOk: true) {
			id
			summaryMetrics
			notes
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

// upsertNotesMutation sets the run's notes alone, as the public API's
// run.notes then run.update() does for that field (UpsertBucket updates
// the fields it is given).
const upsertNotesMutation = `mutation UpsertBucket($name: String, $project: String, $entity: String, $notes: String) {
	upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, notes: $notes}) {
		bucket {
			id
		}
	}
}`

var _ tracker.NoteWriter = (*Sink)(nil)

// summary is a run's summary as read, and bridge's section of it.
type summary struct {
	all    map[string]any // the whole summary: the child's, and bridge's section
	bridge map[string]any // all[summaryKey]
	nodes  map[string]any // bridge["nodes"]
	notes  string         // the run's notes, "" for none
}

// readSummary reads run's summary; the run not created yet (by the child's
// wandb.init) wraps tracker.ErrNotReady.
func (s *Sink) readSummary(ctx context.Context, run string) (summary, error) {
	v := s.runVars(run)
	var resp struct {
		Model *struct {
			Bucket *struct {
				Summary *string `json:"summaryMetrics"`
				Notes   *string `json:"notes"`
			} `json:"bucket"`
		} `json:"model"`
	}
	if err := s.graphql(ctx, "RunSummary", runSummaryQuery, v, &resp); err != nil {
		return summary{}, err
	}
	if resp.Model == nil || resp.Model.Bucket == nil {
		return summary{}, fmt.Errorf("%w: W&B run %s does not exist (the training process creates it with wandb.init)", tracker.ErrNotReady, s.runPath())
	}
	sum := summary{all: map[string]any{}, notes: derefOr(resp.Model.Bucket.Notes, "")}
	if raw := resp.Model.Bucket.Summary; raw != nil && *raw != "" {
		if err := json.Unmarshal([]byte(*raw), &sum.all); err != nil {
			// Writing it back would lose the child's summary.
			return summary{}, fmt.Errorf("the run's summary is no JSON object bridge can keep: %w", err)
		}
	}
	sum.bridge, _ = sum.all[summaryKey].(map[string]any)
	if sum.bridge == nil {
		sum.bridge = map[string]any{}
	}
	sum.nodes, _ = sum.bridge["nodes"].(map[string]any)
	if sum.nodes == nil {
		sum.nodes = map[string]any{}
	}
	return sum, nil
}

// writeSummary writes sum back whole: the rest of the summary (the
// child's) as read; bridge's section only when it holds something.
func (s *Sink) writeSummary(ctx context.Context, run string, sum summary) error {
	if len(sum.nodes) > 0 {
		sum.bridge["nodes"] = sum.nodes
	}
	if len(sum.bridge) > 0 {
		sum.all[summaryKey] = sum.bridge
	}
	js, err := json.Marshal(sum.all)
	if err != nil {
		return tracker.Permanent(fmt.Errorf("encoding the run's summary: %w", err))
	}
	v := s.runVars(run)
	v["summaryMetrics"] = string(js)
	var out struct {
		UpsertBucket *struct{} `json:"upsertBucket"`
	}
	return s.graphql(ctx, "UpsertBucket", upsertSummaryMutation, v, &out)
}

// recordNodeEnd adds who's end to the job's records in the run's summary.
// A failed attempt is kept past a later clean one, as MLflow's
// bridge.failed.<node>: the first failure it was stays one.
func (s *Sink) recordNodeEnd(ctx context.Context, end tracker.EndInfo, who string) error {
	sum, err := s.readSummary(ctx, s.cfg.RunID)
	if err != nil {
		return err
	}
	rec := nodeEnd(end)
	if prev, _ := sum.nodes[who].(map[string]any); prev != nil {
		if f, _ := prev["failed"].(string); f != "" {
			rec["failed"] = f
		} else if st, _ := prev["status"].(string); st != "" && st != tracker.StatusFinished {
			rec["failed"] = st
		}
	}
	sum.nodes[who] = rec
	return s.writeSummary(ctx, s.cfg.RunID, sum)
}

// figureKey is the summary key of one of the job's figures,
// bridge/<name>: a column the runs table sorts by.
func figureKey(name string) string { return "bridge/" + name }

// recordFigures writes the job's figures (tracker.EndInfo.Figures) into
// run's summary, each finite and within its range; the rest of the
// summary is kept.
func (s *Sink) recordFigures(ctx context.Context, run string, end tracker.EndInfo) error {
	if len(end.Figures) == 0 {
		return nil
	}
	sum, err := s.readSummary(ctx, run)
	if err != nil {
		return err
	}
	for _, p := range end.Figures {
		if f, ok := metrics.Finite(p.Value); ok && p.Desc != nil && p.Desc.Range().Holds(p.Value) {
			sum.all[figureKey(p.Name())] = f
		}
	}
	return s.writeSummary(ctx, run, sum)
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

// GetRun implements tracker.RunStore: the job's records in the run's
// summary, read as the MLflow run's tags would be (a shared run marked a
// job's by its id as the key; each node's end under bridge.node.<label>.,
// its failure in bridge.failed.<label>; the first failure recorded), the
// run's notes, and the step the child's wandb reached (the summary's
// _step). Its status is FAILED or KILLED as the worst of the nodes' ends,
// else none: W&B's run state is the child's, and how many nodes are still
// to end is not known here.
func (s *Sink) GetRun(ctx context.Context, id string) (tracker.StoredRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum, err := s.readSummary(ctx, id)
	if err != nil {
		return tracker.StoredRun{}, err
	}
	first, _ := sum.bridge["first_failure"].(string)
	run := tracker.StoredRun{ID: id, Tags: map[string]string{tracker.TagFirstFailure: first}, Note: sum.notes}
	if s.cfg.Shared {
		run.Tags[tracker.TagJobKey] = id
	}
	if step, ok := sum.all["_step"].(float64); ok && step > 0 && step < 1<<62 {
		run.Step = int64(step)
	}
	for label, n := range sum.nodes {
		m, _ := n.(map[string]any)
		for k, v := range m {
			if sv, ok := v.(string); ok {
				run.Tags["bridge.node."+label+"."+k] = sv
			}
		}
		if f, _ := m["failed"].(string); f != "" {
			run.Tags["bridge.failed."+label] = f
		}
		if st, _ := m["status"].(string); tracker.Severity(st) > tracker.Severity(run.Status) {
			run.Status = st
		}
	}
	if run.Status == tracker.StatusFinished {
		run.Status = ""
	}
	return run, nil
}

// SetTags implements tracker.RunStore for the job's tags the summary
// holds: the first failure (tracker.TagFirstFailure) and the report's
// summary (tracker.TagReportSummary). The rest of the summary is written
// back as read just before.
func (s *Sink) SetTags(ctx context.Context, id string, tags map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum, err := s.readSummary(ctx, id)
	if err != nil {
		return err
	}
	for k, v := range tags {
		switch k {
		case tracker.TagFirstFailure:
			sum.bridge["first_failure"] = v
		case tracker.TagReportSummary:
			sum.bridge["report"] = v
		default:
			return fmt.Errorf("W&B run %s: the job's records in its summary hold no tag %s", s.runPath(), k)
		}
	}
	return s.writeSummary(ctx, id, sum)
}

// SetNote implements tracker.NoteWriter: the run's notes, alone.
func (s *Sink) SetNote(ctx context.Context, id, note string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.runVars(id)
	v["notes"] = note
	var out struct {
		UpsertBucket *struct{} `json:"upsertBucket"`
	}
	return s.graphql(ctx, "UpsertBucket", upsertNotesMutation, v, &out)
}

// runVars name run for a GraphQL request: its project and entity as
// found (lookupRun), else as configured (nil: the server's defaults).
func (s *Sink) runVars(run string) map[string]any {
	return map[string]any{"name": run, "project": nilIfEmpty(firstNonEmpty(s.project, s.cfg.Project)),
		"entity": nilIfEmpty(firstNonEmpty(s.entity, s.cfg.Entity))}
}
