package whyslow

import (
	"testing"
	"time"
)

// fact is one fact of a fixture window.
type fact struct {
	f Fact
	v float64
}

// win is a minute's window of facts; the words of the evidence as the
// collectors' series give them.
func win(facts ...fact) Window {
	w := Window{Span: time.Minute, GPUBusyFrom: "SM activity", CPULimitFrom: LimitContainer, IOFrom: "the node's",
		SlowdownReason: "hw_thermal", Link: "InfiniBand port mlx5_0/1"}
	for _, f := range facts {
		w.Set(f.f, f.v)
	}
	return w
}

// Facts of the fixtures, by name.
func gpus(n, busy float64) []fact { return []fact{{GPUs, n}, {GPUBusy, busy}} }
func limit(cores float64) fact    { return fact{CPULimit, cores} }
func used(cores float64) fact     { return fact{CPUUsed, cores} }
func trainers(n, cores float64) []fact {
	return []fact{{Trainers, n}, {TrainerCores, cores}}
}
func loaders(n, cores float64) []fact {
	return []fact{{Loaders, n}, {LoaderCores, cores}}
}

func join(parts ...any) []fact {
	var out []fact
	for _, p := range parts {
		switch v := p.(type) {
		case fact:
			out = append(out, v)
		case []fact:
			out = append(out, v...)
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		w     Window
		cause Cause
		why   string
	}{
		{"gpu_compute: a busy GPU", win(join(gpus(1, 0.92), limit(8), used(1.2), trainers(1, 1), loaders(4, 0.2))...),
			GPUCompute, "the GPU was busy 92% of the time (SM activity)"},
		{"gpu_compute: a mostly busy GPU with nothing else to blame", win(join(gpus(2, 0.6), limit(8), used(1.2), trainers(2, 0.3))...),
			GPUCompute, "the 2 GPUs were busy 60% of the time (SM activity)"},
		{"gpu_compute: busy whatever the host's memory stalls", win(join(gpus(1, 0.95), limit(8), used(1), fact{MemorySome, 0.5})...),
			GPUCompute, "the GPU was busy 95% of the time (SM activity)"},
		{"input: the workers hold the CPU allowed while the GPU waits",
			win(join(gpus(1, 0.39), limit(4), used(4), trainers(1, 0.1), loaders(6, 3.9))...),
			Input, "the 6 data-loading workers used 3.9 of the 4.0 cores allowed while the GPU was idle 61% of the time"},
		{"input, not cpu_throttled: the workers hold the CPU at a throttling quota",
			win(join(limit(0.5), used(0.5), fact{Throttled, 0.9}, trainers(1, 0.01), loaders(4, 0.48))...),
			Input, "the 4 data-loading workers used 0.48 of the 0.50 cores allowed while the trainer used 0.01 cores; the CPU quota throttled 90% of periods"},
		{"input: I/O pressure while the GPU waits", win(join(gpus(1, 0.3), limit(8), used(1), fact{IOSome, 0.4})...),
			Input, "tasks stalled on I/O 40% of the time (the node's PSI io some) while the GPU was idle 70% of the time"},
		{"input: the trainer feeds itself while the GPU waits", win(join(gpus(1, 0.3), limit(8), used(1), trainers(1, 0.98), loaders(0, 0))...),
			Input, "the trainer used 0.98 cores with no data-loading workers while the GPU was idle 70% of the time"},
		{"cpu_throttled: a busy trainer in a small quota", win(join(limit(0.1), used(0.1), fact{Throttled, 0.95}, trainers(1, 0.1))...),
			CPUThrottled, "the CPU quota throttled 95% of periods: the trainer used 0.10 of the 0.10 cores allowed"},
		{"cpu_throttled: the trainers throttled while the GPU waits",
			win(join(gpus(1, 0.2), limit(2), used(2), fact{Throttled, 0.6}, trainers(2, 1.8), loaders(2, 0.2))...),
			CPUThrottled, "the CPU quota throttled 60% of periods: the 2 trainers used 1.8 of the 2.0 cores allowed while the GPU was idle 80% of the time"},
		{"cpu_throttled: without the roles, the job", win(limit(1), used(1), fact{Throttled, 0.5}),
			CPUThrottled, "the CPU quota throttled 50% of periods: the job used 1.0 of the 1.0 core allowed"},
		{"memory_pressure: the container's PSI", win(join(limit(4), used(1), fact{MemorySome, 0.4}, fact{WorkingSetShare, 0.97}, fact{MemoryLimit, 268})...),
			MemoryPressure, "tasks stalled on memory 40% of the time (the container's PSI memory some) with the working set at 97% of the 268 MB limit"},
		{"memory_pressure: cgroup v1, reclaim at the limit", win(join(limit(4), used(1), fact{MemoryLimitHits, 1234.4}, fact{WorkingSetShare, 0.96}, fact{MemoryLimit, 67})...),
			MemoryPressure, "the usage reached the memory limit 1234 times a second (memory.failcnt: the kernel reclaimed to stay under it) with the working set at 96% of the 67 MB limit"},
		{"not memory_pressure: page cache reclaimed at the limit, the working set far below",
			win(join(limit(4), used(0.02), fact{MemoryLimitHits, 500}, fact{WorkingSetShare, 0.3}, fact{MemoryLimit, 67}, trainers(1, 0.02))...),
			Idle, "the job used 0.02 of the 4.0 cores allowed: it waits on something outside this node"},
		{"not memory_pressure: PSI below a quarter, whatever the limit hits",
			win(join(limit(4), used(3.8), fact{MemorySome, 0.1}, fact{MemoryLimitHits, 9}, fact{WorkingSetShare, 0.99}, trainers(1, 3.8))...),
			CPUCompute, "the trainer used 3.8 of the 4.0 cores allowed"},
		{"gpu_throttled: thermal clock events", win(join(gpus(1, 0.9), fact{GPUSlowdown, 1}, fact{SlowdownGPU, 0}, limit(8), used(1))...),
			GPUThrottled, "GPU 0 had hw_thermal clock events in 100% of the samples, the GPU was busy 90% of the time"},
		{"io: the job's processes blocked in the kernel", win(join(limit(8), used(0.01), fact{BlockedProcesses, 1}, trainers(1, 0.01))...),
			IO, "1.0 of the job's processes were blocked in the kernel (state D: storage, a network file system) on average"},
		{"io: the container's I/O pressure, no GPU", func() Window {
			w := win(join(limit(8), used(0.3), fact{IOSome, 0.3})...)
			w.IOFrom = "the container's"
			return w
		}(), IO, "tasks stalled on I/O 30% of the time (the container's PSI io some)"},
		{"communication: a link near its rate while the GPU waits", win(join(gpus(1, 0.4), limit(8), used(1), fact{LinkShare, 0.85})...),
			Communication, "InfiniBand port mlx5_0/1 carried 85% of its link's rate while the GPU was idle 60% of the time"},
		{"cpu_compute: a CPU job's trainer busy on the node's CPUs", func() Window {
			w := win(join(limit(8), used(1), trainers(1, 0.99))...)
			w.CPULimitFrom = LimitNode
			return w
		}(), CPUCompute, "the trainer used 0.99 of the node's 8.0 cores"},
		{"idle: an idle GPU and an idle host", win(join(gpus(1, 0.02), limit(8), used(0.01), trainers(1, 0.01))...),
			Idle, "the GPU was idle 98% of the time and the job used 0.01 of the 8.0 cores allowed: it waits on something outside this node"},
		{"idle: a CPU job that waits", win(join(used(0.01), trainers(1, 0.01))...),
			Idle, "the job used 0.01 cores: it waits on something outside this node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := Decide(tt.w)
			if !ok || c != tt.cause {
				t.Fatalf("Decide(%v) = %q, %v; want %q", tt.w, c, ok, tt.cause)
			}
			if got := Why(c, tt.w); got != tt.why {
				t.Errorf("Why =\n  %s\nwant\n  %s", got, tt.why)
			}
		})
	}
}

func TestDecideNeedsAReading(t *testing.T) {
	if c, ok := Decide(win(limit(4), fact{MemoryLimit, 100})); ok {
		t.Errorf("a window with no CPU and no GPU reading: %q, want no verdict", c)
	}
}
