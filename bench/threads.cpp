// bench-threads: where the thread pool starts to beat one thread, the
// figures the CPU executor's serial thresholds (kSerialElements,
// kSerialFlops in runtime/Cpu/CpuExecutor.cpp) were chosen from.
//
//   bench-threads [--bench-threads N] [--reps R]
//
// For loops of growing size, the median of R timings of the loop on the
// calling thread alone and on a ThreadPool of N threads (default: the
// CPUs this process may use), and their ratio: an elementwise loop like a
// fused kernel's (y = a x + y, then a tanh: elements), and f32 BLAS
// products split by rows as the executor splits them (square-ish m x n x
// k: 2 m n k flops). The first size where the pool is faster is printed
// per kind. Run it quiet and next to busy processes
// (scripts/soak-cpu.sh --bench does both).
#include "bench/Machine.h"
#include "bench/Options.h"
#include "runtime/Cpu/Sgemm.h"
#include "runtime/Cpu/ThreadPool.h"
#include "runtime/Exec/CpuBudget.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

using namespace llmc;

namespace {

llvm::cl::opt<int> numThreads("bench-threads",
                              llvm::cl::cat(bench::benchOptions()),
                              llvm::cl::desc("Pool threads (default: the "
                                             "CPUs this process may use)"),
                              llvm::cl::init(0));
llvm::cl::opt<int> reps("reps", llvm::cl::cat(bench::benchOptions()),
                        llvm::cl::desc("Timings per size (default 201)"),
                        llvm::cl::init(201));

/// The median seconds of `reps` calls of fn().
template <typename Fn> double median(Fn &&fn) {
  std::vector<double> times;
  for (int i = 0; i < std::max(1, int(reps)); ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

/// Prints one row; whether the pool was faster.
bool row(int64_t size, const char *unit, double serial, double pooled) {
  llvm::outs() << llvm::format("%12lld %-8s %10.2f us %10.2f us %7.2fx\n",
                               (long long)size, unit, serial * 1e6,
                               pooled * 1e6, serial / pooled);
  return pooled < serial;
}

void elementwise(runtime::ThreadPool &pool) {
  llvm::outs() << "elementwise loop (y = tanh(a x + y)), elements:\n";
  int64_t crossover = 0;
  for (int64_t n = 1024; n <= (int64_t(1) << 22); n *= 2) {
    std::vector<float> x(n, 0.5f), y(n, 0.25f);
    auto body = [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i)
        y[i] = std::tanh(0.5f * x[i] + y[i] * 0.5f);
    };
    double serial = median([&] { body(0, n, 0); });
    double pooled = median([&] { pool.parallelFor(n, body); });
    if (row(n, "elements", serial, pooled) && !crossover)
      crossover = n;
  }
  llvm::outs() << "  the pool is faster from " << crossover << " elements\n";
}

void products(runtime::ThreadPool &pool) {
  llvm::Expected<const cpu::SgemmSetup &> setup = cpu::sgemmSetup();
  if (!setup) {
    llvm::errs() << llvm::toString(setup.takeError()) << "\n";
    return;
  }
  cpu::SgemmLibrary library = setup->library;
  llvm::outs() << "f32 products (" << cpu::sgemmLibraryName(library)
               << ", rows split as the executor splits them), flops:\n";
  int64_t crossover = 0;
  for (int64_t side = 16; side <= 512; side = side * 3 / 2) {
    int64_t m = side, n = side, k = side;
    std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
    auto body = [&](int64_t begin, int64_t end, int) {
      cpu::sgemm(library, false, true, end - begin, n, k, 1.0f,
                 a.data() + begin * k, k, b.data(), k, 0.0f,
                 c.data() + begin * n, n);
    };
    double serial = median([&] { body(0, m, 0); });
    double pooled = median([&] {
      pool.parallelFor(m, body, std::max<int64_t>(16, m / (2 * pool.size())));
    });
    if (row(2 * m * n * k, "flops", serial, pooled) && !crossover)
      crossover = 2 * m * n * k;
  }
  llvm::outs() << "  the pool is faster from " << crossover << " flops\n";
}

} // namespace

int main(int argc, char **argv) {
  bench::parseOptions(argc, argv,
                      "bench-threads: one thread against the pool by loop "
                      "size\n");
  runtime::ThreadPool pool(numThreads);
  llvm::outs() << "bench-threads\ncpu: " << bench::cpuModel() << "; "
               << bench::kernelTarget() << "\n"
               << "pool: " << pool.size() << " threads; default "
               << runtime::describeCpuBudget(runtime::cpuBudget()) << "\n";
  elementwise(pool);
  products(pool);
  return 0;
}
