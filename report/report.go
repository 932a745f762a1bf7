// Package report makes a run's report: the job's status, its first
// failure, and one row per node (its end, memory, CPU, GPU, energy and
// network figures, and whether it differs from the job's other nodes),
// from what the tracker holds of the run: the tags each node's bridge
// recorded, and its series where a node recorded no figures (it still
// runs, or its bridge died). It reads through a History function and makes
// no request itself; rendering is Markdown, text and JSON
// (docs/multinode.md, "The job's report").
package report

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/jobkey"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/stats"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/whyslow"
)

// Run statuses the report reads (MLflow's names; package tracker has no
// running status of its own).
const (
	statusRunning  = "RUNNING"
	statusFinished = tracker.StatusFinished
)

// TagJobKey marks a job's run: its value is the job's key.
const TagJobKey = tracker.TagJobKey

// oomKilled reports a forensics reason of an OOM kill.
func oomKilled(reason string) bool {
	return reason == forensics.ReasonCgroupOOMKill || reason == forensics.ReasonNodeOOMKill
}

// Report is a run's report.
type Report struct {
	Run          string   `json:"run"`
	Status       string   `json:"status"`
	FirstFailure *Failure `json:"first_failure"`
	// FailureTagDisagrees says how the run's TagFirstFailure disagrees
	// with the nodes' records, when it does: then it is not the first
	// failure.
	FailureTagDisagrees string `json:"first_failure_tag_disagrees,omitempty"`
	// ExpectedNodes is the job's node count its nodes recorded (TagNodes),
	// 0 when none did; MissingNodes how many of them recorded nothing.
	// Those are rows of status StatusMissing where the nodes are named by
	// their index (node-<i>), else only counted.
	ExpectedNodes int    `json:"expected_nodes,omitempty"`
	MissingNodes  int    `json:"missing_nodes,omitempty"`
	Nodes         []Node `json:"nodes"`
	// Notes say what could not be read (a node's series), if anything.
	Notes []string `json:"notes,omitempty"`
	// ValuesRefused counts the numbers of the nodes' tags and series left
	// out, out of their series' range (a tag that says 1e306 MB); Notes
	// name them.
	ValuesRefused int `json:"values_refused,omitempty"`
	// The job's energy (every node's GPUs and CPU packages), the largest
	// step its run's own series reached and the energy per step; the
	// job's cost (every node's that has one). Left out where not known.
	EnergyJoules        *metrics.Float `json:"energy_joules,omitempty"`
	Steps               int64          `json:"steps,omitempty"`
	EnergyPerStepJoules *metrics.Float `json:"energy_per_step_joules,omitempty"`
	Cost                *metrics.Float `json:"cost,omitempty"`
	// Differed is when each node differed from the job while it ran (a
	// multi-node job's TagDiffered), oldest first.
	Differed []Span `json:"differed,omitempty"`

	multi bool // a multi-node job's run (TagJobKey), not a single run's
}

// StatusMissing is the status of a node the job expected (TagNodes) that
// recorded nothing on the run: it never started bridge, or never reached
// the tracker.
const StatusMissing = "MISSING"

// ReasonNeverRecorded is a missing node's reason.
const ReasonNeverRecorded = "never_recorded"

// TagNodes is the job's node count, as its launcher gave it.
const TagNodes = tracker.TagNodes

// maxMissingRows bounds the rows of missing nodes: a count the launcher
// got wrong (or a forged tag) costs one line, not a row per node.
const maxMissingRows = 64

// missing finds the nodes the job expected that recorded nothing: a row
// for each, named node-<i> (jobkey.NodeName) where every node recorded is
// named by its index, else a count.
func (r *Report) missing(run Run, nodes []node) {
	if run.Tags[TagJobKey] == "" {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(run.Tags[TagNodes]))
	if err != nil || n <= 0 {
		return
	}
	r.ExpectedNodes = n
	if n <= len(nodes) {
		return
	}
	r.MissingNodes = n - len(nodes)
	have := map[string]bool{}
	for _, nd := range nodes {
		i, err := strconv.Atoi(strings.TrimPrefix(nd.id, "node-"))
		if err != nil || i < 0 || i >= n || jobkey.NodeName(i) != nd.id {
			return // not named by index: the missing ones cannot be named
		}
		have[nd.id] = true
	}
	if r.MissingNodes > maxMissingRows {
		return
	}
	for i := range n {
		if id := jobkey.NodeName(i); !have[id] {
			r.Nodes = append(r.Nodes, Node{Node: id, Status: StatusMissing, Reason: ReasonNeverRecorded,
				Detail: fmt.Sprintf("expected (%s=%d), recorded nothing", TagNodes, n)})
		}
	}
}

