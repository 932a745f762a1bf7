package pipeline

import (
	"context"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/advice"
	"github.com/bridge-dev/bridge/forensics"
	"github.com/bridge-dev/bridge/jobrun"
	"github.com/bridge-dev/bridge/metrics"
	jobreport "github.com/bridge-dev/bridge/report"
	"github.com/bridge-dev/bridge/stats"
	"github.com/bridge-dev/bridge/summary"
	"github.com/bridge-dev/bridge/tracker"
	"github.com/bridge-dev/bridge/whyslow"
)

// The run's tick: the one place where bridge reads and writes its runs
// during the job, beside the samples. Once a --run-tick (a minute by
// default) a goroutine of its own makes one bounded read of each run
// whose sink ticks (jobrun.Sink.Tick: runs/get on MLflow) and the writes
// that follow (the run's note every noteEvery ticks), within tickBudget,
// every request through tracker.Request; it never holds the sampling
// loop (which it shares only the accumulator with, under accMu, for a
// copy of a few figures) or the child. What it learns goes into the
// samples: the job's energy per step (JobEnergyPerStep). At the end of the
// run, once the end is recorded, Finish ticks once more (the note, the
// energy per step's tags). A job-level evaluation that needs the run's
// state during the job (a multi-node job's, docs/multinode.md) belongs
// here.

// ScopeJob is the scope of a series about the whole job, every node's,
// that bridge makes from the job's run (the tick), not from a collector.
const ScopeJob metrics.Scope = "job"

// JobEnergyPerStep is the job's energy (every node's GPUs and CPU
// packages, as their energy series hold it) over the largest step the
// run's own series reached, as the last tick read them; each sample
// carries the last value once there is one.
var JobEnergyPerStep = &metrics.Desc{Name: "job_energy_per_step_joules", Unit: metrics.UnitJoules, Scope: ScopeJob, Steady: true,
	Help: "Energy the job's GPUs and CPU packages used since bridge started, over the largest step the training script's own series reached."}

// noteEvery: the run's note is written every noteEvery ticks (every 5
// minutes with the default --run-tick), and at the end.
const noteEvery = 5

// tickBudget is what one tick may take, its requests' retries included:
// half the tick, at most 30 s.
func tickBudget(tick time.Duration) time.Duration { return min(tick/2, 30*time.Second) }

// tickSink is a sink the tick reads the run of.
type tickSink struct {
	sink *jobrun.Sink
	r    *SinkRun
	warn bool // a failed tick was said (once, until one succeeds)
}

// startTick starts the tick when a sink ticks during the run.
func (s *Session) startTick() {
	for i := range s.sinks {
		if js, ok := s.sinks[i].Sink.(*jobrun.Sink); ok && js.TicksLive() {
			s.tickers = append(s.tickers, &tickSink{sink: js, r: &s.sinks[i]})
		}
	}
	if len(s.tickers) == 0 || s.set.RunTick <= 0 {
		return
	}
	s.tickCtx, s.tickCancel = context.WithCancel(context.Background())
	s.tickDone = make(chan struct{})
	go s.tickLoop()
}

// tickLoop ticks every RunTick until stopTick.
func (s *Session) tickLoop() {
	defer close(s.tickDone)
	defer s.recoverGo("the run's tick")
	t := time.NewTicker(s.set.RunTick)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-s.tickCtx.Done():
			return
		case <-t.C:
		}
		live := s.live(n%noteEvery == 0)
		live.At, live.Every = time.Now(), s.set.RunTick
		for _, ts := range s.tickers {
			ctx, cancel := context.WithTimeout(s.tickCtx, tickBudget(s.set.RunTick))
			s.tickOne(ctx, ts, live)
			cancel()
			if s.tickCtx.Err() != nil {
				return
			}
		}
	}
}

// tickOne is one tick of one sink's run.
func (s *Session) tickOne(ctx context.Context, ts *tickSink, live jobrun.Live) {
	id := ts.r.run()
	if id == "" {
		return // no run yet (a late start)
	}
	p, err := ts.sink.Tick(ctx, id, live)
	switch {
	case err != nil && s.tickCtx.Err() == nil && !ts.warn:
		ts.warn = true
		s.log.Warn("cannot read or write the run during the job; tried again next tick", "tracker", ts.r.Sink.Name(), "run", id, "err", err)
	case err != nil:
		s.log.Debug("the run's tick failed", "tracker", ts.r.Sink.Name(), "run", id, "err", err)
	case ts.warn:
		ts.warn = false
		s.log.Info("the run's tick reads the run again", "tracker", ts.r.Sink.Name(), "run", id)
	}
	if p.EnergyPerStepJoules > 0 && JobEnergyPerStep.Range().Holds(p.EnergyPerStepJoules) {
		s.perStep.Store(math.Float64bits(p.EnergyPerStepJoules))
	}
}

// stopTick ends the tick and waits for it until deadline: a request in
// flight is cancelled.
func (s *Session) stopTick(deadline time.Time) {
	if s.tickCancel == nil {
		return
	}
	s.tickCancel()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-s.tickDone:
	case <-t.C:
		s.log.Warn("the run's tick did not stop by the end's deadline; bridge does not wait for it")
	}
}

