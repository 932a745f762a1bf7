package wandb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/bridge-dev/bridge/tracker"
)

// A multi-node job on W&B is a group of runs (docs/multinode.md): the
// job's run, the training script's, which every node's child writes in
// shared mode, and one run a node that bridge creates and alone writes,
// in the group named by the job's run id. W&B allows 2 file_stream
// requests a second per run: a node's series in a run of its own keep a
// job of any size under it. bridge writes to the job's run only the job's
// records, in its summary (jobstore.go).

// JobTypeNode is the job type of a node's run: W&B's second level of
// grouping, what its runs table shows beside the group.
const JobTypeNode = "node"

// NodeRunID is the id of the run of a job's node (label: its node id,
// with its task for a further bridge of the node): the job's run id cut
// to 36, the label cut to 16, for reading, and 10 hex digits of the
// SHA-256 of both, at most 64 characters of runIDByte. The same job and
// label give the same run, so a restarted node writes its run again; two
// labels of one job, or one label of two jobs, never share one.
func NodeRunID(job, label string) string {
	clean := func(s string, n int) string {
		b := []byte(s)
		for i, c := range b {
			if !runIDByte(c) {
				b[i] = '-'
			}
		}
		if len(b) > n {
			b = b[:n]
		}
		return string(b)
	}
	// A run id and a label hold no NUL: (job, label) pairs hash distinct
	// inputs.
	sum := sha256.Sum256([]byte(job + "\x00" + label))
	return clean(job, 36) + "-" + clean(label, 16) + "-" + hex.EncodeToString(sum[:5])
}

// upsertNodeRunMutation creates (or finds again) a node's run: wandb-core's
// UpsertBucket (core/api/graphql/mutation_run.graphql) with the fields
// bridge sets: the run's id (name), project, entity, its group (groupName),
// job type and display name. The config is not sent: no training process
// resumes a node's run, so wandb's "started" mark (_wandb.t) is not needed.
const upsertNodeRunMutation = `mutation UpsertBucket($name: String, $project: String, $entity: String, $groupName: String, $displayName: String, $jobType: String) {
	upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, groupName: $groupName, displayName: $displayName, jobType: $jobType}) {
		bucket {
			id
			name
			displayName
			project {
				id
				name
				entity {
					id
					name
				}
			}
		}
		inserted
	}
}`

// createNodeRun makes sure this node's run exists, in the job's group, and
// resolves the entity and project it lives in (the API key's default
// entity, the server's default project, where none is configured). One
// request; repeating it changes nothing.
func (s *Sink) createNodeRun(ctx context.Context) error {
	v := map[string]any{"name": s.cfg.NodeRun, "project": nilIfEmpty(s.cfg.Project), "entity": nilIfEmpty(s.cfg.Entity),
		"groupName": s.cfg.RunID, "displayName": s.label, "jobType": JobTypeNode}
	var resp struct {
		UpsertBucket *struct {
			Bucket *struct {
				Project struct {
					Name   string `json:"name"`
					Entity struct {
						Name string `json:"name"`
					} `json:"entity"`
				} `json:"project"`
			} `json:"bucket"`
			Inserted bool `json:"inserted"`
		} `json:"upsertBucket"`
	}
	if err := s.graphql(ctx, "UpsertBucket", upsertNodeRunMutation, v, &resp); err != nil {
		return fmt.Errorf("creating this node's W&B run %s: %w", s.nodeRunPath(), err)
	}
	if resp.UpsertBucket == nil || resp.UpsertBucket.Bucket == nil || resp.UpsertBucket.Bucket.Project.Name == "" {
		return fmt.Errorf("creating this node's W&B run %s: the answer names no run and project", s.nodeRunPath())
	}
	p := resp.UpsertBucket.Bucket.Project
	s.entity, s.project = p.Entity.Name, p.Name
	s.ready = true
	s.log.Info("W&B: this node's run is ready; sending system metrics to it", "run", s.entity+"/"+s.project+"/"+s.cfg.NodeRun,
		"group", s.cfg.RunID, "created", resp.UpsertBucket.Inserted)
	return nil
}

// completeNodeRun marks this node's run finished with its child's exit
// code, as wandb's own last file_stream request does ("complete",
// "exitcode": core/internal/filestream): W&B shows it finished, or failed
// for a non-zero code, instead of crashed once its heartbeats stop.
func (s *Sink) completeNodeRun(ctx context.Context, code int) error {
	_, err := s.fileStream(ctx, s.cfg.NodeRun, map[string]any{"complete": true, "exitcode": code})
	if err != nil {
		return fmt.Errorf("marking this node's W&B run %s finished: %w", s.nodeRunPath(), err)
	}
	return nil
}

// finishNodeRun records this node's end on its run as a single run's
// (finishRun), then marks the run complete.
func (s *Sink) finishNodeRun(ctx context.Context, end tracker.EndInfo) error {
	if !s.ready {
		if err := s.createNodeRun(ctx); err != nil {
			return err
		}
	}
	b, err := s.lookupRun(ctx, s.cfg.NodeRun)
	if err != nil {
		return err
	}
	if b == nil {
		return fmt.Errorf("W&B does not find this node's run %s it created", s.nodeRunPath())
	}
	if err := s.recordVerdict(ctx, s.cfg.NodeRun, b, end); err != nil {
		return err
	}
	if err := s.recordFigures(ctx, s.cfg.NodeRun, end); err != nil {
		return fmt.Errorf("recording the job's figures in W&B run %s's summary: %w", s.nodeRunPath(), err)
	}
	return s.completeNodeRun(ctx, end.ExitCode)
}

// seriesRun is the run bridge's series go to: this node's own in a job,
// else the run the training process created.
func (s *Sink) seriesRun() string {
	if s.cfg.Shared {
		return s.cfg.NodeRun
	}
	return s.cfg.RunID
}

func (s *Sink) nodeRunPath() string {
	return firstNonEmpty(s.entity, s.cfg.Entity, "<default entity>") + "/" + firstNonEmpty(s.project, s.cfg.Project, "<default project>") + "/" + s.cfg.NodeRun
}
