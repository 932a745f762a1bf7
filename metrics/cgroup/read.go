package cgroup

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/containerd/cgroups/v3/cgroup1"
	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	"github.com/containerd/cgroups/v3/cgroup2"
	v2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
)

type v2Result struct {
	m   *v2stats.Metrics
	err error
}

// v2Stat reads a v2 leaf through containerd once per round (memory, CPU and
// pids share one directory).
func (r *round) v2Stat(p place) (*v2stats.Metrics, error) {
	if res, ok := r.v2[p.dir]; ok {
		return res.m, res.err
	}
	m, err := func() (*v2stats.Metrics, error) {
		mgr, err := cgroup2.Load(p.rel, cgroup2.WithMountpoint(p.top))
		if err != nil {
			return nil, fmt.Errorf("loading cgroup %s: %w", p.dir, err)
		}
		st, err := mgr.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatPids)
		if err != nil {
			return nil, fmt.Errorf("reading cgroup stats in %s: %w", p.dir, err)
		}
		return st, nil
	}()
	r.v2[p.dir] = &v2Result{m: m, err: err}
	return m, err
}

// v1Stat runs one containerd v1 controller's Stat on dir. The controllers
// join their name onto the root they are given (<root>/memory/<path>), which
// assumes /sys/fs/cgroup/<name> mounts; rooting them at the leaf itself with
// path ".." makes them read dir whatever the mount point is called
// (cpu,cpuacct) or wherever it is bind-mounted.
func v1Stat(st interface {
	Stat(string, *v1stats.Metrics) error
}, dir string) (*v1stats.Metrics, error) {
	m := &v1stats.Metrics{CPU: &v1stats.CPUStat{Throttling: &v1stats.Throttle{}, Usage: &v1stats.CPUUsage{}}}
	if err := st.Stat("..", m); err != nil {
		return nil, fmt.Errorf("reading cgroup stats in %s: %w", dir, err)
	}
	return m, nil
}

