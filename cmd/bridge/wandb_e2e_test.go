package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/syncbuf"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

// The W&B end-to-end tests run `bridge --interval 1s --trackers wandb --
// python wandb_train.py` with the real wandb client (BRIDGE_TEST_PYTHON)
// against the W&B mock: the child creates the run and logs, bridge adds its
// labelled system metrics as a second writer.

const wbProject = "bridge-e2e"

// wbKey is the only API key the mock accepts (wandb wants 40+ characters).
var wbKey = strings.Repeat("k", 40)

func wbPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("BRIDGE_TEST_PYTHON")
	if py == "" {
		t.Skip("BRIDGE_TEST_PYTHON is unset: set it to a python with wandb==0.31.0 to run bridge's W&B end-to-end tests; scripts/test.sh, the README's test command, creates .venv and sets it")
	}
	return py
}

// wbJob is one run of the real bridge binary around wandb_train.py.
type wbJob struct {
	cmd    *exec.Cmd
	dir    string // working directory; the child's WANDB_DIR
	spool  string
	stdin  io.WriteCloser
	lines  chan string // the child's stdout, line by line (closed at EOF)
	stderr syncbuf.Buffer
	steps  int
}

// startWB starts bridge with bridgeArgs (then --) around the script with
// scriptArgs, in the mock's client environment with the given API key.
func startWB(ctx context.Context, t *testing.T, srv *wandbserver.Server, key string, bridgeArgs []string, scriptArgs ...string) *wbJob {
	t.Helper()
	return startWBEnv(ctx, t, srv, key, nil, bridgeArgs, scriptArgs...)
}

// startWBEnv is startWB with extra environment for bridge and the child.
func startWBEnv(ctx context.Context, t *testing.T, srv *wandbserver.Server, key string, env, bridgeArgs []string, scriptArgs ...string) *wbJob {
	t.Helper()
	py := wbPython(t)
	script, err := filepath.Abs(filepath.Join("testdata", "wandb_train.py"))
	if err != nil {
		t.Fatal(err)
	}
	j := &wbJob{dir: t.TempDir(), lines: make(chan string, 64)}
	j.spool = filepath.Join(j.dir, "spool.jsonl")
	args := append([]string{"--interval", "1s", "--trackers", "wandb", "--spool", j.spool}, bridgeArgs...)
	args = append(append(args, "--", py, script), scriptArgs...)
	j.cmd = exec.CommandContext(ctx, testbin.Bridge(t), args...)
	// On a hung test, let bridge forward SIGTERM to the child rather than
	// leave a Python process behind.
	j.cmd.Cancel = func() error { return j.cmd.Process.Signal(syscall.SIGTERM) }
	j.cmd.WaitDelay = 10 * time.Second
	j.cmd.Dir = j.dir
	j.cmd.Env = append(append(cleanEnv(srv.ClientEnv(j.dir, key)...), "WANDB_PROJECT="+wbProject), env...)
	j.cmd.Stderr = &j.stderr
	if j.stdin, err = j.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(j.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			j.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bridge's stderr (with the child's):\n%s", j.stderr.String())
		}
	})
	return j
}

