// Package slurm runs a real Slurm cluster on this one machine for bridge's
// launcher tests: Debian's slurmctld and one slurmd per node, each in its own
// network and UTS namespace (its own hostname and address), munge for
// authentication (up.sh, down.sh). Tests submit jobs with srun and sbatch and
// read back, for every task, the environment the launcher gave it and what
// its command printed (task.sh).
//
// Tests call Shared for the package's one cluster and end the package with
//
//	func TestMain(m *testing.M) { os.Exit(slurm.Main(m)) }
//
// The cluster needs root, iproute2, munge and Debian's slurmctld, slurmd and
// slurm-client (prepare.sh); without them Shared skips, naming what is
// missing. A watchdog tears the cluster down if the test process dies.
package slurm

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
)

var (
	//go:embed up.sh
	upScript []byte
	//go:embed down.sh
	downScript []byte
	//go:embed task.sh
	taskScript []byte
)

// SkipPrefix starts every skip message of this package; CI treats such a
// skip as a failure (it is not in .ci/allowed-skips).
const SkipPrefix = "SKIP (Slurm cluster NOT TESTED): "

// upTimeout bounds up.sh (it waits up to 60 s for the nodes itself).
const upTimeout = 2 * time.Minute

// Cluster is a running cluster. Its methods may be called from parallel
// tests.
type Cluster struct {
	Name     string   // ClusterName: jobs see it as SLURM_CLUSTER_NAME
	Nodes    []string // node hostnames (n1, n2, ...), in node order
	HostAddr string   // this machine's (the login side's) address on the cluster network
	Dir      string   // slurm.conf, state, logs (log/), daemons' pids

	conf  string   // slurm.conf
	bin   string   // the scripts, written from this package's embedded copies
	watch *os.File // write end of the watchdog's pipe; closing it tears down
}

// Main is a TestMain body: runs the tests, then stops the shared cluster
// and the shared MLflow server (mlflowtest).
func Main(m *testing.M) int {
	code := m.Run()
	StopShared()
	mlflowtest.StopShared()
	return code
}

var shared struct {
	once sync.Once
	c    *Cluster
	skip string
	err  error
}

