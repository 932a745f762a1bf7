package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/mlflowrec"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

// The golden wire test: what bridge posts to MLflow and to W&B for a fixed
// sample sequence, diffed against testdata/golden/wire-*.txt so that a
// change in the wire format shows up in review. It runs the real binary on
// the cgroup v2 pod's fixture files (podV2) against a recording MLflow REST
// server and the W&B mock, without Python.
//
// The sequence is fixed: the first sample is taken when the child starts
// and the child exits only once both trackers have acknowledged it, so the
// final sample (taken at the child's exit) goes in a request of its own.
// Between the two, a regular sample would need the random phase before the
// second sample (uniform in --interval, 24 h) to fall within the child's
// life, a second or so; the test checks the spool holds exactly two samples.
// Between the samples the test advances the fixture's counters by fixed
// amounts (advanceCounters), so every series that needs two readings is
// there and its value fixed, except the four rates over wall-clock time
// (rateSeries), which are normalised.

const (
	goldenExperiment = "golden"
	goldenProject    = "golden"
	goldenWandbRun   = "golden01"
	goldenToken      = "golden-token"
)

// The volatile values and what replaces them in the golden files.
const (
	phTime     = "<time>"    // wall-clock times: run start and end, sample timestamps
	phRuntime  = "<runtime>" // W&B _runtime: seconds from bridge's start to the sample; how long the command ran
	phRandom   = "<random>"  // bridge.start_id: random per run
	phVersion  = "<version>" // bridge.version: the build's version
	phHostname = "<hostname>"
	phRoot     = "<root>" // the fixture tree, a temporary directory
	phDisk     = "<disk>" // rootfs_ values: statfs of the real file system under the fixture
	phRate     = "<rate>" // rateSeries: a delta over wall-clock time
)

func TestGoldenWire(t *testing.T) {
	mlf := mlflowrec.Start(t)
	root, wb := goldenJob(t, mlf, goldenExperiment)
	n := newWireNormaliser(t, root)
	checkGolden(t, "wire-mlflow.txt", "the requests bridge sent to MLflow", n.render("MLflow", mlflowRequests(n, mlf)))
	var wr []wireRequest
	for _, r := range wb.Requests() {
		wr = append(wr, wireRequest{r.Method, r.Path, r.Header, []byte(r.Body), r.Status})
	}
	checkGolden(t, "wire-wandb.txt", "the requests bridge sent to W&B", n.render("W&B", wr))
}

