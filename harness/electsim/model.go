package electsim

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/bridge-dev/bridge/tracker/mlflow/election"
)

// run is one run of MLflow's store, reduced to what the election touches.
type run struct {
	id, startID string
	deleted     bool
	elected     bool
	param       string // the election param, "" none
}

// model is MLflow's run store for one key, with the semantics the
// election relies on (mlflow/store/tracking/sqlalchemy_store.py):
// runs/search sees the active runs committed before it; log-parameter is
// write-once (another value is refused, the same one accepted) and refused
// on a deleted run; set-tag is refused on a deleted run; delete is
// idempotent.
type model struct {
	rng     *rand.Rand
	runs    []*run // in creation order
	byID    map[string]*run
	elected []string // every run ever marked, in order
	jobs    map[string]*jobRun
}

func newModel(rng *rand.Rand) *model { return &model{rng: rng, byID: map[string]*run{}} }

func (m *model) search() []election.Candidate {
	var out []election.Candidate
	for _, r := range m.runs {
		if !r.deleted {
			out = append(out, election.Candidate{ID: r.id, StartID: r.startID, Elected: r.elected, Param: r.param})
		}
	}
	// MLflow orders by start time; the protocol must not care.
	m.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func (m *model) create(startID string) string {
	// MLflow's run ids are uuid4 hex: random, so their order is too.
	id := fmt.Sprintf("%016x%016x", m.rng.Uint64(), m.rng.Uint64())
	r := &run{id: id, startID: startID}
	m.runs = append(m.runs, r)
	m.byID[id] = r
	return id
}

// setParam is log-parameter followed, when refused, by get-run: the value
// the run holds, "" when it is deleted.
func (m *model) setParam(id, v string) string {
	r := m.byID[id]
	if r == nil || r.deleted {
		return ""
	}
	if r.param == "" {
		r.param = v
	}
	return r.param
}

// markElected is set-tag; false when the run is deleted (MLflow refuses).
func (m *model) markElected(id string) bool {
	r := m.byID[id]
	if r == nil || r.deleted {
		return false
	}
	r.elected = true
	if !slices.Contains(m.elected, id) {
		m.elected = append(m.elected, id)
	}
	return true
}

func (m *model) delete(id string) {
	if r := m.byID[id]; r != nil {
		r.deleted = true
	}
}

func (m *model) active() []string {
	var out []string
	for _, r := range m.runs {
		if !r.deleted {
			out = append(out, r.id)
		}
	}
	return out
}
