// Package collecttest runs a collector once, for tests.
package collecttest

import (
	"context"

	"github.com/bridge-dev/bridge/metrics"
)

// Collect runs one Collect of c into a fresh Batch and returns its points.
func Collect(ctx context.Context, c metrics.Collector) ([]metrics.Point, error) {
	var b metrics.Batch
	err := c.Collect(ctx, &b)
	return b.Points, err
}
