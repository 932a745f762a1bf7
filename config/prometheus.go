package config

import (
	"errors"
	"net"
	"strconv"
)

// metricsAddr checks --metrics-addr (the --scrape options are
// metrics/scrape's): "" is off, a bare port becomes 127.0.0.1:PORT.
func metricsAddr(a string) (string, error) {
	if a == "" {
		return a, nil
	}
	addr, why := listenAddr(a)
	if why != "" {
		return a, errors.New(why)
	}
	return addr, nil
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
