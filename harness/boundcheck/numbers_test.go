package boundcheck_test

import (
	"go/ast"
	"go/token"
	"go/types"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/harness/boundcheck"
)

// numbers: every float that reaches a JSON encoder is finite by
// construction, and every point leaves its collector against a descriptor
// (docs/reliability.md, "The number rule"). encoding/json refuses NaN and
// the infinities: a float64 that can hold one, marshalled, is an error a
// caller may turn into a panic (a report's 1e306 once did, at the end of
// a job). So a float goes to an encoder only as a metrics.Float (finite by
// construction), or through a type whose own MarshalJSON writes it
// (metrics.AppendJSONFloat: the spool's and the trackers' samples); and a
// point is added only with Batch.Add against a Desc, whose range the
// Sampler checks.
var numbers = &boundcheck.Rule{
	Name: "numbers",
	Doc: "give a JSON encoder a float only as a metrics.Float (metrics.Finite, metrics.FloatOf) or through a type whose " +
		"MarshalJSON writes it with metrics.AppendJSONFloat, never a float64 field, a float in a map or slice of any, or " +
		"json.Marshal of a float; add a point only with Batch.Add against its Desc (not metrics.Named, a Point literal or " +
		"Batch.Points); an exception goes on the rule's allowlist (harness/boundcheck/numbers_test.go) with its reason",
	Allow: []boundcheck.Allowed{
		{Package: "metrics", Why: "the sample model itself: Batch.Add builds the point, the Sampler merges the batches, Named reads a spool's names"},
		{Package: "spool", Func: "toSample", Why: "a sample read back from the spool keeps only names: its points left their collectors, checked, before they were written"},
	},
	Run: runNumbers,
}

const metricsPkg = boundcheck.Module + "/metrics"

// encoders are the calls that marshal their arguments as JSON.
var encoders = []string{"encoding/json.Marshal", "encoding/json.MarshalIndent", "(*encoding/json.Encoder).Encode"}

