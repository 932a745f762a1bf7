package amdgpu

import (
	"fmt"
	"strconv"
	"strings"
)

// visibleGPU is what the visibility variables can name a GPU by.
type visibleGPU struct {
	UUID string // "GPU-<unique_id>"; "" when the GPU has no unique_id (before GFX9)
}

// applyVisible applies the value of one visibility variable (name, for the
// notes) to gpus, the list a ROCm program would see before it: entries are
// indexes into that list or UUIDs (GPU-<hex>, as rocm-smi --showuniqueid
// and ROCm print them), comma-separated. It returns the positions kept, in
// the order the variable gives (that order is the program's numbering),
// and notes on entries that name no GPU. A variable is not bridge's input:
// a bad entry is a note, never an error.
func applyVisible(name, value string, gpus []visibleGPU) (keep []int, notes []string) {
	seen := map[int]bool{}
	for _, e := range strings.Split(value, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		i := -1
		if n, err := strconv.Atoi(e); err == nil {
			if n >= 0 && n < len(gpus) {
				i = n
			}
		} else {
			for j, g := range gpus {
				if g.UUID != "" && strings.EqualFold(g.UUID, e) {
					i = j
					break
				}
			}
		}
		switch {
		case i < 0:
			notes = append(notes, fmt.Sprintf("%s entry %q names none of the %d AMD GPUs it applies to; ignored", name, e, len(gpus)))
		case seen[i]:
			notes = append(notes, fmt.Sprintf("%s names GPU %q twice; counted once", name, e))
		default:
			seen[i] = true
			keep = append(keep, i)
		}
	}
	return keep, notes
}

// visible applies ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES to what
// ROCR left, as ROCm does (each only when set; set to "" it leaves no GPU).
// HIP reads CUDA_VISIBLE_DEVICES where HIP_VISIBLE_DEVICES is unset; so
// does this when cuda says so (a node without NVIDIA GPUs, where the
// variable can only be meant for HIP). It returns the positions in gpus of
// the job's GPUs, in the job's order.
func visible(gpus []visibleGPU, lookup func(string) (string, bool), cuda bool) (keep []int, notes []string) {
	keep = make([]int, len(gpus))
	for i := range keep {
		keep[i] = i
	}
	hip := "HIP_VISIBLE_DEVICES"
	if _, set := lookup(hip); !set && cuda {
		hip = "CUDA_VISIBLE_DEVICES"
	}
	for _, name := range []string{"ROCR_VISIBLE_DEVICES", hip} {
		v, set := lookup(name)
		if !set {
			continue
		}
		sub := make([]visibleGPU, len(keep))
		for i, k := range keep {
			sub[i] = gpus[k]
		}
		picked, n := applyVisible(name, v, sub)
		notes = append(notes, n...)
		next := make([]int, len(picked))
		for i, p := range picked {
			next[i] = keep[p]
		}
		keep = next
	}
	return keep, notes
}
