package pipeline

import (
	"go/ast"
	"go/token"
	"go/types"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/typecheck"
	"github.com/bridge-dev/bridge/metrics"
)

const module = "github.com/bridge-dev/bridge"

// descType is how go/types spells a descriptor's type.
const descType = "*" + module + "/metrics.Desc"

// modPkg is one package of the module, type-checked from its non-test
// source.
type modPkg = typecheck.Package

// loadModule type-checks every package of the module from source, against
// its dependencies' export data, so that every use of a descriptor, in any
// package, is known by the object it names.
func loadModule(t *testing.T) []*modPkg {
	t.Helper()
	root, err := typecheck.Root()
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := typecheck.Module(root)
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// key names a package-level object across loads (a package checked from
// source and the same package imported from export data are two).
func key(o types.Object) string {
	if o == nil || o.Pkg() == nil || o.Parent() != o.Pkg().Scope() {
		return ""
	}
	return o.Pkg().Path() + "." + o.Name()
}

// isProducer reports whether p's code adds points: it calls
// (*metrics.Batch).Add. (A package that only wraps a collector, as
// pipeline's scope filter does, is not one.)
func isProducer(p *modPkg) bool {
	for _, o := range p.Info.Uses {
		if f, ok := o.(*types.Func); ok && f.FullName() == "(*"+module+"/metrics.Batch).Add" {
			return true
		}
	}
	return false
}

// pkgOf is the package a registration's Build was written in: its
// collector's.
func pkgOf(reg metrics.Registration) string {
	fn := runtime.FuncForPC(reflect.ValueOf(reg.Build).Pointer()).Name() // module/metrics/rapl.init.func1
	slash := strings.LastIndex(fn, "/")
	return fn[:slash+strings.Index(fn[slash:], ".")]
}

// A collector that stops producing a series a consumer reads (the
// end-of-run table, forensics, fast sampling near the limit) fails here.
// Nothing is listed by hand: the descriptors are the module's package-level
// variables of type *metrics.Desc; the producers, the packages whose code
// adds points (calls metrics.Batch.Add); a series is produced when a producer's
// code uses its descriptor (or what it is made from: PressureMemorySome is
// Pressure[1].Some), directly or through package-level variables it reads;
// every other package's use is a consumer's.
func TestConsumedSeriesAreProduced(t *testing.T) {
	pkgs := loadModule(t)
	producers := map[string]bool{}
	deps := map[string][]string{} // package-level variable -> those its value names
	descs := map[string]bool{}
	for _, p := range pkgs {
		producers[p.Path] = isProducer(p)
		for _, f := range p.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						k := key(p.Info.Defs[id])
						if p.Info.Defs[id].Type().String() == descType {
							descs[k] = true
						}
						if i < len(vs.Values) {
							deps[k] = append(deps[k], uses(p, vs.Values[i], false)...)
						} else if len(vs.Values) == 1 { // a, b = f()
							deps[k] = append(deps[k], uses(p, vs.Values[0], false)...)
						}
					}
				}
			}
		}
	}
	// What producers' code reads, and what that reads in turn.
	reached := map[string]bool{}
	var reach func(k string)
	reach = func(k string) {
		if reached[k] {
			return
		}
		reached[k] = true
		for _, d := range deps[k] {
			reach(d)
		}
	}
	consumed := map[string][]string{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, k := range uses(p, f, producers[p.Path]) {
				switch {
				case producers[p.Path]:
					reach(k)
				case descs[k] && !strings.HasPrefix(k, p.Path+"."):
					consumed[k] = append(consumed[k], p.Path)
				}
			}
		}
	}
	for _, reg := range Collectors() {
		if pkg := pkgOf(reg); !producers[pkg] {
			t.Errorf("collector %s's package %s is not found as a producer: the scan is broken", reg.Name, pkg)
		}
	}
	if len(consumed) < 10 {
		t.Fatalf("found %d consumed series: the scan is broken", len(consumed))
	}
	produced := func(k string) bool {
		seen := map[string]bool{}
		var walk func(k string) bool
		walk = func(k string) bool {
			if reached[k] {
				return true
			}
			if seen[k] {
				return false
			}
			seen[k] = true
			for _, d := range deps[k] {
				if walk(d) {
					return true
				}
			}
			return false
		}
		return walk(k)
	}
	var names []string
	for k := range consumed {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !produced(k) {
			t.Errorf("%s is read by %v but no collector produces it", strings.TrimPrefix(k, module+"/"), consumed[k])
		}
	}
}

