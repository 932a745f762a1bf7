// Command election measures what the multi-node election costs an MLflow
// server and what it costs a job at scale (docs/multinode.md, "Timing").
//
//	go run ./bench/election measure -url http://127.0.0.1:5000
//	    times each request the election makes against a real server, one
//	    at a time (its service time) and from many clients at once (its
//	    throughput), and prints the fitted server model as flags for sim;
//	go run ./bench/election sim -nodes 1024 -workers 2 -search 4ms ...
//	    runs the election of N nodes (the real protocol code, package
//	    election) against that model (harness/electsim), several seeds, and
//	    prints the join delay's p50/p99/max and the requests per node.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bridge-dev/bridge/harness/electsim"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: election measure|sim [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "measure":
		err = measure(os.Args[2:])
	case "sim":
		err = sim(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: measure or sim", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(1)
	}
}

// kinds are the election's requests, in the flags' names.
var kinds = []string{"search", "create", "set-param", "mark-elected", "delete"}

func sim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	nodes := fs.Int("nodes", 1024, "nodes of the job")
	workers := fs.Int("workers", 2, "server workers (requests served at once)")
	seeds := fs.Int("seeds", 5, "schedules (seeds) to run")
	spread := fs.Duration("spread", 0, "nodes start uniformly within this")
	settle := fs.Duration("settle", time.Second, "--job-settle (T)")
	tiers := fs.Bool("tiers", true, "nodes have launcher indices (node 0 creates)")
	rtt := fs.Duration("network", time.Millisecond, "network delay each way, at most")
	base := map[string]*time.Duration{}
	tail := map[string]*time.Duration{}
	for _, k := range kinds {
		base[k] = fs.Duration(k, 5*time.Millisecond, "service time of "+k)
		tail[k] = fs.Duration(k+"-tail", time.Millisecond, "mean of the exponential tail of "+k+"'s service time")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv := &electsim.Server{Workers: *workers, Service: map[string]electsim.Dist{}}
	var mean time.Duration
	for _, k := range kinds {
		srv.Service[k] = electsim.Dist{Base: *base[k], Tail: *tail[k]}
		mean += *base[k] + *tail[k]
	}
	srv.Mean = mean / time.Duration(len(kinds))
	var delays []time.Duration
	reqs, busy, last := 0, time.Duration(0), time.Duration(0)
	for seed := range *seeds {
		res, err := electsim.Run(electsim.Options{Seed: uint64(seed), Nodes: *nodes, Settle: *settle, Tiers: *tiers,
			StartSpread: *spread, MaxDelay: *rtt, Server: srv, Horizon: time.Hour})
		if err != nil {
			return err
		}
		delays = append(delays, res.JoinedBy()...)
		for _, n := range res.Requests {
			reqs += n
		}
		busy += res.Busy
		last += res.Last()
	}
	slices.Sort(delays)
	q := func(p float64) time.Duration { return delays[min(len(delays)-1, int(p*float64(len(delays))))] }
	fmt.Printf("nodes %d, workers %d, T %v, tiers %v, %d seeds: join delay p50 %v p99 %v max %v; %.2f requests per node; server busy %v per job (%.0f%% of %v, the last join)\n",
		*nodes, *workers, *settle, *tiers, *seeds, q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond),
		float64(reqs)/float64(*seeds**nodes), (busy / time.Duration(*seeds)).Round(time.Millisecond),
		100*float64(busy)/float64(*workers)/float64(last), (last / time.Duration(*seeds)).Round(time.Millisecond))
	return nil
}

// client is a bare MLflow REST client: the bench must not depend on the
// sink it measures.
type client struct {
	url string
	hc  *http.Client
}

func (c *client) post(endpoint string, body, out any) (time.Duration, error) {
	b, _ := json.Marshal(body)
	began := time.Now()
	resp, err := c.hc.Post(c.url+"/api/2.0/mlflow/"+endpoint, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	took := time.Since(began)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s: %s", endpoint, resp.Status, data)
	}
	if out != nil {
		return took, json.Unmarshal(data, out)
	}
	return took, nil
}