func runNumbers(p *boundcheck.Pass) {
	encoding := encodingParams(p)
	p.Calls(func(call *ast.CallExpr, fn *types.Func) {
		if fn == nil || fn.Pkg() == nil {
			return
		}
		if params := encoding[fn]; params != nil {
			// A function of this package that hands an interface
			// parameter to an encoder (a request's body): what is passed
			// to it is encoded.
			for i, a := range call.Args {
				if params[i] {
					into(p, fn.Type().(*types.Signature).Params().At(i).Type(), a, "passed to "+fn.Name()+", which encodes it, as")
				}
			}
		}
		switch name := fn.FullName(); {
		case slices.Contains(encoders, name):
			for _, a := range call.Args {
				if where := floatIn(p.TypeOf(a)); where != "" && !constant(p, a) {
					p.Report(a, "%s of %s: a float that can be NaN or an infinity (%s); use metrics.Float", name, p.TypeOf(a), where)
				}
			}
		case name == metricsPkg+".Named":
			p.Report(call, "metrics.Named makes a point without a descriptor: add it with Batch.Add against its Desc")
		case (name == "("+"*"+metricsPkg+".Batch).Add" || name == metricsPkg+".At") && len(call.Args) > 0 && isNil(p, call.Args[0]):
			p.Report(call, "%s with a nil descriptor: its range cannot be checked", name)
		}
	})
	for _, f := range p.Pkg.Files {
		var results []*types.Tuple // the enclosing functions' results, innermost last
		var visit func(n ast.Node) bool
		visit = func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Body == nil {
					return false
				}
				results = append(results, signatureOf(p, n.Name).Results())
				ast.Inspect(n.Body, visit)
				results = results[:len(results)-1]
				return false
			case *ast.FuncLit:
				sig, _ := p.TypeOf(n).(*types.Signature)
				if sig == nil {
					return false
				}
				results = append(results, sig.Results())
				ast.Inspect(n.Body, visit)
				results = results[:len(results)-1]
				return false
			case *ast.CompositeLit:
				compositeFloats(p, n)
			case *ast.AssignStmt:
				if len(n.Lhs) == len(n.Rhs) {
					for i, l := range n.Lhs {
						into(p, p.TypeOf(l), n.Rhs[i], "assigned to")
					}
				} else if tuple, ok := p.TypeOf(n.Rhs[0]).(*types.Tuple); ok && tuple.Len() == len(n.Lhs) {
					for i, l := range n.Lhs {
						if dst := p.TypeOf(l); dst != nil && types.IsInterface(dst) {
							if where := floatIn(tuple.At(i).Type()); where != "" {
								p.Report(l, "result %d of %s (%s) assigned to %s: a float that can be NaN or an infinity, out of any type's sight; use metrics.Float",
									i, exprString(n.Rhs[0]), where, dst)
							}
						}
					}
				}
			case *ast.ValueSpec:
				if n.Type != nil {
					for _, v := range n.Values {
						into(p, p.TypeOf(n.Type), v, "declared as")
					}
				}
			case *ast.ReturnStmt:
				if len(results) > 0 && results[len(results)-1] != nil && results[len(results)-1].Len() == len(n.Results) {
					for i, r := range n.Results {
						into(p, results[len(results)-1].At(i).Type(), r, "returned as")
					}
				}
			case *ast.CallExpr:
				if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok && id.Name == "append" && len(n.Args) > 1 && n.Ellipsis == token.NoPos {
					if s, ok := p.TypeOf(n.Args[0]).Underlying().(*types.Slice); ok {
						for _, a := range n.Args[1:] {
							into(p, s.Elem(), a, "appended to")
						}
					}
				}
			case *ast.SelectorExpr:
				// Batch.Points written outside package metrics: a point
				// that bypasses Add.
				if n.Sel.Name == "Points" && isBatch(p.TypeOf(n.X)) && written(f, n) {
					p.Report(n, "Batch.Points written directly: add each point with Batch.Add against its Desc")
				}
			}
			return true
		}
		ast.Inspect(f, visit)
	}
}

// encodingParams finds the functions of the package that hand one of their
// interface parameters to a JSON encoder, directly or through another such
// function of the package: by function, the indexes of those parameters.
func encodingParams(p *boundcheck.Pass) map[*types.Func]map[int]bool {
	out := map[*types.Func]map[int]bool{}
	type fdecl struct {
		fn     *types.Func
		params map[types.Object]int // its interface parameters, by index
		body   *ast.BlockStmt
	}
	var decls []fdecl
	for _, f := range p.Pkg.Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn, _ := p.Pkg.Info.Defs[fd.Name].(*types.Func)
			if fn == nil {
				continue
			}
			params := map[types.Object]int{}
			i := 0
			for _, field := range fd.Type.Params.List {
				names := field.Names
				if len(names) == 0 {
					i++
					continue
				}
				for _, n := range names {
					if obj := p.Pkg.Info.Defs[n]; obj != nil && types.IsInterface(obj.Type()) {
						params[obj] = i
					}
					i++
				}
			}
			if len(params) > 0 {
				decls = append(decls, fdecl{fn, params, fd.Body})
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, d := range decls {
			ast.Inspect(d.body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				callee := p.Callee(call)
				if callee == nil {
					return true
				}
				for i, a := range call.Args {
					id, ok := ast.Unparen(a).(*ast.Ident)
					if !ok {
						continue
					}
					k, isParam := d.params[p.Pkg.Info.Uses[id]]
					if !isParam || out[d.fn][k] {
						continue
					}
					if slices.Contains(encoders, callee.FullName()) || out[callee][i] {
						if out[d.fn] == nil {
							out[d.fn] = map[int]bool{}
						}
						out[d.fn][k], changed = true, true
					}
				}
				return true
			})
		}
	}
	return out
}

