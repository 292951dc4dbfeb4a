// The thread pool: every element of every loop runs exactly once, in more
// chunks than threads, whether the workers were polling for it (loops back
// to back) or asleep (a gap longer than ThreadPool::kSpin); the caller
// takes chunks too; a worker that is held up (blocked, as a thread the OS
// does not schedule) holds only its own chunk, the others take its share;
// after such a stall the caller runs the same chunks alone for a while.
#include "runtime/Cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

using namespace llmc::runtime;

namespace {

/// Runs a loop of `n` elements on `pool`, counting each element's visits
/// and checking each chunk's thread index; true when every element ran
/// once.
bool everyElementOnce(ThreadPool &pool, int64_t n, int64_t minItems = 1) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::atomic<bool> badChunk{false};
  pool.parallelFor(
      n,
      [&](int64_t begin, int64_t end, int thread) {
        if (thread < 0 || thread >= pool.size() || begin >= end)
          badChunk = true;
        for (int64_t i = begin; i < end; ++i)
          visits[size_t(i)].fetch_add(1);
      },
      minItems);
  for (const std::atomic<int> &v : visits)
    if (v.load() != 1)
      return false;
  return !badChunk.load();
}

TEST(ThreadPoolTest, LoopsBackToBackRunEveryElementOnce) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int loop = 0; loop < 20000; ++loop)
      ASSERT_TRUE(everyElementOnce(pool, 1 + loop % 37)) << "loop " << loop;
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

TEST(ThreadPoolTest, CutsLoopsIntoMoreChunksThanThreads) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.chunksFor(1000), 3 * ThreadPool::kChunksPerThread);
  EXPECT_EQ(pool.chunksFor(5), 5);        // no empty chunk
  EXPECT_EQ(pool.chunksFor(1000, 200), 5); // none under minItems
  EXPECT_EQ(pool.chunksFor(1000, 2000), 1); // the caller alone
  EXPECT_EQ(ThreadPool(1).chunksFor(1000), 1);
  // The chunks a loop ran in: as many as chunksFor says, contiguous,
  // covering [0, n) once.
  std::mutex mutex;
  std::set<std::pair<int64_t, int64_t>> chunks;
  pool.parallelFor(1000, [&](int64_t begin, int64_t end, int) {
    std::lock_guard<std::mutex> lock(mutex);
    chunks.insert({begin, end});
  });
  ASSERT_EQ(int64_t(chunks.size()), pool.chunksFor(1000));
  int64_t next = 0;
  for (auto [begin, end] : chunks) {
    EXPECT_EQ(begin, next);
    next = end;
  }
  EXPECT_EQ(next, 1000);
  for (int64_t minItems : {1, 7, 100, 400})
    EXPECT_TRUE(everyElementOnce(pool, 1000, minItems)) << minItems;
}

