// Package faultproxy is an HTTP proxy on 127.0.0.1 that sits between bridge
// and a real tracker server (MLflow, the W&B mock) and injects the faults a
// tracker or the network between can produce, on a schedule: refused
// connections, hung or slow answers, 429 with Retry-After, 5xx, resets before
// or after the server applied the request, endless bodies, 200 answers that
// are not the tracker's JSON, and rewritten run ids.
//
// A fault picks requests by path, by a test's function, by what the body
// holds, and a share of them (seeded draws: 20% of every call).
// Requests that match no scheduled fault are forwarded unchanged. The proxy
// counts every request per path, so a test can wait until a fault was hit.
package faultproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is one kind of fault.
type Kind string

// The faults. Each applies to a request whose path ends with Fault.Path.
const (
	// Refuse resets this connection and closes the listener: later
	// connections are refused until Up (Down does the same without a
	// request).
	Refuse Kind = "refuse"
	// Hang never answers; the connection is closed when the client gives up
	// or the proxy closes.
	Hang Kind = "hang"
	// Slow forwards the request after Delay.
	Slow Kind = "slow"
	// SlowAnswer forwards the request at once (the server applies it) and
	// answers Delay later.
	SlowAnswer Kind = "slow-answer"
	// Status answers Code (429, 500, 502, 503...) with Retry-After when set
	// and a small body, without forwarding.
	Status Kind = "status"
	// ResetMidBody forwards, then sends the status line, headers and half
	// the server's body, and resets the connection.
	ResetMidBody Kind = "reset-mid-body"
	// Reset resets the connection without forwarding: the server never
	// sees the request.
	Reset Kind = "reset"
	// AppliedThenReset forwards (the server applies the request), then
	// resets the connection without answering.
	AppliedThenReset Kind = "applied-then-reset"
	// Endless answers 200 with a JSON-looking body that never ends.
	Endless Kind = "endless"
	// Answer answers Code (default 200) with Body and ContentType, without
	// forwarding (an HTML login page, non-JSON, wrong-typed JSON).
	Answer Kind = "answer"
	// RewriteRunID forwards, then replaces run.info.run_id (and run_uuid)
	// in the server's JSON answer with RunID (runs/create).
	RewriteRunID Kind = "rewrite-run-id"
	// EndlessPages forwards without the request's page_token (so the
	// server answers its first page again), then sets next_page_token in
	// the server's JSON answer to a token never given before: paging that
	// never ends (metrics/get-history).
	EndlessPages Kind = "endless-pages"
)

// Fault is one scheduled fault.
type Fault struct {
	Path        string        // suffix of the request path it applies to; "" for every request
	Kind        Kind          //
	Times       int           // how many matching requests get it; 0 for all until Clear
	Code        int           // Status, Answer
	RetryAfter  string        // Status: the Retry-After header ("0", "5", an HTTP date)
	Delay       time.Duration // Slow, SlowAnswer
	Body        string        // Answer
	ContentType string        // Answer; default text/html
	RunID       string        // RewriteRunID
	// Match, when set, must also hold for the request (e.g. only bridge's
	// requests, by User-Agent, when the child talks to the same server).
	Match func(*http.Request) bool
	// BodyContains, when set, must occur in the request's body (the
	// log-batch that carries a given tag, one GraphQL operation).
	BodyContains string
	// Share, when above 0, applies the fault to about that share of the
	// requests it matches, drawn from the proxy's seeded source (Seed);
	// a request not drawn goes on to the next fault, or is forwarded.
	Share float64
}

// FromUserAgent matches requests whose User-Agent starts with prefix.
func FromUserAgent(prefix string) func(*http.Request) bool {
	return func(r *http.Request) bool { return strings.HasPrefix(r.UserAgent(), prefix) }
}

