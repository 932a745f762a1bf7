//go:build wheel

// Package wheel checks the platform wheel that scripts/wheel.sh builds, as a
// user gets it: installed with `pip install --no-index` into a fresh venv,
// its bridge run against a real MLflow server (and the W&B mock with the real
// wandb client), its notebook call run from a real Python process, and
// uninstalled; and the aarch64 wheel's binary under qemu-user.
// scripts/wheel-check.sh builds the wheels and runs it with
//
//	BRIDGE_TEST_WHEEL, BRIDGE_TEST_WHEEL_AARCH64  the wheels (absolute paths)
//	BRIDGE_TEST_ZIG     zig (from .wheel-tools), to build for aarch64
//	BRIDGE_TEST_PYTHON  a python with mlflow and wandb (.venv)
//
// BRIDGE_TEST_PYTHON makes the venvs and the MLflow server; the venv's
// python reaches mlflow and wandb through PYTHONPATH, so the wheel goes into
// a venv that has nothing else.
package wheel

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

const dist = "bridge-system-metrics"

// Generous: a cold `import mlflow` alone takes seconds on two busy cores.
const deadline = 90 * time.Second

func TestMain(m *testing.M) {
	// Both are set by scripts/wheel-check.sh; without them every test would
	// have nothing to check, so this package fails rather than skips.
	for _, v := range []string{"BRIDGE_TEST_WHEEL", "BRIDGE_TEST_WHEEL_AARCH64", "BRIDGE_TEST_ZIG", mlflowtest.EnvPython} {
		if os.Getenv(v) == "" {
			fmt.Fprintf(os.Stderr, "%s is unset: run scripts/wheel-check.sh, which builds the wheels and sets it\n", v)
			os.Exit(1)
		}
	}
	for _, v := range []string{"BRIDGE_TEST_WHEEL", "BRIDGE_TEST_WHEEL_AARCH64"} {
		if !filepath.IsAbs(os.Getenv(v)) {
			fmt.Fprintf(os.Stderr, "%s=%s: give an absolute path (tests run in their package's directory)\n", v, os.Getenv(v))
			os.Exit(1)
		}
	}
	code := m.Run()
	mlflowtest.StopShared()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// wheelPath is BRIDGE_TEST_WHEEL, the x86_64 wheel under test.
func wheelPath(t *testing.T) string {
	t.Helper()
	return os.Getenv("BRIDGE_TEST_WHEEL")
}

// wheelVersion is the version in the wheel's file name.
func wheelVersion(t *testing.T) string {
	t.Helper()
	parts := strings.Split(filepath.Base(wheelPath(t)), "-")
	if len(parts) != 5 || parts[0] != strings.ReplaceAll(dist, "-", "_") {
		t.Fatalf("wheel file name %s is not %s-VERSION-py3-none-PLATFORM.whl", filepath.Base(wheelPath(t)), strings.ReplaceAll(dist, "-", "_"))
	}
	return parts[1]
}

func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// installWheel makes a fresh venv and installs the wheel into it from the
// file alone (--no-index: nothing else is fetched).
func installWheel(python, wheel, venv string) error {
	for _, args := range [][]string{
		{python, "-m", "venv", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-index", "--disable-pip-version-check", wheel},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = testbin.CleanEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

var shared struct {
	once sync.Once
	dir  string
	venv string
	err  error
}

// sharedVenv is one venv with the wheel installed, for the tests that only
// use it (TestUninstall makes its own).
func sharedVenv(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "bridge-wheel-"); shared.err == nil {
			shared.venv = filepath.Join(shared.dir, "venv")
			shared.err = installWheel(os.Getenv(mlflowtest.EnvPython), wheelPath(t), shared.venv)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.venv
}

// clientPath is the site-packages of BRIDGE_TEST_PYTHON, where mlflow and
// wandb are: the venv's python gets them through PYTHONPATH.
func clientPath(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(run(t, testbin.CleanEnv(), mlflowtest.Python(t), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
}

// unzip returns a wheel's entries in their order, and their contents by name.
func unzip(t *testing.T, path string) ([]*zip.File, map[string][]byte) {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	files := map[string][]byte{}
	for _, f := range z.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s in %s: %v", f.Name, path, err)
		}
		files[f.Name] = b
	}
	return z.File, files
}

// TestWheelRecord: RECORD lists every other file of the wheel with its
// sha256 and size, the binary is executable, and WHEEL and METADATA say what
// PEP 427 and the core metadata spec ask for.
func TestWheelRecord(t *testing.T) {
	entries, files := unzip(t, wheelPath(t))
	stem := strings.ReplaceAll(dist, "-", "_") + "-" + wheelVersion(t)
	var names []string
	for _, f := range entries {
		names = append(names, f.Name)
		mode := f.Mode().Perm()
		want := os.FileMode(0o644)
		if f.Name == stem+".data/scripts/bridge" {
			want = 0o755
		}
		if mode != want {
			t.Errorf("%s: mode %o, want %o", f.Name, mode, want)
		}
	}
	record := stem + ".dist-info/RECORD"
	if names[len(names)-1] != record {
		t.Errorf("last entry is %s, want %s", names[len(names)-1], record)
	}
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(files[record]))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		if len(fields) != 3 {
			t.Fatalf("RECORD line %q: want path,hash,size", sc.Text())
		}
		path, hash, size := fields[0], fields[1], fields[2]
		listed[path] = true
		if path == record {
			if hash != "" || size != "" {
				t.Errorf("RECORD lists itself with %q,%q; want empty hash and size", hash, size)
			}
			continue
		}
		b, ok := files[path]
		if !ok {
			t.Errorf("RECORD lists %s, which the wheel does not hold", path)
			continue
		}
		sum := sha256.Sum256(b)
		if want := "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:]); hash != want {
			t.Errorf("RECORD: %s hash %s, want %s", path, hash, want)
		}
		if size != strconv.Itoa(len(b)) {
			t.Errorf("RECORD: %s size %s, want %d", path, size, len(b))
		}
	}
	for _, n := range names {
		if !listed[n] {
			t.Errorf("%s is not in RECORD", n)
		}
	}

	wheel := string(files[stem+".dist-info/WHEEL"])
	for _, want := range []string{"Wheel-Version: 1.0\n", "Root-Is-Purelib: false\n", "Tag: py3-none-manylinux_2_17_x86_64\n"} {
		if !strings.Contains(wheel, want) {
			t.Errorf("WHEEL lacks %q:\n%s", want, wheel)
		}
	}
	meta := string(files[stem+".dist-info/METADATA"])
	head, body, ok := strings.Cut(meta, "\n\n")
	if !ok {
		t.Fatalf("METADATA has no body (the README):\n%s", meta)
	}
	for _, re := range []string{
		`(?m)^Metadata-Version: 2\.4$`, `(?m)^Name: ` + dist + `$`, `(?m)^Version: ` + regexp.QuoteMeta(wheelVersion(t)) + `$`,
		`(?m)^Summary: \S`, `(?m)^License-Expression: Apache-2\.0$`, `(?m)^License-File: LICENSE$`,
		`(?m)^Project-URL: Source, https://`, `(?m)^Requires-Python: >=3\.\d+$`, `(?m)^Description-Content-Type: text/markdown$`,
	} {
		if !regexp.MustCompile(re).MatchString(head) {
			t.Errorf("METADATA's header does not match %s:\n%s", re, head)
		}
	}
	for _, line := range regexp.MustCompile(`(?m)^License-File: (.*)$`).FindAllStringSubmatch(head, -1) {
		if _, ok := files[stem+".dist-info/licenses/"+line[1]]; !ok {
			t.Errorf("METADATA names License-File %s, which is not in .dist-info/licenses/", line[1])
		}
	}
	if !strings.HasPrefix(body, "# bridge\n") || strings.Contains(body, "](docs/") {
		t.Errorf("METADATA's body should be the README with absolute links; it starts %q", body[:min(len(body), 80)])
	}
}

// TestInstalledBridge: the venv's bridge is first on the venv's PATH, it is
// the binary itself (no Python shim), and it prints the wheel's version.
func TestInstalledBridge(t *testing.T) {
	venv := sharedVenv(t)
	bin := filepath.Join(venv, "bin", "bridge")
	env := testbin.CleanEnv("PATH=" + filepath.Join(venv, "bin") + ":" + os.Getenv("PATH"))
	if got := strings.TrimSpace(run(t, env, "sh", "-c", "command -v bridge")); got != bin {
		t.Errorf("command -v bridge = %s, want the venv's %s", got, bin)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x7fELF")) {
		t.Errorf("%s is not an ELF binary (a shim?): starts %q", bin, b[:min(len(b), 32)])
	}
	meta := strings.TrimSpace(run(t, env, filepath.Join(venv, "bin", "python"), "-c",
		"import importlib.metadata as m; print(m.version('"+dist+"'))"))
	if meta != wheelVersion(t) {
		t.Errorf("installed metadata version %s, wheel file %s", meta, wheelVersion(t))
	}
	// Through the shell, as a user types it: Debian's iproute2 has a
	// /sbin/bridge too, which the venv's must come before.
	if got, want := strings.TrimSpace(run(t, env, "sh", "-c", "bridge version")), "bridge "+meta; got != want {
		t.Errorf("bridge version = %q, want %q (the metadata's)", got, want)
	}
}

// TestUninstall: pip uninstall removes the binary and the package.
func TestUninstall(t *testing.T) {
	venv := filepath.Join(t.TempDir(), "venv")
	if err := installWheel(os.Getenv(mlflowtest.EnvPython), wheelPath(t), venv); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(venv, "bin", "bridge")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("after install: %v", err)
	}
	env := testbin.CleanEnv()
	run(t, env, filepath.Join(venv, "bin", "pip"), "uninstall", "-y", "-q", dist)
	if _, err := os.Stat(bin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after uninstall, %s: %v (want it gone)", bin, err)
	}
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import bridge_system_metrics")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("after uninstall, bridge_system_metrics still imports: %s", out)
	}
}

