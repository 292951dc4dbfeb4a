"""Runs `llmc run ... --timings` (argv[1:]) and checks its start-up table
against a clock of its own: every row's wall seconds add up to the total
row, and the total (exec to the first step) is no more than the wall time
this script saw the process take."""
import re
import subprocess
import sys
import time

start = time.monotonic()
out = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True,
                     check=True).stdout
elapsed = time.monotonic() - start
sys.stdout.write(out)
rows = re.findall(r"^  (\S.*?)\s+([0-9.]+)\s+(?:[0-9.]+|-)\s+(?:[0-9.]+|-)$",
                  out, re.M)
phases = [(name, float(wall)) for name, wall in rows if name != "phase"]
assert phases and phases[-1][0] == "to the first step", phases
total = phases[-1][1]
summed = sum(wall for _, wall in phases[:-1])
# Each row is printed to 1 ms.
if abs(summed - total) > 0.001 * len(phases):
    sys.exit(f"rows sum to {summed:.3f} s, the total row says {total:.3f} s")
if total > elapsed:
    sys.exit(f"the table says {total:.3f} s to the first step, the process "
             f"took {elapsed:.3f} s in all")
print(f"timings: {len(phases) - 1} phases add up to the total, within the "
      "process's wall time")
