// What the CPU benchmarks share: the yardstick they report against (this
// machine's sgemm peak, measured in the same run with the BLAS the runtime
// uses, and which BLAS kernels ran) and the models they measure.
#ifndef LLMC_BENCH_CPUBENCH_H
#define LLMC_BENCH_CPUBENCH_H

#include "frontend/ModelConfig.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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

/// Prints which BLAS and kernels run (OpenBLAS's core and the environment
/// that steers it), measures the 2048^3 sgemm peak on `numThreads` threads,
/// prints it and returns it in GFLOP/s.
inline double printBlasAndPeak(int numThreads) {
  const char *coretype = std::getenv("OPENBLAS_CORETYPE");
  const char *l2 = std::getenv("OPENBLAS_L2_SIZE");
  llvm::outs() << "BLAS: OpenBLAS " << openblas_get_config() << ", core "
               << openblas_get_corename() << " (OPENBLAS_CORETYPE="
               << (coretype ? coretype : "unset")
               << ", OPENBLAS_L2_SIZE=" << (l2 ? l2 : "unset") << ")\n";
  double peak = sgemmPeak(2048, numThreads);
  llvm::outs() << llvm::format(
      "sgemm peak (2048^3, %d threads): %.1f GFLOP/s\n", numThreads, peak);
  return peak;
}

/// One measured model: a config at a batch size and sequence length.
struct BenchModel {
  const char *name;
  mlir::llmc::ModelConfig config;
  int64_t batch, seq;
};

/// GPT-2 124M and a small GPT-2-shaped model (4 layers of 256), both at
/// B=4, T=64.
inline std::vector<BenchModel> benchModels() {
  mlir::llmc::ModelConfig small = *mlir::llmc::getModelPreset("gpt2");
  small.name = "small";
  small.nLayer = 4;
  small.nHead = 4;
  small.nEmbd = 256;
  small.seqLen = 256;
  small.vocabSize = 256;
  small.ffnHidden = 1024;
  return {{"gpt2 (124M)", *mlir::llmc::getModelPreset("gpt2"), 4, 64},
          {"small (4x256, 3.2M)", small, 4, 64}};
}

} // namespace llmc::bench

#endif // LLMC_BENCH_CPUBENCH_H