// memory adds the memory points. Working set is cAdvisor's: usage minus
// inactive file pages, clamped at 0.
func (r *round) memory() {
	c := r.c
	p, ok := c.lay.places[ctlMemory]
	if !ok {
		return
	}
	var usage, inactive, rss, cache, peak uint64
	var hasPeak bool
	var usageFile, statFile, peakFile, inactiveKey, rssKey, cacheKey string
	if p.v1 {
		usageFile, statFile, peakFile = "memory.usage_in_bytes", "memory.stat", "memory.max_usage_in_bytes"
		inactiveKey, rssKey, cacheKey = "total_inactive_file", "total_rss", "total_cache"
		if !c.exists(filepath.Join(p.dir, usageFile), "memory usage") || !c.exists(filepath.Join(p.dir, statFile), "memory stat") {
			return
		}
		// Kernels without swap accounting (or without kmem) lack these
		// files, and containerd fails on any it was not told to skip.
		var ignore []string
		for _, mod := range []string{"memsw", "kmem", "kmem.tcp"} {
			for _, f := range []string{"usage_in_bytes", "max_usage_in_bytes", "failcnt", "limit_in_bytes"} {
				if !fileExists(filepath.Join(p.dir, "memory."+mod+"."+f)) {
					ignore = append(ignore, mod)
					break
				}
			}
		}
		m, err := v1Stat(cgroup1.NewMemory(p.dir, cgroup1.IgnoreModules(ignore...)), p.dir)
		if err != nil {
			r.fail(err)
			return
		}
		usage, inactive = m.Memory.Usage.Usage, m.Memory.TotalInactiveFile
		rss, cache = m.Memory.TotalRSS, m.Memory.TotalCache
		peak, hasPeak = m.Memory.Usage.Max, true
		if m.MemoryOomControl != nil {
			// v1 counts OOM kills only; under_oom is a 0/1 state, not events.
			r.add(metrics.ContainerOOMKills, float64(m.MemoryOomControl.OomKill), metrics.UnitCount,
				src(p.dir, "memory.oom_control"))
		}
	} else {
		usageFile, statFile, peakFile = "memory.current", "memory.stat", "memory.peak"
		inactiveKey, rssKey, cacheKey = "inactive_file", "anon", "file"
		// containerd reads an absent memory.current as 0: absent means the
		// memory controller is not enabled here (or this is the root).
		if !c.exists(filepath.Join(p.dir, usageFile), "memory usage") {
			return
		}
		m, err := r.v2Stat(p)
		if err != nil {
			r.fail(err)
			return
		}
		usage, inactive = m.Memory.Usage, m.Memory.InactiveFile
		rss, cache = m.Memory.Anon, m.Memory.File
		peak, hasPeak = m.Memory.MaxUsage, fileExists(filepath.Join(p.dir, peakFile))
		r.memoryEvents(p)
	}

	ws := uint64(0)
	if usage > inactive {
		ws = usage - inactive
	}
	wsSrc := src(p.dir, usageFile, statFile+" "+inactiveKey)
	r.add(metrics.ContainerMemoryWorkingSet, metrics.MB(float64(ws)), metrics.UnitMegabytes, wsSrc)
	r.add(metrics.ContainerMemoryUsage, metrics.MB(float64(usage)), metrics.UnitMegabytes, src(p.dir, usageFile))
	r.add(metrics.ContainerMemoryRSS, metrics.MB(float64(rss)), metrics.UnitMegabytes, src(p.dir, statFile+" "+rssKey))
	r.add(metrics.ContainerMemoryCache, metrics.MB(float64(cache)), metrics.UnitMegabytes, src(p.dir, statFile+" "+cacheKey))
	if hasPeak {
		r.add(metrics.ContainerMemoryPeak, metrics.MB(float64(peak)), metrics.UnitMegabytes, src(p.dir, peakFile))
	} else {
		c.noData(filepath.Join(p.dir, peakFile), "memory peak")
	}

	lim, err := c.memoryLimit()
	r.fail(err)
	if lim.ok {
		r.add(metrics.ContainerMemoryLimit, metrics.MB(float64(lim.bytes)), metrics.UnitMegabytes, lim.setBy)
		if lim.bytes > 0 {
			r.add(metrics.ContainerMemoryWorkingSetPercent, float64(ws)/float64(lim.bytes)*100, metrics.UnitPercentage,
				wsSrc+", "+lim.setBy)
		}
	}
}

// memoryEvents adds v2's memory.events counters (cumulative, hierarchical).
// Read directly: containerd cannot tell an absent key from a zero one, and
// oom_group_kill is only written by newer kernels.
func (r *round) memoryEvents(p place) {
	path := filepath.Join(p.dir, "memory.events")
	s, found, err := readFile(path)
	if err != nil {
		r.fail(err)
		return
	}
	if !found {
		r.c.noData(path, "memory events")
		return
	}
	kv, err := parseFlatKeyed(s)
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", path, err))
		return
	}
	for _, e := range []struct{ key, name string }{
		{"oom", metrics.ContainerOOMEvents},
		{"oom_kill", metrics.ContainerOOMKills},
		{"oom_group_kill", metrics.ContainerOOMGroupKills},
	} {
		if v, ok := kv[e.key]; ok {
			r.add(e.name, float64(v), metrics.UnitCount, path+" "+e.key)
		}
	}
}

// cpuReading is one reading of the cumulative CPU counters.
type cpuReading struct {
	at          time.Time
	usageNs     uint64
	hasUsage    bool
	periods     uint64
	throttled   uint64
	throttledNs uint64
	hasThrottle bool
}