// Proxy is a running fault proxy.
type Proxy struct {
	target string // http://host:port of the real server
	addr   string // 127.0.0.1:port the proxy listens on
	client *http.Client

	mu     sync.Mutex
	ln     net.Listener
	srv    *http.Server
	faults []*Fault
	counts map[string]int // requests per path
	hits   map[Kind]int   // faults applied
	closed bool
	hung   chan struct{} // closed by Close: releases hung requests
	draws  *rand.Rand    // Fault.Share's draws
	pages  atomic.Int64  // EndlessPages' tokens given
}

// Start listens on 127.0.0.1 (a free port) and forwards to target
// (http://host:port, no path).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening on 127.0.0.1: %w", err)
	}
	p := &Proxy{
		target: strings.TrimRight(target, "/"),
		addr:   ln.Addr().String(),
		client: &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}},
		counts: map[string]int{},
		hits:   map[Kind]int{},
		hung:   make(chan struct{}),
		draws:  rand.New(rand.NewPCG(1, 1)),
	}
	p.serve(ln)
	return p, nil
}

func (p *Proxy) serve(ln net.Listener) {
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.ln, p.srv = ln, srv
	go srv.Serve(ln) //nolint:errcheck // ends with Close
}

// URL is the proxy's base URL, to give bridge in place of the server's.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Schedule adds faults; they are matched in order.
func (p *Proxy) Schedule(fs ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range fs {
		f := fs[i]
		p.faults = append(p.faults, &f)
	}
}

// Seed restarts the draws of Fault.Share from seed: the same requests in
// the same order get the same faults.
func (p *Proxy) Seed(seed uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draws = rand.New(rand.NewPCG(seed, seed))
}

// Clear removes every scheduled fault: requests are forwarded unchanged.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = nil
}

// Count is how many requests whose path ends with suffix reached the proxy.
func (p *Proxy) Count(suffix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for path, c := range p.counts {
		if strings.HasSuffix(path, suffix) {
			n += c
		}
	}
	return n
}

// Hits is how many requests got a fault of kind k.
func (p *Proxy) Hits(k Kind) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[k]
}

// Down closes the listener: connections are refused (the port stays
// reserved by nobody; Up listens on it again).
func (p *Proxy) Down() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return nil
	}
	err := p.srv.Close()
	p.srv, p.ln = nil, nil
	return err
}

// Up listens again on the same address after Down.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("faultproxy on %s: closed", p.addr)
	}
	if p.srv != nil {
		return nil
	}
	var ln net.Listener
	var err error
	// The port was just freed; another process may hold it for a moment.
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serve(ln)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("faultproxy: listening on %s again: %w", p.addr, err)
}

// Close stops the proxy and releases hung requests.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.hung)
	}
	if p.srv == nil {
		return nil
	}
	err := p.srv.Close()
	p.srv, p.ln = nil, nil
	return err
}

