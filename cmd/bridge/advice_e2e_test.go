package main

// Issue 41's energy per step, cost, suggestions and the run's own note,
// through the real binary against a real MLflow server.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/harness/cgrouptest"
	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/spool"
	"github.com/bridge-dev/bridge/summary"
)

// stepsScript logs a loss at steps 1 to $STEPS with the real mlflow client.
func stepsScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "steps_and_note.py"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// running is a started job whose child runs until stop.
type running struct {
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	dir    string
	spool  string
	exited chan struct{}
	err    error
}

// start starts cmd (the job, in dir) and stops it at cleanup.
func start(t *testing.T, cmd *exec.Cmd, dir string) *running {
	t.Helper()
	r := &running{cmd: cmd, out: &syncbuf.Buffer{}, dir: dir, spool: filepath.Join(dir, "spool.jsonl"), exited: make(chan struct{})}
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, "BRIDGE_SPOOL="+r.spool, "HOME="+dir)
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		r.stop()
		select {
		case <-r.exited:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-r.exited
		}
	})
	return r
}

func (r *running) stop() { os.WriteFile(filepath.Join(r.dir, "stop"), nil, 0o644) }

// wait stops the child and returns bridge's exit status.
func (r *running) wait(t *testing.T) int {
	t.Helper()
	r.stop()
	select {
	case <-r.exited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("bridge did not exit\n%s", r.out)
	}
	return exitCode(t, r.err)
}

func (r *running) samples() []metrics.Sample {
	ss, _, _, _ := spooltest.ReadFile(r.spool)
	return ss
}

// attempt is the spool's one attempt.
func (r *running) attempt(t *testing.T) spool.Attempt {
	t.Helper()
	_, _, attempts, err := spooltest.ReadFile(r.spool)
	if err != nil || len(attempts) != 1 || attempts[0].End == nil {
		t.Fatalf("spool: %v, %d attempts\n%s", err, len(attempts), r.out)
	}
	return attempts[0]
}

