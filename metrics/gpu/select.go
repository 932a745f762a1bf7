package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// devInfo is what selection needs to know of one GPU.
type devInfo struct {
	Index  int
	UUID   string   // GPU-…
	Slices []string // UUIDs (MIG-…) of its MIG slices, if MIG mode is on
}

// choice says which devices to collect: index -> slice UUIDs to keep, where a
// nil set keeps every slice of that device.
type choice map[int]map[string]bool

// selector is one parsed --gpus entry: an NVML index or a UUID.
type selector struct {
	raw   string
	index int // -1 when uuid is set
	uuid  string
}

// parseSelect parses --gpus entries: NVML indexes or GPU-/MIG- UUIDs.
func parseSelect(entries []string) ([]selector, error) {
	var out []selector
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if n, err := strconv.Atoi(e); err == nil && n >= 0 {
			out = append(out, selector{raw: e, index: n})
			continue
		}
		if hasUUIDPrefix(e) {
			out = append(out, selector{raw: e, index: -1, uuid: e})
			continue
		}
		return nil, fmt.Errorf("GPU selection %q: want an NVML index (0, 1, …) or a UUID (GPU-…, MIG-…) as nvidia-smi -L prints it", e)
	}
	return out, nil
}

func hasUUIDPrefix(s string) bool {
	return strings.HasPrefix(s, "GPU-") || strings.HasPrefix(s, "MIG-")
}

// chooseSelect keeps the devices named by sels, exactly (index or full UUID).
// It returns notes for entries that match nothing.
func chooseSelect(devs []devInfo, sels []selector) (choice, []string) {
	ch := choice{}
	var notes []string
	for _, s := range sels {
		if !pick(ch, devs, s, strings.EqualFold) {
			notes = append(notes, fmt.Sprintf("no GPU matches selection %q", s.raw))
		}
	}
	return ch, notes
}

// chooseCUDAVisible keeps the devices whose UUIDs CUDA_VISIBLE_DEVICES lists.
// CUDA accepts any unique UUID prefix, so entries match as prefixes. Index
// entries are CUDA's numbering (fastest first unless CUDA_DEVICE_ORDER says
// otherwise), which is not NVML's: they are reported, not matched. ok is false
// when the value names no UUID at all, so nothing can be filtered by it.
func chooseCUDAVisible(devs []devInfo, value string) (ch choice, notes []string, ok bool) {
	ch = choice{}
	for _, e := range strings.Split(value, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		// Drivers before R470 named MIG slices MIG-GPU-<uuid>/<gi>/<ci>; the
		// parent's UUID is all that can be matched of it.
		if legacy, found := strings.CutPrefix(e, "MIG-GPU-"); found {
			e = "GPU-" + strings.SplitN(legacy, "/", 2)[0]
		}
		if !hasUUIDPrefix(e) {
			notes = append(notes, fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q is not a UUID (CUDA's numbering is not NVML's); not matched", e))
			continue
		}
		ok = true
		s := selector{raw: e, index: -1, uuid: e}
		if !pick(ch, devs, s, hasFoldPrefix) {
			notes = append(notes, fmt.Sprintf("no GPU matches CUDA_VISIBLE_DEVICES entry %q", e))
		}
	}
	return ch, notes, ok
}

func hasFoldPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// pick adds the device or slice s names to ch and reports whether it named one.
func pick(ch choice, devs []devInfo, s selector, match func(uuid, want string) bool) bool {
	found := false
	for _, d := range devs {
		if (s.index >= 0 && d.Index == s.index) || (s.uuid != "" && match(d.UUID, s.uuid)) {
			ch[d.Index] = nil // the whole device, every slice
			found = true
			continue
		}
		if s.uuid == "" {
			continue
		}
		for _, u := range d.Slices {
			if !match(u, s.uuid) {
				continue
			}
			found = true
			slices, whole := ch[d.Index]
			if whole && slices == nil {
				break // already wanted whole
			}
			if slices == nil {
				slices = map[string]bool{}
				ch[d.Index] = slices
			}
			slices[u] = true
		}
	}
	return found
}

// intersect keeps what both choices keep.
func intersect(a, b choice) choice {
	out := choice{}
	for idx, sa := range a {
		sb, ok := b[idx]
		if !ok {
			continue
		}
		switch {
		case sa == nil:
			out[idx] = sb
		case sb == nil:
			out[idx] = sa
		default:
			both := map[string]bool{}
			for u := range sa {
				if sb[u] {
					both[u] = true
				}
			}
			if len(both) > 0 {
				out[idx] = both
			}
		}
	}
	return out
}

// everything keeps every device whole.
func everything(devs []devInfo) choice {
	ch := choice{}
	for _, d := range devs {
		ch[d.Index] = nil
	}
	return ch
}

// choose applies --gpus and, when asked, CUDA_VISIBLE_DEVICES to devs.
func choose(devs []devInfo, sels []selector, matchCUDA bool, cudaVisible string) (choice, []string) {
	ch := everything(devs)
	var notes []string
	if len(sels) > 0 {
		c, n := chooseSelect(devs, sels)
		ch = intersect(ch, c)
		notes = append(notes, n...)
	}
	if matchCUDA {
		if strings.TrimSpace(cudaVisible) == "" {
			notes = append(notes, "CUDA_VISIBLE_DEVICES is not set; every GPU is kept")
		} else {
			c, n, ok := chooseCUDAVisible(devs, cudaVisible)
			notes = append(notes, n...)
			if ok {
				ch = intersect(ch, c)
			} else {
				notes = append(notes, "CUDA_VISIBLE_DEVICES names no UUID; every GPU is kept")
			}
		}
	}
	return ch, notes
}
