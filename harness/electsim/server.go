package electsim

import (
	"math/rand/v2"
	"time"
)

// Server is a model of one MLflow server: Workers requests served at once,
// the rest waiting in order; each request's service time drawn from its
// kind's Dist. Fit it to a real server's measured times (bench/election).
type Server struct {
	Workers int
	Service map[string]Dist
	Mean    time.Duration // a mean service time, for the liveness bound
}

// Dist is a service time: Base, plus an exponential tail of mean Tail.
type Dist struct{ Base, Tail time.Duration }

func (d Dist) draw(rng *rand.Rand) time.Duration {
	return d.Base + time.Duration(rng.ExpFloat64()*float64(d.Tail))
}

type serverState struct {
	Server
	rng     *rand.Rand
	busy    int
	waiting []queued
}

type queued struct {
	kind  string
	apply func()
}

// enqueue serves a request when a worker is free; the store applies it at
// the end of its service (when the transaction commits).
func (s *serverState) enqueue(e *engine, kind string, apply func()) {
	if s.busy >= max(s.Workers, 1) {
		s.waiting = append(s.waiting, queued{kind, apply})
		return
	}
	s.busy++
	d := s.Service[kind].draw(s.rng)
	e.res.Busy += d
	e.at(d, func() {
		apply()
		s.busy--
		if len(s.waiting) > 0 {
			q := s.waiting[0]
			s.waiting = s.waiting[1:]
			s.enqueue(e, q.kind, q.apply)
		}
	})
}
