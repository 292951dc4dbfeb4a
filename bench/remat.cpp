// Activation checkpointing benchmark: the training step of GPT-2 124M at
// T=256 compiled with every remat policy (none, full, selective, and budget
// half-way between none's and full's planned peaks) and each training
// precision that compiles (fp32, fp16, bf16), run on the CPU side by side:
//   planned peak   the gradient step's arena (Program::arenaBytes), what
//                  remat changes; "total" adds the persistent tensors
//                  (parameters, gradients, optimizer state);
//   measured peak  the arena high-water mark of a run (canary-filled);
//   extra FLOPs    the recomputed ops (llmc-remat's count), against the
//                  step's FLOPs without remat;
//   step time      gradient step + update step (the same for every
//                  policy), medians of --steps rounds; a round runs every
//                  policy once, so a shared machine's load falls on all.
//
//   build/bin/bench-remat [--batch 1] [--seq-len 256] [--steps 5]
//                         [--num-threads N] [--precision fp32,fp16,bf16]
#include "passes/Remat.h"
#include "bench/CpuBench.h"
#include "bench/Options.h"
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <thread>

using namespace llmc;
namespace cl = llvm::cl;
using Clock = std::chrono::steady_clock;

static cl::opt<int64_t> batch("batch", cl::cat(llmc::bench::benchOptions()),
                              cl::desc("Sequences per step"), cl::init(1));
static cl::opt<int64_t> seqLen("seq-len", cl::cat(llmc::bench::benchOptions()),
                               cl::desc("Tokens per sequence"), cl::init(256));
static cl::opt<int> steps("steps", cl::cat(llmc::bench::benchOptions()),
                          cl::desc("Timing rounds (the median counts)"),
                          cl::init(5));
static cl::opt<int> threads("num-threads", cl::cat(llmc::bench::benchOptions()),
                            cl::desc("CPU threads (default all)"), cl::init(0));
static cl::list<std::string>
    precisions("precision", cl::cat(llmc::bench::benchOptions()),
               cl::desc("Precisions to run (default all)"), cl::CommaSeparated);

static double seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

static double mib(int64_t bytes) { return bytes / 1048576.0; }

static void check(llvm::Error error) {
  if (error) {
    llvm::errs() << "bench-remat: " << llvm::toString(std::move(error)) << "\n";
    std::exit(1);
  }
}

/// One policy at one precision: its programs' figures and executors.
struct Variant {
  std::string label;
  int64_t plannedPeak = 0, measuredPeak = 0, persistent = 0;
  int64_t extraFlops = 0, stepFlops = 0;
  std::unique_ptr<runtime::CpuExecutor> grad, update;
  std::vector<double> gradTimes; // one per timing round
};

/// The bytes of the Param and State buffers of the programs, each name
/// once (they share one store).
static int64_t persistentBytes(const TrainingStepPrograms &programs) {
  std::map<std::string, int64_t> bytes;
  for (const kir::Program *program :
       {&programs.forward, &programs.gradStep, &programs.updateStep}) {
    for (const kir::Binding &binding : program->params)
      bytes[binding.name] = program->buffers[binding.buffer].bytes();
    for (const kir::Binding &binding : program->states)
      bytes[binding.name] = program->buffers[binding.buffer].bytes();
  }
  int64_t total = 0;
  for (const auto &entry : bytes)
    total += entry.second;
  return total;
}

/// Compiles the training step with `options`, creates its executors on
/// `store` (every policy of one precision shares the parameters) and
/// measures the arena high-water mark of one gradient step.
static llvm::Expected<Variant>
prepare(const mlir::llmc::ModelConfig &config, const TrainingStepOptions &options,
        const std::shared_ptr<runtime::PersistentStore> &store) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "; ";
    return mlir::success();
  });
  auto module =
      mlir::llmc::buildForwardModule(context, config, {batch, seqLen});
  if (!module)
    return module.takeError();
  auto programs = training::compileTrainingStep(**module, options);
  if (!programs)
    return llvm::createStringError(llvm::toString(programs.takeError()) + ": " +
                                   diagnostics);
  Variant variant;
  variant.label = stringifyRematPolicy(options.remat.policy).str();
  if (options.remat.policy == RematConfig::Policy::Budget)
    variant.label += llvm::formatv(" {0:F0}M", mib(options.remat.budgetBytes));
  variant.plannedPeak = programs->gradStep.arenaBytes;
  variant.persistent = persistentBytes(*programs);
  variant.stepFlops = kir::countFlops(programs->gradStep) +
                      kir::countFlops(programs->updateStep);
  if (auto summary = mlir::llmc::getRematSummary(
          (*module)->lookupSymbol<mlir::func::FuncOp>("grad_step")))
    variant.extraFlops = summary->extraFlops;

  auto executorFor = [&](const kir::Program &program) {
    std::vector<kir::Kernel> kernels = program.kernels;
    return runtime::createCpuExecutor(
        program, [&]() { return cpu::compileKernelsToObject(kernels); },
        threads, nullptr, {}, store);
  };
  auto grad = executorFor(programs->gradStep);
  if (!grad)
    return grad.takeError();
  auto update = executorFor(programs->updateStep);
  if (!update)
    return update.takeError();
  variant.grad = std::move(*grad);
  variant.update = std::move(*update);
  if (!store->contains("wte"))
    if (llvm::Error error = runtime::loadWeights(*variant.grad, "", 1337))
      return error;
  // Mixed precision: the 16-bit weight copies the steps read.
  if (programs->castWeights) {
    auto casts = executorFor(*programs->castWeights);
    if (!casts)
      return casts.takeError();
    if (llvm::Error error = (*casts)->run())
      return error;
  }

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(0,
                                               int32_t(config.vocabSize) - 1);
  for (const char *name : {"tokens", "targets"}) {
    runtime::HostTensor ids =
        runtime::HostTensor::zeros(kir::DType::I32, {batch, seqLen});
    for (int32_t &id : ids.i32())
      id = token(rng);
    if (llvm::Error error = variant.grad->setTensor(name, ids))
      return error;
  }
  using kir::StepScalar;
  for (auto [executor, scalar, value] :
       {std::tuple{variant.grad.get(), StepScalar::DLoss, 1.0},
        std::tuple{variant.update.get(), StepScalar::Lr, 1e-4},
        std::tuple{variant.update.get(), StepScalar::BiasCorrection1, 10.0},
        std::tuple{variant.update.get(), StepScalar::BiasCorrection2, 20.0}})
    if (llvm::Error error = executor->setScalar(scalar, value))
      return error;
  variant.grad->setRng(1337, 1);

  // The canary run is also the warm-up.
  llvm::Expected<int64_t> measured = variant.grad->measureArenaHighWater();
  if (!measured)
    return measured.takeError();
  variant.measuredPeak = *measured;
  return variant;
}

