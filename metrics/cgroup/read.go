package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/bridge-dev/bridge/metrics"
)

// Keys read from the flat-keyed stat files: only these are kept (parseStatKeys).
var (
	v1MemoryStatKeys = []string{"total_inactive_file", "total_rss", "total_cache", "hierarchical_memory_limit"}
	v2MemoryStatKeys = []string{"inactive_file", "anon", "file"}
	v1CPUStatKeys    = []string{"nr_periods", "nr_throttled", "throttled_time"}
	v2CPUStatKeys    = []string{"usage_usec", "nr_periods", "nr_throttled", "throttled_usec"}
)

// readStat reads the keys of a flat-keyed stat file into vals. A missing file
// is found == false with vals zero.
func (c *Collector) readStat(path string, keys []string, vals []uint64) (found bool, err error) {
	clear(vals)
	s, found, err := c.files.read(path)
	if err != nil || !found {
		return false, err
	}
	if err := parseStatKeys(s, keys, vals); err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// readV1Uint reads a v1 single-value file; missing is an error, as in
// containerd's v1 Stat, since the caller saw the controller's other files.
func (c *Collector) readV1Uint(path string) (uint64, error) {
	s, found, err := c.files.read(path)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("reading %s: %w", path, fs.ErrNotExist)
	}
	v, err := parseV1Uint(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// required reads a file the reading cannot do without: an error fails the
// round, an absent file is no data (reported once); either way ok is false.
func (r *round) required(path, what string) (s string, ok bool) {
	s, found, err := r.c.files.read(path)
	if err != nil {
		r.fail(err)
		return "", false
	}
	if !found {
		r.c.noData(path, what)
		return "", false
	}
	return s, true
}

// flatKeyed reads a required "key value" file (memory.events,
// memory.oom_control, pids.events): the map says which keys the kernel wrote.
func (r *round) flatKeyed(path, what string) (map[string]uint64, bool) {
	s, ok := r.required(path, what)
	if !ok {
		return nil, false
	}
	kv, err := parseFlatKeyed(s)
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", path, err))
		return nil, false
	}
	return kv, true
}

// The files of the kernel's memory high-water mark (PeakFile).
const (
	v1PeakFile = "memory.max_usage_in_bytes"
	v2PeakFile = "memory.peak"
)

// PeakFile is the file container_memory_peak_megabytes, the kernel's
// memory high-water mark, is read from: memory.max_usage_in_bytes where
// the memory controller is v1 (hybrid hosts too), memory.peak where it is
// v2; "" without a memory controller. It reads no file.
func (c *Collector) PeakFile() string {
	p, ok := c.lay.places[ctlMemory]
	switch {
	case !ok:
		return ""
	case p.v1:
		return v1PeakFile
	}
	return v2PeakFile
}

// memory adds the memory points. Working set is cAdvisor's: usage minus
// inactive file pages, clamped at 0. A root memory cgroup's are the
// host's: none.
func (r *round) memory() {
	c := r.c
	p, ok := c.lay.places[ctlMemory]
	if !ok || p.root {
		return
	}
	var usage, inactive, rss, cache, peak uint64
	var hasPeak, peakFailed bool
	var usageFile, statFile, peakFile, inactiveKey, rssKey, cacheKey string
	var vals [4]uint64
	if p.v1 {
		usageFile, statFile, peakFile = "memory.usage_in_bytes", "memory.stat", v1PeakFile
		inactiveKey, rssKey, cacheKey = "total_inactive_file", "total_rss", "total_cache"
		path := filepath.Join(p.dir, usageFile)
		s, ok := r.required(path, "memory usage")
		if !ok {
			return
		}
		var err error
		var found bool
		if usage, err = parseV1Uint(s); err != nil {
			r.fail(fmt.Errorf("%s: %w", path, err))
			return
		}
		path = filepath.Join(p.dir, statFile)
		found, err = c.readStat(path, v1MemoryStatKeys, vals[:])
		if err != nil {
			r.fail(err)
			return
		}
		if !found {
			c.noData(path, "memory stat")
			return
		}
		if peak, err = c.readV1Uint(filepath.Join(p.dir, peakFile)); err != nil {
			r.fail(err)
			return
		}
		inactive, rss, cache, hasPeak = vals[0], vals[1], vals[2], true
		r.v1Limit = &vals[3]
		r.v1OOMKill(p)
		r.v1Failcnt(p)
	} else {
		usageFile, statFile, peakFile = "memory.current", "memory.stat", v2PeakFile
		inactiveKey, rssKey, cacheKey = "inactive_file", "anon", "file"
		// An absent memory.current means the memory controller is not
		// enabled here (or this is the root).
		path := filepath.Join(p.dir, usageFile)
		s, ok := r.required(path, "memory usage")
		if !ok {
			return
		}
		var err error
		if usage, err = parseV2Uint(s); err != nil {
			r.fail(fmt.Errorf("%s: %w", path, err))
			return
		}
		// An absent memory.stat reads as zeros, as containerd reads it.
		if _, err := c.readStat(filepath.Join(p.dir, statFile), v2MemoryStatKeys, vals[:3]); err != nil {
			r.fail(err)
			return
		}
		inactive, rss, cache = vals[0], vals[1], vals[2]
		// An unreadable peak is no peak point; the others still count.
		// Through the descriptor reset for bridge, where there is one.
		path = filepath.Join(p.dir, peakFile)
		var reset bool
		if s, reset, err = c.readPeak(); reset {
			hasPeak = err == nil
		} else {
			s, hasPeak, err = c.files.read(path)
		}
		if err != nil {
			r.fail(err)
			peakFailed = true
		}
		if hasPeak {
			if peak, err = parseV2Uint(s); err != nil {
				r.fail(fmt.Errorf("%s: %w", path, err))
				hasPeak, peakFailed = false, true
			}
		}
		r.memoryEvents(p)
	}

	ws := uint64(0)
	if usage > inactive {
		ws = usage - inactive
	}
	wsSrc := r.source(p.dir, usageFile, ", ", statFile, " ", inactiveKey)
	r.add(metrics.ContainerMemoryWorkingSet, metrics.MB(float64(ws)), wsSrc)
	r.add(metrics.ContainerMemoryUsage, metrics.MB(float64(usage)), r.source(p.dir, usageFile))
	r.add(metrics.ContainerMemoryRSS, metrics.MB(float64(rss)), r.source(p.dir, statFile, " ", rssKey))
	r.add(metrics.ContainerMemoryCache, metrics.MB(float64(cache)), r.source(p.dir, statFile, " ", cacheKey))
	if hasPeak {
		r.add(metrics.ContainerMemoryPeak, metrics.MB(float64(peak)), r.source(p.dir, peakFile))
	} else if !peakFailed {
		c.noData(filepath.Join(p.dir, peakFile), "memory peak")
	}

	lim, err := c.memoryLimit(r.v1Limit)
	r.fail(err)
	if lim.ok {
		r.add(metrics.ContainerMemoryLimit, metrics.MB(float64(lim.bytes)), lim.setBy)
		if lim.bytes > 0 {
			// Named after its numerator: usage (page cache included) is a
			// different series, and a share of it would read much higher.
			r.add(metrics.ContainerMemoryWorkingSetPercent, float64(ws)/float64(lim.bytes)*100, r.join(wsSrc, ", ", lim.setBy))
		}
	}
}

// v1OOMKill adds v1's oom_kill counter from memory.oom_control. Read
// directly: kernels before 4.13 do not write the key, and containerd reads
// the missing key as 0, which would claim "no OOM kills" from no data.
func (r *round) v1OOMKill(p place) {
	path := filepath.Join(p.dir, "memory.oom_control")
	kv, ok := r.flatKeyed(path, "memory OOM control")
	if !ok {
		return
	}
	// v1 counts OOM kills only; under_oom is a 0/1 state, not events.
	if v, ok := kv["oom_kill"]; ok {
		r.add(metrics.ContainerOOMKills, float64(v), r.join(path, " oom_kill"))
	} else {
		r.c.noData(path+" oom_kill", "OOM kill counter (kernel before 4.13)")
	}
}

// v1Failcnt adds v1's memory.failcnt as the count of times the usage
// reached the limit: the kernel counts a failed charge there
// (page_counter_try_charge) where v2 counts memory.events max for the
// same failure, and reclaim runs after either. An absent file is no data.
func (r *round) v1Failcnt(p place) {
	path := filepath.Join(p.dir, "memory.failcnt")
	s, found, err := r.c.files.read(path)
	if err != nil {
		r.fail(err)
		return
	}
	if !found {
		r.c.noData(path, "memory limit hits")
		return
	}
	v, err := parseV1Uint(s)
	if err != nil {
		r.fail(fmt.Errorf("%s: %w", path, err))
		return
	}
	r.add(metrics.ContainerMemoryMaxEvents, float64(v), path)
}

// memoryEvents adds v2's memory.events counters (cumulative, hierarchical).
// Read directly: containerd cannot tell an absent key from a zero one, and
// oom_group_kill is only written by newer kernels.
func (r *round) memoryEvents(p place) {
	path := filepath.Join(p.dir, "memory.events")
	kv, ok := r.flatKeyed(path, "memory events")
	if !ok {
		return
	}
	for _, e := range []struct {
		key  string
		desc *metrics.Desc
	}{
		// high: usage went over memory.high and the cgroup was throttled
		// into reclaim; max: it reached memory.max (reclaim, maybe OOM).
		{"high", metrics.ContainerMemoryHighEvents},
		{"max", metrics.ContainerMemoryMaxEvents},
		{"oom", metrics.ContainerOOMEvents},
		{"oom_kill", metrics.ContainerOOMKills},
		{"oom_group_kill", metrics.ContainerOOMGroupKills},
	} {
		if v, ok := kv[e.key]; ok {
			r.add(e.desc, float64(v), r.join(path, " ", e.key))
		}
	}
}

// cpuReading is one reading of the cumulative CPU counters, and the files
// they came from.
type cpuReading struct {
	at          time.Time
	usageNs     uint64
	hasUsage    bool
	periods     uint64
	throttled   uint64
	throttledNs uint64
	hasThrottle bool
	usageSrc    string
	throttleSrc string
}

// cpu adds the CPU points. Usage and throttling are deltas against the
// previous Collect; the first Collect has only the limit.
func (r *round) cpu() {
	c := r.c
	cur := r.cpuCounters()
	lim, err := c.cpuLimit()
	r.fail(err)
	if lim.ok && !c.limitAtRoot() {
		r.add(metrics.ContainerCPULimit, lim.cores, lim.setBy)
	}
	splitBy := c.cpuSplit()
	if splitBy != "" {
		// Usage and limit belong to different cgroups: marked on every
		// sample so that nothing downstream divides one by the other.
		r.add(metrics.ContainerCPUUsageLimitSplit, 1, splitBy)
	}
	// Cumulative counters: their meaning does not depend on the interval
	// (which switches between --interval and --fast-interval).
	if cur.hasUsage {
		r.add(metrics.ContainerCPUUsageSecondsTotal, float64(cur.usageNs)/1e9, cur.usageSrc)
	}
	if cur.hasThrottle {
		r.add(metrics.ContainerCPUPeriodsTotal, float64(cur.periods), cur.throttleSrc)
		r.add(metrics.ContainerCPUThrottledPeriodsTotal, float64(cur.throttled), cur.throttleSrc)
		r.add(metrics.ContainerCPUThrottledSecondsTotal, float64(cur.throttledNs)/1e9, cur.throttleSrc)
	}
	prev := c.prev
	c.prev = &cur
	if prev != nil {
		r.cpuRates(prev, &cur, lim, splitBy != "")
	}
}

// cpuCounters reads the cumulative CPU counters: the usage from v1's
// cpuacct.usage or v2's cpu.stat, the throttling from cpu.stat (v2's only
// where the cpu controller is enabled); none from a root cgroup, whose
// counters are the host's.
func (r *round) cpuCounters() cpuReading {
	c := r.c
	cur := cpuReading{at: c.now()}
	cpuP, hasCPU := c.lay.places[ctlCPU]
	acctP, hasAcct := c.lay.places[ctlCPUAcct]
	hasCPU = hasCPU && !cpuP.root
	v2 := hasCPU && !cpuP.v1
	var st v2CPUStat
	if v2 {
		st = r.readV2CPUStat(cpuP)
	}
	switch {
	case hasAcct && acctP.v1:
		if !acctP.root {
			r.v1CPUUsage(acctP, &cur)
		}
	case v2:
		r.v2CPUUsage(cpuP, st, &cur)
	}
	switch {
	case hasCPU && cpuP.v1:
		r.v1CPUThrottle(cpuP, &cur)
	case v2:
		r.v2CPUThrottle(cpuP, st, &cur)
	}
	return cur
}

// v2CPUStat is v2's cpu.stat, which holds both the usage and the
// throttling: read once a round.
type v2CPUStat struct {
	path  string
	v     [4]uint64 // v2CPUStatKeys
	found bool
	err   error // reported when read
}

func (r *round) readV2CPUStat(p place) v2CPUStat {
	st := v2CPUStat{path: filepath.Join(p.dir, "cpu.stat")}
	st.found, st.err = r.c.readStat(st.path, v2CPUStatKeys, st.v[:])
	r.fail(st.err)
	return st
}

func (r *round) v1CPUUsage(p place, cur *cpuReading) {
	cur.usageSrc = r.source(p.dir, "cpuacct.usage")
	path := filepath.Join(p.dir, "cpuacct.usage")
	s, ok := r.required(path, "cpu usage")
	if !ok {
		return
	}
	if v, err := parseV1Uint(s); err != nil {
		r.fail(fmt.Errorf("%s: %w", path, err))
	} else {
		cur.usageNs, cur.hasUsage = v, true
	}
}

func (r *round) v2CPUUsage(p place, st v2CPUStat, cur *cpuReading) {
	cur.usageSrc = r.source(p.dir, "cpu.stat usage_usec")
	switch {
	case st.err != nil: // reported when read
	case !st.found:
		r.c.noData(st.path, "cpu usage")
	default:
		cur.usageNs, cur.hasUsage = st.v[0]*1000, true
	}
}

func (r *round) v1CPUThrottle(p place, cur *cpuReading) {
	cur.throttleSrc = r.source(p.dir, "cpu.stat nr_periods, nr_throttled, throttled_time")
	path := filepath.Join(p.dir, "cpu.stat")
	var v [3]uint64
	found, err := r.c.readStat(path, v1CPUStatKeys, v[:])
	switch {
	case err != nil:
		r.fail(err)
	case !found:
		r.c.noData(path, "cpu throttling")
	default:
		cur.periods, cur.throttled, cur.throttledNs, cur.hasThrottle = v[0], v[1], v[2], true
	}
}

// v2CPUThrottle takes the throttling from cpu.stat: its nr_* keys exist
// only where the cpu controller is enabled, which cpu.max marks.
func (r *round) v2CPUThrottle(p place, st v2CPUStat, cur *cpuReading) {
	if _, ok := r.required(filepath.Join(p.dir, "cpu.max"), "cpu controller (throttling)"); !ok {
		return
	}
	cur.throttleSrc = r.source(p.dir, "cpu.stat nr_periods, nr_throttled, throttled_usec")
	// An absent cpu.stat reads as zeros, as containerd reads it.
	if st.err == nil {
		cur.periods, cur.throttled, cur.throttledNs, cur.hasThrottle = st.v[1], st.v[2], st.v[3]*1000, true
	}
}

// cpuRates adds the rates over the interval since prev: the cores used
// (and their share of the limit, or of the CPUs, unless split), and the
// share of periods throttled.
func (r *round) cpuRates(prev, cur *cpuReading, lim cpuLimit, split bool) {
	wall := cur.at.Sub(prev.at).Seconds()
	if wall <= 0 {
		return
	}
	if cur.hasUsage && prev.hasUsage && cur.usageNs >= prev.usageNs {
		cores := float64(cur.usageNs-prev.usageNs) / 1e9 / wall
		// The kernel charges a running task's time at ticks and switches,
		// so each reading can lag by up to a tick per CPU: over a short
		// window (the sample taken as the child exits) the rate can pass
		// what the cgroup's CPUs can do (2.17 cores on 2 CPUs over 50 ms).
		// More than every CPU busy is impossible: capped there.
		if lim.cpus > 0 {
			cores = min(cores, float64(lim.cpus))
		}
		r.add(metrics.ContainerCPUUsage, cores, cur.usageSrc)
		switch {
		case split:
		case lim.ok && lim.cores > 0:
			r.add(metrics.ContainerCPUUtilization, cores/lim.cores*100, r.join(cur.usageSrc, ", ", lim.setBy))
		case lim.cpus > 0:
			r.add(metrics.ContainerCPUUtilization, cores/float64(lim.cpus)*100,
				r.join(cur.usageSrc, ", ", strconv.Itoa(lim.cpus), " CPUs (no limit)"))
		}
	}
	if cur.hasThrottle && prev.hasThrottle && cur.periods >= prev.periods && cur.throttled >= prev.throttled && cur.throttledNs >= prev.throttledNs {
		// Shares of the interval, so independent of its length. No period
		// ran (no quota, or idle): the share is undefined.
		if dp := cur.periods - prev.periods; dp > 0 {
			r.add(metrics.ContainerCPUThrottledPeriods, float64(cur.throttled-prev.throttled)/float64(dp)*100, cur.throttleSrc)
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
	if _, found, err := c.files.read(filepath.Join(p.dir, "cgroup.events")); err != nil || !found {
		c.noData(filepath.Join(p.dir, "cgroup.events"), "PSI: the leaf is the root cgroup, whose pressure is node-wide")
		return
	}
	for _, ps := range metrics.ContainerPressure {
		path := filepath.Join(p.dir, ps.Resource+".pressure")
		s, found, err := c.files.read(path)
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
		if l, ok := lines["some"]; ok {
			r.add(ps.Some, l.avg10, r.join(path, " some avg10"))
		}
		if l, ok := lines["full"]; ok {
			r.add(ps.Full, l.avg10, r.join(path, " full avg10"))
		}
	}
}

// pids adds the task count and the leaf's pids.max; none from a root
// cgroup, whose tasks are the host's.
func (r *round) pids() {
	c := r.c
	p, ok := c.lay.places[ctlPids]
	if !ok || p.root {
		return
	}
	path := filepath.Join(p.dir, "pids.current")
	s, ok := r.required(path, "pids")
	if !ok {
		return
	}
	var cur, limit uint64
	var err error
	var limited bool
	if p.v1 {
		if cur, err = parseV1Uint(s); err != nil {
			r.fail(fmt.Errorf("%s: %w", path, err))
			return
		}
		// "max" (no limit) reads as 0, as in containerd's v1 reader.
		if limit, err = c.readV1Uint(filepath.Join(p.dir, "pids.max")); err != nil {
			r.fail(err)
			return
		}
		limited = limit > 0
	} else {
		if cur, err = parseV2Uint(s); err != nil {
			r.fail(fmt.Errorf("%s: %w", path, err))
			return
		}
		// An unreadable limit is no limit point; the count still counts.
		maxPath := filepath.Join(p.dir, "pids.max")
		s, found, err := c.files.read(maxPath)
		r.fail(err)
		if found {
			if limit, limited, err = parseMemoryMax(s); err != nil {
				r.fail(fmt.Errorf("%s: %w", maxPath, err))
			}
		}
	}
	r.add(metrics.ContainerPIDs, float64(cur), r.source(p.dir, "pids.current"))
	if limited {
		r.add(metrics.ContainerPIDsLimit, float64(limit), r.source(p.dir, "pids.max"))
	}
	// pids.events max counts forks refused at pids.max (cumulative, v1 and
	// v2 alike); containerd does not read it.
	path = filepath.Join(p.dir, "pids.events")
	kv, ok := r.flatKeyed(path, "pids events")
	if !ok {
		return
	}
	if v, ok := kv["max"]; ok {
		r.add(metrics.ContainerPIDsMaxEvents, float64(v), r.join(path, " max"))
	}
}
