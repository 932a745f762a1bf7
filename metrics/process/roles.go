package process

import (
	"bytes"
	"context"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
)

// The tree by role (metrics.Role): each process's role from its name, its
// place in the tree and the GPU memory it holds.
//
// PyTorch names its processes through torch.multiprocessing._set_thread_name
// (c10::setThreadName, pthread_setname_np on the calling thread, 15 bytes at
// most): called on a process's main thread, it renames the process, which
// /proc/<pid>/stat's comm shows. So:
//   - a DataLoader worker process is "pt_data_worker" (PR pytorch#128448, in
//     _worker_loop of torch/utils/data/_utils/worker.py), and on current main
//     "pt_multiprocess_data_worker", cut to "pt_multiprocess" (worker.py
//     _process_worker_loop, pytorch/pytorch main at 00a7ccaa); its thread
//     workers ("pt_thread_data_worker") are threads of the trainer, not
//     processes;
//   - torchrun's agent is "pt_elastic" (torch/distributed/run.py run(),
//     pytorch/pytorch f34fa1515024423a239ce26f33a8b65ea9252502). Before it,
//     torchrun is "torchrun" (a console script's name), and
//     `python -m torch.distributed.run` is only known by its command line.

// loaderComms are the names PyTorch gives its DataLoader worker processes.
var loaderComms = []string{"pt_data_worker", "pt_multiprocess"}

// launcherComms are the names of the processes that start a job's
// trainers: shells, torchrun's agent and the launchers jobs commonly put
// between their scheduler and their trainers.
var launcherComms = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "fish": true, "busybox": true,
	"pt_elastic": true, "torchrun": true, "accelerate": true, "deepspeed": true,
	"srun": true, "mpirun": true, "mpiexec": true, "orterun": true, "prterun": true,
	"env": true, "timeout": true, "nohup": true, "stdbuf": true, "tini": true, "dumb-init": true, "uv": true,
}

// launcherModules are the Python modules and scripts that are launchers
// when an interpreter runs them (its comm is the interpreter's).
var launcherModules = []string{"torch.distributed.run", "torch.distributed.launch", "torchrun", "torch/distributed/run.py", "torch/distributed/launch.py"}

// isLoader reports whether s is a DataLoader worker process by its name.
func isLoader(s *procStat) bool {
	for _, c := range loaderComms {
		if s.commIs(c) {
			return true
		}
	}
	return false
}

// interpreter reports whether s's name is an interpreter's, whose command
// line says what it runs: Python, or PyTorch 2.4's renamed one.
func interpreter(s *procStat) bool {
	c := s.comm[:s.commN]
	return bytes.HasPrefix(c, []byte("python")) || string(c) == "pt_main_thread"
}

// launcherCmdline reports whether cmdline (NUL-separated, as
// /proc/<pid>/cmdline) runs a launcher module or script: its first
// argument that is not an option of the interpreter, or the module of -m.
func launcherCmdline(cmdline []byte) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "-m" && i+1 < len(args) {
			return isLauncherModule(args[i+1])
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		return isLauncherModule(a)
	}
	return false
}

func isLauncherModule(a string) bool {
	for _, m := range launcherModules {
		if a == m || strings.HasSuffix(a, "/"+m) {
			return true
		}
	}
	return false
}

// classify sets roles[i] to the role of procs[i]. procs is a walk: the
// root first, each process after its parent. gpu reports whether a pid
// holds GPU memory; launcher whether procs[i] is a launcher by its name or
// command line.
//
// Trainers are the processes that hold GPU memory (not DataLoader workers
// by name); where none does (no GPU, or before the trainers made their
// CUDA context), the first processes below the launchers: the root, or
// under a chain of launchers (a shell, torchrun) the first process that is
// not one. DataLoader workers are the processes named so, and every other
// descendant of a trainer. Launchers are the trainers' ancestors, and the
// processes named as launchers elsewhere. The rest is other.
func classify(procs []procStat, idx map[int]int, gpu func(pid int) bool, launcher func(i int) bool, roles []metrics.Role) {
	n := len(procs)
	clear(idx)
	for i := range procs {
		idx[procs[i].PID] = i
	}
	parent := func(i int) int {
		if j, ok := idx[procs[i].PPID]; ok && j != i {
			return j
		}
		return -1
	}
	const (
		loader uint8 = 1 << iota
		launch
		trainer
		under // a descendant of a trainer
		above // an ancestor of a trainer
		top   // every ancestor in the tree is a launcher
	)
	flags := make([]uint8, n)
	anyGPU := false
	for i := range procs {
		if isLoader(&procs[i]) {
			flags[i] |= loader
		} else if gpu != nil && gpu(procs[i].PID) {
			anyGPU = true
		}
		if launcher(i) {
			flags[i] |= launch
		}
	}
	for i := range procs {
		p := parent(i)
		if p < 0 || (flags[p]&launch != 0 && flags[p]&top != 0) {
			flags[i] |= top
		}
		switch {
		case flags[i]&loader != 0:
		case anyGPU && gpu(procs[i].PID):
			flags[i] |= trainer
		case !anyGPU && flags[i]&(launch|top) == top:
			flags[i] |= trainer
		}
		if p >= 0 && flags[p]&(trainer|under) != 0 {
			flags[i] |= under
		}
	}
	for i := range procs {
		if flags[i]&trainer == 0 {
			continue
		}
		for p := parent(i); p >= 0 && flags[p]&above == 0; p = parent(p) {
			flags[p] |= above
		}
	}
	for i := range procs {
		f := flags[i]
		switch {
		case f&loader != 0:
			roles[i] = metrics.RoleDataLoader
		case f&trainer != 0:
			roles[i] = metrics.RoleTrainer
		case f&under != 0:
			roles[i] = metrics.RoleDataLoader
		case f&(above|launch) != 0:
			roles[i] = metrics.RoleLauncher
		default:
			roles[i] = metrics.RoleOther
		}
	}
}

// cmdlines remembers, per process, whether its command line runs a
// launcher: read once per process and name (an exec changes the name).
type cmdlines struct {
	procRoot string
	seen     map[int]cmdline
	buf      []byte
}

type cmdline struct {
	start    uint64
	comm     [15]byte
	launcher bool
	used     bool
}

func newCmdlines(procRoot string) *cmdlines {
	return &cmdlines{procRoot: procRoot, seen: map[int]cmdline{}}
}

// launcher reports whether s, an interpreter, runs a launcher module. A
// command line that cannot be read (the process exited) is not one.
func (c *cmdlines) launcher(ctx context.Context, s *procStat) bool {
	e, ok := c.seen[s.PID]
	if !ok || e.start != s.Starttime || e.comm != s.comm {
		e = cmdline{start: s.Starttime, comm: s.comm}
		var err error
		c.buf, err = kfile.ReadInto(ctx, c.buf, c.procRoot+"/"+strconv.Itoa(s.PID)+"/cmdline", kfile.Table)
		e.launcher = err == nil && launcherCmdline(c.buf)
	}
	e.used = true
	c.seen[s.PID] = e
	return e.launcher
}

// sweep forgets the processes not asked about since the last sweep.
func (c *cmdlines) sweep() {
	for pid, e := range c.seen {
		if !e.used {
			delete(c.seen, pid)
			continue
		}
		e.used = false
		c.seen[pid] = e
	}
}