// Energy per step and cost, end to end: a node whose /sys/class is a
// fixture (a private mount namespace) with one RAPL package, and a
// training script that logs steps 1 to 100 with the real mlflow client in
// bridge's run. Once the package used 200 J since bridge started, the
// run's tick (--run-tick=1s) reads step 100, and the samples carry
// job_energy_per_step_joules = 2 J; the end tags say the energy total, the
// steps and the energy per step, which is the one over the other. With a
// node price of 3600 an hour (and a GPU price, but no GPU), the cost is
// the job's seconds, from the spool's start record to its end record, in
// the tag, the spool's end record and the table.
func TestEnergyPerStepAndCost(t *testing.T) {
	needFixtureNS(t)
	py := mlflowtest.Python(t)
	srv := mlflowtest.Shared(t)
	root := t.TempDir()
	const uj = "class/powercap/intel-rapl:0/energy_uj"
	writeTree(t, root, map[string]string{
		"class/powercap/intel-rapl/enabled": "1\n", "class/powercap/intel-rapl:0/name": "package-0\n", uj: "1000000\n",
		"class/powercap/intel-rapl:0/max_energy_range_uj": "262143328850\n", "class/powercap/intel-rapl:0/enabled": "1\n",
		"dev/dri/.keep": "",
	})
	job := inFixtureNS(t, root, "--interval=1s", "--run-tick=1s", "--trackers=mlflow", "--start-timeout=1m", "--flush-timeout=1m",
		"--price-per-node-hour=3600", "--price-per-gpu-hour=100", "--", py, stepsScript(t))
	job.Env = append(job.Env, "MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME=bridge-e2e-"+t.Name(), "STEPS=100")
	r := start(t, job, t.TempDir())
	energyIs := func(j float64) func() bool {
		return func() bool {
			return slices.ContainsFunc(r.samples(), func(s metrics.Sample) bool {
				v, ok := s.Value(metrics.NodeCPUEnergy.Name)
				return ok && v == j
			})
		}
	}
	waitfor.Cond(t, 2*time.Minute, "a sample with the node's CPU energy (its first reading)", energyIs(0))
	writeTree(t, root, map[string]string{uj: "201000000\n"}) // 200 J more
	waitfor.Cond(t, 2*time.Minute, "a sample with 200 J used", energyIs(200))
	waitfor.Cond(t, 2*time.Minute, "the script's 100 steps logged", func() bool {
		_, err := os.Stat(filepath.Join(r.dir, "logged"))
		return err == nil
	})
	waitfor.Cond(t, 2*time.Minute, "a sample with the job's energy per step, 200 J over 100 steps", func() bool {
		return slices.ContainsFunc(r.samples(), func(s metrics.Sample) bool {
			v, ok := s.Value(pipeline.JobEnergyPerStep.Name)
			return ok && v == 2
		})
	})
	if code := r.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, r.out)
	}
	at := r.attempt(t)
	run := srv.GetRun(t, at.Start.Runs["mlflow"])
	total, err1 := strconv.ParseFloat(run.Tags[summary.TagEnergyNodeCPU], 64)
	steps, err2 := strconv.ParseFloat(run.Tags[jobrun.TagSteps], 64)
	per, err3 := strconv.ParseFloat(run.Tags[jobrun.TagEnergyPerStep], 64)
	if err1 != nil || err2 != nil || err3 != nil || total != 200 || steps != 100 || per != total/steps {
		t.Errorf("tags: energy %q, steps %q, per step %q; want 200 J over 100 steps, 2 J a step",
			run.Tags[summary.TagEnergyNodeCPU], run.Tags[jobrun.TagSteps], run.Tags[jobrun.TagEnergyPerStep])
	}
	if h := srv.History(t, run.Info.RunID, "system/"+pipeline.JobEnergyPerStep.Name); len(h) == 0 || h[len(h)-1].Value != 2 {
		t.Errorf("the run's %s series: %+v, want it to end at 2", pipeline.JobEnergyPerStep.Name, h)
	}
	secs := float64(at.End.Time-at.Start.Time) / 1000
	cost, err := strconv.ParseFloat(run.Tags[advice.TagCost], 64)
	if err != nil || math.Abs(cost-secs) > 0.011 || !strings.HasPrefix(run.Tags[advice.TagCostBasis], "0 GPUs × ") ||
		!strings.HasSuffix(run.Tags[advice.TagCostBasis], " at 3600 a node-hour") || at.End.Info[advice.TagCost] != run.Tags[advice.TagCost] {
		t.Errorf("cost %q (%q), spool's %q; want the job's %.3f s at 3600 an hour", run.Tags[advice.TagCost], run.Tags[advice.TagCostBasis],
			at.End.Info[advice.TagCost], secs)
	}
	t.Logf("energy %s J over %s steps: %s J a step; cost %s (%s) for %.3f s", run.Tags[summary.TagEnergyNodeCPU], run.Tags[jobrun.TagSteps],
		run.Tags[jobrun.TagEnergyPerStep], run.Tags[advice.TagCost], run.Tags[advice.TagCostBasis], secs)
	if row := tableRow(r.out.String(), "cost"); !strings.HasPrefix(row, run.Tags[advice.TagCost]+" (") {
		t.Errorf("the table's cost row %q, want %s\n%s", row, run.Tags[advice.TagCost], r.out)
	}
	if row := tableRow(r.out.String(), "energy per step"); !strings.HasPrefix(row, "2 J over 100 steps") {
		t.Errorf("the table's energy per step row %q\n%s", row, r.out)
	}
}

