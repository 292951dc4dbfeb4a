// Asynchronous signals never reach a thread inside a library GEMM
// (runtime/Cpu/SignalMask.h): the pool's workers and a caller holding
// AsyncSignalsBlocked run f32 GEMMs (oneDNN where it loads, the library
// that a signal corrupts) under a barrage of signals, every product
// checked against a double reference.
#include "runtime/Cpu/SignalMask.h"
#include "runtime/Cpu/Sgemm.h"
#include "runtime/Cpu/ThreadPool.h"

#include "gtest/gtest.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

using namespace llmc;

namespace {

std::atomic<int64_t> delivered{0};
void countSignal(int) { delivered.fetch_add(1, std::memory_order_relaxed); }

bool blocks(int signal) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

/// One product of a shape the tiny GPT's training step runs, checked on
/// sampled entries; false when one is wrong.
bool checkedProduct(cpu::SgemmLibrary library, std::mt19937 &rng) {
  static const int64_t shapes[][3] = {
      {128, 192, 64}, {128, 64, 256}, {64, 256, 128}, {32, 32, 16}};
  std::uniform_int_distribution<int> small(-8, 8);
  const int64_t *shape = shapes[rng() % 4];
  int64_t m = shape[0], n = shape[1], k = shape[2];
  bool transA = rng() % 2, transB = rng() % 2;
  std::vector<float> a(m * k), b(k * n), c(m * n, NAN);
  for (float &x : a)
    x = float(small(rng));
  for (float &x : b)
    x = float(small(rng));
  cpu::sgemm(library, transA, transB, m, n, k, 1.0f, a.data(), transA ? m : k,
             b.data(), transB ? k : n, 0.0f, c.data(), n);
  for (int sample = 0; sample < 16; ++sample) {
    int64_t i = rng() % m, j = rng() % n;
    double sum = 0;
    for (int64_t p = 0; p < k; ++p)
      sum += double(transA ? a[p * m + i] : a[i * k + p]) *
             (transB ? b[j * k + p] : b[p * n + j]);
    if (c[i * n + j] != float(sum)) // small integers: exact
      return false;
  }
  return true;
}

TEST(SignalMask, AsynchronousSignalsOnlyAreBlocked) {
  sigset_t set = cpu::asynchronousSignals();
  for (int signal :
       {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGWINCH})
    EXPECT_EQ(sigismember(&set, signal), 1) << signal;
  for (int signal :
       {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS, SIGPIPE})
    EXPECT_EQ(sigismember(&set, signal), 0) << signal;
  EXPECT_FALSE(blocks(SIGTERM));
  {
    cpu::AsyncSignalsBlocked shield;
    EXPECT_TRUE(blocks(SIGTERM));
    EXPECT_FALSE(blocks(SIGSEGV));
  }
  EXPECT_FALSE(blocks(SIGTERM)); // the previous mask is back
}

TEST(SignalMask, GemmsUnderASignalBarrage) {
  llvm::Expected<const cpu::SgemmSetup &> setup = cpu::sgemmSetup();
  ASSERT_TRUE(bool(setup)) << llvm::toString(setup.takeError());
  cpu::SgemmLibrary library = setup->oneDnnLoaded ? cpu::SgemmLibrary::OneDnn
                                                  : cpu::SgemmLibrary::OpenBlas;
  SCOPED_TRACE(cpu::sgemmLibraryName(library));
  struct sigaction action = {}, replaced;
  action.sa_handler = countSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &action, &replaced), 0);

  std::atomic<int64_t> products{0}, wrong{0};
  std::atomic<int64_t> sent{0};
  {
    runtime::ThreadPool pool(2);
    std::vector<pthread_t> threads(2);
    std::vector<int> workerBlocks(2, -1);
    // Chunks go to whichever thread takes them first: slow ones, until
    // the worker (thread 1) has taken one too.
    for (int tries = 0; tries < 1000 && workerBlocks[1] < 0; ++tries)
      pool.parallelFor(2, [&](int64_t, int64_t, int thread) {
        threads[thread] = pthread_self();
        workerBlocks[thread] = blocks(SIGTERM);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    EXPECT_EQ(workerBlocks[1], 1); // a worker, for its whole life
    EXPECT_EQ(workerBlocks[0], 0); // the caller, outside a shield

    // Every 20 us a signal to each thread that runs products: without the
    // masks, oneDNN corrupts the heap within a second of this.
    std::atomic<bool> stop{false};
    std::thread barrage([&] {
      while (!stop.load()) {
        for (pthread_t thread : threads)
          sent += pthread_kill(thread, SIGUSR1) == 0;
        usleep(20);
      }
    });
    // A second and 2000 signals at least (a loaded machine sleeps longer
    // than 20 us), 60 s at most.
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    auto running = [&] {
      auto elapsed = Clock::now() - start;
      return elapsed < std::chrono::seconds(60) &&
             (elapsed < std::chrono::seconds(1) || sent.load() < 2000);
    };
    while (running()) {
      cpu::AsyncSignalsBlocked shield; // as CpuExecutor::run holds it
      pool.parallelFor(2, [&](int64_t, int64_t, int chunk) {
        std::mt19937 rng(uint32_t(products.load() * 2 + chunk));
        for (int i = 0; i < 4; ++i) {
          wrong += !checkedProduct(library, rng);
          ++products;
        }
      });
    }
    stop = true;
    barrage.join();
  } // the workers end, with the signals pending on them
  sigaction(SIGUSR1, &replaced, nullptr);
  EXPECT_EQ(wrong.load(), 0) << "of " << products.load() << " products";
  EXPECT_GT(products.load(), 100);
  EXPECT_GE(sent.load(), 2000);
  // Signals to the caller arrived between its shields: the barrage was
  // real, and the caller's mask is restored after each.
  EXPECT_GT(delivered.load(), 0);
}

} // namespace