// cpu adds the CPU points. Usage and throttling are deltas against the
// previous Collect; the first Collect has only the limit.
func (r *round) cpu() {
	c := r.c
	cur := cpuReading{at: c.now()}
	var usageSrc, throttleSrc string

	cpuP, hasCPU := c.lay.places[ctlCPU]
	acctP, hasAcct := c.lay.places[ctlCPUAcct]
	switch {
	case hasAcct && acctP.v1:
		usageSrc = src(acctP.dir, "cpuacct.usage")
		if c.exists(filepath.Join(acctP.dir, "cpuacct.usage"), "cpu usage") {
			m, err := v1Stat(cgroup1.NewCpuacct(acctP.dir), acctP.dir)
			if err != nil {
				r.fail(err)
			} else {
				cur.usageNs, cur.hasUsage = m.CPU.Usage.Total, true
			}
		}
	case hasCPU && !cpuP.v1:
		usageSrc = src(cpuP.dir, "cpu.stat usage_usec")
		if c.exists(filepath.Join(cpuP.dir, "cpu.stat"), "cpu usage") {
			m, err := r.v2Stat(cpuP)
			if err != nil {
				r.fail(err)
			} else {
				cur.usageNs, cur.hasUsage = m.CPU.UsageUsec*1000, true
			}
		}
	}
	if hasCPU {
		if cpuP.v1 {
			throttleSrc = src(cpuP.dir, "cpu.stat nr_periods, nr_throttled, throttled_time")
			if c.exists(filepath.Join(cpuP.dir, "cpu.stat"), "cpu throttling") {
				m, err := v1Stat(cgroup1.NewCpu(cpuP.dir), cpuP.dir)
				if err != nil {
					r.fail(err)
				} else {
					t := m.CPU.Throttling
					cur.periods, cur.throttled, cur.throttledNs, cur.hasThrottle = t.Periods, t.ThrottledPeriods, t.ThrottledTime, true
				}
			}
		} else if c.exists(filepath.Join(cpuP.dir, "cpu.max"), "cpu controller (throttling)") {
			// cpu.stat's nr_* keys exist only where the cpu controller is
			// enabled, which cpu.max marks.
			throttleSrc = src(cpuP.dir, "cpu.stat nr_periods, nr_throttled, throttled_usec")
			m, err := r.v2Stat(cpuP)
			if err != nil {
				r.fail(err)
			} else {
				cur.periods, cur.throttled, cur.throttledNs, cur.hasThrottle = m.CPU.NrPeriods, m.CPU.NrThrottled, m.CPU.ThrottledUsec*1000, true
			}
		}
	}

	lim, err := c.cpuLimit()
	r.fail(err)
	if lim.ok {
		r.add(metrics.ContainerCPULimit, lim.cores, metrics.UnitCores, lim.setBy)
	}

	// The running totals too: Prometheus computes its own rates from them
	// (cAdvisor's container_cpu_usage_seconds_total and friends).
	if cur.hasUsage {
		r.add(metrics.ContainerCPUUsageCumulative, float64(cur.usageNs)/1e9, metrics.UnitSeconds, usageSrc)
	}
	if cur.hasThrottle {
		r.add(metrics.ContainerCPUPeriodsCumulative, float64(cur.periods), metrics.UnitCount, throttleSrc)
		r.add(metrics.ContainerCPUThrottledPeriodsCumulative, float64(cur.throttled), metrics.UnitCount, throttleSrc)
		r.add(metrics.ContainerCPUThrottledCumulative, float64(cur.throttledNs)/1e9, metrics.UnitSeconds, throttleSrc)
	}

	prev := c.prev
	c.prev = &cur
	if prev == nil {
		return
	}
	wall := cur.at.Sub(prev.at).Seconds()
	if wall <= 0 {
		return
	}
	if cur.hasUsage && prev.hasUsage && cur.usageNs >= prev.usageNs {
		cores := float64(cur.usageNs-prev.usageNs) / 1e9 / wall
		r.add(metrics.ContainerCPUUsage, cores, metrics.UnitCores, usageSrc)
		switch {
		case lim.ok && lim.cores > 0:
			r.add(metrics.ContainerCPUUtilization, cores/lim.cores*100, metrics.UnitPercentage, usageSrc+", "+lim.setBy)
		case lim.cpus > 0:
			r.add(metrics.ContainerCPUUtilization, cores/float64(lim.cpus)*100, metrics.UnitPercentage,
				usageSrc+fmt.Sprintf(", %d CPUs (no limit)", lim.cpus))
		}
	}
	if cur.hasThrottle && prev.hasThrottle && cur.periods >= prev.periods && cur.throttled >= prev.throttled && cur.throttledNs >= prev.throttledNs {
		r.add(metrics.ContainerCPUThrottledSeconds, float64(cur.throttledNs-prev.throttledNs)/1e9, metrics.UnitSeconds, throttleSrc)
		// No period ran (no quota, or idle): the share is undefined.
		if dp := cur.periods - prev.periods; dp > 0 {
			r.add(metrics.ContainerCPUThrottledPeriods, float64(cur.throttled-prev.throttled)/float64(dp)*100,
				metrics.UnitPercentage, throttleSrc)
		}
	}
}

