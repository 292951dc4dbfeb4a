// Training-step benchmark: compiles the training step of GPT-2 124M and a
// small model (compileTraining: autodiff, AdamW with clipping, fusion),
// runs it on the CPU and prints tokens/s, achieved GFLOP/s and that as a
// fraction of this machine's sgemm peak measured in the same run, with the
// cost of each phase broken out:
//   forward    the forward program alone (the same ops the step starts with),
//   backward   the gradient step minus the forward program,
//   optimizer  the update step (global norm, clipping, AdamW, zeroing).
// Under each model's row, the same step in PyTorch and JAX on the same
// threads (bench/peers_train.py, run with the interpreters named by
// --torch-python and --jax-python; a framework that is not installed is
// skipped with the reason), so the ratio is read from one sitting.
//
// --precision bf16|fp16 times the mixed-precision step instead (GEMM
// operands in 16 bits: runNarrowGemm, runtime/Executor.cpp); the line
// under the table says which 16-bit GEMM path ran (cpu::bf16GemmPath).
//
//   build/bin/bench-train [--iterations N] [--num-threads N] [--short]
//                         [--batch B] [--seq T]
//                         [--precision fp32|bf16|fp16] [--peers=false]
//                         [--torch-python P] [--jax-python P]
#include "bench/CpuBench.h"
#include "bench/Options.h"
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/Training.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "runtime/Cpu/Bf16Gemm.h"
#include "runtime/Executor.h"
#include "runtime/Generate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
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
                               cl::cat(llmc::bench::benchOptions()),
                               cl::desc("Timed steps per model (best of)"),
                               cl::init(5));
static cl::opt<int> threads("num-threads", cl::cat(llmc::bench::benchOptions()),
                            cl::desc("CPU threads (default all)"), cl::init(0));
static cl::opt<int> batchSize("batch", cl::cat(llmc::bench::benchOptions()),
                              cl::desc("Sequences per step (default 4)"),
                              cl::init(4));
static cl::opt<int> seqLen("seq", cl::cat(llmc::bench::benchOptions()),
                           cl::desc("Tokens per sequence (default 64; at "
                                    "most the model's context, 1024 for "
                                    "GPT-2, 256 for the small model)"),
                           cl::init(64));
static cl::opt<bool>
    shortRun("short", cl::cat(llmc::bench::benchOptions()),
             cl::desc("The small model only, one timed step (for the tests)"),
             cl::init(false));
static cl::opt<bool> peers("peers", cl::cat(llmc::bench::benchOptions()),
                           cl::desc("Also time PyTorch and JAX on the same "
                                    "step (--peers=false: llmc only)"),
                           cl::init(true));
static cl::opt<std::string> precision(
    "precision", cl::cat(llmc::bench::benchOptions()),
    cl::desc("Mixed precision of the measured step: fp32 (default), bf16 or "
             "fp16 (llmc-amp, as `precision:` in `llmc run`)"),
    cl::init("fp32"));
static cl::opt<std::string>
    torchPython("torch-python", cl::cat(llmc::bench::benchOptions()),
                cl::desc("Python with PyTorch (default /usr/bin/python3, "
                         "Debian's python3-torch)"),
                cl::init("/usr/bin/python3"));
static cl::opt<std::string> jaxPython(
    "jax-python", cl::cat(llmc::bench::benchOptions()),
    cl::desc("Python with JAX (default $HOME/.cache/llmc/jax/bin/python, "
             "the virtual environment scripts/setup-peers.sh makes)"),
    cl::init(""));

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
    llvm::errs() << "bench-train: " << llvm::toString(std::move(error)) << "\n";
    std::exit(1);
  }
}

