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

// memoryLimit returns the tightest memory limit of the leaf and its visible
// ancestors. On v1 the leaf's hierarchical_memory_limit also covers ancestors
// hidden by a bind mount, so it is taken when it is tighter still.
func (c *Collector) memoryLimit() (memLimit, error) {
	p, ok := c.lay.places[ctlMemory]
	if !ok {
		return memLimit{}, nil
	}
	var best memLimit
	var errs []error
	take := func(v uint64, file string) {
		if !best.ok || v < best.bytes {
			best = memLimit{bytes: v, ok: true, setBy: file}
		}
	}
	file, parse := "memory.max", parseMemoryMax
	if p.v1 {
		file, parse = "memory.limit_in_bytes", parseV1Limit
	}
	for _, d := range p.ancestors() {
		path := filepath.Join(d, file)
		s, found, err := readFile(path)
		if err != nil || !found {
			// The v2 root has no memory.max; an absent file is no limit.
			errs = append(errs, err)
			continue
		}
		v, limited, err := parse(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		if limited {
			take(v, path)
		}
	}
	if p.v1 {
		path := filepath.Join(p.dir, "memory.stat")
		s, found, err := readFile(path)
		errs = append(errs, err)
		if found {
			kv, err := parseFlatKeyed(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
			} else if v, has := kv["hierarchical_memory_limit"]; has && v < v1NoLimit {
				take(v, path+" hierarchical_memory_limit")
			}
		}
	}
	return best, errors.Join(errs...)
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
			cores, limited, file, err := readQuota(d, p.v1)
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
		n, dir, err := readCPUSet(p)
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
func readQuota(dir string, v1 bool) (cores float64, limited bool, file string, err error) {
	if !v1 {
		file = "cpu.max"
		path := filepath.Join(dir, file)
		s, found, err := readFile(path)
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
	q, found, err := readFile(filepath.Join(dir, file))
	if err != nil || !found {
		return 0, false, file, err
	}
	per, found, err := readFile(filepath.Join(dir, "cpu.cfs_period_us"))
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
func readCPUSet(p place) (int, string, error) {
	files := []string{"cpuset.cpus.effective"}
	if p.v1 {
		files = []string{"cpuset.effective_cpus", "cpuset.cpus"}
	}
	for _, d := range p.ancestors() {
		for _, f := range files {
			path := filepath.Join(d, f)
			s, found, err := readFile(path)
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
	st, err := c.procFS.Stat()
	if err != nil {
		c.noData(filepath.Join(c.opts.ProcRoot, "stat"), "online CPUs")
		return 0
	}
	return len(st.CPU)
}
