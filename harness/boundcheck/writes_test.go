package boundcheck_test

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/boundcheck"
)

// writes: every request bridge sends to a tracker goes through
// tracker.Request, the one call path that applies the write policy
// (tracker.Writes: the end of a run retried within --flush-timeout). A
// caller that retries the whole call itself marks its context
// tracker.OneAttempt; only a sink's Send (the Forwarder retries it, with
// its own backoff) and Start (the start retries it) do.
var writes = &boundcheck.Rule{
	Name: "writes",
	Doc: "send a request to a tracker only inside the attempt function given to tracker.Request (resty's R, Execute, Post, " +
		"Put... there, not outside), never with net/http's client; mark a context tracker.OneAttempt only where the caller " +
		"retries the whole call (a sink's Send or Start, on the rule's allowlist in harness/boundcheck/writes_test.go)",
	Allow: writesAllowed,
	Run:   runWrites,
}

var writesAllowed = []boundcheck.Allowed{
	{Package: "tracker/mlflow", Func: "(*Sink).Send", Why: "OneAttempt: the Forwarder retries Send (tracker/forward.go)"},
	{Package: "tracker/mlflow", Func: "(*Sink).Start", Why: "OneAttempt: pipeline.StartSinksWith and the Forwarder's late start retry Start"},
	{Package: "tracker/wandb", Func: "(*Sink).Send", Why: "OneAttempt: the Forwarder retries Send (tracker/forward.go)"},
	{Package: "tracker/wandb", Func: "(*Sink).Start", Why: "OneAttempt: pipeline.StartSinksWith and the Forwarder's late start retry Start"},
	{Package: "metrics/scrape", Why: "net/http: scrapes --scrape exporters, not a tracker, within its own bounds (docs/prometheus.md)"},
}

const (
	restyPkg   = "github.com/go-resty/resty/v2"
	trackerPkg = boundcheck.Module + "/tracker"
)

// resty's methods that make or send a request.
var (
	restyClient  = []string{"R", "NewRequest"}
	restyRequest = []string{"Execute", "Send", "Get", "Head", "Post", "Put", "Patch", "Delete", "Options"}
)

// net/http's calls that send a request.
var httpSends = []string{
	"net/http.Get", "net/http.Head", "net/http.Post", "net/http.PostForm",
	"(*net/http.Client).Do", "(*net/http.Client).Get", "(*net/http.Client).Head", "(*net/http.Client).Post",
	"(*net/http.Client).PostForm", "(*net/http.Transport).RoundTrip",
}

func runWrites(p *boundcheck.Pass) {
	// The attempt functions given to tracker.Request: the one place a
	// request may be made.
	var inside [][2]token.Pos
	p.Calls(func(call *ast.CallExpr, fn *types.Func) {
		if fn == nil || fn.FullName() != trackerPkg+".Request" {
			return
		}
		for _, a := range call.Args {
			if lit, ok := ast.Unparen(a).(*ast.FuncLit); ok {
				inside = append(inside, [2]token.Pos{lit.Pos(), lit.End()})
			}
		}
	})
	p.Calls(func(call *ast.CallExpr, fn *types.Func) {
		if fn == nil || fn.Pkg() == nil {
			return
		}
		name := fn.FullName()
		switch {
		case name == trackerPkg+".OneAttempt":
			p.Report(call, "tracker.OneAttempt: its requests are not retried by the write policy; only a caller that retries the whole call may mark it")
		case slices.Contains(httpSends, name):
			p.Report(call, "%s sends a request outside tracker.Request", name)
		case fn.Pkg().Path() == restyPkg && restyCall(fn):
			if !slices.ContainsFunc(inside, func(r [2]token.Pos) bool { return call.Pos() >= r[0] && call.End() <= r[1] }) {
				p.Report(call, "resty's %s outside the attempt function given to tracker.Request: the request is sent once, not by the write policy", fn.Name())
			}
		}
	})
}

// restyCall: a method of resty's Client or Request that makes or sends a
// request.
func restyCall(fn *types.Func) bool {
	recv := fn.Type().(*types.Signature).Recv()
	if recv == nil {
		return false
	}
	t := recv.Type()
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	named, ok := t.(*types.Named)
	if !ok {
		return false
	}
	switch named.Obj().Name() {
	case "Client":
		return slices.Contains(restyClient, fn.Name())
	case "Request":
		return slices.Contains(restyRequest, fn.Name())
	}
	return false
}

// Every product package keeps the rule (and every allowlist entry is used).
func TestWrites(t *testing.T) {
	boundcheck.CheckTree(t, writes)
}

// The rule reports each way around tracker.Request in a planted package,
// and passes requests made inside it and an allowlisted OneAttempt.
func TestWritesPlanted(t *testing.T) {
	bad := boundcheck.CheckDir(t, writes, "testdata/writes/bad")
	want := map[string]string{ // function -> what it does
		"postOnce": "resty's R", "putOnce": "resty's Put", "requestEscapes": "resty's Execute",
		"plainHTTP": "(*net/http.Client).Do", "httpGet": "net/http.Get", "oneAttempt": "tracker.OneAttempt",
		"nestedNotAttempt": "resty's R",
	}
	got := map[string][]string{}
	for _, f := range bad {
		got[f.Func] = append(got[f.Func], f.Message)
	}
	for fn, what := range want {
		if !slices.ContainsFunc(got[fn], func(m string) bool { return strings.Contains(m, what) }) {
			t.Errorf("planted %s (%s) not reported; reported: %v", fn, what, bad)
		}
	}

	allowed := *writes
	allowed.Allow = append(slices.Clone(writes.Allow), boundcheck.Allowed{
		Package: "harness/boundcheck/testdata/writes/ok", Func: "(*sink).Send", Why: "the planted sink's Send, which a forwarder retries"})
	if ok := boundcheck.CheckDir(t, &allowed, "testdata/writes/ok"); len(ok) > 0 {
		t.Errorf("requests inside tracker.Request, or an allowlisted OneAttempt, reported: %v", ok)
	}
	if ok := boundcheck.CheckDir(t, writes, "testdata/writes/ok"); len(ok) != 1 || ok[0].Func != "(*sink).Send" {
		t.Errorf("without its allowlist entry, the planted Send's OneAttempt: %v, want one finding in (*sink).Send", ok)
	}
}
