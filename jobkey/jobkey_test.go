package jobkey

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/launchertest"
)

// env turns "K=V" pairs into a getenv.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// want is what a case checks; fields left zero are checked as "unknown".
type want struct {
	key, keyFrom string
	generation   string
	node         string
	rank, proc   int
	local        int
	nodes        int
	attempt      int
	launcher     string
	note         string // a substring one of Notes must hold
}

func check(t *testing.T, got Job, w want) {
	t.Helper()
	if got.Key != w.key {
		t.Errorf("Key = %q, want %q", got.Key, w.key)
	}
	if w.keyFrom != "" && !strings.Contains(got.KeyFrom, w.keyFrom) {
		t.Errorf("KeyFrom = %q, want it to name %q", got.KeyFrom, w.keyFrom)
	}
	if got.Generation != w.generation {
		t.Errorf("Generation = %q, want %q", got.Generation, w.generation)
	}
	if got.NodeID != w.node {
		t.Errorf("NodeID = %q, want %q", got.NodeID, w.node)
	}
	if got.Rank != w.rank || got.ProcRank != w.proc || got.Local != w.local {
		t.Errorf("Rank, ProcRank, Local = %d, %d, %d; want %d, %d, %d", got.Rank, got.ProcRank, got.Local, w.rank, w.proc, w.local)
	}
	if got.Nodes != w.nodes {
		t.Errorf("Nodes = %d (%s), want %d", got.Nodes, got.NodesFrom, w.nodes)
	}
	if got.Attempt != w.attempt {
		t.Errorf("Attempt = %d (%s), want %d", got.Attempt, got.AttemptFrom, w.attempt)
	}
	if got.Launcher != w.launcher {
		t.Errorf("Launcher = %q, want %q", got.Launcher, w.launcher)
	}
	if w.note != "" && !slices.ContainsFunc(got.Notes, func(n string) bool { return strings.Contains(n, w.note) }) {
		t.Errorf("no note holds %q; notes: %q", w.note, got.Notes)
	}
	if got.Key != "" && !ValidKey(got.Key) {
		t.Errorf("Detect returned key %q that ValidKey refuses", got.Key)
	}
}

// unknown is want's base: nothing known.
func unknown() want { return want{rank: -1, proc: -1, local: -1, attempt: -1} }

func with(f func(*want)) want { w := unknown(); f(&w); return w }

