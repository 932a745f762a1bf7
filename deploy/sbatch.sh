#!/bin/bash
# A Slurm batch job that runs a Python training script on every node of its
# allocation, each node's process under bridge:
#
#   export MLFLOW_TRACKING_URI=http://mlflow.example.com:5000 MLFLOW_EXPERIMENT_NAME=resnet
#   sbatch --nodes=4 deploy/sbatch.sh train.py --epochs 20
#
# sbatch passes the submitting shell's environment to the job, so the MLflow
# (or W&B) variables set above reach every node's bridge. Nothing else is
# passed by hand: every node's bridge finds the job's one run from Slurm's
# own variables (key slurm:<cluster>:<job id>.<step>, node id
# node-<SLURM_NODEID>, the node count from SLURM_STEP_NUM_NODES;
# docs/multinode.md), hands it to train.py (MLFLOW_RUN_ID) and writes its
# node's series under system/node-<N>/. `bridge sample` inside the
# allocation shows what it finds.
#
# One task per node: the script starts its own workers (DataLoader
# processes, or torchrun's), and bridge samples the node once. For torchrun
# on every node, the same line with torchrun as bridge's child (Slurm's key
# wins over --rdzv-id; the c10d rendezvous numbers the nodes, and this
# script's variables are the same on every node):
#
#   head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
#   exec srun --kill-on-bad-exit=1 bridge -- torchrun --nnodes "$SLURM_NNODES" \
#     --nproc-per-node 8 --rdzv-id "$SLURM_JOB_ID" --rdzv-backend c10d \
#     --rdzv-endpoint "$head:29500" train.py
#
# BRIDGE names the binary if it is not on PATH.
#SBATCH --job-name=train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --requeue
#SBATCH --output=%x-%j.out
set -euo pipefail
if [ -z "${MLFLOW_TRACKING_URI:-}${WANDB_PROJECT:-}" ]; then
  echo "sbatch.sh: export MLFLOW_TRACKING_URI (or WANDB_PROJECT) before sbatch: without a tracker bridge only writes its spool" >&2
  exit 2
fi

# --requeue above: a requeued job (a node failure, a preemption) rejoins its
# run, each node's attempt tagged (bridge.node.<node-id>.attempt). Each
# bridge's default spool is named after its node, task and run, so the
# working directory may be one that every node shares, and a requeued task
# finds what its predecessor left. --kill-on-bad-exit: a node whose training
# fails ends the others.
exec srun --kill-on-bad-exit=1 "${BRIDGE:-bridge}" -- python "$@"
