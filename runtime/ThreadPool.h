// A fixed pool of worker threads for data-parallel loops: the calling thread
// takes part, so a pool of N threads runs N chunks at once. Workers block
// asynchronous signals (runtime/Cpu/SignalMask.h); a caller that runs
// kernels in its chunk blocks them itself (CpuExecutor::run).
#ifndef LLMC_RUNTIME_THREADPOOL_H
#define LLMC_RUNTIME_THREADPOOL_H

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
  std::mutex mutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t, int64_t, int)> *task = nullptr;
  int64_t taskSize = 0;
  int64_t generation = 0;
  int pending = 0;
  bool stopping = false;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_THREADPOOL_H