// The run's own note in a real MLflow run: the script writes the run's
// note first, as a person would, with the real mlflow client (Markdown that
// must stay as written). While the job runs, the tick (every 5th of 1 s)
// appends bridge's section after it; at the end bridge's section is
// current (the run FINISHED, by the script's end_run), still once, and the
// person's note is kept, every character, before it. A second job given
// the same run (MLFLOW_RUN_ID) replaces bridge's section, never adds one.
func TestRunNoteKeepsAPersonsNote(t *testing.T) {
	srv := mlflowtest.Shared(t)
	const note = "A person's note: *baseline*, lr=3e-4 | see [the wiki](http://wiki.invalid/run) <b>&</b>"
	j := newJob(t, srv.URL, "--interval=250ms", "--run-tick=1s", "--trackers=mlflow", "--start-timeout=1m", "--flush-timeout=1m",
		"--", mlflowtest.Python(t), stepsScript(t))
	j.env("NOTE="+note, "STEPS=3")
	r := start(t, j.cmd, j.dir)
	var runID string
	waitfor.Cond(t, 2*time.Minute, "the run's note with the person's note and bridge's section, while the job runs", func() bool {
		if runID == "" {
			_, _, attempts, _ := spooltest.ReadFile(r.spool)
			if len(attempts) == 0 || attempts[0].Start.Runs["mlflow"] == "" {
				return false
			}
			runID = attempts[0].Start.Runs["mlflow"]
		}
		n := srv.GetRun(t, runID).Tags["mlflow.note.content"]
		return strings.HasPrefix(n, note+"\n\n<!-- bridge: begin") && strings.Contains(n, "**Status:** RUNNING")
	})
	if code := r.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, r.out)
	}
	got := srv.GetRun(t, runID).Tags["mlflow.note.content"]
	checkNote(t, got, note, "FINISHED")

	again := newJob(t, srv.URL, "--trackers=mlflow", "--", "true").env("MLFLOW_RUN_ID=" + runID)
	if code := again.run(t); code != 0 {
		t.Fatalf("second job: exit %d\n%s", code, &again.err)
	}
	checkNote(t, srv.GetRun(t, runID).Tags["mlflow.note.content"], note, "FINISHED")
}

// checkNote checks a run's note: the person's first, as written, then
// bridge's section once, saying status.
func checkNote(t *testing.T, got, person, status string) {
	t.Helper()
	if !strings.HasPrefix(got, person+"\n\n<!-- bridge: begin") || strings.Count(got, "<!-- bridge: begin") != 1 ||
		strings.Count(got, "<!-- bridge: end -->") != 1 || !strings.HasSuffix(got, "<!-- bridge: end -->") ||
		!strings.Contains(got, "**Status:** "+status) {
		t.Errorf("the run's note:\n%s\nwant the person's note, then bridge's section once, status %s", got, status)
	}
}

