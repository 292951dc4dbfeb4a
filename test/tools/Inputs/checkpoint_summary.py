"""Prints what an llmc checkpoint holds, for tests that compare checkpoints
across versions (test/tools/previous-version.test): the SHA-256 of its
tensors' names, dtypes, shapes and XXH3-64 hashes (the writer's, of each
tensor's bytes) in file order, and the header's other fields but the
file size (which follows the header's length).

    checkpoint_summary.py CHECKPOINT
"""
import hashlib
import json
import sys


def main():
    data = open(sys.argv[1], "rb").read()
    start = data.index(b'{"format"')
    header, _ = json.JSONDecoder().raw_decode(data[start:].decode("latin-1"))
    tensors = hashlib.sha256()
    for t in header["tensors"]:
        tensors.update(json.dumps([t["name"], t["dtype"], t["shape"],
                                   t["xxh3"]]).encode())
    print(f"tensors: {len(header['tensors'])}, sha256 {tensors.hexdigest()}")
    for key in sorted(header):
        if key not in ("tensors", "file_bytes", "config"):
            print(f"{key}: {json.dumps(header[key], sort_keys=True)}")


if __name__ == "__main__":
    main()
