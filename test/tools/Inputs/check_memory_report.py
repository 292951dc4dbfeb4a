"""Checks the memory report at the end of an `llmc run`.

usage: check_memory_report.py LOG.txt METRICS.jsonl

LOG.txt is the run's output (its "memory per rank" line and the planned /
resident table after it), METRICS.jsonl its metrics, whose last line is the
report as JSON ({"memory": {...}}, in bytes). Checks that the categories
sum exactly to the measured resident set and, with the transient part, to
the peak (VmHWM); that no figure is negative; that the planned parameters,
gradients and optimizer state are the "memory per rank" figures; and that
every category of the JSON is a line of the text with the same figure (to
the 0.1 MiB the text shows). Prints what it checked; exits 1 on a failure.
"""
import json
import re
import sys

MIB = 1 << 20


def main():
    log = open(sys.argv[1]).read().splitlines()
    lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    if "memory" not in lines[-1]:
        raise SystemExit("the last line of metrics.jsonl is not the memory report")
    m = lines[-1]["memory"]
    ok = True

    def check(what, good):
        nonlocal ok
        ok = ok and good
        print(f"{what}: {'ok' if good else 'FAILED'}")

    check("measured", m["measured"] is True)
    rows = m["planned"] + m["above_plan"]
    total = sum(r["resident_bytes"] for r in rows)
    check("categories sum to the resident set",
          total == m["resident_bytes"])
    check("resident + transient = peak",
          m["resident_bytes"] + m["transient_bytes"] == m["peak_bytes"])
    check("no negative figure",
          all(r["resident_bytes"] >= 0 for r in rows) and
          m["transient_bytes"] >= 0)
    check("an unaccounted line", rows[-1]["category"] == "unaccounted")
    check("planned bytes sum",
          m["planned_bytes"] == sum(r["planned_bytes"] for r in m["planned"]))

    per_rank = next(l for l in log if l.startswith("memory per rank:"))
    planned = {r["category"]: r["planned_bytes"] for r in m["planned"]}
    for kind in ("parameters", "gradients", "optimizer state"):
        figure = int(re.search(kind + r" (\d+) B", per_rank).group(1))
        check(f"planned {kind} = memory per rank", planned.get(kind) == figure)

    def shown(category):
        for l in log:
            text = l.strip()
            if text.startswith(category + " "):
                return [float(x) for x in re.findall(r"([0-9.]+) MiB", text)]
        return None

    for r in rows:
        values = shown(r["category"])
        good = values is not None and \
            abs(values[-1] - r["resident_bytes"] / MIB) <= 0.05 + 1e-9
        if not good:
            print(f"  {r['category']}: text {values}, json {r['resident_bytes']}")
        ok = ok and good
    print(f"every category a text line with its figure: {'ok' if ok else 'FAILED'}")
    peak = shown("peak resident")
    check("peak resident line", peak is not None and
          abs(peak[-1] - m["peak_bytes"] / MIB) <= 0.05 + 1e-9)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
