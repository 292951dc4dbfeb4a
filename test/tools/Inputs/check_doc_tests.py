#!/usr/bin/env python3
"""Checks that every page whose blocks run as tests has its lit test.

A page of README.md or docs/*.md with a block marked
`<!-- docs test: run this block -->` must have test/tools/readme.test
(README.md) or test/tools/docs-PAGE.test, which runs that page through
run_doc_blocks.py; a marked block with no test would silently not run.

usage: check_doc_tests.py REPOSITORY_ROOT
"""
import glob
import os
import sys

MARK = "<!-- docs test: run this block -->"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    pages = [os.path.join(root, "README.md")]
    pages += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    missing = []
    for page in pages:
        with open(page) as f:
            if not any(line.strip() == MARK for line in f):
                continue
        stem = os.path.splitext(os.path.basename(page))[0]
        name = "readme.test" if stem == "README" else f"docs-{stem}.test"
        test = os.path.join(root, "test", "tools", name)
        relative = os.path.relpath(page, root)
        if not os.path.exists(test):
            missing.append(f"{relative}: marked blocks but no test/tools/{name}")
            continue
        with open(test) as f:
            if relative not in f.read():
                missing.append(f"test/tools/{name} does not run {relative}")
                continue
        print(f"{relative}: test/tools/{name}")
    for line in missing:
        print(f"error: {line}")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
