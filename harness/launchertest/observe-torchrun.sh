#!/usr/bin/env bash
# observe-torchrun.sh VENV: runs torchrun the ways TorchrunCases list (two
# agents on this machine where a case has two nodes, gloo, rendezvous on
# 127.0.0.1) and prints each torchrun's command line, then, per worker, its
# argv and the variables torchrun added to its environment. torchrun.go's
# table was written from this output (about 4 minutes on two busy cores).
#
# VENV is created when missing with torch 2.15.0 from PyPI. For x86-64 Linux
# that is the CUDA build: `import torch` fails without the NVIDIA packages
# (OSError: libcudart.so.13, then "libcublasLt.so.*[0-9] not found"), so
# pip installs them too: about 2.8 GB downloaded, 4.4 GB installed (measured
# December 2026; no GPU is needed to run). --no-deps with only the pure-Python
# dependencies is not enough.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 VENV" >&2; exit 2; }
venv=$1
if [ ! -x "$venv/bin/torchrun" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check torch==2.15.0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat >train.py <<'PY'
import json, os, sys
import torch.distributed as dist
if int(os.environ["WORLD_SIZE"]) > 1:
    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
parent = set(json.loads(os.environ["OBSERVE_PARENT_ENV"]))
added = {k: v for k, v in os.environ.items() if k not in parent}
print("WORKER", json.dumps({"argv": sys.argv[1:], "added": added}, sort_keys=True), flush=True)
PY
# observe NAME ARGV... [-- ARGV of the second node...]: env PET_* from the caller.
observe() {
  local name=$1
  shift
  local a=() b=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; b=("$@"); }
  echo "== $name"
  export OBSERVE_PARENT_ENV
  OBSERVE_PARENT_ENV=$(python3 -c 'import json, os; print(json.dumps(sorted(os.environ)+["OBSERVE_PARENT_ENV", "_"]))')
  PATH="$venv/bin:$PATH" "${a[@]}" >a.out 2>&1 &
  if [ ${#b[@]} -gt 0 ]; then PATH="$venv/bin:$PATH" "${b[@]}" >b.out 2>&1 & fi
  wait
  # Each worker's line, after the argv of the torchrun that started it.
  grep -q '^WORKER' a.out || { cat a.out; exit 1; }
  echo "${a[*]}"; grep '^WORKER' a.out
  if [ ${#b[@]} -gt 0 ]; then echo "${b[*]}"; grep '^WORKER' b.out; fi
  rm -f a.out b.out
}
observe "static two nodes, no rdzv id" \
  torchrun --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port 29601 --nproc-per-node 1 train.py --nnodes 9 -- \
  torchrun --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 29601 --nproc-per-node 1 train.py --nnodes 9
observe "static two nodes with rdzv id" \
  torchrun --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port 29612 --rdzv-id abc3 train.py -- \
  torchrun --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 29612 --rdzv-id abc3 train.py
observe "c10d two nodes, node rank ignored, both spellings" \
  torchrun --nnodes 2 --node-rank 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29602 --rdzv-id job42 --nproc-per-node 2 train.py -- \
  torchrun --nnodes 2 --node_rank 0 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29602 --rdzv_id=job42 --nproc_per_node=2 train.py
observe "python -m torch.distributed.run" \
  "$venv/bin/python" -m torch.distributed.run --nnodes=1 --rdzv-id=abc --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29610 train.py
observe "abbreviated options" \
  torchrun --nnodes 1 --rdzv-i abc2 --rdzv-back c10d --rdzv-endp 127.0.0.1:29611 train.py
observe "one node, defaults" torchrun --nproc-per-node 2 train.py
observe "standalone" torchrun --standalone --nproc-per-node 1 train.py
observe "one node, rdzv id replaced by a uuid" torchrun --rdzv-id abc --nproc-per-node 1 train.py
PET_NNODES=1:2 PET_RDZV_ID=petjob PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT=127.0.0.1:29603 PET_NPROC_PER_NODE=1 \
  observe "PET_ variables only" torchrun train.py
