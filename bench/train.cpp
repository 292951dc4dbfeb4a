// Training-step benchmark: compiles the training step of GPT-2 124M and a
// small model (compileTrainingStep: autodiff, AdamW with clipping, fusion),
// runs it on the CPU and prints tokens/s, achieved GFLOP/s and that as a
// fraction of this machine's sgemm peak measured in the same run (the
// highest reading so far: one at the start and one after each model's
// timed steps, since a reading while a core is busy elsewhere is low),
// with the cost of each phase broken out:
//   forward    the forward program alone (the same ops the step starts with),
//   backward   the gradient step minus the forward program,
//   optimizer  the update step (global norm, clipping, AdamW, zeroing).
// Under each model's row, a bound: the step's GEMMs at the sgemm peak
// plus every other step's bytes at the memory bandwidth measured in the
// same run (bench/Bandwidth.h; attention at the peak if its FLOPs take
// longer), and the fraction of the peak that leaves, next to what the
// steps took (each step's best run). --top-steps N lists the N slowest
// other steps of the gradient and the update step, each with its bytes
// and floor.
// Under each model's row, the same step in PyTorch and JAX on the same
// threads (bench/peers_train.py, run with the interpreters named by
// --torch-python and --jax-python; a framework that is not installed is
// skipped with the reason), so the ratio is read from one sitting.
//
// Under the phases, whole steps (the gradient and update step back to
// back, unprofiled: best and median) and, with --llmc-run (default on),
// `llmc run` training the same model, B, T, precision and threads, its
// median step from its metrics.jsonl and the ratio of the two medians.
//
// --precision bf16|fp16 times the mixed-precision step instead (GEMM
// operands in 16 bits: runNarrowGemm, runtime/Cpu/CpuExecutor.cpp); the line
// under the table says which 16-bit GEMM path ran (cpu::bf16GemmPath).
//
//   build/bin/bench-train [--iterations N] [--num-threads N] [--short]
//                         [--batch B] [--seq T] [--gemm-shapes]
//                         [--top-steps N] [--llmc-run=false]
//                         [--precision fp32|bf16|fp16] [--peers=false]
//                         [--torch-python P] [--jax-python P]
#include "bench/Bandwidth.h"
#include "bench/CpuBench.h"
#include "bench/Options.h"
#include "bench/Roofline.h"
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "runtime/Cpu/Bf16Gemm.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Cpu/Sgemm.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Weights/Weights.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
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
static cl::opt<bool> gemmShapes(
    "gemm-shapes", cl::cat(llmc::bench::benchOptions()),
    cl::desc("Also time the gradient step's GEMMs by shape under each f32 "
             "GEMM library (OpenBLAS, and oneDNN when it loads; "
             "runtime/Cpu/Sgemm.h): which wins where"),
    cl::init(false));
static cl::opt<int> topSteps(
    "top-steps", cl::cat(llmc::bench::benchOptions()),
    cl::desc("Also list the N slowest steps of the gradient step that are "
             "not GEMMs (fused kernels, attention, embedding gradient): "
             "kind, kernel, the ops it runs, ms (default 0: none)"),
    cl::init(0));
static cl::opt<bool>
    shortRun("short", cl::cat(llmc::bench::benchOptions()),
             cl::desc("The small model only, one timed step (for the tests)"),
             cl::init(false));
static cl::opt<bool> peers("peers", cl::cat(llmc::bench::benchOptions()),
                           cl::desc("Also time PyTorch and JAX on the same "
                                    "step (--peers=false: llmc only)"),
                           cl::init(true));
