package infiniband

import "github.com/bridge-dev/bridge/metrics"

// docs are the collector's tables in docs/metrics.md (docgen writes them
// between the markers of their IDs): a row per series, with where it is
// read from and how it is computed.
var docs = []metrics.DocTable{
	{ID: "infiniband", Columns: []string{"Source", "Formula"}, Rows: []metrics.DocRow{
		{Series: []*metrics.Desc{metrics.InfinibandReceiveRate}, Cells: []string{"`counters_ext/port_rcv_data_64` where present, else `counters/port_rcv_data`", "Δcounter × 4 (the counters count 4-byte words) / 10^6 / interval seconds. Needs two readings."}},
		{Series: []*metrics.Desc{metrics.InfinibandTransmitRate}, Cells: []string{"`counters_ext/port_xmit_data_64`, else `counters/port_xmit_data`", "likewise"}},
		{Series: []*metrics.Desc{metrics.InfinibandLinkRate}, Cells: []string{"`rate` (`200 Gb/sec (4X HDR)`), read at start", "Gb/s × 10^9 / 8 / 10^6: what a port carries each way at most; with the port's rates, none where its rate is unknown"}},
		{Series: []*metrics.Desc{SymbolErrors}, Cells: []string{"`counters/symbol_error`", "minor link errors since bridge started. Needs two readings, as the counts below."}},
		{Series: []*metrics.Desc{LinkDowned}, Cells: []string{"`counters/link_downed`", "times the link went down since bridge started"}},
		{Series: []*metrics.Desc{ReceiveErrors}, Cells: []string{"`counters/port_rcv_errors`", "packets received with errors since bridge started"}},
		{Series: []*metrics.Desc{XmitDiscards}, Cells: []string{"`counters/port_xmit_discards`", "outbound packets discarded (port down or congested) since bridge started"}},
		{Series: []*metrics.Desc{XmitWait}, Cells: []string{"`counters/port_xmit_wait`", "ticks in which the port had data to send but no flow-control credits, since bridge started: congestion downstream"}},
	}},
}
