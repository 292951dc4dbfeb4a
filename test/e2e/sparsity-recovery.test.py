"""Checks a sparse run's recovery against the dense run (metrics.jsonl).

usage: sparsity-recovery.test.py DENSE SPARSE PRUNE_STEP END_STEP MARGIN
Fails (exit 1) unless the prune raised the validation loss and the sparse
run's final validation loss is below its post-prune loss and within MARGIN
nats of the dense run's.
"""
import json
import sys


def val_losses(path):
    losses, prune = {}, None
    for line in open(path):
        record = json.loads(line)
        if record.get("event") == "prune":
            prune = record
        elif "val_loss" in record:
            losses[record["step"]] = record["val_loss"]
    return losses, prune


dense, _ = val_losses(sys.argv[1])
sparse, prune = val_losses(sys.argv[2])
prune_step, end, margin = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
if prune is None or prune["step"] != prune_step:
    sys.exit(f"no prune event at step {prune_step}")
rise = prune["val_loss_after"] - prune["val_loss_before"]
gap = sparse[end] - dense[end]
if rise <= 0:
    sys.exit(f"the prune did not raise the val loss ({rise:+.4f})")
if sparse[end] >= prune["val_loss_after"] or gap > margin:
    sys.exit(f"no recovery: sparse {sparse[end]:.4f}, dense {dense[end]:.4f}")
print(f"prune raised the val loss by {rise:.4f}; fine-tuned to within "
      f"{max(gap, 0):.4f} of the dense run (margin {margin})")
