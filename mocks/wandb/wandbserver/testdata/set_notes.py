"""Reads and writes a run's notes with the real wandb client's public API,
for the mock's faithfulness test of notes a person writes.

usage: set_notes.py ENTITY/PROJECT/RUN_ID [NOTES]
With NOTES, sets the run's notes to it (run.notes, then run.update());
then prints the run's notes as the client reads them again, after the line
"notes:".
"""
import sys

import wandb

path = sys.argv[1]
api = wandb.Api(timeout=60)
if len(sys.argv) > 2:
    run = api.run(path)
    run.notes = sys.argv[2]
    run.update()
print("notes:")
print(wandb.Api(timeout=60).run(path).notes, end="")
