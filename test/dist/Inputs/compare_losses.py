"""Compares the training and validation losses of two runs' metrics.jsonl.

usage: compare_losses.py REFERENCE.jsonl OTHER.jsonl [--rtol X] [--norms]

Every (step, loss) and (step, val_loss) of the reference must be in the
other run and agree within the relative tolerance (default 1e-6); with
--norms every (step, grad_norm) too. Prints how many values were
compared, the largest relative difference, and whether every value is
bitwise equal; exits 1 on a mismatch.
"""
import json
import sys


def losses(path, keys=("loss", "val_loss")):
    values = {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            for key in keys:
                if key in record:
                    values[(record["step"], key)] = record[key]
    return values


def main():
    args = sys.argv[1:]
    rtol = 1e-6
    if "--rtol" in args:
        i = args.index("--rtol")
        rtol = float(args[i + 1])
        del args[i : i + 2]
    keys = ("loss", "val_loss")
    what = "losses"
    if "--norms" in args:
        args.remove("--norms")
        keys += ("grad_norm",)
        what = "losses and gradient norms"
    reference, other = losses(args[0], keys), losses(args[1], keys)
    if not reference:
        print("no losses in", args[0])
        return 1
    if reference.keys() != other.keys():
        print("the runs logged different steps:",
              sorted(reference.keys() ^ other.keys())[:5])
        return 1
    worst, worst_key = 0.0, None
    for key, value in reference.items():
        diff = abs(other[key] - value) / max(abs(value), 1e-30)
        if diff > worst:
            worst, worst_key = diff, key
    bitwise = all(other[k] == v for k, v in reference.items())
    print(f"{len(reference)} {what} compared, max relative difference "
          f"{worst:.3g}{' at step %d (%s)' % worst_key if worst_key else ''}"
          f", {'bitwise equal' if bitwise else 'not bitwise equal'}")
    if worst > rtol:
        print(f"MISMATCH: above the tolerance {rtol:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
