package jobkey

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/internal/printable"
)

// getter reads one variable, trimmed; "" when unset.
type getter func(string) string

// count parses a non-negative whole number; ok is false for anything else.
func count(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// number reads variable name as a count: ok is false when it is unset or
// not a whole number, and the latter is warned about (it is not used).
func (p *part) number(get getter, name string) (int, bool) {
	v := get(name)
	if v == "" {
		return 0, false
	}
	n, ok := count(v)
	if !ok {
		p.warns = append(p.warns, fmt.Sprintf("%s=%s is not a whole number: not used", name, printable.Quote(v)))
	}
	return n, ok
}

// firstOf returns the first variable of names that is set, and its name.
func firstOf(get getter, names ...string) (value, name string) {
	for _, n := range names {
		if v := get(n); v != "" {
			return v, n
		}
	}
	return "", ""
}

// ranks reads a launcher's node index, global rank and rank on the node
// from the variables named (who names the launcher in NodeFrom).
func (p *part) ranks(get getter, node, proc, local, who string) {
	if n, ok := p.number(get, node); ok {
		p.rank, p.hasRank, p.nodeOf = n, true, node+" ("+who+")"
	}
	if n, ok := p.number(get, proc); ok {
		p.procRank, p.hasProc = n, true
	}
	if n, ok := p.number(get, local); ok {
		p.local, p.hasLocal = n, true
	}
}

// Slurm's reserved step ids (slurm.h): the batch script, the extern step
// and an interactive step are no training launch of their own.
const slurmReservedStep = 0xFFFFFFF0

// slurm reads sbatch's and srun's output variables (sbatch(1), srun(1)).
// The key is the cluster and the job (the array job and task for an array
// task) and, under srun, the step: each srun is one launch of the
// training, which a requeued job repeats with the same step ids. Job ids
// repeat across clusters (hence the cluster) and after a controller's
// database is reset: SLURM_JOB_START_TIME, shared by every node of one
// attempt, is the generation that tells such jobs apart.
func slurm(get getter) part {
	id, idVar := firstOf(get, "SLURM_JOB_ID", "SLURM_JOBID")
	if id == "" {
		return part{}
	}
	p := part{launcher: "slurm"}
	cluster := get("SLURM_CLUSTER_NAME")
	vars := []string{"SLURM_CLUSTER_NAME", idVar}
	if cluster == "" {
		p.notes = append(p.notes, "SLURM_CLUSTER_NAME is not set: the Slurm key lacks the cluster, and job ids repeat across clusters")
		vars = vars[1:]
	}
	// Each part leaves out the separators after it (see keyOf): the
	// cluster ':', the job '.' and '_', which joins an array's job and task.
	fields := []field{{":", "SLURM_CLUSTER_NAME", cluster, 60, keyRuneBut(":")}}
	jobRune := keyRuneBut(":._")
	if arr, task := get("SLURM_ARRAY_JOB_ID"), get("SLURM_ARRAY_TASK_ID"); arr != "" && task != "" {
		fields = append(fields, field{":", "SLURM_ARRAY_JOB_ID", arr, 20, jobRune}, field{"_", "SLURM_ARRAY_TASK_ID", task, 19, jobRune})
		vars = append(vars[:len(vars)-1], "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")
	} else {
		fields = append(fields, field{":", idVar, id, 40, jobRune})
	}
	// The batch script, the extern step and an interactive step (Slurm's
	// reserved ids) are no training launch of their own: no step.
	step, stepVar := firstOf(get, "SLURM_STEP_ID", "SLURM_STEPID")
	if n, err := strconv.ParseUint(step, 10, 32); err == nil && n >= slurmReservedStep {
		step = ""
	}
	if step != "" {
		fields = append(fields, field{".", stepVar, step, 10, digit})
		vars = append(vars, stepVar)
	}
	p.setKey(keyOf("slurm", fields...))
	p.keyOf = strings.Join(vars, ", ") + " (Slurm)"
	p.generation = generation(&p, get, "SLURM_JOB_START_TIME")

	p.ranks(get, "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "Slurm")
	if step == "" {
		// The batch script runs on the allocation's first node only.
		p.nodes, p.nodesOf = 1, "the Slurm batch step (one node)"
		if node, jobNodes := get("SLURM_NODEID"), get("SLURM_JOB_NUM_NODES"); node != "" && !(node == "0" && jobNodes == "1") {
			p.keyWarns = append(p.keyWarns, fmt.Sprintf("SLURM_NODEID=%s is set but there is no SLURM_STEP_ID: bridge assumed Slurm's batch script, one node (key %s); to measure every node start it under srun (srun bridge -- ...), or set --job-key and --nodes",
				printable.Quote(node), p.key))
		}
	} else if _, name := firstOf(get, "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"); name != "" {
		if n, ok := p.number(get, name); ok && n > 0 {
			p.nodes, p.nodesOf = n, name+" (Slurm)"
		}
	}
	// Slurm sets SLURM_RESTART_COUNT once a job has been requeued; before
	// that the job is on its first attempt.
	p.attempt, p.hasAttempt, p.attemptOf = 0, true, "Slurm (no SLURM_RESTART_COUNT: first attempt)"
	if n, ok := p.number(get, "SLURM_RESTART_COUNT"); ok {
		p.attempt, p.attemptOf = n, "SLURM_RESTART_COUNT (Slurm)"
	}
	return p
}

// generation reads a launcher's generation (a start time, a whole number):
// a value a key could not hold is cleaned as a key part is, so that it
// stays short and distinct values stay distinct.
func generation(p *part, get getter, name string) string {
	v := get(name)
	if v == "" || fits(v, 20, digit) {
		return v
	}
	g, changed := keyOf("", field{"", name, v, 20, keyRune})
	if changed != nil {
		p.keyWarns = append(p.keyWarns, fmt.Sprintf("%s=%s cannot be used as it is: the job's generation is %s", name, printable.Quote(v), g))
	}
	return g
}

// The variables a pod spec projects through the downward API for a JobSet
// and an Indexed Job (docs/multinode.md, deploy/jobset.yaml,
// deploy/indexed-job.yaml). Kubernetes injects only JOB_COMPLETION_INDEX.
const (
	envJobSetName     = "JOBSET_NAME"            // annotation jobset.sigs.k8s.io/jobset-name
	envJobSetUID      = "JOBSET_UID"             // label jobset.sigs.k8s.io/jobset-uid
	envJobIndex       = "JOB_GLOBAL_INDEX"       // annotation jobset.sigs.k8s.io/job-global-index
	envJobSetReplicas = "JOBSET_GLOBAL_REPLICAS" // annotation jobset.sigs.k8s.io/global-replicas
	envJobSetRestart  = "JOBSET_RESTART_ATTEMPT" // annotation jobset.sigs.k8s.io/restart-attempt
	envJobName        = "JOB_NAME"               // label batch.kubernetes.io/job-name
	envJobUID         = "JOB_UID"                // label batch.kubernetes.io/controller-uid
	envCompletion     = "JOB_COMPLETION_INDEX"   // injected by the Job controller (Indexed mode)
)

// jobSet reads a JobSet's annotations projected into the environment. A
// JobSet's name is reused (delete and create again): the key holds its uid,
// which a restart of the JobSet keeps. The node is the child Job's global
// index, with the pod's completion index when a Job has several pods.
func jobSet(get getter) part {
	name, uid := get(envJobSetName), get(envJobSetUID)
	if name == "" && uid == "" {
		return part{}
	}
	p := part{launcher: "jobset"}
	if uid == "" {
		p.notes = append(p.notes, fmt.Sprintf("%s is set but %s is not: a JobSet's name is reused, so it is no key; project the label jobset.sigs.k8s.io/jobset-uid into %s", envJobSetName, envJobSetUID, envJobSetUID))
		return p
	}
	p.setKey(keyOf("jobset", field{":", envJobSetName, name, 63, keyRuneBut(":")}, field{":", envJobSetUID, uid, 40, keyRune}))
	p.keyOf = envJobSetName + ", " + envJobSetUID + " (JobSet, downward API)"
	g, gok := p.number(get, envJobIndex)
	c, cok := p.number(get, envCompletion)
	switch {
	case gok && cok && c > 0:
		// Several pods per child Job: the pod is not a whole node index.
		p.node, p.nodeOf = fmt.Sprintf("node-%d-%d", g, c), envJobIndex+", "+envCompletion+" (JobSet)"
	case gok:
		p.rank, p.hasRank, p.nodeOf = g, true, envJobIndex+" (JobSet)"
		if n, ok := p.number(get, envJobSetReplicas); ok && n > 0 {
			p.nodes, p.nodesOf = n, envJobSetReplicas+" (JobSet; one pod per child Job)"
		}
	default:
		p.notes = append(p.notes, fmt.Sprintf("JobSet: %s is not set: project the annotation jobset.sigs.k8s.io/job-global-index into it for the node id", envJobIndex))
	}
	if n, ok := p.number(get, envJobSetRestart); ok {
		p.attempt, p.hasAttempt, p.attemptOf = n, true, envJobSetRestart+" (JobSet)"
	}
	return p
}

// indexedJob reads an Indexed Job: JOB_COMPLETION_INDEX, which the Job
// controller injects, and the Job's uid projected from its pod label. The
// Job's completions are not visible in a pod: the node count must be given
// (--nodes).
func indexedJob(get getter) part {
	idx := get(envCompletion)
	if idx == "" {
		return part{}
	}
	p := part{launcher: "indexed-job"}
	if n, ok := p.number(get, envCompletion); ok {
		p.rank, p.hasRank, p.nodeOf = n, true, envCompletion+" (Indexed Job)"
	}
	uid := get(envJobUID)
	if uid == "" {
		if get(envJobSetUID) == "" {
			p.notes = append(p.notes, fmt.Sprintf("%s is set but %s is not: project the label batch.kubernetes.io/controller-uid into %s for the job key", envCompletion, envJobUID, envJobUID))
		}
		return p
	}
	p.setKey(keyOf("k8s-job", field{":", envJobName, get(envJobName), 63, keyRuneBut(":")}, field{":", envJobUID, uid, 40, keyRune}))
	p.keyOf = envJobName + ", " + envJobUID + " (Indexed Job, downward API)"
	return p
}

// pyTorchJob reads what Kubeflow's training operator sets in each pod of a
// PyTorchJob (pkg/controller.v1/pytorch/envvar.go): RANK is the pod's index
// and WORLD_SIZE the number of pods, MASTER_ADDR <job>-master-0. It gives
// no uid: the key must be given (BRIDGE_JOB_KEY, see deploy/).
// torchrun's workers set the same variables, with GROUP_RANK: those are
// torchelastic's.
func pyTorchJob(get getter) part {
	master := get("MASTER_ADDR")
	if get("RANK") == "" || get("WORLD_SIZE") == "" || get("GROUP_RANK") != "" || !strings.HasSuffix(master, "-master-0") {
		return part{}
	}
	p := part{launcher: "pytorchjob"}
	if n, ok := p.number(get, "RANK"); ok {
		p.rank, p.hasRank, p.nodeOf = n, true, "RANK (PyTorchJob)"
		p.procRank, p.hasProc = n, true
	}
	if n, ok := p.number(get, "WORLD_SIZE"); ok && n > 0 {
		p.nodes, p.nodesOf = n, "WORLD_SIZE (PyTorchJob: pods)"
	}
	p.notes = append(p.notes, fmt.Sprintf("PyTorchJob %s gives no uid: set BRIDGE_JOB_KEY to a value unique to the job (deploy/ shows one)", strings.TrimSuffix(master, "-master-0")))
	return p
}

// torchElastic reads what torchrun sets for its workers, for a bridge that
// torchrun starts (torchrun ... bridge -- python train.py): one bridge per
// worker, GROUP_RANK the node. TORCHELASTIC_RUN_ID is --rdzv-id, whose
// default "none" names no job.
func torchElastic(get getter) part {
	id := get("TORCHELASTIC_RUN_ID")
	if id == "" {
		return part{}
	}
	p := part{launcher: "torchelastic"}
	if id == "none" {
		p.notes = append(p.notes, "TORCHELASTIC_RUN_ID=none (torchrun's default --rdzv-id) names no job")
	} else {
		p.setKey(keyOf("torchrun", field{":", "TORCHELASTIC_RUN_ID", id, 120, keyRune}))
		p.keyOf = "TORCHELASTIC_RUN_ID (torchrun's --rdzv-id)"
	}
	p.ranks(get, "GROUP_RANK", "RANK", "LOCAL_RANK", "torchrun")
	if n, ok := p.number(get, "GROUP_WORLD_SIZE"); ok && n > 0 {
		p.nodes, p.nodesOf = n, "GROUP_WORLD_SIZE (torchrun)"
	}
	if n, ok := p.number(get, "TORCHELASTIC_RESTART_COUNT"); ok {
		p.attempt, p.hasAttempt, p.attemptOf = n, true, "TORCHELASTIC_RESTART_COUNT (torchrun)"
	}
	return p
}

// mpi reads Open MPI's and MPICH (Hydra)'s rank variables. MPI numbers
// processes, not nodes, and names no job: the node is the host, and the key
// must be given.
func mpi(get getter, hostname string) part {
	rank, rankVar := firstOf(get, "OMPI_COMM_WORLD_RANK", "PMI_RANK")
	if rank == "" {
		return part{}
	}
	p := part{launcher: "mpi"}
	if n, ok := p.number(get, rankVar); ok {
		p.procRank, p.hasProc = n, true
	}
	if _, name := firstOf(get, "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"); name != "" {
		if n, ok := p.number(get, name); ok {
			p.local, p.hasLocal = n, true
		}
	}
	if h, _ := NodeIDFrom(hostname); h != "" {
		p.node, p.nodeOf = h, "the host name (MPI numbers processes, not nodes)"
	}
	p.notes = append(p.notes, fmt.Sprintf("MPI (%s) gives ranks but no job id: set --job-key / BRIDGE_JOB_KEY to one value for the whole job, and --nodes", rankVar))
	return p
}

// torchrun reads torchrun's own options when bridge's child is torchrun
// (bridge -- torchrun ... train.py), or `python -m torch.distributed.run`:
// torchrun's variables exist only in its workers, after bridge has started.
// An option not on the command line is read from torchrun's PET_<NAME>
// variable, as torchrun does (torch/distributed/argparse_util.py). What
// torchrun does with them was observed on torch 2.15 (harness/launchertest):
// a run of at most one node gets a fresh rendezvous id whatever --rdzv-id
// says, and --node-rank counts only under the static rendezvous; c10d ranks
// the nodes at rendezvous, after bridge has had to start the child.
func torchrun(get getter, argv []string) part {
	args, ok := torchrunArgs(argv)
	if !ok {
		return part{}
	}
	opts := parseTorchrun(args)
	val := func(name string) (string, string) {
		if v, ok := opts[name]; ok {
			return v, "--" + strings.ReplaceAll(name, "_", "-") + " (torchrun's command line)"
		}
		env := "PET_" + strings.ToUpper(name)
		if v := get(env); v != "" {
			return v, env + " (torchrun)"
		}
		return "", ""
	}
	p := part{launcher: "torchrun"}
	maxNodes := 1 // torchrun's default --nnodes is 1:1
	if v, from := val("nnodes"); v != "" {
		lo, hi, found := strings.Cut(v, ":")
		a, aok := count(lo)
		b, bok := a, aok
		if found {
			b, bok = count(hi)
		}
		switch {
		case aok && bok && a == b && a > 0:
			p.nodes, p.nodesOf, maxNodes = a, from, a
		case aok && bok:
			maxNodes = b
			p.notes = append(p.notes, fmt.Sprintf("torchrun --nnodes=%s is a range: the node count is not known (set --nodes)", v))
		}
	}
	_, standalone := opts["standalone"]
	switch id, from := val("rdzv_id"); {
	case standalone || get("PET_STANDALONE") == "1":
		p.notes = append(p.notes, "torchrun --standalone makes a new rendezvous id on every node: no job key")
	case maxNodes <= 1:
		p.notes = append(p.notes, "torchrun of one node: a single-node job, no job key")
	case id == "none" || id == "":
		p.notes = append(p.notes, "torchrun's --rdzv-id is its default \"none\": no job key")
	default:
		p.setKey(keyOf("torchrun", field{":", strings.Fields(from)[0], id, 120, keyRune}))
		p.keyOf = from
	}
	backend, _ := val("rdzv_backend")
	if v, from := val("node_rank"); v != "" {
		n, ok := count(v)
		switch {
		case ok && (backend == "" || backend == "static"):
			p.rank, p.hasRank, p.nodeOf = n, true, from
		case ok:
			p.notes = append(p.notes, fmt.Sprintf("torchrun --node-rank=%s is not used: the %s rendezvous ranks the nodes itself", v, backend))
		}
	}
	return p
}

// torchrunArgs returns the arguments of torchrun in the child's command
// line: after `torchrun`, or after `-m torch.distributed.run` (or .launch)
// of a python.
func torchrunArgs(argv []string) ([]string, bool) {
	if len(argv) == 0 {
		return nil, false
	}
	if filepath.Base(argv[0]) == "torchrun" {
		return argv[1:], true
	}
	if !strings.HasPrefix(filepath.Base(argv[0]), "python") {
		return nil, false
	}
	for i := 1; i+1 < len(argv); i++ {
		if argv[i] == "-m" {
			if m := argv[i+1]; m == "torch.distributed.run" || m == "torch.distributed.launch" {
				return argv[i+2:], true
			}
			return nil, false
		}
		if !strings.HasPrefix(argv[i], "-") {
			return nil, false // a script: python's own options end here
		}
	}
	return nil, false
}

// torchrunOptions are torchrun's long options (torch/distributed/run.py,
// get_args_parser), names with underscores, and whether each takes a
// value. argparse also takes any unambiguous prefix of one (--rdzv-i).
var torchrunOptions = map[string]bool{
	"nnodes": true, "nproc_per_node": true, "rdzv_backend": true, "rdzv_endpoint": true, "rdzv_id": true,
	"rdzv_conf": true, "standalone": false, "max_restarts": true, "monitor_interval": true, "start_method": true,
	"event_log_handler": true, "role": true, "module": false, "no_python": false, "run_path": false,
	"log_dir": true, "redirects": true, "tee": true, "local_ranks_filter": true, "node_rank": true,
	"master_addr": true, "master_port": true, "local_addr": true, "logs_specs": true, "numa_binding": true,
	"signals_to_handle": true,
}

// torchrunShort are torchrun's one-letter options: -m takes no value, -r
// and -t do.
var torchrunShort = map[string]string{"m": "module", "r": "redirects", "t": "tee"}

// torchrunOption resolves an option as argparse does: a full name, or the
// one option it is a prefix of; "" when unknown or ambiguous.
func torchrunOption(name string) string {
	if _, ok := torchrunOptions[name]; ok {
		return name
	}
	found := ""
	for o := range torchrunOptions {
		if strings.HasPrefix(o, name) {
			if found != "" {
				return ""
			}
			found = o
		}
	}
	return found
}

// parseTorchrun reads torchrun's options up to the training script, names
// resolved to torchrun's own with underscores; a flag without a value maps
// to "".
func parseTorchrun(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break // the training script and its arguments
		}
		raw, value, hasValue := strings.Cut(a, "=")
		var name string
		if long, ok := strings.CutPrefix(raw, "--"); ok {
			name = torchrunOption(strings.ReplaceAll(long, "-", "_"))
		} else {
			name = torchrunShort[strings.TrimPrefix(raw, "-")]
		}
		takes, known := torchrunOptions[name]
		if known && !takes {
			out[name] = ""
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				break
			}
			i++
			value = args[i]
		}
		if known {
			out[name] = value
		}
	}
	return out
}

// setKey takes a key keyOf built, and warns when it was cleaned.
func (p *part) setKey(key string, changed []string) {
	p.key = key
	if changed != nil {
		p.keyWarns = append(p.keyWarns, cleanedNote(key, changed))
	}
}
