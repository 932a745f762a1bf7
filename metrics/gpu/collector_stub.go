//go:build !(linux && cgo)

package gpu

import (
	"context"

	"github.com/bridge-dev/bridge/metrics"
)

// Library stands in for nvml.Interface, which needs cgo; it must be nil here.
type Library interface{}

// compiledOut is the reason Detect and Tags give in this build.
const compiledOut = "compiled out (bridge was built without cgo, e.g. CGO_ENABLED=0, or not for Linux; NVML needs cgo)"

// Collector is the GPU collector of a build without cgo: it is always off.
type Collector struct{}

// New validates opts and returns a collector that is off.
func New(opts Options) (*Collector, error) {
	if _, err := parseSelect(opts.Select); err != nil {
		return nil, err
	}
	return &Collector{}, nil
}

// Name returns "gpu".
func (c *Collector) Name() string { return Name }

// Collect adds no points.
func (c *Collector) Collect(context.Context, *metrics.Batch) error { return nil }

// Detect says the collector is compiled out.
func (c *Collector) Detect(context.Context) map[string]any {
	return map[string]any{"status": "off: " + compiledOut}
}

// Tags says the collector is compiled out.
func (c *Collector) Tags() map[string]string {
	return map[string]string{"bridge.gpu.status": "off: " + compiledOut}
}

// XidEvents returns nil.
func (c *Collector) XidEvents() []metrics.XidEvent { return nil }

// Close does nothing.
func (c *Collector) Close() error { return nil }

// Indexes returns nil: no GPU is collected.
func (c *Collector) Indexes() map[string]int { return nil }

// Count returns 0: NVML is compiled out.
func (c *Collector) Count() int { return 0 }
