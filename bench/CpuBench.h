// What the CPU benchmarks share: the yardstick they report against (this
// machine's sgemm peak, measured in the same run with the BLAS the runtime
// uses, and which BLAS kernels ran), the models they measure, and the
// median of their timings.
#ifndef LLMC_BENCH_CPUBENCH_H
#define LLMC_BENCH_CPUBENCH_H

#include "bench/Machine.h"
#include "frontend/ModelConfig.h"
#include "runtime/Cpu/SgemmPeak.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

namespace llmc::bench {

/// Prints the CPU, the kernels' target, which BLAS and kernels run
/// (OpenBLAS's core and the environment that steers it), measures the 2048^3 sgemm peak (best of 5) on
/// `numThreads` threads, prints it and returns it in GFLOP/s.
inline double printBlasAndPeak(int numThreads) {
  llvm::outs() << "cpu: " << cpuModel() << "\n"
               << "kernels: " << kernelTarget() << "\n"
               << "BLAS: " << runtime::describeBlas() << "\n";
  double peak = runtime::measureSgemmPeak(2048, numThreads, 5);
  llvm::outs() << llvm::format(
      "sgemm peak (2048^3, %d threads): %.1f GFLOP/s\n", numThreads, peak);
  return peak;
}

/// The median of `values` (the mean of the middle two when even); 0 when
/// empty.
inline double median(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
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
