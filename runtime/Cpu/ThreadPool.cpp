// The thread pool: workers poll for the next loop, then sleep on a
// condition variable (ThreadPool.h).
#include "runtime/Cpu/ThreadPool.h"
#include "runtime/Cpu/SignalMask.h"

#include <algorithm>

#ifdef __linux__
#include <pthread.h>
#endif

using namespace llmc::runtime;

ThreadPool::ThreadPool(int requested) {
  numThreads = requested > 0
                   ? requested
                   : std::max(1, int(std::thread::hardware_concurrency()));
  for (int i = 1; i < numThreads; ++i)
    workers.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping.store(true);
  }
  wake.notify_all();
  for (std::thread &worker : workers)
    worker.join();
}

std::vector<std::pair<const void *, int64_t>> ThreadPool::stacks() const {
  std::vector<std::pair<const void *, int64_t>> result;
#ifdef __linux__
  for (const std::thread &worker : workers) {
    pthread_attr_t attr;
    if (pthread_getattr_np(const_cast<std::thread &>(worker).native_handle(),
                           &attr))
      continue;
    void *base = nullptr;
    size_t size = 0;
    if (!pthread_attr_getstack(&attr, &base, &size))
      result.push_back({base, int64_t(size)});
    pthread_attr_destroy(&attr);
  }
#endif
  return result;
}

static void chunk(int64_t n, int parts, int index, int64_t &begin,
                  int64_t &end) {
  begin = n * index / parts;
  end = n * (index + 1) / parts;
}

namespace {
/// Polls `ready` for up to ThreadPool::kSpin; whether it turned true.
/// Each poll yields the core: alone on the machine the thread runs on at
/// once, and where more threads are runnable than there are cores
/// (processes side by side) it lets them run. (Polling with pause
/// instructions instead made a loop cost more than sleeping when two such
/// processes shared the cores: the poller kept the core from the thread it
/// waited for.)
template <typename Ready> bool spinUntil(Ready ready) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (ready())
      return true;
    std::this_thread::yield();
    if (i % 16 == 0 &&
        std::chrono::steady_clock::now() - start > ThreadPool::kSpin)
      return ready();
  }
}
} // namespace

void ThreadPool::parallelFor(
    int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) {
  if (n <= 0)
    return;
  if (numThreads == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  task = &fn;
  taskSize = n;
  pending.store(numThreads - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex);
    generation.fetch_add(1, std::memory_order_release);
  }
  wake.notify_all();
  int64_t begin, end;
  chunk(n, numThreads, 0, begin, end);
  if (begin < end)
    fn(begin, end, 0);
  auto finished = [&] {
    return pending.load(std::memory_order_acquire) == 0;
  };
  if (!spinUntil(finished)) {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, finished);
  }
  task = nullptr;
}

void ThreadPool::workerLoop(int index) {
  // Workers run kernels and library GEMMs, which an asynchronous signal
  // must never interrupt (runtime/Cpu/SignalMask.h).
  llmc::cpu::AsyncSignalsBlocked shield;
  uint64_t seen = 0;
  while (true) {
    auto ready = [&] {
      return stopping.load(std::memory_order_relaxed) ||
             generation.load(std::memory_order_acquire) != seen;
    };
    if (!spinUntil(ready)) {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, ready);
    }
    if (stopping.load())
      return;
    seen = generation.load(std::memory_order_acquire);
    const std::function<void(int64_t, int64_t, int)> *fn = task;
    int64_t n = taskSize;
    int64_t begin, end;
    chunk(n, numThreads, index, begin, end);
    if (begin < end)
      (*fn)(begin, end, index);
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex);
      done.notify_one();
    }
  }
}
