package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/internal/flock"
	"golang.org/x/sys/unix"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/jobkey"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/tracker"
)

// Job is a multi-node job as this bridge takes part in it: what the
// launcher says (jobkey.Job), and whether this bridge is its node's lead.
type Job struct {
	jobkey.Job
	Settle time.Duration // the election's settle time (--job-settle)
	// Task is "" for the node's lead bridge, which sends the node's,
	// container's and GPUs' series and records the node's end; another
	// bridge of the job on the same node (srun --ntasks-per-node) has a task
	// name and sends only its own child's process series.
	Task     string
	lock     *os.File // held while the bridge runs: the node's lead
	lockPath string   // removed by Release
}

// DetectJob finds the job this bridge belongs to (package jobkey) from the
// environment, the child's command line and the explicit settings. An
// explicit --node-id (or a tracker's variable that names the node,
// MLFLOW_SYSTEM_METRICS_NODE_ID, which MLflow's own monitor reads) wins
// over the launcher's node. The tracker's variable is not bridge's: a
// value that is not one key segment is cleaned into one
// (jobkey.NodeIDFrom), with a warning, never refused.
func DetectJob(cfg config.Config, argv []string, getenv func(string) string) *Job {
	ex := jobkey.Explicit{Key: cfg.JobKey, KeyFrom: cfg.JobKeyFrom, NodeID: cfg.NodeID, NodeFrom: cfg.NodeIDFrom,
		Nodes: cfg.Nodes, NodesFrom: cfg.NodesFrom}
	var warn string
	for _, t := range Trackers() {
		if ex.NodeID != "" || t.NodeIDEnv == "" {
			continue
		}
		if id, note := nodeIDFrom(t.NodeIDEnv, getenv); id != "" {
			ex.NodeID, ex.NodeFrom, warn = id, t.NodeIDEnv, note
			if note != "" {
				ex.NodeFrom += " (cleaned)"
			}
		}
	}
	j := jobkey.Detect(jobkey.Input{Getenv: getenv, Argv: argv, Hostname: hostname(), Explicit: ex})
	if warn != "" {
		j.Warnings = append(j.Warnings, warn)
	}
	return &Job{Job: j, Settle: cfg.JobSettle}
}

// Apply puts the job's node id into the configuration (tags, keys, the W&B
// label, /metrics), and keeps a non-lead bridge to its own process series.
func (j *Job) Apply(cfg *config.Config) {
	if j == nil {
		return
	}
	if j.NodeID != "" {
		cfg.NodeID = j.NodeID
	}
	if j.Task != "" {
		cfg.Scopes = slices.DeleteFunc(cfg.Scopes, func(s string) bool { return s != "process" })
	}
}

// TakeNode makes this bridge its node's lead if no other bridge of the same
// job on this node is: an flock on a file named after the job key and node
// id in dir (os.TempDir() when ""), held until Release, which removes the
// file. A job's tasks on a node share that directory (Slurm gives a job one
// /tmp per node). Without a key, or when the lock cannot be tried, the
// bridge is the lead.
func (j *Job) TakeNode(dir string, log *slog.Logger) {
	if j == nil || !j.Multi() {
		return
	}
	if dir == "" {
		dir = os.TempDir()
	}
	sum := sha256.Sum256([]byte(j.Key + "\x00" + j.NodeID))
	path := filepath.Join(dir, "bridge-node-"+hex.EncodeToString(sum[:8])+".lock")
	// A lead that leaves removes the file while it holds the lock:
	// flock.Open tries a lock won on a file no longer at path again on the
	// new one, so that two bridges never both lead.
	f, err := flock.Open(path, os.O_CREATE|os.O_RDWR, 0o600)
	switch {
	case err == nil:
		j.lock, j.lockPath = f, path
		return
	case f != nil: // a filesystem without locks: nothing to hold
		f.Close()
		log.Debug("cannot lock the node's lock file; this bridge sends the node's series", "path", path, "err", err)
		return
	case !errors.Is(err, unix.EWOULDBLOCK):
		log.Debug("cannot open the node's lock file; this bridge sends the node's series", "path", path, "err", err)
		return
	}
	j.Task = "task-" + strconv.Itoa(os.Getpid())
	if j.Local >= 0 {
		j.Task = "task-" + strconv.Itoa(j.Local)
	}
	log.Info("another bridge of this job sends this node's series; this one sends only its own child's process series",
		"node", j.NodeID, "task", j.Task)
}

// SpoolTask tells this bridge's default spool (SpoolPath) apart from those
// of its job's other bridges on the node (srun --ntasks-per-node), which
// share its node id and run: the launcher's task index on the node
// (SLURM_LOCALID, ...) when it gives one, stable across a requeue so that a
// restarted task finds its own spool whichever task leads the node; else
// the task name of a bridge that is not the node's lead. "" for the first
// task and for a node's only bridge.
func (j *Job) SpoolTask() string {
	switch {
	case j == nil:
		return ""
	case j.Local >= 0:
		if j.Local == 0 {
			return ""
		}
		return "task-" + strconv.Itoa(j.Local)
	}
	return j.Task
}

// Release lets another bridge of the job on this node take the lead.
func (j *Job) Release() {
	if j != nil && j.lock != nil {
		_ = flock.Release(j.lock, j.lockPath) // nothing to do about a file left behind
		j.lock = nil
	}
}

