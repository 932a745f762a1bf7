package spool

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/metrics"
)

func names(pts []metrics.Point) string {
	var n []string
	for _, p := range pts {
		n = append(n, p.Name())
	}
	return strings.Join(n, ",")
}

// portDesc is a template of one series per port, as InfiniBand's.
var portDesc = &metrics.Desc{Name: "node_port_<port>_bytes", Scope: metrics.ScopeNode, Instance: []string{"port"}, Prom: "p"}

// bound keeps names within MaxKey, at most maxPoints points and at most
// budget bytes; passed-through series go first, then per-port ones, then
// bridge's own, each from the end, and the order of what is kept stays.
func TestBound(t *testing.T) {
	own := func(n string) metrics.Point { return metrics.Named(n, 0) }
	prom := func(n string) metrics.Point { return metrics.At(metrics.Passthrough(n), 0) }
	port := func(n string) metrics.Point { return metrics.At(portDesc.For(n), 0) }
	gpu := metrics.At(metrics.GPUUtilization.ForGPU(0), 0)
	long := strings.Repeat("x", MaxKey+1)
	size := func(p *metrics.Point) int { return 10 }
	for _, tc := range []struct {
		name      string
		pts       []metrics.Point
		max, bud  int
		want      string
		long, ovr int
		tiers     [tiers]int
	}{
		{"within", []metrics.Point{own("a"), prom("b"), own("c")}, 3, -1, "a,b,c", 0, 0, [tiers]int{}},
		{"long name", []metrics.Point{own("a"), own(long), own("c")}, 3, -1, "a,c", 1, 0, [tiers]int{}},
		{"count: passed-through first", []metrics.Point{own("a"), prom("b"), own("c"), prom("d")}, 2, -1, "a,c", 0, 2, [tiers]int{2, 0, 0}},
		{"count: then own, from the end", []metrics.Point{own("a"), prom("b"), own("c"), own("d")}, 2, -1, "a,c", 0, 2, [tiers]int{1, 0, 1}},
		{"count: per-port before own", []metrics.Point{port("1"), own("a"), port("2"), gpu, prom("b")}, 2, -1, "a,gpu_0_utilization_percentage", 0, 3, [tiers]int{1, 2, 0}},
		{"count: per-port from the end", []metrics.Point{port("1"), own("a"), port("2")}, 2, -1, "node_port_1_bytes,a", 0, 1, [tiers]int{0, 1, 0}},
		{"bytes", []metrics.Point{own("a"), prom("b"), own("c"), own("d")}, 10, 25, "a,c", 0, 2, [tiers]int{1, 0, 1}},
		{"bytes: per-port first", []metrics.Point{own("a"), port("1"), own("c"), port("2")}, 10, 25, "a,c", 0, 2, [tiers]int{0, 2, 0}},
		{"bytes and a long name", []metrics.Point{own(long), own("a"), own("b"), own("c")}, 10, 25, "a,b", 1, 1, [tiers]int{0, 0, 1}},
		{"nothing fits", []metrics.Point{own("a")}, 10, 5, "", 0, 1, [tiers]int{0, 0, 1}},
	} {
		b := bound(tc.pts, tc.max, tc.bud, size)
		if got := names(b.pts); got != tc.want || b.longName != tc.long || b.over != tc.ovr || b.byTier != tc.tiers {
			t.Errorf("%s: kept %q (long %d, over %d by tier %v), want %q (%d, %d, %v)", tc.name, got, b.longName, b.over, b.byTier, tc.want, tc.long, tc.ovr, tc.tiers)
		}
	}
}

func TestTierOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    metrics.Point
		want Tier
	}{
		{"passed through", metrics.At(metrics.Passthrough("dcgm_x"), 1), TierPassedThrough},
		{"an InfiniBand port's", metrics.At(portDesc.For("1"), 1), TierInstance},
		{"a GPU's", metrics.At(metrics.GPUUtilization.ForGPU(3), 1), TierOwn},
		{"the node's", metrics.At(&metrics.Desc{Name: "node_memory_available_megabytes", Scope: metrics.ScopeNode}, 1), TierOwn},
		{"the container's", metrics.At(&metrics.Desc{Name: "container_memory_working_set_megabytes", Scope: "container"}, 1), TierOwn},
		{"the process tree's", metrics.At(&metrics.Desc{Name: "process_count", Scope: metrics.ScopeProcess}, 1), TierOwn},
		{"read back by name", metrics.Named("node_x", 1), TierOwn},
	} {
		if got := TierOf(&tc.p); got != tc.want {
			t.Errorf("%s: tier %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The sample: 10,000 InfiniBand ports give 20,000 points beside
// the node's, the container's and the GPUs': the cap keeps every one of
// those and drops ports, says so once, and names what it dropped.
func TestPointCapKeepsBridgesOwn(t *testing.T) {
	var logs syncbuf.Buffer
	s, err := OpenWith(filepath.Join(t.TempDir(), "s.jsonl"), Options{Logger: logTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Track("mlflow", "")
	own := []metrics.Point{
		metrics.At(&metrics.Desc{Name: "container_memory_working_set_megabytes", Scope: "container"}, 1),
		metrics.At(&metrics.Desc{Name: "node_memory_available_megabytes", Scope: metrics.ScopeNode}, 2),
		metrics.At(&metrics.Desc{Name: "process_count", Scope: metrics.ScopeProcess}, 3),
		metrics.At(metrics.GPUUtilization.ForGPU(0), 4),
	}
	for seq := range int64(3) {
		smp := metrics.Sample{Seq: seq, Time: time.UnixMilli(1 + seq)}
		smp.Points = append(smp.Points, own[:2]...)
		for i := range 20000 {
			smp.Points = append(smp.Points, metrics.At(portDesc.For(strconv.Itoa(i)), 5))
		}
		smp.Points = append(smp.Points, own[2:]...)
		if err := s.Append(smp); err != nil {
			t.Fatal(err)
		}
	}
	settle(s) // a tracker gets what the file has
	got := s.Pending("mlflow", "", 10)
	if len(got) != 3 {
		t.Fatalf("%d samples, want 3", len(got))
	}
	for _, smp := range got {
		kept := map[string]bool{}
		for _, p := range smp.Points {
			kept[p.Name()] = true
		}
		for _, p := range own {
			if !kept[p.Name()] {
				t.Errorf("sample %d: %s left out", smp.Seq, p.Name())
			}
		}
		if len(smp.Points) > defaultMaxPoints {
			t.Errorf("sample %d: %d points, over %d", smp.Seq, len(smp.Points), defaultMaxPoints)
		}
	}
	st := stats(s)
	if st.LeftOutByTier[TierInstance] != int64(3*(20000+len(own)-defaultMaxPoints)) || st.LeftOutByTier[TierOwn] != 0 ||
		st.LeftOutExample[TierInstance] != portDesc.Name {
		t.Errorf("stats %+v", st)
	}
	if n := strings.Count(logs.String(), "excess points are left out"); n != 1 || !strings.Contains(logs.String(), "per_port_or_device=10004") {
		t.Errorf("%d messages, want one naming the per-port points:\n%s", n, &logs)
	}
}

// Whatever a collector emits, the spool writes no record its reader would
// skip: names over MaxKey, points past MaxPoints, and a sample longer than
// the line limit are cut (passed-through series first), counted, and said
// once; every sample reads back.
func TestAppendNeverWritesWhatTheReaderRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	var logs syncbuf.Buffer
	const maxLine = 4096
	s, err := OpenWith(path, Options{MaxLine: maxLine, MaxPoints: 100, Logger: logTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	s.Track("mlflow", "")
	mk := func(seq int64, own, passed, nameLen int) metrics.Sample {
		smp := metrics.Sample{Seq: seq, Time: time.UnixMilli(1)}
		for i := range own {
			smp.Points = append(smp.Points, metrics.Named(fmt.Sprintf("node_%03d", i), 1))
		}
		for i := range passed {
			n := fmt.Sprintf("prom_%03d_", i)
			smp.Points = append(smp.Points, metrics.At(metrics.Passthrough(n+strings.Repeat("l", max(nameLen-len(n), 0))), 2))
		}
		return smp
	}
	s.Append(mk(0, 5, 500, 20))      // past MaxPoints
	s.Append(mk(1, 5, 1, MaxKey+10)) // a long name
	s.Append(mk(2, 20, 30, 200))     // past the line limit
	s.Append(mk(3, 5, 5, 10))        // within every bound
	st := stats(s)
	if st.PointsLeftOut == 0 {
		t.Fatal("nothing counted as left out")
	}
	pend := s.Pending("mlflow", "", 10)
	s.Close()
	if n := strings.Count(logs.String(), "excess points are left out"); n != 1 {
		t.Errorf("%d messages about points left out, want 1:\n%s", n, &logs)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		if len(l)+1 > maxLine+1 {
			t.Errorf("line %d is %d bytes, over the limit of %d", i+1, len(l)+1, maxLine+1)
		}
	}
	s2, err := OpenWith(path, Options{MaxLine: maxLine})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st := s2.Stats(); st.BadLines != 0 {
		t.Fatalf("%d lines skipped on read", st.BadLines)
	}
	s2.Track("mlflow", "")
	got := s2.Pending("mlflow", "", 10)
	if len(got) != 4 || len(pend) != 4 {
		t.Fatalf("read back %d samples (%d pending before), want 4", len(got), len(pend))
	}
	for i, smp := range got {
		if names(smp.Points) != names(pend[i].Points) {
			t.Errorf("sample %d reads back %d points, was sent %d", i, len(smp.Points), len(pend[i].Points))
		}
	}
	if n := len(got[0].Points); n != 100 || !strings.HasPrefix(names(got[0].Points), "node_000,node_001,node_002,node_003,node_004,prom_000") {
		t.Errorf("sample 0 keeps %d points (%.80s...), want 100: bridge's own, then the first passed through", n, names(got[0].Points))
	}
	if n := len(got[1].Points); n != 5 {
		t.Errorf("sample 1 keeps %d points, want the 5 with short names", n)
	}
	if !strings.HasPrefix(names(got[2].Points), "node_000") || len(got[2].Points) == 50 {
		t.Errorf("sample 2 keeps %d points, want bridge's own first and fewer than 50", len(got[2].Points))
	}
	if n := len(got[3].Points); n != 10 {
		t.Errorf("sample 3 keeps %d points, want all 10", n)
	}
}

// A start record whose tags do not fit the line limit loses its longest
// value, not the record.
func TestLongStartRecordFits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := OpenWith(path, Options{MaxLine: 1000, Logger: logTo(&syncbuf.Buffer{})})
	if err != nil {
		t.Fatal(err)
	}
	s.WriteStart(Record{Time: 1, Info: map[string]string{"bridge.command": strings.Repeat("c", 5000), "bridge.version": "1"}})
	s.Close()
	s2, err := OpenWith(path, Options{MaxLine: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	at := s2.Attempts()
	if len(at) != 1 || at[0].Start.Info["bridge.version"] != "1" || at[0].Start.Info["bridge.command"] != "" {
		t.Fatalf("attempts %+v, want the start record with its short tag", at)
	}
}

// A start record with the tags of 10,000 InfiniBand ports: the ports'
// tags go first (the largest family), bridge's own are kept, the record
// fits, and one WARN says how many were left out.
func TestManyTagsStartRecordFits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	var logs syncbuf.Buffer
	s, err := OpenWith(path, Options{Logger: logTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]string{"bridge.version": "1", "bridge.hostname": "gpu-a", "bridge.job_key": "slurm:c:1.0",
		"bridge.mlflow.experiment_id": "12", "bridge.created.mlflow": "true", "bridge.command": strings.Repeat("c", 400)}
	info := maps.Clone(own)
	for i := range 10000 {
		k := fmt.Sprintf("bridge.infiniband.mlx5_%d.%d.", i/100, i%100+1)
		info[k+"state"], info[k+"phys_state"], info[k+"link_layer"], info[k+"rate"] = "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/s"
	}
	if err := s.WriteStart(Record{Time: 1, Info: info}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if len(info) != len(own)+40000 {
		t.Fatal("WriteStart changed its caller's tags")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > DefaultMaxLine+1 {
		t.Errorf("start record of %d bytes, over %d", len(raw), DefaultMaxLine+1)
	}
	s2, err := OpenWith(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	at := s2.Attempts()
	if len(at) != 1 {
		t.Fatalf("%d attempts, want the start record", len(at))
	}
	got := at[0].Start.Info
	for k, v := range own {
		if got[k] != v {
			t.Errorf("%s = %q, want bridge's own tag kept", k, got[k])
		}
	}
	ports := len(got) - len(own)
	if ports < 10000 || ports >= 40000 || len(raw) < DefaultMaxLine*9/10 {
		t.Errorf("%d port tags kept in %d bytes: want the record near its bound", ports, len(raw))
	}
	if n := strings.Count(logs.String(), "a spool record was too long"); n != 1 || !strings.Contains(logs.String(), "family=bridge.infiniband") {
		t.Errorf("%d messages, want one naming the family:\n%s", n, &logs)
	}
}

func TestFitInfo(t *testing.T) {
	info := map[string]string{"a.b.c": "1", "a.b.d": "22", "a.x": "333", "z": "4444"}
	// Costs: "a.b.c":"1", is 12, "a.b.d":"22", 13, "a.x":"333", 12, "z":"4444", 11.
	for _, tc := range []struct {
		over   int
		left   []string
		family string
	}{
		{0, nil, ""},
		{1, []string{"a.b.d"}, "a.b"},
		{13, []string{"a.b.d"}, "a.b"},
		{14, []string{"a.b.c", "a.b.d"}, "a.b"},
		{26, []string{"a.b.c", "a.b.d", "a.x"}, "a.b"},
		{1000, []string{"a.b.c", "a.b.d", "a.x", "z"}, "a.b"},
	} {
		kept, n, family := fitInfo(info, tc.over)
		var left []string
		for k := range info {
			if _, ok := kept[k]; !ok {
				left = append(left, k)
			}
		}
		sort.Strings(left)
		if fmt.Sprint(left) != fmt.Sprint(tc.left) || n != len(tc.left) || family != tc.family {
			t.Errorf("over %d: left out %v (%d, family %q), want %v (%q)", tc.over, left, n, family, tc.left, tc.family)
		}
	}
	if len(info) != 4 {
		t.Error("fitInfo changed its argument")
	}
}

// A memory spool keeps samples for the trackers until they acknowledge
// them, at most MaxBuffered holding at most MaxBufferedBytes (the oldest
// dropped, counted, said once; the newest kept).
func TestMemorySpool(t *testing.T) {
	_, mem := heldBy(sample(10, 1)) // samples 10..17: lines of one length
	for _, tc := range []struct {
		name string
		opt  Options
		keep int
	}{
		{"samples", Options{MaxBuffered: 5}, 5},
		{"bytes", Options{MaxBufferedBytes: 5 * mem}, 5},
		{"bytes under one sample", Options{MaxBufferedBytes: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			tc.opt.Logger = logTo(&logs)
			s := NewMemory(tc.opt)
			if !s.InMemory() || s.Path() != "" {
				t.Fatal("NewMemory is not in memory")
			}
			s.WriteStart(Record{Time: 1, Runs: map[string]string{"mlflow": "r"}})
			s.Track("mlflow", "r")
			for i := int64(10); i < 18; i++ {
				if err := s.Append(sample(i, 1)); err != nil {
					t.Fatal(err)
				}
			}
			got := s.Pending("mlflow", "r", 100)
			if len(got) != tc.keep || got[0].Seq != int64(18-tc.keep) {
				t.Fatalf("pending %v, want the newest %d", got, tc.keep)
			}
			s.Ack("mlflow", "r", 16)
			if n := s.PendingCount("mlflow", "r"); n != 1 {
				t.Fatalf("pending after the ack %d, want 1", n)
			}
			if st := s.Stats(); st.LostUnwritten != int64(8-tc.keep) || st.Written != 0 {
				t.Fatalf("stats %+v, want %d lost, none written", st, 8-tc.keep)
			}
			if n := strings.Count(logs.String(), "dropping the oldest"); n != 1 {
				t.Fatalf("%d buffer-full messages, want 1:\n%s", n, &logs)
			}
			if s.Delivered() {
				t.Fatal("a memory spool cannot be delivered: nothing is kept")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Append(sample(19, 1)); err != errClosed {
				t.Fatalf("append after close: %v", err)
			}
		})
	}
}
