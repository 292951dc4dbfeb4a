// Training-step benchmark: compiles the training step of GPT-2 124M and a
// small model (compileTraining: autodiff, AdamW with clipping, fusion),
// runs it on the CPU and prints tokens/s, achieved GFLOP/s and that as a
// fraction of this machine's sgemm peak measured in the same run, with the
// cost of each phase broken out:
//   forward    the forward program alone (the same ops the step starts with),
//   backward   the gradient step minus the forward program,
//   optimizer  the update step (global norm, clipping, AdamW, zeroing).
//
//   build/bin/bench-train [--iterations N] [--num-threads N]
#include "bench/CpuBench.h"
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/Training.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "runtime/Executor.h"
#include "runtime/Generate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

using namespace llmc;
namespace cl = llvm::cl;
using Clock = std::chrono::steady_clock;

static cl::opt<int> iterations("iterations",
                               cl::desc("Timed steps per model (best of)"),
                               cl::init(5));
static cl::opt<int> threads("num-threads", cl::desc("CPU threads (default all)"),
                            cl::init(0));

static double seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename T> static T check(llvm::Expected<T> value) {
  if (!value) {
    llvm::errs() << "bench-train: " << llvm::toString(value.takeError())
                 << "\n";
    std::exit(1);
  }
  return std::move(*value);
}

static void check(llvm::Error error) {
  if (error) {
    llvm::errs() << "bench-train: " << llvm::toString(std::move(error))
                 << "\n";
    std::exit(1);
  }
}

static std::unique_ptr<runtime::CpuExecutor>
executorFor(const kir::Program &program,
            std::shared_ptr<runtime::PersistentStore> store) {
  std::vector<kir::Kernel> kernels = program.kernels;
  return check(runtime::createCpuExecutor(
      program, [&]() { return cpu::compileKernelsToObject(kernels); },
      threads, nullptr, {}, std::move(store)));
}

/// The best time of `iterations` runs of `step`, after one warm-up run.
template <typename F> static double bestOf(F step) {
  step();
  double best = 1e30;
  for (int i = 0; i < iterations; ++i) {
    auto start = Clock::now();
    step();
    best = std::min(best, seconds(start));
  }
  return best;
}

static runtime::HostTensor scalar(float value) {
  return runtime::HostTensor::fromF32({value}, {});
}

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "llmc training-step benchmark\n");
  int hw = threads > 0 ? int(threads) : int(std::thread::hardware_concurrency());
  double peak = bench::printBlasAndPeak(hw);
  llvm::outs() << "step = gradient step (forward + backward) + update step "
                  "(AdamW, clip 1.0); best of "
               << iterations << "\n\n";

  std::vector<bench::BenchModel> cases = bench::benchModels();

  llvm::outs() << llvm::format("%-20s %9s %9s %8s | %9s %9s %9s %9s | %8s %8s "
                               "%8s\n",
                               "model (B=4, T=64)", "tokens/s", "GFLOP/s",
                               "of peak", "step ms", "fwd ms", "bwd ms",
                               "optim ms", "gemm ms", "attn ms", "kern ms");
  for (const bench::BenchModel &c : cases) {
    mlir::MLIRContext context;
    context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
    auto start = Clock::now();
    auto module = check(
        mlir::llmc::buildForwardModule(context, c.config, {c.batch, c.seq}));
    TrainingPrograms programs =
        check(compileTraining(*module, TrainingOptions()));
    double compileSeconds = seconds(start);

    auto store = std::make_shared<runtime::PersistentStore>();
    auto forward = executorFor(programs.forward, store);
    auto grad = executorFor(programs.gradStep, store);
    auto update = executorFor(programs.updateStep, store);
    check(runtime::loadWeights(*forward, "", 1337));

    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> token(
        0, int32_t(c.config.vocabSize) - 1);
    runtime::HostTensor tokens =
        runtime::HostTensor::zeros(kir::DType::I32, {c.batch, c.seq});
    runtime::HostTensor targets = tokens;
    for (int32_t &t : tokens.i32())
      t = token(rng);
    for (int32_t &t : targets.i32())
      t = token(rng);
    for (runtime::CpuExecutor *e : {forward.get(), grad.get()}) {
      check(e->setTensor("tokens", tokens));
      check(e->setTensor("targets", targets));
    }
    check(grad->setTensor("dloss", scalar(1.0f)));
    check(update->setTensor("lr", scalar(1e-4f)));
    check(update->setTensor("bias_correction1", scalar(10.0f)));
    check(update->setTensor("bias_correction2", scalar(20.0f)));

    double forwardSeconds = bestOf([&] { check(forward->run()); });
    grad->setProfiling(true);
    double gradSeconds = bestOf([&] { check(grad->run()); });
    double updateSeconds = bestOf([&] { check(update->run()); });
    double stepSeconds = gradSeconds + updateSeconds;
    int64_t flops = kir::countFlops(programs.gradStep) +
                    kir::countFlops(programs.updateStep);
    double gflops = flops / stepSeconds / 1e9;
    const runtime::StepProfile &profile = grad->profile();
    double runs = double(profile.runs);
    llvm::outs() << llvm::format(
        "%-20s %9.0f %9.1f %7.1f%% | %9.1f %9.1f %9.1f %9.1f | %8.1f %8.1f "
        "%8.1f\n",
        c.name, c.batch * c.seq / stepSeconds, gflops, 100 * gflops / peak,
        1e3 * stepSeconds, 1e3 * forwardSeconds,
        1e3 * (gradSeconds - forwardSeconds), 1e3 * updateSeconds,
        1e3 * profile.gemmSeconds / runs,
        1e3 * profile.attentionSeconds / runs,
        1e3 * profile.kernelSeconds / runs);
    llvm::outs() << llvm::format(
        "%-20s compile %.2f s; gradient step: %zu kernels, %zu steps, %.1f "
        "GFLOP, arena %.1f MiB; update: %zu kernels, %.2f GFLOP\n",
        "", compileSeconds, programs.gradStep.kernels.size(),
        programs.gradStep.steps.size(),
        kir::countFlops(programs.gradStep) / 1e9,
        programs.gradStep.arenaBytes / 1048576.0,
        programs.updateStep.kernels.size(),
        kir::countFlops(programs.updateStep) / 1e9);
  }
  llvm::outs() << "\n(gemm/attn/kern ms: the gradient step's time by kind "
                  "of step, mean over profiled runs)\n";
  return 0;
}
