#!/usr/bin/env python3
"""Checks that no file includes one from a layer above it.

The layers, lowest first (docs/architecture.md; ../shared/DESIGN.md):

  ir/kernel        the contract: kernel IR, program, memory plan, artifact;
                   no MLIR
  runtime/...      the runtime, in folders by job, each including only the
                   contract and the runtime folders below it (RUNTIME):
    Comm           communicators (MPI), the mesh, a program's collectives
    Exec           host tensors, the executor and store interfaces, memory
    Weights        weights files, checkpoints, Hugging Face names, 2:4 masks
    Cpu            the CPU executor and its kernels, the kernel cache
    Cuda           the CUDA executor, device store, NCCL
    Serve          generation, the exported binary's payload, the server
    Train          the training loop's runtime: trainer, guard, console
  ir               the llmc dialect (MLIR)
  passes           graph passes and pipelines
  frontend         configs, model builder, data, tokenizers
  codegen          lowering, emitters, NVRTC
  training         the training-session API over all of the above
  tools, bench, test: the top; they may include anything.

A file belongs to the longest folder prefix in ALLOWED; its quoted includes
that name a project folder must be in its own layer or one it lists. A
source file directly in runtime/ (outside every folder by job) is reported
too. There are no per-header exceptions.

usage: check_layers.py [ROOT]   (default: the repository this script is in)
Prints one line per violation, "file:line: LAYER includes HEADER (layer
OTHER)", and exits 1 if there is any.
"""
import os
import re
import sys

# The runtime's folders, lowest first: each may include the ones before it.
RUNTIME = ["runtime/Comm", "runtime/Exec", "runtime/Weights", "runtime/Cpu",
           "runtime/Cuda", "runtime/Serve", "runtime/Train"]
# Folders listed before another that it still may not include: the CUDA
# executor does not build on the CPU one.
INDEPENDENT = {"runtime/Cuda": ["runtime/Cpu"]}


def runtime_below(folder):
    below = RUNTIME[:RUNTIME.index(folder)]
    return [f for f in below if f not in INDEPENDENT.get(folder, [])]


# layer -> the layers its files may include, besides its own.
ALLOWED = {
    "ir/kernel": [],
    **{f: runtime_below(f) + ["ir/kernel"] for f in RUNTIME},
    "ir": [],
    "passes": ["ir", "ir/kernel"],
    "frontend": ["ir", "ir/kernel"],
    "codegen": ["passes", "ir", "ir/kernel"],
    "training": ["frontend", "codegen", "passes", "ir", "ir/kernel"] + RUNTIME,
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
                        if other in ALLOWED[own]:
                            continue
                        violations.append(f"{rel}:{number}: {own} includes "
                                          f"{header} (layer {other})")
    runtime = os.path.join(root, "runtime")
    if os.path.isdir(runtime):
        for name in sorted(os.listdir(runtime)):
            if name.endswith(SOURCE_SUFFIXES):
                violations.append(f"runtime/{name}: in no folder by job "
                                  f"(one of {', '.join(RUNTIME)})")
    return violations


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    violations = check(root)
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} violation(s): includes that point up a "
              f"layer, or files outside the layers' folders")
        return 1
    print("layers: every include points down or sideways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