// TestJobUnderInstalledBridge: `bridge -- CMD` with the venv's bridge puts
// its samples in the MLflow run it creates.
func TestJobUnderInstalledBridge(t *testing.T) {
	venv := sharedVenv(t)
	srv := mlflowtest.Shared(t)
	exp := "bridge-wheel-job-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(venv, "bin", "bridge"), "--interval", "1s", "--",
		filepath.Join(venv, "bin", "python"), "-c", "import time; time.sleep(3)")
	cmd.Dir = dir
	cmd.Env = testbin.CleanEnv("MLFLOW_TRACKING_URI="+srv.URL, "MLFLOW_EXPERIMENT_NAME="+exp,
		"BRIDGE_SPOOL="+filepath.Join(dir, "spool.jsonl"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bridge: %v\n%s", err, out)
	}
	ids := srv.RunIDs(t, exp)
	if len(ids) != 1 {
		t.Fatalf("runs in %s: %v, want the one bridge created", exp, ids)
	}
	keys := srv.MetricKeys(t, ids[0], "system/")
	if !slices.Contains(keys, "system/node_memory_used_megabytes") {
		t.Errorf("the run's system metrics %v lack system/node_memory_used_megabytes", keys)
	}
	if h := srv.History(t, ids[0], "system/node_memory_used_megabytes"); len(h) < 2 {
		t.Errorf("node_memory_used_megabytes: %d samples over a 3 s job at 1 s, want 2 or more", len(h))
	}
	if v := srv.GetRun(t, ids[0]).Tags["bridge.version"]; v != wheelVersion(t) {
		t.Errorf("run tag bridge.version = %q, want %s", v, wheelVersion(t))
	}
}

