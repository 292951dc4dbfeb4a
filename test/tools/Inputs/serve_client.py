#!/usr/bin/env python3
"""An HTTP client of llmc's completions server (runtime/Serve), stdlib only.

  serve_client.py check --port P [--context N]
      the API end to end: health, models, a completion with and without
      streaming (SSE framing, [DONE]), 8 concurrent requests (each gives the
      text it gives alone; the server batched them), stop strings, 4xx
      errors with JSON bodies. Prints one
      "ok: ..." line per check; exits 1 at the first failure.
  serve_client.py busy --port P [--context N]
      against a server with one slot, no queue and a model whose steps take
      milliseconds: a request while another runs gets 503; a client that
      leaves mid-stream frees the slot (its request is cancelled) and the
      next request is served.
  serve_client.py bench --port P [--requests 8] [--max-tokens 64]
      N concurrent streaming requests: generated tokens/s, time to the first
      token, and the server's batch occupancy (/health) over the run.
"""
import argparse
import http.client
import json
import socket
import sys
import threading
import time

TIMEOUT = 120


class Failure(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failure(message)


def request(port, method, path, body=None, raw=None):
    """(status, headers, parsed JSON or text) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    data = raw if raw is not None else (
        json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data,
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    text = response.read().decode("utf-8")
    conn.close()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return response.status, response.headers, parsed


def complete(port, body):
    status, _, parsed = request(port, "POST", "/v1/completions", body)
    expect(status == 200, f"completion {body}: status {status}: {parsed}")
    return parsed


def stream(port, body, events=None):
    """The text of a streaming completion, its last chunk, after checking
    the SSE framing: 'data: JSON' events each ended by a blank line, the
    last one 'data: [DONE]'."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    conn.request("POST", "/v1/completions",
                 body=json.dumps(dict(body, stream=True)))
    response = conn.getresponse()
    expect(response.status == 200, f"stream: status {response.status}")
    kind = response.getheader("Content-Type")
    expect(kind == "text/event-stream", f"stream: Content-Type {kind}")
    text, last, done = "", None, False
    while True:
        line = response.readline().decode("utf-8")
        if not line:
            break
        expect(line.startswith("data: ") and line.endswith("\n"),
               f"stream: not an SSE data line: {line!r}")
        blank = response.readline().decode("utf-8")
        expect(blank == "\n", f"stream: no blank line after an event: "
               f"{blank!r}")
        payload = line[len("data: "):-1]
        if payload == "[DONE]":
            done = True
            continue
        expect(not done, "stream: an event after [DONE]")
        chunk = json.loads(payload)
        expect("error" not in chunk, f"stream: error event {chunk}")
        expect(chunk["object"] == "text_completion", f"stream: {chunk}")
        if events is not None:
            events.append(chunk)
        text += chunk["choices"][0]["text"]
        last = chunk
    conn.close()
    expect(done, "stream: no 'data: [DONE]' at the end")
    expect(last is not None and last["choices"][0]["finish_reason"]
           in ("length", "stop"), f"stream: last chunk {last}")
    return text, last


def health(port):
    status, _, parsed = request(port, "GET", "/health")
    expect(status == 200 and parsed["status"] == "ok", f"health: {parsed}")
    return parsed


def expect_error(port, method, path, status, body=None, raw=None,
                 what=""):
    got, _, parsed = request(port, method, path, body, raw)
    expect(got == status, f"{what}: status {got} (expected {status}): "
           f"{parsed}")
    expect(isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)
           and isinstance(parsed["error"].get("message"), str)
           and isinstance(parsed["error"].get("type"), str),
           f"{what}: not a JSON error body: {parsed!r}")
    return parsed["error"]


