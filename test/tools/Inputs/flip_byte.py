#!/usr/bin/env python3
"""Copies an exported llmc binary with one byte flipped: in the middle of a
payload section (found through the trailer's table), or of the table.

usage: flip_byte.py BINARY SECTION|table OUT
"""
import os
import struct
import sys


def main():
    src, what, out = sys.argv[1:]
    data = bytearray(open(src, "rb").read())
    # Footer: table offset, count, version, table checksum, start, magic.
    table, count, _, _, _, magic = struct.unpack_from("<QIIQQ8s", data,
                                                      len(data) - 40)
    if magic != b"LLMCEXE1":
        sys.exit(f"{src}: no payload trailer")
    if what == "table":
        position = table + 40  # the first entry's offset field
    else:
        for i in range(count):
            name, offset, size, _ = struct.unpack_from("<32sQQQ", data,
                                                       table + 56 * i)
            if name.rstrip(b"\0").decode() == what:
                position = offset + size // 2
                break
        else:
            sys.exit(f"{src}: no section {what}")
    data[position] ^= 0x10
    with open(out, "wb") as f:
        f.write(data)
    os.chmod(out, 0o755)


if __name__ == "__main__":
    main()
