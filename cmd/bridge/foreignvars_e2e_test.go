package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

// foreignCase is a value of another tool's variable that bridge cannot use
// as it is. Such variables are not bridge's to refuse: the child runs, its
// exit status is bridge's, and one line (WARN, or ERROR where a tracker
// refuses it at start) names what was wrong and what was turned off.
type foreignCase struct {
	name string
	env  []string // the variables (later ones win over the base's)
	says string   // what the one line names (the variable)
	// underNone: the value is read even with --trackers none (a node id,
	// a launcher's variable of a job with a key), so the line is there too.
	underNone bool
	// bridge is the same kind of bad value in bridge's own setting: a flag
	// (--name=value) whose BRIDGE_ variable is checked too; that is exit
	// 2 before the child starts.
	bridge string
}

// slurmStep is a one-node srun step of a job no other test uses.
func slurmStep(t *testing.T) []string {
	return []string{"SLURM_CLUSTER_NAME=fv", "SLURM_JOB_ID=" + strings.TrimPrefix(uniqueName(t), "bridge-e2e-"), "SLURM_STEP_ID=0",
		"SLURM_NODEID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_STEP_NUM_NODES=1"}
}

func foreignCases(t *testing.T) []foreignCase {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".mlflow"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".mlflow", "credentials"), []byte("[mlflow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 101)
	with := func(base []string, kv ...string) []string { return append(append([]string(nil), base...), kv...) }
	slurm := slurmStep(t)
	return []foreignCase{
		// MLflow's.
		{"node id with a space and a slash", []string{"MLFLOW_SYSTEM_METRICS_NODE_ID=gpu box/1"}, "MLFLOW_SYSTEM_METRICS_NODE_ID", true, "--node-id=gpu box/1"},
		{"node id over 100", []string{"MLFLOW_SYSTEM_METRICS_NODE_ID=" + long}, "MLFLOW_SYSTEM_METRICS_NODE_ID", true, "--node-id=" + long},
		{"node id ..", []string{"MLFLOW_SYSTEM_METRICS_NODE_ID=.."}, "MLFLOW_SYSTEM_METRICS_NODE_ID", true, "--node-id=.."},
		{"tracking URI http://", []string{"MLFLOW_TRACKING_URI=http://"}, "MLFLOW_TRACKING_URI", false, "--scrape=http://"},
		{"tracking URI sqlite", []string{"MLFLOW_TRACKING_URI=sqlite:///mlflow.db"}, "MLFLOW_TRACKING_URI", false, ""},
		{"tracking URI databricks", []string{"MLFLOW_TRACKING_URI=databricks"}, "MLFLOW_TRACKING_URI", false, ""},
		{"insecure TLS not a boolean", []string{"MLFLOW_TRACKING_INSECURE_TLS=maybe"}, "MLFLOW_TRACKING_INSECURE_TLS", false, "--no-container=maybe"},
		{"insecure TLS and a CA bundle", []string{"MLFLOW_TRACKING_INSECURE_TLS=true", "MLFLOW_TRACKING_SERVER_CERT_PATH=/ca.pem"}, "MLFLOW_TRACKING_SERVER_CERT_PATH", false, ""},
		{"CA bundle missing", []string{"MLFLOW_TRACKING_URI=https://127.0.0.1:1", "MLFLOW_TRACKING_SERVER_CERT_PATH=/nonexistent/ca.pem"}, "MLFLOW_TRACKING_SERVER_CERT_PATH", false, ""},
		{"request timeout not whole", []string{"MLFLOW_HTTP_REQUEST_TIMEOUT=1.5"}, "MLFLOW_HTTP_REQUEST_TIMEOUT", false, "--start-timeout=1.5"},
		{"token with a newline", []string{"MLFLOW_TRACKING_TOKEN=tok\nen"}, "MLFLOW_TRACKING_TOKEN", false, ""},
		{"run id MLflow refuses", []string{"MLFLOW_RUN_ID=a/b"}, "MLFLOW_RUN_ID", false, ""},
		{"experiment id MLflow refuses", []string{"MLFLOW_EXPERIMENT_ID=abc", "MLFLOW_EXPERIMENT_NAME="}, "MLFLOW_EXPERIMENT_ID", false, ""},
		{"credentials file broken", []string{"HOME=" + home}, ".mlflow/credentials", false, "--config=" + filepath.Join(home, ".mlflow", "credentials")},
		// W&B's.
		{"W&B mode", []string{"WANDB_MODE=sometimes"}, "WANDB_MODE", false, "--trackers=sometimes"},
		{"W&B base URL", []string{"WANDB_BASE_URL=api.wandb.ai"}, "WANDB_BASE_URL", false, "--scrape=api.wandb.ai"},
		{"W&B run id wandb refuses", []string{"WANDB_RUN_ID=a/b"}, "WANDB_RUN_ID", false, ""},
		{"W&B netrc unreadable", []string{"WANDB_API_KEY=", "NETRC=/dev/zero"}, "/dev/zero", false, "--config=/dev/zero"},
		{"W&B project without a key", []string{"WANDB_API_KEY=", "NETRC=/nonexistent/netrc"}, "WANDB_API_KEY", false, ""},
		// The launchers'.
		{"slurm cluster name with a space", with(slurm, "SLURM_CLUSTER_NAME=a b"), "SLURM_CLUSTER_NAME", true, "--job-key=slurm:a b:1"},
		{"slurm node id not a number", with(slurm, "SLURM_NODEID=two"), "SLURM_NODEID", true, "--node-id=two/2"},
		{"slurm node count not a number", with(slurm, "SLURM_STEP_NUM_NODES=x2"), "SLURM_STEP_NUM_NODES", true, "--nodes=x2"},
		{"slurm restart count not a number", with(slurm, "SLURM_RESTART_COUNT=-1"), "SLURM_RESTART_COUNT", true, ""},
		{"slurm start time not a number", with(slurm, "SLURM_JOB_START_TIME=yesterday 5pm"), "SLURM_JOB_START_TIME", true, ""},
		{"slurm node without a step", with(slurm, "SLURM_STEP_ID=", "SLURM_NODEID=1"), "SLURM_STEP_ID", true, ""},
		{"torchrun run id with a space", []string{"TORCHELASTIC_RUN_ID=a b " + uniqueName(t), "GROUP_RANK=0", "GROUP_WORLD_SIZE=1"}, "TORCHELASTIC_RUN_ID", true, "--job-key=a b"},
		{"torchrun restart count", []string{"TORCHELASTIC_RUN_ID=" + uniqueName(t), "GROUP_RANK=0", "GROUP_WORLD_SIZE=1", "TORCHELASTIC_RESTART_COUNT=x"}, "TORCHELASTIC_RESTART_COUNT", true, ""},
		{"indexed job index", []string{"JOB_COMPLETION_INDEX=x", "JOB_UID=" + uniqueName(t), "JOB_NAME=j"}, "JOB_COMPLETION_INDEX", true, ""},
		{"jobset uid with a quote", []string{"JOBSET_NAME=js", "JOBSET_UID=it's-" + uniqueName(t), "JOB_GLOBAL_INDEX=0", "JOBSET_GLOBAL_REPLICAS=1"}, "JOBSET_UID", true, "--job-key=it's"},
	}
}