// pressure adds PSI avg10 of the v2 leaf. v1 has no PSI; on hybrid hosts the
// unified leaf has it. The root cgroup's PSI is the node's (/proc/pressure),
// so it is left to the node scope. Read directly: containerd skips
// memory.pressure and cpu.pressure where memory.stat or cpu.stat is absent
// (a hybrid host's unified leaf), and cannot tell an absent "full" line.
func (r *round) pressure() {
	c := r.c
	p, ok := c.lay.places[ctlUnified]
	if !ok {
		return
	}
	// Every non-root cgroup has cgroup.events; the root never does.
	if !fileExists(filepath.Join(p.dir, "cgroup.events")) {
		c.noData(filepath.Join(p.dir, "cgroup.events"), "PSI: the leaf is the root cgroup, whose pressure is node-wide")
		return
	}
	for _, res := range []string{"cpu", "memory", "io"} {
		path := filepath.Join(p.dir, res+".pressure")
		s, found, err := readFile(path)
		if errors.Is(err, syscall.EOPNOTSUPP) {
			found, err = false, nil // booted with psi=0
		}
		if err != nil {
			r.fail(err)
			continue
		}
		if !found {
			c.noData(path, "PSI")
			continue
		}
		lines, err := parsePSI(s)
		if err != nil {
			r.fail(fmt.Errorf("%s: %w", path, err))
			continue
		}
		for _, kind := range []string{"some", "full"} {
			if l, ok := lines[kind]; ok {
				r.add(metrics.ContainerPressure(res, kind), l.avg10, metrics.UnitPercentage,
					path+" "+kind+" avg10")
			}
		}
	}
}

// pids adds the task count and the leaf's pids.max.
func (r *round) pids() {
	c := r.c
	p, ok := c.lay.places[ctlPids]
	if !ok || !c.exists(filepath.Join(p.dir, "pids.current"), "pids") {
		return
	}
	var cur, limit uint64
	var limited bool
	if p.v1 {
		m, err := v1Stat(cgroup1.NewPids(p.dir), p.dir)
		if err != nil {
			r.fail(err)
			return
		}
		// containerd's v1 reader turns "max" into 0.
		cur, limit, limited = m.Pids.Current, m.Pids.Limit, m.Pids.Limit > 0
	} else {
		m, err := r.v2Stat(p)
		if err != nil {
			r.fail(err)
			return
		}
		cur, limit = m.Pids.Current, m.Pids.Limit
		limited = limit != math.MaxUint64 && fileExists(filepath.Join(p.dir, "pids.max"))
	}
	r.add(metrics.ContainerPIDs, float64(cur), metrics.UnitCount, src(p.dir, "pids.current"))
	if limited {
		r.add(metrics.ContainerPIDsLimit, float64(limit), metrics.UnitCount, src(p.dir, "pids.max"))
	}
}