def run_check(args):
    port, context = args.port, args.context
    info = health(port)
    batch = info["batch"]
    expect(info["max_context"] == context, f"health: {info}")
    print(f"ok: health: batch {batch}, context {context}")
    status, _, models = request(port, "GET", "/v1/models")
    expect(status == 200 and models["object"] == "list"
           and models["data"][0]["object"] == "model", f"models: {models}")
    print(f"ok: models: {models['data'][0]['id']}")

    # One completion, whole and streamed: the same greedy text.
    prompt = "The quick brown fox"
    body = {"prompt": prompt, "max_tokens": 20, "temperature": 0}
    whole = complete(port, body)
    expect(whole["object"] == "text_completion"
           and whole["id"].startswith("cmpl-")
           and isinstance(whole["created"], int), f"completion: {whole}")
    choice = whole["choices"][0]
    expect(choice["index"] == 0 and choice["finish_reason"] == "length",
           f"completion: {whole}")
    usage = whole["usage"]
    expect(usage == {"prompt_tokens": len(prompt), "completion_tokens": 20,
                     "total_tokens": len(prompt) + 20},
           f"completion usage: {usage}")
    print("ok: completion: 20 tokens, finish_reason length, usage "
          f"{usage['prompt_tokens']}+{usage['completion_tokens']}")
    events = []
    text, last = stream(port, body, events)
    expect(text == choice["text"],
           f"stream: {text!r} differs from the whole response "
           f"{choice['text']!r}")
    expect(last["usage"]["completion_tokens"] == 20, f"stream: {last}")
    print(f"ok: stream: {len(events)} events then [DONE], the same text")

    # The same sampled request twice: the seed fixes the text.
    sampled = {"prompt": "Once upon", "max_tokens": 24, "temperature": 0.8,
               "top_k": 40, "seed": 7}
    first = complete(port, sampled)["choices"][0]["text"]
    expect(complete(port, sampled)["choices"][0]["text"] == first,
           "seed: two runs differ")
    print("ok: seed: the same text twice")

    # Concurrent requests, greedy and seeded, whole and streamed, some
    # joining while others decode: each gives its text alone.
    requests = []
    for i in range(8):
        # Prompts of 11 to 25 tokens: one or two prefill chunks of 16.
        r = {"prompt": "request %d: " % i + "ab" * i,
             "max_tokens": 20 + 2 * i}
        if i % 2:
            r.update(temperature=0.9, top_k=0 if i % 4 == 1 else 20,
                     seed=100 + i)
        else:
            r.update(temperature=0)
        requests.append((r, i % 3 == 0))
    alone = []
    for r, streamed in requests:
        alone.append(stream(port, r)[0] if streamed else
                     complete(port, r)["choices"][0]["text"])
    before = health(port)
    results = [None] * len(requests)
    errors = []
    start = threading.Barrier(len(requests))

    def worker(i):
        r, streamed = requests[i]
        try:
            start.wait()
            if i >= 6:
                time.sleep(0.05)  # join while the others decode
            results[i] = (stream(port, r)[0] if streamed else
                          complete(port, r)["choices"][0]["text"])
        except Exception as e:  # reported below
            errors.append(f"request {i}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,))
               for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors, f"concurrent: {errors}")
    for i, (got, want) in enumerate(zip(results, alone)):
        expect(got == want, f"concurrent: request {i} ({requests[i][0]}) "
               f"gave {got!r} among others, {want!r} alone")
    after = health(port)
    steps = after["steps"]["decode"] - before["steps"]["decode"]
    rows = after["steps"]["decode_rows"] - before["steps"]["decode_rows"]
    expect(after["max_active"] >= 2 and rows > steps,
           f"concurrent: no batching: {after}")
    print(f"ok: concurrent: 8 requests as alone (greedy and seeded); "
          f"decode steps {steps} fed {rows} rows; at most "
          f"{after['max_active']} at once")

    # A stop string ends the text before it.
    reference = choice["text"]
    stop_at = next((i for i, c in enumerate(reference)
                    if i > 0 and c.isascii() and c.isprintable()), None)
    expect(stop_at is not None, f"stop: no ASCII character in {reference!r}")
    stop = reference[stop_at]
    cut = complete(port, dict(body, stop=[stop, "\u2603"]))
    expected = reference[:reference.index(stop)]
    expect(cut["choices"][0]["text"] == expected
           and cut["choices"][0]["finish_reason"] == "stop",
           f"stop {stop!r}: {cut} (expected {expected!r})")
    text, last = stream(port, dict(body, stop=stop))
    expect(text == expected and last["choices"][0]["finish_reason"] == "stop",
           f"stop {stop!r} streamed: {text!r}")
    print("ok: stop: whole and streamed end before the stop string")

    # Errors: a JSON body with a 4xx status, never a crash.
    cases = [
        ("malformed JSON", {"raw": b'{"prompt": "x",'}, 400),
        ("not an object", {"raw": b'["prompt"]'}, 400),
        ("no prompt", {"body": {"max_tokens": 3}}, 400),
        ("prompt type", {"body": {"prompt": 5}}, 400),
        ("max_tokens type", {"body": {"prompt": "x", "max_tokens": "5"}}, 400),
        ("max_tokens < 0", {"body": {"prompt": "x", "max_tokens": -1}}, 400),
        ("temperature type", {"body": {"prompt": "x", "temperature": "hot"}},
         400),
        ("temperature < 0", {"body": {"prompt": "x", "temperature": -1}}, 400),
        ("top_k type", {"body": {"prompt": "x", "top_k": 1.5}}, 400),
        ("seed type", {"body": {"prompt": "x", "seed": "s"}}, 400),
        ("stream type", {"body": {"prompt": "x", "stream": "yes"}}, 400),
        ("stop type", {"body": {"prompt": "x", "stop": 5}}, 400),
        ("invalid UTF-8", {"raw": b'{"prompt": "\xff"}'}, 400),
        ("max_tokens over the limit",
         {"body": {"prompt": "x", "max_tokens": context}}, 400),
        ("prompt too long",
         {"body": {"prompt": "y" * context, "max_tokens": 1}}, 400),
        ("prompt + max_tokens too long",
         {"body": {"prompt": "y" * (context // 2),
                   "max_tokens": context // 2 + 1}}, 400),
        ("oversize body", {"raw": b'{"prompt": "' + b"z" * 10000 + b'"}'},
         413),
    ]
    for what, kwargs, status in cases:
        expect_error(port, "POST", "/v1/completions", status, what=what,
                     **kwargs)
    expect_error(port, "GET", "/v1/nothing", 404, what="unknown path")
    expect_error(port, "GET", "/v1/completions", 405, what="GET completions")
    expect_error(port, "POST", "/health", 405, what="POST health")
    # Not HTTP at all: a 400, and the server goes on.
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(b"NOT HTTP\r\n\r\n")
        reply = s.recv(4096).decode("utf-8", "replace")
        expect(reply.startswith("HTTP/1.1 400"), f"garbage: {reply!r}")
    print(f"ok: errors: {len(cases) + 4} bad requests answered 4xx with a "
          "JSON error")

    return 0


def run_busy(args):
    """One slot, no queue, a model slow enough that a long request is still
    running when the client acts (a step takes milliseconds)."""
    port, context = args.port, args.context
    expect(health(port)["batch"] == 1, "busy: expects a batch of 1")
    # A long streamed request holds the slot; the client reads its first
    # event over a raw socket.
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    payload = json.dumps({"prompt": "a", "max_tokens": context - 1,
                          "temperature": 0, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: "
              + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    received = b""
    while b"data: " not in received:
        more = s.recv(4096)
        expect(more, "busy: the stream ended before its first event")
        received += more
    # Another request now: no slot, no room to wait.
    error = expect_error(port, "POST", "/v1/completions", 503,
                         body={"prompt": "b", "max_tokens": 2},
                         what="a second request")
    expect(error["type"] == "overloaded_error", f"busy: {error}")
    print("ok: busy: 503 with a JSON error while the slot is taken")
    # The client leaves mid-stream: the slot frees, the server goes on.
    before = health(port)
    expect(before["active"] == 1, f"busy: the long request ended: {before}")
    s.close()
    deadline = time.time() + 10
    while True:
        now = health(port)
        if now["active"] == 0:
            break
        expect(time.time() < deadline,
               f"disconnect: the slot was not freed: {now}")
        time.sleep(0.02)
    expect(now["requests"]["cancelled"] == before["requests"]["cancelled"] + 1
           and now["tokens"]["generated"] < context - 1,
           f"disconnect: the request was not cancelled: {now}")
    whole = complete(port, {"prompt": "b", "max_tokens": 2})
    expect(whole["usage"]["completion_tokens"] == 2, f"after: {whole}")
    print(f"ok: disconnect: the slot was freed after "
          f"{now['tokens']['generated'] - before['tokens']['generated']} "
          "more token(s); the next request is served")
    return 0


def run_bench(args):
    port, n = args.port, args.requests
    before = health(port)
    first, counts = [None] * n, [0] * n
    start = threading.Barrier(n + 1)

    def worker(i):
        start.wait()
        began = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "Once upon a time %d" % i,
             "max_tokens": args.max_tokens, "temperature": 0.8,
             "top_k": 40, "seed": i, "stream": True}))
        response = conn.getresponse()
        for line in response:
            if not line.startswith(b"data: {"):
                continue
            if first[i] is None:
                first[i] = time.perf_counter() - began
            chunk = json.loads(line[len(b"data: "):])
            if "usage" in chunk:
                counts[i] = chunk["usage"]["completion_tokens"]
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - began
    after = health(port)
    steps = after["steps"]["decode"] - before["steps"]["decode"]
    rows = after["steps"]["decode_rows"] - before["steps"]["decode_rows"]
    tokens = sum(counts)
    expect(tokens == n * args.max_tokens, f"bench: {counts}")
    print(f"bench: {n} concurrent request(s) x {args.max_tokens} tokens: "
          f"{tokens / seconds:.1f} tokens/s ({seconds:.2f} s), first token "
          f"after {min(first):.3f}-{max(first):.3f} s; {steps} decode steps, "
          f"batch occupancy {rows / max(steps, 1) / after['batch'] * 100:.1f}% "
          f"({rows / max(steps, 1):.2f} of {after['batch']} rows)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["check", "busy", "bench"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    run = {"check": run_check, "busy": run_busy,
           "bench": run_bench}[args.mode]
    try:
        return run(args)
    except Failure as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