// pyProc is a Python process of the venv, driven line by line on stdin.
type pyProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
}

// startPython runs testdata/script with the venv's python, mlflow and wandb
// on PYTHONPATH, in dir, and a decoy `bridge` first on PATH: the notebook
// call must use its own wheel's binary.
func startPython(t *testing.T, venv, dir string, env []string, script string, args ...string) *pyProc {
	t.Helper()
	decoy := filepath.Join(t.TempDir(), "bridge")
	if err := os.WriteFile(decoy, []byte("#!/bin/sh\necho decoy bridge on PATH was run >&2\nexit 97\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	p := &pyProc{lines: make(chan string, 16)}
	p.cmd = exec.Command(filepath.Join(venv, "bin", "python"), append([]string{src}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Env = append(testbin.CleanEnv("PYTHONPATH="+clientPath(t),
		"PATH="+filepath.Dir(decoy)+":"+os.Getenv("PATH")), env...)
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("python's stderr (with bridge's):\n%s", p.stderr.String())
		}
	})
	return p
}

// expect returns the fields of the next line that starts with word.
func (p *pyProc) expect(t *testing.T, word string) []string {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("python's output ended before %q", word)
			}
			if f := strings.Fields(line); len(f) > 0 && f[0] == word {
				return f[1:]
			}
		case <-timeout:
			t.Fatalf("no %q from python within %v", word, deadline)
		}
	}
}

// finish tells the script to go on and waits for it to exit 0.
func (p *pyProc) finish(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go on\n"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("python: %v", err)
		}
	case <-time.After(deadline):
		t.Fatalf("python did not exit within %v", deadline)
	}
}