// The environments below are each launcher's documented output variables:
// sbatch(1)/srun(1) OUTPUT ENVIRONMENT VARIABLES, torch/distributed/run.py
// and the torchelastic agent's worker_env, the Job controller's
// JOB_COMPLETION_INDEX, the JobSet annotations projected as the deploy/
// examples do, Kubeflow's envvar.go, Open MPI's and Hydra's rank variables.
func TestDetect(t *testing.T) {
	cases := []struct {
		name string
		in   Input
		want want
	}{
		{"nothing: a single-node job", Input{Getenv: env(), Argv: []string{"python", "train.py"}}, unknown()},
		{"slurm srun step on node 2 of 4", Input{Getenv: env(
			"SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_NODEID=2", "SLURM_PROCID=17",
			"SLURM_LOCALID=1", "SLURM_JOB_NUM_NODES=8", "SLURM_STEP_NUM_NODES=4", "SLURM_NNODES=4", "SLURM_JOB_START_TIME=1764900000")},
			with(func(w *want) {
				w.key, w.keyFrom, w.generation = "slurm:alps:4242.0", "SLURM_STEP_ID", "1764900000"
				w.node, w.rank, w.proc, w.local, w.nodes, w.attempt, w.launcher = "node-2", 2, 17, 1, 4, 0, "slurm"
			})},
		{"slurm older SLURM_JOBID and SLURM_STEPID", Input{Getenv: env(
			"SLURM_CLUSTER_NAME=c1", "SLURM_JOBID=77", "SLURM_STEPID=3", "SLURM_NODEID=0", "SLURM_NNODES=2")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher = "slurm:c1:77.3", "node-0", 0, 2, 0, "slurm"
			})},
		{"slurm requeued job", Input{Getenv: env(
			"SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_NODEID=1", "SLURM_STEP_NUM_NODES=2", "SLURM_RESTART_COUNT=2")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher = "slurm:alps:4242.0", "node-1", 1, 2, 2, "slurm"
			})},
		{"slurm array task", Input{Getenv: env(
			"SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=5001", "SLURM_ARRAY_JOB_ID=5000", "SLURM_ARRAY_TASK_ID=7", "SLURM_STEP_ID=0", "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=1")},
			with(func(w *want) {
				w.key, w.keyFrom, w.node, w.rank, w.nodes, w.attempt, w.launcher = "slurm:alps:5000_7.0", "SLURM_ARRAY_TASK_ID", "node-0", 0, 1, 0, "slurm"
			})},
		{"slurm batch script: reserved step id, one node", Input{Getenv: env(
			"SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=9", "SLURM_STEP_ID=4294967294", "SLURM_NODEID=0", "SLURM_JOB_NUM_NODES=4")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher = "slurm:alps:9", "node-0", 0, 1, 0, "slurm"
			})},
		{"slurm without a cluster name", Input{Getenv: env("SLURM_JOB_ID=9", "SLURM_STEP_ID=1", "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=2")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher, w.note = "slurm::9.1", "node-0", 0, 2, 0, "slurm", "lacks the cluster"
			})},
		{"slurm cluster name with odd characters", Input{Getenv: env("SLURM_CLUSTER_NAME=my cluster's", "SLURM_JOB_ID=9", "SLURM_STEP_ID=0", "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=1")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher = "slurm:my_cluster_s:9.0--2569a1194d", "node-0", 0, 1, 0, "slurm"
			})},
		{"torchrun as the child, dash spellings", Input{Getenv: env(), Argv: []string{"torchrun", "--nnodes", "4", "--nproc-per-node=8", "--node-rank", "3", "--rdzv-id", "job-77", "train.py", "--node-rank", "9"}},
			with(func(w *want) {
				w.key, w.keyFrom, w.node, w.rank, w.nodes, w.launcher = "torchrun:job-77", "--rdzv-id", "node-3", 3, 4, "torchrun"
			})},
		// argparse takes any unambiguous prefix of an option; -r takes a value.
		{"torchrun abbreviated options", Input{Getenv: env(), Argv: []string{"torchrun", "--nnod", "2", "-r", "3", "--rdzv-i=abc", "--node_r", "1", "train.py", "--rdzv-id", "other"}},
			with(func(w *want) {
				w.key, w.keyFrom, w.node, w.rank, w.nodes, w.launcher = "torchrun:abc", "--rdzv-id", "node-1", 1, 2, "torchrun"
			})},
		// c10d ranks the nodes at rendezvous: --node-rank says nothing.
		{"torchrun c10d, node rank not used", Input{Getenv: env(), Hostname: "gpu-a", Argv: []string{"torchrun", "--nnodes", "4", "--node-rank", "3", "--rdzv-id", "job-77", "--rdzv-backend=c10d", "train.py"}},
			with(func(w *want) {
				w.key, w.keyFrom, w.node, w.nodes, w.launcher, w.note = "torchrun:job-77", "--rdzv-id", "gpu-a", 4, "torchrun", "is not used"
			})},
		{"torchrun as the child, underscore spellings and =", Input{Getenv: env(), Argv: []string{"/usr/bin/torchrun", "--no-python", "--nnodes=2:2", "--node_rank=1", "--rdzv_id=abc", "-m", "pkg.train"}},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.launcher = "torchrun:abc", "node-1", 1, 2, "torchrun"
			})},
		{"python -m torch.distributed.run, elastic range", Input{Getenv: env(), Argv: []string{"python3", "-u", "-m", "torch.distributed.run", "--nnodes=2:4", "--rdzv_id=e1", "train.py"}},
			with(func(w *want) {
				w.key, w.launcher, w.note = "torchrun:e1", "torchrun", "is a range"
			})},
		{"torchrun options from PET_ variables", Input{Getenv: env("PET_RDZV_ID=fromenv", "PET_NNODES=3", "PET_NODE_RANK=2"), Argv: []string{"torchrun", "train.py"}},
			with(func(w *want) {
				w.key, w.keyFrom, w.node, w.rank, w.nodes, w.launcher = "torchrun:fromenv", "PET_RDZV_ID", "node-2", 2, 3, "torchrun"
			})},
		{"torchrun default rdzv id is no key", Input{Getenv: env(), Argv: []string{"torchrun", "--nnodes=2", "--node-rank=0", "train.py"}},
			with(func(w *want) { w.rank, w.nodes, w.note = 0, 2, "not used: no job key" })},
		{"torchrun rdzv id none", Input{Getenv: env(), Argv: []string{"torchrun", "--nnodes=2", "--rdzv-id=none", "train.py"}},
			with(func(w *want) { w.note, w.nodes = `default "none"`, 2 })},
		{"torchrun standalone is no key", Input{Getenv: env(), Argv: []string{"torchrun", "--standalone", "--rdzv-id=x", "train.py"}},
			with(func(w *want) { w.note = "--standalone" })},
		{"python running a script is not torchrun", Input{Getenv: env(), Argv: []string{"python", "train.py", "-m", "torch.distributed.run", "--rdzv-id=x"}}, unknown()},
		{"bridge under torchrun: a worker's environment", Input{Getenv: env(
			"TORCHELASTIC_RUN_ID=r9", "GROUP_RANK=1", "RANK=9", "LOCAL_RANK=1", "WORLD_SIZE=16", "GROUP_WORLD_SIZE=2",
			"LOCAL_WORLD_SIZE=8", "TORCHELASTIC_RESTART_COUNT=1", "MASTER_ADDR=10.0.0.1")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.proc, w.local, w.nodes, w.attempt, w.launcher = "torchrun:r9", "node-1", 1, 9, 1, 2, 1, "torchelastic"
			})},
		{"torchelastic run id none", Input{Getenv: env("TORCHELASTIC_RUN_ID=none", "GROUP_RANK=0", "RANK=0", "LOCAL_RANK=0", "GROUP_WORLD_SIZE=1")},
			with(func(w *want) {
				w.rank, w.proc, w.local, w.nodes, w.note = 0, 0, 0, 1, "names no job"
			})},
		{"indexed job with the uid projected", Input{Getenv: env("JOB_COMPLETION_INDEX=3", "JOB_UID=0f1e2d3c-aaaa", "JOB_NAME=train")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.launcher = "k8s-job:train:0f1e2d3c-aaaa", "node-3", 3, "indexed-job"
			})},
		{"indexed job without the uid", Input{Getenv: env("JOB_COMPLETION_INDEX=3")},
			with(func(w *want) { w.rank, w.note = 3, "batch.kubernetes.io/controller-uid" })},
		{"jobset, one pod per child job", Input{Getenv: env("JOBSET_NAME=llm", "JOBSET_UID=9a8b", "JOB_GLOBAL_INDEX=5", "JOBSET_GLOBAL_REPLICAS=8",
			"JOBSET_RESTART_ATTEMPT=1", "JOB_COMPLETION_INDEX=0")},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher = "jobset:llm:9a8b", "node-5", 5, 8, 1, "jobset"
			})},
		{"jobset, several pods per child job", Input{Getenv: env("JOBSET_NAME=llm", "JOBSET_UID=9a8b", "JOB_GLOBAL_INDEX=1", "JOB_COMPLETION_INDEX=2")},
			with(func(w *want) { w.key, w.node, w.launcher = "jobset:llm:9a8b", "node-1-2", "jobset" })},
		{"jobset name without uid is no key", Input{Getenv: env("JOBSET_NAME=llm", "JOB_GLOBAL_INDEX=1", "JOB_COMPLETION_INDEX=0")},
			with(func(w *want) { w.rank, w.note = 0, "name is reused" })},
		{"pytorchjob: ranks, no key", Input{Getenv: env("MASTER_ADDR=mnist-master-0", "MASTER_PORT=23456", "WORLD_SIZE=4", "RANK=2")},
			with(func(w *want) { w.rank, w.proc, w.nodes, w.note = 2, 2, 4, "BRIDGE_JOB_KEY" })},
		{"pytorchjob with the documented key", Input{Getenv: env("MASTER_ADDR=mnist-master-0", "WORLD_SIZE=4", "RANK=0"),
			Explicit: Explicit{Key: "pytorchjob:mnist:7f3a", KeyFrom: "BRIDGE_JOB_KEY"}},
			with(func(w *want) {
				w.key, w.keyFrom, w.node, w.rank, w.proc, w.nodes, w.launcher = "pytorchjob:mnist:7f3a", "BRIDGE_JOB_KEY", "node-0", 0, 0, 4, "explicit"
			})},
		{"open mpi: ranks and the host", Input{Getenv: env("OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=16", "OMPI_COMM_WORLD_LOCAL_RANK=1"), Hostname: "gpu-07.cluster"},
			with(func(w *want) { w.proc, w.local, w.note = 5, 1, "no job id" })},
		{"mpich hydra with an explicit key and node count", Input{Getenv: env("PMI_RANK=0", "PMI_SIZE=8", "MPI_LOCALRANKID=0"), Hostname: "n1",
			Explicit: Explicit{Key: "sweep-12", KeyFrom: "--job-key", Nodes: 2, NodesFrom: "--nodes"}},
			with(func(w *want) {
				w.key, w.node, w.proc, w.local, w.nodes, w.launcher = "sweep-12", "n1", 0, 0, 2, "explicit"
			})},
		{"explicit settings win over slurm", Input{Getenv: env("SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_NODEID=1", "SLURM_STEP_NUM_NODES=2"),
			Explicit: Explicit{Key: "mine", KeyFrom: "--job-key", NodeID: "left", NodeFrom: "--node-id", Nodes: 3, NodesFrom: "--nodes"}},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher, w.note = "mine", "left", 1, 3, 0, "explicit", "slurm also names a job"
			})},
		{"slurm wins over torchrun in its step", Input{Getenv: env("SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_NODEID=1", "SLURM_STEP_NUM_NODES=2"),
			Argv: []string{"torchrun", "--nnodes=2", "--node-rank=1", "--rdzv-id=1", "train.py"}},
			with(func(w *want) {
				w.key, w.node, w.rank, w.nodes, w.attempt, w.launcher, w.note = "slurm:alps:1.0", "node-1", 1, 2, 0, "slurm", "torchrun also names a job"
			})},
		{"job key none turns detection off", Input{Getenv: env("SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_NODEID=1"),
			Explicit: Explicit{Key: "none", KeyFrom: "BRIDGE_JOB_KEY", NodeID: "w1", NodeFrom: "--node-id"}},
			with(func(w *want) { w.node, w.note = "w1", "no job key" })},
		{"a key without a node id", Input{Getenv: env(), Explicit: Explicit{Key: "k", KeyFrom: "--job-key"}},
			with(func(w *want) { w.key, w.launcher, w.note = "k", "explicit", "without a node id" })},
		{"a key and the host name as the node", Input{Getenv: env(), Hostname: "gpu-3", Explicit: Explicit{Key: "k", KeyFrom: "--job-key"}},
			with(func(w *want) { w.key, w.launcher, w.node = "k", "explicit", "gpu-3" })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, Detect(c.in), c.want) })
	}
}

