package metrics

// The child's process tree by role (metrics/process splits it; the
// bottleneck verdict reads the split): what each process does for the job.
// Every process of the tree has exactly one role, so that a role's series
// add up, over the roles, to the tree's own (process_cpu_usage_cores,
// process_memory_rss_megabytes, process_count, process_io_*).

// Role is what a process of the child's tree does for the job.
type Role uint8

// The roles, in the order their series are listed.
const (
	// RoleLauncher: the processes that start the trainers (a shell,
	// torchrun's agent, a launcher such as accelerate or srun), and every
	// ancestor of a trainer in the tree.
	RoleLauncher Role = iota
	// RoleTrainer: the processes that hold GPU memory; without any, the
	// first processes below the launchers (the child's interpreters).
	RoleTrainer
	// RoleDataLoader: PyTorch's DataLoader worker processes by their name,
	// and every other descendant of a trainer.
	RoleDataLoader
	// RoleOther: the rest (a sibling of the trainers: a tee, a monitor).
	RoleOther
	// NumRoles is how many roles there are.
	NumRoles
)

// Name is the role's part of its series' names: process_<name>_...
func (r Role) Name() string {
	switch r {
	case RoleLauncher:
		return "launcher"
	case RoleTrainer:
		return "trainer"
	case RoleDataLoader:
		return "dataloader"
	}
	return "other"
}

// What says in words what the role's processes are, plural.
func (r Role) What() string {
	switch r {
	case RoleLauncher:
		return "launcher processes"
	case RoleTrainer:
		return "trainers"
	case RoleDataLoader:
		return "data-loading workers"
	}
	return "other processes"
}

// RoleDescs are one role's series.
type RoleDescs struct {
	CPU, RSS, Count, IORead, IOWrite *Desc
}

// All lists the role's series.
func (d RoleDescs) All() []*Desc { return []*Desc{d.CPU, d.RSS, d.Count, d.IORead, d.IOWrite} }

// roleDescs describes role r's series.
func roleDescs(r Role) RoleDescs {
	n, w := "process_"+r.Name()+"_", r.What()
	return RoleDescs{
		CPU: &Desc{Name: n + "cpu_usage_cores", Unit: UnitCores, Scope: ScopeProcess,
			Help: "CPU the " + w + " of the child's tree used over the last interval, in cores."},
		RSS: &Desc{Name: n + "memory_rss_megabytes", Unit: UnitMegabytes, Scope: ScopeProcess,
			Prom: "bridge_" + n + "memory_rss_bytes", Help: "Sum of the RSS of the " + w + " of the child's tree in bytes."},
		Count: &Desc{Name: n + "count", Unit: UnitCount, Scope: ScopeProcess,
			Help: "Processes of the child's tree that are " + w + "."},
		IORead: &Desc{Name: n + "io_read_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeProcess,
			Prom: "bridge_" + n + "io_read_bytes_per_second", Help: "Bytes the " + w + " of the child's tree read from storage per second over the last interval."},
		IOWrite: &Desc{Name: n + "io_write_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeProcess,
			Prom: "bridge_" + n + "io_write_bytes_per_second", Help: "Bytes the " + w + " of the child's tree wrote to storage per second over the last interval."},
	}
}

// ProcessRoles are each role's series, by Role.
var ProcessRoles = func() [NumRoles]RoleDescs {
	var out [NumRoles]RoleDescs
	for r := range NumRoles {
		out[r] = roleDescs(r)
	}
	return out
}()

// The tree's own I/O rates and blocked processes (metrics/process): the
// bottleneck verdict reads them.
var (
	ProcessIORead = &Desc{Name: "process_io_read_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeProcess,
		Prom: "bridge_process_io_read_bytes_per_second", Help: "Bytes the child's process tree read from storage per second over the last interval."}
	ProcessIOWrite = &Desc{Name: "process_io_write_megabytes_per_second", Unit: UnitMegabytesPerSecond, Scope: ScopeProcess,
		Prom: "bridge_process_io_write_bytes_per_second", Help: "Bytes the child's process tree wrote to storage per second over the last interval."}
	ProcessBlocked = &Desc{Name: "process_blocked_count", Unit: UnitCount, Scope: ScopeProcess,
		Help: "Processes of the child's tree in uninterruptible sleep (state D) when sampled: waiting in the kernel, most often on storage or a network file system."}
)
