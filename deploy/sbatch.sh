#!/bin/bash
# A Slurm batch job that runs a Python training script on every node of its
# allocation, each node's process under bridge:
#
#   export MLFLOW_TRACKING_URI=http://mlflow.example.com:5000 MLFLOW_EXPERIMENT_NAME=resnet
#   sbatch --nodes=4 deploy/sbatch.sh train.py --epochs 20
#
# sbatch passes the submitting shell's environment to the job, so the MLflow
# (or W&B) variables set above reach every node's bridge. One task per node:
# the script starts its own workers (torchrun, DataLoader processes), and
# bridge samples the node once. BRIDGE names the binary if it is not on PATH.
#SBATCH --job-name=train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=%x-%j.out
set -euo pipefail
if [ -z "${MLFLOW_TRACKING_URI:-}${WANDB_PROJECT:-}" ]; then
  echo "sbatch.sh: export MLFLOW_TRACKING_URI (or WANDB_PROJECT) before sbatch: without a tracker bridge only writes its spool" >&2
  exit 2
fi

# Each task's spool gets its own name: the working directory is usually on a
# filesystem that every node shares. Job id and rank stay the same when Slurm
# requeues the job, so a restarted task finds what its predecessor left.
# --kill-on-bad-exit: a node whose training fails ends the others.
exec srun --kill-on-bad-exit=1 bash -c \
  'exec "${BRIDGE:-bridge}" --spool "bridge-spool-$SLURM_JOB_ID-$SLURM_PROCID.jsonl" -- python "$@"' \
  bridge "$@"
