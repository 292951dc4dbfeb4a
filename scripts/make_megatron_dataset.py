#!/usr/bin/env python3
"""Writes a Megatron-LM / Megatron-DeepSpeed indexed dataset (PREFIX.bin +
PREFIX.idx) from token ids, following the published layout (not Megatron's
code); python3's standard library only. Tests make their fixtures with it.

The .idx, little-endian:
  9 bytes   magic b"MMIDIDX\\x00\\x00"
  u64       version 1
  u8        dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
            6 float64, 7 float32, 8 uint16
  u64       S, the number of sequences
  u64       E, the number of document index entries (documents + 1)
  int32[S]  the size of each sequence, in tokens
  int64[S]  the byte offset of each sequence in the .bin (back to back from 0)
  int64[E]  the document index: document d is sequences [idx[d], idx[d+1]);
            it starts at 0 and ends at S
The .bin holds the tokens of the sequences back to back, in the dtype.

Input, one of:
  --json FILE     a JSON list of documents; a document is a list of ids (one
                  sequence) or a list of lists of ids (several sequences, as
                  Megatron's --split-sentences writes)
  --random N      N random ids below --vocab in documents of --doc-length
                  ids (seeded by --seed)

usage: make_megatron_dataset.py PREFIX (--json FILE | --random N)
           [--dtype uint16] [--vocab 50257] [--doc-length 1000] [--seed 1]
Prints "PREFIX: D documents, S sequences, N tokens (DTYPE)".
(Floating-point dtypes are written too: tests check that llmc refuses them.)
"""

import argparse
import array
import json
import random
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
# dtype name -> (Megatron's code, struct/array format)
DTYPES = {
    "uint8": (1, "B"),
    "int8": (2, "b"),
    "int16": (3, "h"),
    "int32": (4, "i"),
    "int64": (5, "q"),
    "float64": (6, "d"),
    "float32": (7, "f"),
    "uint16": (8, "H"),
}


def little_endian(values):
    """The bytes of an array.array, little-endian on any machine."""
    if sys.byteorder != "little":
        values = array.array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def typed_array(typecode, values):
    """array.array of exactly the width Megatron's dtype has."""
    out = array.array(typecode, values)
    widths = {"B": 1, "b": 1, "h": 2, "H": 2, "i": 4, "q": 8, "f": 4, "d": 8}
    if out.itemsize != widths[typecode]:
        sys.exit(f"make_megatron_dataset: this python's array '{typecode}' is "
                 f"{out.itemsize} bytes, not {widths[typecode]}")
    return out


def documents_from_json(path):
    with open(path) as f:
        documents = json.load(f)
    result = []
    for d, document in enumerate(documents):
        if not isinstance(document, list):
            sys.exit(f"make_megatron_dataset: {path}: document {d} is not a list")
        if document and all(isinstance(s, list) for s in document):
            result.append(document)
        else:
            result.append([document])
    return result


def random_documents(count, vocab, length, seed):
    rng = random.Random(seed)
    documents = []
    while count > 0:
        n = min(length, count)
        documents.append([[rng.randrange(vocab) for _ in range(n)]])
        count -= n
    return documents


def write_dataset(prefix, documents, dtype):
    code, typecode = DTYPES[dtype]
    sizes, pointers, doc_idx = [], [], [0]
    offset = 0
    width = typed_array(typecode, []).itemsize
    with open(prefix + ".bin", "wb") as bin_file:
        for document in documents:
            for sequence in document:
                sizes.append(len(sequence))
                pointers.append(offset)
                bin_file.write(little_endian(typed_array(typecode, sequence)))
                offset += len(sequence) * width
            doc_idx.append(len(sizes))
    with open(prefix + ".idx", "wb") as idx_file:
        idx_file.write(MAGIC)
        idx_file.write(struct.pack("<QBQQ", 1, code, len(sizes), len(doc_idx)))
        idx_file.write(little_endian(typed_array("i", sizes)))
        idx_file.write(little_endian(typed_array("q", pointers)))
        idx_file.write(little_endian(typed_array("q", doc_idx)))
    return len(documents), len(sizes), offset // width


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--json")
    source.add_argument("--random", type=int)
    parser.add_argument("--dtype", default="uint16", choices=sorted(DTYPES))
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--doc-length", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.json:
        documents = documents_from_json(args.json)
    else:
        documents = random_documents(args.random, args.vocab,
                                     args.doc_length, args.seed)
    docs, sequences, tokens = write_dataset(args.prefix, documents, args.dtype)
    print(f"{args.prefix}: {docs} documents, {sequences} sequences, "
          f"{tokens} tokens ({args.dtype})")


if __name__ == "__main__":
    main()
