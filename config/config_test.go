package config

import (
	"github.com/bridge-dev/bridge/tracker/mlflow/election"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/bridge-dev/bridge/config/option"
)

// testChoices stand in for the registrations' (pipeline.Choices, tested
// there), with one option of each kind a collector declares (their own
// packages test theirs: metrics/scrape's --scrape, ...).
var testChoices = Choices{Scopes: []string{"container", "node", "rootfs", "netns", "process", "gpu"}, Trackers: []string{"mlflow", "wandb"},
	Options: []option.Option{testFlag, testList, testMatch, testWait}}

var (
	testFlag = &option.Of[bool]{Key: "test-flag", Usage: "a collector's switch"}
	testList = &option.Of[[]string]{Key: "test-list", Default: []string{}, Usage: "a collector's list",
		Valid: func(l []string) ([]string, error) { return option.List(l, nil) }}
	testMatch = &option.Of[*regexp.Regexp]{Key: "test-match", Usage: "a collector's regular expression"}
	testWait  = &option.Of[time.Duration]{Key: "test-wait", Default: 2 * time.Second, Usage: "a collector's timeout",
		Valid: option.Within(10*time.Millisecond, 10*time.Minute, false)}
)

func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	clearEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs, testChoices)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return Load(fs, testChoices)
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 10*time.Second {
		t.Errorf("interval = %v, want 10s (MLflow's default)", c.Interval)
	}
	if !reflect.DeepEqual(c.Scopes, testChoices.Scopes) {
		t.Errorf("scopes = %v, want all %v", c.Scopes, testChoices.Scopes)
	}
	if c.LogLevel != "info" || testFlag.Get(c.Options) || c.NodeID != "" || !reflect.DeepEqual(c.Trackers, []string{"auto"}) {
		t.Errorf("unexpected defaults: %+v", c)
	}
	if testWait.Get(c.Options) != 2*time.Second || testMatch.Get(c.Options) != nil || len(testList.Get(c.Options)) != 0 {
		t.Errorf("a collector's options: %v", c.Options)
	}
}

// Precedence: flag > env > file > default, checked key by key.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "interval: 30s\nnode-id: from-file\nlog-level: warn\nscopes: [node, container]\n")
	c, err := load(t, []string{"--interval=5s", "--config", file}, map[string]string{
		"BRIDGE_INTERVAL": "7s", "BRIDGE_NODE_ID": "from-env",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 5*time.Second {
		t.Errorf("interval = %v, want the flag's 5s", c.Interval)
	}
	if c.NodeID != "from-env" {
		t.Errorf("node id = %q, want the env's", c.NodeID)
	}
	if c.LogLevel != "warn" {
		t.Errorf("log level = %q, want the file's warn", c.LogLevel)
	}
	if !reflect.DeepEqual(c.Scopes, []string{"node", "container"}) {
		t.Errorf("scopes = %v, want the file's list", c.Scopes)
	}
	if c.ConfigFile != file {
		t.Errorf("config file = %q", c.ConfigFile)
	}
}

// Precedence holds for a registration's option as for bridge's own.
func TestPrecedenceOfACollectorsOption(t *testing.T) {
	file := writeFile(t, "test-wait: 3s\n")
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{nil, nil, 2 * time.Second},
		{[]string{"--config", file}, nil, 3 * time.Second},
		{[]string{"--config", file}, map[string]string{"BRIDGE_TEST_WAIT": "4s"}, 4 * time.Second},
		{[]string{"--config", file, "--test-wait=5s"}, map[string]string{"BRIDGE_TEST_WAIT": "4s"}, 5 * time.Second},
	} {
		c, err := load(t, tc.args, tc.env)
		if err != nil || testWait.Get(c.Options) != tc.want {
			t.Errorf("%v %v: --test-wait %v, %v; want %v", tc.args, tc.env, testWait.Get(c.Options), err, tc.want)
		}
	}
}

