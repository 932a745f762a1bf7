package cgroup

import (
	"errors"
	"math"
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
