#!/usr/bin/env python3
"""Hostile clients against llmc's completions server (runtime/Serve), stdlib.

  serve_hostile.py clients --port P --header-timeout S --idle-timeout S
                           --per-client N --max-connections N
      hundreds of connections that send nothing, then hundreds that send a
      byte a second, then one address over its cap, each while a normal
      client keeps asking (/health and a completion): every normal request
      must be answered 200; the idle and slow connections must be closed
      (the slow ones with a 408) within their timeout and a few seconds;
      connections over the per-client cap must get a 503 each; a kept-alive
      connection left idle must be closed. The hostile connections come
      from other loopback addresses (127.0.x.y) than the normal client's
      127.0.0.1, as they would from other machines.
  serve_hostile.py timeout --port P --request-timeout S
      against a model whose steps take milliseconds and a limit well below
      a 510-token completion's time: a request past its time limit is
      answered 503 (timeout_error), streamed or not.
  serve_hostile.py limit --port P
      against a server with one slot, a queue of one and two connections at
      most, on that model: a third connection while two run 510-token
      requests is refused with a 503.

Prints one "ok: ..." line per check with the times measured (figures, not
assertions: the bounds checked are generous); exits 1 at the first failure.
"""
import argparse
import http.client
import json
import socket
import sys
import threading
import time

TIMEOUT = 60


