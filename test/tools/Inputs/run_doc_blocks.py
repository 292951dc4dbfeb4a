#!/usr/bin/env python3
"""Runs a documentation page's command blocks exactly as written.

Every ```sh block preceded by the line `<!-- docs test: run this block -->`
is run, in the page's order, by one bash (errexit, pipefail, each command
echoed as `+ PAGE: command`, PAGE the file's stem: README, getting-started,
...) in WORKDIR, which stands in for the repository root: it gets a link
to the repository's examples/ and nothing else, so a command that relies on
a file the page did not make first fails here as it would for a reader.
The pages are README.md and docs/*.md; each page with marked blocks has its
own lit test (test/tools/readme.test, test/tools/docs-PAGE.test).

usage: run_doc_blocks.py PAGE.md WORKDIR
"""
import os
import subprocess
import sys

MARK = "<!-- docs test: run this block -->"


def blocks(name, lines):
    """The marked blocks as (first line number, text)."""
    found = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if (stripped != MARK and stripped.startswith("<!--")
                and "run this block" in stripped):
            sys.exit(f"{name}:{i + 1}: a mark that is not '{MARK}'")
        if stripped == MARK:
            if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
                sys.exit(f"{name}:{i + 1}: the mark is not followed by ```sh")
            start = i + 2
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                sys.exit(f"{name}:{i + 2}: the block is not closed")
            found.append((start + 1, "".join(lines[start:end])))
            i = end
        i += 1
    return found


def repository_root(page):
    """The folder above the page that holds examples/ (README.md's own,
    docs/'s parent)."""
    folder = os.path.dirname(os.path.abspath(page))
    while not os.path.isdir(os.path.join(folder, "examples")):
        parent = os.path.dirname(folder)
        if parent == folder:
            sys.exit(f"{page}: no examples/ in any folder above it")
        folder = parent
    return folder


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    page, workdir = sys.argv[1], sys.argv[2]
    label = os.path.splitext(os.path.basename(page))[0]
    with open(page) as f:
        lines = f.readlines()
    found = blocks(os.path.basename(page), lines)
    if not found:
        sys.exit(f"{page}: no block marked '{MARK}'")
    root = repository_root(page)
    os.makedirs(workdir, exist_ok=True)
    link = os.path.join(workdir, "examples")
    if not os.path.lexists(link):
        os.symlink(os.path.join(root, "examples"), link)
    script = ["set -euo pipefail", f"PS4='+ {label}: '", "set -x"]
    for line, text in found:
        script.append(f": {os.path.basename(page)} line {line}")
        script.append(text)
    commands = sum(1 for _, text in found for l in text.splitlines()
                   if l.strip() and not l.lstrip().startswith("#"))
    print(f"{label}: {len(found)} blocks, {commands} commands", flush=True)
    status = subprocess.call(["bash", "-c", "\n".join(script)], cwd=workdir,
                             stderr=subprocess.STDOUT)
    print(f"{label}: exit status {status}", flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
