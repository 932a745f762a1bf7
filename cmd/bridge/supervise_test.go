package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/spooltest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/harness/waitfor"
	"github.com/bridge-dev/bridge/metrics"
)

// bridgeCmd prepares the real binary with no tracker and the spool in a temp
// dir, in an environment without the trackers' variables.
func bridgeCmd(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	bin := testbin.Bridge(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv("BRIDGE_SPOOL=" + filepath.Join(dir, "spool.jsonl"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

func cleanEnv(extra ...string) []string { return testbin.CleanEnv(extra...) }

func exitCode(t *testing.T, err error) int { t.Helper(); return testbin.ExitCode(t, err) }

// spooled reads the samples of the spool a bridgeCmd wrote (BRIDGE_SPOOL).
func spooled(t *testing.T, cmd *exec.Cmd) []metrics.Sample {
	t.Helper()
	ss, _, _, err := spooltest.ReadFile(spoolPath(t, cmd))
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// spoolPath is the spool a bridgeCmd writes (BRIDGE_SPOOL).
func spoolPath(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	for _, kv := range cmd.Env {
		if path, ok := strings.CutPrefix(kv, "BRIDGE_SPOOL="); ok {
			return path
		}
	}
	t.Fatal("the command has no BRIDGE_SPOOL")
	return ""
}

func TestExitCodePassedThrough(t *testing.T) {
	cmd, _, errb := bridgeCmd(t, "--interval=200ms", "--", "sh", "-c", "sleep 0.5; exit 3")
	if code := exitCode(t, cmd.Run()); code != 3 {
		t.Fatalf("exit code = %d, want 3; stderr:\n%s", code, errb)
	}
	if !strings.Contains(errb.String(), "end of run") || !strings.Contains(errb.String(), "exit status") {
		t.Errorf("no end-of-run summary on stderr:\n%s", errb)
	}
}

func TestStdioAndEnvironmentPassThrough(t *testing.T) {
	cmd, out, errb := bridgeCmd(t, "--", "sh", "-c", `read line; echo "got $line $MY_VAR"; echo to-stderr >&2`)
	cmd.Env = append(cmd.Env, "MY_VAR=kept")
	cmd.Stdin = strings.NewReader("hello\n")
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, errb)
	}
	if got := out.String(); got != "got hello kept\n" {
		t.Errorf("stdout = %q, want the child's line only", got)
	}
	if !strings.Contains(errb.String(), "to-stderr") {
		t.Errorf("child's stderr missing:\n%s", errb)
	}
}

// SIGTERM sent to bridge reaches the child, which traps it, then dies of it:
// bridge exits 128+15.
func TestSIGTERMForwardedAnd143(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "trapped")
	ready := filepath.Join(dir, "ready")
	script := `trap 'echo trapped > ` + marker + `; trap - TERM; kill -TERM $$' TERM; touch ` + ready + `; while :; do sleep 0.05; done`
	cmd, _, errb := bridgeCmd(t, "--", "sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 10*time.Second, ready)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := exitCode(t, cmd.Wait())
	if code != 143 {
		t.Fatalf("exit code = %d, want 143; stderr:\n%s", code, errb)
	}
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "trapped" {
		t.Fatalf("the child's trap did not run (marker: %q, %v)", b, err)
	}
	if !strings.Contains(errb.String(), "killed by SIGTERM, forwarded by bridge") {
		t.Errorf("summary does not say the signal was forwarded:\n%s", errb)
	}
}

func TestSignalDeathIs128PlusN(t *testing.T) {
	cmd, _, errb := bridgeCmd(t, "--", "sh", "-c", "kill -KILL $$")
	if code := exitCode(t, cmd.Run()); code != 137 {
		t.Fatalf("exit code = %d, want 137; stderr:\n%s", code, errb)
	}
}

// Usage errors exit 2 before the child starts, naming the flag or variable.
func TestUsageErrorsExit2BeforeChild(t *testing.T) {
	cases := []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--interval=-5s"}, "", "--interval"},
		{[]string{"--scopes=node,bogus"}, "", "bogus"},
		{nil, "BRIDGE_INTERVAL=soon", "BRIDGE_INTERVAL"},
		{[]string{"--config=/nonexistent/bridge.yaml"}, "", "/nonexistent/bridge.yaml"},
		{[]string{"--no-such-flag"}, "", "no-such-flag"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " ")+tc.env, func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(dir, "ran")
			args := append(append([]string{}, tc.args...), "--", "touch", marker)
			cmd, _, errb := bridgeCmd(t, args...)
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			if code := exitCode(t, cmd.Run()); code != 2 {
				t.Fatalf("exit code = %d, want 2; stderr:\n%s", code, errb)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("message does not name %q:\n%s", tc.want, errb)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the child ran despite the usage error")
			}
		})
	}
	cmd, _, errb := bridgeCmd(t)
	if code := exitCode(t, cmd.Run()); code != 2 || !strings.Contains(errb.String(), "no command given") {
		t.Errorf("no command: code %d, stderr:\n%s", code, errb)
	}
	cmd, _, errb = bridgeCmd(t, "--", "/nonexistent/train")
	if code := exitCode(t, cmd.Run()); code != 127 {
		t.Errorf("missing command: code %d, want 127; stderr:\n%s", code, errb)
	}
}