class Failure(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failure(message)


def connect(port, source="127.0.0.1"):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((source, 0))
    sock.settimeout(TIMEOUT)
    sock.connect(("127.0.0.1", port))
    return sock


def normal_requests(port):
    """A normal client's /health and completion; their seconds."""
    started = time.monotonic()
    for method, path, body in (
            ("GET", "/health", None),
            ("POST", "/v1/completions",
             {"prompt": "Hello", "max_tokens": 4, "temperature": 0})):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        conn.request(method, path,
                     body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read().decode()
        conn.close()
        expect(response.status == 200,
               f"normal client: {method} {path}: {response.status} {text}")
    return time.monotonic() - started


def closed_by_server(sock, wait):
    """Whether the server closes `sock` within `wait` seconds; what it sent."""
    sock.settimeout(wait)
    received = b""
    deadline = time.monotonic() + wait
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(4096)
            if not chunk:
                return True, received
            received += chunk
    except socket.timeout:
        return False, received
    except (ConnectionResetError, BrokenPipeError):
        return True, received
    return False, received


def hostile_addresses(group, count, per_address):
    return [f"127.0.{group}.{1 + i // per_address}" for i in range(count)]


def check_idle(args):
    count = args.max_connections + 44
    socks = [connect(args.port, a)
             for a in hostile_addresses(1, count, args.per_client // 2)]
    latency = normal_requests(args.port)
    started = time.monotonic()
    wait = args.header_timeout + 10
    closed = 0
    for sock in socks:
        gone, data = closed_by_server(sock, max(0.1, wait - (time.monotonic()
                                                             - started)))
        expect(data == b"", f"idle: a silent connection was sent {data[:80]}")
        closed += gone
        sock.close()
    expect(closed == count,
           f"idle: {count - closed} of {count} silent connections still "
           f"open {wait} s after the header timeout")
    print(f"ok: idle: {count} silent connections (over the limit of "
          f"{args.max_connections}); a normal client answered in "
          f"{latency * 1000:.0f} ms; all closed by the server after "
          f"{time.monotonic() - started:.1f} s")


def check_slow(args):
    count = 200
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
               b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    socks = [connect(args.port, a)
             for a in hostile_addresses(2, count, args.per_client // 2)]
    stop = threading.Event()
    sent = [0]

    def trickle():
        while not stop.is_set() and sent[0] < len(request):
            for sock in socks:
                try:
                    sock.send(request[sent[0]:sent[0] + 1])
                except OSError:
                    pass
            sent[0] += 1
            stop.wait(1.0)

    thread = threading.Thread(target=trickle)
    thread.start()
    latencies = []
    deadline = time.monotonic() + args.header_timeout + 1
    while time.monotonic() < deadline:
        latencies.append(normal_requests(args.port))
    answered = 0
    for sock in socks:
        gone, data = closed_by_server(sock, args.header_timeout + 10)
        expect(gone, "slow: a byte-a-second connection was not closed "
               f"{args.header_timeout + 10} s after its header timeout")
        answered += data.startswith(b"HTTP/1.1 408")
    stop.set()
    thread.join()
    for sock in socks:
        sock.close()
    expect(answered == count,
           f"slow: {count - answered} of {count} slow clients got no 408")
    print(f"ok: slow: {count} byte-a-second clients got 408 after "
          f"{sent[0]} byte(s); {len(latencies)} normal round(s) meanwhile, "
          f"the slowest {max(latencies) * 1000:.0f} ms")


def check_per_client(args):
    held = [connect(args.port, "127.0.3.1") for _ in range(args.per_client)]
    started = time.monotonic()
    over = 100
    refused = 0
    for _ in range(over):
        sock = connect(args.port, "127.0.3.1")
        gone, data = closed_by_server(sock, 10)
        sock.close()
        refused += (gone and data.startswith(b"HTTP/1.1 503") and
                    b"too many open connections from 127.0.3.1" in data)
    elapsed = time.monotonic() - started
    latency = normal_requests(args.port)
    for sock in held:
        sock.close()
    expect(refused == over,
           f"per-client: {over - refused} of {over} connections over the cap "
           f"of {args.per_client} got no 503")
    print(f"ok: per-client: {over} connections over the cap of "
          f"{args.per_client} answered 503 in {elapsed * 1000 / over:.1f} ms "
          f"each; a normal client answered in {latency * 1000:.0f} ms")


def check_keep_alive(args):
    sock = connect(args.port)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int([line.split(b":")[1] for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length")][0])
    while len(body) < length:
        body += sock.recv(4096)
    expect(head.startswith(b"HTTP/1.1 200"), f"keep-alive: {head[:40]}")
    started = time.monotonic()
    gone, extra = closed_by_server(sock, args.idle_timeout + 10)
    sock.close()
    expect(gone and extra == b"", "keep-alive: an idle kept-alive connection "
           f"was still open {args.idle_timeout + 10} s later")
    print(f"ok: keep-alive: an idle connection closed after "
          f"{time.monotonic() - started:.1f} s")


def post(port, body, source="127.0.0.1"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT,
                                      source_address=(source, 0))
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    return response.status, text


LONG = {"prompt": "Hi", "max_tokens": 510, "temperature": 0}


def check_timeout(args):
    long = LONG
    started = time.monotonic()
    status, text = post(args.port, long)
    elapsed = time.monotonic() - started
    expect(status == 503 and '"timeout_error"' in text,
           f"timeout: a request past its limit: {status} {text}")
    status, text = post(args.port, dict(long, stream=True))
    expect(status == 200 and '"error"' in text and "[DONE]" in text and
           "--request-timeout" in text,
           f"timeout: a stream past its limit: {status} {text[-300:]}")
    print(f"ok: timeout: answered 503 timeout_error after {elapsed:.1f} s "
          f"(limit {args.request_timeout} s); a stream ends with an error "
          f"event")


def check_limit(args):
    long = LONG
    # Two connections running requests (one decoding, one queued) fill the
    # limit of two: a third is refused, not left waiting.
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        post(args.port, long))) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    sock = connect(args.port)
    gone, data = closed_by_server(sock, 10)
    sock.close()
    for thread in threads:
        thread.join()
    expect(gone and data.startswith(b"HTTP/1.1 503") and
           b"all running requests" in data,
           f"limit: a connection over the limit while all run: {data[:200]}")
    print("ok: limit: a connection over the limit while all run requests "
          "is refused with 503")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["clients", "timeout", "limit"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--header-timeout", type=float, default=10)
    parser.add_argument("--idle-timeout", type=float, default=30)
    parser.add_argument("--request-timeout", type=float, default=300)
    parser.add_argument("--per-client", type=int, default=64)
    parser.add_argument("--max-connections", type=int, default=256)
    args = parser.parse_args()
    try:
        if args.mode == "clients":
            check_idle(args)
            check_slow(args)
            check_per_client(args)
            check_keep_alive(args)
        elif args.mode == "timeout":
            check_timeout(args)
        else:
            check_limit(args)
    except Failure as failure:
        print(f"FAIL: {failure}")
        sys.exit(1)
    except OSError as error:
        print(f"FAIL: {error!r}")
        sys.exit(1)


if __name__ == "__main__":
    main()
