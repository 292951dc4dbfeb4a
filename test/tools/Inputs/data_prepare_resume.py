"""data-prepare-resume.test: runs `llmc data prepare` once uninterrupted and
once killed with SIGKILL after it finished a few shards, reruns the killed
one and prints what the test checks (kept shards untouched, output equal to
the uninterrupted run's, no temporaries, state complete).

usage: data_prepare_resume.py CORPUS WORKDIR (WORKDIR/bpe: the tokenizer)"""
import filecmp
import json
import os
import signal
import subprocess
import sys
import time

corpus_src, work = sys.argv[1], sys.argv[2]

# A corpus of numbered lines: the bundled one's lines, repeated with a
# counter so that no two documents are the same.
lines = [l for l in open(corpus_src, encoding="utf-8").read().splitlines() if l.strip()]
corpus = os.path.join(work, "corpus.txt")
with open(corpus, "w", encoding="utf-8") as f:
    n = 0
    while f.tell() < 12_000_000:
        f.write(f"{n}: {lines[n % len(lines)]}\n")
        n += 1
print(f"corpus: {n} lines, {os.path.getsize(corpus)} bytes")


def command(out):
    return ["llmc", "data", "prepare", corpus, "--input", "lines", "--tokenizer",
            os.path.join(work, "bpe"), "--shard-tokens", "200k", "--threads", "1",
            "-o", out]


def shards(out):
    return sorted(f for f in os.listdir(out) if f.endswith(".tok"))


def state(out):
    try:
        with open(os.path.join(out, "data.prepare.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


full = os.path.join(work, "full")
subprocess.run(command(full) + ["--quiet"], check=True, stdout=subprocess.DEVNULL)
print(f"uninterrupted: {len(shards(full))} shards")

# Killed once the state file records three shards, while the fourth is
# being written.
part = os.path.join(work, "part")
proc = subprocess.Popen(command(part) + ["--quiet"], stdout=subprocess.DEVNULL)
deadline = time.time() + 300
while time.time() < deadline:
    s = state(part)
    if s and len(s["shards"]) >= 3:
        break
    if proc.poll() is not None:
        sys.exit(f"llmc data prepare finished (status {proc.returncode}) before it could be killed")
    time.sleep(0.005)
proc.send_signal(signal.SIGKILL)
proc.wait()
if proc.returncode != -signal.SIGKILL:
    sys.exit(f"expected the run to die of SIGKILL, got status {proc.returncode}")
s = state(part)
kept = [sh["file"] for sh in s["shards"]]
print(f"temporaries at the kill (a shard half-written): "
      f"{sum(1 for f in os.listdir(part) if '.tmp' in f)}")
print(f"killed with SIGKILL after {len(kept)} finished shards; state complete: "
      f"{str(s['complete']).lower()}")
before = {f: (os.stat(os.path.join(part, f)).st_mtime_ns,
              open(os.path.join(part, f), "rb").read()) for f in kept}

rerun = subprocess.run(command(part), check=True, capture_output=True, text=True)
reported = rerun.stdout.count("(kept from an earlier run)")
written = sum(1 for l in rerun.stdout.splitlines() if l.endswith("documents"))
print(f"rerun: {reported} kept shards reported, {written} written")
unchanged = all(os.stat(os.path.join(part, f)).st_mtime_ns == m and
                open(os.path.join(part, f), "rb").read() == b
                for f, (m, b) in before.items())
print(f"kept shards unchanged (bytes and mtime): {'yes' if unchanged and reported == len(kept) else 'no'}")
same = shards(part) == shards(full) and all(
    filecmp.cmp(os.path.join(part, f), os.path.join(full, f), shallow=False)
    for f in shards(full))
print(f"output equals the uninterrupted run's: {'yes' if same else 'no'}")
print(f"temporaries left: {sum(1 for f in os.listdir(part) if '.tmp' in f)}")
print(f"state complete: {str(state(part)['complete']).lower()}")
