package config

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/redact"
)

// validatePrometheus checks --metrics-addr and the --scrape URLs (the
// regular expressions are compiled while decoding, the timeout is bounded
// with the other durations).
func (c *Config) validatePrometheus(bad func(key string, val any, why string) error) error {
	if a := c.MetricsAddr; a != "" {
		addr, why := listenAddr(a)
		if why != "" {
			return bad("metrics-addr", a, why)
		}
		c.MetricsAddr = addr
	}
	// Checked here, before list() would echo every entry.
	for _, u := range c.Scrape {
		if strings.ContainsFunc(u, isControl) {
			return bad("scrape", shownURL(u), "control character in the URL")
		}
	}
	var err error
	if c.Scrape, err = list(c.Scrape, nil, "scrape", bad); err != nil {
		return err
	}
	for _, u := range c.Scrape {
		p, e := url.Parse(u)
		if e != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return bad("scrape", shownURL(u), "not an http:// or https:// URL")
		}
	}
	return nil
}

// shownURL is a --scrape entry as a message may show it: through
// redact.URI, as everywhere bridge prints a scrape URL; one that does not
// parse as a URL is not shown at all (its parts cannot be told apart).
func shownURL(u string) string {
	if _, err := url.Parse(u); err != nil {
		return "(not shown: not a URL, and it may hold a secret)"
	}
	return redact.URI(u)
}

// listenAddr: a bare port binds 127.0.0.1 only, so a job's numbers are
// never exposed beyond the host by accident; ":PORT" asks for every
// interface explicitly.
func listenAddr(a string) (string, string) {
	if n, err := strconv.Atoi(a); err == nil {
		if n < 0 || n > 65535 {
			return "", "port out of range 0-65535"
		}
		return net.JoinHostPort("127.0.0.1", a), ""
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", "want PORT, HOST:PORT or :PORT"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", "port must be a number in 0-65535"
	}
	return net.JoinHostPort(host, port), ""
}
