package config

import (
	"net"
	"net/url"
	"regexp"
	"strconv"
	"time"
)

// loadPrometheus validates --metrics-addr and the --scrape options.
func loadPrometheus(c *Config, get func(string) string, bad func(key, val, why string) error,
	boolean func(string) (bool, error), list func(string, []string) ([]string, error),
	dur func(string, time.Duration) (time.Duration, error)) error {
	if a := get("metrics-addr"); a != "" {
		addr, why := listenAddr(a)
		if why != "" {
			return bad("metrics-addr", a, why)
		}
		c.MetricsAddr = addr
	}
	var err error
	if c.Scrape, err = list("scrape", nil); err != nil {
		return err
	}
	for _, u := range c.Scrape {
		p, e := url.Parse(u)
		if e != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return bad("scrape", u, "not an http:// or https:// URL")
		}
	}
	for key, dst := range map[string]**regexp.Regexp{"scrape-include": &c.ScrapeInclude, "scrape-exclude": &c.ScrapeExclude} {
		if s := get(key); s != "" {
			re, e := regexp.Compile(s)
			if e != nil {
				return bad(key, s, "not a regular expression: "+e.Error())
			}
			*dst = re
		}
	}
	if c.ScrapePassthrough, err = boolean("scrape-passthrough"); err != nil {
		return err
	}
	if c.ScrapeTimeout, err = dur("scrape-timeout", 10*time.Millisecond); err != nil {
		return err
	}
	return nil
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
