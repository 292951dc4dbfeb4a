"""Checks that one rank's persistent memory agrees three ways.

usage: compare_memory.py COMPILE.txt RUN.txt PLAN.json
       compare_memory.py - RUN.txt PLAN.json   (run and plan only)
       compare_memory.py - RUN.txt PLAN.json --stage N   (pipeline stage N)

COMPILE.txt holds `llmc compile --dp N` output (its "per rank" line: the
plan of the compiled programs), RUN.txt `llmc run`'s output under mpirun
(its "memory per rank" line: the tensors the runtime's store allocated),
PLAN.json `llmc plan --json` (its memory rows). Parameters, master
partition, gradients and optimizer state must be equal, byte for byte.
Prints the figures; exits 1 on a difference.
"""
import json
import re
import sys

KINDS = ("parameters", "master partition", "gradients", "optimizer state")


def figures(path, marker):
    for line in open(path):
        if marker in line:
            return {k: int(re.search(k + r" (\d+) B", line).group(1))
                    for k in KINDS}
    raise SystemExit(f"no '{marker}' line in {path}")


def main():
    compiled = (figures(sys.argv[1], "per rank (") if sys.argv[1] != "-"
                else None)
    # --stage N: the run's figures of pipeline stage N (stage 0's line is
    # the plain one).
    stage = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--stage" else "0"
    measured = figures(sys.argv[2], "memory per rank:" if stage == "0" else
                       f"memory per rank, pipeline stage {stage}:")
    memory = json.load(open(sys.argv[3]))["memory"]
    planned = {
        "parameters": memory["weights"]["value"],
        "master partition": memory.get("master_weights", {"value": 0})["value"],
        "gradients": memory["gradients"]["value"],
        "optimizer state": memory["optimizer_states"]["value"],
    }
    ok = True
    for kind in KINDS:
        same = measured[kind] == round(planned[kind]) and (
            compiled is None or compiled[kind] == measured[kind])
        ok = ok and same
        head = "" if compiled is None else f"compiled {compiled[kind]} B, "
        print(f"{kind}: {head}measured "
              f"{measured[kind]} B, llmc plan {round(planned[kind])} B"
              f"{'' if same else '  MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