int main(int argc, char **argv) {
  llmc::bench::parseOptions(argc, argv,
                            "llmc activation checkpointing benchmark\n");
  int hw =
      threads > 0 ? int(threads) : int(std::thread::hardware_concurrency());
  bench::printBlasAndPeak(hw);
  mlir::llmc::ModelConfig config = *mlir::llmc::getModelPreset("gpt2");
  llvm::outs() << llvm::format(
      "GPT-2 124M, batch %lld x %lld tokens, %d threads; step = gradient "
      "step + AdamW update, median of %d; budget = half-way between none's "
      "and full's planned peaks\n",
      (long long)batch, (long long)seqLen, hw, int(steps));

  std::vector<std::pair<std::string, PrecisionConfig::Kind>> kinds = {
      {"fp32", PrecisionConfig::Kind::FP32},
      {"fp16", PrecisionConfig::Kind::FP16},
      {"bf16", PrecisionConfig::Kind::BF16}};
  for (auto [name, kind] : kinds) {
    if (!precisions.empty() && !llvm::is_contained(precisions, name))
      continue;
    llvm::outs() << "\n" << name << ":\n";
    llvm::outs().flush();
    TrainingStepOptions options;
    options.precision.kind = kind;
    auto store = std::make_shared<runtime::PersistentStore>();
    std::vector<Variant> variants;
    for (RematConfig::Policy policy :
         {RematConfig::Policy::None, RematConfig::Policy::Full,
          RematConfig::Policy::Selective, RematConfig::Policy::Budget}) {
      options.remat.policy = policy;
      if (policy == RematConfig::Policy::Budget)
        options.remat.budgetBytes =
            (variants[0].plannedPeak + variants[1].plannedPeak) / 2;
      llvm::Expected<Variant> variant = prepare(config, options, store);
      if (!variant) {
        llvm::outs() << llvm::format("%-14s ",
                                     stringifyRematPolicy(policy).data())
                     << "not measured: " << llvm::toString(variant.takeError())
                     << "\n";
        break;
      }
      variants.push_back(std::move(*variant));
    }
    if (variants.size() < 4)
      continue;

    // Timing rounds run every policy once each, so that the load of a
    // shared machine falls on all of them alike.
    std::vector<double> updateTimes;
    for (int round = 0; round < steps; ++round) {
      for (Variant &variant : variants) {
        auto start = Clock::now();
        check(variant.grad->run());
        variant.gradTimes.push_back(seconds(start));
      }
      auto start = Clock::now();
      check(variants[0].update->run());
      updateTimes.push_back(seconds(start));
    }
    double update = bench::median(updateTimes);

    llvm::outs() << llvm::format("%-14s %13s %8s %12s %14s %11s %8s %8s "
                                 "%8s %8s\n",
                                 "policy", "planned peak", "vs none",
                                 "+persistent", "measured", "extra GFLOP",
                                 "extra", "step ms", "vs none", "fwd+bwd");
    const Variant &none = variants[0];
    double noneStep = bench::median(none.gradTimes) + update;
    for (const Variant &v : variants) {
      double grad = bench::median(v.gradTimes);
      llvm::outs() << llvm::format(
          "%-14s %9.1f MiB %7.2fx %8.1f MiB %9.1f MiB%s %11.2f %7.1f%% %8.0f "
          "%7.2fx %8.0f\n",
          v.label.c_str(), mib(v.plannedPeak),
          double(none.plannedPeak) / std::max<int64_t>(v.plannedPeak, 1),
          mib(v.plannedPeak + v.persistent), mib(v.measuredPeak),
          v.measuredPeak == v.plannedPeak ? " " : "!", v.extraFlops / 1e9,
          100.0 * v.extraFlops / std::max<int64_t>(none.stepFlops, 1),
          1e3 * (grad + update), (grad + update) / noneStep, 1e3 * grad);
    }
  }
  llvm::outs() << "\n(! after measured: the high-water mark differs from the "
                  "plan; +persistent: the planned peak plus parameters, "
                  "gradients and optimizer state; fwd+bwd: the gradient "
                  "step alone)\n";
  return 0;
}
