package infiniband

import "github.com/bridge-dev/bridge/metrics"

// The node's InfiniBand and RoCE ports' series: one per device and port
// (per-instance templates, bound by For); the counts are since bridge
// started, those of errors steady.
var (
	SymbolErrors  = portSeries("symbol_errors_count", metrics.UnitCount, metrics.Counter, true, "bridge_node_infiniband_symbol_errors_total", "Minor link errors the port detected since bridge started (symbol_error).")
	LinkDowned    = portSeries("link_downed_count", metrics.UnitCount, metrics.Counter, true, "bridge_node_infiniband_link_downed_total", "Times the port's link went down since bridge started (link_downed).")
	ReceiveErrors = portSeries("receive_errors_count", metrics.UnitCount, metrics.Counter, true, "bridge_node_infiniband_receive_errors_total", "Packets with errors the port received since bridge started (port_rcv_errors).")
	XmitDiscards  = portSeries("transmit_discards_count", metrics.UnitCount, metrics.Counter, true, "bridge_node_infiniband_transmit_discards_total", "Outbound packets the port discarded since bridge started, the port down or congested (port_xmit_discards).")
	XmitWait      = portSeries("transmit_wait_count", metrics.UnitCount, metrics.Counter, false, "bridge_node_infiniband_transmit_wait_total", "Ticks in which the port had data to send but no flow-control credits, since bridge started (port_xmit_wait): congestion.")
)

// portSeries describes one port series; steady: a count of rare events
// (metrics.Desc.Steady).
func portSeries(name string, u metrics.Unit, k metrics.Kind, steady bool, prom, help string) *metrics.Desc {
	return &metrics.Desc{Name: "node_infiniband_<device>_port_<port>_" + name, Unit: u, Scope: metrics.ScopeNode, Kind: k, Steady: steady,
		Instance: []string{"device", "port"}, Prom: prom, Help: help}
}

// Series are every series the collector may add, as its registration
// declares them.
var Series = []*metrics.Desc{metrics.InfinibandReceiveRate, metrics.InfinibandTransmitRate, metrics.InfinibandLinkRate, SymbolErrors, LinkDowned, ReceiveErrors, XmitDiscards, XmitWait}
