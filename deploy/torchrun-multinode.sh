#!/bin/bash
# torchrun on several machines started by hand (or by any tool that runs one
# command per machine), bridge in front of it. bridge reads torchrun's own
# options: the key from --rdzv-id, the node from --node-rank, the node count
# from --nnodes (docs/multinode.md). --rdzv-id must be the same on every
# machine and new for every job: its default "none" names no job.
# The static rendezvous (torchrun's default backend, --master-addr and
# --master-port) is what makes --node-rank this machine's rank; under
# --rdzv-backend c10d torchrun ranks the machines itself at rendezvous, and
# bridge then names each node by its host name.
#
#   on each of the 2 machines:  NODE_RANK=0 deploy/torchrun-multinode.sh
#                               NODE_RANK=1 deploy/torchrun-multinode.sh
set -euo pipefail

export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-http://mlflow.example.com:5000}
export MLFLOW_EXPERIMENT_NAME=${MLFLOW_EXPERIMENT_NAME:-finetune}
RDZV_ID=${RDZV_ID:-finetune-2026-12-04-a}          # one value per job, on every machine
MASTER=${MASTER:-gpu-a.example.com}

exec bridge -- torchrun \
	--nnodes 2 --nproc-per-node 8 --node-rank "${NODE_RANK:?set NODE_RANK to the index of this machine}" \
	--rdzv-id "$RDZV_ID" --master-addr "$MASTER" --master-port 29500 \
	train.py
