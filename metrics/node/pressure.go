package node

import (
	"errors"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/metrics"
)

// collectPressure reads /proc/pressure/{cpu,memory,io}: host-wide stall
// shares. A kernel without PSI (or booted with psi=0) has no data.
func (c *Collector) collectPressure(out *metrics.Batch) error {
	var errs []error
	for i, p := range Pressure {
		ps, ok, err := readSource(c, c.pressureFiles[i], "node pressure", parsePSI)
		if !ok {
			errs = append(errs, err) // nil for a file this kernel lacks
			continue
		}
		pressurePoints(out, p, ps, c.pressureFiles[i])
	}
	return errors.Join(errs...)
}

// pressurePoints gives the avg10 share of each line present. The cpu file
// has no "full" line on kernels before 5.13: that point is then omitted.
func pressurePoints(out *metrics.Batch, p metrics.Pressure, ps procfs.PSIStats, src string) {
	if ps.Some != nil {
		out.Add(p.Some, ps.Some.Avg10, src)
	}
	if ps.Full != nil {
		out.Add(p.Full, ps.Full.Avg10, src)
	}
}