static std::unique_ptr<runtime::CpuExecutor>
executorFor(const kir::Program &program,
            std::shared_ptr<runtime::PersistentStore> store) {
  std::vector<kir::Kernel> kernels = program.kernels;
  return check(runtime::createCpuExecutor(
      program, [&]() { return cpu::compileKernelsToObject(kernels); }, threads,
      nullptr, {}, std::move(store)));
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

/// One line for a peer framework's step: what bench/peers_train.py printed
/// ("peer NAME VERSION: X tokens/s, ..." or "skipped: why"), or why it could
/// not run.
static std::string runPeer(llvm::StringRef framework, llvm::StringRef python,
                           llvm::StringRef model, const bench::BenchModel &c,
                           int numThreads) {
  if (!llvm::sys::fs::can_execute(python))
    return ("skipped: no " + python + " (scripts/setup-peers.sh)").str();
  llvm::SmallString<128> output;
  if (llvm::sys::fs::createTemporaryFile("bench-train-peer", "txt", output))
    return "skipped: cannot create a temporary file";
  std::string script = LLMC_BENCH_DIR "/peers_train.py";
  std::vector<std::string> args = {
      python.str(),   script,
      "--framework",  framework.str(),
      "--model",      model.str(),
      "--batch",      std::to_string(c.batch),
      "--seq",        std::to_string(c.seq),
      "--threads",    std::to_string(numThreads),
      "--iterations", std::to_string(int(iterations))};
  std::vector<llvm::StringRef> argv(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, output.str(),
                                                output.str()};
  std::string error;
  int status = llvm::sys::ExecuteAndWait(python, argv, std::nullopt, redirects,
                                         0, 0, &error);
  auto text = llvm::MemoryBuffer::getFile(output);
  llvm::StringRef all = text ? (*text)->getBuffer().trim() : "";
  std::string printed = all.substr(all.rfind('\n') + 1).str(); // last line
  llvm::sys::fs::remove(output);
  if (status != 0)
    return "failed (exit " + std::to_string(status) +
           "): " + (printed.empty() ? error : printed);
  return printed;
}

static runtime::HostTensor scalar(float value) {
  return runtime::HostTensor::fromF32({value}, {});
}

int main(int argc, char **argv) {
  llmc::bench::parseOptions(argc, argv, "llmc training-step benchmark\n");
  PrecisionConfig::Kind precisionKind;
  if (precision == "fp32")
    precisionKind = PrecisionConfig::Kind::FP32;
  else if (precision == "bf16")
    precisionKind = PrecisionConfig::Kind::BF16;
  else if (precision == "fp16")
    precisionKind = PrecisionConfig::Kind::FP16;
  else {
    llvm::errs() << "bench-train: --precision: expected fp32, bf16 or fp16, "
                    "got '"
                 << precision << "'\n";
    return 1;
  }
  int hw =
      threads > 0 ? int(threads) : int(std::thread::hardware_concurrency());
  std::vector<bench::BenchModel> cases = bench::benchModels();
  if (batchSize < 1 || seqLen < 1 || seqLen > cases.front().config.seqLen) {
    llvm::errs() << "bench-train: --batch " << batchSize << " --seq " << seqLen
                 << ": expected B >= 1 and 1 <= T <= "
                 << cases.front().config.seqLen << " (GPT-2's context)\n";
    return 1;
  }
  std::vector<std::string> skipped; // models whose context is under T
  for (auto it = cases.begin(); it != cases.end();) {
    it->batch = batchSize;
    it->seq = seqLen;
    if (seqLen <= it->config.seqLen) {
      ++it;
      continue;
    }
    skipped.push_back(std::string(it->name) + " (context " +
                      std::to_string(it->config.seqLen) + ")");
    it = cases.erase(it);
  }
  if (shortRun) {
    if (cases.size() < 2) {
      llvm::errs() << "bench-train: --short measures the small model, whose "
                      "context is under --seq "
                   << seqLen << "\n";
      return 1;
    }
    cases.erase(cases.begin()); // the small model only
    iterations = 1;
  }
  double peak = bench::printBlasAndPeak(hw);
  for (const std::string &name : skipped)
    llvm::outs() << "skipped: " << name << ", under --seq " << seqLen << "\n";
  llvm::outs() << "step = gradient step (forward + backward) + update step "
                  "(AdamW, clip 1.0); precision "
               << precision << "; best of " << iterations << "\n\n";
  std::string jax = jaxPython;
  if (jax.empty())
    jax = std::string(std::getenv("HOME") ? std::getenv("HOME") : "") +
          "/.cache/llmc/jax/bin/python";

  llvm::outs() << llvm::format("%-20s %9s %9s %8s | %9s %9s %9s %9s | %8s %8s "
                               "%8s\n",
                               ("model (B=" + std::to_string(batchSize) +
                                ", T=" + std::to_string(seqLen) + ")")
                                   .c_str(),
                               "tokens/s", "GFLOP/s", "of peak", "step ms",
                               "fwd ms", "bwd ms", "optim ms", "gemm ms",
                               "attn ms", "kern ms");
  for (const bench::BenchModel &c : cases) {
    mlir::MLIRContext context;
    context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
    auto start = Clock::now();
    auto module = check(
        mlir::llmc::buildForwardModule(context, c.config, {c.batch, c.seq}));
    TrainingOptions options;
    options.precision.kind = precisionKind;
    TrainingPrograms programs = check(compileTraining(*module, options));
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
        1e3 * profile.gemmSeconds / runs, 1e3 * profile.attentionSeconds / runs,
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
    if (!peers)
      continue;
    llvm::StringRef model = c.config.name == "small" ? "small" : "gpt2";
    for (auto [framework, python] :
         {std::pair<llvm::StringRef, llvm::StringRef>{"torch", torchPython},
          {"jax", jax}}) {
      std::string line = runPeer(framework, python, model, c, hw);
      double peerTokens = 0;
      llvm::StringRef rest = llvm::StringRef(line).split(": ").second;
      bool measured = llvm::StringRef(line).starts_with("peer ") &&
                      !rest.split(' ').first.getAsDouble(peerTokens) &&
                      peerTokens > 0;
      llvm::outs() << llvm::format("%-20s ", "") << line;
      if (measured)
        llvm::outs() << llvm::format(
            " (llmc %.2fx)", c.batch * c.seq / stepSeconds / peerTokens);
      llvm::outs() << "\n";
    }
  }
  llvm::outs() << "\n(gemm/attn/kern ms: the gradient step's time by kind "
                  "of step, mean over profiled runs)\n";
  if (precisionKind != PrecisionConfig::Kind::FP32) {
    std::optional<cpu::Bf16DotPath> dot = cpu::executorBf16Dot();
    llvm::outs() << "16-bit GEMMs: "
                 << (precisionKind == PrecisionConfig::Kind::BF16 && dot
                         ? std::string("bf16 on ") + cpu::bf16DotPathName(*dot)
                         : std::string("widened to f32 for sgemm"))
                 << (cpu::cpuHasAvx512Bf16() && !dot
                         ? " (LLMC_CPU_BF16_DOT=off)"
                         : "")
                 << "\n";
  }
  return 0;
}
