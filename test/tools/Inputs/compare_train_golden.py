#!/usr/bin/env python3
"""Compares the losses and gradient norms of an `llmc run` (metrics.jsonl)
with the PyTorch golden of scripts/make_train_golden.py.

llmc trains in float32, the golden in float64. Tolerances (relative; the
errors measured when they were set were below 2e-7 everywhere):
  step 0 loss          1e-6   the float32 forward pass alone
  later losses         1e-5   float32 error carried through AdamW updates
                              (Adam divides each gradient element by its own
                              magnitude, so tiny elements amplify rounding)
  gradient norms       1e-5   the float32 backward pass (before clipping)
  learning rates       1e-12  the schedule is computed in double
Exits 1 if any step is outside them.
"""
import json
import sys

golden = json.load(open(sys.argv[1]))["steps"]
run = {}
for line in open(sys.argv[2]):
    record = json.loads(line)
    if "loss" in record:
        run[record["step"]] = record
ok = True
for g in golden:
    step = g["step"]
    if step not in run:
        print(f"step {step}: missing from {sys.argv[2]}")
        ok = False
        continue
    r = run[step]
    loss_tol = 1e-6 if step == 0 else 1e-5
    loss_err = abs(r["loss"] - g["loss"]) / abs(g["loss"])
    norm_err = abs(r["grad_norm"] - g["grad_norm"]) / abs(g["grad_norm"])
    lr_err = abs(r["lr"] - g["lr"]) / g["lr"]
    good = loss_err <= loss_tol and norm_err <= 1e-5 and lr_err <= 1e-12
    ok = ok and good
    print(f"step {step}: loss {r['loss']:.7f} golden {g['loss']:.7f} "
          f"rel {loss_err:.1e} (tol {loss_tol:.0e}); grad norm rel "
          f"{norm_err:.1e}; lr rel {lr_err:.1e}: {'ok' if good else 'FAIL'}")
print(f"all {len(golden)} steps within tolerance" if ok else "FAILED")
sys.exit(0 if ok else 1)
