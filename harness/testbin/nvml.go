package testbin

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// FakeNVMLReport names the variable whose file the fake NVML's nvmlShutdown
// writes its GPM counts to: "allocs=N frees=N misuse=N samples=N computed=N".
const FakeNVMLReport = "FAKE_NVML_REPORT"

// FakeNVML builds testdata/fakenvml.c, a stand-in for the driver's
// libnvidia-ml.so.1 (one fake Hopper GPU, NVML's C ABI), plus a weak
// definition answering NVML_ERROR_NOT_SUPPORTED of every other nvml* symbol
// bin leaves to run time, with the C compiler cc (a command and its
// arguments). It returns the directory that holds libnvidia-ml.so.1, for
// LD_LIBRARY_PATH.
func FakeNVML(t testing.TB, bin string, cc []string) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var weak strings.Builder
	n := 0
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF && strings.HasPrefix(s.Name, "nvml") {
			fmt.Fprintf(&weak, "__attribute__((weak)) int %s(void) { return 3; }\n", s.Name)
			n++
		}
	}
	if n < 100 {
		t.Fatalf("%s leaves %d nvml* symbols to run time; go-nvml uses hundreds", bin, n)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "weak.c"), []byte(weak.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "testdata", "fakenvml.c")
	args := append(slices.Clone(cc[1:]), "-shared", "-fPIC", "-O2", "-o", filepath.Join(dir, "libnvidia-ml.so.1"), src, filepath.Join(dir, "weak.c"))
	if out, err := exec.Command(cc[0], args...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake libnvidia-ml.so.1: %s %v: %v\n%s", cc[0], args, err, out)
	}
	return dir
}
