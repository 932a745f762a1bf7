// Package jobkey finds the key that names a multi-node job, and this node's
// place in it, in what the launcher gives every node: its environment and
// the command line of the child bridge runs. Every bridge of one job finds
// the same key (and so the same tracker run); two different jobs never do.
//
// Detect is a pure function of its Input: no files, no network, no clock.
// The precedence, documented in docs/multinode.md, is: the explicit
// settings (--job-key, --node-id, --nodes), then the launchers in Detect's
// order (Slurm, JobSet, Indexed Job, PyTorchJob, torchelastic, torchrun,
// MPI), field by field: the first launcher that knows a field gives it.
package jobkey

import (
	"fmt"
	"strings"
)

// None is the --job-key value that turns detection off: bridge then
// behaves as for a single-node job.
const None = "none"

// Input is what Detect reads.
type Input struct {
	Getenv func(string) string // the process environment (os.Getenv)
	Argv   []string            // the child's command line
	// Hostname names the node where a launcher numbers processes, not
	// nodes (MPI); it is never used when a launcher numbers nodes.
	Hostname string
	Explicit Explicit
}

// Explicit are the user's own settings; each wins over every launcher.
type Explicit struct {
	Key, KeyFrom     string // --job-key / BRIDGE_JOB_KEY; None turns detection off
	NodeID, NodeFrom string // --node-id / BRIDGE_NODE_ID, or MLFLOW_SYSTEM_METRICS_NODE_ID
	Nodes            int    // --nodes; 0: not given
	NodesFrom        string
}

// Job is what Detect found. The zero value (no key) is a single-node job.
type Job struct {
	Key     string // names the job's run; "" when none was found
	KeyFrom string // where it came from, in the user's terms

	// Generation tells apart jobs that share a key over time (a Slurm job
	// id reused after a database reset): Slurm's job start time, shared by
	// every node of one attempt; "" when unknown.
	Generation string

	NodeID   string // this node's id: one key segment; "" when none
	NodeFrom string
	Rank     int // this node's index in the job, from 0; -1 when unknown
	ProcRank int // this process's global rank (task, MPI rank); -1 when unknown
	Local    int // this bridge's task index on its node; -1 when unknown

	Nodes     int // how many nodes the launcher started; 0 when unknown
	NodesFrom string

	Attempt     int // the launcher's restart count of the job or node; -1 when unknown
	AttemptFrom string

	Launcher string   // the launcher that gave the key ("slurm", "jobset", ...); "" when none
	Notes    []string // what was seen and not used, and why, for `bridge sample` and the log
	// Warnings are values of the launcher's variables bridge could not use
	// as they are (cleaned into the key, or left out) and what it assumed,
	// one line each, for the log at WARN and `bridge sample`. Only a job
	// with a key has them: without one no launcher value is used.
	Warnings []string
}

// Multi reports whether the job has a key: its bridges share one run.
func (j Job) Multi() bool { return j.Key != "" }

// Primary reports whether this bridge's child is the job's primary writer
// (W&B's x_primary): global rank 0, or node 0's first task. known is false
// when neither rank is known.
func (j Job) Primary() (primary, known bool) {
	switch {
	case j.ProcRank >= 0:
		return j.ProcRank == 0, true
	case j.Rank >= 0:
		return j.Rank == 0 && j.Local <= 0, true
	}
	return false, false
}

// part is what one launcher knows; unknown fields are zero ("", -1 via the
// has* flags).
type part struct {
	launcher   string
	key, keyOf string
	generation string
	node       string // a node id this launcher names directly (hostname for MPI)
	nodeOf     string
	rank       int
	hasRank    bool
	procRank   int
	hasProc    bool
	local      int
	hasLocal   bool
	nodes      int
	nodesOf    string
	attempt    int
	attemptOf  string
	hasAttempt bool
	notes      []string
	keyWarns   []string // about the key: used when this launcher's key is the job's
	warns      []string // about the other fields
}

