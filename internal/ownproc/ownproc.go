// Package ownproc sets how bridge's own process runs: one P, a small heap
// goal, and a write to a closed stdout or stderr an error instead of its
// end. The user's GOMAXPROCS and GOGC win.
package ownproc

import (
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
)

// Setup applies all three, reading the user's variables through getenv.
func Setup(getenv func(string) string) {
	limitProcs(getenv)
	leanGC(getenv)
	keepSIGPIPE()
}

// keepSIGPIPE makes a write to a closed stdout or stderr an EPIPE error
// instead of the end of bridge: Go's runtime exits with SIGPIPE on such a
// write to fd 1 or 2 unless SIGPIPE is notified (os/signal), and bridge
// dying would orphan the child and lose its exit status. Notified, not
// ignored: an ignored signal stays ignored across exec, a handled one is
// reset to the default, so the child gets SIGPIPE's default disposition
// even when bridge itself was started with it ignored.
func keepSIGPIPE() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// maxProcs caps bridge's Ps. Liveness first: every call of bridge's that
// can block in the kernel (kernel file reads, the supervisor's waits and
// signals, NVML's cgo calls) takes the ordinary system call path, which
// hands its P to another thread when it blocks, so one P keeps signal
// forwarding, reaping, the collect timeout and the end of the run going
// while a read hangs forever (TestHungReadLeavesBridgeLive). A second P
// would not help against what can still hold a P, a thread stuck outside
// any system call (a page fault on a hung NFS image): the next garbage
// collection waits for it whatever GOMAXPROCS is. Every other P only adds
// threads to wake, spin and run GC workers on (the runtime's default is
// every CPU the cgroup allows): on 2 CPUs, 2 cost 6-8% more CPU a sample
// than 1, and 32 cost 49-97% more (bench/builds.sh, docs/performance.md).
const maxProcs = 1

// limitProcs lowers GOMAXPROCS to maxProcs unless the user set it.
func limitProcs(getenv func(string) string) {
	if getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > maxProcs {
		runtime.GOMAXPROCS(maxProcs)
	}
}

// gcPercent is bridge's GOGC. Its live heap is well under 1 MiB, so the
// runtime's 4 MiB minimum heap goal (at GOGC=100), not the live data, sets
// most of its anonymous memory; 50 halves that goal, about 0.7 MiB less
// (bench/memory.sh, docs/performance.md), for a collection every ~60
// samples at most.
const gcPercent = 50

// leanGC sets GOGC to gcPercent unless the user set it.
func leanGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