// Label is the W&B label of this bridge's series and of its child's: the
// node id, with the task for a non-lead bridge.
func (j *Job) Label() string { return j.trackerJob().Label() }

// trackerJob is the job as its trackers take part in it.
func (j *Job) trackerJob() *tracker.Job {
	primary, known := j.Primary()
	return &tracker.Job{Key: j.Key, KeyFrom: j.KeyFrom, Generation: j.Generation, Attempt: j.Attempt, Nodes: j.Nodes,
		Rank: j.Rank, Settle: j.Settle, Node: j.NodeID, Task: j.Task, Primary: primary, PrimaryKnown: known}
}

// Describe is the job for `bridge sample` and the log: the key, the node
// and where each came from.
func (j *Job) Describe() map[string]any {
	d := map[string]any{}
	put := func(k string, v any, from string) {
		if from != "" {
			v = fmt.Sprintf("%v (from %s)", v, from)
		}
		d[k] = v
	}
	if j.Key == "" {
		d["key"] = "none: a single-node job (one run per bridge)"
	} else {
		put("key", j.Key, j.KeyFrom)
		d["launcher"] = j.Launcher
	}
	if j.NodeID != "" {
		put("node_id", j.NodeID, j.NodeFrom)
	}
	if j.Nodes > 0 {
		put("nodes", j.Nodes, j.NodesFrom)
	} else if j.Key != "" {
		d["nodes"] = "unknown (--nodes): the run is never set FINISHED by bridge"
	}
	if j.Attempt >= 0 {
		put("attempt", j.Attempt, j.AttemptFrom)
	}
	if j.Generation != "" {
		d["generation"] = j.Generation
	}
	if p, known := j.Primary(); known {
		d["wandb_primary"] = strconv.FormatBool(p)
	}
	if len(j.Notes) > 0 {
		d["notes"] = strings.Join(j.Notes, "; ")
	}
	if len(j.Warnings) > 0 {
		d["warnings"] = strings.Join(j.Warnings, "; ")
	}
	return d
}

// Spool start-record tags that let `bridge sync` find the job's run again
// from the spool alone (Job.Tags writes them, JobFromTags reads them).
const (
	TagJobKey        = tracker.TagJobKey
	TagJobNodes      = "bridge.job_nodes"
	TagJobTask       = "bridge.job_task"
	TagJobGeneration = "bridge.job_generation"
)

// Tags are the job's start tags: where the key and node came from. Nil for
// a single-node job.
func (j *Job) Tags() map[string]string {
	if !j.Multi() {
		return nil
	}
	t := map[string]string{TagJobKey: j.Key, "bridge.job_key_from": j.KeyFrom, "bridge.node_id": j.NodeID, "bridge.node_id_from": j.NodeFrom}
	if j.Nodes > 0 {
		t[TagJobNodes] = strconv.Itoa(j.Nodes)
	}
	if j.Task != "" {
		t[TagJobTask] = j.Task
	}
	if j.Generation != "" {
		t[TagJobGeneration] = j.Generation
	}
	if j.Attempt >= 0 {
		t["bridge.attempt"] = strconv.Itoa(j.Attempt)
	}
	return t
}

// JobFromTags is the job a spool's start record names (for `bridge sync`),
// nil when none.
func JobFromTags(tags map[string]string, settle time.Duration) *Job {
	key := tags[TagJobKey]
	if !jobkey.ValidKey(key) || !jobkey.ValidNodeID(tags["bridge.node_id"]) {
		return nil
	}
	j := &Job{Job: jobkey.Job{Key: key, KeyFrom: "the spool's start record", NodeID: tags["bridge.node_id"], Rank: -1, ProcRank: -1, Local: -1, Attempt: -1,
		Generation: tags[TagJobGeneration]}, Settle: settle, Task: tags[TagJobTask]}
	j.Nodes, _ = strconv.Atoi(tags[TagJobNodes])
	if n, err := strconv.Atoi(tags["bridge.attempt"]); err == nil {
		j.Attempt = n
	}
	return j
}

// CountAttempts takes the attempt from the spool when the launcher does
// not say it (a container restarted in its pod, its spool on an emptyDir):
// the training attempts the spool already holds.
func (j *Job) CountAttempts(attempts []spool.Attempt) {
	if !j.Multi() || j.Attempt >= 0 {
		return
	}
	n := 0
	for _, a := range attempts {
		if a.Start.Info["mode"] != "sync" {
			n++
		}
	}
	j.Attempt, j.AttemptFrom = n, "the spool (this node's earlier attempts)"
}

// Log says which job this bridge belongs to, and what it saw and did not
// use.
func (j *Job) Log(log *slog.Logger) {
	if j.Multi() {
		log.Info("multi-node job: one run for every node's bridge", "key", j.Key, "key_from", j.KeyFrom,
			"node", j.NodeID, "node_from", j.NodeFrom, "nodes", j.Nodes, "attempt", j.Attempt, "task", j.Task)
	}
	for _, n := range j.Notes {
		log.Info("job detection", "note", n)
	}
	for _, w := range j.Warnings {
		log.Warn(w)
	}
}