// gone reports whether pid no longer exists.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestAttachMLflow: attach() from a Python process with an active MLflow run
// puts bridge's system metrics in that run while it trains, and bridge ends
// before the process does, by stop() or by the atexit hook, and records why.
// Beside an offline W&B run it warns and attaches to the MLflow run alone.
func TestAttachMLflow(t *testing.T) {
	venv := sharedVenv(t)
	srv := mlflowtest.Shared(t)
	for _, how := range []string{"stop", "exit", "offline-wandb"} {
		t.Run(how, func(t *testing.T) {
			exp := "bridge-wheel-attach-" + how + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			dir := t.TempDir()
			// Where an offline wandb writes; nothing outside dir.
			env := []string{"HOME=" + dir, "WANDB_DIR=" + dir, "WANDB_CACHE_DIR=" + filepath.Join(dir, "cache"),
				"WANDB_CONFIG_DIR=" + filepath.Join(dir, "config"), "WANDB_DATA_DIR=" + filepath.Join(dir, "data")}
			p := startPython(t, venv, dir, env, "attach_mlflow.py", srv.URL, exp, how)
			f := p.expect(t, "attached")
			runID, binary, trackers := f[0], f[2], f[3]
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(venv, "bin", "bridge"); binary != want {
				t.Errorf("attach used %s, want the wheel's %s", binary, want)
			}
			if trackers != "mlflow" {
				t.Errorf("attached to %s, want mlflow", trackers)
			}
			waitfor.Cond(t, deadline, "bridge's system metrics in the run", func() bool {
				return slices.Contains(srv.MetricKeys(t, runID, "system/"), "system/node_memory_used_megabytes")
			})
			p.finish(t)
			if want := "is offline: bridge writes to the W&B server, so it needs an online run; attaching to the mlflow run only"; how == "offline-wandb" && !strings.Contains(p.stderr.String(), want) {
				t.Errorf("no warning %q in python's stderr", want)
			}
			if how != "exit" {
				if got := p.expect(t, "stopped"); got[0] != "0" {
					t.Errorf("stop() returned %s, want bridge's exit status 0", got[0])
				}
			}
			if !gone(pid) {
				t.Errorf("bridge (pid %d) still runs after the Python process exited", pid)
			}
			r := srv.GetRun(t, runID)
			if r.Tags["bridge.attach_end"] != "signal terminated" {
				t.Errorf("run tag bridge.attach_end = %q, want %q (stopped before the process ended)", r.Tags["bridge.attach_end"], "signal terminated")
			}
			if r.Info.Status != "FINISHED" {
				t.Errorf("run status %s, want FINISHED (the script's, bridge never sets it)", r.Info.Status)
			}
		})
	}
}

// TestAttachRefuses: no active run, or a run bridge cannot write to, is a
// clear Python error, before any bridge starts.
func TestAttachRefuses(t *testing.T) {
	venv := sharedVenv(t)
	for _, c := range []struct{ name, code, want string }{
		{"nothing imported", "import bridge_system_metrics as b; b.attach()",
			"NoActiveRunError: no active run: call mlflow.start_run() or wandb.init() first"},
		{"mlflow without a run", "import mlflow, bridge_system_metrics as b; b.attach()",
			"NoActiveRunError: no active run"},
		{"mlflow file store", "import mlflow, bridge_system_metrics as b; mlflow.set_tracking_uri('file:./mlruns'); mlflow.start_run(); b.attach()",
			"ValueError: MLflow's tracking URI is 'file:./mlruns': bridge writes to an `mlflow server` over REST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-c", c.code)
			cmd.Dir = t.TempDir()
			// mlflow 3 refuses a file store unless told (it would never
			// reach attach's own check).
			cmd.Env = testbin.CleanEnv("PYTHONPATH="+clientPath(t), "MLFLOW_ALLOW_FILE_STORE=true")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Errorf("got %v, output:\n%s\nwant a failure with %q", err, out, c.want)
			}
		})
	}
}

// TestAttachWandb: attach() with wandb.run (project given to wandb.init, not
// in the environment) adds bridge's labelled system metrics to that run as a
// second writer, against the W&B mock with the real wandb client.
func TestAttachWandb(t *testing.T) {
	venv := sharedVenv(t)
	srv := wandbserver.StartTest(t, wandbserver.Options{APIKey: strings.Repeat("k", 40)})
	dir := t.TempDir()
	p := startPython(t, venv, dir, srv.ClientEnv(dir, ""), "attach_wandb.py", "bridge-wheel")
	runID := p.expect(t, "attached")[0]
	var lines []string
	waitfor.Cond(t, deadline, "bridge's lines in the W&B run", func() bool {
		r, ok := srv.FindRun(runID)
		if !ok {
			return false
		}
		for _, w := range r.Writers {
			if w.ID != wandbserver.Primary {
				lines = r.File(w.ID, wandbserver.EventsFile).Contents()
			}
		}
		return len(lines) > 0
	})
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatalf("bridge's first line: %v: %s", err, lines[0])
	}
	found := false
	for k := range m {
		found = found || strings.HasPrefix(k, "system.node_memory_used_megabytes/l:")
	}
	if !found {
		t.Errorf("bridge's first line has no system.node_memory_used_megabytes/l:LABEL: %s", lines[0])
	}
	p.finish(t)
	if got := p.expect(t, "stopped"); got[0] != "0" {
		t.Errorf("stop() returned %s, want 0", got[0])
	}
	if r, _ := srv.FindRun(runID); r.Project != "bridge-wheel" {
		t.Errorf("run %s is in project %q, want bridge-wheel", runID, r.Project)
	}
}