// Detect finds the job's key and this node's place in it. It never fails:
// what it cannot find stays unknown, and Notes say why.
func Detect(in Input) Job {
	get := in.Getenv
	if get == nil {
		get = func(string) string { return "" }
	}
	trim := func(k string) string { return strings.TrimSpace(get(k)) }
	job := Job{Rank: -1, ProcRank: -1, Local: -1, Attempt: -1}
	ex := in.Explicit
	if strings.EqualFold(strings.TrimSpace(ex.Key), None) {
		job.Notes = append(job.Notes, fmt.Sprintf("%s=%s: no job key, every bridge has a run of its own", ex.KeyFrom, None))
		if ex.NodeID != "" {
			job.NodeID, job.NodeFrom = ex.NodeID, ex.NodeFrom
		}
		return job
	}
	parts := []part{
		slurm(trim),
		jobSet(trim),
		indexedJob(trim),
		pyTorchJob(trim),
		torchElastic(trim),
		torchrun(trim, in.Argv),
		mpi(trim, in.Hostname),
	}
	if ex.Key != "" {
		job.Key, job.KeyFrom, job.Launcher = ex.Key, ex.KeyFrom, "explicit"
	}
	var warns []string
	for _, p := range parts {
		job.Notes = append(job.Notes, p.notes...)
		warns = append(warns, p.warns...)
		if job.Key == "" && p.key != "" {
			job.Key, job.KeyFrom, job.Launcher, job.Generation = p.key, p.keyOf, p.launcher, p.generation
			warns = append(warns, p.keyWarns...)
		} else if p.key != "" {
			job.Notes = append(job.Notes, fmt.Sprintf("%s also names a job (%s), not used: %s comes first", p.launcher, p.key, job.KeyFrom))
		}
		// The node id and its index come from the same launcher.
		if job.NodeID == "" && (p.node != "" || p.hasRank) {
			job.NodeID, job.NodeFrom = p.node, p.nodeOf
			if p.hasRank {
				job.Rank = p.rank
				if p.node == "" {
					job.NodeID = NodeName(p.rank)
				}
			}
		}
		if job.ProcRank < 0 && p.hasProc {
			job.ProcRank = p.procRank
		}
		if job.Local < 0 && p.hasLocal {
			job.Local = p.local
		}
		if job.Nodes == 0 && p.nodes > 0 {
			job.Nodes, job.NodesFrom = p.nodes, p.nodesOf
		}
		if job.Attempt < 0 && p.hasAttempt {
			job.Attempt, job.AttemptFrom = p.attempt, p.attemptOf
		}
	}
	if job.Key == "" && job.NodeID != "" {
		// Without a key bridge behaves as for a single-node job: a
		// launcher's node does not nest its keys.
		job.Notes = append(job.Notes, fmt.Sprintf("node %s (%s) not used: no job key", job.NodeID, job.NodeFrom))
		job.NodeID, job.NodeFrom = "", ""
	}
	if ex.NodeID != "" {
		job.NodeID, job.NodeFrom = ex.NodeID, ex.NodeFrom
	}
	if ex.Nodes > 0 {
		job.Nodes, job.NodesFrom = ex.Nodes, ex.NodesFrom
	}
	if job.Key != "" {
		job.Warnings = warns
	}
	if job.Key != "" && job.NodeID == "" {
		// Distinct on every node, though not stable across a move.
		if job.NodeID, _ = NodeIDFrom(in.Hostname); job.NodeID != "" {
			job.NodeFrom = "the host name (the launcher names no node; --node-id sets one)"
		} else {
			job.Notes = append(job.Notes, "a job key without a node id: every node's series would share one name; set --node-id")
		}
	}
	return job
}

// NodeName is the node id of the node with index rank.
func NodeName(rank int) string { return fmt.Sprintf("node-%d", rank) }

// NodeIDRule says what a node id may hold; ValidNodeID checks it.
const NodeIDRule = "may hold only letters, digits, '_', '-', '.' and at most 100 of them, and is not . or .. (it becomes one MLflow key segment)"

// ValidNodeID reports whether s can be a node id: one MLflow key segment
// (MLflow refuses a key whose path is not normal: system/../cpu).
func ValidNodeID(s string) bool {
	return s != "." && s != ".." && fits(s, MaxNodeID, SegmentRune)
}

// KeyRule says what a key may hold; ValidKey checks it.
const KeyRule = "at most 200 characters, letters, digits and . _ - : / @ + = only"

// ValidKey reports whether s can be a job key: it goes into an MLflow search
// filter between quotes and into a W&B run id, so quotes, spaces and
// backslashes are out.
func ValidKey(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !keyRune(r) {
			return false
		}
	}
	return true
}

func keyRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:/@+=", r)
}
