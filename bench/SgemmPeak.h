// The yardstick the CPU benchmarks report against: this machine's sgemm
// peak, measured in the same run with the BLAS the runtime uses.
#ifndef LLMC_BENCH_SGEMMPEAK_H
#define LLMC_BENCH_SGEMMPEAK_H

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace llmc::bench {

/// Best-of-5 GFLOP/s of an n^3 OpenBLAS sgemm (C = A B^T, llmc's weight
/// layout) on `numThreads` threads; BLAS goes back to one thread after.
inline double sgemmPeak(int n, int numThreads) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f),
      c(size_t(n) * n);
  openblas_set_num_threads(numThreads);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto start = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f,
                a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  openblas_set_num_threads(1);
  return 2.0 * n * n * n / best / 1e9;
}

} // namespace llmc::bench

#endif // LLMC_BENCH_SGEMMPEAK_H
