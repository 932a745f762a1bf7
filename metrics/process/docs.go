package process

import "github.com/bridge-dev/bridge/metrics"

// docs are the tables of docs/metrics.md this collector's series are in.
var docs []metrics.DocTable