// TestGoldenWireRealMLflow checks the recorder against a real MLflow
// server: the same job, through mlflowrec.Proxy, sends the real server
// what testdata/golden/wire-mlflow.txt holds, once the ids the real server
// chose (experiment, run) and the experiment's name, unique on a shared
// server, are mapped to the recorder's.
func TestGoldenWireRealMLflow(t *testing.T) {
	srv := mlflowtest.Shared(t)
	mlf := mlflowrec.Proxy(t, srv.URL)
	exp := fmt.Sprintf("golden-%d", time.Now().UnixNano())
	root, _ := goldenJob(t, mlf, exp)
	n := newWireNormaliser(t, root)
	runs := srv.RunIDs(t, exp)
	if len(runs) != 1 {
		t.Fatalf("experiment %s holds runs %v, want the one bridge created", exp, runs)
	}
	// The recorder gives the first experiment created id 1.
	n.same = map[string]map[string]string{
		"name": {exp: goldenExperiment}, "experiment_name": {exp: goldenExperiment},
		"experiment_id": {srv.ExperimentID(t, exp): "1"}, "run_id": {runs[0]: mlflowrec.RunID(1)},
	}
	want, err := os.ReadFile(filepath.Join("testdata", "golden", "wire-mlflow.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := n.render("MLflow", mlflowRequests(n, mlf)); got != string(want) {
		t.Errorf("what bridge sent a real MLflow server differs from testdata/golden/wire-mlflow.txt; if TestGoldenWire passes, mocks/mlflowrec answers differently from MLflow:\n%s", lineDiff(string(want), got))
	}
}

// goldenJob runs the job whose requests the golden files hold: bridge on
// podV2's files with MLflow (mlf, experiment exp) and the W&B mock, child
// gated as the file's comment says. It returns the fixture's root and the
// W&B mock.
func goldenJob(t *testing.T, mlf *mlflowrec.Server, exp string) (string, *wandbserver.Server) {
	t.Helper()
	root := podV2(t)
	wb := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	// What the child's wandb.init would leave: bridge writes into this run.
	wb.CreateStartedRun("", goldenProject, goldenWandbRun)

	// --start-timeout and --flush-timeout at their largest: however loaded
	// the machine, the trackers start before the child and take everything
	// before bridge exits.
	cmd, _, errb := bridgeCmd(t, "--interval=24h", "--start-timeout=10m", "--flush-timeout=10m",
		"--trackers=mlflow,wandb", "--keep-spool",
		"--proc-root", filepath.Join(root, "proc"), "--cgroup-root", filepath.Join(root, "sys/fs/cgroup"),
		"--rootfs", root, "--sys-root", filepath.Join(root, "sys"), "--scopes=container,node,rootfs,netns",
		"--", "sh", "-c", "while [ ! -e go ]; do sleep 0.01; done")
	cmd.Env = append(cmd.Env,
		"HOME="+cmd.Dir,  // no ~/.mlflow/credentials or ~/.netrc of the machine's
		"LOGNAME=golden", // the run's mlflow.user, whoever runs the test
		"MLFLOW_TRACKING_URI="+mlf.URL, "MLFLOW_EXPERIMENT_NAME="+exp, "MLFLOW_TRACKING_TOKEN="+goldenToken,
		"WANDB_BASE_URL="+wb.URL(), "WANDB_API_KEY="+wbKey, "WANDB_PROJECT="+goldenProject, "WANDB_RUN_ID="+goldenWandbRun)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})

	waitfor.Cond(t, 2*time.Minute, "MLflow and W&B acknowledging bridge's first sample", func() bool {
		return slices.ContainsFunc(mlf.Requests(), func(r mlflowrec.Request) bool {
			return r.Path == "runs/log-batch" && r.Status == http.StatusOK && bytes.Contains(r.Body, []byte(`"metrics"`))
		}) && slices.ContainsFunc(wb.Requests(), func(r wandbserver.Request) bool {
			return r.Operation == "file_stream" && r.Status == http.StatusOK
		})
	})
	advanceCounters(t, root)
	if err := os.WriteFile(filepath.Join(cmd.Dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if code := exitCode(t, waitErr); code != 0 {
			t.Fatalf("bridge exited %d, want the child's 0\n%s", code, errb)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("bridge did not exit within 2 minutes of its child's go\n%s", errb)
	}
	if ss := spooled(t, cmd); len(ss) != 2 {
		t.Fatalf("the spool holds %d samples, want 2 (the first and the final): a regular sample fell within the child's life, or bridge samples differently now\n%s", len(ss), errb)
	}
	return root, wb
}

// mlflowRequests are mlf's requests for render.
func mlflowRequests(n *wireNormaliser, mlf *mlflowrec.Server) []wireRequest {
	var out []wireRequest
	for _, r := range mlf.Requests() {
		target := mlflowrec.Prefix + r.Path
		if len(r.Query) > 0 {
			q := url.Values{}
			for k, vs := range r.Query {
				for _, v := range vs {
					q.Add(k, n.alias(k, v))
				}
			}
			target += "?" + q.Encode()
		}
		out = append(out, wireRequest{r.Method, target, r.Header, r.Body, r.Status})
	}
	return out
}

// advanceCounters moves podV2's counters on, in place (bridge may keep the
// files open): node CPU 400 of 800 jiffies busy (50%), the container 3 s of
// CPU, 100 periods of which 25 throttled for 0.25 s, eth0 3 MB received and
// 1 MB sent.
func advanceCounters(t *testing.T, root string) {
	writeTree(t, root, map[string]string{
		"proc/stat": "cpu  1300 0 600 8400 100 0 0 0 0 0\ncpu0 325 0 150 2100 25 0 0 0 0 0\ncpu1 325 0 150 2100 25 0 0 0 0 0\n" +
			"cpu2 325 0 150 2100 25 0 0 0 0 0\ncpu3 325 0 150 2100 25 0 0 0 0 0\nintr 0\nctxt 0\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\n",
		"sys/fs/cgroup/cpu.stat": "usage_usec 12000000\nuser_usec 10500000\nsystem_usec 1500000\nnr_periods 600\nnr_throttled 75\nthrottled_usec 1000000\n",
		"proc/net/dev": "Inter-|   Receive                                                |  Transmit\n" +
			" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n" +
			"    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n" +
			"  eth0: 8000000    6000    0    0    0     0          0         0  3000000    4000    0    0    0     0       0          0\n",
	})
}

// rateSeries are the series whose value is a counter's delta over the
// wall-clock time between two samples: volatile, normalised to <rate>.
var rateSeries = []string{
	"container_cpu_usage_cores", "container_cpu_utilization_percentage",
	"netns_network_receive_megabytes_per_second", "netns_network_transmit_megabytes_per_second",
}

// wireRequest is one recorded request, whichever server took it.
type wireRequest struct {
	method, target string
	header         http.Header
	body           []byte
	status         int
}

// wireNormaliser renders recorded requests for a golden file: volatile
// values replaced by placeholders, JSON keys sorted, one request per block.
type wireNormaliser struct {
	root     string
	hostname string
	clients  []string // W&B client ids in order of appearance: <client id N>
	// same maps a field's (or query parameter's) values that a real server
	// chose to the recorder's: field -> value -> replacement.
	same map[string]map[string]string
}

func newWireNormaliser(t *testing.T, root string) *wireNormaliser {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return &wireNormaliser{root: root, hostname: host}
}

// alias is v, or what same maps it to as a value of field.
func (n *wireNormaliser) alias(field, v string) string {
	if r, ok := n.same[field][v]; ok {
		return r
	}
	return v
}

// wireHeaders are the headers left out: Content-Length follows the
// normalised values (a hostname's length), Accept-Encoding is Go's transport.
var wireHeaders = map[string]bool{"Content-Length": true, "Accept-Encoding": true}

func (n *wireNormaliser) render(tracker string, reqs []wireRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The requests bridge sent to %s in TestGoldenWire (cmd/bridge/golden_wire_test.go), in order.\n", tracker)
	fmt.Fprintf(&b, "# Rewrite: go test ./cmd/bridge -run TestGolden -update. Volatile values are replaced:\n")
	fmt.Fprintf(&b, "# %s %s %s %s %s %s %s %s, W&B client ids <client id N>, credentials.\n",
		phTime, phRuntime, phRandom, phVersion, phHostname, phRoot, phDisk, phRate)
	fmt.Fprintf(&b, "# W&B file_stream lines are JSON text on the wire, shown decoded; multi-line strings follow their request.\n")
	for i, r := range reqs {
		fmt.Fprintf(&b, "\n### %d. %s %s -> %d\n", i+1, r.method, n.text(r.target), r.status)
		for _, k := range slices.Sorted(maps.Keys(r.header)) {
			if wireHeaders[k] {
				continue
			}
			for _, v := range r.header[k] {
				fmt.Fprintf(&b, "%s: %s\n", k, n.header(k, v))
			}
		}
		if len(r.body) == 0 {
			continue
		}
		d := json.NewDecoder(bytes.NewReader(r.body))
		d.UseNumber()
		var body any
		if err := d.Decode(&body); err != nil {
			fmt.Fprintf(&b, "(not JSON) %q\n", n.text(string(r.body)))
			continue
		}
		var texts []string
		writeJSON(&b, n.value("", body), func(path, s string) string {
			var t strings.Builder
			t.WriteString(path + ":\n")
			for _, line := range strings.Split(s, "\n") {
				if line != "" {
					line = " " + line // no trailing blank on an empty line
				}
				t.WriteString("  |" + line + "\n")
			}
			texts = append(texts, t.String())
			return fmt.Sprintf("<%s below>", path)
		})
		b.WriteString("\n")
		for _, s := range texts {
			b.WriteString(s)
		}
	}
	return b.String()
}

// header renders one header value: credentials and W&B client ids replaced.
func (n *wireNormaliser) header(key, v string) string {
	switch key {
	case "Authorization":
		scheme, cred, _ := strings.Cut(v, " ")
		if scheme == "Basic" {
			raw, _ := base64.StdEncoding.DecodeString(cred)
			user, _, _ := strings.Cut(string(raw), ":")
			return "Basic " + user + ":<key>"
		}
		return scheme + " <credentials>"
	case "X-Wandb-Client-Id", "X-Wandb-Async-Client-Id":
		i := slices.Index(n.clients, v)
		if i < 0 {
			n.clients = append(n.clients, v)
			i = len(n.clients) - 1
		}
		return fmt.Sprintf("<client id %d>", i+1)
	}
	return n.text(v)
}

func (n *wireNormaliser) text(s string) string {
	s = commandStarted.ReplaceAllString(s, "${1}"+phTime)
	s = commandDuration.ReplaceAllString(s, "${1}"+phRuntime)
	return strings.ReplaceAll(s, n.root, phRoot)
}

// The command's start and how long it ran, in a W&B run's notes.
var (
	commandStarted  = regexp.MustCompile(`(bridge\.command_started: )\S+`)
	commandDuration = regexp.MustCompile(`(bridge\.command_duration_seconds: )\S+`)
)

// value normalises a decoded body; path is the JSON path of v ("" at the
// top, "metrics[]" for an element of metrics).
func (n *wireNormaliser) value(path string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			key := k
			if rest, ok := strings.CutPrefix(k, "system."); ok && strings.HasSuffix(rest, "/l:"+n.hostname) {
				// A W&B key: system.<name>/l:<label>, the label the hostname.
				key = strings.TrimSuffix(k, n.hostname) + phHostname
			}
			out[key] = n.value(join(path, k), e)
		}
		n.object(path, out)
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			if s, ok := e.(string); ok && strings.HasSuffix(path, ".content") {
				// A W&B file_stream line: JSON text, shown decoded.
				d := json.NewDecoder(strings.NewReader(s))
				d.UseNumber()
				var line any
				if d.Decode(&line) == nil {
					e = line
				}
			}
			out[i] = n.value(path+"[]", e)
		}
		return out
	case string:
		return n.text(n.alias(path[strings.LastIndex(path, ".")+1:], v))
	}
	return v
}

