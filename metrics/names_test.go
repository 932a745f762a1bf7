package metrics_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-dev/bridge/metrics"
)

// descriptors type-checks package metrics and returns its package-level
// variables of type *Desc (ContainerMemoryWorkingSet, GPUMemoryUsed, ...),
// each with the package-level names its value refers to:
// ContainerPressureMemorySome is ContainerPressure[1].Some, so a collector
// that adds the ContainerPressure series produces it.
func descriptors(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		a, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, a)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("github.com/bridge-dev/bridge/metrics", fset, parsed, info)
	if err != nil {
		t.Fatal(err)
	}
	desc := types.NewPointer(pkg.Scope().Lookup("Desc").Type())
	out := map[string][]string{}
	for _, f := range parsed {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !types.Identical(info.Defs[id].Type(), desc) {
						continue
					}
					var refs []string
					if i < len(vs.Values) {
						ast.Inspect(vs.Values[i], func(n ast.Node) bool {
							if x, ok := n.(*ast.Ident); ok {
								refs = append(refs, x.Name)
							}
							return true
						})
					}
					out[id.Name] = refs
				}
			}
		}
	}
	if len(out) < 50 {
		t.Fatalf("found %d descriptors in package metrics: the scan is broken", len(out))
	}
	return out
}

// goFiles walks the module's non-test Go files, calling fn with the path
// relative to the module root.
func goFiles(t *testing.T, fn func(rel string, f *ast.File)) {
	t.Helper()
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fn(filepath.ToSlash(rel), f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// isCollect reports whether fn is a metrics.Collector's Collect method:
// Collect(context.Context, *metrics.Batch) error.
func isCollect(fn *ast.FuncDecl) bool {
	if fn.Recv == nil || fn.Name.Name != "Collect" || fn.Type.Params.NumFields() != 2 {
		return false
	}
	last := fn.Type.Params.List[len(fn.Type.Params.List)-1].Type
	star, ok := last.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Batch"
}

// A collector that stops producing a series a consumer reads (the
// end-of-run table, forensics, fast sampling near the limit) fails here.
// Producers are found, not listed: the packages that implement a
// metrics.Collector (a Collect method taking a *metrics.Batch); every
// other package only reads series.
func TestConsumedSeriesAreProduced(t *testing.T) {
	descs := descriptors(t)
	refs := map[string]map[string]bool{} // package dir -> metrics.X it names
	producers := map[string]bool{}
	goFiles(t, func(rel string, f *ast.File) {
		dir := filepath.Dir(rel)
		if dir == "metrics" {
			return
		}
		if refs[dir] == nil {
			refs[dir] = map[string]bool{}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if isCollect(n) {
					producers[dir] = true
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "metrics" {
					refs[dir][n.Sel.Name] = true
				}
			}
			return true
		})
	})
	produced, consumed := map[string]bool{}, map[string][]string{}
	for dir, names := range refs {
		for name := range names {
			if producers[dir] {
				produced[name] = true
			} else if _, ok := descs[name]; ok {
				consumed[name] = append(consumed[name], dir)
			}
		}
	}
	for _, want := range []string{"metrics/cgroup", "metrics/node", "metrics/process", "metrics/gpu", "metrics/scrape"} {
		if !producers[want] {
			t.Errorf("%s is not found as a producer: the scan is broken", want)
		}
	}
	if len(consumed) < 10 {
		t.Fatalf("found %d consumed series: the scan is broken", len(consumed))
	}
	var dirs []string
	for d := range producers {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for name, where := range consumed {
		ok := produced[name]
		for _, dep := range descs[name] {
			ok = ok || produced[dep]
		}
		if !ok {
			t.Errorf("metrics.%s is read by %v but no collector (%s) produces it", name, where, strings.Join(dirs, ", "))
		}
	}
}

// allSeries are bridge's own descriptors, from the lists the collectors'
// registrations declare.
func allSeries() []*metrics.Desc {
	var out []*metrics.Desc
	for _, l := range [][]*metrics.Desc{metrics.ContainerSeries, metrics.NodeSeries, metrics.ProcessSeries, metrics.GPUSeries,
		metrics.RAPLSeries, metrics.InfiniBandSeries, metrics.AMDGPUSeries, metrics.ScrapeSeries} {
		out = append(out, l...)
	}
	return out
}

// Every series name is spelled once: no non-test file but series.go holds
// one as a string literal. (Per-GPU templates are left out:
// "memory_total_megabytes" is also a key of `bridge sample`'s detected GPU.)
func TestNamesSpelledOnce(t *testing.T) {
	byName := map[string]bool{}
	for _, d := range allSeries() {
		if !d.PerGPU {
			byName[d.Name] = true
		}
	}
	if len(byName) < 50 {
		t.Fatalf("only %d names: the lists are broken", len(byName))
	}
	goFiles(t, func(rel string, f *ast.File) {
		if rel == "metrics/series.go" {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && byName[s] {
				t.Errorf("%s spells %q: use its descriptor in package metrics", rel, s)
			}
			return true
		})
	})
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
	if metrics.ContainerPressureMemorySome.Name != "container_pressure_memory_some_avg10_percentage" ||
		metrics.ContainerPressureMemoryFull.Name != "container_pressure_memory_full_avg10_percentage" {
		t.Errorf("memory pressure series are %s, %s", metrics.ContainerPressureMemorySome.Name, metrics.ContainerPressureMemoryFull.Name)
	}
}

// A per-GPU template is sent bound to a GPU or a MIG slice; the name and
// the /metrics name are built once, by composition, never parsed back.
func TestGPUBinding(t *testing.T) {
	g := metrics.GPUMemoryUsed.ForGPU(3)
	m := metrics.GPUMemoryUsed.ForMIG(0, 7)
	for _, c := range []struct {
		d              *metrics.Desc
		name, prom     string
		gpu, mig       int
		unit           metrics.Unit
		scope          metrics.Scope
		bytesFromMB100 float64
	}{
		{g, "gpu_3_memory_used_megabytes", "bridge_gpu_memory_used_bytes", 3, -1, metrics.UnitMegabytes, metrics.ScopeGPU, 100e6},
		{m, "gpu_0_mig_7_memory_used_megabytes", "bridge_gpu_mig_memory_used_bytes", 0, 7, metrics.UnitMegabytes, metrics.ScopeGPU, 100e6},
		{metrics.GPUPowerUsage.ForGPU(1), "gpu_1_power_usage_watts", "bridge_gpu_power_usage_watts", 1, -1, metrics.UnitWatts, metrics.ScopeGPU, 100},
	} {
		if c.d.Name != c.name || c.d.PromName() != c.prom || c.d.GPU != c.gpu || c.d.MIG != c.mig || c.d.Unit != c.unit || c.d.Scope != c.scope || c.d.PerGPU {
			t.Errorf("bound: %+v, want %s %s gpu %d mig %d", *c.d, c.name, c.prom, c.gpu, c.mig)
		}
		if c.d.Unit.Base(100) != c.bytesFromMB100 {
			t.Errorf("%s: 100 -> %v, want %v", c.d.Name, c.d.Unit.Base(100), c.bytesFromMB100)
		}
	}
	if g.Of != metrics.GPUMemoryUsed || m.Of != metrics.GPUMemoryUsed {
		t.Error("a bound descriptor does not know its template")
	}
	defer func() {
		if recover() == nil {
			t.Error("binding a series that is not per GPU did not panic")
		}
	}()
	metrics.NodeLoad1.ForGPU(0)
}

// dcgm-exporter's profiling fields that GPM also gives are the GPM series'
// descriptors (one help line, unit and /metrics name per name, whichever
// source filled it); other fields get a template of their own.
func TestDCGMProfilingIsGPM(t *testing.T) {
	for _, c := range []struct {
		x    string
		rate bool
		want *metrics.Desc
	}{
		{"sm_active", false, metrics.GPUProfSMActive},
		{"pipe_tensor_hmma_active", false, metrics.GPUProfTensorHMMA},
		{"dram_active", false, metrics.GPUProfDRAMActive},
		{"pcie_tx", true, metrics.GPUProfPCIeTx},
		{"nvlink_rx", true, metrics.GPUProfNVLinkRx},
	} {
		if got := metrics.DCGMProfiling(c.x, c.rate); got != c.want {
			t.Errorf("DCGMProfiling(%q, %v) = %+v, want the GPM series %s", c.x, c.rate, got, c.want.Name)
		}
	}
	other := metrics.DCGMProfiling("nvdec0_active", false)
	if other.Name != "prof_nvdec0_active_ratio" || other.Unit != metrics.UnitRatio || !other.PerGPU || other.Help == "" {
		t.Errorf("DCGMProfiling of a field GPM lacks: %+v", other)
	}
	if got := metrics.GPUProfPCIeTx.ForGPU(2).PromName(); got != "bridge_gpu_prof_pcie_tx_bytes_per_second" {
		t.Errorf("PCIe transmit exposed as %s", got)
	}
	if got := metrics.GPUEnergy.ForGPU(0); got.PromName() != "bridge_gpu_energy_joules_total" || got.Kind != metrics.Counter || got.Name != "gpu_0_energy_joules" {
		t.Errorf("energy: %s as %s, kind %v", got.Name, got.PromName(), got.Kind)
	}
}

// A per-instance template is sent bound to one device of the node: the
// name holds the instance as a key part, /metrics one name with labels.
func TestInstanceBinding(t *testing.T) {
	d := metrics.NodeIBReceiveRate.For("mlx5_0", "1")
	odd := metrics.NodeIBReceiveRate.For("ibp12s0-f1.2", "2")
	p := metrics.NodeCPUPackageEnergy.For("1")
	for _, c := range []struct {
		d            *metrics.Desc
		name, prom   string
		labels       []string
		unit         metrics.Unit
		kind         metrics.Kind
		base100Value float64
	}{
		{d, "node_infiniband_mlx5_0_port_1_receive_megabytes_per_second", "bridge_node_infiniband_receive_bytes_per_second",
			[]string{"device", "mlx5_0", "port", "1"}, metrics.UnitMegabytesPerSecond, metrics.Gauge, 100e6},
		{odd, "node_infiniband_ibp12s0_f1_2_port_2_receive_megabytes_per_second", "bridge_node_infiniband_receive_bytes_per_second",
			[]string{"device", "ibp12s0-f1.2", "port", "2"}, metrics.UnitMegabytesPerSecond, metrics.Gauge, 100e6},
		{p, "node_cpu_package_1_energy_joules", "bridge_node_cpu_package_energy_joules_total",
			[]string{"package", "1"}, metrics.UnitJoules, metrics.Counter, 100},
	} {
		if c.d.Name != c.name || c.d.PromName() != c.prom || !slices.Equal(c.d.Labels, c.labels) || c.d.Unit != c.unit ||
			c.d.Kind != c.kind || c.d.Scope != metrics.ScopeNode || len(c.d.Instance) != 0 || c.d.PerGPU {
			t.Errorf("bound: %+v, want %s %s %v", *c.d, c.name, c.prom, c.labels)
		}
		if c.d.Unit.Base(100) != c.base100Value {
			t.Errorf("%s: 100 -> %v, want %v", c.d.Name, c.d.Unit.Base(100), c.base100Value)
		}
	}
	if d.Of != metrics.NodeIBReceiveRate || p.Of != metrics.NodeCPUPackageEnergy {
		t.Error("a bound descriptor does not know its template")
	}
	for _, bad := range []func(){
		func() { metrics.NodeLoad1.For("x") },
		func() { metrics.NodeIBReceiveRate.For("mlx5_0") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("binding with the wrong labels did not panic")
				}
			}()
			bad()
		}()
	}
}