// uses are the package-level variables the identifiers under n name. Under
// a package-level declaration only those outside function literals count,
// unless inBodies, which counts only those inside function bodies.
func uses(p *modPkg, n ast.Node, inBodies bool) []string {
	var out []string
	depth := 0 // function bodies entered
	var stack []ast.Node
	ast.Inspect(n, func(n ast.Node) bool {
		if n == nil {
			if top := stack[len(stack)-1]; isFunc(top) {
				depth--
			}
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		if isFunc(n) {
			depth++
		}
		id, ok := n.(*ast.Ident)
		if !ok || (depth > 0) != inBodies {
			return true
		}
		if v, ok := p.Info.Uses[id].(*types.Var); ok {
			if k := key(v); k != "" {
				out = append(out, k)
			}
		}
		return true
	})
	return out
}

func isFunc(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.FuncLit:
		return true
	case *ast.FuncDecl:
		return n.Body != nil
	}
	return false
}

// allSeries are bridge's own descriptors, as the registrations declare them.
func allSeries() []*metrics.Desc {
	var out []*metrics.Desc
	for _, r := range Collectors() {
		out = append(out, r.Series...)
	}
	return out
}

// Every series name is spelled once: no non-test file holds one as a string
// literal but the descriptor that declares it (a field of a metrics.Desc:
// its Name, or a Prom that is the same).
// (Per-GPU templates are left out: "memory_total_megabytes" is also a key of
// `bridge sample`'s detected GPU.)
func TestNamesSpelledOnce(t *testing.T) {
	byName := map[string]bool{}
	for _, d := range allSeries() {
		if !d.PerGPU {
			byName[d.Name] = true
		}
	}
	if len(byName) < 50 {
		t.Fatalf("only %d names: the registrations are broken", len(byName))
	}
	for _, p := range loadModule(t) {
		for i, f := range p.Files {
			declared := map[*ast.BasicLit]bool{}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					if tv, ok := p.Info.Types[n]; !ok || "*"+tv.Type.String() != descType {
						return true
					}
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if lit, ok := kv.Value.(*ast.BasicLit); ok {
								declared[lit] = true
							}
						}
					}
				case *ast.BasicLit:
					if s, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && byName[s] && !declared[n] {
						t.Errorf("%s spells %q: use its descriptor", p.Names[i], s)
					}
				}
				return true
			})
		}
	}
}

// What /metrics needs of each descriptor is there: a help line, a legal
// name, and a name of its own where the value is converted to a base unit
// (a series in megabytes is exposed in bytes, so bridge_<name> would lie).
func TestDescriptorsAreComplete(t *testing.T) {
	seen := map[string]*metrics.Desc{}
	for _, d := range allSeries() {
		if o, dup := seen[d.Name]; dup && o != d {
			t.Errorf("two descriptors named %s", d.Name)
		}
		seen[d.Name] = d
		if d.Help == "" || !strings.HasSuffix(d.Help, ".") {
			t.Errorf("%s: help %q, want a sentence", d.Name, d.Help)
		}
		if d.Unit.Scaled() && (d.Prom == "" || strings.Contains(d.Prom, string(d.Unit))) {
			t.Errorf("%s is in %s but exposed as %q: name the base unit", d.Name, d.Unit, d.PromName())
		}
		if d.Scope == "" || d.Unit == "" {
			t.Errorf("%s: scope %q unit %q", d.Name, d.Scope, d.Unit)
		}
		if !d.PerGPU && !strings.HasPrefix(d.Name, string(d.Scope)+"_") {
			t.Errorf("%s does not start with its scope %s", d.Name, d.Scope)
		}
		for _, l := range d.Instance {
			if !strings.Contains(d.Name, "<"+l+">") {
				t.Errorf("%s: template of label %s does not hold <%s>", d.Name, l, l)
			}
		}
		if len(d.Instance) > 0 && (d.Prom == "" || strings.ContainsAny(d.Prom, "<>")) {
			t.Errorf("%s: a per-instance template needs a /metrics name of its own, not %q", d.Name, d.Prom)
		}
		if d.Kind == metrics.Counter && d.Prom != "" && !strings.HasSuffix(d.Prom, "_total") {
			t.Errorf("%s: a counter exposed as %s, without _total", d.Name, d.Prom)
		}
	}
	if len(seen) < 50 {
		t.Fatalf("only %d series: the registrations are broken", len(seen))
	}
}
