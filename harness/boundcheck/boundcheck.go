// Package boundcheck keeps product code inside bridge's bounds, by
// construction rather than by review: each bound is a Rule run over the
// typed syntax of every product package (as a go/analysis Analyzer runs
// over a package), and `go test` fails on a place that goes around it.
// Product code is the module's non-test code outside harness/, mocks/,
// e2e/, bench/ and scripts/.
//
// A rule is one file, <rule>_test.go: the Rule, its allowlist (each place
// with its reason), a test that runs it over the module (CheckTree), and a
// test that shows it reports a planted violation and passes an allowed
// one (CheckDir over testdata/<rule>/...).
package boundcheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/typecheck"
)

// Module is the module's path: Allowed.Package and Product are relative to
// it.
const Module = "github.com/bridge-dev/bridge"

// Rule is one bound, checked package by package.
type Rule struct {
	// Name is short, for messages ("reads").
	Name string
	// Doc says what the rule asks, and how to keep it.
	Doc string
	// Allow are the places the rule does not apply to, each with why.
	Allow []Allowed
	// Run reports what the package does against the rule.
	Run func(*Pass)
}

// Allowed is one place a rule lets be.
type Allowed struct {
	// Package is the import path relative to the module ("spool").
	Package string
	// Func is the function the place is in, as Finding.Func names it
	// ("SetOOMScoreAdj", "(*Spool).Close"); "": the whole package.
	Func string
	// Why is the reason, for the reader of the allowlist; required.
	Why string
}

// Pass is a Rule's run over one package.
type Pass struct {
	Pkg   *typecheck.Package
	found []finding
}

type finding struct {
	pos token.Pos
	msg string
}

// Report records that n goes around the rule.
func (p *Pass) Report(n ast.Node, format string, args ...any) {
	p.found = append(p.found, finding{n.Pos(), fmt.Sprintf(format, args...)})
}

// TypeOf is the type of expression e, nil when unknown.
func (p *Pass) TypeOf(e ast.Expr) types.Type { return p.Pkg.Info.TypeOf(e) }

// Callee is the function or method call calls, nil for a call of a
// function value, a conversion or a builtin.
func (p *Pass) Callee(call *ast.CallExpr) *types.Func {
	fun := ast.Unparen(call.Fun)
	if ix, ok := fun.(*ast.IndexExpr); ok { // f[T](...)
		fun = ix.X
	}
	var id *ast.Ident
	switch f := fun.(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	fn, _ := p.Pkg.Info.Uses[id].(*types.Func)
	return fn
}

// Calls runs visit on every call in the package's files.
func (p *Pass) Calls(visit func(call *ast.CallExpr, callee *types.Func)) {
	for _, f := range p.Pkg.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				visit(call, p.Callee(call))
			}
			return true
		})
	}
}

// Finding is one place that goes around a rule.
type Finding struct {
	Rule    string
	Package string // relative to the module
	File    string // relative to the module root
	Line    int
	Func    string // the function it is in (Allowed.Func); "" at package level
	Message string
}

func (f Finding) String() string {
	in := ""
	if f.Func != "" {
		in = " in " + f.Func
	}
	return fmt.Sprintf("%s:%d%s: %s [%s]", f.File, f.Line, in, f.Message, f.Rule)
}

// Product reports whether the package at import path is product code.
func Product(path string) bool {
	rel, ok := relative(path)
	if !ok {
		return false
	}
	top, _, _ := strings.Cut(rel, "/")
	return !slices.Contains([]string{"harness", "mocks", "e2e", "bench", "scripts"}, top)
}

func relative(path string) (string, bool) {
	if path == Module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, Module+"/")
	return rel, ok
}

// Run runs r over pkg and returns what it reports, less what r.Allow lets
// be (and, in used, the index of each entry of r.Allow that let one be).
func Run(r *Rule, pkg *typecheck.Package, used map[int]bool) []Finding {
	pass := &Pass{Pkg: pkg}
	r.Run(pass)
	rel, _ := relative(pkg.Path)
	var out []Finding
	for _, f := range pass.found {
		pos := pkg.Fset.Position(f.pos)
		fd := Finding{Rule: r.Name, Package: rel, File: pos.Filename, Line: pos.Line, Func: enclosing(pkg, f.pos), Message: f.msg}
		for i, n := range pkg.Files {
			if pkg.Fset.File(n.Pos()).Name() == pos.Filename {
				fd.File = pkg.Names[i]
			}
		}
		i := slices.IndexFunc(r.Allow, func(a Allowed) bool {
			return a.Package == rel && (a.Func == "" || a.Func == fd.Func)
		})
		if i >= 0 {
			if used != nil {
				used[i] = true
			}
			continue
		}
		out = append(out, fd)
	}
	return out
}

// enclosing names the top-level function pos is in: "F", "T.M" or
// "(*T).M"; "" outside any.
func enclosing(pkg *typecheck.Package, pos token.Pos) string {
	for _, f := range pkg.Files {
		if pos < f.Pos() || pos > f.End() {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || pos < fd.Pos() || pos > fd.End() {
				continue
			}
			if fd.Recv == nil || len(fd.Recv.List) == 0 {
				return fd.Name.Name
			}
			return recvName(fd.Recv.List[0].Type) + "." + fd.Name.Name
		}
	}
	return ""
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "(*" + recvName(t.X) + ")"
	case *ast.IndexExpr: // T[K]
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// CheckTree runs r over every product package of the module t runs in,
// and fails t on each place it reports, and on each allowlist entry that
// lets nothing be (a stale reason is a wrong one).
func CheckTree(t *testing.T, r *Rule) {
	t.Helper()
	for i, a := range r.Allow {
		if a.Why == "" {
			t.Errorf("rule %s: allowlist entry %d (%s %s) gives no reason", r.Name, i, a.Package, a.Func)
		}
	}
	root, err := typecheck.Root()
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := typecheck.Module(root)
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	n, bad := 0, 0
	for _, p := range pkgs {
		if !Product(p.Path) {
			continue
		}
		n++
		for _, f := range Run(r, p, used) {
			t.Error(f)
			bad++
		}
	}
	if bad > 0 {
		t.Logf("rule %s: %s", r.Name, r.Doc)
	}
	if n < 20 {
		t.Fatalf("rule %s ran over %d product packages: the listing is broken", r.Name, n)
	}
	for i, a := range r.Allow {
		if !used[i] {
			t.Errorf("rule %s: allowlist entry {%s %s} lets nothing be: remove it", r.Name, a.Package, a.Func)
		}
	}
}

// CheckDir runs r over the package in dir (relative to the test's
// directory: testdata/<rule>/<case>), type-checked as import path
// Module/harness/boundcheck/<dir>, and returns what it reports.
func CheckDir(t *testing.T, r *Rule, dir string) []Finding {
	t.Helper()
	root, err := typecheck.Root()
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := typecheck.Dir(root, abs, Module+"/harness/boundcheck/"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	return Run(r, pkg, nil)
}
