#!/usr/bin/env python3
"""Compares two safetensors files of F32 weights: the same tensor names,
dtypes, shapes and metadata, and every element within 1e-5 of the largest
magnitude in its tensor (a run trained on another CPU rounds differently;
bitwise equality would only hold on one). Prints the worst deviation and
exits 1 on any difference. Standard library only (the tests need no numpy).

usage: compare_safetensors.py GOT WANT [--tolerance T]

--tolerance sets the bound (default 1e-5): runs that sum in another order
(tensor parallelism) drift further over many AdamW steps.
"""
import array
import json
import struct
import sys

TOLERANCE = 1e-5


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        values = None
        if info["dtype"] == "F32":
            values = array.array("f")
            values.frombytes(data[begin:end])
            if sys.byteorder != "little":
                values.byteswap()
        tensors[name] = (info["dtype"], info["shape"], values)
    return tensors, metadata


def main():
    global TOLERANCE
    args = sys.argv[1:]
    if "--tolerance" in args:
        at = args.index("--tolerance")
        TOLERANCE = float(args[at + 1])
        del args[at:at + 2]
    got_path, want_path = args[0], args[1]
    got, got_meta = read(got_path)
    want, want_meta = read(want_path)
    ok = True
    if got_meta != want_meta:
        for key in sorted(set(got_meta) | set(want_meta)):
            if got_meta.get(key) != want_meta.get(key):
                print("metadata %s: %r, expected %r"
                      % (key, got_meta.get(key), want_meta.get(key)))
        ok = False
    if sorted(got) != sorted(want):
        print("tensors: %s, expected %s" % (sorted(got), sorted(want)))
        return 1
    worst, worst_name = 0.0, None
    for name in sorted(want):
        gd, gs, gv = got[name]
        wd, ws, wv = want[name]
        if (gd, gs) != (wd, ws):
            print("%s: %s %s, expected %s %s" % (name, gd, gs, wd, ws))
            ok = False
            continue
        if wv is None:
            print("%s: %s is not compared (F32 only)" % (name, wd))
            ok = False
            continue
        scale = max(max(abs(x) for x in wv), 1e-30)
        for i, (g, w) in enumerate(zip(gv, wv)):
            err = abs(g - w) / scale
            if err > worst:
                worst, worst_name = err, name
            if err > TOLERANCE:
                print("%s[%d]: %r, expected %r (%.2g of the tensor's largest "
                      "magnitude)" % (name, i, g, w, err))
                ok = False
                break
    print("%d tensors; worst deviation %.2g of a tensor's largest magnitude%s"
          % (len(want), worst, " (%s)" % worst_name if worst_name else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
