// Package spooltest reads a spool file for tests: what a finished bridge left,
// read independently of the spool package's writer, by the documented format.
// Open opens one as bridge does, for a test that writes one or checks its lock.
package spooltest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/spool"
)

// Open opens the spool at path as bridge does (spool.OpenWithin), with
// default options and a stall bound no test's disk reaches.
func Open(path string) (*spool.Spool, error) {
	return spool.OpenWithin(context.Background(), path, spool.Options{}, time.Hour)
}

// ReadFile reads every record of a spool: its samples in file order, the
// highest ack per "sink\x00run", and the attempts. Lines that are not records
// (a torn last line) are skipped, as bridge skips them.
func ReadFile(path string) (samples []metrics.Sample, acks map[string]int64, attempts []spool.Attempt, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("opening spool %s: %w", path, err)
	}
	defer f.Close()
	acks = map[string]int64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), spool.DefaultMaxLine+1)
	for sc.Scan() {
		var rec spool.Record
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		switch rec.Type {
		case spool.TypeStart:
			attempts = append(attempts, spool.Attempt{Start: rec})
		case spool.TypeRun:
			// A run found after the start record belongs to the attempt it
			// names, else to the last.
			n := len(attempts)
			for rec.Attempt > 0 && n > 0 && attempts[n-1].Start.Attempt != rec.Attempt {
				n--
			}
			if n > 0 && rec.Sink != "" && rec.Run != "" {
				st := &attempts[n-1].Start
				runs := map[string]string{rec.Sink: rec.Run}
				for k, v := range st.Runs {
					if k != rec.Sink {
						runs[k] = v
					}
				}
				info := map[string]string{}
				for k, v := range st.Info {
					info[k] = v
				}
				for k, v := range rec.Info {
					info[k] = v
				}
				st.Runs, st.Info = runs, info
			}
		case spool.TypeEnd:
			if n := len(attempts); n > 0 {
				r := rec
				attempts[n-1].End = &r
			}
		case spool.TypeSample:
			if rec.Seq == nil {
				continue
			}
			smp := metrics.Sample{Seq: *rec.Seq, Time: time.UnixMilli(rec.TS)}
			for k, v := range rec.Metrics {
				smp.Points = append(smp.Points, metrics.Named(k, v))
			}
			sort.Slice(smp.Points, func(i, j int) bool { return smp.Points[i].Name() < smp.Points[j].Name() })
			samples = append(samples, smp)
			if n := len(attempts); n > 0 {
				c := smp
				attempts[n-1].LastSample = &c
			}
		case spool.TypeAck:
			if rec.Seq == nil {
				continue
			}
			k := rec.Sink + "\x00" + rec.Run
			if v, ok := acks[k]; !ok || *rec.Seq > v {
				acks[k] = *rec.Seq
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("reading spool %s: %w", path, err)
	}
	return samples, acks, attempts, nil
}
