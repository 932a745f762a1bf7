package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The binary is built from product packages only: test support (harness/,
// mocks/, e2e/, bench/) never reaches it.
func TestBinaryHoldsNoTestSupport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %d packages: %q", len(deps), out)
	}
	for _, p := range deps {
		for _, apart := range []string{"/harness/", "/mocks/", "/e2e/", "/bench/"} {
			if strings.Contains(p+"/", "github.com/bridge-dev/bridge"+apart) {
				t.Errorf("the binary imports %s", p)
			}
		}
	}
}
