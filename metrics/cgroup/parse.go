package cgroup

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// ErrFormat is wrapped by every parse error: the file exists but its content
// is not what the kernel writes.
var ErrFormat = errors.New("unexpected cgroup file format")

// v1NoLimit is where v1 limits start to mean "unlimited": the kernel writes
// PAGE_COUNTER_MAX rounded to pages (9223372036854771712 with 4 KiB pages),
// and cAdvisor/kubelet treat anything above 1<<62 as no limit.
const v1NoLimit = uint64(1) << 62

// parseMemoryMax parses a v2 memory.max (or pids.max): a number of bytes or
// "max". ok is false for "max".
func parseMemoryMax(s string) (v uint64, ok bool, err error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, false, nil
	}
	v, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %q is neither a number nor \"max\"", ErrFormat, s)
	}
	return v, true, nil
}

// parseV1Limit parses a v1 memory.limit_in_bytes. ok is false when the value
// means no limit.
func parseV1Limit(s string) (v uint64, ok bool, err error) {
	v, err = strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %q is not a number", ErrFormat, strings.TrimSpace(s))
	}
	if v >= v1NoLimit {
		return 0, false, nil
	}
	return v, true, nil
}

// parseCPUMax parses a v2 cpu.max, "$QUOTA $PERIOD" in microseconds with
// QUOTA "max" for none. ok is false without a quota.
func parseCPUMax(s string) (cores float64, ok bool, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, false, fmt.Errorf("%w: %q is not \"$QUOTA $PERIOD\"", ErrFormat, strings.TrimSpace(s))
	}
	period, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || period == 0 {
		return 0, false, fmt.Errorf("%w: period %q is not a positive number", ErrFormat, f[1])
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	quota, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: quota %q is neither a number nor \"max\"", ErrFormat, f[0])
	}
	return float64(quota) / float64(period), true, nil
}

// parseV1Quota parses v1 cpu.cfs_quota_us and cpu.cfs_period_us; a quota of
// -1 (any negative) is no limit.
func parseV1Quota(quota, period string) (cores float64, ok bool, err error) {
	q, err := strconv.ParseInt(strings.TrimSpace(quota), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: quota %q is not a number", ErrFormat, strings.TrimSpace(quota))
	}
	if q < 0 {
		return 0, false, nil
	}
	p, err := strconv.ParseUint(strings.TrimSpace(period), 10, 64)
	if err != nil || p == 0 {
		return 0, false, fmt.Errorf("%w: period %q is not a positive number", ErrFormat, strings.TrimSpace(period))
	}
	return float64(q) / float64(p), true, nil
}

// maxCPUs bounds CPU ids and counts in a cpuset list: Linux's NR_CPUS is at
// most 8192; anything far above is not a list the kernel wrote.
const maxCPUs = 1 << 16

// parseCPUList counts the CPUs of a cpuset list such as "0-3,8,10-11".
func parseCPUList(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("%w: %q in cpu list %q", ErrFormat, part, s)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			if err != nil || b < a {
				return 0, fmt.Errorf("%w: %q in cpu list %q", ErrFormat, part, s)
			}
		}
		if b >= maxCPUs {
			return 0, fmt.Errorf("%w: CPU %d in cpu list %q is beyond any kernel's CPU count", ErrFormat, b, s)
		}
		n += b - a + 1
		if n > maxCPUs {
			return 0, fmt.Errorf("%w: cpu list %q names more than %d CPUs", ErrFormat, s, maxCPUs)
		}
	}
	return n, nil
}

// parseFlatKeyed parses "key value" lines (memory.events, memory.oom_control).
// The map says which keys the kernel wrote: absent and zero differ.
func parseFlatKeyed(s string) (map[string]uint64, error) {
	out := map[string]uint64{}
	// Split, not a Scanner: a line of any length is a format error, not a
	// buffer one.
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: line %q is not \"key value\"", ErrFormat, line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: value in line %q", ErrFormat, line)
		}
		out[f[0]] = v
	}
	return out, nil
}

// psiLine is one line of a PSI file ("some avg10=0.00 avg60=0.00 avg300=0.00
// total=0"); only avg10 is kept.
type psiLine struct {
	avg10 float64
}

// parsePSI parses a cgroup v2 *.pressure file: "some" and "full" lines (cpu
// has "full" only since Linux 5.13). The map holds the lines present.
func parsePSI(s string) (map[string]psiLine, error) {
	out := map[string]psiLine{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] != "some" && f[0] != "full" {
			return nil, fmt.Errorf("%w: PSI line %q starts with neither some nor full", ErrFormat, line)
		}
		found := false
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("%w: PSI field %q in line %q", ErrFormat, kv, line)
			}
			if k != "avg10" {
				continue
			}
			x, err := strconv.ParseFloat(v, 64)
			// A share of time: ParseFloat also takes NaN, Inf and negatives.
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return nil, fmt.Errorf("%w: PSI avg10 %q in line %q", ErrFormat, v, line)
			}
			out[f[0]] = psiLine{avg10: x}
			found = true
		}
		if !found {
			return nil, fmt.Errorf("%w: PSI line %q has no avg10", ErrFormat, line)
		}
	}
	return out, nil
}

// parseStatKeys reads the values of keys from a flat-keyed stat file
// (memory.stat, cpu.stat) into vals (len(keys)), as containerd's Stat does:
// every line must be "key value" (else ErrFormat), a key absent reads as 0,
// a repeated key's last value counts, and a negative value reads as 0. Only
// the keys asked for are kept: no map, no allocation.
func parseStatKeys(s string, keys []string, vals []uint64) error {
	clear(vals)
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		i := strings.IndexFunc(line, unicode.IsSpace)
		if i < 0 {
			return fmt.Errorf("%w: line %q is not \"key value\"", ErrFormat, line)
		}
		key, val := line[:i], strings.TrimSpace(line[i:])
		if strings.IndexFunc(val, unicode.IsSpace) >= 0 {
			return fmt.Errorf("%w: line %q is not \"key value\"", ErrFormat, line)
		}
		for k, want := range keys {
			if key != want {
				continue
			}
			v, err := parseKernelUint(val)
			if err != nil {
				return fmt.Errorf("%w: value in line %q", ErrFormat, line)
			}
			vals[k] = v
		}
	}
	return nil
}

// parseKernelUint parses a counter as containerd does: an unsigned decimal,
// or any negative decimal, which reads as 0.
func parseKernelUint(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err == nil {
		return v, nil
	}
	if n, ierr := strconv.ParseInt(s, 10, 64); (ierr == nil || errors.Is(ierr, strconv.ErrRange)) && n < 0 {
		return 0, nil
	}
	return 0, fmt.Errorf("%w: %q is not a number", ErrFormat, s)
}

// parseV1Uint parses a v1 single-value file (memory.usage_in_bytes,
// cpuacct.usage, pids.current, pids.max) as containerd's v1 reader does:
// "max" reads as 0.
func parseV1Uint(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	return parseKernelUint(s)
}

// parseV2Uint parses a v2 single-value count (memory.current,
// memory.peak, pids.current). What is not a number is an error, never 0:
// containerd's v2 reader reads it as 0, which a chart shows as a
// measurement. A limit that may say "max" is parseMemoryMax's.
func parseV2Uint(s string) (uint64, error) {
	return parseKernelUint(strings.TrimSpace(s))
}

// countCPULines counts the "cpuN" lines of /proc/stat: the online CPUs.
func countCPULines(s string) int {
	n := 0
	for line := range strings.Lines(s) {
		if len(line) > 3 && line[:3] == "cpu" && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}
