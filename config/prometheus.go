package config

import (
	"net"
	"strconv"
)

// validatePrometheus checks --metrics-addr (the --scrape options are
// metrics/scrape's).
func (c *Config) validatePrometheus(src sources) error {
	if a := c.MetricsAddr; a != "" {
		addr, why := listenAddr(a)
		if why != "" {
			return src.bad("metrics-addr", a, why)
		}
		c.MetricsAddr = addr
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