// warnLines are bridge's WARN and ERROR log lines that name s.
func warnLines(stderr, s string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) && strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// runForeign runs bridge with args and env around a child that leaves a
// mark and exits 7, and checks the child ran, its status passed through,
// and want lines named c.says.
func runForeign(t *testing.T, c foreignCase, args, env []string, want int) {
	t.Helper()
	mark := filepath.Join(t.TempDir(), "ran")
	cmd, _, errb := bridgeCmd(t, append(args, "--", "sh", "-c", `touch "$1"; exit 7`, "sh", mark)...)
	cmd.Env = append(append(cmd.Env, env...), c.env...)
	if code := exitCode(t, cmd.Run()); code != 7 {
		t.Fatalf("exit %d, want the child's 7; stderr:\n%s", code, errb)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the child did not run: %v; stderr:\n%s", err, errb)
	}
	if got := warnLines(errb.String(), c.says); len(got) != want {
		t.Errorf("%d warnings name %s, want %d:\n%s\nstderr:\n%s", len(got), c.says, want, strings.Join(got, "\n"), errb)
	}
	if strings.Contains(errb.String(), "goroutine ") {
		t.Errorf("a Go stack trace:\n%s", errb)
	}
}

// Other tools' variables never stop the job: with --trackers none bridge
// reads only those that name the node and the job (MLflow's node id, the
// launchers'), cleans what it cannot use as it is and says so once.
func TestForeignVariablesTrackersNone(t *testing.T) {
	for _, c := range foreignCases(t) {
		t.Run(c.name, func(t *testing.T) {
			want := 0
			if c.underNone {
				want = 1
			}
			runForeign(t, c, []string{"--trackers=none", "--interval=1s", "--flush-timeout=5s"}, nil, want)
		})
	}
}

