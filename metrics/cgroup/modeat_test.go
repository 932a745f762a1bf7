package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestModeAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		want  Mode
	}{
		{"v2", []string{"cgroup.controllers"}, ModeV2},
		{"hybrid", []string{"memory/memory.limit_in_bytes", "cpu/cpu.shares", "unified/cgroup.controllers"}, ModeHybrid},
		{"v1", []string{"memory/memory.limit_in_bytes", "cpu,cpuacct/cpu.shares"}, ModeV1},
		{"nothing", nil, ModeUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, nil, 0o644)
			}
			if got := ModeAt(root); got != tc.want {
				t.Errorf("ModeAt = %s, want %s", got, tc.want)
			}
		})
	}
}
