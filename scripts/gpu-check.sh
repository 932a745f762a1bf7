#!/usr/bin/env bash
# gpu-check.sh: on a machine with an NVIDIA GPU, compare bridge's GPU series
# with nvidia-smi readings taken at the same time, and check its activity
# (GPM) and energy series against a known load.
#
#   scripts/gpu-check.sh [OUTDIR]
#
# Steps: build bridge (or use $BRIDGE_BIN), print `bridge sample --json`'s GPU
# part, run `bridge -- python -c '<load>'` with 1 s samples written to a
# spool file (no tracker) and /metrics on, while `nvidia-smi -lms 1000` logs
# beside it and scripts/gpu-check/poll.py records bridge's CPU time and its
# GPU collector's duration. The load on cuda:0 (torch) runs three phases:
# idle for $IDLE s (10), an fp16 8192x8192 matmul loop for $DURATION s (30),
# a device-to-device copy loop of 2 GB for $COPY s (15). Then
# scripts/gpu-check/join.py joins bridge and nvidia-smi by GPU and time, and
# scripts/gpu-check/activity.py checks GPU 0: SM active near 0 idle and high
# under the matmul, DRAM active high under the copy, the energy counter's
# increase within 5% of the integral of the sampled power; and prints the
# sampling cost with GPM on.
#
# Exit: 0 every check passed; 1 a check failed, or could not run (no torch
# with CUDA: the GPU stays idle, and the load is a CPU loop); 2 no NVIDIA
# driver (no nvidia-smi): only the no-driver path is checked, bridge must
# start and its GPU collector say it is off (1 if it says anything else).
# It changes no GPU setting (no MIG mode, clocks or power limit).
#
# Files land in OUTDIR (default $OUT, else a temp dir), at most 8 of them.
# Takes IDLE + DURATION + COPY + about 30 s, plus the build: on a machine
# without Go, build here and pass the binary, e.g. with the device tool:
#   go build -o bin/bridge ./cmd/bridge     # here, cgo on
#   run: BRIDGE_BIN=bin/bridge DURATION=20 scripts/gpu-check.sh "$OUT"   (carry bin)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-$(mktemp -d)}}
mkdir -p "$out"
dur=${DURATION:-30}
idle=${IDLE:-10}
copy=${COPY:-15}
py=${PYTHON:-python3}

bin=${BRIDGE_BIN:-}
if [ -z "$bin" ]; then
	bin="$out/bridge"
	echo "== building bridge (cgo, for NVML)"
	CGO_ENABLED=1 go build -o "$bin" ./cmd/bridge 2> >(grep -v -e 'deprecated' -e 'nvml.h' -e '^ *|' -e '^ *[0-9]* |' -e 'cgo-gcc-prolog' -e 'In file included' -e '^# ' -e '^ *\^' >&2)
fi
"$bin" version || true

echo "== bridge sample --json (GPU part)"
"$bin" sample --json >"$out/sample.json" 2>"$out/sample.err" || echo "gpu-check: bridge sample exited $?; see $out/sample.err"
"$py" - "$out/sample.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"gpu-check: cannot read bridge sample --json: {e}")
print(json.dumps((d.get("detected") or {}).get("gpu"), indent=2))
for m in d.get("metrics") or []:
    if m.get("scope") in ("gpu",) or m.get("name", "").startswith("process_gpu"):
        print(f'{m["name"]:50s} {m["value"]!s:>14} {m.get("unit", "")}')
PY

if ! command -v nvidia-smi >/dev/null; then
	status=$("$py" -c 'import json, sys; print(((json.load(open(sys.argv[1])).get("detected") or {}).get("gpu") or {}).get("status", ""))' "$out/sample.json" 2>/dev/null || true)
	case $status in
	off:*)
		echo "gpu-check: nvidia-smi not found (no NVIDIA driver): no-driver path only. bridge started and its GPU collector reports: $status. The comparison with nvidia-smi needs an NVIDIA GPU machine." >&2
		exit 2
		;;
	*)
		echo "gpu-check: nvidia-smi not found (no NVIDIA driver), but bridge's GPU status is \"$status\", not off: ...; see $out/sample.err" >&2
		exit 1
		;;
	esac
