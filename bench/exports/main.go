// Command exports counts the product's exported package-level identifiers
// (funcs, types, vars, consts; not methods or fields) that no other package
// names: `go run ./bench/exports [-v] [DIR]` (DIR: a module root, default
// the working directory). Product packages are those bench/size.sh counts
// as product, less package main; a use is a selector pkg.Name in a file of
// another package, by import. It prints two counts: named by no other
// product package, and named by no other package at all, tests and test
// support included (a package's external _test package is another
// package). Syntax only, so that it runs on any revision without building
// it.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// support is bench/size.sh's: what is test support, not product.
var support = regexp.MustCompile(`^(harness|mocks|e2e|bench|docgen)/|^internal/(mlflowtest|promtest|testbin|launchertest|hostile|authproxy|stallfs|waitfor|syncbuf)/|/(closetest|cgrouptest|spooltest)/`)

type file struct {
	rel     string // relative to the root
	pkg     string // import path, with "_test" for an external test package
	test    bool
	product bool
	ast     *ast.File
}

func main() {
	verbose := flag.Bool("v", false, "list the identifiers no other package names")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	if err := run(root, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "exports:", err)
		os.Exit(1)
	}
}

func run(root string, verbose bool) error {
	mod, err := modulePath(root)
	if err != nil {
		return err
	}
	files, err := parse(root, mod)
	if err != nil {
		return err
	}
	// The exported identifiers of product packages, by "path.Name".
	exported := map[string]bool{}
	for _, f := range files {
		if !f.product || f.test || f.ast.Name.Name == "main" {
			continue
		}
		for _, name := range topLevel(f.ast) {
			exported[f.pkg+"."+name] = true
		}
	}
	// The package name each import path declares, for imports without one.
	names := map[string]string{}
	for _, f := range files {
		if !f.test {
			names[f.pkg] = f.ast.Name.Name
		}
	}
	byProduct, byAny := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		for id := range uses(f, names) {
			if !exported[id] {
				continue
			}
			byAny[id] = true
			if f.product && !f.test {
				byProduct[id] = true
			}
		}
	}
	var ids []string
	for id := range exported {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	noProduct, none := 0, 0
	for _, id := range ids {
		if !byProduct[id] {
			noProduct++
		}
		if !byAny[id] {
			none++
			if verbose {
				fmt.Println(strings.TrimPrefix(id, mod+"/"))
			}
		}
	}
	fmt.Printf("%d exported; %d named by no other product package; %d named by no other package, tests included\n", len(ids), noProduct, none)
	return nil
}

func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("reading the module's go.mod: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod names no module", root)
}

func parse(root, mod string) ([]file, error) {
	var out []file
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		a, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := path.Join(mod, path.Dir(rel))
		if strings.HasSuffix(a.Name.Name, "_test") {
			pkg += "_test"
		}
		out = append(out, file{rel: rel, pkg: pkg, test: strings.HasSuffix(rel, "_test.go"), product: !support.MatchString(rel), ast: a})
		return nil
	})
	return out, err
}

// topLevel lists the exported names f declares at package level.
func topLevel(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				out = append(out, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out = append(out, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// uses lists the "path.Name" that f names through its imports of other
// packages.
func uses(f file, names map[string]string) map[string]bool {
	imports := map[string]string{} // local name -> import path
	for _, im := range f.ast.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p == f.pkg {
			continue
		}
		local := names[p]
		if local == "" {
			local = path.Base(p)
		}
		if im.Name != nil {
			local = im.Name.Name
		}
		imports[local] = p
	}
	out := map[string]bool{}
	ast.Inspect(f.ast, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok {
				if p, ok := imports[x.Name]; ok {
					out[p+"."+sel.Sel.Name] = true
				}
			}
		}
		return true
	})
	return out
}