// object replaces the volatile members of one JSON object, found by its path
// and, for MLflow's tags and metrics, by its key.
func (n *wireNormaliser) object(path string, o map[string]any) {
	set := func(k, ph string) {
		if _, ok := o[k]; ok {
			o[k] = ph
		}
	}
	switch path {
	case "": // MLflow runs/create, runs/update
		set("start_time", phTime)
		set("end_time", phTime)
	case "metrics[]": // MLflow runs/log-batch
		set("timestamp", phTime)
		k, _ := o["key"].(string)
		if ph := seriesPlaceholder(strings.TrimPrefix(k, "system/")); ph != "" {
			set("value", ph)
		}
	case "tags[]": // MLflow runs/create, runs/log-batch
		ph := map[string]string{"bridge.start_id": phRandom, "bridge.version": phVersion, "bridge.hostname": phHostname,
			"bridge.command_started": phTime, "bridge.command_duration_seconds": phRuntime}
		if k, _ := o["key"].(string); ph[k] != "" {
			set("value", ph[k])
		}
	}
	if strings.HasSuffix(path, ".content[]") { // a W&B events line
		set("_timestamp", phTime)
		set("_runtime", phRuntime)
		for k := range o {
			name, _, _ := strings.Cut(strings.TrimPrefix(k, "system."), "/l:")
			if ph := seriesPlaceholder(name); ph != "" {
				o[k] = ph
			}
		}
	}
}