// take returns the fault for r, if any, and uses one of its times.
func (p *Proxy) take(r *http.Request, body []byte) *Fault {
	path := r.URL.Path
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[path]++
	for i, f := range p.faults {
		if f.Path != "" && !strings.HasSuffix(path, f.Path) || f.Match != nil && !f.Match(r) ||
			f.BodyContains != "" && !bytes.Contains(body, []byte(f.BodyContains)) {
			continue
		}
		if f.Share > 0 && p.draws.Float64() >= f.Share {
			continue
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				p.faults = append(p.faults[:i:i], p.faults[i+1:]...)
			}
		}
		p.hits[f.Kind]++
		c := *f
		return &c
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "faultproxy: reading the request: "+err.Error(), http.StatusBadGateway)
		return
	}
	f := p.take(r, body)
	if f == nil {
		p.forwardAndCopy(w, r, body)
		return
	}
	switch f.Kind {
	case Refuse:
		// Only the connections after this one are refused.
		go p.Down() //nolint:errcheck // Close of a listener
		reset(w)
	case Hang:
		select {
		case <-r.Context().Done():
		case <-p.hung:
		}
	case Slow:
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return
		}
		p.forwardAndCopy(w, r, body)
	case SlowAnswer:
		resp, err := p.forward(r, body)
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return
		}
		if err != nil {
			reset(w)
			return
		}
		copyHeader(w.Header(), resp.header)
		w.WriteHeader(resp.code)
		w.Write(resp.body) //nolint:errcheck // the client may have given up
	case Status:
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Code)
		fmt.Fprintf(w, `{"error_code":"TEMPORARILY_UNAVAILABLE","message":"faultproxy: injected %d"}`, f.Code)
	case ResetMidBody:
		resp, err := p.forward(r, body)
		if err != nil {
			reset(w)
			return
		}
		copyHeader(w.Header(), resp.header)
		w.Header().Set("Content-Length", fmt.Sprint(len(resp.body)))
		w.WriteHeader(resp.code)
		w.Write(resp.body[:len(resp.body)/2]) //nolint:errcheck // the client sees a reset anyway
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		reset(w)
	case Reset:
		reset(w)
	case AppliedThenReset:
		p.forward(r, body) //nolint:errcheck // applied or not, the client sees a reset
		reset(w)
	case Endless:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		chunk := bytes.Repeat([]byte(`{"a":1},`), 8192)
		w.Write([]byte("[")) //nolint:errcheck
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-p.hung:
				return
			default:
			}
		}
	case Answer:
		ct := f.ContentType
		if ct == "" {
			ct = "text/html; charset=utf-8"
		}
		code := f.Code
		if code == 0 {
			code = http.StatusOK
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(code)
		io.WriteString(w, f.Body) //nolint:errcheck
	case RewriteRunID:
		resp, err := p.forward(r, body)
		if err != nil {
			reset(w)
			return
		}
		out := rewriteRunID(resp.body, f.RunID)
		copyHeader(w.Header(), resp.header)
		w.Header().Set("Content-Length", fmt.Sprint(len(out)))
		w.WriteHeader(resp.code)
		w.Write(out) //nolint:errcheck
	case EndlessPages:
		q := r.URL.Query()
		q.Del("page_token")
		r.URL.RawQuery = q.Encode()
		resp, err := p.forward(r, body)
		if err != nil {
			reset(w)
			return
		}
		out := nextPage(resp.body, fmt.Sprintf("faultproxy-page-%d", p.pages.Add(1)))
		copyHeader(w.Header(), resp.header)
		w.Header().Set("Content-Length", fmt.Sprint(len(out)))
		w.WriteHeader(resp.code)
		w.Write(out) //nolint:errcheck
	default:
		http.Error(w, "faultproxy: unknown fault "+string(f.Kind), http.StatusInternalServerError)
	}
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (p *Proxy) forward(r *http.Request, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	copyHeader(req.Header, r.Header)
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (p *Proxy) forwardAndCopy(w http.ResponseWriter, r *http.Request, body []byte) {
	resp, err := p.forward(r, body)
	if err != nil {
		http.Error(w, "faultproxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	copyHeader(w.Header(), resp.header)
	w.Header().Set("Content-Length", fmt.Sprint(len(resp.body)))
	w.WriteHeader(resp.code)
	w.Write(resp.body) //nolint:errcheck
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Connection") || strings.EqualFold(k, "Transfer-Encoding") {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// reset closes the client's connection with a TCP RST.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("faultproxy: connection cannot be hijacked")
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	buf.Flush() //nolint:errcheck
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) //nolint:errcheck
	}
	conn.Close()
}

// rewriteRunID replaces the run id in an MLflow runs/create or runs/get
// answer, keeping everything else.
// nextPage sets next_page_token in a JSON object answer.
func nextPage(body []byte, token string) []byte {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m == nil {
		return body
	}
	m["next_page_token"] = token
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

func rewriteRunID(body []byte, id string) []byte {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	run, _ := m["run"].(map[string]any)
	info, _ := run["info"].(map[string]any)
	if info == nil {
		return body
	}
	info["run_id"], info["run_uuid"] = id, id
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
