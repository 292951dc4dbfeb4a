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
// or mistyped fields 400, unknown path 404, wrong method 405, a body over
// the limit 413, a full queue 503. A client that disconnects is noticed
// within ~50 ms and its slot freed at the next step.
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
  /// Open connections beyond this are answered 503 and closed.
  int64_t maxConnections = 256;
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