static cl::opt<bool> llmcRun(
    "llmc-run", cl::cat(llmc::bench::benchOptions()),
    cl::desc("Also train each model with `llmc run` (the llmc beside this "
             "binary) on the same B, T, precision and threads for "
             "--iterations + 2 steps, and print its median step from "
             "steps 2 on next to the whole steps timed here "
             "(--llmc-run=false: not)"),
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

/// Runs `args` (args[0] the program) with stdout and stderr into the file
/// `output`; returns its exit status, with `lastLine` the last line it
/// printed, or why it could not be run when it printed nothing.
static int runIntoFile(llvm::ArrayRef<std::string> args,
                       llvm::StringRef output, std::string &lastLine) {
  std::vector<llvm::StringRef> argv(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, output, output};
  std::string error;
  int status = llvm::sys::ExecuteAndWait(args[0], argv, std::nullopt,
                                         redirects, 0, 0, &error);
  auto text = llvm::MemoryBuffer::getFile(output);
  llvm::StringRef all = text ? (*text)->getBuffer().trim() : "";
  lastLine = all.empty() ? error : all.substr(all.rfind('\n') + 1).str();
  return status;
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
  std::string printed;
  int status = runIntoFile(args, output, printed);
  llvm::sys::fs::remove(output);
  if (status != 0)
    return "failed (exit " + std::to_string(status) + "): " + printed;
  return printed;
}

/// `llmc run`'s step as a user gets it: the llmc beside this binary trains
/// model `c` (its config written out as a model file) on random letters
/// with the byte tokenizer for `steps` steps, each logged, no evaluation,
/// sample or checkpoint before the end, in a temporary directory removed
/// after. Steps 0 and 1 are left out (the first touches every page, both
/// warm the caches); the times of steps 2 on come from metrics.jsonl: each step's
/// tokens over its tokens/s, the Trainer's own wall time of the step (data,
/// setting the inputs, the gradient and update step, the guard, logging).
/// An error says what failed.
static llvm::Expected<std::vector<double>>
llmcRunStepSeconds(const char *argv0, const bench::BenchModel &c,
                   llvm::StringRef precisionName, int numThreads, int steps) {
  std::string self =
      llvm::sys::fs::getMainExecutable(argv0, (void *)&llmcRunStepSeconds);
  llvm::SmallString<256> llmc(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(llmc, "llmc");
  if (!llvm::sys::fs::can_execute(llmc))
    return llvm::createStringError("no " + llmc +
                                   " (ninja llmc; --llmc-run=false skips)");
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("bench-train-run", dir))
    return llvm::createStringError(ec, "cannot create a temporary directory");
  llvm::scope_exit removeDir(
      [&] { (void)llvm::sys::fs::remove_directories(dir); });
  auto path = [&](llvm::StringRef name) {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };
  auto write = [&](const std::string &file,
                   llvm::function_ref<void(llvm::raw_ostream &)> fill)
      -> llvm::Error {
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    if (ec)
      return llvm::createStringError(ec, "cannot write " + file);
    fill(os);
    return llvm::Error::success();
  };
  if (llvm::Error err = write(path("model.yaml"), [&](llvm::raw_ostream &os) {
        mlir::llmc::printModelConfig(c.config, os);
      }))
    return err;
  if (llvm::Error err = write(path("corpus.txt"), [&](llvm::raw_ostream &os) {
        std::mt19937 rng(7);
        std::uniform_int_distribution<int> letter('a', 'z');
        for (int i = 0; i < (1 << 20); ++i)
          os << (i % 64 == 63 ? '\n' : char(letter(rng)));
      }))
    return err;
  if (llvm::Error err = write(path("run.yaml"), [&](llvm::raw_ostream &os) {
        os << "model: " << path("model.yaml") << "\n"
           << "micro_batch_size: " << c.batch << "\n"
           << "seq_len: " << c.seq << "\n"
           << "max_steps: " << steps << "\n"
           << "data: {train: [" << path("corpus.txt")
           << "], tokenizer: byte}\n"
           << "log_interval: 1\neval_interval: 0\neval_steps: 0\n"
           << "sample_tokens: 0\ncheckpoint_interval: 0\n"
           << "progress: lines\n"
           << "threads: " << numThreads << "\n"
           << "precision: " << precisionName << "\n";
      }))
    return err;
  std::vector<std::string> args = {std::string(llmc), "run", path("run.yaml"),
                                   "--out", path("out")};
  std::string lastLine;
  if (int status = runIntoFile(args, path("log.txt"), lastLine))
    return llvm::createStringError("llmc run failed (exit " +
                                   std::to_string(status) + "): " + lastLine);
  auto metrics = llvm::MemoryBuffer::getFile(path("out/metrics.jsonl"));
  if (!metrics)
    return llvm::createStringError(metrics.getError(),
                                   "llmc run wrote no metrics.jsonl");
  std::vector<double> stepSeconds;
  llvm::SmallVector<llvm::StringRef> lines;
  (*metrics)->getBuffer().split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    llvm::Expected<llvm::json::Value> value = llvm::json::parse(line);
    if (!value)
      return value.takeError();
    const llvm::json::Object *object = value->getAsObject();
    std::optional<int64_t> step = object ? object->getInteger("step")
                                          : std::nullopt;
    std::optional<double> rate =
        object ? object->getNumber("tokens_per_s") : std::nullopt;
    if (step && rate && *step >= 2 && *rate > 0)
      stepSeconds.push_back(double(c.batch * c.seq) / *rate);
  }
  if (stepSeconds.empty())
    return llvm::createStringError("llmc run logged no step from step 2 on");
  return stepSeconds;
}

