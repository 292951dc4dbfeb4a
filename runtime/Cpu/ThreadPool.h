// A fixed pool of worker threads for data-parallel loops that no
// descheduled thread can stall. Workers block asynchronous signals
// (runtime/Cpu/SignalMask.h); a caller that runs kernels in its chunks
// blocks them itself (CpuExecutor::run).
//
// A loop is cut into more chunks than threads, and the chunks are dealt
// from one shared atomic counter to whichever thread asks next, the
// calling thread included. A worker the OS has not scheduled (the machine
// is shared with other busy processes, or more threads run than there are
// cores, as under an oversubscribed mpirun) simply takes no chunk: the
// threads that do run take its share, and the loop ends when every chunk
// is done, not when every thread has checked in. Only a chunk already
// started by a thread that is then descheduled is waited for, and chunks
// are small. A worker that wakes after the loop is over finds the counter
// spent (it carries the loop's generation) and touches nothing of it.
//
// Waiting polls first and sleeps after. A worker that finished a loop
// polls for the next one for up to kSpin, yielding the core at each poll
// (where the machine is busy the yield lets the other processes run),
// before it sleeps on a condition variable: a training step is hundreds of
// loops back to back, and waking an idle core through the condition
// variable for each would add up to a visible share of a small step. The
// caller, once no chunk is left to take, waits for the chunks others are
// still running: it polls without yielding for about twice the time its
// own chunks took (those chunks run on other cores and end soon; yielding
// to a busy neighbour would cost a whole time slice), then sleeps until
// the last chunk's thread wakes it (a woken sleeper gets its core back at
// once where a yielding poller would wait its turn).
//
// A chunk already taken cannot be taken back, so a worker that loses its
// core in the middle of one holds the loop up until it runs again: on a
// machine where other processes keep the cores busy, that is a time slice
// at every loop's end. When such a stall happens (a wait far longer than a
// chunk), the caller runs the next loops alone for a short while
// (kAloneAfterStall), the same chunks in the same order, then tries the
// workers again: next to busy neighbours one thread that never waits beats
// several that wait for each other, and quiet, stalls do not happen.
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
  /// How long a worker polls for the next loop, and the most the caller
  /// polls for the workers' chunks, before sleeping.
  static constexpr std::chrono::microseconds kSpin{200};
  /// A wait for other threads' chunks longer than this (and than a few
  /// chunks' time) means one of them lost its core: for kAloneAfterStall
  /// the caller then runs loops alone (ThreadPool.h).
  static constexpr std::chrono::microseconds kStall{500};
  static constexpr std::chrono::milliseconds kAloneAfterStall{20};
  /// A loop is cut into at most this many chunks per thread: enough that
  /// the running threads take over the share of one that is not running,
  /// few enough that dealing a chunk stays a small part of its work.
  static constexpr int kChunksPerThread = 4;

  /// fn(begin, end, thread): runs items [begin, end); `thread` is the
  /// index in [0, size()) of the thread running the chunk (0: the caller),
  /// so per-thread scratch may be indexed by it.
  using LoopBody = std::function<void(int64_t, int64_t, int)>;

  /// `numThreads` <= 0: the CPUs this process may use
  /// (runtime/Exec/CpuBudget.h).
  explicit ThreadPool(int numThreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return numThreads; }

  /// The workers' stacks as (lowest address, bytes); the calling thread's
  /// is not the pool's. Empty where the platform cannot say.
  std::vector<std::pair<const void *, int64_t>> stacks() const;

  /// The number of chunks parallelFor cuts a loop of `n` items into: up
  /// to kChunksPerThread per thread, none smaller than `minItems` items
  /// (a GEMM's panels, which pay a packing per call); 1: the caller runs
  /// it alone. Depends on n, minItems and size() only, so where each
  /// chunk's result does not depend on who runs it, neither does the
  /// loop's.
  int64_t chunksFor(int64_t n, int64_t minItems = 1) const;

  /// Runs fn over [0, n) cut into chunksFor(n, minItems) contiguous,
  /// nearly equal chunks, on the workers and the calling thread, and
  /// returns when all are done. One loop at a time: fn must not call
  /// parallelFor on the same pool.
  void parallelFor(int64_t n, const LoopBody &fn, int64_t minItems = 1);

private:
  void workerLoop(int index);
  /// Takes and runs chunks of loop `generation` until none is left; the
  /// seconds they took (the caller's yardstick for polling).
  double runChunks(uint64_t generation, int thread);
  /// Waits until every chunk is done; whether it had to sleep.
  bool waitForChunks(double ownSeconds, int64_t ownChunks);

  int numThreads;
  std::vector<std::thread> workers;
  // The loop being run: written by the caller before it publishes the
  // loop in `deal` (release), read by a thread only after it took a chunk
  // of it (acquire), which the caller then waits for.
  const LoopBody *task = nullptr;
  int64_t taskSize = 0, taskChunks = 0;
  // The dealing counter: the loop's generation in the high bits, the
  // chunks not yet taken in the low kChunkBits. Taking a chunk is a
  // compare-and-swap that fails once the generation moved on.
  static constexpr int kChunkBits = 24;
  std::atomic<uint64_t> deal{0};
  uint64_t generation = 0;         // the caller's count of loops
  std::atomic<int64_t> unfinished{0}; // chunks of the loop not yet done
  std::atomic<bool> stopping{false};
  // Sleeping: workers on `wake`, the caller on `done`. Each sleeper is
  // counted (or flagged) before it checks its condition under the mutex,
  // and the thread that changes the condition looks at the count after
  // changing it (both sequentially consistent), taking the mutex to notify:
  // a sleeper cannot miss its wake-up, and nobody pays for a notify when
  // nobody sleeps.
  std::mutex mutex;
  std::condition_variable wake, done;
  std::atomic<int> sleepingWorkers{0};
  std::atomic<bool> callerSleeping{false};
  // Until when loops run on the caller alone, after a stall (caller only).
  std::chrono::steady_clock::time_point aloneUntil{};
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_THREADPOOL_H
