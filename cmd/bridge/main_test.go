package main

import (
	"os"
	"testing"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
)

// TestMain stops the MLflow server that mlflowtest.Shared may have started
// for this package.
func TestMain(m *testing.M) { os.Exit(mlflowtest.Main(m)) }