/// The gradient step's GEMMs grouped by shape ("NT 256x2304x768": op(A),
/// op(B), m x n x k, batches and 16-bit operands noted), each group's mean
/// time per step under each f32 GEMM library, side by side, longest first.
static void
printGemmShapes(const kir::Program &gradStep,
                const std::function<std::unique_ptr<runtime::CpuExecutor>()>
                    &makeExecutor) {
  const cpu::SgemmSetup &process = check(cpu::sgemmSetup());
  std::vector<cpu::SgemmSetup> libraries;
  for (cpu::SgemmLibrary library :
       {cpu::SgemmLibrary::OpenBlas, cpu::SgemmLibrary::OneDnn}) {
    if (library == cpu::SgemmLibrary::OneDnn && !process.oneDnnLoaded)
      continue;
    libraries.push_back(process);
    libraries.back().library = library;
  }
  struct Group {
    int64_t calls = 0;
    double flops = 0;
    std::vector<double> seconds;
  };
  std::map<std::string, Group> groups;
  // The libraries take turns, run by run, so that a change in the
  // machine's load falls on all of them alike.
  std::vector<std::unique_ptr<runtime::CpuExecutor>> executors;
  for (const cpu::SgemmSetup &library : libraries) {
    executors.push_back(makeExecutor());
    executors.back()->setSgemmLibraries(library);
    check(executors.back()->run()); // warm-up
    executors.back()->setProfiling(true);
  }
  for (int i = 0; i < iterations; ++i)
    for (auto &executor : executors)
      check(executor->run());
  for (auto [index, executor] : llvm::enumerate(executors)) {
    const runtime::StepProfile &profile = executor->profile();
    for (auto [stepIndex, step] : llvm::enumerate(gradStep.steps)) {
      if (step.kind != kir::StepKind::Gemm)
        continue;
      const kir::GemmStep &g = step.gemm;
      kir::DType a = gradStep.buffers[g.a.buffer].dtype;
      std::string key =
          llvm::formatv("{0}{1} {2}{3}x{4}x{5}{6}", g.transA ? "T" : "N",
                        g.transB ? "T" : "N",
                        g.batch > 1 ? std::to_string(g.batch) + " x "
                                    : std::string(),
                        g.m, g.n, g.k, a == kir::DType::F32 ? "" : " (16-bit)")
              .str();
      Group &group = groups[key];
      group.seconds.resize(libraries.size());
      group.seconds[index] += profile.stepSeconds[stepIndex] / profile.runs;
      if (index == 0) {
        ++group.calls;
        group.flops += 2.0 * g.batch * g.m * g.n * g.k;
      }
    }
  }
  std::vector<std::pair<std::string, Group>> rows(groups.begin(), groups.end());
  llvm::sort(rows, [](const auto &x, const auto &y) {
    return x.second.seconds[0] > y.second.seconds[0];
  });
  llvm::outs() << llvm::format("%-20s  GEMMs by shape (op(A) op(B) m x n x k), "
                               "ms a step and GFLOP/s per library (runs use "
                               "%s)\n",
                               "", cpu::sgemmLibraryName(process.library));
  llvm::outs() << llvm::format("%-20s  %-26s %5s %7s", "", "shape", "calls",
                               "GFLOP");
  for (const cpu::SgemmSetup &library : libraries)
    llvm::outs() << llvm::format(
        " | %8s ms %7s", cpu::sgemmLibraryName(library.library), "GFLOP/s");
  llvm::outs() << " | faster\n";
  std::vector<double> totals(libraries.size());
  double totalFlops = 0;
  for (const auto &[key, group] : rows) {
    llvm::outs() << llvm::format("%-20s  %-26s %5lld %7.2f", "", key.c_str(),
                                 (long long)group.calls, group.flops / 1e9);
    size_t best = 0;
    for (auto [index, seconds] : llvm::enumerate(group.seconds)) {
      llvm::outs() << llvm::format(" | %11.2f %7.1f", 1e3 * seconds,
                                   group.flops / seconds / 1e9);
      totals[index] += seconds;
      if (seconds < group.seconds[best])
        best = index;
    }
    totalFlops += group.flops;
    llvm::outs() << " | "
                 << (libraries.size() > 1
                         ? cpu::sgemmLibraryName(libraries[best].library)
                         : "-")
                 << "\n";
  }
  llvm::outs() << llvm::format("%-20s  %-26s %5s %7.2f", "", "all", "",
                               totalFlops / 1e9);
  for (double seconds : totals)
    llvm::outs() << llvm::format(" | %11.2f %7.1f", 1e3 * seconds,
                                 totalFlops / seconds / 1e9);
  llvm::outs() << "\n";
}

