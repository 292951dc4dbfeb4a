// The thread pool: workers sleep on a condition variable between loops.
#include "runtime/ThreadPool.h"
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
    stopping = true;
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

void ThreadPool::parallelFor(
    int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) {
  if (n <= 0)
    return;
  if (numThreads == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    task = &fn;
    taskSize = n;
    pending = numThreads - 1;
    ++generation;
  }
  wake.notify_all();
  int64_t begin, end;
  chunk(n, numThreads, 0, begin, end);
  if (begin < end)
    fn(begin, end, 0);
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return pending == 0; });
  task = nullptr;
}

void ThreadPool::workerLoop(int index) {
  // Workers run kernels and library GEMMs, which an asynchronous signal
  // must never interrupt (runtime/Cpu/SignalMask.h).
  llmc::cpu::AsyncSignalsBlocked shield;
  int64_t seen = 0;
  while (true) {
    const std::function<void(int64_t, int64_t, int)> *fn;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping)
        return;
      seen = generation;
      fn = task;
      n = taskSize;
    }
    int64_t begin, end;
    chunk(n, numThreads, index, begin, end);
    if (begin < end)
      (*fn)(begin, end, index);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (--pending == 0)
        done.notify_one();
    }
  }
}
