package slurm

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// ExposeURL makes a server on this machine's loopback (an http URL such as
// mlflowtest's, http://127.0.0.1:PORT) reachable from the nodes, whose
// 127.0.0.1 is their own: it forwards TCP from HostAddr on the cluster
// network and returns the URL the nodes use. The forwarder stops when the
// test ends.
func (c *Cluster) ExposeURL(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		t.Fatalf("ExposeURL(%q): not a URL with a host: %v", rawURL, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.HostAddr, "0"))
	if err != nil {
		t.Fatalf("listening on the cluster network: %v", err)
	}
	f := &forwarder{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	u.Host = ln.Addr().String()
	return u.String()
}

// forwarder copies TCP connections from ln to target, both ways.
type forwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.pipe(in)
		}()
	}
}

// track adds c to the open connections, or reports false (and closes c)
// when the forwarder is already closed.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns[c] = true
	return true
}

func (f *forwarder) pipe(in net.Conn) {
	if !f.track(in) {
		return
	}
	out, err := net.DialTimeout("tcp", f.target, 10*time.Second)
	if err != nil {
		f.untrack(in)
		return
	}
	if !f.track(out) {
		f.untrack(in)
		return
	}
	done := make(chan struct{})
	go func() {
		copyHalf(out, in)
		close(done)
	}()
	copyHalf(in, out)
	<-done
	f.untrack(in)
	f.untrack(out)
}

// untrack closes c and forgets it.
func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// copyHalf copies src to dst, then closes dst for writing so that the peer
// sees end of file while the other direction may still run.
func copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

func (f *forwarder) close() {
	f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
