"""A node's training script for bridge's multi-node W&B test
(cmd/bridge/multinode_e2e_test.go, TestMultinodeWandbGroup).

usage: wandb_shared.py PROJECT

wandb.init(project=PROJECT) with nothing else: the run id, the mode, the
shared-mode settings and the group come from the variables bridge exported.
It prints what wandb read ("shared <run id> <mode> <label> <primary>
<update finish state> <group>"), logs one step and finishes.
"""
import sys

import wandb

run = wandb.init(project=sys.argv[1])
s = run.settings
print("shared", run.id, s.mode, s.x_label, s.x_primary, s.x_update_finish_state, run.group, flush=True)
run.log({"loss": 1.0})
run.finish()
