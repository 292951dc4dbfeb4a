// A fixed pool of worker threads for data-parallel loops: the calling thread
// takes part, so a pool of N threads runs N chunks at once. Workers block
// asynchronous signals (runtime/Cpu/SignalMask.h); a caller that runs
// kernels in its chunk blocks them itself (CpuExecutor::run).
//
// Handing out a loop and waiting for it poll first and sleep after: a
// worker that finished a loop polls for the next one for up to kSpin
// (yielding the core at each poll) before it sleeps on a condition
// variable, and the caller polls for the workers' chunks as long before it
// sleeps. A training step is hundreds of loops back to back (kernels, GEMM
// panels); woken through the condition variable alone, each would pay the
// wake-up of an idle core, which polling avoids and which adds up to a
// visible share of a small step. Between steps the workers sleep.
#ifndef LLMC_RUNTIME_THREADPOOL_H
#define LLMC_RUNTIME_THREADPOOL_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace llmc::runtime {

class ThreadPool {
public:
  /// How long a worker polls for the next loop, and the caller for the
  /// workers, before sleeping.
  static constexpr std::chrono::microseconds kSpin{200};

  /// `numThreads` <= 0: one per hardware thread.
  explicit ThreadPool(int numThreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return numThreads; }

  /// The workers' stacks as (lowest address, bytes); the calling thread's
  /// is not the pool's. Empty where the platform cannot say.
  std::vector<std::pair<const void *, int64_t>> stacks() const;

  /// Splits [0, n) into at most size() contiguous, nearly equal chunks and
  /// runs fn(begin, end, chunkIndex) on them concurrently; returns when all
  /// are done.
  void parallelFor(int64_t n,
                   const std::function<void(int64_t, int64_t, int)> &fn);

private:
  void workerLoop(int index);

  int numThreads;
  std::vector<std::thread> workers;
  // The loop being run: written before `generation` is advanced (release),
  // read by workers after they see it advance (acquire).
  const std::function<void(int64_t, int64_t, int)> *task = nullptr;
  int64_t taskSize = 0;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0}; // workers whose chunk of the loop is not done
  std::atomic<bool> stopping{false};
  // Sleeping: `generation` is advanced, and the last worker's `done` is
  // notified, under the mutex, so a sleeper that checked them under it
  // cannot miss the change.
  std::mutex mutex;
  std::condition_variable wake, done;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_THREADPOOL_H
