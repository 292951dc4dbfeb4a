#!/usr/bin/env python3
"""Feeds llmc hostile input: every file kind a user hands it and every CLI.

Each case makes its input in WORKDIR, runs one llmc command and expects what
a user is owed for bad input: a non-zero exit by status (never a signal, a
hang or an LLVM crash dump), a message that names the file or the flag at
fault, and no output file left behind, whole or half-written.

usage: hostile.py LLMC SOURCE_ROOT WORKDIR
Prints one line per case and a summary; exits 1 if any case failed.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

LLMC, SRC, WORK = sys.argv[1:4]
TINY = os.path.join(SRC, "examples", "tiny.yaml")
TRAIN = os.path.join(SRC, "examples", "train-tiny.yaml")
CORPUS = os.path.join(SRC, "examples", "corpus", "corpus.txt")


def path(name):
    return os.path.join(WORK, name)


def write(name, data):
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path(name), mode) as f:
        f.write(data)
    return path(name)


def safetensors(header, payload=b""):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + payload


def llmc_bin_header(magic, version, dims):
    ints = [magic, version] + dims
    return struct.pack("<256i", *(ints + [0] * (256 - len(ints))))


def shard_header(magic, version, count):
    ints = [magic, version, count]
    return struct.pack("<256i", *(ints + [0] * (256 - len(ints))))


# Valid files the cases damage, made once.
def prepare():
    os.makedirs(WORK, exist_ok=True)
    shutil.which(LLMC) or sys.exit(f"{LLMC}: not found")
    subprocess.run([LLMC, "compile", TINY, "--batch", "1", "-o",
                    path("good.llmc")], check=True, capture_output=True)
    subprocess.run([LLMC, "run", TRAIN, "--max-steps", "1", "--eval-steps",
                    "0", "--sample-tokens", "0", "--out", path("goodrun")],
                   check=True, capture_output=True)
    subprocess.run([LLMC, "tokenizer", "train", "--vocab-size", "300", "-o",
                    path("bpe"), CORPUS], check=True, capture_output=True)
    os.makedirs(path("adir"), exist_ok=True)


def read(name):
    with open(path(name), "rb") as f:
        return f.read()


def ckpt():
    return os.path.join(path("goodrun"), "checkpoints", "step-000001.ckpt")


def cases():
    """(name, argv, text the message must contain, output that must not
    exist afterwards)."""
    good = read("good.llmc")
    goodckpt = open(ckpt(), "rb").read()
    c = []

    def case(name, argv, needle, output=None):
        c.append((name, argv, needle, output))

    # --- CLIs
    case("unknown subcommand", ["frobnicate"], "frobnicate")
    case("compile: missing input", ["compile", path("nope.mlir"), "-o",
                                    path("o1.llmc")], "nope.mlir", "o1.llmc")
    case("compile: directory as input", ["compile", path("adir"), "-o",
                                         path("o2.llmc")], "adir", "o2.llmc")
    case("compile: directory as output", ["compile", TINY, "-o",
                                          path("adir")], "adir")
    case("compile: batch 0", ["compile", TINY, "--batch", "0"], "batch")
    case("compile: batch not a number", ["compile", TINY, "--batch", "x"],
         "batch")
    case("run: unknown flag", ["run", TRAIN, "--max-stepz", "3"],
         "--max-stepz")
    case("run: flag without value", ["run", TRAIN, "--lr"], "--lr")
    case("run: negative lr", ["run", TRAIN, "--lr", "-1"], "lr")
    case("run: no such config", ["run", path("nope.yaml")], "nope.yaml")
    case("run: config is a directory", ["run", path("adir")], "adir")
    case("run: resume without checkpoints",
         ["run", TRAIN, "--resume", "--out", path("emptyrun")], "--resume")
    case("generate: missing artifact", ["generate", path("nope.llmc")],
         "nope.llmc")
    case("generate: missing weights",
         ["generate", path("good.llmc"), "--weights", path("nope.ckpt")],
         "nope.ckpt")
    case("generate: top-k negative",
         ["generate", path("good.llmc"), "--top-k", "-3"], "top-k")
    case("plan: unknown GPU", ["plan", "gpt2", "--gpu", "a100-81gb"],
         "a100-81gb")
    case("plan: zero nodes", ["plan", "gpt2", "--gpu", "a100-80gb",
                              "--nodes", "0"], "nodes")
    case("tokenizer: vocab below 256",
         ["tokenizer", "train", "--vocab-size", "10", "-o", path("bpe2"),
          CORPUS], "vocab", "bpe2")
    case("tokenizer encode: missing text",
         ["tokenizer", "encode", "--tokenizer", "byte", path("nope.txt"),
          "-o", path("o3.bin")], "nope.txt", "o3.bin")

    # --- MLIR
    case("mlir: zero-length", ["compile", write("empty.mlir", ""), "-o",
                               path("o4.llmc")], "empty.mlir", "o4.llmc")
    case("mlir: binary garbage",
         ["compile", write("garbage.mlir", bytes(range(256)) * 4), "-o",
          path("o5.llmc")], "garbage.mlir", "o5.llmc")
    case("mlir: truncated",
         ["compile", write("trunc.mlir", "module {\n  func.func @forward("),
          "-o", path("o6.llmc")], "trunc.mlir", "o6.llmc")
    case("mlir: no @forward",
         ["compile", write("nofwd.mlir", "module {}\n"), "-o",
          path("o7.llmc")], "nofwd.mlir", "o7.llmc")
    case("mlir: non-UTF-8 identifier",
         ["compile", write("latin1.mlir", b"module { func.func @f\xe9() }\n"),
          "-o", path("o8.llmc")], "latin1.mlir", "o8.llmc")

    # --- model YAML
    case("model yaml: zero-length", ["compile", write("empty.yaml", ""),
                                     "-o", path("o9.llmc")], "empty.yaml",
         "o9.llmc")
    case("model yaml: negative layers",
         ["compile", write("neg.yaml", "n_layer: -2\nn_head: 2\nn_embd: 8\n"
                                       "seq_len: 8\nvocab_size: 16\n"),
          "-o", path("o10.llmc")], "neg.yaml", "o10.llmc")
    case("model yaml: huge width",
         ["compile", write("huge.yaml", "n_layer: 1\nn_head: 1\n"
                                        "n_embd: 99999999999\nseq_len: 8\n"
                                        "vocab_size: 16\n"),
          "-o", path("o11.llmc")], "huge.yaml", "o11.llmc")
    case("model yaml: heads do not divide width",
         ["compile", write("heads.yaml", "n_layer: 1\nn_head: 3\nn_embd: 8\n"
                                         "seq_len: 8\nvocab_size: 16\n"),
          "-o", path("o12.llmc")], "heads.yaml", "o12.llmc")
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 12):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        laughs += f"{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, " \
                  f"*{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    case("model yaml: exponential anchors",
         ["compile", write("laughs.yaml", laughs), "-o", path("o13.llmc")],
         "laughs.yaml", "o13.llmc")
    case("model yaml: binary garbage",
         ["compile", write("bin.yaml", bytes(range(1, 256)) * 2), "-o",
          path("o14.llmc")], "bin.yaml", "o14.llmc")
    case("model yaml: a list, not a mapping",
         ["compile", write("list.yaml", "- 1\n- 2\n"), "-o",
          path("o15.llmc")], "list.yaml", "o15.llmc")

    # --- training YAML
    case("train yaml: unknown key",
         ["run", write("t1.yaml", "model: gpt2\nmax_stpes: 3\n")], "t1.yaml")
    case("train yaml: wrong type",
         ["run", write("t2.yaml", "model: gpt2\nmax_steps: [1, 2]\n")],
         "t2.yaml")
    case("train yaml: data file missing",
         ["run", write("t3.yaml", f"model: {TINY}\nmax_steps: 2\n"
                                  "data: {train: [missing.txt]}\n"),
          "--out", path("r3")], "missing.txt")
    case("train yaml: empty text data",
         ["run", write("t4.yaml", f"model: {TINY}\nmax_steps: 2\n"
                                  "data: {train: [empty.txt]}\n"),
          "--out", path("r4")], "empty.txt")
    case("train yaml: exponential anchors",
         ["run", write("t5.yaml", laughs)], "t5.yaml")
    case("train yaml: tab indentation",
         ["run", write("t6.yaml", "optimizer:\n\tlr: 1\n")], "t6.yaml")

    # --- artifacts
    case("artifact: zero-length",
         ["inspect", write("empty.llmc", b"")], "empty.llmc")
    case("artifact: truncated",
         ["inspect", write("trunc.llmc", good[:len(good) // 2])],
         "trunc.llmc")
    flipped = bytearray(good)
    flipped[len(flipped) // 3] ^= 0x40
    case("artifact: a flipped byte",
         ["inspect", write("flip.llmc", bytes(flipped))], "flip.llmc")
    case("artifact: a text file",
         ["generate", write("text.llmc", "hello\n")], "text.llmc")

    # --- checkpoints
    case("checkpoint: truncated as --weights",
         ["generate", path("good.llmc"), "--weights",
          write("trunc.ckpt", goodckpt[:1000])], "trunc.ckpt")
    case("checkpoint: zero-length as --weights",
         ["generate", path("good.llmc"), "--weights",
          write("empty.ckpt", b"")], "empty.ckpt")
    badmagic = b"XXXX" + goodckpt[4:]
    case("checkpoint: damaged magic as --weights",
         ["generate", path("good.llmc"), "--weights",
          write("magic.ckpt", badmagic)], "magic.ckpt")
    case("checkpoint: truncated as --resume",
         ["run", TRAIN, "--max-steps", "2", "--out", path("r5"),
          "--resume=" + path("trunc.ckpt")], "trunc.ckpt")
    case("checkpoint: convert a garbage file",
         ["convert", write("garbage.ckpt", bytes(range(256)) * 64), "-o",
          path("o16.safetensors")], "garbage.ckpt", "o16.safetensors")

    # --- safetensors
    case("safetensors: header length past the end",
         ["generate", path("good.llmc"), "--weights",
          write("len.safetensors", struct.pack("<Q", 1 << 40) + b"{}")],
         "len.safetensors")
    case("safetensors: header not JSON",
         ["generate", path("good.llmc"), "--weights",
          write("json.safetensors", struct.pack("<Q", 5) + b"{{{{{")],
         "json.safetensors")
    case("safetensors: offsets past the data",
         ["generate", path("good.llmc"), "--weights",
          write("off.safetensors", safetensors(
              {"wte": {"dtype": "F32", "shape": [256, 64],
                       "data_offsets": [0, 65536]}}, b"\0" * 16))],
         "off.safetensors")
    case("safetensors: unknown dtype",
         ["generate", path("good.llmc"), "--weights",
          write("dtype.safetensors", safetensors(
              {"wte": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}},
              b"\0"))], "dtype.safetensors")
    case("safetensors: a tensor of the wrong shape",
         ["generate", path("good.llmc"), "--weights",
          write("shape.safetensors", safetensors(
              {"wte.weight": {"dtype": "F32", "shape": [2, 2],
                              "data_offsets": [0, 16]}}, b"\0" * 16))],
         "shape.safetensors")

    # --- llm.c checkpoints
    case("llm.c: bad magic",
         ["generate", path("good.llmc"), "--weights",
          write("magic.bin", llmc_bin_header(1, 3, [64, 256, 2, 4, 64])
                + b"\0" * 64)], "magic.bin")
    case("llm.c: truncated parameters",
         ["generate", path("good.llmc"), "--weights",
          write("short.bin", llmc_bin_header(20240326, 3,
                                             [64, 256, 2, 4, 64, 256])
                + b"\0" * 64)], "short.bin")

    # --- token shards
    shard = "data: {train: [%s], tokenizer: byte}\n"
    for name, data, needle in [
            ("shard: bad magic", shard_header(1, 1, 4) + b"\0" * 8,
             "magic.tok.bin"),
            ("shard: count past the end", shard_header(20240520, 1, 1000)
             + b"\0" * 8, "count.tok.bin"),
            ("shard: token ids past the vocabulary",
             shard_header(20240520, 1, 4096)
             + struct.pack("<4096H", *([300] * 4096)), "vocab.tok.bin")]:
        f = write(needle, data)
        case(name, ["run", TRAIN, "--train", f, "--val-fraction", "0.1",
                    "--max-steps", "1", "--out",
                    path("r-" + needle)], needle)

    # --- BPE tokenizer files
    os.makedirs(path("badbpe1"), exist_ok=True)
    write("badbpe1/vocab.json", "{not json")
    write("badbpe1/merges.txt", "#version: 0.2\n")
    case("bpe: vocab.json not JSON",
         ["tokenizer", "encode", "--tokenizer", path("badbpe1"), CORPUS,
          "-o", path("o17.bin")], "vocab.json", "o17.bin")
    os.makedirs(path("badbpe2"), exist_ok=True)
    shutil.copy(os.path.join(path("bpe"), "vocab.json"),
                path("badbpe2/vocab.json"))
    write("badbpe2/merges.txt", "#version: 0.2\nzzzq qqqz\n")
    case("bpe: merge of unknown tokens",
         ["tokenizer", "encode", "--tokenizer", path("badbpe2"), CORPUS,
          "-o", path("o18.bin")], "merges.txt", "o18.bin")
    os.makedirs(path("badbpe3"), exist_ok=True)
    case("bpe: directory without files",
         ["generate", path("good.llmc"), "--tokenizer", path("badbpe3")],
         "badbpe3")
    return c


def main():
    prepare()
    failed = 0
    all_cases = cases()
    for name, argv, needle, output in all_cases:
        try:
            r = subprocess.run([LLMC] + argv, capture_output=True, cwd=WORK,
                               timeout=120)
            status, text = r.returncode, (r.stdout + r.stderr).decode(
                "utf-8", "replace")
        except subprocess.TimeoutExpired:
            status, text = None, "(timed out after 120 s)"
        problems = []
        if status is None:
            problems.append("hung")
        elif status < 0:
            problems.append(f"killed by signal {-status}")
        elif status == 0:
            problems.append("exit status 0")
        for crash in ("Stack dump", "LLVM ERROR", "internal error",
                      "Assertion", "PLEASE submit a bug report"):
            if crash in text:
                problems.append(f"'{crash}' in the output")
        if needle not in text:
            problems.append(f"the message does not name '{needle}'")
        if output and os.path.exists(path(output)):
            problems.append(f"'{output}' was left behind")
        last = text.strip().splitlines()[-1] if text.strip() else ""
        if problems:
            failed += 1
            print(f"FAIL {name}: {'; '.join(problems)}\n     $ llmc "
                  f"{' '.join(argv)}\n     {last[:300]}")
        else:
            print(f"ok   {name}: {last[:160]}")
    # Atomic writers that failed must not leave their temporaries.
    for root, _, files in os.walk(WORK):
        for name in files:
            if ".tmp-" in name:
                failed += 1
                print(f"FAIL a temporary file was left: "
                      f"{os.path.join(root, name)}")
    print(f"hostile inputs: {len(all_cases) - failed} of {len(all_cases)} "
          f"handled")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
