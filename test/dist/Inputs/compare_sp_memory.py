"""Checks the activation memory that sequence parallelism saves, two ways.

usage: compare_sp_memory.py TP.txt SP.txt TP.json SP.json [--rtol R]

TP.txt and SP.txt hold `llmc run`'s output under mpirun without and with
--sp (their "largest training arena" in the "memory per rank" line: the
memory plan of the compiled grad step), TP.json and SP.json `llmc plan
--json` for the same layouts (their activation rows, Korthikanti's
formula). The arena holds every temporary of the step, not only what the
backward keeps, so the two totals differ; what --sp saves (the norms'
inputs, dropout masks and residual stream cut to 1/tp of the sequence)
must agree within R (default 0.05) relative. Prints the figures; exits 1
on a difference or when --sp saves nothing.
"""
import json
import re
import sys


def arena(path):
    for line in open(path):
        m = re.search(r"largest training arena (\d+) B", line)
        if m:
            return int(m.group(1))
    raise SystemExit(f"no 'largest training arena' line in {path}")


def planned(path):
    return int(json.load(open(path))["memory"]["activations"]["value"])


def main():
    args = sys.argv[1:]
    rtol = 0.05
    if "--rtol" in args:
        i = args.index("--rtol")
        rtol = float(args[i + 1])
        del args[i:i + 2]
    tp_run, sp_run, tp_plan, sp_plan = args
    a_tp, a_sp = arena(tp_run), arena(sp_run)
    p_tp, p_sp = planned(tp_plan), planned(sp_plan)
    print(f"arena: tp {a_tp} B, tp+sp {a_sp} B, saved {a_tp - a_sp} B")
    print(f"llmc plan activations: tp {p_tp} B, tp+sp {p_sp} B, "
          f"saved {p_tp - p_sp} B")
    saved_run, saved_plan = a_tp - a_sp, p_tp - p_sp
    if saved_run <= 0 or saved_plan <= 0:
        print("MISMATCH: --sp saves nothing")
        sys.exit(1)
    diff = abs(saved_run - saved_plan) / saved_plan
    print(f"saved: relative difference {diff:.3f}")
    if diff > rtol:
        print(f"MISMATCH: above the tolerance {rtol}")
        sys.exit(1)


main()