// Node is one node's row.
type Node struct {
	Node     string `json:"node"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// Consequence says that the node was stopped after the first failure
	// (within ConsequenceWindow), and how long after; ConsequenceOf is the
	// first failure's node.
	Consequence   string `json:"consequence,omitempty"`
	ConsequenceOf string `json:"consequence_of,omitempty"`
	// Started is when the node's command started, and DurationSeconds
	// how long it ran, as its bridge recorded them at its end.
	Started         string         `json:"started,omitempty"` // RFC 3339, UTC
	DurationSeconds *metrics.Float `json:"duration_seconds,omitempty"`
	Ended           string         `json:"ended,omitempty"`       // RFC 3339, UTC, by the node's own clock
	EndedClock      string         `json:"ended_clock,omitempty"` // that clock's source
	// ProcessTreePeakRSSMB is the highest RSS of the command's process
	// tree (all its processes together).
	ProcessTreePeakRSSMB *metrics.Float `json:"process_tree_peak_rss_megabytes,omitempty"`
	// PeakWorkingSetSource says where the peak comes from: the samples, or
	// the kernel's high-water mark where the node was OOM-killed.
	PeakWorkingSetSource string `json:"peak_working_set_source,omitempty"`
	Figures
	// Bottleneck is the node's bottleneck verdict over the job, as its
	// bridge recorded it (whyslow.Tag: the cause, then why); "" when
	// it recorded none. BottleneckShares is each cause's share of the
	// node's time, from its series' last values (every cause with some).
	Bottleneck       string                    `json:"bottleneck,omitempty"`
	BottleneckShares map[string]*metrics.Float `json:"bottleneck_shares,omitempty"`
	// Differs lists why the node differs from the job (DiffersRule).
	Differs []string `json:"differs,omitempty"`
	// Unused says each limit the node's job left mostly unused
	// (advice.Suggest); CostBasis how its Cost was reckoned.
	Unused    []string `json:"unused,omitempty"`
	CostBasis string   `json:"cost_basis,omitempty"`
}

// Run is what the report reads of a run.
type Run struct {
	ID      string
	Status  string
	EndTime time.Time // zero while the run is active
	Tags    map[string]string
	Latest  map[string]float64 // every metric key's last value
	// Step is the largest step the run's own series reached (the training
	// script's, not bridge's system/ series), 0 when it has none.
	Step int64
}

// History reads every point of one metric key of the run, oldest first.
type History func(ctx context.Context, key string) ([]Point, error)

// NodeRun opens a node's own run (a multi-node job's node, whose state
// line names its run) for its series: the latest value of each, and a
// History of them.
type NodeRun func(ctx context.Context, run string) (latest map[string]float64, history History, err error)

// Read is how Build reads series: the run's own (History), and the runs of
// the job's nodes (NodeRun), of at most MaxNodeRuns nodes (0:
// DefaultMaxNodeRuns). A nil one reads none.
type Read struct {
	History     History
	NodeRun     NodeRun
	MaxNodeRuns int
}

// DefaultMaxNodeRuns bounds the node runs one report reads: the nodes of a
// large job that recorded no end (still running, or their bridge died)
// cost a read each, and a job of a thousand of them would cost minutes.
// The report names the nodes it did not read.
const DefaultMaxNodeRuns = 32

// sourceKernel is the peak's source where the report takes the kernel's
// high-water mark.
const sourceKernel = summary.SourceKernelPeak + " at the OOM kill"

// Build makes run's report. Each node that recorded its figures at its end
// costs no request; the series of every other node (still running, or its
// bridge died before recording its end) are read once each through
// history, and only those the report uses. A series that cannot be read
// leaves its figures out and a note. When ctx ends while series are read,
// Build returns the report so far (every row, from the tags; the figures
// of the nodes not read yet left out, and a note naming them and
// context.Cause) with an error that wraps ctx's.
func Build(ctx context.Context, run Run, history History) (*Report, error) {
	return BuildRead(ctx, run, Read{History: history})
}

// BuildRead is Build, reading series as rd says: a node of a multi-node
// job whose state line names its own run and records no figures is read
// from that run (its latest values, then its series), for at most
// rd.MaxNodeRuns nodes; the others are named in a note.
func BuildRead(ctx context.Context, run Run, rd Read) (*Report, error) {
	rep := &Report{Run: run.ID, Status: run.Status, Nodes: []Node{}, multi: run.Tags[TagJobKey] != ""}
	nodes := nodesOf(run)
	ends := endsOf(run, nodes)
	rep.setFirstFailure(run, ends)
	var stopped error
	var unread, notRead []string
	maxRuns := rd.MaxNodeRuns
	if maxRuns <= 0 {
		maxRuns = DefaultMaxNodeRuns
	}
	runsRead := 0
	for i, n := range nodes {
		rec := ends[i].rec
		row := Node{Node: n.id, Status: rec.status, ExitCode: rec.exitCode, Reason: rec.reason, Detail: rec.detail,
			EndedClock: rec.clock, PeakWorkingSetSource: rec.peakSource}
		if row.Status == "" {
			row.Status = statusRunning
		}
		if !rec.ended.IsZero() {
			row.Ended = rec.ended.Format(timeLayout)
		}
		if !rec.started.IsZero() {
			row.Started = rec.started.Format(timeLayout)
		}
		row.DurationSeconds, row.ProcessTreePeakRSSMB = rec.duration, rec.treeRSS
		if row.Consequence = consequence(rep.FirstFailure, n.id, rec); row.Consequence != "" {
			row.ConsequenceOf = rep.FirstFailure.Node
		}
		refused := rec.refused
		switch {
		case rec.figures != nil:
			row.Figures = *rec.figures
		case stopped != nil:
			unread = append(unread, n.id)
		case n.line != "" && (rec.run == "" || rd.NodeRun == nil):
			// A node's line without figures whose run cannot be read: its
			// row is its line.
		case n.line != "" && runsRead >= maxRuns:
			notRead = append(notRead, n.id)
		default:
			latest, history := run.Latest, rd.History
			var err error
			if n.line != "" {
				runsRead++
				latest, history, err = rd.NodeRun(ctx, rec.run)
			}
			var f Figures
			if err == nil {
				f, err = n.readFigures(ctx, latest, history)
			} else if ctx.Err() == nil {
				err = fmt.Errorf("its run %s: %w", rec.run, err)
			}
			if err != nil && ctx.Err() != nil {
				stopped = ctx.Err()
				unread = append(unread, n.id)
				break
			}
			if err != nil {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %v", n.id, err))
			}
			for _, x := range f.keepValid() {
				refused = append(refused, "series "+x)
			}
			row.Figures = f
		}
		if len(refused) > 0 {
			rep.ValuesRefused += len(refused)
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d out of range, left out: %s", n.id, len(refused), strings.Join(refused, "; ")))
		}
		fromTags(&row, rec)
		advise(&row, rec)
		row.Bottleneck = rec.bottleneck
		if shares, refused := n.bottleneckShares(run); len(shares) > 0 || len(refused) > 0 {
			row.BottleneckShares = shares
			if len(refused) > 0 {
				rep.ValuesRefused += len(refused)
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d out of range, left out: %s", n.id, len(refused), strings.Join(refused, "; ")))
			}
		}
		rep.Nodes = append(rep.Nodes, row)
	}
	rep.missing(run, nodes)
	if parent := run.Tags[tagParentRun]; run.Tags[TagJob] != "" && parent != "" {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the run of node %s of a multi-node job: the job's run is %s (bridge report %s)",
			run.Tags["bridge.node_id"], parent, parent))
	}
	rep.jobFigures(run)
	if rep.multi {
		rep.Differed = ParseSpans(run.Tags[TagDiffered])
	}
	byNode(rep.Nodes)
	differs(rep.Nodes)
	if len(notRead) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d nodes recorded no end and their runs were not read (a report reads at most %d nodes' runs): %s",
			len(notRead), maxRuns, clipList(notRead, 10)))
	}
	if stopped != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the series of %s were not read: %v", strings.Join(unread, ", "), context.Cause(ctx)))
		return rep, fmt.Errorf("reading the nodes' series: %w", stopped)
	}
	return rep, nil
}

// fromTags puts what the node's end tags say over what its series say: the
// limits it started with, the throttled share and energy it measured, and
// the peak working set. The node's bridge decides whether that peak is the
// kernel's high-water mark (summary.PeakWorkingSet) and says so in its
// source tag; only a node whose bridge predates that tag gets the kernel's
// mark here, at an OOM kill (the samples miss the last allocations).
func fromTags(row *Node, rec record) {
	if rec.peakMB != nil {
		row.PeakWorkingSetMB = rec.peakMB
	}
	if row.PeakWorkingSetMB != nil && row.PeakWorkingSetSource == "" {
		row.PeakWorkingSetSource = summary.SourceSampled
	}
	if oomKilled(rec.reason) && rec.peakSource == "" && rec.kernelPeakMB != nil &&
		(row.PeakWorkingSetMB == nil || rec.kernelPeakMB.Float64() > row.PeakWorkingSetMB.Float64()) {
		row.PeakWorkingSetMB, row.PeakWorkingSetSource = rec.kernelPeakMB, sourceKernel
	}
	for _, f := range []struct {
		dst **metrics.Float
		v   *metrics.Float
	}{
		{&row.MemoryLimitMB, rec.limitMB}, {&row.CPULimitCores, rec.cpuLimit},
		{&row.ThrottledSharePercent, rec.throttled},
		{&row.GPUEnergyJoules, rec.gpuJoules}, {&row.NodeCPUEnergyJoules, rec.cpuJoules},
		{&row.SuggestedMemoryLimitMB, rec.suggestedMB}, {&row.SuggestedCPUCores, rec.suggestedCPU}, {&row.Cost, rec.cost},
	} {
		if f.v != nil {
			*f.dst = f.v
		}
	}
}

// node is one node of a run: its id, the prefix of its tags and of its
// metric keys; or, on a job's run with state lines, the tag of its line
// (its series are in the run the line names).
type node struct {
	id, scope, keys string
	single          bool
	line            string
}

// nodeScopeTag finds a job's nodes in the shared run's layout (no state
// lines): every node recorded when it started, and when it ended,
// under bridge.node.<id>. (a node id has no '/', but may have '.', as some
// of its other tags do: .gpu.status).
var nodeScopeTag = regexp.MustCompile(`^bridge\.node\.(.+)\.(started|ended)$`)

// tagParentRun is MLflow's tag of a nested run: a node's run names the
// job's run in it.
const tagParentRun = "mlflow.parentRunId"

// TagJob marks a node's own run of a multi-node job: its value is the
// job's key (never TagJobKey, by which the job's run is found).
const TagJob = "bridge.job"

// nodesOf lists run's nodes: a job's run (tagged bridge.job_key) has the
// nodes that wrote a state line, or (the shared run's layout) recorded
// tags or series under their id; any other run is one node (a
// node's own run: the node it names).
func nodesOf(run Run) []node {
	if run.Tags[TagJobKey] == "" {
		id := run.Tags["bridge.node_id"]
		keys := "system/"
		if id != "" && run.Tags[TagJob] == "" {
			keys += id + "/"
		} else if id == "" {
			if id = run.Tags["bridge.hostname"]; id == "" {
				id = "-"
			}
		}
		return []node{{id: id, scope: "bridge.", keys: keys, single: true}}
	}
	return jobNodes(run)
}

// jobNodes lists the nodes of a job's run.
func jobNodes(run Run) []node {
	byID := map[string]node{}
	for k := range run.Tags {
		if id, ok := strings.CutPrefix(k, tracker.TagStatePrefix); ok && id != "" && !strings.Contains(id, "/") {
			byID[id] = node{id: id, line: k, keys: "system/"}
		}
	}
	for k := range run.Tags {
		if m := nodeScopeTag.FindStringSubmatch(k); m != nil {
			if _, ok := byID[m[1]]; !ok {
				byID[m[1]] = node{id: m[1], scope: "bridge.node." + m[1] + ".", keys: "system/" + m[1] + "/"}
			}
		}
	}
	for k := range run.Latest {
		if rest, ok := strings.CutPrefix(k, "system/"); ok {
			if id, _, ok := strings.Cut(rest, "/"); ok {
				if _, seen := byID[id]; !seen {
					byID[id] = node{id: id, scope: "bridge.node." + id + ".", keys: "system/" + id + "/"}
				}
			}
		}
	}
	out := make([]node, 0, len(byID))
	for _, id := range sortedKeys(byID) {
		out = append(out, byID[id])
	}
	return out
}

// record reads the node's end; a single run's status and end are the run's.
func (n node) record(run Run) record {
	if n.line != "" {
		rec, _ := lineRecord(n.line, run.Tags[n.line])
		return rec
	}
	rec := readRecord(run.Tags, n.scope)
	if n.single {
		rec.status = run.Status
		if run.Status == statusRunning {
			rec.status = ""
		}
		if !run.EndTime.IsZero() && rec.status != "" {
			rec.ended = run.EndTime.UTC()
		}
	}
	return rec
}

// readFigures reads the node's figures from its series: the last value of
// each (latest: runs/get gave them all), and every point of those that
// need it.
func (n node) readFigures(ctx context.Context, latest map[string]float64, history History) (Figures, error) {
	var rs []read
	var errs []error
	samples, wsN := 0, -1 // wsN: the working set's points; -1: not read
	for _, key := range sortedKeys(latest) {
		name, ok := strings.CutPrefix(key, n.keys)
		if !ok || strings.Contains(name, "/") {
			continue // another node's, or a task's (system/<node>/task-1/...)
		}
		d, ok := series.Lookup(name)
		if !ok || !reads(d) {
			continue
		}
		if !readsOverTime(d) {
			var st stats.Stat
			st.Add(time.Time{}, latest[key], 0)
			rs = append(rs, read{name, d, st, nil})
			continue
		}
		if history == nil {
			continue
		}
		pts, err := history(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				return Figures{}, err
			}
			errs = append(errs, fmt.Errorf("series %s: %w", key, err))
			continue
		}
		st := stats.Fold(pts)
		var dist *stats.Dist
		if d == metrics.ContainerCPUUsage {
			dist = stats.FoldDist(stats.CPUDist(), pts)
		}
		rs = append(rs, read{name, d, st, dist})
		if samples == 0 {
			samples = st.N
		}
		if d == metrics.ContainerMemoryWorkingSet {
			wsN = st.N // the node's samples: one a point, every sample
		}
	}
	if wsN >= 0 {
		samples = wsN
	}
	return figuresOf(rs, samples), errors.Join(errs...)
}

// bottleneckShares reads each cause's share of the node's time from the
// last value of its series (runs/get gives every series' at once): a
// share out of its range is refused ("key=value").
func (n node) bottleneckShares(run Run) (shares map[string]*metrics.Float, refused []string) {
	for _, c := range whyslow.Causes {
		d := whyslow.ShareSeries[c]
		v, ok := run.Latest[n.keys+d.Name]
		switch {
		case !ok:
		case !d.Range().Holds(v):
			refused = append(refused, "series "+n.keys+d.Name+"="+strconv.FormatFloat(v, 'g', -1, 64))
		case v > 0:
			if shares == nil {
				shares = map[string]*metrics.Float{}
			}
			shares[string(c)] = num(v)
		}
	}
	return shares, refused
}

// FirstFailureOf is the first failure the run's tags record, nil for none.
func FirstFailureOf(run Run) *Failure {
	return firstFailure(endsOf(run, nodesOf(run)))
}

// taskScopeTag finds the further bridges of a job's nodes (a node's tasks:
// bridge.task.<node>.<task>.), whose failure fails the job too.
var taskScopeTag = regexp.MustCompile(`^bridge\.task\.(.+)\.(started|ended)$`)

// endsOf is every end the run records: its nodes' (in nodes' order), then
// its nodes' further tasks', named <node>.<task> as in their failure
// records.
func endsOf(run Run, nodes []node) []nodeEnd {
	ends := make([]nodeEnd, 0, len(nodes))
	for _, n := range nodes {
		ends = append(ends, nodeEnd{who: n.id, rec: n.record(run)})
	}
	tasks := map[string]record{}
	for k, v := range run.Tags {
		if m := taskScopeTag.FindStringSubmatch(k); m != nil {
			if _, ok := tasks[m[1]]; !ok {
				tasks[m[1]] = readRecord(run.Tags, "bridge.task."+m[1]+".")
			}
		}
		if rest, ok := strings.CutPrefix(k, tracker.TagStatePrefix); ok {
			if node, task, ok := strings.Cut(rest, "/"); ok && node != "" && task != "" {
				tasks[node+"."+task], _ = lineRecord(k, v)
			}
		}
	}
	for _, who := range sortedKeys(tasks) {
		ends = append(ends, nodeEnd{who: who, task: true, rec: tasks[who]})
	}
	return ends
}

// byNode orders rows by node id, numbers in order (node-2 before node-10).
func byNode(rows []Node) {
	sort.SliceStable(rows, func(i, j int) bool { return naturalLess(rows[i].Node, rows[j].Node) })
}

// naturalLess compares strings with runs of digits as numbers.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// clipList is at most n of ids, and how many more.
func clipList(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:n], ", ") + fmt.Sprintf(" and %d more", len(ids)-n)
}
