package node

import (
	"testing"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantUser float64
		wantN    int
		wantErr  bool
	}{
		{"aggregate and per-CPU lines, intr not read", "cpu  300 0 100 600 0 0 0 0 0 0\ncpu0 150 0 50 300 0 0 0 0 0 0\ncpu1 150 0 50 300 0 0 0 0 0 0\nintr 1 2 x\n", 3, 2, false},
		{"old kernel: four fields", "cpu 100 0 0 900\ncpu0 100 0 0 900\n", 1, 1, false},
		{"no cpu line", "intr 1 2 3\n", 0, 0, true},
		{"garbled number", "cpu  3x0 0 100 600\n", 0, 0, true},
		{"cut short", "cpu  300 0\n", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total, n, err := parseProcStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && (total.User != tt.wantUser || n != tt.wantN) {
				t.Errorf("user %v s, %d CPUs; want %v, %d", total.User, n, tt.wantUser, tt.wantN)
			}
		})
	}
}

func TestParseSmallFiles(t *testing.T) {
	if _, err := parseMeminfo([]byte("MemFree: 10 kB\n")); err == nil {
		t.Error("meminfo without MemTotal parsed")
	}
	if mi, err := parseMeminfo([]byte("MemTotal: 2 kB\nMemAvailable: 1 kB\n")); err != nil || *mi.MemTotalBytes != 2048 || *mi.MemAvailableBytes != 1024 {
		t.Errorf("meminfo = %v, %v", mi, err)
	}
	if _, err := parseLoadavg([]byte("1.0 2.0\n")); err == nil {
		t.Error("loadavg with two fields parsed")
	}
	if _, err := parsePSI([]byte("full avg10=1.00 avg60=0 avg300=0 total=1\n")); err == nil {
		t.Error("pressure without a some line parsed")
	}
	if _, err := parsePSI([]byte("some avg10=x avg60=0 avg300=0 total=1\n")); err == nil {
		t.Error("pressure with a garbled avg10 parsed")
	}
	if _, err := parseNetDev([]byte("h1\nh2\n  eth0: 1 2 3\n")); err == nil {
		t.Error("net/dev with a short line parsed")
	}
	nd, err := parseNetDev([]byte(netDevFile(ifCounters{"eth0", 5, 7})))
	if err != nil || nd["eth0"].RxBytes != 5 || nd["eth0"].TxBytes != 7 {
		t.Errorf("net/dev = %v, %v", nd, err)
	}
}
