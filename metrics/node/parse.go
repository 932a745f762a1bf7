package node

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/prometheus/procfs"
)

// The parsers below read only the fields the series need, from the bytes of
// one read, into procfs's types (so the point functions stay as they were).
// procfs's own parsers read every field (the interrupt line of /proc/stat is
// hundreds of numbers) through fmt and bufio, the node's biggest cost.

var errMalformed = errors.New("malformed")

// userHZ is the tick rate of /proc/stat (USER_HZ, 100 on every Linux ABI),
// as procfs uses it to give CPUStat in seconds.
const userHZ = 100

// line returns the first line of b and the rest.
func line(b []byte) (first, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// parseProcStat returns the aggregate cpu line of /proc/stat and the number
// of per-CPU lines (the online CPUs). It stops after the cpu lines.
func parseProcStat(b []byte) (total procfs.CPUStat, ncpu int, err error) {
	found := false
	for len(b) > 0 {
		var l []byte
		l, b = line(b)
		if !bytes.HasPrefix(l, []byte("cpu")) {
			if found {
				break
			}
			continue
		}
		if len(l) > 3 && l[3] != ' ' {
			ncpu++
			continue
		}
		var v [10]float64
		f := bytes.Fields(l[3:])
		if len(f) < 4 {
			return total, 0, errMalformed
		}
		for i := 0; i < len(f) && i < len(v); i++ {
			x, err := strconv.ParseFloat(string(f[i]), 64)
			if err != nil {
				return total, 0, errMalformed
			}
			v[i] = x / userHZ
		}
		total = procfs.CPUStat{User: v[0], Nice: v[1], System: v[2], Idle: v[3], Iowait: v[4], IRQ: v[5],
			SoftIRQ: v[6], Steal: v[7], Guest: v[8], GuestNice: v[9]}
		found = true
	}
	if !found {
		return total, 0, errMalformed
	}
	return total, ncpu, nil
}

// parseMeminfo reads MemTotal and MemAvailable (kB) of /proc/meminfo.
func parseMeminfo(b []byte) (procfs.Meminfo, error) {
	var mi procfs.Meminfo
	for len(b) > 0 && (mi.MemTotalBytes == nil || mi.MemAvailableBytes == nil) {
		var l []byte
		l, b = line(b)
		var dst **uint64
		switch {
		case bytes.HasPrefix(l, []byte("MemTotal:")):
			dst = &mi.MemTotalBytes
		case bytes.HasPrefix(l, []byte("MemAvailable:")):
			dst = &mi.MemAvailableBytes
		default:
			continue
		}
		f := bytes.Fields(l[bytes.IndexByte(l, ':')+1:])
		if len(f) == 0 {
			return mi, errMalformed
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return mi, errMalformed
		}
		bytes := kb * 1024
		*dst = &bytes
	}
	if mi.MemTotalBytes == nil {
		return mi, errMalformed
	}
	return mi, nil
}

// parseLoadavg reads the three load averages of /proc/loadavg.
func parseLoadavg(b []byte) (procfs.LoadAvg, error) {
	f := bytes.Fields(b)
	if len(f) < 3 {
		return procfs.LoadAvg{}, errMalformed
	}
	var v [3]float64
	for i := range v {
		x, err := strconv.ParseFloat(string(f[i]), 64)
		if err != nil {
			return procfs.LoadAvg{}, errMalformed
		}
		v[i] = x
	}
	return procfs.LoadAvg{Load1: v[0], Load5: v[1], Load15: v[2]}, nil
}

// parsePSI reads avg10 of the "some" and "full" lines of a /proc/pressure file.
func parsePSI(b []byte) (procfs.PSIStats, error) {
	var ps procfs.PSIStats
	for len(b) > 0 {
		var l []byte
		l, b = line(b)
		var dst **procfs.PSILine
		switch {
		case bytes.HasPrefix(l, []byte("some ")):
			dst = &ps.Some
		case bytes.HasPrefix(l, []byte("full ")):
			dst = &ps.Full
		default:
			continue
		}
		i := bytes.Index(l, []byte("avg10="))
		if i < 0 {
			return ps, errMalformed
		}
		v := l[i+len("avg10="):]
		if j := bytes.IndexByte(v, ' '); j >= 0 {
			v = v[:j]
		}
		x, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return ps, errMalformed
		}
		*dst = &procfs.PSILine{Avg10: x}
	}
	if ps.Some == nil {
		return ps, errMalformed
	}
	return ps, nil
}

// parseNetDev reads received and transmitted bytes per interface of
// /proc/net/dev (two header lines, then "name: rx_bytes ... (8 fields)
// tx_bytes ...").
func parseNetDev(b []byte) (procfs.NetDev, error) {
	nd := procfs.NetDev{}
	_, b = line(b)
	_, b = line(b)
	for len(b) > 0 {
		var l []byte
		l, b = line(b)
		colon := bytes.IndexByte(l, ':')
		if colon < 0 {
			if len(bytes.TrimSpace(l)) == 0 {
				continue
			}
			return nil, errMalformed
		}
		name := string(bytes.TrimSpace(l[:colon]))
		f := bytes.Fields(l[colon+1:])
		if len(f) < 9 {
			return nil, errMalformed
		}
		rx, err1 := strconv.ParseUint(string(f[0]), 10, 64)
		tx, err2 := strconv.ParseUint(string(f[8]), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, errMalformed
		}
		nd[name] = procfs.NetDevLine{Name: name, RxBytes: rx, TxBytes: tx}
	}
	return nd, nil
}