func measure(args []string) error {
	fs := flag.NewFlagSet("measure", flag.ContinueOnError)
	url := fs.String("url", "", "MLflow server (http://127.0.0.1:PORT)")
	n := fs.Int("n", 200, "requests of each kind, one at a time")
	others := fs.Int("others", 500, "runs of other jobs in the experiment first (a search filters them out)")
	clients := fs.Int("clients", 32, "clients at once for the throughput figure")
	pgid := fs.Int("pgid", 0, "the server's process group: its CPU time a request is printed too (the service time of a server with CPUs of its own)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return fmt.Errorf("-url is required")
	}
	c := &client{url: strings.TrimRight(*url, "/"), hc: &http.Client{Timeout: time.Minute}}
	var exp struct {
		ID string `json:"experiment_id"`
	}
	name := fmt.Sprintf("bench-election-%d", time.Now().UnixNano())
	if _, err := c.post("experiments/create", map[string]string{"name": name}, &exp); err != nil {
		return err
	}
	create := func(key string) (string, time.Duration, error) {
		var out struct {
			Run struct {
				Info struct {
					RunID string `json:"run_id"`
				} `json:"info"`
			} `json:"run"`
		}
		took, err := c.post("runs/create", map[string]any{"experiment_id": exp.ID, "start_time": time.Now().UnixMilli(),
			"tags": []map[string]string{{"key": "bridge.job_key", "value": key}, {"key": "bridge.start_id", "value": fmt.Sprint(time.Now().UnixNano())}}}, &out)
		return out.Run.Info.RunID, took, err
	}
	for i := range *others {
		if _, _, err := create(fmt.Sprintf("other:%d", i)); err != nil {
			return err
		}
	}
	search := func(key string) (time.Duration, error) {
		return c.post("runs/search", map[string]any{"experiment_ids": []string{exp.ID}, "run_view_type": "ACTIVE_ONLY", "max_results": 1000,
			"filter": fmt.Sprintf("tags.`bridge.job_key` = '%s'", key)}, nil)
	}
	times := map[string][]time.Duration{}
	cpu := map[string]time.Duration{}
	account := func(kind string, f func() (time.Duration, error)) (time.Duration, error) {
		before := groupCPU(*pgid)
		took, err := f()
		cpu[kind] += groupCPU(*pgid) - before
		times[kind] = append(times[kind], took)
		return took, err
	}
	for i := range *n {
		key := fmt.Sprintf("job:%d", i)
		var id string
		if _, err := account("create", func() (took time.Duration, err error) { id, took, err = create(key); return }); err != nil {
			return err
		}
		if _, err := account("search", func() (time.Duration, error) { return search(key) }); err != nil {
			return err
		}
		steps := []struct{ kind, endpoint, key, value string }{
			{"set-param", "runs/log-parameter", "bridge.election", "eligible:1000"},
			{"mark-elected", "runs/set-tag", "bridge.elected", "true"},
			{"delete", "runs/delete", "", ""},
		}
		for _, st := range steps {
			body := map[string]string{"run_id": id}
			if st.key != "" {
				body["key"], body["value"] = st.key, st.value
			}
			if _, err := account(st.kind, func() (time.Duration, error) { return c.post(st.endpoint, body, nil) }); err != nil {
				return err
			}
		}
	}
	fmt.Printf("one at a time, %d each, %d other runs in the experiment (ms): kind p10 p50 p90 p99, server CPU a request\n", *n, *others)
	var flags, cpuFlags []string
	for _, k := range kinds {
		ts := times[k]
		slices.Sort(ts)
		q := func(p float64) time.Duration { return ts[min(len(ts)-1, int(p*float64(len(ts))))] }
		fmt.Printf("  %-12s %6.2f %6.2f %6.2f %6.2f   %6.2f\n", k, ms(q(0.1)), ms(q(0.5)), ms(q(0.9)), ms(q(0.99)), ms(cpu[k]/time.Duration(len(ts))))
		var sum time.Duration
		for _, t := range ts {
			sum += t
		}
		// The model: the fastest tenth as the base, the rest an
		// exponential tail of the same mean.
		b := q(0.1)
		flags = append(flags, fmt.Sprintf("-%s %v -%s-tail %v", k, b.Round(10*time.Microsecond), k, (sum/time.Duration(len(ts))-b).Round(10*time.Microsecond)))
		if *pgid > 0 {
			// A server with its CPUs to itself serves a request in about
			// its CPU time: the base, with a tenth of it as the tail.
			c := cpu[k] / time.Duration(len(ts))
			cpuFlags = append(cpuFlags, fmt.Sprintf("-%s %v -%s-tail %v", k, (c*9/10).Round(10*time.Microsecond), k, (c/10).Round(10*time.Microsecond)))
		}
	}
	// Throughput: searches from many clients at once for 10 s.
	var mu sync.Mutex
	done := 0
	stop := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	for i := range *clients {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if _, err := search(fmt.Sprintf("job:%d", i)); err == nil {
					mu.Lock()
					done++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("searches from %d clients at once: %.0f a second\n", *clients, float64(done)/10)
	fmt.Printf("model flags (latency): %s\n", strings.Join(flags, " "))
	if *pgid > 0 {
		fmt.Printf("model flags (server CPU): %s\n", strings.Join(cpuFlags, " "))
	}
	return nil
}

// groupCPU is the user and system CPU time of the processes in process
// group pgid (the server and its workers), 0 when pgid is 0.
func groupCPU(pgid int) time.Duration {
	if pgid <= 0 {
		return 0
	}
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0
	}
	var ticks float64
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PGRP != pgid {
			continue
		}
		ticks += st.CPUTime()
	}
	return time.Duration(ticks * float64(time.Second))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
