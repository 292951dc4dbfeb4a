#!/usr/bin/env python3
"""Checks that no file includes one from a layer above it.

The layers, lowest first (README "Code map"; ../shared/DESIGN.md):

  ir/kernel  the contract: kernel IR, program, memory plan, artifact; no MLIR
  runtime    executors, store, checkpoints, trainer     -> ir/kernel
  runtime/Serve  the inference server (LlmcServe)       -> runtime, ir/kernel,
                 and of frontend only the tokenizers (LlmcData, no MLIR)
  ir         the llmc dialect (MLIR)
  passes     graph passes and pipelines                  -> ir
  frontend   configs, model builder, data, tokenizers    -> ir, ir/kernel
  codegen    lowering, emitters, NVRTC, training         -> frontend, passes,
                                                            ir, ir/kernel
  training   the training layer; training/Plan: llmc plan's planner
                                                         -> frontend, passes,
                                                    codegen, ir, ir/kernel, runtime
  tools, bench, test: the top; they may include anything.

A file belongs to the longest folder prefix in ALLOWED; its quoted includes
that name a project folder must be in its own layer or one it lists, or be
one of the headers HEADERS lists for it.

usage: check_layers.py [ROOT]   (default: the repository this script is in)
Prints one line per violation, "file:line: LAYER includes HEADER (layer
OTHER)", and exits 1 if there is any.
"""
import os
import re
import sys

# layer -> the layers its files may include, besides its own.
ALLOWED = {
    "ir/kernel": [],
    "runtime": ["ir/kernel"],
    "runtime/Serve": ["runtime", "ir/kernel"],
    "ir": [],
    "passes": ["ir"],
    "frontend": ["ir", "ir/kernel"],
    "codegen": ["frontend", "passes", "ir", "ir/kernel"],
    "training": ["frontend", "passes", "codegen", "ir", "ir/kernel", "runtime"],
}
# layer -> single headers of other layers it may include: the server links
# LlmcData for the tokenizers, which need nothing of MLIR.
HEADERS = {
    "runtime/Serve": ["frontend/Tokenizer.h"],
}
TOP = ["tools", "bench", "test"]  # may include every layer; nothing includes them
SOURCE_SUFFIXES = (".h", ".cpp", ".inc", ".td")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"|^\s*include\s+"([^"]+)"')


def layer_of(path):
    """The layer of a repository-relative path, or None outside the layers."""
    best = None
    for layer in list(ALLOWED) + TOP:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def check(root):
    violations = []
    for layer in ALLOWED:
        base = os.path.join(root, layer)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                own = layer_of(rel)
                if own != layer:
                    continue  # a sub-layer (ir/kernel inside ir) is checked as itself
                with open(full, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        header = m.group(1) or m.group(2)
                        other = layer_of(header)
                        if other is None or other == own:
                            continue
                        if other in ALLOWED[own] or \
                                header in HEADERS.get(own, []):
                            continue
                        violations.append(f"{rel}:{number}: {own} includes "
                                          f"{header} (layer {other})")
    return violations


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    violations = check(root)
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} include(s) point up a layer")
        return 1
    print("layers: every include points down or sideways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
