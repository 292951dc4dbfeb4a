#!/usr/bin/env python3
"""Soak of an exported binary's `serve` (runtime/Serve) under mixed load.

  scripts/soak-server.py --server ./tiny [--duration 300] [--short]
                         [--clients 8] [--max-tokens 16] [-- SERVE FLAGS]

Starts `SERVER serve --port 0` (plus SERVE FLAGS), then for a fixed time
keeps --clients threads busy with a mix of: completions, streamed
completions read to [DONE], streams abandoned after the first event (the
client disconnects), slow clients that send a valid request a byte at a
time, silent connections the server must close, and bad requests
(malformed JSON, wrong types, unknown paths, bytes that are not HTTP, a
body over the limit). The server's resident memory (VmRSS) is sampled
throughout. Fails (exit 1) when a valid request was not answered 200 with
a whole response, a bad one got no 4xx, the server died or did not stop
cleanly on SIGTERM, or its memory grew by more than --rss-growth-mib
between the end of the warm-up (the first fifth of the run) and the end.
Prints the counts, latencies and memory figures. --short: 8 s, with the
server's header and idle timeouts at 1 s so that silent and stalled
connections are closed within the run (what test/tools/soak-server.test
runs); results of long runs go in bench/README.md.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

TIMEOUT = 60


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.latencies = []

    def count(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def fail(self, message):
        with self.lock:
            self.failures.append(message)

    def latency(self, seconds):
        with self.lock:
            self.latencies.append(seconds)


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def post(port, body, raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request("POST", "/v1/completions", body=data,
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    text = response.read()
    conn.close()
    return response.status, text


def completion(port, stats, rng, max_tokens):
    body = {"prompt": rng.choice(["Hello", "Once upon", "The", "a b c"]),
            "max_tokens": rng.randint(1, max_tokens),
            "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 99)}
    started = time.monotonic()
    status, text = post(port, body)
    stats.latency(time.monotonic() - started)
    parsed = json.loads(text) if status == 200 else None
    if status != 200 or not parsed.get("choices"):
        stats.fail(f"completion: {status} {text[:200]!r}")
    stats.count("completion")


def stream(port, stats, rng, max_tokens, abandon):
    body = {"prompt": "Once upon a time", "stream": True,
            "max_tokens": rng.randint(2, max_tokens), "temperature": 0}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        stats.fail(f"stream: {response.status} {response.read()[:200]!r}")
        conn.close()
        return
    if abandon:
        response.read(1)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        stats.count("abandoned stream")
        return
    text = response.read().decode()
    conn.close()
    if not text.rstrip().endswith("data: [DONE]") or '"error"' in text:
        stats.fail(f"stream: no [DONE] or an error: {text[-200:]!r}")
    stats.count("stream")


def slow_client(port, stats):
    """A valid request sent a byte at a time, within the header timeout."""
    request = b"GET /health HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    pause = 0.5 / len(request)
    for i in range(len(request)):
        sock.sendall(request[i:i + 1])
        time.sleep(pause)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    if not data.startswith(b"HTTP/1.1 200"):
        stats.fail(f"slow client: {data[:200]!r}")
    stats.count("slow client")


def silent_connection(port, stats, limit):
    """A connection that sends nothing: the server must close it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=limit)
    try:
        data = sock.recv(4096)
        if data:
            stats.fail(f"silent connection: sent {data[:100]!r}")
    except socket.timeout:
        stats.fail(f"silent connection: still open after {limit} s")
    except ConnectionResetError:
        pass
    sock.close()
    stats.count("silent connection")


BAD = [
    (None, b"{not json"),
    ({"prompt": 7}, None),
    ({"prompt": "x", "max_tokens": "many"}, None),
    ({"prompt": "x", "temperature": -1}, None),
    ({"prompt": "x", "max_tokens": 10 ** 9}, None),
]


def bad_request(port, stats, rng):
    choice = rng.randrange(len(BAD) + 3)
    if choice < len(BAD):
        body, raw = BAD[choice]
        status, text = post(port, body, raw)
    elif choice == len(BAD):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        conn.request("GET", "/no/such/path")
        response = conn.getresponse()
        status, text = response.status, response.read()
        conn.close()
    elif choice == len(BAD) + 1:
        status, text = post(port, None, b"x" * (2 << 20))
    else:
        sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        sock.sendall(bytes(rng.randrange(256) for _ in range(512)) + b"\r\n\r\n")
        data = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
        sock.close()
        match = re.match(rb"HTTP/1\.[01] (\d+)", data)
        status, text = (int(match.group(1)) if match else 0), data
    if not 400 <= status < 500:
        stats.fail(f"bad request {choice}: {status} {text[:200]!r}")
    stats.count("bad request")