// expect waits for the child to print a line starting with prefix (other
// lines, such as wandb's, are skipped) and returns it.
func (j *wbJob) expect(ctx context.Context, t *testing.T, prefix string) string {
	t.Helper()
	for {
		select {
		case line, ok := <-j.lines:
			if !ok {
				t.Fatalf("the child's output ended before %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-ctx.Done():
			t.Fatalf("no %q from the child: %v", prefix, ctx.Err())
		}
	}
}

// step makes the child log one history row and waits until it has.
func (j *wbJob) step(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(j.stdin, "step\n"); err != nil {
		t.Fatal(err)
	}
	j.expect(ctx, t, fmt.Sprintf("logged %d", j.steps))
	j.steps++
}

// end closes the child's stdin (it finishes its run and exits) and returns
// bridge's exit code.
func (j *wbJob) end(t *testing.T) int {
	t.Helper()
	if err := j.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	for range j.lines { // stdout must be read to EOF before Wait
	}
	return exitCode(t, j.cmd.Wait())
}

// spooled returns the samples bridge has written to its spool so far.
func (j *wbJob) spooled(t *testing.T) []metrics.Sample {
	t.Helper()
	ss, _, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// runOf returns the run's snapshot and bridge's writer id (the writer other
// than the child's primary one; "" while bridge has not written).
func runOf(t *testing.T, srv *wandbserver.Server, runID string) (wandbserver.Run, string) {
	t.Helper()
	run, ok := srv.Run(srv.Entity(), wbProject, runID)
	if !ok {
		return run, ""
	}
	for _, w := range run.Writers {
		if w.ID != wandbserver.Primary {
			return run, w.ID
		}
	}
	return run, ""
}

// bridgeLineCount is how many events lines bridge has in the run.
func bridgeLineCount(t *testing.T, srv *wandbserver.Server, runID string) int {
	t.Helper()
	run, id := runOf(t, srv, runID)
	if id == "" {
		return 0
	}
	return len(run.File(id, wandbserver.EventsFile).Lines)
}

// TestWandbEndToEnd: with --node-id, the child logs 4 steps and exits 3.
// The run holds the child's history and wandb's own system metrics, and
// bridge's lines labelled with the node id, each spooled sample once; the
// child finished the run with its exit code and bridge exits with it.
func TestWandbEndToEnd(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	wbPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	const exit = 3
	began := time.Now()
	j := startWB(ctx, t, srv, "", []string{"--node-id", "node-a"}, wbProject, fmt.Sprint(exit))
	runID := strings.TrimPrefix(j.expect(ctx, t, "ready "), "ready ")
	// One step per bridge line: the child logs while bridge sends.
	for i := range 4 {
		j.step(ctx, t)
		if err := wandbserver.Wait(ctx, func() bool { return bridgeLineCount(t, srv, runID) > i }); err != nil {
			t.Fatalf("bridge sent %d lines, want %d: %v", bridgeLineCount(t, srv, runID), i+1, err)
		}
	}
	if code := j.end(t); code != exit {
		t.Fatalf("bridge exited %d, want the child's %d", code, exit)
	}
	t.Logf("bridge ran %.1fs", time.Since(began).Seconds())

	checkWandbRun(t, srv, runID, "node-a", exit, j)

	// Bridge must not disturb the child's wandb: the child (its lines on
	// bridge's stderr, without bridge's own, and its debug logs) reports no
	// problem with the server.
	var child []string
	for _, l := range strings.Split(j.stderr.String(), "\n") {
		if !strings.Contains(l, "app=bridge") && !strings.HasPrefix(l, "bridge:") && !strings.HasPrefix(l, "  ") {
			child = append(child, l)
		}
	}
	problems, err := wandbserver.ClientProblems(j.dir, []byte(strings.Join(child, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("the child's wandb reported a problem: %s", p)
	}
}

// TestWandbOutage: without --node-id (the label is the host name), the mock
// stops mid-run while both writers send, for as long as it takes bridge to
// spool three samples and both writers to fail, and restarts on the same
// port. Every sample bridge spooled is in the run exactly once after it
// exits.
func TestWandbOutage(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	wbPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	label := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, host)
	j := startWB(ctx, t, srv, "", nil, wbProject, "0")
	runID := strings.TrimPrefix(j.expect(ctx, t, "ready "), "ready ")
	j.step(ctx, t)
	if err := wandbserver.Wait(ctx, func() bool { return bridgeLineCount(t, srv, runID) >= 2 }); err != nil {
		t.Fatalf("bridge sent %d lines before the outage, want 2: %v", bridgeLineCount(t, srv, runID), err)
	}

	beforeLines := bridgeLineCount(t, srv, runID)
	beforeSpool := len(j.spooled(t))
	beforeTries := childAttempts(t, j.dir)
	beforeWarn := strings.Count(j.stderr.String(), "cannot send to the tracker")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	j.step(ctx, t)
	j.step(ctx, t)
	// The outage lasts until bridge has spooled three samples it could not
	// send (about 3 s at --interval 1s) and both writers have failed against
	// the stopped server.
	during := func() int { return len(samplesIn(j.spooled(t), stopped, time.Now())) }
	err = wandbserver.Wait(ctx, func() bool {
		return during() >= 3 &&
			strings.Count(j.stderr.String(), "cannot send to the tracker") > beforeWarn &&
			childAttempts(t, j.dir) > beforeTries
	})
	if err != nil {
		t.Fatalf("outage: %d samples spooled during it, child attempts %d->%d: %v", during(), beforeTries, childAttempts(t, j.dir), err)
	}
	restarted := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	outage := restarted.Sub(stopped)
	atRestart := len(j.spooled(t))
	// Bridge catches up while the child still runs.
	if err := wandbserver.Wait(ctx, func() bool { return bridgeLineCount(t, srv, runID) >= atRestart }); err != nil {
		t.Fatalf("after the restart bridge has %d lines, spooled %d: %v", bridgeLineCount(t, srv, runID), atRestart, err)
	}
	caughtUp := time.Since(stopped) - outage
	j.step(ctx, t)
	if code := j.end(t); code != 0 {
		t.Fatalf("bridge exited %d, want the child's 0", code)
	}
	if !strings.Contains(j.stderr.String(), "tracker reachable again") {
		t.Errorf("bridge did not say the tracker was reachable again")
	}

	all := checkWandbRun(t, srv, runID, label, 0, j)
	held := len(samplesIn(all, stopped, restarted))
	t.Logf("outage %.1fs: bridge had sent %d lines (%d spooled) before it, spooled %d samples during it (held, sent after the restart), caught up %.1fs after the restart",
		outage.Seconds(), beforeLines, beforeSpool, held, caughtUp.Seconds())
	if held < 3 {
		t.Errorf("only %d samples fell in the outage", held)
	}
}

// TestWandbBadKey: bridge's key is rejected. Bridge reports it once,
// without the key, runs the child (which does not use wandb) all the same
// and exits with the child's status; nothing is written to W&B.
func TestWandbBadKey(t *testing.T) {
	wbPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	bad := strings.Repeat("b", 40)
	j := startWB(ctx, t, srv, bad, nil, wbProject, "5", "--no-wandb")
	j.expect(ctx, t, "ran without wandb")
	if code := j.end(t); code != 5 {
		t.Fatalf("bridge exited %d, want the child's 5", code)
	}
	stderr := j.stderr.String()
	if strings.Contains(stderr, bad) {
		t.Errorf("bridge printed the API key:\n%s", stderr)
	}
	var problems []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
			problems = append(problems, l)
		}
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "API key was rejected") || !strings.Contains(problems[0], "WANDB_API_KEY") {
		t.Errorf("want one error line saying the API key was rejected, got %d:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	if runs := srv.Runs(); len(runs) != 0 {
		t.Errorf("runs were created: %+v", runs)
	}
	// One key check (the mock answers 401 before it reads the operation).
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Path != "/graphql" || reqs[0].Status != 401 {
		for _, r := range reqs {
			t.Errorf("request %s %s (%s) -> %d", r.Method, r.Path, r.Operation, r.Status)
		}
		t.Errorf("want one rejected GraphQL request, got %d", len(reqs))
	}
	if len(problems) > 0 {
		t.Logf("the error line: %s", problems[0])
	}
}

// checkWandbRun checks the finished run and returns the spooled samples:
// the child's history (one line per step, in order) and wandb's own
// unlabelled system metrics; bridge's lines, each a spooled sample exactly
// once, in order, every key "system.<name>/l:<label>"; offsets monotonic
// per writer and file, no line overwritten, no gap; bridge sent only
// events lines (no complete, exitcode, config or other file); the run was
// finished by the child with exit.
func checkWandbRun(t *testing.T, srv *wandbserver.Server, runID, label string, exit int, j *wbJob) []metrics.Sample {
	t.Helper()
	run, bridgeID := runOf(t, srv, runID)
	if run.Name == "" {
		t.Fatalf("no run %s/%s/%s; runs: %+v", srv.Entity(), wbProject, runID, srv.Runs())
	}
	if u := srv.UnknownOperations(); len(u) > 0 {
		t.Errorf("GraphQL operations the mock lacks: %q", u)
	}
	if len(run.Writers) != 2 || len(bridgeID) != 32 {
		t.Fatalf("writers %+v, want the child's and bridge's (a 32-character client id)", run.Writers)
	}
	if !run.Complete || run.ExitCode == nil || *run.ExitCode != exit || run.FinishedBy == nil || *run.FinishedBy != wandbserver.Primary {
		t.Errorf("finish: complete %v, exit code %v, by %v; want the child's %d", run.Complete, run.ExitCode, run.FinishedBy, exit)
	}

	hist := run.File(wandbserver.Primary, wandbserver.HistoryFile)
	if len(hist.Lines) != j.steps || !hist.Contiguous() || hist.Overwrites != 0 {
		t.Errorf("child history: %d lines (want %d), contiguous %v, overwrites %d", len(hist.Lines), j.steps, hist.Contiguous(), hist.Overwrites)
	}
	for i, line := range hist.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["loss"] != 1.0/float64(i+1) {
			t.Errorf("history line %d: %s", i, line)
		}
	}
	childEv := run.File(wandbserver.Primary, wandbserver.EventsFile)
	if len(childEv.Lines) == 0 || !childEv.Contiguous() || childEv.Overwrites != 0 {
		t.Errorf("wandb's own system metrics: %d lines, contiguous %v, overwrites %d", len(childEv.Lines), childEv.Contiguous(), childEv.Overwrites)
	}
	wandbKeys := 0
	for _, line := range childEv.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("child events line: %v: %s", err, line)
		}
		for k := range m {
			switch {
			case strings.Contains(k, "/l:"):
				t.Errorf("a labelled key in wandb's own lines: %s", k)
			case strings.HasPrefix(k, "system."):
				wandbKeys++
			}
		}
	}
	if wandbKeys == 0 {
		t.Errorf("no system.* key in wandb's own lines")
	}

	// Bridge's lines against its spool: line i is sample i.
	samples := j.spooled(t)
	ours := run.File(bridgeID, wandbserver.EventsFile)
	if len(ours.Lines) != len(samples) || !ours.Contiguous() || ours.Overwrites != 0 || ours.Gaps != 0 {
		t.Errorf("bridge's events: %d lines for %d spooled samples, contiguous %v, overwrites %d, gaps %d",
			len(ours.Lines), len(samples), ours.Contiguous(), ours.Overwrites, ours.Gaps)
	}
	keyRE := regexp.MustCompile(`^system\.([a-z0-9_]+)/l:` + regexp.QuoteMeta(label) + `$`)
	names := map[string]bool{}
	for i, line := range ours.Contents() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("bridge line %d: %v: %s", i, err, line)
		}
		got := map[string]float64{}
		for k, v := range m {
			switch k {
			case "_wandb", "_timestamp", "_runtime":
				continue
			}
			sub := keyRE.FindStringSubmatch(k)
			f, ok := v.(float64)
			if sub == nil || !ok {
				t.Errorf("bridge line %d: key %q = %v, want system.<name>/l:%s with a number", i, k, v, label)
				continue
			}
			got[sub[1]] = f
			names[sub[1]] = true
		}
		if m["_wandb"] != true {
			t.Errorf("bridge line %d lacks _wandb: true", i)
		}
		if i >= len(samples) {
			continue
		}
		s := samples[i]
		ts, _ := m["_timestamp"].(float64)
		if math.Abs(ts*1000-float64(s.Time.UnixMilli())) >= 1 {
			t.Errorf("bridge line %d has _timestamp %.3f, sample %d was taken at %d ms", i, ts, s.Seq, s.Time.UnixMilli())
		}
		want := map[string]float64{}
		for _, p := range s.Points {
			want[p.Name()] = p.Value
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("bridge line %d is not sample %d:\n got %v\nwant %v", i, s.Seq, got, want)
		}
	}
	sent := []string{"container_memory_working_set_megabytes", "node_memory_used_megabytes"}
	if !cpuAtRoot(t) { // a root cpu cgroup's CPU is the host's: not sent as a container's
		sent = append(sent, "container_cpu_utilization_percentage")
	}
	for _, n := range sent {
		if !names[n] {
			t.Errorf("bridge never sent %s", n)
		}
	}
	_, acks, _, err := spooltest.ReadFile(j.spool)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) > 0 {
		last := samples[len(samples)-1].Seq
		found := false
		for k, v := range acks {
			found = found || (strings.HasPrefix(k, "wandb") && v == last)
		}
		if !found {
			t.Errorf("the spool does not record W&B's ack of the last sample %d: %v", last, acks)
		}
	}

	// The wire: per writer and file, offsets never go back; bridge sends
	// events only, never complete or exitcode, and its GraphQL writes are
	// the exit verdict (tags and notes only) and the job's figures in the
	// summary (the child's keys kept), after the child's wandb has
	// finished the run.
	type wf struct{ writer, file string }
	last := map[wf]int{}
	bridgeReqs, bridgeMaxBatch, afterComplete, verdicts, figures, notes := 0, 0, 0, 0, 0, 0
	complete := false
	for _, r := range srv.Requests() {
		if r.Header.Get("X-WANDB-CLIENT-ID") == bridgeID && r.Operation == "UpsertBucket" {
			var q struct {
				Variables map[string]any `json:"variables"`
			}
			if err := json.Unmarshal([]byte(r.Body), &q); err != nil {
				t.Fatalf("UpsertBucket body: %v", err)
			}
			_, sum := q.Variables["summaryMetrics"]
			_, tags := q.Variables["tags"]
			switch {
			case sum:
				figures++
			case tags:
				verdicts++
			default:
				notes++ // the run's note alone (jobrun's tick)
			}
			for k, v := range q.Variables {
				switch k {
				case "name", "project", "entity", "tags", "notes":
				case "summaryMetrics":
					var sum map[string]any
					js, _ := v.(string)
					if err := json.Unmarshal([]byte(js), &sum); err != nil || sum["loss"] == nil || sum["bridge/process_memory_peak_rss_megabytes"] == nil {
						t.Errorf("bridge's summary %s: want the child's loss kept and the job's figures (%v)", js, err)
					}
				default:
					t.Errorf("bridge's UpsertBucket sets %s: it may set only tags, notes and the summary", k)
				}
			}
			if !complete {
				t.Errorf("bridge wrote the run record before the child's wandb finished the run")
			}
		} else if r.Header.Get("X-WANDB-CLIENT-ID") == bridgeID && r.Operation != "Viewer" && r.Operation != "RunResumeStatus" && r.Operation != "RunSummary" {
			t.Errorf("bridge sent GraphQL %s", r.Operation)
		}
		if r.Operation != "file_stream" || r.Status != 200 {
			continue
		}
		var body struct {
			Files map[string]struct {
				Offset  int      `json:"offset"`
				Content []string `json:"content"`
			} `json:"files"`
			Complete *bool `json:"complete"`
			ExitCode *int  `json:"exitcode"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
			t.Fatalf("file_stream body: %v: %s", err, r.Body)
		}
		if r.Writer == bridgeID {
			bridgeReqs++
			if body.Complete != nil || body.ExitCode != nil {
				t.Errorf("bridge sent complete/exitcode: %s", r.Body)
			}
			if complete {
				afterComplete += len(body.Files[wandbserver.EventsFile].Content)
			}
		}
		complete = complete || (body.Complete != nil && *body.Complete)
		for name, f := range body.Files {
			if r.Writer == bridgeID {
				if name != wandbserver.EventsFile {
					t.Errorf("bridge wrote %s", name)
				}
				bridgeMaxBatch = max(bridgeMaxBatch, len(f.Content))
			}
			k := wf{r.Writer, name}
			if prev, seen := last[k]; seen && f.Offset < prev {
				t.Errorf("writer %q, %s: offset %d after %d", r.Writer, name, f.Offset, prev)
			}
			last[k] = f.Offset
		}
	}
	if final, _ := srv.FindRun(runID); notes > 0 && !strings.Contains(final.Notes, "<!-- bridge: begin") {
		t.Errorf("bridge wrote the run's note %d times, but the run's notes hold no section of bridge's: %q", notes, final.Notes)
	}
	if figures != 1 {
		t.Errorf("the job's figures were written into the run's summary %d times, want once", figures)
	}
	if final, _ := srv.FindRun(runID); verdicts != 1 || !slices.ContainsFunc(final.Tags, func(tg string) bool { return strings.HasPrefix(tg, "bridge-exit-") }) ||
		!strings.Contains(final.Notes, "bridge (end of job):\nbridge.exit_code: ") {
		t.Errorf("exit verdict on the run: %d writes, tags %q, notes %q", verdicts, final.Tags, final.Notes)
	}
	for _, w := range run.Writers {
		for name, f := range w.Files {
			// wandb rewrites its one summary line at offset 0 by design, and
			// its console capture (output.log) resends a line it had sent
			// unfinished: the child's, not bridge's, and timing-dependent.
			// bridge's own files may never overwrite.
			byDesign := name == wandbserver.SummaryFile || (name == wandbserver.OutputFile && w.ID != bridgeID)
			if f.Overwrites != 0 && !byDesign {
				t.Errorf("writer %q, %s: %d lines overwritten", w.ID, name, f.Overwrites)
			}
		}
	}
	t.Logf("run %s: child history %d lines, wandb's own events %d lines (%d system keys), bridge %d lines in %d file_stream requests (largest %d lines, %d resent with the same content, %d after the child finished the run), %d spooled samples, %d metric names",
		runID, len(hist.Lines), len(childEv.Lines), wandbKeys, len(ours.Lines), bridgeReqs, bridgeMaxBatch, ours.Resent, afterComplete, len(samples), len(names))
	return samples
}

// samplesIn returns the samples taken in [from, to).
func samplesIn(ss []metrics.Sample, from, to time.Time) []metrics.Sample {
	var out []metrics.Sample
	for _, s := range ss {
		if !s.Time.Before(from) && s.Time.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

func childAttempts(t *testing.T, dir string) int {
	t.Helper()
	n, err := wandbserver.ClientStreamRequests(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Both trackers at once: the same samples reach the MLflow run bridge
// creates and the W&B run the child creates, each exactly once.
func TestBothTrackers(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	wbPython(t)
	mlf := mlflowtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	j := startWBEnv(ctx, t, srv, "", []string{"MLFLOW_TRACKING_URI=" + mlf.URL, "MLFLOW_EXPERIMENT_NAME=bridge-e2e-both"},
		[]string{"--trackers", "mlflow,wandb"}, wbProject, "0")
	wbRun := strings.TrimPrefix(j.expect(ctx, t, "ready "), "ready ")
	for i := range 3 {
		j.step(ctx, t)
		if err := wandbserver.Wait(ctx, func() bool { return bridgeLineCount(t, srv, wbRun) > i }); err != nil {
			t.Fatalf("bridge sent %d W&B lines: %v", bridgeLineCount(t, srv, wbRun), err)
		}
	}
	if code := j.end(t); code != 0 {
		t.Fatalf("bridge exited %d", code)
	}
	ss := j.spooled(t)
	if n := bridgeLineCount(t, srv, wbRun); n != len(ss) {
		t.Errorf("W&B holds %d bridge lines for %d spooled samples", n, len(ss))
	}
	_, _, attempts, err := spooltest.ReadFile(j.spool)
	if err != nil || len(attempts) == 0 {
		t.Fatalf("spool: %v", err)
	}
	if attempts[0].Start.Runs["wandb"] != wbRun {
		t.Errorf("spool records W&B run %q, the child's is %q", attempts[0].Start.Runs["wandb"], wbRun)
	}
	mlRun := attempts[0].Start.Runs["mlflow"]
	hist := mlf.History(t, mlRun, "system/node_memory_used_megabytes")
	if len(hist) != len(ss) {
		t.Errorf("MLflow holds %d points for %d spooled samples", len(hist), len(ss))
	}
	if st := mlf.GetRun(t, mlRun).Info.Status; st != "FINISHED" {
		t.Errorf("MLflow run %s", st)
	}
}
