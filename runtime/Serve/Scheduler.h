// The serving scheduler: requests share the batch rows ("slots") of one
// CachedGenerator, and every decode step feeds each active slot its next
// token, so concurrent requests cost one batched step instead of one each.
//
// One thread owns the generator and calls step() (run() loops it); any
// thread may submit() and read its request's RequestStream. No sockets and
// no JSON here (Server.h, Completions.h): a unit test drives step() itself.
//
// A step is either
//   - a prefill pass, when queued requests were admitted into free slots:
//     @prefill steps over the new prompts, `chunk` tokens a step, a prompt
//     that ends early repeating its last token at its last position (as
//     CachedGenerator::prefill does). Rows still decoding feed their next
//     token at its own position: that writes the cache slot their next
//     decode step writes again before reading it, so nothing they have
//     already seen changes, and their logits are dropped. Idle rows feed
//     token 0 at position 0 (the next occupant's prefill rewrites it).
//   - else a decode step over the active slots (idle rows: 0 at 0).
// A row's numbers never mix with another row's (every kernel works row by
// row), and sampling draws from the request's own seed counted by its own
// token index (runtime::sampleToken), so a request's text does not depend
// on the other requests in the batch.
#ifndef LLMC_RUNTIME_SERVE_SCHEDULER_H
#define LLMC_RUNTIME_SERVE_SCHEDULER_H

#include "runtime/Serve/CachedGenerate.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace llmc::serve {

/// Why a request ended.
enum class FinishReason {
  Length,    // maxTokens drawn
  Stop,      // the end token drawn (not delivered)
  Cancelled, // RequestStream::cancel()
  Failed,    // a step failed, or the scheduler stopped
};

struct GenerationRequest {
  std::vector<int32_t> prompt; // at least one token
  int64_t maxTokens = 16;
  runtime::SamplingOptions sampling;
  /// Ends the request with FinishReason::Stop when drawn.
  std::optional<int32_t> endToken;
};

/// One request's tokens, from the scheduler thread to one reader.
class RequestStream {
public:
  struct Event {
    std::optional<int32_t> token; // a drawn token; none: the request ended
    FinishReason reason = FinishReason::Length;
    std::string error; // FinishReason::Failed: why
  };

  /// The next event, waiting up to `timeout`; none if none came.
  std::optional<Event> next(std::chrono::milliseconds timeout);
  /// Asks the scheduler to drop the request (its reader is gone, or has
  /// all it wants): the slot is free for the next step.
  void cancel() { cancelled = true; }
  bool isCancelled() const { return cancelled; }

private:
  friend class Scheduler;
  void push(Event event);

  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Event> events;
  std::atomic<bool> cancelled{false};
};

/// Counts since the scheduler started, for /health and the benchmark.
struct SchedulerStats {
  int64_t batch = 0, maxContext = 0;
  int64_t active = 0, queued = 0;
  /// The most requests decoding at once.
  int64_t maxActive = 0;
  int64_t prefillPasses = 0, prefillSteps = 0, decodeSteps = 0;
  /// Active rows summed over decode steps: / (decodeSteps * batch) is the
  /// batch occupancy.
  int64_t decodeRows = 0;
  int64_t promptTokens = 0, generatedTokens = 0;
  /// cancelled: by their reader (a client gone, or a stop string found).
  int64_t completed = 0, cancelled = 0, failed = 0, rejected = 0;
};

class Scheduler {
public:
  /// At most `queueLimit` requests wait while every slot is taken; more
  /// are rejected.
  Scheduler(runtime::CachedGenerator &generator, int64_t queueLimit);

  struct Submitted {
    std::shared_ptr<RequestStream> stream; // null when rejected
    enum Rejection { None, Invalid, QueueFull, Stopped } rejection = None;
    std::string message;
  };
  /// Queues `request`. Rejected (with a message) when it does not fit the
  /// context (prompt + maxTokens > maxContext), names a token outside the
  /// vocabulary, the queue is full, or the scheduler stopped.
  Submitted submit(GenerationRequest request);

  /// One prefill pass or decode step (see the file comment), after dropping
  /// cancelled requests and admitting queued ones into free slots. Returns
  /// false when there was nothing to run.
  bool step();
  /// Calls step() until stop(), sleeping while there is nothing to do.
  void run();
  /// Ends run(); queued and active requests end with FinishReason::Failed,
  /// later submissions are rejected.
  void stop();

  SchedulerStats stats() const;

private:
  struct Slot {
    std::shared_ptr<RequestStream> stream;
    GenerationRequest request;
    int64_t drawn = 0;    // tokens delivered so far
    int32_t next = 0;     // the drawn token to feed next
    int32_t position = 0; // where `next` goes
  };
  struct Queued {
    std::shared_ptr<RequestStream> stream;
    GenerationRequest request;
  };

  /// Under the lock: ends cancelled requests, moves queued ones into free
  /// slots; returns the slots filled.
  std::vector<int64_t> admit();
  /// Runs the prefill pass for `fresh` slots; false if a step failed.
  bool prefill(const std::vector<int64_t> &fresh);
  bool decode();
  /// Draws slot `row`'s next token from `logits` [B, V] and delivers it.
  void draw(int64_t row, llvm::ArrayRef<float> logits);
  /// Ends slot `row`'s request with `event` and frees the slot.
  void finish(int64_t row, RequestStream::Event event);
  /// Ends every active request after a failed step.
  void failActive(llvm::Error error);

  runtime::CachedGenerator &generator;
  int64_t queueLimit;
  // Slots are written by the scheduler thread only; `mutex` guards the
  // queue, the stats and which slots are taken (read by submit/stats).
  std::vector<std::optional<Slot>> slots;
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<Queued> queue;
  bool stopped = false;
  SchedulerStats counts;
};

} // namespace llmc::serve

#endif // LLMC_RUNTIME_SERVE_SCHEDULER_H