fi
nvidia-smi -L

load_torch=$(cat <<'PY'
import time, torch
assert torch.cuda.is_available(), "torch has no CUDA"
dev = torch.device("cuda:0")
hold = torch.empty(int(4e9), dtype=torch.uint8, device=dev)  # 4 GB held, to find in process_gpu_memory
a = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
b = torch.randn_like(a)
src = torch.empty(int(2e9), dtype=torch.uint8, device=dev)
dst = torch.empty_like(src)
torch.cuda.synchronize()
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; reserved {torch.cuda.memory_reserved(0)/1e6:.0f} MB", flush=True)
def phase(name):
    torch.cuda.synchronize()
    print(f"gpu-check-phase {name} {time.time():.3f}", flush=True)
phase("idle")
time.sleep(IDLE)
phase("matmul")
end, n = time.time() + DURATION, 0
while time.time() < end:
    c = a @ b
    n += 1
    if n % 20 == 0:
        torch.cuda.synchronize()
phase("copy")
end, k = time.time() + COPY, 0
while time.time() < end:
    dst.copy_(src)
    k += 1
    if k % 10 == 0:
        torch.cuda.synchronize()
phase("end")
print(f"matmuls {n}, copies {k} of 2 GB; reserved {torch.cuda.memory_reserved(0)/1e6:.0f} MB", flush=True)
PY
)
load_cpu=$(cat <<'PY'
import time
end, n = time.time() + DURATION, 0
while time.time() < end:
    n += sum(i * i for i in range(10000))
print("CPU-only load done", flush=True)
PY
)
gpu_load=1
if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	load=${load_torch//DURATION/$dur}
	load=${load//IDLE/$idle}
	load=${load//COPY/$copy}
	echo "== load: on cuda:0, idle ${idle}s, torch matmul loop ${dur}s, device-to-device copy loop ${copy}s"
else
	gpu_load=0
	load=${load_cpu//DURATION/$dur}
	echo "== load: torch with CUDA not found; CPU-only loop for ${dur}s (GPU stays idle: idle readings only)"
fi

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "== bridge -- $py -c <load>, nvidia-smi and poll.py (127.0.0.1:$port/metrics) beside it"
nvidia-smi --query-gpu=timestamp,index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm \
	--format=csv,noheader,nounits -lms 1000 >"$out/nvidia-smi.csv" 2>/dev/null &
smi=$!
trap 'kill $smi 2>/dev/null || true' EXIT
"$bin" --trackers none --interval 1s --spool "$out/spool.jsonl" --metrics-addr "127.0.0.1:$port" -- "$py" -c "$load" >"$out/run.log" 2>&1 &
bpid=$!
"$py" scripts/gpu-check/poll.py "127.0.0.1:$port" "$bpid" "$out/poll.jsonl" &
ppid=$!
rc=0
wait $bpid || rc=$?
wait $ppid 2>/dev/null || true
kill $smi 2>/dev/null || true
wait $smi 2>/dev/null || true
echo "bridge exited $rc; child output and bridge log:"
tail -n 20 "$out/run.log"

echo "== bridge vs nvidia-smi (nearest reading within 1 s; memory in MB = 10^6 bytes, nvidia-smi MiB converted)"
"$py" scripts/gpu-check/join.py "$out/spool.jsonl" "$out/nvidia-smi.csv"

echo "== activity (GPM), energy and sampling cost, GPU 0"
verdict=0
"$py" scripts/gpu-check/activity.py "$out/spool.jsonl" "$out/run.log" "$out/poll.jsonl" | tee "$out/summary.txt" || verdict=1
if [ "$rc" -ne 0 ]; then
	echo "gpu-check: FAIL bridge exited $rc" | tee -a "$out/summary.txt"
	verdict=1
fi
if [ "$gpu_load" -eq 0 ]; then
	echo "gpu-check: FAIL the activity checks need torch with CUDA (PYTHON=$py has none): not run" | tee -a "$out/summary.txt"
	verdict=1
fi
echo "== files in $out"
ls -l "$out"
exit "$verdict"
