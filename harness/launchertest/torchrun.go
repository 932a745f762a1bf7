// Package launchertest holds what launchers give a job, observed on real
// launchers, as test input for the code that finds a job's key and a node's
// id (issue 22). Slurm runs for real in e2e/slurm; torchrun cannot run in
// CI (PyPI's torch for x86-64 Linux does not import without about 2.3 GB of
// NVIDIA libraries), so its behaviour is recorded here: every case below
// was run with torch 2.15.0 on one machine (observe-torchrun.sh) and the
// fields are what its workers got.
package launchertest

// TorchrunCase is one way of starting torchrun on a node: the command that
// a bridge wrapping it sees (`bridge -- ARGV...`) and torchrun's PET_
// variables, then what torchrun made of them.
type TorchrunCase struct {
	Name string
	Argv []string
	// Env holds PET_ variables: torchrun reads each option it is not given
	// on the command line from PET_<OPTION> (upper case, dashes as
	// underscores: PET_RDZV_ID, PET_NNODES, PET_NODE_RANK); Kubeflow's
	// PyTorchJob sets them.
	Env []string

	// RunID is TORCHELASTIC_RUN_ID in the workers: --rdzv-id, default the
	// literal "none" (which names no job). RandomRunID: torchrun replaced it
	// with a fresh uuid (--standalone, or at most one node with no
	// rendezvous endpoint and no master port, even when --rdzv-id was
	// given), so it names no job either.
	RunID       string
	RandomRunID bool
	// NNodes is --nnodes as given, "N" or "MIN:MAX"; default "1:1".
	NNodes string
	// NodeRank is GROUP_RANK of this node's workers when the command line
	// decides it: --node-rank under the static rendezvous (the default
	// backend), 0 for a single node. -1 under c10d with several nodes:
	// torchrun ignores --node-rank (it logs "node_rank is only used for
	// static rdzv_backend") and ranks the agents by their sorted (host, pid)
	// at rendezvous, after the wrapper has had to start.
	NodeRank int
	// ScriptArgs are the training script's own arguments: nothing after the
	// script is torchrun's, even a --nnodes.
	ScriptArgs []string
}

// TorchrunCases are the observed cases.
var TorchrunCases = []TorchrunCase{
	{
		Name:     "static two nodes, node 0, no rdzv id",
		Argv:     []string{"torchrun", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", "29601", "--nproc-per-node", "1", "train.py", "--nnodes", "9"},
		RunID:    "none",
		NNodes:   "2",
		NodeRank: 0, ScriptArgs: []string{"--nnodes", "9"},
	},
	{
		Name:     "static two nodes, node 1, no rdzv id",
		Argv:     []string{"torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", "29601", "--nproc-per-node", "1", "train.py", "--nnodes", "9"},
		RunID:    "none",
		NNodes:   "2",
		NodeRank: 1, ScriptArgs: []string{"--nnodes", "9"},
	},
	{
		Name:     "static two nodes with rdzv id",
		Argv:     []string{"torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", "29612", "--rdzv-id", "abc3", "train.py"},
		RunID:    "abc3",
		NNodes:   "2",
		NodeRank: 1,
	},
	{
		// Run twice: the agent given --node-rank 1 got GROUP_RANK 1 once
		// and 0 the other time.
		Name:     "c10d two nodes, dash spellings, node rank ignored",
		Argv:     []string{"torchrun", "--nnodes", "2", "--node-rank", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29602", "--rdzv-id", "job42", "--nproc-per-node", "2", "train.py"},
		RunID:    "job42",
		NNodes:   "2",
		NodeRank: -1,
	},
	{
		Name:     "c10d two nodes, underscore spellings with =",
		Argv:     []string{"torchrun", "--nnodes", "2", "--node_rank", "0", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29602", "--rdzv_id=job42", "--nproc_per_node=2", "train.py"},
		RunID:    "job42",
		NNodes:   "2",
		NodeRank: -1,
	},
	{
		Name:     "python -m torch.distributed.run",
		Argv:     []string{"python", "-m", "torch.distributed.run", "--nnodes=1", "--rdzv-id=abc", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:29610", "train.py"},
		RunID:    "abc",
		NNodes:   "1",
		NodeRank: 0,
	},
	{
		// argparse accepts any unambiguous prefix of an option.
		Name:     "abbreviated options",
		Argv:     []string{"torchrun", "--nnodes", "1", "--rdzv-i", "abc2", "--rdzv-back", "c10d", "--rdzv-endp", "127.0.0.1:29611", "train.py"},
		RunID:    "abc2",
		NNodes:   "1",
		NodeRank: 0,
	},
	{
		Name:        "one node, defaults",
		Argv:        []string{"torchrun", "--nproc-per-node", "2", "train.py"},
		RandomRunID: true,
		NNodes:      "1:1",
		NodeRank:    0,
	},
	{
		Name:        "standalone",
		Argv:        []string{"torchrun", "--standalone", "--nproc-per-node", "1", "train.py"},
		RandomRunID: true,
		NNodes:      "1:1",
		NodeRank:    0,
	},
	{
		Name:        "one node, rdzv id replaced by a uuid",
		Argv:        []string{"torchrun", "--rdzv-id", "abc", "--nproc-per-node", "1", "train.py"},
		RandomRunID: true,
		NNodes:      "1:1",
		NodeRank:    0,
	},
	{
		Name:     "PET_ variables only",
		Argv:     []string{"torchrun", "train.py"},
		Env:      []string{"PET_NNODES=1:2", "PET_RDZV_ID=petjob", "PET_RDZV_BACKEND=c10d", "PET_RDZV_ENDPOINT=127.0.0.1:29603", "PET_NPROC_PER_NODE=1"},
		RunID:    "petjob",
		NNodes:   "1:2",
		NodeRank: -1,
	},
}

// TorchrunWorkerVars are the variables torchrun 2.15.0 set for every
// worker, in each case above. A process that wraps torchrun sees none of
// them.
var TorchrunWorkerVars = []string{
	"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
	"GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
	"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_ERROR_FILE",
	"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}