// compositeFloats reports a float stored as an interface in a composite
// literal: a map or slice of any, or a struct field of interface type; and
// a metrics.Point literal (a point without Batch.Add).
func compositeFloats(p *boundcheck.Pass, lit *ast.CompositeLit) {
	t := p.TypeOf(lit)
	if t == nil {
		return
	}
	if named, ok := types.Unalias(t).(*types.Named); ok && named.Obj().Pkg() != nil &&
		named.Obj().Pkg().Path() == metricsPkg && named.Obj().Name() == "Point" {
		p.Report(lit, "a metrics.Point literal: add the point with Batch.Add against its Desc")
	}
	switch u := t.Underlying().(type) {
	case *types.Map:
		for _, e := range lit.Elts {
			if kv, ok := e.(*ast.KeyValueExpr); ok {
				into(p, u.Elem(), kv.Value, "stored in a "+types.TypeString(t, nil)+" as")
			}
		}
	case *types.Slice, *types.Array:
		elem := u.(interface{ Elem() types.Type }).Elem()
		for _, e := range lit.Elts {
			if kv, ok := e.(*ast.KeyValueExpr); ok {
				e = kv.Value
			}
			into(p, elem, e, "stored in a "+types.TypeString(t, nil)+" as")
		}
	case *types.Struct:
		for i, e := range lit.Elts {
			var field *types.Var
			if kv, ok := e.(*ast.KeyValueExpr); ok {
				id, _ := kv.Key.(*ast.Ident)
				if id == nil {
					continue
				}
				for j := range u.NumFields() {
					if u.Field(j).Name() == id.Name {
						field = u.Field(j)
					}
				}
				e = kv.Value
			} else if i < u.NumFields() {
				field = u.Field(i)
			}
			if field != nil {
				into(p, field.Type(), e, "stored in field "+field.Name()+" as")
			}
		}
	}
}

// into reports value v, of a type holding a float, converted to dst when
// dst is an interface: from there no type says what it holds, and an
// encoder that gets it writes the float as it is.
func into(p *boundcheck.Pass, dst types.Type, v ast.Expr, how string) {
	if dst == nil || !types.IsInterface(dst) || constant(p, v) {
		return
	}
	if where := floatIn(p.TypeOf(v)); where != "" {
		p.Report(v, "%s (%s) %s %s: a float that can be NaN or an infinity, out of any type's sight; use metrics.Float",
			exprString(v), where, how, dst)
	}
}

// floatIn says where type t holds a float32 or float64 that encoding/json
// would write as it is ("" for none): itself, a field, an element. A type
// with a MarshalJSON or MarshalText of its own writes itself and is not
// looked into; an interface cannot be (into reports what goes into one).
func floatIn(t types.Type) string { return floatWalk(t, map[types.Type]bool{}) }

func floatWalk(t types.Type, seen map[types.Type]bool) string {
	if t == nil || seen[t] {
		return ""
	}
	seen[t] = true
	if marshals(t) {
		return ""
	}
	switch u := t.Underlying().(type) {
	case *types.Basic:
		if u.Info()&types.IsFloat != 0 {
			return types.TypeString(t, nil)
		}
	case *types.Pointer:
		return floatWalk(u.Elem(), seen)
	case *types.Slice:
		return floatWalk(u.Elem(), seen)
	case *types.Array:
		return floatWalk(u.Elem(), seen)
	case *types.Map:
		if w := floatWalk(u.Elem(), seen); w != "" {
			return "its values, " + w
		}
	case *types.Struct:
		for i := range u.NumFields() {
			f := u.Field(i)
			tag := reflect.StructTag(u.Tag(i)).Get("json")
			if !f.Exported() && !f.Embedded() || tag == "-" {
				continue
			}
			if w := floatWalk(f.Type(), seen); w != "" {
				return "field " + f.Name() + ", " + w
			}
		}
	}
	return ""
}