// wbEventsPosts is how many file_stream requests the W&B mock accepted
// with system-metrics lines: bridge's (the child here is no wandb client).
func wbEventsPosts(t *testing.T, wb *wandbserver.Server) int {
	t.Helper()
	n := 0
	for _, r := range wb.Requests() {
		if r.Operation != "file_stream" || r.Status/100 != 2 {
			continue
		}
		var body struct {
			Files map[string]struct {
				Content []string `json:"content"`
			} `json:"files"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
			t.Fatalf("file_stream body: %v: %s", err, r.Body)
		}
		if len(body.Files[wandbserver.EventsFile].Content) > 0 {
			n++
		}
	}
	return n
}

// The same values with both trackers set up (a real MLflow server, the W&B
// mock): the child still runs, and one line says what was turned off; the
// other tracker keeps working.
func TestForeignVariablesWithTrackers(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	srv := mlflowtest.Shared(t)
	wb := wandbserver.StartTest(t, wandbserver.Options{APIKey: wbKey})
	exp := uniqueName(t)
	const wbRun = "fv-run"
	wb.CreateStartedRun("", wbProject, wbRun) // the child's wandb would create it
	base := []string{"MLFLOW_TRACKING_URI=" + srv.URL, "MLFLOW_EXPERIMENT_NAME=" + exp,
		"WANDB_BASE_URL=" + wb.URL(), "WANDB_API_KEY=" + wbKey, "WANDB_PROJECT=" + wbProject, "WANDB_RUN_ID=" + wbRun, "HOME=" + t.TempDir()}
	for _, c := range foreignCases(t) {
		t.Run(c.name, func(t *testing.T) {
			runsBefore, postsBefore := len(srv.RunIDs(t, exp)), wbEventsPosts(t, wb)
			runForeign(t, c, []string{"--trackers=mlflow,wandb", "--interval=1s", "--start-timeout=20s", "--flush-timeout=3s", "--job-settle=100ms"}, base, 1)
			// The tracker whose variables are fine delivers this case's
			// samples: MLflow where W&B's variable is bad (each such case
			// is a new run), W&B otherwise (a launcher's cases of one job
			// share its MLflow run, so only W&B's count tells them apart).
			wandbVar := slices.ContainsFunc(c.env, func(kv string) bool { return strings.HasPrefix(kv, "WANDB_") })
			if runs := len(srv.RunIDs(t, exp)); wandbVar && runs <= runsBefore {
				t.Errorf("MLflow got no new run (%d before, %d after) with only W&B's %s bad", runsBefore, runs, c.says)
			}
			if posts := wbEventsPosts(t, wb); !wandbVar && posts <= postsBefore {
				t.Errorf("W&B got no system-metrics lines from bridge (%d posts before, %d after) with %s bad", postsBefore, posts, c.says)
			}
		})
	}
	if ids := srv.RunIDs(t, exp); len(ids) == 0 {
		t.Error("no case reached MLflow: the other tracker should keep working where only W&B's variable is bad")
	}
}

// The contrast: the same kind of bad value in bridge's own setting, as a
// flag and as its BRIDGE_ variable, is exit 2 naming it before the child
// starts.
func TestBridgeOwnSettingExit2(t *testing.T) {
	for _, c := range foreignCases(t) {
		if c.bridge == "" {
			continue
		}
		flag, value, _ := strings.Cut(strings.TrimPrefix(c.bridge, "--"), "=")
		for _, how := range []struct {
			args []string
			env  []string
			name string
		}{
			{[]string{c.bridge}, nil, "--" + flag},
			{nil, []string{"BRIDGE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) + "=" + value}, "BRIDGE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))},
		} {
			t.Run(c.name+"/"+how.name, func(t *testing.T) {
				mark := filepath.Join(t.TempDir(), "ran")
				cmd, _, errb := bridgeCmd(t, append(how.args, "--", "touch", mark)...)
				cmd.Env = append(cmd.Env, how.env...)
				if code := exitCode(t, cmd.Run()); code != 2 {
					t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb)
				}
				if !strings.Contains(errb.String(), how.name) {
					t.Errorf("the message does not name %s:\n%s", how.name, errb)
				}
				if _, err := os.Stat(mark); err == nil {
					t.Error("the child ran despite bridge's own bad setting")
				}
			})
		}
	}
}

// A store bridge cannot post to (sqlite:, as MLflow's quickstart sets it):
// the start's warning and the end-of-run table say the same thing, what
// to do, and where the samples are; the sync command the table prints
// uploads them once a server serves the store.
func TestNonHTTPTrackingURISaysWhatToDo(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := uniqueName(t)
	cmd, _, errb := bridgeCmd(t, "--interval=1s", "--", "sh", "-c", "exit 3")
	cmd.Env = append(cmd.Env, "MLFLOW_TRACKING_URI=sqlite:///mlflow.db", "MLFLOW_EXPERIMENT_NAME="+exp)
	if code := exitCode(t, cmd.Run()); code != 3 {
		t.Fatalf("exit %d, want the child's 3; stderr:\n%s", code, errb)
	}
	out := errb.String()
	const fix = "mlflow server --backend-store-uri sqlite:///mlflow.db"
	if w := warnLines(out, "MLFLOW_TRACKING_URI"); len(w) != 1 || !strings.Contains(w[0], fix) {
		t.Errorf("want one warning saying %q:\n%s", fix, out)
	}
	_, table, _ := strings.Cut(out, "bridge: end of run")
	row := ""
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "mlflow ") {
			row = l
		}
	}
	if !strings.Contains(row, "off: ") || !strings.Contains(row, fix) || strings.Contains(table, "none configured") {
		t.Fatalf("the end-of-run table does not say what the warning said (%q):\n%s", fix, table)
	}
	_, path, ok := strings.Cut(row, "upload the samples to it later with: bridge sync ")
	if path = strings.TrimSpace(path); !ok || path != spoolPath(t, cmd) {
		t.Fatalf("the table names no `bridge sync %s`: %q", spoolPath(t, cmd), row)
	}
	// As the row says: a server on the store, MLFLOW_TRACKING_URI its URL.
	if code, out := syncCmd(t, srv, exp, path); code != 0 {
		t.Fatalf("bridge sync %s: exit %d\n%s", path, code, out)
	}
	ids := srv.RunIDs(t, exp)
	if len(ids) != 1 || len(srv.MetricKeys(t, ids[0], "system/")) == 0 {
		t.Errorf("after the sync, runs %v of %s hold no system metrics", ids, exp)
	}
}

// helpLayout checks how the help reads on a terminal: --version (and
// every other flag that takes no value) shown plainly, no tab (a
// terminal's tab stops would move a section), the trackers' variables
// indented as the usage lines, and their descriptions, continuation
// lines included, starting in one column.
func helpLayout(t *testing.T, help string) {
	t.Helper()
	if strings.Contains(help, "[=true|false]") || !regexp.MustCompile(`(?m)^ +--version +print bridge's version and exit$`).MatchString(help) {
		t.Errorf("the help does not show --version plainly:\n%s", help)
	}
	if strings.Contains(help, "\t") {
		t.Errorf("the help holds a tab:\n%q", help)
	}
	cols := map[string]int{}
	for _, line := range strings.Split(help, "\n") {
		for _, v := range []string{"MLFLOW_TRACKING_URI ", "WANDB_API_KEY ", "WANDB_MODE ", "or path store is not one"} {
			if i := strings.Index(line, v); i >= 0 && strings.TrimSpace(line[:i]) == "" {
				if v[len(v)-1] == ' ' { // a variable: its description's column
					if i != 2 {
						t.Errorf("%q is indented by %d, the usage lines by 2", line, i)
					}
					i += len(v) + len(line[i+len(v):]) - len(strings.TrimLeft(line[i+len(v):], " "))
				}
				cols[line] = i
			}
		}
	}
	if len(cols) != 4 {
		t.Fatalf("found %d of the 4 tracker-variable lines looked for:\n%s", len(cols), help)
	}
	want := -1
	for _, c := range cols {
		if want < 0 {
			want = c
		}
		if c != want {
			t.Errorf("the trackers' variables' descriptions start in different columns: %v", cols)
			break
		}
	}
}

// --help and -h print the usage on stdout (exit 0), naming the trackers'
// variables and what --trackers auto turns on; --version prints the
// version. A usage error still goes to stderr with exit 2.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel() // mostly waits on processes and servers (CI: -parallel)
	raw, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := "bridge " + strings.TrimSpace(string(raw)) + "\n"
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"sample", "--help"}, {"sync", "-h"}, {"attach", "--help"}, {"--interval=5s", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd, out, errb := bridgeCmd(t, args...)
			if code := exitCode(t, cmd.Run()); code != 0 || errb.Len() != 0 {
				t.Fatalf("exit %d, stderr %q: want 0 and nothing on stderr", code, errb)
			}
			for _, want := range []string{"usage:", "--trackers", "MLFLOW_TRACKING_URI", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_PROJECT",
				"WANDB_MODE", "--trackers auto (the default) turns on MLflow when MLFLOW_TRACKING_URI is set", "--version"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the help does not say %q:\n%s", want, out)
				}
			}
			helpLayout(t, out.String())
		})
	}
	for _, args := range [][]string{{"--version"}, {"version"}, {"sample", "--version"}} {
		cmd, out, errb := bridgeCmd(t, args...)
		if code := exitCode(t, cmd.Run()); code != 0 || out.String() != version || errb.Len() != 0 {
			t.Errorf("bridge %s: exit %d, stdout %q, stderr %q; want 0 and %q", strings.Join(args, " "), code, out, errb, version)
		}
	}
	cmd, out, errb := bridgeCmd(t, "--no-such-flag", "--", "true")
	if code := exitCode(t, cmd.Run()); code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "no-such-flag") {
		t.Errorf("a usage error: exit %d, stdout %q, stderr %q; want 2 on stderr", code, out, errb)
	}
}