// When bridge is not PID 1 it is the child subreaper: an orphaned
// grandchild is reparented to bridge (and reaped by it).
func TestSubreaperAdoptsOrphans(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	ppidFile := filepath.Join(dir, "ppid")
	script := `sh -c 'sleep 3 & echo $! > ` + pidFile + `'; sleep 0.5; awk '/^PPid:/{print $2}' /proc/$(cat ` + pidFile + `)/status > ` + ppidFile
	cmd, _, errb := bridgeCmd(t, "--", "sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Fatalf("code %d; stderr:\n%s", code, errb)
	}
	b, err := os.ReadFile(ppidFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("orphan's parent = %s, want bridge (pid %d)", got, cmd.Process.Pid)
	}
}

// As PID 1 of a new pid namespace bridge reaps orphaned zombies. The control
// run (python's subprocess.run as PID 1, which waits for its own child only)
// shows that the check can fail.
func TestPID1ReapsZombies(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare(1) not installed")
	}
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot create a pid namespace here (needs root): %v %s", err, out)
	}
	// The orphan exits after 0.2 s; 1 s later, count zombies in the namespace.
	check := `sh -c 'sleep 0.2 &'; sleep 1.2; n=0; for s in /proc/[0-9]*/stat; do case "$(cut -d" " -f3 $s 2>/dev/null)" in Z) n=$((n+1));; esac; done; echo zombies=$n`
	bin := testbin.Bridge(t)
	dir := t.TempDir()

	ctl := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "python3", "-c",
		"import subprocess, sys; subprocess.run(['sh', '-c', sys.argv[1]])", check)
	ctlOut, err := ctl.CombinedOutput()
	if err != nil {
		t.Fatalf("control: %v\n%s", err, ctlOut)
	}
	if !strings.Contains(string(ctlOut), "zombies=1") {
		t.Fatalf("control without bridge should leave one zombie, got: %s", ctlOut)
	}

	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", bin, "--trackers=none", "--spool", filepath.Join(dir, "s.jsonl"), "--", "sh", "-c", check)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bridge as PID 1: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "zombies=0") {
		t.Fatalf("bridge as PID 1 left a zombie:\n%s", out)
	}
}

