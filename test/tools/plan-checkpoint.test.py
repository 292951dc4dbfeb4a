# plan-checkpoint.test: the plan's checkpoint_bytes against a checkpoint file.
import json
import os
import sys

plan = json.load(open(sys.argv[1]))


def find(node, key):
    if isinstance(node, dict):
        if key in node:
            return node[key]
        node = list(node.values())
    if isinstance(node, list):
        for child in node:
            found = find(child, key)
            if found is not None:
                return found
    return None


planned = find(plan, "checkpoint_bytes")["value"]
per_parameter = find(plan, "checkpoint_bytes_per_parameter")["value"]
actual = os.path.getsize(sys.argv[2])
verdict = "within 1%" if planned <= actual <= planned * 1.01 else "MISMATCH"
print(f"plan {planned:.0f} bytes ({per_parameter:g} per parameter), "
      f"file {actual} bytes: {verdict}")
