package cgroup

import (
	"errors"
	"testing"
)

func TestParseLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parse   func(string) (uint64, bool, error)
		in      string
		want    uint64
		limited bool
		bad     bool
	}{
		{"v2 max", parseMemoryMax, "max\n", 0, false, false},
		{"v2 bytes", parseMemoryMax, "268435456\n", 268435456, true, false},
		{"v2 zero", parseMemoryMax, "0\n", 0, true, false},
		{"v2 garbage", parseMemoryMax, "-1\n", 0, false, true},
		{"v1 page-rounded max", parseV1Limit, "9223372036854771712\n", 0, false, false},
		{"v1 just under 1<<62", parseV1Limit, "4611686018427387903\n", 4611686018427387903, true, false},
		{"v1 1<<62", parseV1Limit, "4611686018427387904\n", 0, false, false},
		{"v1 bytes", parseV1Limit, "268435456\n", 268435456, true, false},
		{"v1 empty", parseV1Limit, "\n", 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok, err := tc.parse(tc.in)
			if tc.bad {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("err = %v, want ErrFormat", err)
				}
				return
			}
			if err != nil || v != tc.want || ok != tc.limited {
				t.Errorf("= %d, %v, %v; want %d, %v", v, ok, err, tc.want, tc.limited)
			}
		})
	}
}

func TestParseCPUMax(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    float64
		limited bool
		bad     bool
	}{
		{in: "max 100000\n"},
		{in: "50000 100000\n", want: 0.5, limited: true},
		{in: "250000 100000\n", want: 2.5, limited: true},
		{in: "1000 1000\n", want: 1, limited: true},
		{in: "max\n", bad: true},
		{in: "50000 0\n", bad: true},
		{in: "x 100000\n", bad: true},
	} {
		got, ok, err := parseCPUMax(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrFormat) {
				t.Errorf("%q: err = %v, want ErrFormat", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want || ok != tc.limited {
			t.Errorf("%q = %v, %v, %v; want %v, %v", tc.in, got, ok, err, tc.want, tc.limited)
		}
	}
}

func TestParseV1Quota(t *testing.T) {
	for _, tc := range []struct {
		quota, period string
		want          float64
		limited, bad  bool
	}{
		{quota: "-1\n", period: "100000\n"},
		{quota: "50000\n", period: "100000\n", want: 0.5, limited: true},
		{quota: "200000\n", period: "50000\n", want: 4, limited: true},
		{quota: "50000\n", period: "0\n", bad: true},
		{quota: "\n", period: "100000\n", bad: true},
	} {
		got, ok, err := parseV1Quota(tc.quota, tc.period)
		if tc.bad {
			if !errors.Is(err, ErrFormat) {
				t.Errorf("%q/%q: err = %v, want ErrFormat", tc.quota, tc.period, err)
			}
			continue
		}
		if err != nil || got != tc.want || ok != tc.limited {
			t.Errorf("%q/%q = %v, %v, %v; want %v, %v", tc.quota, tc.period, got, ok, err, tc.want, tc.limited)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]int{
		"0\n": 1, "0-7\n": 8, "0-3,8,10-11\n": 7, "\n": 0, "5-5": 1,
	} {
		if got, err := parseCPUList(in); err != nil || got != want {
			t.Errorf("%q = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "3-1", "1,,2", "-1"} {
		if _, err := parseCPUList(in); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: err = %v, want ErrFormat", in, err)
		}
	}
}

func TestParseFlatKeyed(t *testing.T) {
	kv, err := parseFlatKeyed("low 0\nhigh 1\nmax 2\noom 3\noom_kill 4\n")
	if err != nil || len(kv) != 5 || kv["oom"] != 3 || kv["oom_kill"] != 4 {
		t.Errorf("= %v, %v", kv, err)
	}
	if _, has := kv["oom_group_kill"]; has {
		t.Error("absent key reported")
	}
	if _, err := parseFlatKeyed("oom x\n"); !errors.Is(err, ErrFormat) {
		t.Errorf("err = %v, want ErrFormat", err)
	}
}

func TestParsePSI(t *testing.T) {
	got, err := parsePSI("some avg10=1.25 avg60=0.50 avg300=0.10 total=123\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=4\n")
	if err != nil || got["some"].avg10 != 1.25 || got["full"].avg10 != 0.5 {
		t.Errorf("= %v, %v", got, err)
	}
	got, err = parsePSI("some avg10=2.00 avg60=0.00 avg300=0.00 total=1\n") // cpu.pressure before 5.13
	if _, has := got["full"]; err != nil || has || got["some"].avg10 != 2 {
		t.Errorf("= %v, %v", got, err)
	}
	for _, in := range []string{"partial avg10=1\n", "some avg10=x\n", "some total=1\n", "some avg10\n"} {
		if _, err := parsePSI(in); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: err = %v, want ErrFormat", in, err)
		}
	}
}

func TestStripRoot(t *testing.T) {
	for _, tc := range []struct {
		path, root, want string
		inside           bool
	}{
		{"/kubepods/pod1/ctr", "/", "/kubepods/pod1/ctr", true},
		{"/kubepods/pod1/ctr", "/kubepods/pod1/ctr", "/", true},
		{"/docker/abc/sub", "/docker/abc", "/sub", true},
		{"/", "/", "/", true},
		{"/docker/abcd", "/docker/abc", "/", false}, // a sibling, not a child
		{"/../../user.slice", "/", "/", false},      // outside the cgroup namespace
		{"/other", "/docker/abc", "/", false},
	} {
		got, inside := stripRoot(tc.path, tc.root)
		if got != tc.want || inside != tc.inside {
			t.Errorf("stripRoot(%q, %q) = %q, %v; want %q, %v", tc.path, tc.root, got, inside, tc.want, tc.inside)
		}
	}
}