// endTick is the last tick, once the end is recorded on each tracker
// whose run ticks: the run's note, and the job's energy per step where
// the run has steps. ends[i] says what became of sink i's end.
func (s *Session) endTick(ctx context.Context, end map[string]string, status string) {
	live := s.liveWith(end, false)
	live.End, live.Status, live.At, live.Every = true, status, time.Now(), s.set.RunTick
	for i := range s.sinks {
		r := &s.sinks[i]
		js, ok := r.Sink.(*jobrun.Sink)
		if !ok || i >= len(s.ends) || s.ends[i] != "recorded" || ctx.Err() != nil {
			continue
		}
		func() {
			defer s.recoverGo("the run's last tick " + r.Sink.Name())
			p, err := js.Tick(ctx, r.run(), live)
			if err != nil {
				s.log.Warn("cannot write the run's note or energy per step at its end", "tracker", r.Sink.Name(), "run", r.run(), "err", err)
			}
			if p.EnergyPerStepJoules > 0 && s.endPerStep.Steps == 0 {
				s.endPerStep = p
			}
		}()
	}
}

// live is this node's figures now, for a tick: what its end would record
// now (liveWith, no end tags yet).
func (s *Session) live(note bool) jobrun.Live {
	return s.liveWith(nil, note)
}

// liveWith is this node's figures for a tick, over end (the end's tags,
// nil during the run): its figures (jobreport.TagFigures: the report reads
// them in place of series it would read the history of), its energy, its
// advice and cost, the bottleneck's verdict and shares, and during the run
// its latest sample's values of the signals the job's live evaluation
// compares (jobreport.LatestOf). The
// accumulator and the verdict are the sampling loop's: read under accMu,
// a copy of a few figures.
func (s *Session) liveWith(end map[string]string, note bool) jobrun.Live {
	s.accMu.Lock()
	defer s.accMu.Unlock()
	tags := map[string]string{jobreport.TagFigures: jobreport.FiguresTag(s.acc)}
	maps.Copy(tags, s.acc.EnergyTags())
	if end == nil {
		maps.Copy(tags, advice.Suggest(advice.UseOf(s.acc, false)).Tags())
		if c, ok := s.cost(time.Now()); ok {
			maps.Copy(tags, c.Tags())
		}
	}
	shares := ""
	if r, ok := s.analysis.Result(); ok {
		shares = r.SharesText()
		tags[whyslow.Tag] = r.Text()
	}
	maps.Copy(tags, end)
	live := jobrun.Live{Tags: tags, Shares: shares, Note: note}
	if end == nil {
		live.Latest = jobreport.LatestOf(s.acc.Last())
	}
	return live
}

// cost is this node's cost from the session's start to at, at the prices
// set; ok is false without one.
func (s *Session) cost(at time.Time) (advice.Cost, bool) {
	return advice.CostOf(advice.Prices{PerGPUHour: s.set.PricePerGPUHour, PerNodeHour: s.set.PricePerNodeHour}, gpusOf(&s.acc.Set), at.Sub(s.opened))
}

// gpusOf counts the whole GPUs the samples had series of.
func gpusOf(set *stats.Set) int {
	gpus := map[int]bool{}
	set.Each(func(_ string, d *metrics.Desc, _ stats.Stat) {
		if d != nil && d.Of != nil && d.Of.PerGPU && d.MIG < 0 {
			gpus[d.GPU] = true
		}
	})
	return len(gpus)
}

// adviceRows are the end-of-run table's rows of what the job should ask
// for next time, its energy per step and its cost (Finish made them).
func (s *Session) adviceRows() []summary.Row {
	var rows []summary.Row
	if l := s.endAdvice.Line(); l != "" {
		rows = append(rows, summary.Row{What: "next run", Value: l})
	}
	if p := s.endPerStep; p.Steps > 0 {
		rows = append(rows, summary.Row{What: "energy per step", Value: perStepText(p)})
	}
	if s.endCost != nil {
		rows = append(rows, summary.Row{What: "cost", Value: strings.TrimSpace(s.endCost.Tags()[advice.TagCost] + " (" + s.endCost.Basis + ")")})
	}
	return rows
}

// perStepText is the energy per step's row.
func perStepText(p jobrun.Progress) string {
	return strconv.FormatFloat(p.EnergyPerStepJoules, 'g', 4, 64) + " J over " + strconv.FormatInt(p.Steps, 10) +
		" steps (the job's GPUs and CPU packages, every node, over the largest step its run's own series reached)"
}

// adviseEnd adds to end's tags what the job should ask for next time
// (advice.Suggest, VPA's bump after an OOM kill) and, at the prices set,
// its cost, and keeps them for the table.
func (s *Session) adviseEnd(end tracker.EndInfo) {
	reason := end.Tags[forensics.TagExitReason]
	s.endAdvice = advice.Suggest(advice.UseOf(s.acc, reason == forensics.ReasonCgroupOOMKill || reason == forensics.ReasonNodeOOMKill))
	maps.Copy(end.Tags, s.endAdvice.Tags())
	at := end.Time
	if at.IsZero() {
		at = time.Now()
	}
	if c, ok := s.cost(at); ok {
		s.endCost = &c
		maps.Copy(end.Tags, c.Tags())
	}
}