/// The floor of one step on this machine: a GEMM's FLOPs (its epilogue's
/// too) at the sgemm peak, attention's FLOPs at the peak or its bytes at
/// the bandwidth (whichever is longer), any other step's bytes (each
/// operand read or written once, bench/Roofline.h's kernelBytes) at the
/// bandwidth. Seconds.
struct StepFloor {
  double flops = 0, bytes = 0, seconds = 0;
};

static std::vector<StepFloor> stepFloors(const kir::Program &program,
                                         double peakFlops, double bandwidth) {
  std::vector<size_t> stepOf;
  std::vector<bench::Cost> costs = bench::programCosts(program, &stepOf);
  std::vector<StepFloor> floors(program.steps.size());
  for (auto [i, cost] : llvm::enumerate(costs)) {
    StepFloor &floor = floors[stepOf[i]];
    floor.flops = cost.flops;
    floor.bytes = cost.bytes;
    switch (program.steps[stepOf[i]].kind) {
    case kir::StepKind::Gemm:
      floor.seconds = cost.flops / peakFlops;
      break;
    case kir::StepKind::Attention:
    case kir::StepKind::AttentionGrad:
      floor.seconds = std::max(cost.flops / peakFlops, cost.bytes / bandwidth);
      break;
    case kir::StepKind::EmbeddingGrad: {
      // Accumulating, it reads and writes only the rows its ids select (at
      // most one per position), not the whole table Roofline.h counts.
      const kir::EmbeddingGradStep &e = program.steps[stepOf[i]].embeddingGrad;
      if (e.accumulate)
        floor.bytes = 4.0 * e.positions *
                      (1.0 + 3.0 * double(e.channels));
      floor.seconds = floor.bytes / bandwidth;
      break;
    }
    default:
      floor.seconds = cost.bytes / bandwidth;
      break;
    }
  }
  return floors;
}

/// The highest bytes a second of a kernel that moves more than 256 MB (far
/// past the caches: from and to memory), by its best run, and which
/// kernel it was; 0 and "none" if no kernel does.
static std::pair<double, std::string>
fastestStreamingStep(llvm::ArrayRef<const kir::Program *> programs,
                     llvm::ArrayRef<const runtime::StepProfile *> profiles) {
  double fastest = 0;
  std::string which = "none";
  for (size_t p = 0; p < programs.size(); ++p) {
    std::vector<size_t> stepOf;
    std::vector<bench::Cost> costs =
        bench::programCosts(*programs[p], &stepOf);
    for (auto [i, cost] : llvm::enumerate(costs)) {
      const kir::Step &step = programs[p]->steps[stepOf[i]];
      if (step.kind != kir::StepKind::Kernel || cost.bytes < 256e6 ||
          stepOf[i] >= profiles[p]->stepBestSeconds.size())
        continue;
      double rate = cost.bytes / profiles[p]->stepBestSeconds[stepOf[i]];
      if (rate > fastest) {
        fastest = rate;
        which = programs[p]->kernels[step.kernel].name;
      }
    }
  }
  return {fastest, which};
}