// TestGPUPath: the wheel's binary (built by zig cc with go-nvml's NVML calls
// left to run time) starts without a driver and says NVML is absent; with a
// libnvidia-ml.so.1 on the library path it loads it with dlopen and reads
// the GPU through the lazily bound calls. No GPU here: the library is
// testbin.FakeNVML, with every other NVML symbol the binary uses defined
// weakly to answer NOT_SUPPORTED.
func TestGPUPath(t *testing.T) {
	bin := filepath.Join(sharedVenv(t), "bin", "bridge")
	checkGPUPath(t, []string{bin}, bin, []string{"cc"})
}

// TestAarch64Wheel: the cross-built aarch64 wheel's binary, run under
// qemu-user with Debian's aarch64 glibc: its version, and the GPU path as in
// TestGPUPath, the stand-in library built by zig for aarch64.
func TestAarch64Wheel(t *testing.T) {
	_, files := unzip(t, os.Getenv("BRIDGE_TEST_WHEEL_AARCH64"))
	bin := filepath.Join(t.TempDir(), "bridge")
	for name, b := range files {
		if strings.HasSuffix(name, ".data/scripts/bridge") {
			if err := os.WriteFile(bin, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	qemu := []string{"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", bin}
	ver := strings.TrimSpace(run(t, testbin.CleanEnv(), qemu[0], append(qemu[1:], "version")...))
	if want := "bridge " + wheelVersion(t); ver != want {
		t.Errorf("aarch64 bridge version = %q, want %q", ver, want)
	}
	checkGPUPath(t, qemu, bin, []string{os.Getenv("BRIDGE_TEST_ZIG"), "cc", "-target", "aarch64-linux-gnu.2.17"})
}

// checkGPUPath runs `bridge sample --json` (command: bin, or an emulator and
// bin) without NVML, then with a stand-in NVML built by cc.
func checkGPUPath(t *testing.T, command []string, bin string, cc []string) {
	t.Helper()
	sample := func(env ...string) map[string]any {
		t.Helper()
		cmd := exec.Command(command[0], append(command[1:], "sample", "--json", "--window", "100ms")...)
		cmd.Env = testbin.CleanEnv(env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bridge sample: %v\n%s", err, stderr.String())
		}
		var d map[string]any
		if err := json.Unmarshal(out, &d); err != nil {
			t.Fatalf("bridge sample --json: %v\n%s", err, out)
		}
		return d
	}
	gpu := func(d map[string]any) map[string]any {
		det, _ := d["detected"].(map[string]any)
		g, _ := det["gpu"].(map[string]any)
		return g
	}

	t.Run("no driver", func(t *testing.T) {
		g := gpu(sample())
		if s, _ := g["status"].(string); !strings.HasPrefix(s, "off: NVML library libnvidia-ml.so.1 not found") {
			t.Errorf("gpu status %q, want off: NVML library libnvidia-ml.so.1 not found", s)
		}
	})

	t.Run("fake driver", func(t *testing.T) {
		d := sample("LD_LIBRARY_PATH=" + testbin.FakeNVML(t, bin, cc))
		g := gpu(d)
		if g["status"] != "on" || g["driver"] != "999.99-fake" {
			t.Fatalf("gpu detected %v, want on with driver 999.99-fake", g)
		}
		want := map[string]float64{
			"gpu_0_memory_used_megabytes":  12345,
			"gpu_0_memory_total_megabytes": 80000,
			"gpu_0_utilization_percentage": 42,
			"gpu_0_power_usage_watts":      123.456,
		}
		ms, _ := d["metrics"].([]any)
		for _, m := range ms {
			m, _ := m.(map[string]any)
			name, _ := m["name"].(string)
			if w, ok := want[name]; ok {
				if v, _ := m["value"].(float64); v != w {
					t.Errorf("%s = %v, want %v", name, m["value"], w)
				}
				delete(want, name)
			}
		}
		if len(want) > 0 {
			t.Errorf("missing GPU series: %v", want)
		}
	})
}