def worker(port, stats, seed, deadline, args):
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        kind = rng.random()
        try:
            if kind < 0.35:
                completion(port, stats, rng, args.max_tokens)
            elif kind < 0.6:
                stream(port, stats, rng, args.max_tokens, abandon=False)
            elif kind < 0.7:
                stream(port, stats, rng, args.max_tokens, abandon=True)
            elif kind < 0.78:
                slow_client(port, stats)
            elif kind < 0.82:
                silent_connection(port, stats, args.idle_limit)
            else:
                bad_request(port, stats, rng)
        except (OSError, http.client.HTTPException, ValueError) as error:
            stats.fail(f"{error!r}")


def start_server(args, serve_flags):
    command = [args.server, "serve", "--port", "0"] + serve_flags
    server = subprocess.Popen(command, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    match = re.search(r"serving .* on http://[^:]*:(\d+)", line)
    if not match:
        server.kill()
        sys.exit(f"soak-server: no port line from {' '.join(command)}: "
                 f"{line!r} {server.stderr.read()[-2000:]}")
    return server, int(match.group(1))


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--server", required=True,
                        help="an exported binary (llmc export)")
    parser.add_argument("--duration", type=float, default=300)
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rss-growth-mib", type=float, default=16)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("serve_flags", nargs="*",
                        help="after --: flags of `serve`")
    args = parser.parse_args()
    serve_flags = list(args.serve_flags)
    if args.short:
        args.duration = 8
        serve_flags += ["--header-timeout", "1", "--idle-timeout", "1"]
    # How long a silent connection may stay open: the server's header
    # timeout (its flag, or the default) and some slack.
    header_timeout = 10.0
    for i, flag in enumerate(serve_flags[:-1]):
        if flag == "--header-timeout":
            header_timeout = float(serve_flags[i + 1])
    args.idle_limit = header_timeout + 10
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)

    server, port = start_server(args, serve_flags)
    stats = Stats()
    samples = []
    started = time.monotonic()
    deadline = started + args.duration
    print(f"soak-server: seed {seed}; {args.clients} clients for "
          f"{args.duration:g} s against {os.path.basename(args.server)} "
          f"serve {' '.join(serve_flags)}", flush=True)
    threads = [threading.Thread(target=worker,
                                args=(port, stats, seed + i, deadline, args))
               for i in range(args.clients)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        rss = rss_mib(server.pid)
        if rss is not None:
            samples.append((time.monotonic() - started, rss))
        if server.poll() is not None:
            stats.fail(f"the server exited with status {server.returncode}")
            break
        time.sleep(0.25)
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started

    server.send_signal(signal.SIGTERM)
    try:
        _, err = server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        _, err = server.communicate()
        stats.fail("the server did not stop within 30 s of SIGTERM")
    if server.returncode != 0:
        stats.fail(f"the server exited with status {server.returncode} "
                   f"after SIGTERM: {err[-1000:]}")

    counts = ", ".join(f"{n} {kind}(s)" for kind, n in
                       sorted(stats.counts.items()))
    print(f"soak-server: {sum(stats.counts.values())} requests in "
          f"{elapsed:.1f} s: {counts}")
    if stats.latencies:
        print(f"soak-server: completion latency p50 "
              f"{percentile(stats.latencies, 0.5) * 1000:.0f} ms, p99 "
              f"{percentile(stats.latencies, 0.99) * 1000:.0f} ms, max "
              f"{max(stats.latencies) * 1000:.0f} ms")
    warm = [rss for at, rss in samples if at >= args.duration / 5]
    growth = 0.0
    if warm:
        settled = statistics.median(warm[:max(1, len(warm) // 10)])
        final = statistics.median(warm[-max(1, len(warm) // 10):])
        growth = final - settled
        print(f"soak-server: server RSS {samples[0][1]:.1f} MiB at start, "
              f"{settled:.1f} MiB after warm-up, {final:.1f} MiB at the end "
              f"(growth {growth:+.1f} MiB, peak "
              f"{max(rss for _, rss in samples):.1f} MiB)")
    for line in err.splitlines()[-2:]:
        print(f"soak-server: server: {line}")
    if growth > args.rss_growth_mib:
        stats.fail(f"the server's RSS grew by {growth:.1f} MiB after the "
                   f"warm-up (limit {args.rss_growth_mib} MiB)")
    if stats.failures:
        for failure in stats.failures[:20]:
            print(f"soak-server: FAIL: {failure}")
        print(f"soak-server: FAILED: {len(stats.failures)} failure(s); "
              f"replay with --seed {seed}")
        sys.exit(1)
    print("soak-server: ok: every valid request answered, every bad one 4xx, "
          "memory flat")


if __name__ == "__main__":
    main()