// The suggestions for a job with a known peak and CPU profile, in a real
// v1 cgroup (1 GiB, half a CPU): the child holds 300 MB and spins. The
// memory limit suggested is the peak working set of the spooled samples ×
// 1.15, rounded up; the CPU request the 90th percentile of the samples'
// CPU, each weighted by its window, read as VPA's histogram reads it (the
// end of its bucket) × 1.15, rounded up to a millicore; both computed here
// by hand. The memory limit mostly unused is said plainly. The tags, the
// table and `bridge report --json` agree.
func TestSuggestionsKnownPeakAndCPU(t *testing.T) {
	srv := mlflowtest.Shared(t)
	g := cgrouptest.NewV1(t, cgrouptest.Limits{MemoryBytes: 1 << 30, QuotaUs: 50000, PeriodUs: 100000})
	child := `b = bytearray(300_000_000)
b[::4096] = b"x" * len(b[::4096])
import os, time
open("held", "w").close()
while not os.path.exists("stop"):
    pass`
	j := newJob(t, srv.URL, "--interval=1s", "--trackers=mlflow", "--start-timeout=1m", "--flush-timeout=1m",
		"--", mlflowtest.Python(t), "-c", child).inCgroup(g)
	r := start(t, j.cmd, j.dir)
	waitfor.Cond(t, 2*time.Minute, "the child's 300 MB held, and 10 CPU readings after", func() bool {
		if _, err := os.Stat(filepath.Join(r.dir, "held")); err != nil {
			return false
		}
		n := 0
		for _, s := range r.samples() {
			if _, ok := s.Value(metrics.ContainerCPUUsage.Name); ok {
				n++
			}
		}
		return n >= 10
	})
	if code := r.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, r.out)
	}
	at := r.attempt(t)
	tags := srv.GetRun(t, at.Start.Runs["mlflow"]).Tags
	samples := r.samples()

	peak := 0.0
	for _, s := range samples {
		if v, ok := s.Value(metrics.ContainerMemoryWorkingSet.Name); ok {
			peak = max(peak, v)
		}
	}
	wantMem := math.Ceil(max(peak*1.15, 250))
	if peak < 300 || tags[advice.TagSuggestedMemory] != strconv.FormatFloat(wantMem, 'f', -1, 64) {
		t.Errorf("suggested memory limit %q; want ceil(%.1f MB × 1.15) = %v (the child held 300 MB)", tags[advice.TagSuggestedMemory], peak, wantMem)
	}
	if u, want := tags[advice.TagUnused], fmt.Sprintf("peak working set %v of 1074 MB: %.0f%% of the memory limit was never used", math.Round(peak), 100*(1-peak/1073.741824)); !strings.Contains(u, want) {
		t.Errorf("unused %q, want %q", u, want)
	}
	got, err := strconv.ParseFloat(tags[advice.TagSuggestedCPU], 64)
	if want := cpuRequests(samples); err != nil || !slices.Contains(want, got) {
		t.Errorf("suggested CPU request %q; want one of %v (the 90th percentile of the samples' CPU by hand, × 1.15)", tags[advice.TagSuggestedCPU], want)
	}
	t.Logf("peak working set %.1f MB, suggested limit %s MB; suggested CPU request %s cores (by hand: %v); unused: %s",
		peak, tags[advice.TagSuggestedMemory], tags[advice.TagSuggestedCPU], cpuRequests(samples), tags[advice.TagUnused])
	if row := tableRow(r.out.String(), "next run"); !strings.Contains(row, "memory limit "+tags[advice.TagSuggestedMemory]+" MB") {
		t.Errorf("the table's next run row %q\n%s", row, r.out)
	}
	code, out, errb := reportOut(t, srv.URL, at.Start.Runs["mlflow"], "--json")
	var rep struct {
		Nodes []struct {
			Memory *float64 `json:"suggested_memory_limit_megabytes"`
			CPU    *float64 `json:"suggested_cpu_cores"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Nodes) != 1 || rep.Nodes[0].Memory == nil ||
		*rep.Nodes[0].Memory != wantMem || rep.Nodes[0].CPU == nil || *rep.Nodes[0].CPU != got {
		t.Errorf("bridge report --json: exit %d, %v:\n%s\n%s", code, err, out, errb)
	}
}

// cpuRequests is the CPU request VPA's rule makes of the samples, by hand:
// each sample's container CPU weighted by the seconds since the sample
// before (windows of a second or more), the 0.9 percentile's bucket of
// VPA's CPU histogram (0.01 core, 5% growth), its end × 1.15, rounded up
// to a millicore. The spool keeps times to the millisecond, bridge to the
// nanosecond: every bucket where the running weight could reach 0.9 of
// the total within that rounding is returned.
func cpuRequests(samples []metrics.Sample) []float64 {
	type w struct{ v, secs float64 }
	var ws []w
	total := 0.0
	for i := 1; i < len(samples); i++ {
		v, ok := samples[i].Value(metrics.ContainerCPUUsage.Name)
		secs := samples[i].Time.Sub(samples[i-1].Time).Seconds()
		if ok && secs >= 1 {
			ws = append(ws, w{v, secs})
			total += secs
		}
	}
	bucket := func(v float64) int {
		if v < 0.01 {
			return 0
		}
		return int(math.Log(v/0.01*0.05+1) / math.Log(1.05))
	}
	end := func(b int) float64 { return 0.01 * (math.Pow(1.05, float64(b+1)) - 1) / 0.05 }
	sort.Slice(ws, func(i, j int) bool { return ws[i].v < ws[j].v })
	slack := 0.002 * float64(len(ws))
	var out []float64
	sum := 0.0
	for i := 0; i < len(ws); {
		b := bucket(ws[i].v)
		for ; i < len(ws) && bucket(ws[i].v) == b; i++ {
			sum += ws[i].secs
		}
		if sum >= 0.9*total-slack {
			out = append(out, math.Ceil(max(end(b)*1.15, 0.025)*1000)/1000)
			if sum > 0.9*total+slack {
				break
			}
		}
	}
	return out
}