// Shared returns the package's cluster, started on first use (3 nodes);
// it skips the test, naming what is missing, when the cluster cannot run
// here, and fails it when the cluster does not come up.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		if shared.skip = missing(); shared.skip != "" {
			return
		}
		shared.c, shared.err = start(3)
	})
	if shared.skip != "" {
		t.Skip(SkipPrefix + shared.skip)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// StopShared tears the shared cluster down, if one was started, and removes
// its files.
func StopShared() {
	if c := shared.c; c != nil {
		if err := c.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}

// Tools the cluster needs, and the package that has each.
var tools = [][2]string{
	{"ip", "iproute2"}, {"nsenter", "util-linux"}, {"unshare", "util-linux"}, {"setsid", "util-linux"},
	{"flock", "util-linux"}, {"munged", "munge"}, {"mungekey", "munge"}, {"slurmctld", "slurmctld"},
	{"slurmd", "slurmd"}, {"srun", "slurm-client"}, {"sbatch", "slurm-client"},
	{"scontrol", "slurm-client"}, {"sinfo", "slurm-client"},
}

// missing says what keeps the cluster from running here, "" if nothing.
func missing() string {
	if os.Geteuid() != 0 {
		return "not root: network namespaces, munged and slurmd need root"
	}
	var lack, pkgs []string
	for _, tp := range tools {
		if _, err := exec.LookPath(tp[0]); err != nil {
			lack = append(lack, tp[0])
			if !slices.Contains(pkgs, tp[1]) {
				pkgs = append(pkgs, tp[1])
			}
		}
	}
	if len(lack) > 0 {
		return fmt.Sprintf("%s not found (Debian packages %s); run e2e/slurm/prepare.sh as root",
			strings.Join(lack, ", "), strings.Join(pkgs, " "))
	}
	return ""
}

func start(nodes int) (c *Cluster, err error) {
	root, err := os.MkdirTemp("", "bridge-e2e-slurm-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: filepath.Join(root, "cluster"), bin: filepath.Join(root, "bin")}
	defer func() {
		if err != nil {
			os.RemoveAll(root)
		}
	}()
	for _, d := range []string{c.Dir, c.bin} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	for name, b := range map[string][]byte{"up.sh": upScript, "down.sh": downScript, "task.sh": taskScript} {
		if err := os.WriteFile(filepath.Join(c.bin, name), b, 0o755); err != nil {
			return nil, err
		}
	}

	// The watchdog holds the read end: when this process dies, it reads
	// end of file and runs down.sh.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "up.sh"), "--watch-stdin", c.Dir)
	cmd.Env = append(withoutSlurm(os.Environ()), "NODES="+strconv.Itoa(nodes))
	cmd.Stdin = r
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the Slurm cluster (%s): %w\n%s\n%s", cmd, err, &out, c.logTails())
	}
	c.watch = w

	env, err := readEnvFile(filepath.Join(c.Dir, "cluster.env"))
	if err != nil {
		c.stop()
		return nil, err
	}
	c.Name, c.conf, c.HostAddr = env["CLUSTER_NAME"], env["SLURM_CONF"], env["HOST_ADDR"]
	c.Nodes = strings.Fields(env["NODES"])
	if c.Name == "" || c.conf == "" || c.HostAddr == "" || len(c.Nodes) != nodes {
		c.stop()
		return nil, fmt.Errorf("%s/cluster.env lacks CLUSTER_NAME, SLURM_CONF, HOST_ADDR or NODES: %v", c.Dir, env)
	}
	return c, nil
}

// stop runs down.sh, closes the watchdog's pipe and removes the files.
func (c *Cluster) stop() error {
	out, err := exec.Command(filepath.Join(c.bin, "down.sh"), c.Dir).CombinedOutput()
	if c.watch != nil {
		c.watch.Close()
	}
	if err != nil {
		return fmt.Errorf("stopping the Slurm cluster in %s: %w\n%s", c.Dir, err, out)
	}
	return os.RemoveAll(filepath.Dir(c.Dir))
}

// logTails is the end of every daemon's log, for failure messages.
func (c *Cluster) logTails() string {
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "log", "*"))
	var b strings.Builder
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", l, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// readEnvFile parses cluster.env: KEY=VALUE lines, VALUE optionally in
// double quotes.
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		env[k] = strings.Trim(v, `"`)
	}
	return env, nil
}

// withoutSlurm drops SLURM_ variables: a test run itself inside a Slurm job
// must not hand that job's identity to this cluster's jobs.
func withoutSlurm(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "SLURM_") })
}

// Env is the environment for the cluster's client commands (srun, sbatch,
// scontrol): testbin.CleanEnv without SLURM_ variables, SLURM_CONF naming
// this cluster, then extra. srun and sbatch pass it on to the tasks.
func (c *Cluster) Env(extra ...string) []string {
	return append(append(withoutSlurm(testbin.CleanEnv()), "SLURM_CONF="+c.conf), extra...)
}

// Command is a Slurm client command (srun, sbatch, scontrol, ...) for this
// cluster.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Env()
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// Scontrol runs scontrol with args and returns its output; an error fails t.
func (c *Cluster) Scontrol(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Command(ctx, "scontrol", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Wrap is cmd run under task.sh as NAME: the job's tasks record what it
// saw and printed as Task.Procs[NAME]. Wrap("child", ...) as bridge's
// command shows what bridge gave its child. Only for commands run inside a
// job of Srun, Sbatch or Submit (it needs their E2E_SLURM_JOBDIR).
func (c *Cluster) Wrap(name string, cmd ...string) []string {
	return append([]string{filepath.Join(c.bin, "task.sh"), name}, cmd...)
}
