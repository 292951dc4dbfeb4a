#!/usr/bin/env python3
"""Compares two `llmc generate --print-logits` outputs: the same lines, the
same greedy tokens and every logit within a tolerance.

usage: compare_logits.py A B [--tolerance 1e-5] [--relative]

--relative: the tolerance is relative to the logit scale, the largest
|logit| in A (for a lower-precision model against its f32 original).
"""
import sys


def read(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("logits "):
                continue
            head, values = line.split(":", 1)
            _, label, _, argmax = head.split()
            rows[label] = (int(argmax), [float(v) for v in values.split()])
    return rows


def main():
    args = sys.argv[1:]
    tolerance = 1e-5
    relative = "--relative" in args
    if relative:
        args.remove("--relative")
    if "--tolerance" in args:
        i = args.index("--tolerance")
        tolerance = float(args[i + 1])
        del args[i:i + 2]
    a, b = read(args[0]), read(args[1])
    if not a or a.keys() != b.keys():
        sys.exit(f"different rows: {sorted(a)} vs {sorted(b)}")
    worst = 0.0
    scale = 1.0
    if relative:
        scale = max(abs(x) for _, values in a.values() for x in values)
        tolerance *= scale
    for label in a:
        (ma, va), (mb, vb) = a[label], b[label]
        if len(va) != len(vb):
            sys.exit(f"row {label}: {len(va)} vs {len(vb)} logits")
        diff = max(abs(x - y) for x, y in zip(va, vb))
        worst = max(worst, diff)
        if diff > tolerance:
            sys.exit(f"row {label}: logits differ by {diff:.3g} > {tolerance}")
        if ma != mb:
            sys.exit(f"row {label}: greedy tokens {ma} vs {mb}")
    if relative:
        print(f"{len(a)} rows, {len(next(iter(a.values()))[1])} logits each, "
              f"max |logit| {scale:.3g}, max difference {worst:.3g} "
              f"({worst / scale:.2g} of it) <= {tolerance / scale:g} of it")
        return
    print(f"{len(a)} rows, {len(next(iter(a.values()))[1])} logits each, "
          f"max difference {worst:.3g} <= {tolerance}")


main()
