package tracker

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A certificate the client does not trust, or one for another name, is a
// verification failure; a refused connection or a trusted server is not.
func TestTLSUntrusted(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	trusting := srv.Client() // trusts the server's own certificate
	get := func(c *http.Client, url string) error {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	plain := &http.Client{Timeout: 30 * time.Second}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())

	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()

	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unknown authority", get(plain, srv.URL), true},
		{"name does not match", get(trusting, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)), true},
		{"trusted", get(trusting, srv.URL), false},
		{"refused", get(plain, refusedURL), false},
	} {
		if got := TLSUntrusted(tc.err); got != tc.want {
			t.Errorf("%s: TLSUntrusted(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
