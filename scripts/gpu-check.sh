#!/usr/bin/env bash
# gpu-check.sh: on a machine with an NVIDIA GPU, compare bridge's GPU series
# with nvidia-smi readings taken at the same time.
#
#   scripts/gpu-check.sh [OUTDIR]
#
# Steps: build bridge (or use $BRIDGE_BIN), print `bridge sample --json`'s GPU
# part, run `bridge -- python -c '<torch matmul loop>'` for $DURATION seconds
# (default 30) with 1 s samples written to a spool file (no tracker), while
# `nvidia-smi -lms 1000` logs beside it, then join the two by GPU and time.
# Without torch (or CUDA in torch) the child is a CPU-only loop and the GPU
# stays idle: the comparison then covers idle readings only, and says so.
# Everything lands in OUTDIR (default $OUT, else a temp dir). Takes about
# DURATION + 60 s on a warm Go cache; the cgo build of go-nvml is most of it.
# Without nvidia-smi (no NVIDIA driver) it checks the no-driver path only:
# bridge must start and its GPU collector say it is off; it then exits 2
# (1 if the collector said anything else).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-$(mktemp -d)}}
mkdir -p "$out"
dur=${DURATION:-30}
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
nvidia-smi -L | tee "$out/nvidia-smi-L.txt"

load_torch=$(cat <<'PY'
import time, torch
assert torch.cuda.is_available(), "torch has no CUDA"
dev = torch.device("cuda:0")
hold = torch.empty(int(4e9), dtype=torch.uint8, device=dev)  # 4 GB held, to find in process_gpu_memory
a = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
b = torch.randn_like(a)
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; reserved {torch.cuda.memory_reserved(0)/1e6:.0f} MB", flush=True)
end, n = time.time() + DURATION, 0
while time.time() < end:
    c = a @ b
    n += 1
    if n % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"matmuls {n}; reserved {torch.cuda.memory_reserved(0)/1e6:.0f} MB", flush=True)
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
if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	load=${load_torch//DURATION/$dur}
	echo "== load: torch matmul loop on cuda:0 for ${dur}s"
else
	load=${load_cpu//DURATION/$dur}
	echo "== load: torch with CUDA not found; CPU-only loop for ${dur}s (GPU stays idle: idle readings only)"
fi

echo "== bridge -- $py -c <load>, nvidia-smi beside it"
nvidia-smi --query-gpu=timestamp,index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm \
	--format=csv,noheader,nounits -lms 1000 >"$out/nvidia-smi.csv" 2>"$out/nvidia-smi.err" &
smi=$!
trap 'kill $smi 2>/dev/null || true' EXIT
rc=0
"$bin" --trackers none --interval 1s --spool "$out/spool.jsonl" -- "$py" -c "$load" >"$out/run.log" 2>&1 || rc=$?
kill $smi 2>/dev/null || true
wait $smi 2>/dev/null || true
echo "bridge exited $rc; child output and bridge log:"
tail -n 20 "$out/run.log"

echo "== bridge vs nvidia-smi (nearest reading within 1 s; memory in MB = 10^6 bytes, nvidia-smi MiB converted)"
"$py" scripts/gpu-check/join.py "$out/spool.jsonl" "$out/nvidia-smi.csv"
echo "== files in $out"
ls -l "$out"
