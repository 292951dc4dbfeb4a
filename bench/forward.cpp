// Forward-pass benchmark: compiles GPT-2 124M and a small model, runs the
// forward pass on the CPU and prints tokens/s, achieved GFLOP/s and that as
// a fraction of this machine's sgemm peak measured in the same run, next to
// the same model compiled without fusion (each op a kernel of its own).
// Compile time is printed separately: cold (kernel cache off) and cached.
//
//   build/bin/bench-forward [--iterations N] [--num-threads N]
#include "bench/CpuBench.h"
#include "bench/Options.h"
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <chrono>
#include <cstdlib>
#include <vector>

using namespace llmc;
namespace cl = llvm::cl;
using Clock = std::chrono::steady_clock;

static cl::opt<int> iterations("iterations",
                               cl::cat(llmc::bench::benchOptions()),
                               cl::desc("Timed forward passes per model"),
                               cl::init(10));
static cl::opt<int> threads("num-threads", cl::cat(llmc::bench::benchOptions()),
                            cl::desc("CPU threads (default all)"), cl::init(0));

static double seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Compiled {
  kir::Program program;
  double pipelineSeconds = 0;
};

static Compiled compile(const mlir::llmc::ModelConfig &config, int64_t batch,
                        int64_t seq, bool fuse) {
  auto start = Clock::now();
  mlir::MLIRContext context;
  auto module = mlir::llmc::buildForwardModule(context, config, {batch, seq});
  if (!module) {
    llvm::errs() << llvm::toString(module.takeError()) << "\n";
    std::exit(1);
  }
  mlir::PassManager pm(&context);
  if (fuse)
    mlir::llmc::buildCompilePipeline(pm);
  else
    pm.addPass(mlir::llmc::createVerifyLegalityPass());
  auto forward = (**module).lookupSymbol<mlir::func::FuncOp>("forward");
  if (mlir::failed(pm.run(**module)))
    std::exit(1);
  auto program = mlir::llmc::lowerToProgram(forward);
  if (mlir::failed(program))
    std::exit(1);
  return {std::move(*program), seconds(start)};
}

struct Result {
  double tokensPerSecond, gflops, jitColdSeconds, jitCachedSeconds;
  runtime::StepProfile profile;
};

static Result run(const Compiled &compiled, int64_t tokens) {
  Result result{};
  std::vector<kir::Kernel> kernels = compiled.program.kernels;
  auto compileFn = [&]() { return cpu::compileKernelsToObject(kernels); };
  // Cold: no cache, every kernel compiled now. Then twice through the
  // cache: the first stores the object, the second is the cached load.
  cpu::KernelCacheOptions noCache;
  noCache.enabled = false;
  cpu::CacheStats cold, warm;
  auto start = Clock::now();
  auto coldExec = runtime::createCpuExecutor(compiled.program, compileFn,
                                             threads, &cold, noCache);
  result.jitColdSeconds = cold.compileSeconds + cold.loadSeconds;
  if (!coldExec) {
    llvm::errs() << llvm::toString(coldExec.takeError()) << "\n";
    std::exit(1);
  }
  coldExec->reset();
  llvm::consumeError(
      runtime::createCpuExecutor(compiled.program, compileFn, threads)
          .takeError());
  start = Clock::now();
  auto executor =
      runtime::createCpuExecutor(compiled.program, compileFn, threads, &warm);
  result.jitCachedSeconds = warm.hit ? warm.loadSeconds : -1;
  if (!executor) {
    llvm::errs() << llvm::toString(executor.takeError()) << "\n";
    std::exit(1);
  }
  if (llvm::Error error = runtime::loadWeights(**executor, "", 1337)) {
    llvm::errs() << llvm::toString(std::move(error)) << "\n";
    std::exit(1);
  }
  llvm::consumeError((*executor)->run()); // warm up caches and pages
  (*executor)->setProfiling(true);
  double best = 1e30;
  for (int i = 0; i < iterations; ++i) {
    start = Clock::now();
    llvm::consumeError((*executor)->run());
    best = std::min(best, seconds(start));
  }
  result.profile = (*executor)->profile();
  result.tokensPerSecond = tokens / best;
  result.gflops = kir::countFlops(compiled.program) / best / 1e9;
  return result;
}

int main(int argc, char **argv) {
  llmc::bench::parseOptions(argc, argv, "llmc forward-pass benchmark\n");
  int hw =
      threads > 0 ? int(threads) : int(std::thread::hardware_concurrency());
  double peak = bench::printBlasAndPeak(hw);
  llvm::outs() << "\n";

  std::vector<bench::BenchModel> cases = bench::benchModels();

  llvm::outs() << llvm::format(
      "%-22s %-8s %12s %10s %8s %9s %9s %9s\n", "model (B=4, T=64)", "variant",
      "tokens/s", "GFLOP/s", "of peak", "gemm ms", "attn ms", "kern ms");
  for (const bench::BenchModel &c : cases) {
    for (bool fuse : {true, false}) {
      Compiled compiled = compile(c.config, c.batch, c.seq, fuse);
      Result r = run(compiled, c.batch * c.seq);
      double runs = double(r.profile.runs);
      llvm::outs() << llvm::format(
          "%-22s %-8s %12.0f %10.1f %7.1f%% %9.2f %9.2f %9.2f\n", c.name,
          fuse ? "fused" : "unfused", r.tokensPerSecond, r.gflops,
          100.0 * r.gflops / peak, 1e3 * r.profile.gemmSeconds / runs,
          1e3 * r.profile.attentionSeconds / runs,
          1e3 * r.profile.kernelSeconds / runs);
      if (fuse)
        llvm::outs() << llvm::format(
            "%-22s compile: IR + passes + lowering %.1f ms; kernels: JIT "
            "cold %.0f ms (%zu kernels), from the cache %.1f ms; %zu steps\n",
            "", 1e3 * compiled.pipelineSeconds, 1e3 * r.jitColdSeconds,
            compiled.program.kernels.size(), 1e3 * r.jitCachedSeconds,
            compiled.program.steps.size());
      else
        llvm::outs() << llvm::format("%-22s %zu kernels, %zu steps\n", "",
                                     compiled.program.kernels.size(),
                                     compiled.program.steps.size());
    }
  }
  return 0;
}
