package boundcheck_test

import (
	"go/ast"
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/boundcheck"
)

// reads: a file bridge does not own (sysfs, procfs, cgroupfs, the clock
// source, a config or user file, the spool's open and stat) is opened,
// stat'ed and read only through the bounded reader, which bounds each read
// in time and in size.
var reads = &boundcheck.Rule{
	Name: "reads",
	Doc: "read a file bridge does not own through " + readerPkg + " (a time and a size bound), not os.ReadFile, os.Open, " +
		"os.ReadDir, os.Stat, filepath.Glob, syscall.Open, procfs or a read of an *os.File; a file bridge owns (its spool, " +
		"its lock files) goes on the rule's allowlist (harness/boundcheck/reads_test.go) with its reason",
	Allow: readsAllowed,
	Run:   runReads,
}

// readerPkg is the bounded reader, the one package that makes these calls.
const readerPkg = "internal/kfile"

var readsAllowed = []boundcheck.Allowed{
	{Package: readerPkg, Why: "the bounded reader itself"},
	{Package: "spool", Why: "the spool is bridge's own file: its open runs under OpenWithin's stall bound, every later call on it on the writer goroutine, which nothing waits on past its bound"},
	{Package: "internal/flock", Why: "bridge's own lock files (the spool's lock), opened to take a flock"},
	{Package: "internal/attachlock", Why: "bridge's own lock file of one `bridge attach` per run"},
	{Package: "forensics", Func: "SetOOMScoreAdj", Why: "a write of bridge's own /proc/<pid>/oom_score_adj, not a read"},
	{Package: "docgen", Why: "reads the repository's docs under go generate, never in a job"},
}

// Calls that open, stat or read a path, by types.Func.FullName.
var readCalls = []string{
	"os.ReadFile", "os.Open", "os.OpenFile", "os.Create", "os.ReadDir", "os.Stat", "os.Lstat", "os.DirFS",
	"os.NewFile", "os.OpenRoot", "os.OpenInRoot", "os.CopyFS", "os.Readlink",
	"io/ioutil.ReadFile", "io/ioutil.ReadDir",
	"path/filepath.Glob", "path/filepath.Walk", "path/filepath.WalkDir",
	"syscall.Open", "syscall.Openat", "syscall.Stat", "syscall.Lstat",
	"golang.org/x/sys/unix.Open", "golang.org/x/sys/unix.Openat", "golang.org/x/sys/unix.Openat2",
	"golang.org/x/sys/unix.Stat", "golang.org/x/sys/unix.Lstat",
	"(*os.File).Read", "(*os.File).ReadAt", "(*os.File).ReadDir", "(*os.File).Readdir",
	"(*os.File).Readdirnames", "(*os.File).WriteTo",
}

// Calls that read whatever reader they are given: a read of a file when
// one of their arguments is an *os.File.
var readerCalls = []string{
	"io.ReadAll", "io.ReadFull", "io.ReadAtLeast", "io.Copy", "io.CopyN", "io.CopyBuffer",
	"bufio.NewScanner", "bufio.NewReader", "bufio.NewReaderSize",
}

// samplerCalls make a Reader, whose reads run on the caller's goroutine:
// for collectors only, whose calls bridge stops waiting for.
var samplerCalls = []string{boundcheck.Module + "/" + readerPkg + ".NewReader", boundcheck.Module + "/" + readerPkg + ".NewPathReader"}

// collector reports whether the package at path is a collector's.
func collector(path string) bool {
	return strings.HasPrefix(path, boundcheck.Module+"/metrics/")
}

func runReads(p *boundcheck.Pass) {
	p.Calls(func(call *ast.CallExpr, fn *types.Func) {
		if fn == nil || fn.Pkg() == nil {
			return
		}
		name := fn.FullName()
		switch {
		case slices.Contains(readCalls, name):
			p.Report(call, "%s of a path bridge does not own", name)
		case slices.Contains(readerCalls, name):
			for _, a := range call.Args {
				if t := p.TypeOf(a); t != nil && t.String() == "*os.File" {
					p.Report(call, "%s over an *os.File", name)
					return
				}
			}
		case strings.HasPrefix(fn.Pkg().Path(), "github.com/prometheus/procfs") && returnsError(fn):
			p.Report(call, "%s reads procfs or sysfs with no time bound (and, for some files, no size bound)", name)
		case slices.Contains(samplerCalls, name) && !collector(p.Pkg.Path):
			p.Report(call, "%s reads on its caller's goroutine, which only a collector's is bounded (by the Sampler, the Build deadline): use kfile.ReadFile", name)
		}
	})
}

// returnsError: procfs's functions that read a file return an error; its
// pure ones (ProcStat.CPUTime) do not.
func returnsError(fn *types.Func) bool {
	res := fn.Type().(*types.Signature).Results()
	for v := range res.Variables() {
		if v.Type().String() == "error" {
			return true
		}
	}
	return false
}

// Every product package keeps the rule (and every allowlist entry is used).
func TestReads(t *testing.T) {
	boundcheck.CheckTree(t, reads)
}

// The rule reports each way around the bounded reader in a planted
// package, and passes a package that reads through it, or is allowlisted.
func TestReadsPlanted(t *testing.T) {
	bad := boundcheck.CheckDir(t, reads, "testdata/reads/bad")
	want := map[string]string{ // function -> the call it makes
		"readFile": "os.ReadFile", "openThenRead": "os.Open", "readAll": "io.ReadAll", "scan": "bufio.NewScanner",
		"readDir": "os.ReadDir", "stat": "os.Stat", "glob": "path/filepath.Glob", "rawOpen": "syscall.Open",
		"procfsRead": "procfs", "sysfsRead": "sysfs", "fileRead": "(*os.File).Read", "readlink": "os.Readlink",
		"readerOutsideCollector": "kfile.NewPathReader",
	}
	got := map[string][]string{}
	for _, f := range bad {
		got[f.Func] = append(got[f.Func], f.Message)
	}
	for fn, call := range want {
		if !slices.ContainsFunc(got[fn], func(m string) bool { return strings.Contains(m, call) }) {
			t.Errorf("planted %s (%s) not reported; reported: %v", fn, call, bad)
		}
	}
	if len(got["notARead"]) > 0 {
		t.Errorf("a read of bytes in memory reported: %v", got["notARead"])
	}

	allowed := *reads
	allowed.Allow = append(slices.Clone(reads.Allow), boundcheck.Allowed{
		Package: "harness/boundcheck/testdata/reads/ok", Func: "ownLockFile", Why: "the planted package's own file"})
	if ok := boundcheck.CheckDir(t, &allowed, "testdata/reads/ok"); len(ok) > 0 {
		t.Errorf("reads through the bounded reader, or allowlisted, reported: %v", ok)
	}
	if ok := boundcheck.CheckDir(t, reads, "testdata/reads/ok"); len(ok) != 1 || ok[0].Func != "ownLockFile" {
		t.Errorf("without its allowlist entry, the planted package's own file: %v, want one finding in ownLockFile", ok)
	}
}