// marshals reports whether t (or *t) has a MarshalJSON or MarshalText of
// its own: encoding/json then writes what that method returns.
func marshals(t types.Type) bool {
	for _, tt := range []types.Type{t, types.NewPointer(t)} {
		if _, isPtr := t.(*types.Pointer); isPtr && tt != t {
			continue
		}
		ms := types.NewMethodSet(tt)
		for _, m := range []string{"MarshalJSON", "MarshalText"} {
			if sel := ms.Lookup(nil, m); sel != nil {
				return true
			}
		}
	}
	return false
}

// constant: a constant expression is finite by construction (Go has no
// constant NaN or infinity).
func constant(p *boundcheck.Pass, e ast.Expr) bool {
	tv, ok := p.Pkg.Info.Types[e]
	return ok && tv.Value != nil
}

func isNil(p *boundcheck.Pass, e ast.Expr) bool {
	tv, ok := p.Pkg.Info.Types[e]
	return ok && tv.IsNil()
}

func isBatch(t types.Type) bool {
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	named, ok := types.Unalias(t).(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == metricsPkg && named.Obj().Name() == "Batch"
}

// written reports whether sel is the left side of an assignment in f.
func written(f *ast.File, sel *ast.SelectorExpr) bool {
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok {
			for _, l := range as.Lhs {
				if ast.Unparen(l) == sel {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

func signatureOf(p *boundcheck.Pass, name *ast.Ident) *types.Signature {
	fn, _ := p.Pkg.Info.Defs[name].(*types.Func)
	if fn == nil {
		return types.NewSignatureType(nil, nil, nil, nil, nil, false)
	}
	return fn.Type().(*types.Signature)
}

func exprString(e ast.Expr) string {
	s := types.ExprString(e)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// Every product package keeps the rule (and every allowlist entry is used).
func TestNumbers(t *testing.T) {
	boundcheck.CheckTree(t, numbers)
}

// The rule reports each way a float reaches an encoder unguarded, and each
// way around a descriptor, in a planted package; and passes one that uses
// metrics.Float, a type of its own MarshalJSON, and Batch.Add.
func TestNumbersPlanted(t *testing.T) {
	bad := boundcheck.CheckDir(t, numbers, "testdata/numbers/bad")
	want := map[string]string{ // function -> what its finding says
		"marshalFloat":   "encoding/json.Marshal of float64",
		"marshalStruct":  "field Value, float64",
		"encodeSlice":    "(*encoding/json.Encoder).Encode",
		"indentMap":      "its values, float64",
		"mapOfAny":       "stored in a map[string]any",
		"assignAny":      "assigned to",
		"appendAny":      "appended to",
		"returnAny":      "returned as",
		"fieldAny":       "stored in field Value",
		"named":          "metrics.Named",
		"pointLiteral":   "a metrics.Point literal",
		"nilDesc":        "with a nil descriptor",
		"rawPoints":      "Batch.Points written directly",
		"throughWrapper": "passed to post, which encodes it",
	}
	got := map[string][]string{}
	for _, f := range bad {
		got[f.Func] = append(got[f.Func], f.Message)
	}
	for fn, msg := range want {
		if !slices.ContainsFunc(got[fn], func(m string) bool { return strings.Contains(m, msg) }) {
			t.Errorf("planted %s (%s) not reported; reported: %v", fn, msg, bad)
		}
	}
	if n := len(got["assignAny"]); n != 2 {
		t.Errorf("assignAny: %d findings, want 2 (a value and a result of two): %v", n, got["assignAny"])
	}
	for fn := range got {
		if _, ok := want[fn]; !ok {
			t.Errorf("%s reported, not planted: %v", fn, got[fn])
		}
	}
	if ok := boundcheck.CheckDir(t, numbers, "testdata/numbers/ok"); len(ok) > 0 {
		t.Errorf("floats through metrics.Float or their own MarshalJSON, points through Batch.Add, reported: %v", ok)
	}
}
