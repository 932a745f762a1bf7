package tracker

import (
	"log/slog"
	"time"
)

// Registration is all bridge must know of a tracker before it runs. Each
// tracker package exports its own (mlflow.Registration,
// wandb.Registration); pipeline.Trackers lists them, the one place that
// names them. --trackers, "auto", the check of a tracker's variables, the
// spool's records, `bridge sync`, `bridge attach` and `bridge report`
// follow from the entry.
type Registration struct {
	Name     string // as in --trackers and the spool's records
	RunIDEnv string // the variable a job names its run with (attach's default)
	// NodeIDEnv is the variable that names the node in the tracker's keys,
	// when bridge's --node-id does not: bridge reads it (cleaned into a
	// node id, with a warning, never refused) and gives the node id to
	// Build; attach's lock is taken for it.
	NodeIDEnv string
	Resume    bool // a restarted attempt writes into the run of the lost one
	// AttachRunHint is set for trackers whose run `bridge attach` must be
	// told (it never creates one): where a job finds its run id.
	AttachRunHint string
	// Configured reports whether the job is set up for the tracker (by its
	// own variables): under --trackers=auto only such a one is built.
	Configured func(getenv func(string) string) bool
	// Build returns the sink, or nil and a *Off when the job itself turns
	// the tracker off (WANDB_MODE=offline). Any other error says that a
	// variable of the tracker's own cannot be used, naming it and what to
	// do: the tracker's variables are not bridge's, so that turns off only
	// that tracker, never the job. A sink that is also a RunStore gets the
	// job's end decided on its run (package jobrun).
	Build func(b Build) (Sink, error)
	// Store, for a tracker whose runs bridge reads by id (`bridge report`),
	// opens its run store from its variables (b.Getenv, b.Home, b.Log);
	// nil for one it does not. Its error is worded as Build's.
	Store func(b Build) (RunOwner, error)
	// Help is what `bridge --help` and the messages about setting a
	// tracker up say of it.
	Help Help
}

// Off is what a registration's Build returns (as its error) when the
// job's own settings turn its tracker off: W&B's WANDB_MODE=offline or
// disabled. In an offline mode the child's client keeps its run on disk
// for an upload later (`wandb sync`): RunID is that run's id, given to the
// child in Env (chosen by bridge when the job names none), so that the
// child's upload and `bridge sync` of the spool, which records RunID, land
// in one run.
type Off struct {
	Why    string   // what turned it off: "WANDB_MODE=offline"
	On     string   // what turns it on again: "unset WANDB_MODE, or set it to online"
	RunID  string   // the run the child's client keeps on disk; "" when none (disabled)
	Env    []string // the child's variables for that run
	Upload string   // what uploads the child's run: "wandb sync"; "" when none
}

func (o *Off) Error() string { return o.Why }

// Help describes a tracker to its user.
type Help struct {
	Title string // its name in prose ("MLflow")
	On    string // what turns it on under --trackers=auto ("MLFLOW_TRACKING_URI is set")
	Vars  string // its variables as its own client reads them: lines of `bridge --help`
}

// Build is what a registration's Build gets: bridge's settings for the
// job, the run a subcommand or a restarted attempt names, and where the
// tracker's own variables are read from.
type Build struct {
	// NodeID is the node's id in the tracker's keys: --node-id (or the
	// job's node), else the tracker's own NodeIDEnv, cleaned; "" for none.
	NodeID  string
	RunName string // --run-name, or ""
	RunID   string // a run a subcommand or a restarted attempt names, or ""
	Owned   bool   // bridge created RunID in an earlier attempt
	// Recorded is the start record (its tags) of the attempt whose samples
	// `bridge sync` uploads: the tracker takes from it where the attempt's
	// run is (RunInfo.Place), over its variables here.
	Recorded map[string]string
	// Follow (`bridge attach`): a tracker that can follow its run's status
	// stops writing into it once its owner ends it.
	Follow bool
	Job    *Job // a multi-node job, nil for a single-node one
	Getenv func(string) string
	Home   string // the user's home directory, where trackers' files are
	Log    *slog.Logger
}

// Job is a multi-node job as a tracker takes part in it: one run for
// every node's bridge (docs/multinode.md).
type Job struct {
	Key     string // the job's key: valid by package jobkey's rule
	KeyFrom string // where the key came from, recorded on the run
	// Generation tells apart jobs that share a key over time (Slurm's job
	// start time).
	Generation string
	Attempt    int           // the launcher's restart count; -1 unknown
	Nodes      int           // nodes the launcher started; 0 unknown
	Rank       int           // the launcher's index of this node; -1 unknown
	Settle     time.Duration // the election's settle time (--job-settle)
	Node       string        // this node's id
	// Task is "" for the node's lead bridge (the one that records the
	// node's end); for another bridge of the job on the same node, its task
	// name: its tags and series are scoped to it.
	Task string
	// Primary says whether this bridge's child is the job's primary writer
	// (W&B's x_primary), when PrimaryKnown.
	Primary, PrimaryKnown bool
}

// Label is this bridge's name among the job's: the node id, with the task
// for a bridge that is not the node's lead.
func (j *Job) Label() string {
	if j.Task == "" {
		return j.Node
	}
	return j.Node + "." + j.Task
}

// Tags of a multi-node job's run that more than one layer reads: the
// job's key (which marks a job's run) and its node count, as the launcher
// gave it, which every node records; the job's first failure and its
// report's summary, which package jobrun writes (report.TagFirstFailure
// says their form).
const (
	TagJobKey        = "bridge.job_key"
	TagNodes         = "bridge.nodes"
	TagFirstFailure  = "bridge.job.first_failure"
	TagReportSummary = "bridge.job.report_summary"
)

// JobScope is where one bridge's records are on a multi-node job's run:
// scope, the prefix of its tags (bridge.node.<node>, or
// bridge.task.<node>.<task> for a further bridge of the node), and who,
// its name in the job's records (<node>, or <node>.<task>).
func JobScope(node, task string) (scope, who string) {
	if task == "" {
		return "bridge.node." + node, node
	}
	return "bridge.task." + node + "." + task, node + "." + task
}
