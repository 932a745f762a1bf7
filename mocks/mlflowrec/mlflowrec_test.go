package mlflowrec

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-dev/bridge/harness/mlflowtest"
)

// TestMain stops the MLflow server mlflowtest.Shared may start.
func TestMain(m *testing.M) { os.Exit(mlflowtest.Main(m)) }

// answer is what a server answered: status, MLflow's error_code, and the
// top-level keys of a 2xx JSON answer.
type answer struct {
	Status int
	Code   string
	Keys   []string
}

// answerCases are the requests the recorder must answer as MLflow does;
// {exp} is an experiment's name, {exp_id} its id and {run} a run of it.
var answerCases = []struct {
	name, method, path, contentType, body string
	want                                  answer
}{
	{"unknown experiment", "GET", "experiments/get-by-name?experiment_name={exp}-missing", "", "", answer{404, "RESOURCE_DOES_NOT_EXIST", nil}},
	{"experiment", "GET", "experiments/get-by-name?experiment_name={exp}", "", "", answer{200, "", []string{"experiment"}}},
	{"experiment exists", "POST", "experiments/create", "application/json", `{"name":"{exp}"}`, answer{400, "RESOURCE_ALREADY_EXISTS", nil}},
	{"experiment without name", "POST", "experiments/create", "application/json", `{}`, answer{400, "INVALID_PARAMETER_VALUE", nil}},
	{"not JSON content", "POST", "experiments/create", "text/plain", `{"name":"{exp}-2"}`, answer{400, "INVALID_PARAMETER_VALUE", nil}},
	{"run in unknown experiment", "POST", "runs/create", "application/json", `{"experiment_id":"987654321987","run_name":"r","start_time":1}`, answer{404, "RESOURCE_DOES_NOT_EXIST", nil}},
	{"run name and tag differ", "POST", "runs/create", "application/json",
		`{"experiment_id":"{exp_id}","run_name":"a","start_time":1,"tags":[{"key":"mlflow.runName","value":"b"}]}`, answer{400, "INVALID_PARAMETER_VALUE", nil}},
	{"run", "POST", "runs/create", "application/json", `{"experiment_id":"{exp_id}","run_name":"r2","start_time":1}`, answer{200, "", []string{"run"}}},
	{"unknown run", "GET", "runs/get?run_id=ffffffffffffffffffffffffffffffff", "", "", answer{404, "RESOURCE_DOES_NOT_EXIST", nil}},
	{"get run", "GET", "runs/get?run_id={run}", "", "", answer{200, "", []string{"run"}}},
	{"log to unknown run", "POST", "runs/log-batch", "application/json",
		`{"run_id":"ffffffffffffffffffffffffffffffff","metrics":[{"key":"a","value":1,"timestamp":1,"step":0}]}`, answer{404, "RESOURCE_DOES_NOT_EXIST", nil}},
	{"1001 metrics", "POST", "runs/log-batch", "application/json", `{"run_id":"{run}","metrics":[` + repeat(`{"key":"a","value":1,"timestamp":1,"step":%d}`, 1001) + `]}`, answer{400, "INVALID_PARAMETER_VALUE", nil}},
	{"101 tags", "POST", "runs/log-batch", "application/json", `{"run_id":"{run}","tags":[` + repeat(`{"key":"t%d","value":"v"}`, 101) + `]}`, answer{400, "INVALID_PARAMETER_VALUE", nil}},
	{"log", "POST", "runs/log-batch", "application/json",
		`{"run_id":"{run}","metrics":[{"key":"system/a","value":"NaN","timestamp":1,"step":0}],"tags":[{"key":"t","value":"v"}]}`, answer{200, "", []string{}}},
	{"unknown status", "POST", "runs/update", "application/json", `{"run_id":"{run}","status":"BOGUS"}`, answer{200, "", []string{"run_info"}}},
	{"update", "POST", "runs/update", "application/json", `{"run_id":"{run}","status":"FINISHED","end_time":5}`, answer{200, "", []string{"run_info"}}},
	{"update unknown run", "POST", "runs/update", "application/json", `{"run_id":"ffffffffffffffffffffffffffffffff","status":"FINISHED"}`, answer{404, "RESOURCE_DOES_NOT_EXIST", nil}},
	{"unknown endpoint", "POST", "runs/no-such-endpoint", "application/json", `{}`, answer{404, "", nil}},
}

func repeat(format string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(format, i)
	}
	return strings.Join(parts, ",")
}

// TestAnswers checks the recorder's answers against the table and, as its
// subtest "mlflow" (with BRIDGE_TEST_PYTHON), the table against a real
// MLflow server, so that the recorder's answers are MLflow's.
func TestAnswers(t *testing.T) {
	t.Run("recorder", func(t *testing.T) { checkAnswers(t, Start(t).URL) })
	t.Run("mlflow", func(t *testing.T) { checkAnswers(t, mlflowtest.Shared(t).URL) })
}

func checkAnswers(t *testing.T, uri string) {
	exp := fmt.Sprintf("mlflowrec-%d", time.Now().UnixNano()) // unique on a shared server
	var created struct {
		ExperimentID string `json:"experiment_id"`
	}
	call(t, uri, "POST", "experiments/create", "application/json", `{"name":"`+exp+`"}`, &created)
	var run struct {
		Run struct {
			Info struct {
				RunID string `json:"run_id"`
			} `json:"info"`
		} `json:"run"`
	}
	call(t, uri, "POST", "runs/create", "application/json", `{"experiment_id":"`+created.ExperimentID+`","run_name":"r","start_time":1}`, &run)
	fill := strings.NewReplacer("{exp_id}", created.ExperimentID, "{exp}", exp, "{run}", run.Run.Info.RunID).Replace
	for _, c := range answerCases {
		var out map[string]json.RawMessage
		got := call(t, uri, c.method, fill(c.path), c.contentType, fill(c.body), &out)
		if got.Status/100 == 2 {
			got.Keys = slices.Sorted(maps.Keys(out))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %s %s answered %+v, want %+v", c.name, c.method, c.path, got, c.want)
		}
	}
}

// call makes one request and decodes a 2xx JSON answer into out; it
// returns the status and, for an MLflow error, its error_code.
func call(t *testing.T, uri, method, endpoint, contentType, body string, out any) answer {
	t.Helper()
	req, err := http.NewRequest(method, uri+Prefix+endpoint, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{Status: resp.StatusCode}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: answer %q: %v", method, endpoint, raw, err)
		}
		return a
	}
	var e struct {
		Code string `json:"error_code"`
	}
	if json.Unmarshal(raw, &e) == nil {
		a.Code = e.Code
	}
	return a
}
