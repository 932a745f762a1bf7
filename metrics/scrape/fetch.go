package scrape

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bridge-dev/bridge/redact"
)

const (
	// maxHeaderBytes bounds an answer's status line and headers (Go's
	// default is 10 MB).
	maxHeaderBytes = 64 << 10
	// maxRedirects bounds the redirects followed within one origin.
	maxRedirects = 5
)

// errRedirect is the error of a redirect bridge does not follow.
var errRedirect = errors.New("redirect not followed")

func newHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxResponseHeaderBytes = maxHeaderBytes
	return &http.Client{Transport: tr, CheckRedirect: sameOrigin}
}

// sameOrigin follows a redirect only within the URL's own origin (scheme,
// host and port): the URL names the exporter the user chose, and an answer
// must not send bridge, with the URL's credentials, to another host (a
// cloud metadata address, another service), nor from https to http. An
// exporter that moved its path (/metrics to /metrics/) still works.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return fmt.Errorf("%w: more than %d redirects", errRedirect, maxRedirects)
	}
	from := via[0].URL
	if !strings.EqualFold(req.URL.Scheme, from.Scheme) || !strings.EqualFold(req.URL.Host, from.Host) {
		return fmt.Errorf("%w: it leaves %s://%s (only redirects within the URL's own scheme, host and port are followed)", errRedirect, from.Scheme, from.Host)
	}
	return nil
}

// fetch reads one answer of t within the bounds (see the package's
// constants) and maps it. An answer over a bound is returned with
// errTooLarge (what it had kept then is not to be used).
func (c *Collector) fetch(ctx context.Context, t *target) (*answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return nil, shownError(err)
	}
	// Only the classic text format: that is what the parser reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	// Asked for explicitly, a gzip body is not inflated by the transport
	// (it would inflate without limit): bridge inflates it, counting.
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, shownError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		// The code only: the status text is the exporter's to choose.
		return nil, fmt.Errorf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	var body io.Reader = &capped{r: resp.Body, left: maxBodyBytes, what: "on the wire"}
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("reading the gzip answer: %w", err)
		}
		defer zr.Close()
		body = &capped{r: zr, left: maxBodyBytes, what: "after inflating the gzip answer"}
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %.40q (bridge asks for gzip or none)", enc)
	}
	return c.read(body, t)
}

// shownError hides the URL's secrets in the URL that net/http puts in its
// errors (it hides a password, not a ?token=).
func shownError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redact.URI(ue.URL)
	}
	return err
}

// capped reads at most left bytes of r. One byte more is errTooLarge,
// never a quiet end of input: a cut answer must not pass for a whole one.
type capped struct {
	r    io.Reader
	left int64
	what string
	err  error // set once over
}

func (c *capped) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if int64(n) > c.left {
		c.err = fmt.Errorf("%w: more than %d MiB %s", errTooLarge, maxBodyBytes>>20, c.what)
		return 0, c.err
	}
	c.left -= int64(n)
	return n, err
}