TEST(ThreadPoolTest, TheCallerTakesChunks) {
  // Workers that are slow to start or finish leave chunks to the caller
  // (thread 0), which takes them from the same counter.
  ThreadPool pool(2);
  std::atomic<int> byCaller{0};
  for (int loop = 0; loop < 200 && byCaller.load() == 0; ++loop)
    pool.parallelFor(64, [&](int64_t, int64_t, int thread) {
      if (thread == 0)
        byCaller.fetch_add(1);
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  EXPECT_GT(byCaller.load(), 0);
}

TEST(ThreadPoolTest, ABlockedWorkerHoldsOnlyItsOwnChunk) {
  // One worker takes a chunk and blocks in it until the test releases it,
  // as a thread the OS stopped scheduling would: every other chunk of the
  // loop is done meanwhile, by the caller and the other worker. (The
  // caller's chunks are slowed so that the workers wake up in time to take
  // some.)
  constexpr int64_t n = 3 * ThreadPool::kChunksPerThread;
  ThreadPool pool(3);
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;
  std::atomic<int> blockedThread{-1};
  std::atomic<int64_t> items{0};
  std::thread loopRunner([&] {
    pool.parallelFor(n, [&](int64_t begin, int64_t end, int thread) {
      int expected = -1;
      if (thread == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      else if (blockedThread.compare_exchange_strong(expected, thread)) {
        std::unique_lock<std::mutex> lock(mutex);
        released.wait(lock, [&] { return release; });
      }
      items.fetch_add(end - begin);
    });
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (items.load() < n - 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int64_t whileBlocked = items.load();
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  released.notify_all();
  loopRunner.join();
  ASSERT_GE(blockedThread.load(), 1) << "no worker took a chunk";
  EXPECT_EQ(whileBlocked, n - 1);
  EXPECT_EQ(items.load(), n);
}

TEST(ThreadPoolTest, AHeldWorkerLeavesTheRestOfTheLoopToTheOthers) {
  // One worker, in the first chunk it takes, waits until every other
  // item of the loop is done, as a thread that lost its core would: the
  // caller and the other worker take all the remaining chunks, so the wait
  // ends and the loop completes. (With one fixed chunk per thread the held
  // worker would own a third of the items and wait forever: the bounded
  // wait would report it.)
  constexpr int64_t n = 3 * ThreadPool::kChunksPerThread;
  ThreadPool pool(3);
  int heldLoops = 0;
  for (int loop = 0; loop < 20; ++loop) {
    std::atomic<int64_t> done{0};
    std::atomic<bool> timedOut{false};
    std::atomic<int> held{0};
    pool.parallelFor(n, [&](int64_t begin, int64_t end, int thread) {
      if (thread == 0) // slowed, so that the workers take chunks
        std::this_thread::sleep_for(std::chrono::microseconds(300));
      thread_local int heldInLoop = -1;
      if (thread != 0 && heldInLoop != loop && held.fetch_add(1) == 0) {
        heldInLoop = loop;
        auto deadline =
            std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (done.load() < n - (end - begin)) {
          if (std::chrono::steady_clock::now() > deadline) {
            timedOut = true;
            break;
          }
          std::this_thread::yield();
        }
      }
      done.fetch_add(end - begin);
    });
    ASSERT_FALSE(timedOut.load()) << "loop " << loop;
    EXPECT_EQ(done.load(), n);
    heldLoops += held.load() > 0;
  }
  EXPECT_GT(heldLoops, 0) << "no worker ever took a chunk";
}

TEST(ThreadPoolTest, AfterAStallTheCallerRunsTheSameChunksAlone) {
  // A worker that holds its chunk far longer than the caller's chunks take
  // is a stall: the loops right after it run every chunk on the caller,
  // with the same boundaries, in order.
  ThreadPool pool(2);
  bool stalled = false;
  for (int tries = 0; tries < 100 && !stalled; ++tries) {
    std::atomic<bool> workerTook{false};
    pool.parallelFor(8, [&](int64_t, int64_t, int thread) {
      if (thread == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      } else if (!workerTook.exchange(true)) {
        std::this_thread::sleep_for(
            2 * std::chrono::duration_cast<std::chrono::microseconds>(
                    ThreadPool::kStall) +
            std::chrono::milliseconds(2));
      }
    });
    stalled = workerTook.load();
  }
  ASSERT_TRUE(stalled) << "no worker took a chunk";
  std::mutex mutex;
  std::vector<std::tuple<int64_t, int64_t, int>> chunks;
  pool.parallelFor(1000, [&](int64_t begin, int64_t end, int thread) {
    std::lock_guard<std::mutex> lock(mutex);
    chunks.emplace_back(begin, end, thread);
  });
  ASSERT_EQ(int64_t(chunks.size()), pool.chunksFor(1000));
  int64_t next = 0;
  for (auto [begin, end, thread] : chunks) {
    EXPECT_EQ(thread, 0);
    EXPECT_EQ(begin, next); // in order
    next = end;
  }
  EXPECT_EQ(next, 1000);
  // Later, the workers are dealt chunks again.
  std::this_thread::sleep_for(ThreadPool::kAloneAfterStall +
                              std::chrono::milliseconds(5));
  std::atomic<bool> workerRan{false};
  for (int tries = 0; tries < 200 && !workerRan.load(); ++tries)
    pool.parallelFor(8, [&](int64_t, int64_t, int thread) {
      if (thread != 0)
        workerRan = true;
      else
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
  EXPECT_TRUE(workerRan.load());
}

TEST(ThreadPoolTest, ALoopWaitsForItsSlowestChunk) {
  // The caller's chunks are quick, a worker's outlasts the polling window:
  // the caller sleeps and is woken when the worker finishes.
  ThreadPool pool(2);
  std::atomic<int> finished{0};
  pool.parallelFor(8, [&](int64_t, int64_t, int thread) {
    if (thread == 1)
      std::this_thread::sleep_for(5 * ThreadPool::kSpin);
    finished.fetch_add(1);
  });
  EXPECT_EQ(finished.load(), 8);
}

TEST(ThreadPoolTest, DestroyingAPoolWhoseWorkersPollOrSleep) {
  for (int gap : {0, 3}) {
    ThreadPool pool(2);
    ASSERT_TRUE(everyElementOnce(pool, 10));
    std::this_thread::sleep_for(gap * ThreadPool::kSpin);
  } // joins: the workers see stopping whether polling or asleep
}

TEST(ThreadPoolTest, DefaultSizeIsTheProcessCpuBudget) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
  EXPECT_LE(pool.size(), int(std::max(1u, std::thread::hardware_concurrency())));
}

} // namespace
