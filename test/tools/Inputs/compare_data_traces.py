"""Compares `llmc run --data-trace` directories (test/tools/data-*.test,
test/dist/data-*.test).

    compare_data_traces.py REFERENCE OTHER [--from-step N]

Each directory holds rank-R.tsv files, one line per training window a rank
read: step, micro-batch, row, window (k), source, file, token offset. The
ranks of OTHER are merged; the check is that no window was read by two
ranks, and that the merged windows are exactly REFERENCE's (every field,
ordered by k), from step N on (a resumed run's trace against the
uninterrupted run's). Prints one line saying what was compared; exits 1
with the first difference otherwise.
"""
import argparse
import glob
import os
import sys


def read_trace(directory):
    """{rank: [line tuples]} of a trace directory."""
    ranks = {}
    for path in sorted(glob.glob(os.path.join(directory, "rank-*.tsv"))):
        rank = int(os.path.basename(path)[len("rank-"):-len(".tsv")])
        rows = []
        with open(path) as f:
            for number, line in enumerate(f, 1):
                fields = line.rstrip("\n").split("\t")
                if len(fields) != 7:
                    sys.exit(f"{path}:{number}: expected 7 fields, got "
                             f"{len(fields)}")
                step, micro, row, window = (int(x) for x in fields[:4])
                rows.append((step, micro, row, window, fields[4], fields[5],
                             int(fields[6])))
        ranks[rank] = rows
    if not ranks:
        sys.exit(f"{directory}: no rank-*.tsv")
    return ranks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("reference")
    parser.add_argument("other")
    parser.add_argument("--from-step", type=int, default=0)
    args = parser.parse_args()

    reference = [r for rows in read_trace(args.reference).values()
                 for r in rows if r[0] >= args.from_step]
    other_ranks = read_trace(args.other)
    merged = []
    seen = {}
    for rank, rows in sorted(other_ranks.items()):
        for r in rows:
            if r[0] < args.from_step:
                continue
            if r[3] in seen:
                sys.exit(f"window {r[3]} read by rank {seen[r[3]]} and rank "
                         f"{rank}")
            seen[r[3]] = rank
            merged.append(r)
    reference.sort(key=lambda r: r[3])
    merged.sort(key=lambda r: r[3])
    # The global order: k follows (step, micro-batch, row).
    for rows, name in ((reference, args.reference), (merged, args.other)):
        if [r[:3] for r in rows] != sorted(r[:3] for r in rows):
            sys.exit(f"{name}: windows not in (step, micro-batch, row) order")
    if len(reference) != len(merged):
        sys.exit(f"{len(reference)} windows in the reference, {len(merged)} "
                 f"in the other trace")
    for a, b in zip(reference, merged):
        if a != b:
            sys.exit(f"differ at window {a[3]}:\n  {a}\n  {b}")
    steps = len({r[0] for r in reference})
    per_rank = " ".join(str(sum(1 for r in rows if r[0] >= args.from_step))
                        for _, rows in sorted(other_ranks.items()))
    print(f"{len(reference)} windows in {steps} steps from step "
          f"{args.from_step}: the same windows in the same global order; "
          f"{len(other_ranks)} rank file(s), windows per rank: {per_rank}")


if __name__ == "__main__":
    main()