/// The `count` slowest steps of `program` that are not GEMMs, from a
/// profile of its runs: the best run's ms (the step's own cost; the mean
/// also holds waits for threads another process delayed), the mean, the
/// bytes it moves and its floor at the measured bandwidth.
static void printTopSteps(const kir::Program &program,
                          const runtime::StepProfile &profile, int count,
                          const std::vector<StepFloor> &floors,
                          const char *which) {
  std::vector<size_t> order;
  for (auto [index, step] : llvm::enumerate(program.steps))
    if (step.kind != kir::StepKind::Gemm &&
        index < profile.stepBestSeconds.size())
      order.push_back(index);
  llvm::sort(order, [&](size_t x, size_t y) {
    return profile.stepBestSeconds[x] > profile.stepBestSeconds[y];
  });
  order.resize(std::min(order.size(), size_t(count)));
  llvm::outs() << llvm::format(
      "%-20s  the %zu slowest steps of the %s besides GEMMs (ms a step: "
      "best run, mean; MB moved, floor ms at the bandwidth):\n",
      "", order.size(), which);
  for (size_t index : order) {
    const kir::Step &step = program.steps[index];
    std::string what =
        step.kind == kir::StepKind::Kernel
            ? "kernel " + program.kernels[step.kernel].name
        : step.kind == kir::StepKind::Attention     ? "attention"
        : step.kind == kir::StepKind::AttentionGrad ? "attention gradient"
        : step.kind == kir::StepKind::EmbeddingGrad ? "embedding gradient"
                                                    : "collective";
    llvm::outs() << llvm::format(
        "%-20s  %8.2f %8.2f %8.1f %7.2f  %-28s %s\n", "",
        1e3 * profile.stepBestSeconds[index],
        1e3 * profile.stepSeconds[index] / profile.runs,
        floors[index].bytes / 1e6, 1e3 * floors[index].seconds, what.c_str(),
        step.origin.c_str());
  }
}