// A file's number, boolean or single value is read as its text, as the
// same text in a variable would be.
func TestFileScalarsAsText(t *testing.T) {
	file := writeFile(t, "node-id: 7\nrun-name: 1.5\nnodes: 8.0\nfast-threshold: 50\nspool-sync: 0\n"+
		"spool-max-size: 4096\nscopes: node\ntest-list: 7\nkeep-spool: true\n")
	c, err := load(t, []string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "7" || c.RunName != "1.5" || c.Nodes != 8 || c.FastThreshold != 50 || c.SpoolSync != 0 ||
		c.SpoolMaxSize != 4096 || !reflect.DeepEqual(c.Scopes, []string{"node"}) || !c.KeepSpool {
		t.Errorf("got %+v", c)
	}
	if l := testList.Get(c.Options); !reflect.DeepEqual(l, []string{"7"}) {
		t.Errorf("test-list: 7 gave %q", l)
	}
}

// Variables of other tools, and BRIDGE_ variables that name no option, are
// not bridge's settings: they never stop the job.
func TestOtherVariablesIgnored(t *testing.T) {
	c, err := load(t, nil, map[string]string{"BRIDGE_NO_SUCH_OPTION": "x", "BRIDGE_TEST_PYTHON": "/nonexistent",
		"MLFLOW_TRACKING_URI": "http://", "WANDB_API_KEY": " ", "SLURM_NNODES": "many"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Nodes != 0 || c.Interval != 10*time.Second {
		t.Errorf("got %+v", c)
	}
}

func TestConfigFromEnvVariable(t *testing.T) {
	file := writeFile(t, "test-flag: true\n")
	c, err := load(t, nil, map[string]string{"BRIDGE_CONFIG": file})
	if err != nil {
		t.Fatal(err)
	}
	if !testFlag.Get(c.Options) {
		t.Error("BRIDGE_CONFIG file not read")
	}
}

// Each bad value is a usage error naming where it came from and the value.
func TestBadValues(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		file  string
		wants []string
	}{
		{"negative interval flag", []string{"--interval=-5s"}, nil, "", []string{"--interval", `"-5s"`}},
		{"interval env not a duration", nil, map[string]string{"BRIDGE_INTERVAL": "ten"}, "", []string{"BRIDGE_INTERVAL", `"ten"`, "duration"}},
		{"unknown scope", []string{"--scopes=node,gpuz"}, nil, "", []string{"--scopes", "gpuz", "known"}},
		{"unknown scope in env", nil, map[string]string{"BRIDGE_SCOPES": "cpu"}, "", []string{"BRIDGE_SCOPES", "cpu"}},
		{"bad log level", []string{"--log-level=loud"}, nil, "", []string{"--log-level", "loud"}},
		{"bad bool env", nil, map[string]string{"BRIDGE_TEST_FLAG": "maybe"}, "", []string{"BRIDGE_TEST_FLAG", "maybe", "boolean"}},
		{"a collector's list", []string{"--test-list=0,\x07"}, nil, "", []string{"--test-list", "control character"}},
		{"a collector's regular expression", nil, map[string]string{"BRIDGE_TEST_MATCH": "("}, "", []string{"BRIDGE_TEST_MATCH", "regular expression"}},
		{"a collector's duration", nil, nil, "test-wait: 1h\n", []string{"test-wait (in ", "at most 10m0s"}},
		{"unknown file key", nil, nil, "intervall: 5s\n", []string{"unknown key", "intervall", "bridge.yaml"}},
		{"bad value in file", nil, nil, "interval: -1s\n", []string{"interval (in ", "bridge.yaml", `"-1s"`}},
		{"bare number for a duration in file", nil, nil, "interval: 20\n", []string{"interval (in ", "bridge.yaml", "without a unit", "20s"}},
		{"bare number for spool-sync in file", nil, nil, "spool-sync: 1\n", []string{"spool-sync (in ", "bridge.yaml", "without a unit"}},
		{"bare fraction for a duration in file", nil, nil, "flush-timeout: 1.5\n", []string{"flush-timeout (in ", "without a unit"}},
		{"bare number for a collector's duration in file", nil, nil, "test-wait: 20\n", []string{"test-wait (in ", "without a unit"}},
		{"fraction for nodes in file", nil, nil, "nodes: 2.5\n", []string{"nodes (in ", "whole number"}},
		{"list for a duration in file", nil, nil, "interval: [1s]\n", []string{"interval (in ", "duration", "a list"}},
		{"map for a duration in file", nil, nil, "interval: {a: 1}\n", []string{"interval (in ", "duration", "a map"}},
		{"list item not a scalar in file", nil, nil, "scopes: [[node]]\n", []string{"scopes (in ", "list item"}},
		{"node id with slash", []string{"--node-id=a/b"}, nil, "", []string{"--node-id", "a/b"}},
		{"auto with mlflow", []string{"--trackers=auto,mlflow"}, nil, "", []string{"--trackers"}},
		{"proc root missing", nil, map[string]string{"BRIDGE_PROC_ROOT": "/nonexistent/proc"}, "", []string{"BRIDGE_PROC_ROOT", "/nonexistent/proc", "not a directory"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, tc.file))
			}
			_, err := load(t, args, tc.env)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrUsage) {
				t.Errorf("error does not wrap ErrUsage: %v", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestUnreadableConfigFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := load(t, nil, map[string]string{"BRIDGE_CONFIG": missing})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "BRIDGE_CONFIG") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want a usage error naming BRIDGE_CONFIG and the path", err)
	}
}

// Every option, every source: a value of the wrong type, range or form is a
// usage error naming where it came from.
func TestBadValuesEveryOption(t *testing.T) {
	type bad struct{ key, val string }
	cases := []bad{
		{"interval", "ten"}, {"interval", "-1s"}, {"interval", "1ms"}, {"interval", "48h"},
		{"fast-interval", "fast"}, {"fast-interval", "-1s"}, {"fast-interval", "1ms"},
		{"fast-threshold", "NaN"}, {"fast-threshold", "0"}, {"fast-threshold", "101"}, {"fast-threshold", "high"}, {"fast-threshold", "+Inf"},
		{"collect-timeout", "0"}, {"collect-timeout", "1h"}, {"collect-timeout", "x"},
		{"window", "-1s"}, {"window", "2h"},
		{"analysis-window", "0"}, {"analysis-window", "500ms"}, {"analysis-window", "2h"},
		{"scopes", "cpu"}, {"scopes", ","},
		{"test-flag", "maybe"},
		{"node-id", "a/b"}, {"node-id", strings.Repeat("n", 101)}, {"node-id", ".."}, {"node-id", "."},
		{"log-level", "loud"},
		{"trackers", "mlflow,none"}, {"trackers", "neptune"},
		{"run-name", "a\nb"}, {"run-name", strings.Repeat("r", 251)},
		{"spool", "a\x01b"}, {"spool", "/"},
		{"spool-max-size", "12xb"}, {"spool-max-size", "-1"}, {"spool-max-size", "1KiB"}, {"spool-max-size", "9EiB"}, {"spool-max-size", "NaN"},
		{"spool-sync", "-1s"}, {"spool-sync", "2m"}, {"spool-sync", "often"}, {"spool-sync", "1"},
		{"keep-spool", "perhaps"},
		{"flush-timeout", "-1s"}, {"flush-timeout", "30"}, {"flush-timeout", "100h"},
		{"start-timeout", "0"}, {"start-timeout", "1h"}, {"start-timeout", "soon"},
		{"kill-after", "-5s"}, {"kill-after", "25h"},
		{"proc-root", "/nonexistent/proc"}, {"cgroup-root", "/etc/passwd"}, {"rootfs", ""}, {"sys-root", "/nonexistent/sys"},
		{"test-list", "0,\x07"},
		{"metrics-addr", "70000"}, {"metrics-addr", "localhost"},
		{"test-match", "("}, {"test-match", "[z-a]"},
		{"test-wait", "1ms"}, {"test-wait", "1h"}, {"test-wait", "20"},
		{"job-key", "it's"}, {"job-key", "a b"}, {"job-key", strings.Repeat("k", 201)},
		{"nodes", "-1"}, {"nodes", "1.5"}, {"nodes", "1e3"}, {"nodes", "100001"}, {"nodes", "99999999999999999999"}, {"nodes", "many"},
		{"job-settle", "0"}, {"job-settle", "10ms"}, {"job-settle", "2m"}, {"job-settle", "1"},
		{"run-tick", "0"}, {"run-tick", "500ms"}, {"run-tick", "2h"}, {"run-tick", "60"},
		{"price-per-gpu-hour", "-1"}, {"price-per-gpu-hour", "NaN"}, {"price-per-gpu-hour", "2e6"}, {"price-per-gpu-hour", "cheap"},
		{"price-per-node-hour", "-0.5"}, {"price-per-node-hour", "+Inf"}, {"price-per-node-hour", "1e7"}, {"price-per-node-hour", "$4"},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.key] = true
		for _, via := range []string{"flag", "env", "file"} {
			if via == "env" && tc.val == "" {
				continue // an empty variable is unset, by design
			}
			t.Run(via+"/"+tc.key+"="+tc.val, func(t *testing.T) {
				var args []string
				env := map[string]string{}
				name := ""
				switch via {
				case "flag":
					args, name = []string{"--" + tc.key + "=" + tc.val}, "--"+tc.key
				case "env":
					env[EnvName(tc.key)], name = tc.val, EnvName(tc.key)
				case "file":
					p := writeFile(t, tc.key+": "+yamlQuote(tc.val)+"\n")
					args, name = []string{"--config", p}, tc.key+" (in "
				}
				_, err := loadErr(t, args, env)
				if err == nil {
					t.Fatalf("%s=%q accepted", name, tc.val)
				}
				if !errors.Is(err, ErrUsage) {
					t.Errorf("error does not wrap ErrUsage: %v", err)
				}
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error %q does not name %q", err, name)
				}
			})
		}
	}
	for _, k := range Keys(testChoices) {
		if !covered[k] {
			t.Errorf("option %s has no bad-value case", k)
		}
	}
}