// seriesPlaceholder is what replaces the value of a volatile series, "" for
// the others.
func seriesPlaceholder(name string) string {
	switch {
	case strings.HasPrefix(name, "rootfs_"):
		return phDisk
	case slices.Contains(rateSeries, name):
		return phRate
	}
	return ""
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// maxInline is the most members an object of scalars has to stay on one
// line: an MLflow metric (4) or tag (2) is one line, a W&B events line one
// line per key.
const maxInline = 4

// writeJSON writes v as indented JSON with sorted keys; an array of scalars,
// and an object of at most maxInline scalars, stays on one line. A string
// with a line break is replaced by what long returns (it lists the text
// after the block, each line behind "  | ").
func writeJSON(b *strings.Builder, v any, long func(path, s string) string) {
	var walk func(path string, v any, indent string)
	scalar := func(v any) string {
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false) // the placeholders' < >
		_ = e.Encode(v)
		return strings.TrimSuffix(buf.String(), "\n")
	}
	flat := func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			return !slices.ContainsFunc(slices.Collect(maps.Values(v)), isComposite)
		case []any:
			return !slices.ContainsFunc(v, isComposite)
		}
		return true
	}
	walk = func(path string, v any, indent string) {
		switch v := v.(type) {
		case map[string]any:
			keys := slices.Sorted(maps.Keys(v))
			if len(keys) == 0 {
				b.WriteString("{}")
				return
			}
			if len(keys) <= maxInline && flat(v) && !slices.ContainsFunc(keys, func(k string) bool { return hasNewline(v[k]) }) {
				b.WriteString("{")
				for i, k := range keys {
					if i > 0 {
						b.WriteString(", ")
					}
					b.WriteString(scalar(k) + ": " + scalar(v[k]))
				}
				b.WriteString("}")
				return
			}
			b.WriteString("{\n")
			for i, k := range keys {
				b.WriteString(indent + "  " + scalar(k) + ": ")
				walk(join(path, k), v[k], indent+"  ")
				if i < len(keys)-1 {
					b.WriteString(",")
				}
				b.WriteString("\n")
			}
			b.WriteString(indent + "}")
		case []any:
			if len(v) == 0 {
				b.WriteString("[]")
				return
			}
			if flat(v) && !slices.ContainsFunc(v, hasNewline) {
				parts := make([]string, len(v))
				for i, e := range v {
					parts[i] = scalar(e)
				}
				b.WriteString("[" + strings.Join(parts, ", ") + "]")
				return
			}
			b.WriteString("[\n")
			for i, e := range v {
				b.WriteString(indent + "  ")
				walk(fmt.Sprintf("%s[%d]", path, i), e, indent+"  ")
				if i < len(v)-1 {
					b.WriteString(",")
				}
				b.WriteString("\n")
			}
			b.WriteString(indent + "]")
		case string:
			if strings.Contains(v, "\n") {
				b.WriteString(scalar(long(path, v)))
				return
			}
			b.WriteString(scalar(v))
		default:
			b.WriteString(scalar(v))
		}
	}
	walk("", v, "")
}

func isComposite(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}

func hasNewline(v any) bool {
	s, ok := v.(string)
	return ok && strings.Contains(s, "\n")
}
