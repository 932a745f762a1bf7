package forensics

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// ClockSource says which clock a node's end time was read from: the
// system clock (CLOCK_REALTIME, which bridge reads) on the kernel's
// clocksource
// (<sys>/devices/system/clocksource/clocksource0/current_clocksource), and
// whether NTP (or chrony, or PTP) keeps it synchronized, with the kernel's
// bound on its error: adjtimex(2) in read-only mode, which needs no
// privilege. A job's nodes are ordered by these times, so the report says
// how far each can be trusted. The clocksource file is read through the
// bounded reader within ctx: one that does not answer, or is no file of
// one value, is "clocksource unknown", never a wait at the end of a job.
func ClockSource(ctx context.Context, sysRoot string) string {
	src, _ := kfile.ReadFile(ctx, filepath.Join(sysRoot, "devices/system/clocksource/clocksource0/current_clocksource"), kfile.Value)
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return clockText(strings.TrimSpace(string(src)), -1, 0, 0)
	}
	return clockText(strings.TrimSpace(string(src)), state, tx.Status, tx.Maxerror)
}

// clockText words what ClockSource read; state -1: adjtimex failed.
func clockText(source string, state int, status int32, maxErrorUs int64) string {
	s := source
	if s == "" {
		s = "clocksource unknown"
	}
	switch {
	case state < 0:
		return s + ", synchronization unknown"
	case state == unix.TIME_ERROR || status&unix.STA_UNSYNC != 0:
		return s + ", not synchronized"
	}
	return s + fmt.Sprintf(", synchronized (max error %s)", us(maxErrorUs))
}

func us(v int64) string {
	if v >= 1000 {
		return fmt.Sprintf("%d ms", v/1000)
	}
	return fmt.Sprintf("%d us", v)
}
