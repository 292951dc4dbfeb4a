#!/usr/bin/env python3
"""Runs the README's command blocks exactly as written.

Every ```sh block preceded by the line `<!-- README test: run this block -->`
is run, in the README's order, by one bash (errexit, pipefail, each command
echoed) in WORKDIR, which stands in for the repository root: it gets a link
to the repository's examples/ and nothing else, so a command that relies on
a file the README did not make first fails here as it would for a reader.

usage: run_readme.py README.md WORKDIR
"""
import os
import subprocess
import sys

MARK = "<!-- README test: run this block -->"


def blocks(lines):
    """The marked blocks as (first line number, text)."""
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == MARK:
            if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
                sys.exit(f"README:{i + 1}: the mark is not followed by ```sh")
            start = i + 2
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                sys.exit(f"README:{i + 2}: the block is not closed")
            found.append((start + 1, "".join(lines[start:end])))
            i = end
        i += 1
    return found


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    readme, workdir = sys.argv[1], sys.argv[2]
    with open(readme) as f:
        lines = f.readlines()
    found = blocks(lines)
    if not found:
        sys.exit(f"{readme}: no block marked '{MARK}'")
    root = os.path.dirname(os.path.abspath(readme))
    os.makedirs(workdir, exist_ok=True)
    link = os.path.join(workdir, "examples")
    if not os.path.lexists(link):
        os.symlink(os.path.join(root, "examples"), link)
    script = ["set -euo pipefail", "PS4='+ README: '", "set -x"]
    for line, text in found:
        script.append(f": README.md line {line}")
        script.append(text)
    commands = sum(1 for _, text in found for l in text.splitlines()
                   if l.strip() and not l.lstrip().startswith("#"))
    print(f"README: {len(found)} blocks, {commands} commands", flush=True)
    status = subprocess.call(["bash", "-c", "\n".join(script)], cwd=workdir,
                             stderr=subprocess.STDOUT)
    print(f"README: exit status {status}", flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
