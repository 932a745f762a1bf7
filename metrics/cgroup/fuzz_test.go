package cgroup

import (
	"bufio"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The parsers read files that a container runtime or an odd kernel may
// write: whatever the bytes, they return a value or an ErrFormat, never
// panic, and never a value the kernel could not mean.

func FuzzParseMemoryMax(f *testing.F) {
	for _, s := range []string{"max\n", "536870912\n", "0", "", "-1", "18446744073709551615", "1e9", " max "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _, err := parseMemoryMax(s)
		checkErr(t, err)
		_, _, err = parseV1Limit(s)
		checkErr(t, err)
	})
}

func FuzzParseCPUMax(f *testing.F) {
	for _, s := range []string{"max 100000\n", "50000 100000\n", "50000 0", "max", "", "1 2 3", "-5 100", "18446744073709551615 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cores, ok, err := parseCPUMax(s)
		checkErr(t, err)
		if ok && (cores < 0 || math.IsNaN(cores) || math.IsInf(cores, 0)) {
			t.Errorf("parseCPUMax(%q) = %v cores", s, cores)
		}
	})
}

func FuzzParseV1Quota(f *testing.F) {
	for _, s := range [][2]string{{"-1\n", "100000\n"}, {"50000", "100000"}, {"50000", "0"}, {"x", "1"}, {"9223372036854775807", "1"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, quota, period string) {
		cores, ok, err := parseV1Quota(quota, period)
		checkErr(t, err)
		if ok && (cores < 0 || math.IsNaN(cores) || math.IsInf(cores, 0)) {
			t.Errorf("parseV1Quota(%q, %q) = %v cores", quota, period, cores)
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8,10-11\n", "0", "", "3-1", "0-9223372036854775807", "-1", "1,,2", "0-4095"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseCPUList(s)
		checkErr(t, err)
		if n < 0 || n > maxCPUs {
			t.Errorf("parseCPUList(%q) = %d CPUs", s, n)
		}
	})
}

func FuzzParseFlatKeyed(f *testing.F) {
	for _, s := range []string{"low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n", "oom_kill_disable 0\nunder_oom 0\n", "", "a", "a b c", "a -1", "\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := parseFlatKeyed(s)
		checkErr(t, err)
	})
}

func FuzzParsePSI(f *testing.F) {
	for _, s := range []string{
		"some avg10=1.50 avg60=0.00 avg300=0.00 total=12\nfull avg10=0.75 avg60=0.00 avg300=0.00 total=6\n",
		"some avg10=0.00", "full", "some avg10=NaN", "some avg10=1e400", "other avg10=1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := parsePSI(s)
		checkErr(t, err)
		for k, l := range lines {
			if math.IsNaN(l.avg10) || math.IsInf(l.avg10, 0) || l.avg10 < 0 {
				t.Errorf("parsePSI(%q)[%s] avg10 = %v", s, k, l.avg10)
			}
		}
	})
}

// FuzzParseStatKeys holds parseStatKeys to containerd's reading of a
// flat-keyed stat file (a bufio line scan, strings.Fields, a map), which it
// replaced: same values, and an error exactly where containerd failed, but
// for one difference on purpose: a bad value of a key that is not read is
// not an error (containerd failed the whole file).
func FuzzParseStatKeys(f *testing.F) {
	for _, s := range []string{
		"cache 4096\nrss 8192\ntotal_inactive_file 1024\ntotal_rss 2\ntotal_cache 3\nhierarchical_memory_limit 9223372036854771712\n",
		"usage_usec 5000000\nnr_periods 100\nnr_throttled 10\nthrottled_usec 200000\n",
		"", "\n", "a 1\n\n", "a", "a b c", "anon -1", "anon -99999999999999999999", "anon 99999999999999999999",
		"anon 1\r\nfile 2", "anon\t 3 \n", "anon 1\nanon 2\n", "anon\u00a05", "-0 -0",
	} {
		f.Add(s)
	}
	keys := []string{"anon", "file", "total_rss", "nr_periods", "hierarchical_memory_limit"}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 60000 {
			return // past bufio.Scanner's line limit, where containerd failed on any file
		}
		vals := make([]uint64, len(keys))
		err := parseStatKeys(s, keys, vals)
		checkErr(t, err)
		want, werr := containerdStat(s, keys)
		if (err != nil) != (werr != nil) {
			t.Fatalf("parseStatKeys(%q) err = %v, containerd's %v", s, err, werr)
		}
		if err != nil {
			return
		}
		for i, k := range keys {
			if vals[i] != want[k] {
				t.Errorf("parseStatKeys(%q)[%s] = %d, containerd's %d", s, k, vals[i], want[k])
			}
		}
	})
}

// containerdStat is containerd/cgroups v3's readKVStatsFile and parseKV,
// checking the values of keys only.
func containerdStat(s string, keys []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) != 2 {
			return nil, errors.New("invalid format")
		}
		v, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil {
			n, ierr := strconv.ParseInt(parts[1], 10, 64)
			switch {
			case ierr == nil && n < 0:
				v = 0
			case ierr != nil && ierr.(*strconv.NumError).Err == strconv.ErrRange && n < 0:
				v = 0
			case !slices.Contains(keys, parts[0]):
				continue
			default:
				return nil, err
			}
		}
		out[parts[0]] = v
	}
	return out, sc.Err()
}

func FuzzParseCgroupUint(f *testing.F) {
	for _, s := range []string{"0\n", "max\n", "123456789\n", "-1", "", "18446744073709551616", " 7 ", "1e3", "maxx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v1, err := parseV1Uint(s)
		checkErr(t, err)
		v2, err2 := parseV2Uint(s)
		checkErr(t, err2)
		isMax := strings.TrimSpace(s) == "max"
		if err == nil && !isMax && (err2 != nil || v1 != v2) {
			t.Errorf("parseV1Uint(%q) = %d, parseV2Uint = %d, %v", s, v1, v2, err2)
		}
		if (err != nil || isMax) && err2 == nil {
			t.Errorf("parseV2Uint(%q) = %d, want an error: a count that is not a number is not 0", s, v2)
		}
		cpus := countCPULines(s)
		if cpus < 0 || cpus > strings.Count(s, "cpu") {
			t.Errorf("countCPULines(%q) = %d", s, cpus)
		}
	})
}

func FuzzStripRoot(f *testing.F) {
	for _, s := range [][2]string{{"/kubepods/pod1/ctr", "/"}, {"/docker/abc", "/docker/abc"}, {"/../x", "/"}, {"x", "/"}, {"/a/b", "/a"}, {"/ab", "/a"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, cgPath, mountRoot string) {
		rel, _ := stripRoot(cgPath, mountRoot)
		if !strings.HasPrefix(rel, "/") || strings.Contains(rel, "/../") || strings.HasSuffix(rel, "/..") {
			t.Errorf("stripRoot(%q, %q) = %q escapes the mount", cgPath, mountRoot, rel)
		}
	})
}

func checkErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrFormat) {
		t.Errorf("error %v does not wrap ErrFormat", err)
	}
}
