package forensics

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// OOM score adjustment bounds (include/uapi/linux/oom.h).
const (
	OOMScoreAdjMin = -1000 // never chosen by the OOM killer, nor killed by a group kill
	OOMScoreAdjMax = 1000
)

// ErrOOMScorePermission is wrapped by SetOOMScoreAdj when the kernel refused
// a lower value: that needs CAP_SYS_RESOURCE, which Docker's and Kubernetes'
// default capability sets do not grant.
var ErrOOMScorePermission = errors.New("lowering oom_score_adj needs CAP_SYS_RESOURCE")

// SetOOMScoreAdj writes value to <procRoot>/<pid>/oom_score_adj. The value is
// inherited at fork: set bridge's own only after the child has started, or
// the training process becomes unkillable too and a cgroup OOM finds no
// victim.
func SetOOMScoreAdj(procRoot string, pid, value int) error {
	if value < OOMScoreAdjMin || value > OOMScoreAdjMax {
		return fmt.Errorf("oom_score_adj %d is out of range [%d, %d]", value, OOMScoreAdjMin, OOMScoreAdjMax)
	}
	path := filepath.Join(procRoot, strconv.Itoa(pid), "oom_score_adj")
	// O_WRONLY without O_CREATE: a missing process is an error, not a new file.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("setting %s to %d: %w: %w", path, value, ErrOOMScorePermission, err)
		}
		return fmt.Errorf("setting %s to %d: %w", path, value, err)
	}
	_, werr := f.WriteString(strconv.Itoa(value) + "\n")
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		// The kernel answers EACCES on the write, not the open, when the
		// value is below the process's oom_score_adj_min.
		if errors.Is(werr, os.ErrPermission) {
			return fmt.Errorf("setting %s to %d: %w: %w", path, value, ErrOOMScorePermission, werr)
		}
		return fmt.Errorf("setting %s to %d: %w", path, value, werr)
	}
	return nil
}
