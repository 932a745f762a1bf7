package tracker

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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

// A server's error body is one line of text in a message: its line
// breaks a space, its terminal escapes shown as text, at most ~300 bytes
// of valid UTF-8 whatever it holds.
func TestShortenErrorBody(t *testing.T) {
	cases := []struct{ in, want string }{
		{"<html>\n  <body>Bad Gateway</body>\r\n</html>", "<html> <body>Bad Gateway</body> </html>"},
		{"denied\x1b]0;pwned\x07\x1b[2J", `denied\x1b]0;pwned\x07\x1b[2J`},
		{"abc\u202edcba\u009b31m", `abc\u202edcba\u009b31m`},
	}
	for _, tc := range cases {
		if got := Shorten(tc.in); got != tc.want {
			t.Errorf("Shorten(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := Shorten(strings.Repeat("日\x1b", 400))
	if len(long) > 303 || !utf8.ValidString(long) || !strings.HasSuffix(long, "...") || strings.ContainsRune(long, 0x1b) {
		t.Errorf("Shorten of a long body: %d bytes %q", len(long), long)
	}
}
