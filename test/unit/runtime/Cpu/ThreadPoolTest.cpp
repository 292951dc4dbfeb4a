// The thread pool: every element of every loop runs exactly once, whether
// the workers were polling for it (loops back to back) or asleep (a gap
// longer than ThreadPool::kSpin), and with more or fewer elements than
// threads.
#include "runtime/Cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace llmc::runtime;

namespace {

/// Runs a loop of `n` elements on `pool`, counting each element's visits
/// and checking each chunk's index; true when every element ran once.
bool everyElementOnce(ThreadPool &pool, int64_t n) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::atomic<bool> badChunk{false};
  pool.parallelFor(n, [&](int64_t begin, int64_t end, int chunk) {
    if (chunk < 0 || chunk >= pool.size() || begin >= end)
      badChunk = true;
    for (int64_t i = begin; i < end; ++i)
      visits[size_t(i)].fetch_add(1);
  });
  for (const std::atomic<int> &v : visits)
    if (v.load() != 1)
      return false;
  return !badChunk.load();
}

TEST(ThreadPoolTest, LoopsBackToBackRunEveryElementOnce) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int loop = 0; loop < 20000; ++loop)
      ASSERT_TRUE(everyElementOnce(pool, 1 + loop % 7)) << "loop " << loop;
  }
}

TEST(ThreadPoolTest, LoopsAfterTheWorkersSleptRunEveryElementOnce) {
  ThreadPool pool(2);
  for (int loop = 0; loop < 20; ++loop) {
    // Past the polling window: the workers are asleep on the condition
    // variable and must be woken.
    std::this_thread::sleep_for(3 * ThreadPool::kSpin);
    ASSERT_TRUE(everyElementOnce(pool, 1000)) << "loop " << loop;
  }
}

TEST(ThreadPoolTest, ALoopWaitsForItsSlowestChunk) {
  // The caller's chunk is quick, the worker's outlasts the polling window:
  // the caller sleeps and is woken when the worker finishes.
  ThreadPool pool(2);
  std::atomic<int> finished{0};
  pool.parallelFor(2, [&](int64_t begin, int64_t, int) {
    if (begin == 1)
      std::this_thread::sleep_for(5 * ThreadPool::kSpin);
    finished.fetch_add(1);
  });
  EXPECT_EQ(finished.load(), 2);
}

TEST(ThreadPoolTest, DestroyingAPoolWhoseWorkersPollOrSleep) {
  for (int gap : {0, 3}) {
    ThreadPool pool(2);
    ASSERT_TRUE(everyElementOnce(pool, 10));
    std::this_thread::sleep_for(gap * ThreadPool::kSpin);
  } // joins: the workers see stopping whether polling or asleep
}

} // namespace