func TestPrimary(t *testing.T) {
	cases := []struct {
		job            Job
		primary, known bool
	}{
		{Job{Rank: -1, ProcRank: -1, Local: -1}, false, false},
		{Job{Rank: 0, ProcRank: -1, Local: -1}, true, true},
		{Job{Rank: 0, ProcRank: -1, Local: 1}, false, true},
		{Job{Rank: 1, ProcRank: -1, Local: 0}, false, true},
		{Job{Rank: 0, ProcRank: 8, Local: 0}, false, true}, // the global rank decides
		{Job{Rank: -1, ProcRank: 0, Local: -1}, true, true},
	}
	for _, c := range cases {
		p, k := c.job.Primary()
		if p != c.primary || k != c.known {
			t.Errorf("%+v: Primary() = %v, %v; want %v, %v", c.job, p, k, c.primary, c.known)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, k := range []string{"slurm:alps:4242.0", "jobset:llm:9a8b-1c", "a", "x/y@z+w=1", strings.Repeat("k", 200)} {
		if !ValidKey(k) {
			t.Errorf("ValidKey(%q) = false", k)
		}
	}
	for _, k := range []string{"", "it's", "a b", `a\b`, "a\"b", "a\x00", strings.Repeat("k", 201), "é"} {
		if ValidKey(k) {
			t.Errorf("ValidKey(%q) = true", k)
		}
	}
}

// The deploy/ examples project, under the names Detect reads, the
// downward-API fields docs/multinode.md names; with what they project
// Detect finds a key and the node.
func TestDeployExamples(t *testing.T) {
	cases := []struct {
		file     string
		projects map[string]string // variable -> field path
		env      []string          // what a pod of it sees
		key      string
	}{
		{"indexed-job.yaml", map[string]string{
			envJobUID:  "metadata.labels['batch.kubernetes.io/controller-uid']",
			envJobName: "metadata.labels['batch.kubernetes.io/job-name']",
		}, []string{"JOB_COMPLETION_INDEX=2", "JOB_UID=u-1", "JOB_NAME=train-llm", "BRIDGE_NODES=4"}, "k8s-job:train-llm:u-1"},
		{"jobset.yaml", map[string]string{
			envJobSetName:     "metadata.annotations['jobset.sigs.k8s.io/jobset-name']",
			envJobSetUID:      "metadata.annotations['jobset.sigs.k8s.io/jobset-uid']",
			envJobIndex:       "metadata.annotations['jobset.sigs.k8s.io/job-global-index']",
			envJobSetReplicas: "metadata.annotations['jobset.sigs.k8s.io/global-replicas']",
			envJobSetRestart:  "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']",
		}, []string{"JOBSET_NAME=pretrain", "JOBSET_UID=u-2", "JOB_GLOBAL_INDEX=2", "JOBSET_GLOBAL_REPLICAS=4", "JOBSET_RESTART_ATTEMPT=0", "JOB_COMPLETION_INDEX=0"}, "jobset:pretrain:u-2"},
	}
	for _, c := range cases {
		b, err := os.ReadFile(filepath.Join("..", "deploy", c.file))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for name, path := range c.projects {
			// "- name: VAR", then "valueFrom:", then its fieldRef.
			i := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(strings.SplitN(l, "#", 2)[0]) == "- name: "+name })
			if i < 0 || i+2 >= len(lines) || !strings.Contains(lines[i+2], path) {
				t.Errorf("deploy/%s does not project %s from %s", c.file, name, path)
			}
		}
		j := Detect(Input{Getenv: env(c.env...)})
		if j.Key != c.key || j.NodeID != "node-2" {
			t.Errorf("deploy/%s: key %q node %q, want %q and node-2", c.file, j.Key, j.NodeID, c.key)
		}
	}

	// deploy/torchrun-multinode.sh: bridge's child is the script's torchrun
	// command line, with NODE_RANK and RDZV_ID as a machine sets them.
	b, err := os.ReadFile(filepath.Join("..", "deploy", "torchrun-multinode.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(b), "\\\n", " ")
	_, cmd, ok := strings.Cut(script, "exec bridge -- ")
	if !ok {
		t.Fatal("deploy/torchrun-multinode.sh runs no `exec bridge -- torchrun ...`")
	}
	cmd, _, _ = strings.Cut(cmd, "\n")
	vars := strings.NewReplacer(`"${NODE_RANK:?set NODE_RANK to the index of this machine}"`, "1", `"$RDZV_ID"`, "ft-a", `"$MASTER"`, "gpu-a")
	argv := strings.Fields(vars.Replace(cmd))
	j := Detect(Input{Getenv: env(), Argv: argv, Hostname: "gpu-b"})
	if j.Key != "torchrun:ft-a" || j.NodeID != "node-1" || j.Nodes != 2 {
		t.Errorf("deploy/torchrun-multinode.sh (%q): key %q node %q nodes %d, want torchrun:ft-a, node-1, 2", argv, j.Key, j.NodeID, j.Nodes)
	}
}

// What torchrun did with each command line, observed on torch 2.15
// (harness/launchertest), is what bridge reads from it: the job's key only
// where every node's workers got the same TORCHELASTIC_RUN_ID from the
// command line (not "none", not a uuid of torchrun's own, more than one
// node), the node's index only where torchrun used --node-rank as its
// GROUP_RANK, and the node count only where --nnodes fixes it.
func TestTorchrunAsObserved(t *testing.T) {
	for _, c := range launchertest.TorchrunCases {
		t.Run(c.Name, func(t *testing.T) {
			got := Detect(Input{Getenv: env(c.Env...), Argv: c.Argv, Hostname: "host-a"})
			lo, hi, isRange := strings.Cut(c.NNodes, ":")
			if !isRange {
				hi = lo
			}
			multi := hi != "1"
			wantKey := ""
			if multi && !c.RandomRunID && c.RunID != "none" {
				wantKey = "torchrun:" + c.RunID
			}
			if got.Key != wantKey {
				t.Errorf("Key = %q, want %q (torchrun's workers got run id %q, random %v, nnodes %s)", got.Key, wantKey, c.RunID, c.RandomRunID, c.NNodes)
			}
			if wantKey == "" {
				return
			}
			switch {
			case c.NodeRank >= 0 && got.Rank != c.NodeRank:
				t.Errorf("Rank = %d, want torchrun's GROUP_RANK %d", got.Rank, c.NodeRank)
			case c.NodeRank < 0 && (got.Rank != -1 || got.NodeID != "host-a"):
				t.Errorf("Rank, NodeID = %d, %q; want unknown and the host name: torchrun ranks the nodes at rendezvous", got.Rank, got.NodeID)
			}
			wantNodes := 0
			if !isRange || lo == hi {
				wantNodes, _ = strconv.Atoi(hi)
			}
			if got.Nodes != wantNodes {
				t.Errorf("Nodes = %d, want %d (--nnodes %s)", got.Nodes, wantNodes, c.NNodes)
			}
		})
	}
}
