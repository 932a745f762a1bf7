package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
	"github.com/bridge-dev/bridge/harness/testbin"
	"github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/tracker/mlflow"
)

// largeReportNodes makes a job whose report is larger than the queue of
// bridge's own output (internal/safeout, 256 KiB): 700 nodes' end lines
// give about 580 KB of JSON.
const largeReportNodes = 700

// TestReportLargerThanTheOutputQueue: `bridge report` on a large job
// prints its whole answer, as JSON, Markdown and text: its stdout is the
// answer (no child to protect), so it is written whole, not through the
// bounded queue that drops what does not fit (a 1,024-node job's JSON
// is 850 KB: it printed nothing and exited 0).
func TestReportLargerThanTheOutputQueue(t *testing.T) {
	srv := mlflowtest.Shared(t)
	exp := srv.CreateExperiment(t, fmt.Sprintf("large-report-%d", time.Now().UnixNano()))
	job := srv.CreateRun(t, exp, "job")
	ended := time.Now()
	tags := map[string]string{mlflow.TagJobKey: "test:large-report:" + job, mlflow.TagNodes: fmt.Sprint(largeReportNodes)}
	figs := `{"samples":360,"cpu_mean_cores":95.967,"cpu_peak_cores":110.97,"gpu_utilization_percentage":97.312,"gpu_sm_active_ratio":0.781,"network_megabytes_per_second":12.345}`
	for i := range largeReportNodes {
		node := fmt.Sprintf("node-%d", i)
		tags[tracker.StateTag(node, "")] = report.EndLine(map[string]string{"bridge.exit_code": "0", "bridge.exit_reason": "success",
			"bridge.peak_working_set_megabytes": "412611", "bridge.memory_limit_megabytes": "1717987", "bridge.cpu_limit_cores": "112",
			"bridge.energy_gpus_joules": "8623841", report.TagFigures: figs},
			report.Ending{Who: node, Status: mlflow.StatusFinished, Ended: ended, Run: fmt.Sprintf("%032x", i)})
	}
	srv.LogBatch(t, job, tags, nil)

	// A reader that went away (`bridge report | head -1`) ends the
	// output, not the command.
	gone := exec.Command(testbin.Bridge(t), "report", "--json", job)
	gone.Env = cleanEnv("MLFLOW_TRACKING_URI=" + srv.URL)
	gone.Stdout = deadPipe(t)
	if code := exitCode(t, gone.Run()); code != 0 {
		t.Errorf("bridge report into a closed pipe: exit %d, want 0", code)
	}

	for _, format := range []string{"--json", "--markdown", ""} {
		args := []string{"report", job}
		if format != "" {
			args = append(args, format)
		}
		cmd := exec.Command(testbin.Bridge(t), args...)
		cmd.Env = cleanEnv("MLFLOW_TRACKING_URI=" + srv.URL)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if code := exitCode(t, cmd.Run()); code != 0 {
			t.Fatalf("bridge report %s exited %d: %s", format, code, &errb)
		}
		switch format {
		case "--json":
			var rep report.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("bridge report --json (%d bytes): %v; stderr: %s", out.Len(), err, &errb)
			}
			if out.Len() <= 256<<10 {
				t.Fatalf("the report's JSON is %d bytes: the test needs more than the output queue's 256 KiB", out.Len())
			}
			if len(rep.Nodes) != largeReportNodes {
				t.Errorf("bridge report --json: %d rows, want %d", len(rep.Nodes), largeReportNodes)
			}
		default:
			last := fmt.Sprintf("node-%d ", largeReportNodes-1)
			if format == "--markdown" {
				last = fmt.Sprintf("| node-%d |", largeReportNodes-1)
			}
			if !strings.Contains(out.String(), last) {
				t.Errorf("bridge report %s (%d bytes) has no row %q: cut short; stderr: %s", format, out.Len(), last, &errb)
			}
		}
	}
}
