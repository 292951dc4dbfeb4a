// `serve`: an OpenAI-style HTTP server over a CachedGenerator, what an
// exported model binary runs for `./NAME serve`.
//
//   POST /v1/completions  {prompt, max_tokens, temperature, top_k, seed,
//                          stream, stop}: a text_completion, or with
//                          "stream": true server-sent events, one chunk per
//                          token that adds text, then "data: [DONE]"
//   GET  /v1/models       the one model
//   GET  /health          status and the scheduler's counts (batch
//                         occupancy, the most requests decoding at once)
//
// Requests are batched into the decode step by a Scheduler (Scheduler.h)
// whose thread alone runs the generator; each connection has a thread that
// reads its request, submits it and writes the tokens back. Errors are
// JSON ({"error": {"message", "type"}}) with a 4xx/5xx status: malformed
// or mistyped fields 400, unknown path 404, wrong method 405, a request
// that does not arrive in time 408, a body over the limit 413, a full
// queue, too many connections or a request over its time 503. A client
// that disconnects is noticed within ~50 ms and its slot freed at the next
// step.
//
// Hostile clients: every wait on a client has a deadline (a request's
// header, the body, a keep-alive connection's next request, a write the
// client does not read), a request has a time limit, and each address has
// a connection cap. At the connection limit a new connection takes the
// place of the one that has waited longest for a request (idle, or still
// sending its header or body), so connections that send nothing or a byte
// a second cannot lock others out; only when every connection is running a
// request is a new one refused. Refusals are written by the accept loop
// without blocking (the lingering close runs on its event loop).
#ifndef LLMC_RUNTIME_SERVE_SERVER_H
#define LLMC_RUNTIME_SERVE_SERVER_H

#include "runtime/Serve/CachedGenerate.h"
#include "runtime/Serve/TextCodec.h"

#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <string>

namespace llmc::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  /// 0: an ephemeral port. The port bound is printed on stdout:
  /// "llmc: serving MODEL on http://HOST:PORT ...".
  uint16_t port = 8080;
  /// The "model" of responses and /v1/models.
  std::string modelName = "llmc";
  /// Requests that may wait while every slot is busy; more get 503.
  int64_t queueLimit = 64;
  /// Larger request bodies get 413.
  uint64_t maxBodyBytes = 1 << 20;
  /// Open connections: at the limit, a new one closes the connection that
  /// has waited longest for a request; if all are running requests, it is
  /// answered 503 and closed.
  int64_t maxConnections = 256;
  /// Open connections from one client address (0: no cap); more are
  /// answered 503 and closed. Behind a proxy every client has its address.
  int64_t maxConnectionsPerClient = 64;
  /// Seconds a request's header may take to arrive whole, from its first
  /// byte (for a connection's first request, from the connection); a
  /// client that runs past it gets 408 and the connection closes.
  double headerTimeoutSeconds = 10;
  /// Seconds a kept-alive connection may wait for its next request, and a
  /// write may wait for a client that does not read; then it closes.
  double idleTimeoutSeconds = 30;
  /// Seconds a request may take from its header to its response's end
  /// (body, queue, generation, writing); past it, the completion is
  /// cancelled and answered 503 (a stream ends with an error event).
  double requestTimeoutSeconds = 300;
  /// SIGINT and SIGTERM stop the server cleanly (requests in flight end
  /// with an error, connections close, serve() returns).
  bool handleSignals = true;
  /// Set by the caller (from any thread) to stop the server the same way.
  std::atomic<bool> *stop = nullptr;
};

/// Serves `generator` until stopped. `tokenizer` must fit the model's
/// vocabulary. Errors: the address cannot be bound, the tokenizer does not
/// fit. Summary counts go to stderr when it stops.
llvm::Error serve(runtime::CachedGenerator &generator,
                  const TextCodec &tokenizer,
                  const ServeOptions &options);

} // namespace llmc::serve

#endif // LLMC_RUNTIME_SERVE_SERVER_H
