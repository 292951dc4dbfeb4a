// parallelChunks: std::threads started and joined per call.
#include "runtime/Exec/ParallelChunks.h"

#include <algorithm>
#include <thread>
#include <vector>

void llmc::runtime::parallelChunks(
    int64_t n, int64_t minPerThread,
    const std::function<void(int64_t, int64_t)> &fn) {
  int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  threads = std::clamp<int64_t>(n / std::max<int64_t>(1, minPerThread), 1,
                                threads);
  std::vector<std::thread> started;
  for (int64_t t = 1; t < threads; ++t)
    started.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
  fn(0, n / threads);
  for (std::thread &thread : started)
    thread.join();
}
