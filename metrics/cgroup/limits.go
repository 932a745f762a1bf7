package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
)

type memLimit struct {
	bytes uint64
	ok    bool
	setBy string // the file that set it
}

// memoryLimit returns the memory limit the kernel enforces on the leaf.
//
// v2: the tightest memory.max of the leaf and its visible ancestors.
// v1: the leaf's hierarchical_memory_limit (memory.stat: hier is this
// round's reading, or nil to read it), the kernel's own answer. An
// ancestor's memory.limit_in_bytes applies only under memory.use_hierarchy=1,
// and ancestors hidden by a bind mount count too, which only the kernel
// knows. The ancestors are walked only to name the one that set it.
func (c *Collector) memoryLimit(hier *uint64) (memLimit, error) {
	p, ok := c.lay.places[ctlMemory]
	if !ok {
		return memLimit{}, nil
	}
	if p.v1 {
		return c.v1MemoryLimit(p, hier)
	}
	var best memLimit
	var errs []error
	for _, d := range p.ancestors() {
		path := filepath.Join(d, "memory.max")
		s, found, err := c.files.read(path)
		if err != nil || !found {
			// The v2 root has no memory.max; an absent file is no limit.
			errs = append(errs, err)
			continue
		}
		v, limited, err := parseMemoryMax(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		if limited && (!best.ok || v < best.bytes) {
			best = memLimit{bytes: v, ok: true, setBy: path}
		}
	}
	return best, errors.Join(errs...)
}

func (c *Collector) v1MemoryLimit(p place, hier *uint64) (memLimit, error) {
	if hier == nil {
		var vals [4]uint64
		found, err := c.readStat(filepath.Join(p.dir, "memory.stat"), v1MemoryStatKeys, vals[:])
		if err != nil || !found {
			return memLimit{}, err
		}
		hier = &vals[3]
	}
	v := *hier
	if v == 0 || v >= v1NoLimit {
		return memLimit{}, nil
	}
	for _, d := range p.ancestors() {
		path := filepath.Join(d, "memory.limit_in_bytes")
		s, found, err := c.files.read(path)
		if err != nil || !found {
			continue // naming only: the limit itself is the kernel's
		}
		if lim, limited, err := parseV1Limit(s); err == nil && limited && lim == v {
			return memLimit{bytes: v, ok: true, setBy: path}, nil
		}
	}
	return memLimit{bytes: v, ok: true,
		setBy: filepath.Join(p.dir, "memory.stat") + " hierarchical_memory_limit (an ancestor outside this view)"}, nil
}

type cpuLimit struct {
	cores float64
	ok    bool
	setBy string
	// cpus is the size of the cpuset the process may run on (or the online
	// CPU count without one); 0 when unknown. It is the utilization
	// denominator when there is no limit.
	cpus int
}

// cpuLimit returns min(quota/period over the leaf and its visible ancestors,
// cpuset size), as Go 1.25's runtime and W&B compute a container's CPUs. A
// cpuset counts as a limit only when it is smaller than the online CPUs.
func (c *Collector) cpuLimit() (cpuLimit, error) {
	var best cpuLimit
	var errs []error
	if p, ok := c.lay.places[ctlCPU]; ok {
		for _, d := range p.ancestors() {
			cores, limited, file, err := c.readQuota(d, p.v1)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if limited && (!best.ok || cores < best.cores) {
				best = cpuLimit{cores: cores, ok: true, setBy: filepath.Join(d, file) + " quota"}
			}
		}
	}

	online := c.onlineCPUs()
	best.cpus = online
	if p, ok := c.lay.places[ctlCPUSet]; ok {
		n, dir, err := c.readCPUSet(p)
		errs = append(errs, err)
		if n > 0 {
			best.cpus = n
			if online > 0 && n < online && (!best.ok || float64(n) < best.cores) {
				best.cores, best.ok, best.setBy = float64(n), true, "cpuset "+dir
			}
		}
	}
	return best, errors.Join(errs...)
}

// readQuota reads one directory's CPU quota; the file name is returned for
// the "set by" text.
func (c *Collector) readQuota(dir string, v1 bool) (cores float64, limited bool, file string, err error) {
	if !v1 {
		file = "cpu.max"
		path := filepath.Join(dir, file)
		s, found, err := c.files.read(path)
		if err != nil || !found {
			return 0, false, file, err
		}
		cores, limited, err = parseCPUMax(s)
		if err != nil {
			return 0, false, file, fmt.Errorf("%s: %w", path, err)
		}
		return cores, limited, file, nil
	}
	file = "cpu.cfs_quota_us"
	q, found, err := c.files.read(filepath.Join(dir, file))
	if err != nil || !found {
		return 0, false, file, err
	}
	per, found, err := c.files.read(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil || !found {
		return 0, false, file, err
	}
	cores, limited, err = parseV1Quota(q, per)
	if err != nil {
		return 0, false, file, fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
	}
	return cores, limited, file, nil
}

// readCPUSet returns the size of the effective cpuset of the nearest
// directory (leaf first) that has one; effective sets already intersect the
// ancestors'. v2 shows cpuset.cpus.effective only where the controller is
// enabled, so the walk goes up until one is found.
func (c *Collector) readCPUSet(p place) (int, string, error) {
	files := []string{"cpuset.cpus.effective"}
	if p.v1 {
		files = []string{"cpuset.effective_cpus", "cpuset.cpus"}
	}
	for _, d := range p.ancestors() {
		for _, f := range files {
			path := filepath.Join(d, f)
			s, found, err := c.files.read(path)
			if err != nil {
				return 0, "", err
			}
			if !found {
				continue
			}
			n, err := parseCPUList(s)
			if err != nil {
				return 0, "", fmt.Errorf("%s: %w", path, err)
			}
			if n > 0 {
				return n, d, nil
			}
		}
	}
	return 0, "", nil
}

// onlineCPUs counts the cpuN lines of <proc>/stat; 0 when unreadable.
func (c *Collector) onlineCPUs() int {
	path := filepath.Join(c.lay.procRoot, "stat")
	s, found, err := c.files.read(path)
	if err != nil || !found {
		c.noData(path, "online CPUs")
		return 0
	}
	return countCPULines(s)
}
