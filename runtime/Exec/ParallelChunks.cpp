// parallelChunks: detached threads started per call, chunks from a shared
// counter, the caller waits for the chunks, not the threads.
#include "runtime/Exec/ParallelChunks.h"
#include "runtime/Exec/CpuBudget.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace {

/// The call's state, shared with its threads: a thread that starts after
/// the call returned finds no chunk left and touches nothing else.
struct Loop {
  const std::function<void(int64_t, int64_t)> *fn;
  int64_t n, chunks;
  std::atomic<int64_t> next{0}, unfinished{0};
  std::mutex mutex;
  std::condition_variable done;
};

void runChunks(Loop &loop) {
  while (true) {
    int64_t chunk = loop.next.fetch_add(1);
    if (chunk >= loop.chunks)
      return;
    // Not done yet: the caller waits for it, so fn is still alive.
    (*loop.fn)(loop.n * chunk / loop.chunks, loop.n * (chunk + 1) / loop.chunks);
    if (loop.unfinished.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(loop.mutex);
      loop.done.notify_all();
    }
  }
}

} // namespace

void llmc::runtime::parallelChunks(
    int64_t n, int64_t minPerThread,
    const std::function<void(int64_t, int64_t)> &fn) {
  // A few chunks per thread: the running threads take over the share of
  // one that does not run.
  constexpr int64_t kChunksPerThread = 4;
  int64_t threads = defaultThreadCount();
  int64_t chunks = std::clamp<int64_t>(n / std::max<int64_t>(1, minPerThread),
                                       1, threads * kChunksPerThread);
  threads = std::min(threads, chunks);
  if (threads <= 1) {
    if (n > 0)
      fn(0, n);
    return;
  }
  auto loop = std::make_shared<Loop>();
  loop->fn = &fn;
  loop->n = n;
  loop->chunks = chunks;
  loop->unfinished = chunks;
  for (int64_t t = 1; t < threads; ++t)
    std::thread([loop] { runChunks(*loop); }).detach();
  runChunks(*loop);
  std::unique_lock<std::mutex> lock(loop->mutex);
  loop->done.wait(lock, [&] { return loop->unfinished.load() == 0; });
}
