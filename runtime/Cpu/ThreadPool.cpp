// The thread pool: chunks dealt from one atomic counter to the workers and
// the caller; waits poll, then sleep (ThreadPool.h).
#include "runtime/Cpu/ThreadPool.h"
#include "runtime/Cpu/SignalMask.h"
#include "runtime/Exec/CpuBudget.h"

#include <algorithm>

#ifdef __linux__
#include <pthread.h>
#endif

using namespace llmc::runtime;

namespace {

using Clock = std::chrono::steady_clock;

/// A hint to the core that this thread is polling (x86's pause).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Polls `ready` for up to ThreadPool::kSpin, yielding the core at each
/// poll; whether it turned true. Alone on the machine the thread runs
/// again at once; where more threads are runnable than there are cores the
/// others run.
template <typename Ready> bool pollYielding(Ready ready) {
  auto start = Clock::now();
  for (int i = 1;; ++i) {
    if (ready())
      return true;
    std::this_thread::yield();
    if (i % 16 == 0 && Clock::now() - start > ThreadPool::kSpin)
      return ready();
  }
}

} // namespace

ThreadPool::ThreadPool(int requested) {
  numThreads = requested > 0 ? requested : defaultThreadCount();
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

int64_t ThreadPool::chunksFor(int64_t n, int64_t minItems) const {
  if (numThreads == 1 || n <= 1)
    return 1;
  int64_t chunks = std::min<int64_t>(n, int64_t(numThreads) * kChunksPerThread);
  chunks = std::min(chunks, n / std::max<int64_t>(1, minItems));
  return std::max<int64_t>(1, chunks);
}

double ThreadPool::runChunks(uint64_t loop, int thread) {
  constexpr uint64_t chunkMask = (uint64_t(1) << kChunkBits) - 1;
  double seconds = 0;
  while (true) {
    uint64_t current = deal.load(std::memory_order_acquire);
    do {
      if ((current >> kChunkBits) != loop || (current & chunkMask) == 0)
        return seconds;
    } while (!deal.compare_exchange_weak(current, current - 1,
                                         std::memory_order_acq_rel,
                                         std::memory_order_acquire));
    // A chunk of this loop is ours and not done: the caller is waiting
    // for it, so the loop's description stands.
    int64_t chunk = taskChunks - int64_t(current & chunkMask);
    int64_t begin = taskSize * chunk / taskChunks;
    int64_t end = taskSize * (chunk + 1) / taskChunks;
    Clock::time_point start = Clock::now();
    (*task)(begin, end, thread);
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    if (unfinished.fetch_sub(1) == 1 && callerSleeping.load()) {
      std::lock_guard<std::mutex> lock(mutex);
      done.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t n, const LoopBody &fn,
                             int64_t minItems) {
  if (n <= 0)
    return;
  int64_t chunks = chunksFor(n, minItems);
  if (chunks == 1) {
    fn(0, n, 0);
    return;
  }
  if (Clock::now() < aloneUntil) {
    // Contended: the same chunks, in order, on this thread.
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      fn(n * chunk / chunks, n * (chunk + 1) / chunks, 0);
    return;
  }
  task = &fn;
  taskSize = n;
  taskChunks = chunks;
  unfinished.store(chunks, std::memory_order_relaxed);
  uint64_t loop = ++generation & ((uint64_t(1) << (64 - kChunkBits)) - 1);
  deal.store(loop << kChunkBits | uint64_t(chunks)); // publishes the loop
  if (sleepingWorkers.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex);
    wake.notify_all();
  }
  Clock::time_point start = Clock::now();
  runChunks(loop, 0);
  double own = std::chrono::duration<double>(Clock::now() - start).count();
  Clock::time_point waitStart = Clock::now();
  bool slept = waitForChunks(own, chunks);
  task = nullptr;
  // A wait far longer than a chunk: a thread that took one lost its core.
  double waited =
      std::chrono::duration<double>(Clock::now() - waitStart).count();
  if (slept && waited > std::max(std::chrono::duration<double>(kStall).count(),
                                 4.0 * own * numThreads / double(chunks)))
    aloneUntil = Clock::now() + kAloneAfterStall;
}

bool ThreadPool::waitForChunks(double ownSeconds, int64_t chunks) {
  auto finished = [&] { return unfinished.load() == 0; };
  if (finished())
    return false;
  // What is left are chunks that other threads took. Running, they end
  // within about a chunk's time: poll that long (the caller's own chunks
  // are the yardstick, twice over for the unevenness of chunks), then
  // sleep, since a thread that took a chunk and lost its core may be away
  // for a whole time slice.
  double budget = std::clamp(2.0 * ownSeconds * numThreads / double(chunks),
                             2e-6,
                             std::chrono::duration<double>(kSpin).count());
  Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(budget));
  for (int i = 1;; ++i) {
    if (finished())
      return false;
    cpuRelax();
    if (i % 64 == 0 && Clock::now() > deadline)
      break;
  }
  std::unique_lock<std::mutex> lock(mutex);
  callerSleeping.store(true);
  done.wait(lock, finished);
  callerSleeping.store(false);
  return true;
}

void ThreadPool::workerLoop(int index) {
  // Workers run kernels and library GEMMs, which an asynchronous signal
  // must never interrupt (runtime/Cpu/SignalMask.h).
  llmc::cpu::AsyncSignalsBlocked shield;
  uint64_t seen = 0;
  while (true) {
    auto ready = [&] {
      return stopping.load(std::memory_order_relaxed) ||
             (deal.load(std::memory_order_acquire) >> kChunkBits) != seen;
    };
    if (!pollYielding(ready)) {
      std::unique_lock<std::mutex> lock(mutex);
      sleepingWorkers.fetch_add(1);
      wake.wait(lock, ready);
      sleepingWorkers.fetch_sub(1);
    }
    if (stopping.load())
      return;
    seen = deal.load(std::memory_order_acquire) >> kChunkBits;
    runChunks(seen, index);
  }
}