// Good values of the new options, from each source.
func TestNewOptions(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.StartTimeout != 5*time.Second || c.KillAfter != 0 || c.SpoolMaxSize != 1<<30 || c.KeepSpool || c.SpoolSync != time.Second {
		t.Errorf("defaults: start %v kill-after %v spool-max-size %v keep %v spool-sync %v", c.StartTimeout, c.KillAfter, c.SpoolMaxSize, c.KeepSpool, c.SpoolSync)
	}
	c, err = load(t, []string{"--spool-max-size=512MiB", "--kill-after=10s"}, map[string]string{"BRIDGE_START_TIMEOUT": "2s", "BRIDGE_KEEP_SPOOL": "true", "BRIDGE_SPOOL_SYNC": "0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.SpoolMaxSize != 512<<20 || c.KillAfter != 10*time.Second || c.StartTimeout != 2*time.Second || !c.KeepSpool || c.SpoolSync != 0 {
		t.Errorf("got %+v", c)
	}
	c, err = load(t, []string{"--config", writeFile(t, "spool-max-size: 0\nnodes: 2000\nnode-id: 7\ntest-list: [0, 1]\nspool-sync: 1m\n")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.SpoolMaxSize != 0 || c.Nodes != 2000 || c.NodeID != "7" || !reflect.DeepEqual(testList.Get(c.Options), []string{"0", "1"}) || c.SpoolSync != time.Minute {
		t.Errorf("file: %+v", c)
	}
	if c.SpoolMaxSize.String() != "0" || ByteSize(512<<20).String() != "512MiB" {
		t.Errorf("ByteSize.String: %q %q", c.SpoolMaxSize, ByteSize(512<<20))
	}
	if c, err = load(t, []string{"--spool-sync=250ms"}, nil); err != nil || c.SpoolSync != 250*time.Millisecond {
		t.Errorf("--spool-sync=250ms: %v, %v", c.SpoolSync, err)
	}
}

// loadErr is load, but a flag that does not parse is returned, not fatal.
func loadErr(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	clearEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	RegisterFlags(fs, testChoices)
	if err := Parse(fs, args); err != nil {
		return Config{}, err
	}
	return Load(fs, testChoices)
}

func clearEnv(t *testing.T) {
	for _, k := range append(Keys(testChoices), "CONFIG") {
		t.Setenv(EnvName(k), "")
		os.Unsetenv(EnvName(k))
	}
}

func yamlQuote(s string) string {
	b, _ := json.Marshal(s) // JSON strings are YAML strings
	return string(b)
}

// The multi-node options: good values, and where each came from.
func TestJobOptions(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.JobKey != "" || c.Nodes != 0 || c.JobSettle != time.Second || c.JobKeyFrom != "" || c.NodesFrom != "" || c.NodeIDFrom != "" {
		t.Errorf("defaults: %q (%q) %d (%q) %v", c.JobKey, c.JobKeyFrom, c.Nodes, c.NodesFrom, c.JobSettle)
	}
	c, err = load(t, []string{"--job-key=slurm:alps:42.0", "--job-settle=2s"}, map[string]string{"BRIDGE_NODES": "8", "BRIDGE_NODE_ID": "node-3"})
	if err != nil {
		t.Fatal(err)
	}
	if c.JobKey != "slurm:alps:42.0" || c.JobKeyFrom != "--job-key" || c.Nodes != 8 || c.NodesFrom != "BRIDGE_NODES" ||
		c.NodeID != "node-3" || c.NodeIDFrom != "BRIDGE_NODE_ID" || c.JobSettle != 2*time.Second {
		t.Errorf("got key %q (%q) nodes %d (%q) node %q (%q) settle %v", c.JobKey, c.JobKeyFrom, c.Nodes, c.NodesFrom, c.NodeID, c.NodeIDFrom, c.JobSettle)
	}
	file := writeFile(t, "job-key: none\n")
	if c, err = load(t, []string{"--config", file}, nil); err != nil || c.JobKey != "none" || !strings.HasPrefix(c.JobKeyFrom, "job-key (in ") {
		t.Errorf("job-key none from a file: %q (%q), %v", c.JobKey, c.JobKeyFrom, err)
	}
}

// goodValues has one valid value per option; every option must have one.
var goodValues = map[string]string{
	"interval": "1s", "fast-interval": "500ms", "fast-threshold": "50", "collect-timeout": "2s", "window": "1s", "analysis-window": "30s",
	"scopes": "node,container", "test-flag": "true", "node-id": "n1", "log-level": "debug", "trackers": "none",
	"run-name": "my run", "spool": "/tmp/bridge-ws.jsonl", "spool-max-size": "1GiB", "spool-sync": "2s", "keep-spool": "true",
	"flush-timeout": "3s", "start-timeout": "4s", "kill-after": "5s", "proc-root": "/proc",
	"cgroup-root": "/sys/fs/cgroup", "rootfs": "/", "sys-root": "/sys", "test-list": "0,1", "metrics-addr": "9100",
	"test-match": "^DCGM_", "test-wait": "1s", "job-key": "slurm:alps:42.0", "nodes": "8", "job-settle": "2s",
	"run-tick": "30s", "price-per-gpu-hour": "2.5", "price-per-node-hour": "4",
}

// One whitespace rule for every option and every source: surrounding
// whitespace (a trailing newline from a YAML block, a stray space) is
// trimmed, so the value means what it means without it.
func TestWhitespaceTrimmedEveryOption(t *testing.T) {
	// The file quotes the value so that YAML keeps its whitespace.
	sources := map[string]func(key, val string) (Config, error){
		"flag": func(k, v string) (Config, error) { return load(t, []string{"--" + k + "=" + v}, nil) },
		"env":  func(k, v string) (Config, error) { return load(t, nil, map[string]string{EnvName(k): v}) },
		"file": func(k, v string) (Config, error) {
			return load(t, []string{"--config", writeFile(t, fmt.Sprintf("%s: %q\n", k, v))}, nil)
		},
	}
	norm := func(c Config) string {
		// The file's path differs from one file to the next; the *From
		// fields name it too.
		opts := c.Options
		c.Options = nil
		s := fmt.Sprintf("%+v list=%q match=%v wait=%v flag=%v", c, testList.Get(opts), testMatch.Get(opts), testWait.Get(opts), testFlag.Get(opts))
		if c.ConfigFile != "" {
			s = strings.ReplaceAll(s, c.ConfigFile, "FILE")
		}
		return s
	}
	for _, k := range Keys(testChoices) {
		good, ok := goodValues[k]
		if !ok {
			t.Errorf("option %s has no good value in this test", k)
			continue
		}
		for name, src := range sources {
			want, err := src(k, good)
			if err != nil {
				t.Fatalf("%s %s=%q: %v", name, k, good, err)
			}
			for _, val := range []string{" " + good, good + "\n", "\n" + good, "\t" + good + " \r\n"} {
				got, err := src(k, val)
				if err != nil {
					t.Errorf("%s %s=%q: %v", name, k, val, err)
				} else if norm(got) != norm(want) {
					t.Errorf("%s %s=%q gives another config than %q:\n got %s\nwant %s", name, k, val, good, norm(got), norm(want))
				}
			}
		}
	}
}

// The defaults are consistent: --job-settle's is the election's, and
// --start-timeout's is DefaultStartTimeout, which the election's
// TestStartTimeoutCoversStray holds against clearing a stray candidate.
func TestStartTimeoutCoversStray(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.JobSettle != election.DefaultSettle {
		t.Fatalf("--job-settle defaults to %v, the election to %v", c.JobSettle, election.DefaultSettle)
	}
	if c.StartTimeout != DefaultStartTimeout {
		t.Fatalf("--start-timeout defaults to %v, DefaultStartTimeout is %v", c.StartTimeout, DefaultStartTimeout)
	}
}