/// What the step could reach on this machine: its GEMMs at the sgemm peak
/// plus every other step at its floor (stepFloors), against the measured
/// steps (each step's best run). Prints both parts and the fraction of the
/// peak they allow.
static void printBound(llvm::ArrayRef<const kir::Program *> programs,
                       llvm::ArrayRef<const runtime::StepProfile *> profiles,
                       llvm::ArrayRef<std::vector<StepFloor>> floors,
                       double flops, double peakFlops, double bandwidth,
                       double measuredSeconds) {
  double gemmFlops = 0, gemmFloor = 0, otherBytes = 0, otherFloor = 0;
  double gemmBest = 0, otherBest = 0;
  for (size_t p = 0; p < programs.size(); ++p)
    for (auto [index, step] : llvm::enumerate(programs[p]->steps)) {
      const StepFloor &floor = floors[p][index];
      double best = index < profiles[p]->stepBestSeconds.size()
                        ? profiles[p]->stepBestSeconds[index]
                        : 0.0;
      if (step.kind == kir::StepKind::Gemm) {
        gemmFlops += floor.flops;
        gemmFloor += floor.seconds;
        gemmBest += best;
      } else {
        otherBytes += floor.bytes;
        otherFloor += floor.seconds;
        otherBest += best;
      }
    }
  double bound = gemmFloor + otherFloor;
  llvm::outs() << llvm::format(
      "%-20s bound: GEMMs %.1f GFLOP at the sgemm peak %.1f ms + other "
      "steps %.0f MB at %.1f GB/s (attention: FLOPs at the peak if longer) "
      "%.1f ms = %.1f ms, at most %.1f%% of the peak\n",
      "", gemmFlops / 1e9, 1e3 * gemmFloor, otherBytes / 1e6, bandwidth / 1e9,
      1e3 * otherFloor, 1e3 * bound, 100 * flops / bound / peakFlops);
  llvm::outs() << llvm::format(
      "%-20s measured (each step's best run): GEMMs %.1f ms (%.1f%% of the "
      "peak), other steps %.1f ms (%.1fx their floor); whole steps %.1f ms "
      "(%.1f%% of the bound's fraction)\n",
      "", 1e3 * gemmBest, 100 * gemmFloor / gemmBest, 1e3 * otherBest,
      otherBest / otherFloor, 1e3 * measuredSeconds,
      100 * bound / measuredSeconds);
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
  // The floors of memory-bound steps divide their bytes by the larger of
  // the two (bench/Bandwidth.h): what this machine's memory can move.
  double readBandwidth = 0, updateBandwidth = 0;
  {
    runtime::ThreadPool pool(hw);
    readBandwidth = bench::readBandwidth(pool, int64_t(512) << 18);
    updateBandwidth = bench::updateBandwidth(pool, int64_t(256) << 18);
  }
  double bandwidth = std::max(readBandwidth, updateBandwidth);
  llvm::outs() << llvm::format(
      "memory bandwidth (%d threads, best of 5): read %.1f GB/s, in-place "
      "update (a += b) %.1f GB/s\n",
      hw, readBandwidth / 1e9, updateBandwidth / 1e9);
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
    TrainingStepOptions options;
    options.precision.kind = precisionKind;
    TrainingStepPrograms programs = check(training::compileTrainingStep(*module, options));
    double compileSeconds = seconds(start);

    auto store = std::make_shared<runtime::PersistentStore>();
    auto forward = executorFor(programs.forward, store);
    auto grad = executorFor(programs.gradStep, store);
    auto update = executorFor(programs.updateStep, store);
    check(runtime::loadWeights(*forward, "", 1337));
    // Mixed precision: the 16-bit weight copies the steps read.
    if (programs.castWeights)
      check(executorFor(*programs.castWeights, store)->run());

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
    check(grad->setScalar(kir::StepScalar::DLoss, 1.0));
    check(update->setScalar(kir::StepScalar::Lr, 1e-4));
    check(update->setScalar(kir::StepScalar::BiasCorrection1, 10.0));
    check(update->setScalar(kir::StepScalar::BiasCorrection2, 20.0));

    double forwardSeconds = bestOf([&] { check(forward->run()); });
    // One run of each before its profile starts: a first run pays the
    // page faults of its arena (the logits' gradient alone is 51 MB at
    // GPT-2's B=4, T=64), which would show in every mean below.
    check(grad->run());
    grad->setProfiling(true);
    double gradSeconds = bestOf([&] { check(grad->run()); });
    check(update->run());
    update->setProfiling(true);
    double updateSeconds = bestOf([&] { check(update->run()); });
    double stepSeconds = gradSeconds + updateSeconds;
    // The peak again, beside this model's runs: a reading taken while a
    // core was busy elsewhere only ever reads low, so the highest so far
    // is the machine's, and every fraction below is of it.
    double reading = runtime::measureSgemmPeak(2048, hw, 5);
    if (reading > peak) {
      llvm::outs() << llvm::format(
          "%-20s (sgemm peak read %.1f GFLOP/s after %s's runs, above the "
          "%.1f before: the fractions below are of %.1f)\n",
          "", reading, c.name, peak, reading);
      peak = reading;
    }
    int64_t flops = kir::countFlops(programs.gradStep) +
                    kir::countFlops(programs.updateStep);
    double gflops = flops / stepSeconds / 1e9;
    // A step's model GFLOP/s as a percentage of the peak.
    auto ofPeak = [&](double stepTime) {
      return 100 * flops / stepTime / 1e9 / peak;
    };
    const runtime::StepProfile &profile = grad->profile();
    double runs = double(profile.runs);
    llvm::outs() << llvm::format(
        "%-20s %9.0f %9.1f %7.1f%% | %9.1f %9.1f %9.1f %9.1f | %8.1f %8.1f "
        "%8.1f\n",
        c.name, c.batch * c.seq / stepSeconds, gflops, ofPeak(stepSeconds),
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
    // A kernel that streams far more than the caches hold shows what the
    // memory delivers too (AdamW of wte reads four tensors and writes three
    // back, 1.08 GB, and on the shared Zen 4 it moves more bytes a second
    // than either yardstick): the floors use the highest of the three.
    auto [stepBandwidth, fastestStep] = fastestStreamingStep(
        {&programs.gradStep, &programs.updateStep},
        {&grad->profile(), &update->profile()});
    double modelBandwidth = std::max(bandwidth, stepBandwidth);
    llvm::outs() << llvm::format(
        "%-20s bandwidth: the fastest kernel of over 256 MB moved %.1f GB/s "
        "(%s); floors use %.1f GB/s\n",
        "", stepBandwidth / 1e9, fastestStep.c_str(), modelBandwidth / 1e9);
    std::vector<StepFloor> floors[] = {
        stepFloors(programs.gradStep, peak * 1e9, modelBandwidth),
        stepFloors(programs.updateStep, peak * 1e9, modelBandwidth)};
    printBound({&programs.gradStep, &programs.updateStep},
               {&grad->profile(), &update->profile()}, floors, double(flops),
               peak * 1e9, modelBandwidth, stepSeconds);
    // Whole steps as the Trainer runs them: the gradient step and the
    // update step back to back, unprofiled.
    grad->setProfiling(false);
    update->setProfiling(false);
    std::vector<double> wholeSeconds;
    for (int i = 0; i < iterations; ++i) {
      auto start = Clock::now();
      check(grad->run());
      check(update->run());
      wholeSeconds.push_back(seconds(start));
    }
    double wholeMedian = bench::median(wholeSeconds);
    llvm::outs() << llvm::format(
        "%-20s whole steps (gradient + update step back to back, "
        "unprofiled, %d runs): best %.1f ms, median %.1f ms = %.0f "
        "tokens/s, %.1f%% of the peak\n",
        "", int(iterations),
        1e3 * *std::min_element(wholeSeconds.begin(), wholeSeconds.end()),
        1e3 * wholeMedian, c.batch * c.seq / wholeMedian, ofPeak(wholeMedian));
    if (llmcRun) {
      llvm::Expected<std::vector<double>> runSeconds = llmcRunStepSeconds(
          argv[0], c, precision, hw, int(iterations) + 2);
      if (!runSeconds) {
        llvm::outs() << llvm::format("%-20s llmc run: ", "")
                     << llvm::toString(runSeconds.takeError()) << "\n";
      } else {
        double runMedian = bench::median(*runSeconds);
        llvm::outs() << llvm::format(
            "%-20s llmc run (same B, T, precision, threads; steps 2-%d from "
            "its metrics.jsonl): median %.1f ms (%.1f-%.1f) = %.0f "
            "tokens/s, %.1f%% of the peak; %.3fx the whole steps' median\n",
            "", int(iterations) + 1, 1e3 * runMedian,
            1e3 * *std::min_element(runSeconds->begin(), runSeconds->end()),
            1e3 * *std::max_element(runSeconds->begin(), runSeconds->end()),
            c.batch * c.seq / runMedian, ofPeak(runMedian),
            runMedian / wholeMedian);
      }
    }
    if (topSteps > 0) {
      printTopSteps(programs.gradStep, grad->profile(), topSteps, floors[0],
                    "gradient step");
      printTopSteps(programs.updateStep, update->profile(), topSteps,
                    floors[1], "update step");
    }
    if (gemmShapes)
      printGemmShapes(programs.gradStep, [&] {
        auto executor = executorFor(programs.gradStep, store);
        check(executor->setTensor("tokens", tokens));
        check(executor->setTensor("targets", targets));
        check(executor->setScalar(kir::StepScalar::DLoss, 1.0));
        return executor;
      });
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
  // The peak once more: a busy core during every reading so far (on a
  // shared machine, a few runs in a dozen read about half) would make
  // every fraction above too high. Said, not silently replaced.
  double peakAgain = runtime::measureSgemmPeak(2048, hw, 5);
  llvm::outs() << llvm::format(
      "\nsgemm peak measured again at the end: %.1f GFLOP/s", peakAgain);
  if (peakAgain > 1.1 * peak)
    llvm::outs() << llvm::format(
        " (%.0f%% above the highest before, %.1f: the machine was busier "
        "then; read the fractions of the peak above against this one)",
        100 * (peakAgain / peak - 1), peak);
  llvm::outs() << "\n";
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