// In a terminal the child's process group gets the terminal: Ctrl-C reaches
// it as it would without bridge, and interactive reads work. `script` gives
// bridge a pseudo-terminal; the ^C byte is typed into it once the child runs.
func TestCtrlCInTerminal(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) not installed")
	}
	bin := testbin.Bridge(t)
	dir := t.TempDir()
	ready, reading := filepath.Join(dir, "ready"), filepath.Join(dir, "reading")
	child := `trap "echo got-int; exit 130" INT; touch ` + reading + `; read -r line; echo "read:$line"; touch ` + ready + `; while :; do sleep 0.05; done`
	cmd := exec.Command("script", "-qec", "exec "+bin+" --trackers=none --spool "+filepath.Join(dir, "s.jsonl")+" -- sh -c '"+child+"' 2>"+filepath.Join(dir, "err"), "/dev/null")
	cmd.Env = cleanEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.File(t, 30*time.Second, reading) // the terminal is the child's
	stdin.Write([]byte("typed\n"))
	waitfor.File(t, 30*time.Second, ready)
	stdin.Write([]byte{3}) // ^C
	code := exitCode(t, cmd.Wait())
	if code != 130 || !strings.Contains(out.String(), "read:typed") || !strings.Contains(out.String(), "got-int") {
		errOut, _ := os.ReadFile(filepath.Join(dir, "err"))
		t.Fatalf("exit %d, terminal output %q; bridge's stderr:\n%s", code, out.String(), errOut)
	}
}

// A process orphaned inside the job is adopted by bridge (the subreaper) and
// still counted in the process_ scope.
func TestOrphansStayInProcessScope(t *testing.T) {
	cmd, _, errb := bridgeCmd(t, "--interval=200ms", "--", "sh", "-c", "(sleep 3 &); sleep 1.5")
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb)
	}
	ss := spooled(t, cmd)
	most := 0.0
	for _, s := range ss {
		if v, ok := s.Value("process_count"); ok {
			most = max(most, v)
		}
	}
	// sh, its `sleep 1.5`, and the orphaned `sleep 3` now parented by bridge.
	if most != 3 {
		t.Fatalf("process_count peaked at %v over %d samples, want 3 (sh, sleep, adopted orphan)", most, len(ss))
	}
}

// What every job on an ordinary machine sees is one short line at debug
// level, nothing at the default level: lowering bridge's oom_score_adj
// needs CAP_SYS_RESOURCE, which most containers lack; a machine without an
// NVIDIA driver has no GPU metrics.
func TestOOMScoreLineIsShortDebug(t *testing.T) {
	// Decided apart from bridge, so that a bridge that lost the line
	// cannot pass as one that found a GPU.
	noNVML, known := nvmlNotLoadable()
	for _, level := range []string{"info", "debug"} {
		cmd, _, errb := bridgeCmd(t, "--log-level="+level, "--", "true")
		if code := exitCode(t, cmd.Run()); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, errb)
		}
		for _, what := range []string{"oom_score_adj", "GPU metrics off"} {
			var lines []string
			for _, l := range strings.Split(errb.String(), "\n") {
				if strings.Contains(l, what) {
					lines = append(lines, l)
				}
			}
			switch {
			case level == "info" && len(lines) != 0:
				t.Errorf("%s at info level: %q", what, lines)
			case level == "debug" && len(lines) == 0 && what == "GPU metrics off" && !(known && noNVML):
				// libnvidia-ml.so.1 is there (or it cannot be told): a
				// machine with GPUs has nothing to say.
			case level == "debug" && (len(lines) != 1 || !strings.Contains(lines[0], "level=DEBUG") || len(lines[0]) > 300):
				t.Errorf("%s at debug level, want one short DEBUG line: %q", what, lines)
			}
		}
	}
}

// nvmlNotLoadable reports whether the dynamic loader would not find
// libnvidia-ml.so.1 for bridge: not in LD_LIBRARY_PATH, the loader's cache
// (ldconfig -p) or its default directories. known is false where the cache
// cannot be read.
func nvmlNotLoadable() (absent, known bool) {
	const lib = "libnvidia-ml.so.1"
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		ldconfig = "/sbin/ldconfig"
	}
	cache, err := exec.Command(ldconfig, "-p").Output()
	if err != nil {
		return false, false
	}
	if strings.Contains(string(cache), lib+" ") {
		return false, true
	}
	dirs := append(filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")), "/lib", "/usr/lib", "/lib64", "/usr/lib64")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
			return false, true
		}
	}
	return true, true
}
