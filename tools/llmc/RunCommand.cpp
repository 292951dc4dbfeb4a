// llmc run: trains a model from a training config. Parses its own command
// line (every config key is a flag), reads the data, builds and compiles
// the training step (one grad step per sequence length, cached), restores
// a checkpoint or initializes the weights and runs the Trainer.
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "codegen/Plan/Estimate.h"
#include "codegen/Plan/ModelAnalysis.h"
#include "codegen/Training.h"
#include "frontend/Dataset.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelInfo.h"
#include "frontend/Tokenizer.h"
#include "frontend/TrainConfig.h"
#include "ir/LlmcDialect.h"
#include "ir/ParseModule.h"
#include "ir/PipelineStages.h"
#include "ir/kernel/AtomicFile.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/Comm/Communicator.h"
#include "runtime/Comm/Mesh.h"
#include "runtime/Cpu/SgemmPeak.h"
#include "runtime/Exec/MemoryBudget.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Train/Trainer.h"
#include "runtime/Weights/Checkpoint.h"
#include "runtime/Weights/Weights.h"
#include "tools/llmc/GuardInject.h"
#include "tools/llmc/StartupTimings.h"
#ifdef LLMC_HAVE_NVRTC
#include "codegen/KernelToCuda/CudaCompiler.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaExecutor.h"
#include "runtime/Cuda/NcclCommunicator.h"
#endif

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/xxhash.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <unistd.h>

using namespace mlir;
using namespace mlir::llmc;
namespace rt = ::llmc::runtime;

/// The sgemm that measures the CPU's peak at start-up (the benchmarks'
/// size: large enough for the BLAS to reach its peak, ~0.1 s a run).
constexpr int kPeakSgemmSize = 2048;
namespace data = ::llmc::data;

namespace {

int fail(const llvm::Twine &message) {
  std::string text = message.str();
  // Config errors come formatted ("file:line:col: error: ...").
  if (llvm::StringRef(text).contains(": error: ")) {
    llvm::errs() << llvm::StringRef(text).rtrim() << "\n";
    return 1;
  }
  llvm::WithColor::error(llvm::errs(), "llmc run") << text << "\n";
  return 1;
}
int fail(llvm::Error error) { return fail(llvm::toString(std::move(error))); }

std::string toMessage(llvm::Error error) {
  return llvm::toString(std::move(error));
}
std::string toMessage(const llvm::Twine &text) { return text.str(); }
std::string toMessage(const std::string &text) { return text; }
std::string toMessage(const char *text) { return text; }

/// SIGINT and SIGTERM stop a run cleanly: the handler records the signal,
/// the trainer sees it at the next step boundary, writes a checkpoint and
/// returns, and the command exits with 128 + the signal. A second one
/// while stopping ends the process at once: killed by that signal, after
/// the handler this one replaced (LLVM's, which removes the temporary file
/// of a checkpoint being written).
// Lock-free atomics: safe in a handler, and read by the training thread
// whichever thread (a BLAS worker) the signal lands on.
std::atomic<int> stopSignal{0};
std::atomic<bool> stopQuiet{false}; // ranks other than 0
static_assert(std::atomic<int>::is_always_lock_free);
struct sigaction replacedInt, replacedTerm;

void onStopSignal(int signal, siginfo_t *info, void *context) {
  if (stopSignal != 0) {
    // The replaced handler first (LLVM's removes the files registered with
    // RemoveFileOnSignal), then the default action: it may have restored
    // SIG_IGN (what a shell gives background jobs for SIGINT).
    const struct sigaction &replaced =
        signal == SIGINT ? replacedInt : replacedTerm;
    if (replaced.sa_flags & SA_SIGINFO)
      replaced.sa_sigaction(signal, info, context);
    else if (replaced.sa_handler != SIG_DFL && replaced.sa_handler != SIG_IGN)
      replaced.sa_handler(signal);
    ::signal(signal, SIG_DFL);
    ::raise(signal); // blocked here: delivered, fatally, on return
    return;
  }
  stopSignal = signal;
  if (stopQuiet)
    return;
  // Only async-signal-safe calls here: write(2) of a fixed text.
  static const char intText[] =
      "\nllmc run: SIGINT: stopping after this step with a checkpoint "
      "(again to stop at once)\n";
  static const char termText[] =
      "\nllmc run: SIGTERM: stopping after this step with a checkpoint "
      "(again to stop at once)\n";
  if (signal == SIGINT)
    (void)!::write(2, intText, sizeof(intText) - 1);
  else
    (void)!::write(2, termText, sizeof(termText) - 1);
}

void installStopHandlers(bool quiet) {
  stopQuiet = quiet;
  // A file over RLIMIT_FSIZE: write(2) fails with EFBIG and the checkpoint
  // write reports it, instead of SIGXFSZ killing the process.
  ::signal(SIGXFSZ, SIG_IGN);
  struct sigaction action = {};
  action.sa_sigaction = onStopSignal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  ::sigaction(SIGINT, &action, &replacedInt);
  ::sigaction(SIGTERM, &action, &replacedTerm);
}

const char *signalName(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "signal";
}

void printUsage(llvm::raw_ostream &os) {
  os << "usage: llmc run CONFIG.yaml [--resume[=CHECKPOINT]] [--KEY VALUE "
        "...]\n\n"
        "Trains the model of a training config on the CPU: writes "
        "OUT/metrics.jsonl (one JSON\nobject per logged step and per "
        "evaluation), OUT/loss.svg (the loss curves),\n"
        "OUT/checkpoints/step-NNNNNN.ckpt and OUT/config.yaml (the resolved "
        "config).\n\n"
        "Under a launcher (scripts/mpirun.sh -np N, mpirun, srun) the "
        "processes form a mesh\ndp x tp x pp (--dp, --tp, --pp; parallel.dp, "
        "parallel.tp, parallel.pp): world size\n= dp * tp * pp, ranks "
        "tp-fastest (rank = (pp_i * dp + dp_i) * tp + tp_i). --tp N splits\n"
        "attention heads, MLP hidden units and the vocabulary over N ranks "
        "(Megatron-LM);\n--dp defaults to world / (tp * pp) and shards the "
        "batch (--zero 0-3); --pp N\ncuts the blocks into N FLOP-balanced "
        "stages run in the 1F1B order over the\nmicro-batches (CPU only; with ZeRO over "
        "each stage's dp group, bf16, fp16\nand 2:4 sparsity). Rank 0 logs "
        "and writes; checkpoints of a ZeRO run have one\nfile per rank.\n\n"
        "Options:\n"
        "  --resume              continue from the latest good checkpoint in "
        "OUT (a damaged\n"
        "                        newer one is renamed *.damaged, with a "
        "warning)\n"
        "  --resume=CHECKPOINT   continue from this checkpoint file\n"
        "  --print-config        print the resolved config and exit\n"
        "  --timings             print the wall and CPU seconds of each "
        "start-up phase (config,\n"
        "                        data, IR build, passes and lowering, kernels "
        "and buffers of each\n"
        "                        program, weights, sgemm peak, ...) before "
        "the first step\n"
        "  --help                this text\n\n"
        "Stopping: SIGINT (Ctrl-C) or SIGTERM (Slurm's preemption and time "
        "limit) finish the\n"
        "current step, write a checkpoint and exit with status 128 + the "
        "signal (130, 143);\n"
        "--resume continues it exactly. A second signal stops at once. A "
        "checkpoint that\n"
        "cannot be written (disk full) stops the run with status 1; the "
        "previous ones stay\n"
        "intact. Exit status 0: the run finished.\n\n";
  printTrainingConfigHelp(os);
}

std::string joinPath(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

void registerDialects(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<LlmcDialect, func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
}

/// Builds the modules a run compiles: @forward for (micro-batch, length),
/// from the config or (one length only) the .mlir file.
class ModelSource {
public:
  ModelSource(MLIRContext &context, const TrainingConfig &config,
              std::shared_ptr<llvm::SourceMgr> sourceMgr)
      : context(context), config(config), sourceMgr(std::move(sourceMgr)) {}

  /// `batch` 0: the micro-batch size.
  llvm::Expected<OwningOpRef<ModuleOp>> build(int64_t seqLen, bool withDropout,
                                              int64_t batch = 0) {
    if (config.modelMlirPath.empty()) {
      ModelConfig model = config.model;
      if (!withDropout)
        model.dropout = 0;
      return buildForwardModule(
          context, model, {batch ? batch : config.microBatchSize, seqLen});
    }
    std::string error;
    std::unique_ptr<llvm::MemoryBuffer> buffer =
        openInputFile(config.modelMlirPath, &error);
    if (!buffer)
      return llvm::createStringError("cannot read '" + config.modelMlirPath +
                                     "': " + error);
    sourceMgr->AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
    OwningOpRef<ModuleOp> module =
        parseModuleSource(sourceMgr, &context);
    if (!module)
      return llvm::createStringError(config.modelMlirPath +
                                     ": cannot parse the model");
    PassManager pm(&context);
    pm.addPass(createVerifyLegalityPass());
    if (failed(pm.run(*module)))
      return llvm::createStringError(config.modelMlirPath +
                                     ": not a valid llmc model");
    ModelInfo info = getModelInfo(*module);
    llvm::ArrayRef<int64_t> shape = info.tokens.getShape();
    if (shape.size() != 2 || shape[0] != config.microBatchSize ||
        shape[1] != seqLen)
      return llvm::createStringError(llvm::formatv(
          "{0}: @forward takes tokens [{1}], the config trains [{2}, {3}] "
          "(micro_batch_size, seq_len)",
          config.modelMlirPath, llvm::make_range(shape.begin(), shape.end()),
          config.microBatchSize, seqLen));
    return module;
  }

private:
  MLIRContext &context;
  const TrainingConfig &config;
  std::shared_ptr<llvm::SourceMgr> sourceMgr;
};

/// Where the steps run: the persistent tensors of the run and executors
/// bound to them, on the CPU or on a CUDA GPU.
struct Device {
  std::shared_ptr<rt::TensorStore> store;
  std::shared_ptr<rt::PersistentStore> hostStore;
#ifdef LLMC_HAVE_NVRTC
  std::shared_ptr<rt::CudaPersistentStore> cudaStore;
#endif
  int threads = 0;
  int cudaDevice = 0; // --device cuda: the GPU of this rank
  /// Where progress lines go: stdout on rank 0, nowhere on the others.
  llvm::raw_ostream *log = &llvm::outs();
  /// The communicators of the mesh axes the programs' collectives use.
  rt::Mesh mesh;
  /// Where the resident set stood after each phase of the setup.
  rt::MemoryPhases *phases = nullptr;
  /// The start-up clock (--timings).
  ::llmc::StartupTimings *timings = nullptr;
};

/// This process's index among the ranks on its machine, as launchers tell
/// it (Open MPI, Slurm, MPICH, torchrun); 0 without one.
int localRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                           "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name)) {
      int rank = 0;
      if (!llvm::StringRef(value).getAsInteger(10, rank) && rank >= 0)
        return rank;
    }
  return 0;
}

llvm::Expected<Device> openDevice(const TrainingConfig &config) {
  Device device;
  device.threads = int(config.threads);
  if (config.device == "cpu") {
    device.hostStore = std::make_shared<rt::PersistentStore>();
    device.store = device.hostStore;
    return device;
  }
#ifdef LLMC_HAVE_NVRTC
  // One GPU per rank of a machine: local rank r takes device r mod count.
  llvm::Expected<const ::llmc::cuda::DriverApi *> driver =
      ::llmc::cuda::loadDriver();
  if (!driver)
    return driver.takeError();
  int count = 0;
  if ((*driver)->init(0) == CUDA_SUCCESS)
    (*driver)->deviceGetCount(&count);
  device.cudaDevice = count > 0 ? localRank() % count : 0;
  auto store = rt::CudaPersistentStore::create(device.cudaDevice);
  if (!store)
    return store.takeError();
  device.cudaStore = *store;
  device.store = *store;
  return device;
#else
  return llvm::createStringError(
      "device: cuda: this llmc was built without the CUDA toolkit");
#endif
}

/// The memory left where the run's tensors go: the GPU's free memory, or
/// the host's; nullopt when it cannot be told.
std::optional<rt::AvailableMemory> availableMemory(const Device &device) {
#ifdef LLMC_HAVE_NVRTC
  if (device.cudaStore) {
    llvm::Expected<const ::llmc::cuda::DriverApi *> driver =
        ::llmc::cuda::loadDriver();
    if (!driver) {
      llvm::consumeError(driver.takeError());
      return std::nullopt;
    }
    size_t free = 0, total = 0;
    if ((*driver)->memGetInfo(&free, &total) != CUDA_SUCCESS)
      return std::nullopt;
    return rt::AvailableMemory{
        int64_t(free),
        llvm::formatv("the free memory of GPU {0}", device.cudaDevice).str()};
  }
#endif
  return rt::availableHostMemory();
}

/// Creates an executor bound to the device's store, compiling its kernels
/// or loading them from the kernel cache (JIT on the CPU, NVRTC on a GPU).
llvm::Expected<std::unique_ptr<rt::Executor>>
makeExecutor(::llmc::kir::Program program, const Device &device,
             llvm::StringRef what) {
#ifdef LLMC_HAVE_NVRTC
  if (device.cudaStore) {
    rt::CudaExecutorOptions options;
    options.store = device.cudaStore;
    options.device = device.cudaDevice;
    size_t numKernels = program.kernels.size();
    auto start = std::chrono::steady_clock::now();
    auto executor = rt::CudaExecutor::create(
        std::move(program), ::llmc::cuda::cudaCompiler(), options);
    if (!executor)
      return executor.takeError();
    if (llvm::Error err = (*executor)->setMesh(device.mesh))
      return err;
    if (device.phases)
      device.phases->end((what + ": kernels and buffers").str());
    *device.log << llvm::format(
        "llmc run: %-24s %3zu kernels for the GPU (%.2f s)\n",
        what.str().c_str(), numKernels,
        std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                      start)
            .count());
    return std::unique_ptr<rt::Executor>(std::move(*executor));
  }
#endif
  int threads = device.threads;
  std::shared_ptr<rt::PersistentStore> store = device.hostStore;
  std::vector<::llmc::kir::Kernel> kernels = program.kernels;
  ::llmc::cpu::CacheStats stats;
  // A cache miss compiles the kernels on every core the run uses, in runs
  // of consecutive kernels linked as one (a bundle of objects).
  int parts = threads > 0
                  ? threads
                  : std::max(1, int(std::thread::hardware_concurrency()));
  auto compile = [&]() -> llvm::Expected<llvm::SmallVector<char, 0>> {
    auto objects = ::llmc::cpu::compileKernelsToObjects(kernels, parts);
    if (!objects)
      return objects.takeError();
    return ::llmc::cpu::bundleObjects(*objects);
  };
  auto executor = rt::createCpuExecutor(std::move(program), compile, threads,
                                        &stats, {}, std::move(store));
  if (!executor)
    return executor.takeError();
  if (llvm::Error err = (*executor)->setMesh(device.mesh))
    return err;
  if (device.phases)
    device.phases->end((what + ": kernels and buffers").str());
  if (device.timings)
    device.timings->end(
        (what + (stats.hit ? ": kernel cache" : ": JIT") + ", buffers").str());
  *device.log << llvm::format(
      "llmc run: %-24s %3zu kernels %s (%.2f s)\n", what.str().c_str(),
      kernels.size(), stats.hit ? "from the kernel cache" : "JIT-compiled",
      stats.hit ? stats.loadSeconds : stats.compileSeconds + stats.loadSeconds);
  if (!stats.warning.empty())
    llvm::errs() << "llmc run: warning: " << stats.warning << "\n";
  return std::unique_ptr<rt::Executor>(std::move(*executor));
}

std::string jsonText(const llvm::json::Value &value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value;
  return text;
}

/// The runtime's trainer options from the training config: the one place
/// they are filled (the runtime cannot read the config, frontend/ is a
/// layer above it). The schedules go in as functions of the step.
rt::TrainerOptions trainerOptions(const TrainingConfig &config) {
  rt::TrainerOptions options;
  ::llmc::BatchSchedule batches = config.batchSchedule();
  options.stepShape = [batches](int64_t step, int64_t consumedSamples) {
    ::llmc::StepShape shape = batches.at(step, consumedSamples);
    return rt::StepShape{shape.globalBatch, shape.seqLen};
  };
  options.learningRate = [schedule = config.schedule](int64_t step) {
    return schedule.at(step);
  };
  options.microBatch = batches.microBatch;
  options.maxGlobalBatch = batches.globalBatch;
  options.maxSteps = config.maxSteps;
  options.pruneAtStep =
      config.sparsity.enabled ? config.sparsity.pruneAtStep : -1;
  options.logInterval = config.logInterval;
  options.evalInterval = config.evalInterval;
  options.evalSteps = config.evalSteps;
  options.sampleTokens = config.sampleTokens;
  options.checkpointInterval = config.checkpointInterval;
  options.keepCheckpoints = config.keepCheckpoints;
  options.seed = config.seed;
  options.outDir = config.out;
  const ::llmc::GuardConfig &guard = config.guard;
  // The schema checked the name.
  options.guard.action =
      rt::parseGuardAction(guard.action).value_or(rt::GuardAction::Warn);
  options.guard.window = guard.window;
  options.guard.zscore = guard.zscore;
  options.guard.ratio = guard.ratio;
  options.guard.maxGradNormRatio = guard.maxGradNormRatio;
  options.guard.snapshotInterval = guard.snapshotInterval;
  options.guard.lrFactor = guard.lrFactor;
  options.guard.cooldown = guard.cooldown;
  options.guard.maxRollbacks = guard.maxRollbacks;
  return options;
}

} // namespace

int runTrainCommand(int argc, char **argv) {
  // argv[0] is "run".
  ::llmc::StartupTimings timings;
  auto timingsStart = std::chrono::steady_clock::now();
  std::string configPath, resume;
  bool resumeLatest = false, printConfig = false, printTimings = false;
  std::vector<std::string> flags;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      printUsage(llvm::outs());
      return 0;
    }
    if (arg == "--resume") {
      // `--resume PATH` when PATH is a checkpoint file, else the latest.
      if (i + 1 < argc && llvm::StringRef(argv[i + 1]).ends_with(".ckpt"))
        resume = argv[++i];
      else
        resumeLatest = true;
      continue;
    }
    if (arg.consume_front("--resume=")) {
      resume = arg.str();
      continue;
    }
    if (arg == "--print-config") {
      printConfig = true;
      continue;
    }
    if (arg == "--timings") {
      printTimings = true;
      continue;
    }
    if (arg.starts_with("-")) {
      flags.push_back(arg.str());
      bool hasValue = arg.contains('=');
      if (!hasValue && i + 1 < argc &&
          !llvm::StringRef(argv[i + 1]).starts_with("--"))
        flags.push_back(argv[++i]);
      continue;
    }
    if (!configPath.empty())
      return fail("more than one config given ('" + configPath + "', '" +
                  arg + "'); usage: llmc run CONFIG.yaml [--KEY VALUE ...]");
    configPath = arg.str();
  }
  if (configPath.empty()) {
    printUsage(llvm::errs());
    return fail("no training config given");
  }

  // 1. The config; nothing is written before it, the data, the checkpoint
  //    and the compiled programs are all known to be good.
  llvm::Expected<TrainingConfig> loaded = loadTrainingConfig(configPath, flags);
  if (!loaded)
    return fail(loaded.takeError());
  TrainingConfig config = std::move(*loaded);

  // The ranks: one process, or the world of a launcher (mpirun, srun).
  ::llmc::runtime::comm::CommOptions commOptions;
  commOptions.timeoutSeconds = config.parallel.timeoutSeconds;
  llvm::Expected<std::unique_ptr<rt::comm::Communicator>> createdWorld =
      rt::comm::createWorld(commOptions);
  if (!createdWorld)
    return fail(createdWorld.takeError());
  std::unique_ptr<rt::comm::Communicator> world = std::move(*createdWorld);
  const int rank = world->rank(), worldSize = world->size();
  // From here on an error on one rank ends the job: the other ranks may be
  // waiting in a collective for this one.
  auto fail = [&](auto &&error) -> int {
    std::string text = toMessage(std::forward<decltype(error)>(error));
    if (worldSize == 1)
      return ::fail(text);
    // Collectives' errors name their rank already.
    if (!llvm::StringRef(text).starts_with("rank "))
      text = "rank " + std::to_string(rank) + ": " + text;
    ::fail(text);
    llvm::errs().flush();
    world->abort(1); // ends every rank of the job
    return 1;
  };
  // The mesh: dp x tp x pp ranks; dp defaults to what tp and pp leave.
  const int64_t tpSize = config.parallel.tp, ppSize = config.parallel.pp;
  if (config.origins.count("parallel.dp")) {
    int64_t mesh = config.parallel.dp * tpSize * ppSize;
    if (mesh != worldSize)
      return fail(llvm::formatv(
          "the mesh dp={0} x tp={1} x pp={2} needs {3} rank{4} but the job "
          "has {5}{6}",
          config.parallel.dp, tpSize, ppSize, mesh, mesh == 1 ? "" : "s",
          worldSize,
          worldSize == 1
              ? llvm::formatv(": start it with a launcher, e.g. "
                              "scripts/mpirun.sh -np {0} llmc run ...",
                              mesh)
                    .str()
              : std::string()).str());
  } else if (worldSize % (tpSize * ppSize) != 0) {
    return fail(llvm::formatv(
        "the job has {0} rank{1}, which is not a multiple of tp={2} x pp={3}"
        "{4}",
        worldSize, worldSize == 1 ? "" : "s", tpSize, ppSize,
        worldSize == 1 ? llvm::formatv(": start it with a launcher, e.g. "
                                       "scripts/mpirun.sh -np {0} llmc run ...",
                                       tpSize * ppSize)
                             .str()
                       : std::string()).str());
  } else {
    config.parallel.dp = worldSize / (tpSize * ppSize);
  }
  if (ppSize > 1) {
    // What pipeline parallelism does not compose with yet.
    if (config.device != "cpu")
      return fail("--pp on --device " + config.device +
                  " is not implemented yet (the stages' transfers run on "
                  "MPI, on the CPU)");
    if (config.modelMlirPath.empty() && ppSize > config.model.nLayer)
      return fail(llvm::formatv(
          "--pp {0} is more than the model's {1} transformer blocks: every "
          "pipeline stage needs at least one; choose a pp of at most {1}",
          ppSize, config.model.nLayer).str());
  }
  if (tpSize > 1 && config.parallel.dp > 1 && config.parallel.zero == 3)
    return fail("parallel.zero 3 with tensor parallelism is not implemented "
                "yet (the tp shares of the parameters would be cut again "
                "into ZeRO-3 blocks); use zero 0, 1 or 2 with tp");
  if (config.parallel.dp == 1 && config.parallel.zero > 0)
    llvm::errs() << "llmc run: warning: parallel.zero " << config.parallel.zero
                 << " shards state over data-parallel ranks; one process "
                    "holds it all\n";
  if (printConfig) {
    if (rank == 0)
      printTrainingConfig(config, llvm::outs());
    return 0;
  }
  llvm::raw_ostream &out = rank == 0 ? llvm::outs() : llvm::nulls();
  if (worldSize > 1) {
    // Every rank must train the same thing: the resolved configs' hashes
    // are compared before anything else happens.
    std::string text;
    llvm::raw_string_ostream os(text);
    printTrainingConfig(config, os);
    int64_t hash = int64_t(llvm::xxh3_64bits(text));
    std::vector<int64_t> hashes(worldSize);
    rt::comm::Ticket ticket = world->allGather(
        &hash, hashes.data(), 1, ::llmc::kir::DType::I64);
    if (llvm::Error err = world->wait(ticket))
      return fail(std::move(err));
    for (int other = 0; other < worldSize; ++other)
      if (hashes[other] != hashes[0])
        return fail(llvm::formatv(
            "the config of rank {0} differs from rank 0's (resolved config "
            "hash {1:x} vs {2:x}): every rank must run the same config and "
            "flags",
            other, uint64_t(hashes[other]), uint64_t(hashes[0])).str());
    out << llvm::format("llmc run: %d ranks (%s), mesh dp=%lld x tp=%lld x "
                        "pp=%lld (tp fastest), zero %lld, gradient buckets "
                        "of %g MiB\n",
                        worldSize, world->backend(),
                        (long long)config.parallel.dp, (long long)tpSize,
                        (long long)ppSize, (long long)config.parallel.zero,
                        config.parallel.bucketMb);
    if (config.parallel.sp)
      out << llvm::format("llmc run: sequence parallel: the residual stream "
                          "is [B, T/%lld, C] per tp rank\n",
                          (long long)tpSize);
  }
  timings.end("config");
  // One communicator per mesh axis of more than one rank.
  std::unique_ptr<rt::comm::Communicator> dpAxis, tpAxis, ppAxis, ppTiedAxis;
  if (worldSize > 1) {
    llvm::Expected<rt::comm::MeshAxes> axes = rt::comm::splitMesh(
        *world, {int(config.parallel.dp), int(tpSize), int(ppSize)});
    if (!axes)
      return fail(axes.takeError());
    dpAxis = std::move(axes->dp);
    tpAxis = std::move(axes->tp);
    ppAxis = std::move(axes->pp);
  }
  if (ppAxis) {
    // 1F1B: every dp rank runs m = global / (micro * dp) micro-batches
    // through the stages; the pipeline idles (p-1)/(m+p-1) of a step,
    // the bubble `llmc plan` counts.
    int64_t microBatches =
        config.globalBatchSize / (config.microBatchSize * config.parallel.dp);
    out << llvm::format("llmc run: pipeline of %lld stages, 1F1B over %lld "
                        "micro-batches per step: bubble (p-1)/(m+p-1) = "
                        "%.4f\n",
                        (long long)ppSize, (long long)microBatches,
                        double(ppSize - 1) /
                            double(microBatches + ppSize - 1));
    // The first and the last stage share the tied parameters' gradients:
    // on 2 stages the pp axis itself, on more a split of it.
    int stage = ppAxis->rank();
    bool ends = stage == 0 || stage == int(ppSize) - 1;
    llvm::Expected<std::unique_ptr<rt::comm::Communicator>> tied =
        ppAxis->split(ends ? 0 : 1, stage, "pp");
    if (!tied)
      return fail(tied.takeError());
    if (ends)
      ppTiedAxis = std::move(*tied);
  }

  // 2. The data. From here on the resident set is followed by phase, for
  //    the memory report at the end of the run.
  rt::MemoryPhases memoryPhases;
  llvm::Expected<std::unique_ptr<data::Tokenizer>> tokenizer =
      data::loadTokenizer(config.data.tokenizer);
  if (!tokenizer)
    return fail(tokenizer.takeError());
  if (config.modelMlirPath.empty() &&
      (*tokenizer)->vocabSize() > config.model.vocabSize)
    return fail(llvm::formatv("the tokenizer ({0}) has {1} tokens, more than "
                              "the model's vocab_size ({2})",
                              (*tokenizer)->describe(),
                              (*tokenizer)->vocabSize(),
                              config.model.vocabSize)
                    .str());
  data::DataOptions dataOptions;
  dataOptions.trainFiles = config.data.train;
  dataOptions.valFiles = config.data.val;
  dataOptions.valFraction = config.data.valFraction;
  llvm::Expected<data::TokenSplits> splits =
      data::loadTokenSplits(dataOptions, **tokenizer);
  if (!splits)
    return fail(splits.takeError());
  auto trainTokens =
      std::make_shared<const std::vector<int32_t>>(std::move(splits->train));
  auto valTokens =
      std::make_shared<const std::vector<int32_t>>(std::move(splits->val));
  llvm::Expected<data::BatchLoader> trainLoader = data::BatchLoader::create(
      trainTokens, config.microBatchSize, config.seqLen, config.seed,
      /*shuffle=*/true);
  if (!trainLoader)
    return fail("training data (" + llvm::join(config.data.train, ", ") +
                "): " + llvm::toString(trainLoader.takeError()));
  auto train = std::make_shared<data::BatchLoader>(std::move(*trainLoader));
  std::shared_ptr<data::BatchLoader> val;
  if (int64_t(valTokens->size()) > config.microBatchSize * config.seqLen) {
    llvm::Expected<data::BatchLoader> valLoader = data::BatchLoader::create(
        valTokens, config.microBatchSize, config.seqLen, config.seed,
        /*shuffle=*/false);
    if (!valLoader)
      return fail("validation data: " +
                  llvm::toString(valLoader.takeError()));
    val = std::make_shared<data::BatchLoader>(std::move(*valLoader));
  } else if (config.evalSteps > 0) {
    llvm::errs() << "llmc run: warning: "
                 << (valTokens->empty()
                         ? "no validation data (set data.val or "
                           "data.val_fraction)"
                         : "too little validation data for one batch")
                 << "; no validation loss\n";
  }

  memoryPhases.end("data loading");
  timings.end("data");

  // 3. The checkpoint to resume from, checked before anything is compiled.
  std::string checkpointDir = joinPath(config.out, "checkpoints");
  std::optional<rt::Checkpoint> checkpoint;
  std::map<std::string, std::string> sections = resumeSections(config);
  // A damaged newer checkpoint is set aside once OUT may be written.
  std::vector<rt::DamagedCheckpoint> damaged;
  std::optional<rt::Checkpoint> latest;
  if (resumeLatest && resume.empty()) {
    llvm::Expected<std::pair<std::string, rt::Checkpoint>> found =
        rt::readLatestGoodCheckpoint(checkpointDir, damaged);
    if (!found)
      return fail("--resume: " + toMessage(found.takeError()));
    resume = found->first;
    latest = std::move(found->second);
    if (rank == 0)
      for (const rt::DamagedCheckpoint &d : damaged)
        llvm::WithColor::warning(llvm::errs(), "llmc run")
            << "--resume: skipping the damaged checkpoint " << d.path << ": "
            << d.reason << "; resuming from the newest good one, " << resume
            << "\n";
  }
  if (!resume.empty()) {
    llvm::Expected<rt::Checkpoint> read =
        latest ? std::move(*latest) : rt::readCheckpoint(resume);
    if (!read)
      return fail(read.takeError());
    std::string difference =
        rt::describeConfigDifference(read->config, sections);
    if (!difference.empty())
      return fail(resume +
                  ": cannot resume: the config differs from the one the "
                  "checkpoint was trained with:\n" +
                  llvm::StringRef(difference).rtrim() +
                  "\n(model, optimizer and data must match; steps, "
                  "intervals and the output directory may change)");
    checkpoint = std::move(*read);
  } else if (!rt::listCheckpoints(checkpointDir).empty()) {
    return fail("'" + config.out +
                "' already holds checkpoints of a run; continue it with "
                "--resume or choose another --out");
  }

  // 4. Compile: the training step at the full length, evaluation without
  //    dropout, and grad steps for shorter lengths when they are needed.
  MLIRContext context;
  registerDialects(context);
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  SourceMgrDiagnosticHandler diagnostics(*sourceMgr, &context);
  ModelSource source(context, config, sourceMgr);
  llvm::Expected<Device> device = openDevice(config);
  if (!device)
    return fail(device.takeError());
  device->log = &out;
  device->phases = &memoryPhases;
  device->timings = &timings;
  // The programs' collectives: on the host's MPI communicator of each
  // axis, or on the GPU through an NCCL communicator per axis group (its
  // unique id shared over that group's MPI communicator).
  std::unique_ptr<rt::comm::Communicator> deviceDp, deviceTp;
  for (auto [name, host, onDevice] :
       {std::tuple{"dp", dpAxis.get(), &deviceDp},
        std::tuple{"tp", tpAxis.get(), &deviceTp}}) {
    if (!host)
      continue;
#ifdef LLMC_HAVE_NVRTC
    if (device->cudaStore) {
      llvm::Expected<std::unique_ptr<rt::comm::Communicator>> nccl =
          rt::comm::createNccl(*host, device->cudaDevice, commOptions);
      if (!nccl)
        return fail(nccl.takeError());
      *onDevice = std::move(*nccl);
    }
#endif
    device->mesh.axes[name] = *onDevice ? onDevice->get() : host;
  }
  // Pipeline transfers and the stages' norm sum: on the host (CPU only).
  if (ppAxis)
    device->mesh.axes["pp"] = ppAxis.get();

  // What shapes the compiled programs; under tensor parallelism each rank
  // compiles its own (its block of the vocabulary).
  ::llmc::TrainingOptions training = config.training();
  training.tpRank = tpAxis ? tpAxis->rank() : 0;
  training.ppStage = ppAxis ? ppAxis->rank() : 0;
  training.forCuda = config.device != "cpu";

  auto compileStart = std::chrono::steady_clock::now();
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      source.build(config.seqLen, /*withDropout=*/true);
  if (!module)
    return fail(module.takeError());
  ModelInfo info = getModelInfo(**module);
  // Pipeline parallelism: the parameters the first and the last stage
  // both hold (a tied wte), as the pass marks them on the last stage.
  std::vector<std::string> ppTiedParams;
  if (ppAxis) {
    // The cut, once for every program of the run (its FLOPs per block
    // depend on the sequence length): the one `llmc plan` counts.
    auto whole = (*module)->lookupSymbol<func::FuncOp>("forward");
    mlir::llmc::PipelineCosts costs = mlir::llmc::pipelineCostsOf(whole);
    int64_t blocks = static_cast<int64_t>(costs.blocks.size());
    if (blocks < ppSize)
      return fail(llvm::formatv(
          "--pp {0} is more than the {1} transformer blocks (parameters "
          "h.<i>.*) of {2}: every pipeline stage needs at least one",
          ppSize, blocks,
          config.modelMlirPath.empty() ? "the model" : config.modelMlirPath)
                      .str());
    mlir::llmc::PipelineCut cut = mlir::llmc::balancePipeline(costs, ppSize);
    training.ppStageBlocks = cut.firstBlocks;
    out << "llmc run: pipeline cut by FLOPs per token: "
        << mlir::llmc::describePipelineCut(cut) << "\n";
    OwningOpRef<ModuleOp> last = (*module)->clone();
    PassManager pm(&context);
    mlir::llmc::PipelineParallelPassOptions lastStage;
    lastStage.pp = ppSize;
    lastStage.stage = ppSize - 1;
    lastStage.stageBlocks.assign(cut.firstBlocks.begin(),
                                 cut.firstBlocks.end());
    pm.addPass(mlir::llmc::createPipelineParallelPass(lastStage));
    if (failed(pm.run(*last)))
      return fail("cutting the model into pipeline stages failed (see the "
                  "diagnostics above)");
    auto forward = last.get().lookupSymbol<func::FuncOp>("forward");
    for (unsigned i = 0; i < forward.getNumArguments(); ++i)
      if (forward.getArgAttr(i, "llmc.pp_tied"))
        ppTiedParams.push_back(
            forward.getArgAttrOfType<StringAttr>(i, "llmc.param").str());
  }
  timings.end("checkpoint check, context, IR build");
  llvm::Expected<::llmc::TrainingPrograms> programs =
      ::llmc::compileTraining(**module, training);
  if (!programs)
    return fail(programs.takeError());
  // Tensor parallelism: the parameters llmc-tensor-parallel split, and how.
  std::map<std::string, rt::TpShard> tpShards;
  if (auto forward = (*module)->lookupSymbol<func::FuncOp>("forward"))
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      auto name = forward.getArgAttrOfType<StringAttr>(i, "llmc.param");
      auto shard = forward.getArgAttrOfType<DictionaryAttr>(i, "llmc.tp_shard");
      if (!name || !shard)
        continue;
      auto field = [&](StringRef key, int64_t absent) {
        auto value = shard.getAs<IntegerAttr>(key);
        return value ? value.getInt() : absent;
      };
      tpShards[name.str()] = {field("dim", 1), field("groups", 1),
                              field("size", 1), field("pad", 0)};
    }
  memoryPhases.end("building and lowering the training step");
  timings.end("passes and lowering");
  std::string modelName = info.name.empty() ? "model" : info.name;
  out << llvm::formatv(
      "llmc run: model {0}: {1} parameters in {2} tensors; training step "
      "({4}, remat {5}) built and lowered in {3:f2} s\n",
      modelName, info.numParameters, info.parameters.size(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    compileStart)
          .count(),
      ::llmc::stringifyPrecision(config.precision.kind),
      ::llmc::stringifyRematPolicy(config.remat.policy));

  // Before any kernel is compiled: a run that cannot fit fails now.
  std::vector<const ::llmc::kir::Program *> planned = {
      &programs->gradStep, &programs->updateStep, &programs->forward};
  for (const auto *optional : {&programs->gradStepNoSync, &programs->shardInit,
                               &programs->castWeights})
    if (optional->has_value())
      planned.push_back(&**optional);
  if (std::optional<rt::AvailableMemory> available = availableMemory(*device))
    if (llvm::Error error = rt::checkMemoryFits(
            rt::memoryNeed(planned), *available, "the training step",
            /*training=*/true))
      return fail(std::move(error));
  timings.end("memory check");

  auto grad = makeExecutor(std::move(programs->gradStep), *device,
                           llvm::formatv("grad step (T={0})", config.seqLen).str());
  if (!grad)
    return fail(grad.takeError());
  auto update =
      makeExecutor(std::move(programs->updateStep), *device,
                   "update step");
  if (!update)
    return fail(update.takeError());
  // 1F1B's forward half: the stage's training @forward (dropout as in
  // the grad step).
  std::unique_ptr<rt::Executor> pipelineForward;
  if (ppAxis) {
    auto created = makeExecutor(::llmc::kir::Program(programs->forward),
                                *device, "forward (pipeline stage)");
    if (!created)
      return fail(created.takeError());
    pipelineForward = std::move(*created);
  }
  ::llmc::kir::Program evalProgram = std::move(programs->forward);
  bool dropout = config.modelMlirPath.empty() && config.model.dropout > 0;
  if (dropout) {
    llvm::Expected<OwningOpRef<ModuleOp>> evalModule =
        source.build(config.seqLen, /*withDropout=*/false);
    if (!evalModule)
      return fail(evalModule.takeError());
    llvm::Expected<::llmc::kir::Program> lowered =
        ::llmc::compileForward(**evalModule, training);
    if (!lowered)
      return fail(lowered.takeError());
    evalProgram = std::move(*lowered);
    timings.end("forward (evaluation): IR build, lowering");
  }
  auto eval = makeExecutor(std::move(evalProgram), *device,
                           "forward (evaluation)");
  if (!eval)
    return fail(eval.takeError());
  // Samples draw one sequence at a time: a forward for one sequence saves
  // running the whole micro-batch per token.
  std::unique_ptr<rt::Executor> sampler;
  if (config.sampleTokens > 0 && ppAxis) {
    out << "llmc run: no samples under pipeline parallelism yet (each "
           "token would need a pass through every stage)\n";
    config.sampleTokens = 0;
  }
  if (config.sampleTokens > 0 && config.modelMlirPath.empty() &&
      config.microBatchSize > 1) {
    llvm::Expected<OwningOpRef<ModuleOp>> samplerModule =
        source.build(config.seqLen, /*withDropout=*/false, /*batch=*/1);
    if (!samplerModule)
      return fail(samplerModule.takeError());
    llvm::Expected<::llmc::kir::Program> lowered =
        ::llmc::compileForward(**samplerModule, training);
    if (!lowered)
      return fail(lowered.takeError());
    timings.end("forward (samples): IR build, lowering");
    auto created = makeExecutor(std::move(*lowered), *device,
                                "forward (samples)");
    if (!created)
      return fail(created.takeError());
    sampler = std::move(*created);
  }

  // 5. Weights: a checkpoint, --init-from, or the seeded initialization.
  //    ZeRO-3 has no full parameters to set: they go to the trainer,
  //    which cuts every rank's blocks from them.
  //    Under tensor parallelism every rank makes the whole weights too
  //    and keeps its share of the split ones: one process's model, cut.
  bool zero3 = config.parallel.dp > 1 && config.parallel.zero == 3;
  std::optional<rt::TensorMap> initialParams;
  if (!checkpoint && (zero3 || !tpShards.empty() || ppAxis)) {
    std::vector<rt::ParamSpec> specs;
    for (const ParameterInfo &param : info.parameters)
      specs.push_back({param.name, std::vector<int64_t>(param.type.getShape().begin(), param.type.getShape().end())});
    llvm::Expected<rt::TensorMap> params = rt::readWeights(
        specs, (*eval)->program(), config.initFrom, config.seed);
    if (!params)
      return fail(params.takeError());
    if (zero3) {
      initialParams = std::move(*params);
    } else {
      for (auto &[name, tensor] : *params) {
        rt::HostTensor value = std::move(tensor);
        // Pipeline parallelism: another stage's parameter.
        if (!llvm::any_of((*eval)->program().params,
                          [&](const ::llmc::kir::Binding &input) {
                            return input.name == name;
                          }))
          continue;
        if (auto it = tpShards.find(name); it != tpShards.end()) {
          llvm::Expected<rt::HostTensor> mine =
              rt::cutTpShard(value, it->second, tpAxis->rank());
          if (!mine)
            return fail("'" + name + "': " + toMessage(mine.takeError()));
          value = std::move(*mine);
        }
        if (llvm::Error err = (*eval)->setTensor(name, value))
          return fail(std::move(err));
      }
    }
  } else if (!checkpoint) {
    if (llvm::Error err =
            rt::loadWeights(**eval, config.initFrom, config.seed))
      return fail(std::move(err));
  }
  memoryPhases.end("weights");
  timings.end(checkpoint ? "weights (from the checkpoint, later)"
                         : config.initFrom.empty() ? "weights: seeded initialization"
                                                   : "weights: --init-from");

  // 6. The trainer.
  rt::TrainerOptions options = trainerOptions(config);
  if (!val)
    options.evalSteps = 0;
  options.configSections = sections;
  options.log = rank == 0 ? &llvm::outs() : nullptr;
  // Progress: on a terminal a live status line under the logged lines.
  std::unique_ptr<rt::StatusConsole> console;
  if (rank == 0 && (config.progress == "bar" ||
                    (config.progress == "auto" &&
                     llvm::outs().is_displayed()))) {
    unsigned columns = llvm::sys::Process::StandardOutColumns();
    console = std::make_unique<rt::StatusConsole>(llvm::outs(),
                                                  columns ? columns : 100);
    options.log = console.get();
    options.console = console.get();
  }
  // MFU: the planner's model FLOPs per token against the sgemm peak of
  // this machine's cores, measured now with the BLAS the kernels call
  // (every rank at once: under mpirun they share the machine).
  int remeasurePeakThreads = 0; // > 0: measure the sgemm peak at the end
  if (config.device == "cpu") {
    llvm::Expected<plan::PlanModel> planModel =
        config.modelMlirPath.empty()
            ? plan::analyzeModel(context, config.model)
            : plan::loadPlanModel(context, config.modelMlirPath);
    if (!planModel)
      return fail(planModel.takeError());
    options.modelFlopsPerToken =
        plan::modelFlopsPerToken(*planModel, config.seqLen);
    timings.end("model FLOPs (planner)");
    int peakThreads = device->threads > 0
                          ? device->threads
                          : std::max(1, int(std::thread::hardware_concurrency()));
    // The machine's recorded best when there is one (measuring takes ~0.5 s
    // of both cores at start-up; the run measures again at its end and
    // keeps a better figure); the first run on a machine measures now.
    rt::MachinePeak peak = rt::recordedSgemmPeak(kPeakSgemmSize, peakThreads);
    std::string measured;
    if (peak.bestGflops > 0) {
      remeasurePeakThreads = peakThreads;
      measured = llvm::formatv("this machine's best, recorded in {0}; "
                               "measured again at the end of the run",
                               peak.record)
                     .str();
    } else {
      peak = rt::machineSgemmPeak(kPeakSgemmSize, peakThreads, /*reps=*/3);
      measured =
          llvm::formatv("measured now: {0:f1}", peak.measuredGflops).str();
    }
    options.peakFlops = peak.bestGflops * 1e9;
    if (peak.measuredGflops == 0) // a record: a step faster than it re-measures
      options.remeasurePeakFlops = [peakThreads] {
        return rt::machineSgemmPeak(kPeakSgemmSize, peakThreads, /*reps=*/3)
                   .bestGflops *
               1e9;
      };
    out << llvm::formatv(
        "llmc run: MFU is model FLOPs ({0:e2} per token: 6N + 12 L h s) "
        "against this machine's sgemm peak: {1:f1} GFLOP/s ({2}^3 on {3} "
        "thread(s) per rank, {4}; {5})\n",
        options.modelFlopsPerToken, peak.bestGflops, kPeakSgemmSize,
        peakThreads, measured, rt::describeBlas());
    timings.end("sgemm peak");
  }
  options.dp = dpAxis.get();
  options.tp = tpAxis.get();
  options.pp = ppAxis.get();
  if (ppTiedAxis) {
    options.ppTied = ppTiedAxis.get();
    options.ppTiedParams = ppTiedParams;
  }
  for (const rt::comm::Communicator *comm :
       {dpAxis.get(), tpAxis.get(), ppAxis.get(), ppTiedAxis.get(),
        deviceDp.get(), deviceTp.get()})
    if (comm)
      options.meshComms.push_back(comm);
  options.tpShards = tpShards;
  options.stopRequested = [] { return stopSignal.load(); };
  options.accumulateWithoutSync = config.parallel.zero < 2;
  options.memoryPhases = &memoryPhases;
  // LLMC_FAULT_INJECT=kill:RANK:STEP or hang:RANK:STEP kills (SIGKILL) or
  // stops (SIGSTOP) that rank before that step: how the tests prove that
  // the other ranks stop with a message naming it instead of hanging.
  // int:RANK:STEP and term:RANK:STEP send it SIGINT or SIGTERM there: the
  // clean stop, at a known step. crash-hang:RANK:STEP aborts there with a
  // crash handler that never returns (as a stack trace deadlocked by a
  // corrupted heap would): the crash watchdog must end the process
  // (tools/llmc/CrashWatchdog.h).
  if (const char *fault = std::getenv("LLMC_FAULT_INJECT")) {
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(fault).split(parts, ':');
    int64_t faultRank = -1, faultStep = -1;
    if (parts.size() != 3 ||
        !llvm::is_contained({"kill", "hang", "int", "term", "crash-hang"},
                            parts[0]) ||
        parts[1].getAsInteger(10, faultRank) ||
        parts[2].getAsInteger(10, faultStep))
      return fail(llvm::Twine("LLMC_FAULT_INJECT='") + fault +
                  "': expected kill:RANK:STEP, hang:RANK:STEP, "
                  "int:RANK:STEP, term:RANK:STEP or crash-hang:RANK:STEP");
    int signal = parts[0] == "kill"         ? SIGKILL
                 : parts[0] == "hang"       ? SIGSTOP
                 : parts[0] == "int"        ? SIGINT
                 : parts[0] == "crash-hang" ? SIGABRT
                                            : SIGTERM;
    if (faultRank == rank && signal == SIGABRT)
      options.beforeStep = [faultStep](int64_t step) {
        if (step != faultStep)
          return;
        llvm::sys::AddSignalHandler(
            [](void *) {
              while (true)
                ::pause();
            },
            nullptr);
        std::abort();
      };
    else if (faultRank == rank)
      options.beforeStep = [signal, faultStep](int64_t step) {
        if (step == faultStep)
          raise(signal);
      };
  }

  // LLMC_GUARD_INJECT provokes the spikes and divergences the guard
  // handles (tools/llmc/GuardInject.h).
  if (const char *inject = std::getenv("LLMC_GUARD_INJECT")) {
    llvm::Expected<decltype(options.injectFault)> hook =
        parseGuardInjection(inject);
    if (!hook)
      return fail(hook.takeError());
    options.injectFault = std::move(*hook);
  }

  rt::TrainerData trainerData;
  int64_t fullSeqLen = config.seqLen;
  trainerData.next = [train, fullSeqLen](int64_t seqLen,
                                         std::vector<int32_t> &tokens,
                                         std::vector<int32_t> &targets) {
    data::Batch batch;
    train->next(batch);
    tokens.clear();
    targets.clear();
    // Sequence-length warmup reads whole windows and keeps their start.
    for (int64_t b = 0; b < batch.batch; ++b) {
      auto row = [&](const std::vector<int32_t> &v) {
        return llvm::ArrayRef<int32_t>(v).slice(b * fullSeqLen, seqLen);
      };
      llvm::append_range(tokens, row(batch.tokens));
      llvm::append_range(targets, row(batch.targets));
    }
  };
  trainerData.savePosition = [train]() {
    return jsonText(train->position().toJson());
  };
  trainerData.restorePosition = [train](llvm::StringRef text) -> llvm::Error {
    llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
    if (!json)
      return json.takeError();
    llvm::Expected<data::LoaderPosition> position =
        data::LoaderPosition::fromJson(*json);
    if (!position)
      return position.takeError();
    return train->setPosition(*position);
  };
  if (val) {
    trainerData.valBatches = val->batchesPerEpoch();
    trainerData.valBatch = [val](int64_t index, std::vector<int32_t> &tokens,
                                 std::vector<int32_t> &targets) {
      llvm::consumeError(val->setPosition(
          {0, uint64_t(index * val->batch())}));
      data::Batch batch;
      val->next(batch);
      tokens = std::move(batch.tokens);
      targets = std::move(batch.targets);
    };
  }
  const data::Tokenizer &tok = **tokenizer;
  if (std::optional<int32_t> eot = tok.endOfTextId())
    trainerData.samplePrompt = {*eot};
  else
    trainerData.samplePrompt = tok.encode("\n");
  trainerData.decode = [&tok](int32_t id) { return tok.decodeToken(id); };
  trainerData.describeMemory = [trainTokens, valTokens](rt::MemoryLedger &ledger) {
    for (const auto &tokens : {trainTokens, valTokens})
      ledger.add("data loader (token buffers)",
                 rt::MemoryLedger::Source::Malloc, tokens->data(),
                 int64_t(tokens->capacity() * sizeof(int32_t)));
  };

  rt::TrainerPrograms trainerPrograms;
  trainerPrograms.updateStep = std::move(*update);
  trainerPrograms.eval = std::move(*eval);
  trainerPrograms.sampler = std::move(sampler);
  trainerPrograms.pipelineForward = std::move(pipelineForward);
  if (programs->shardInit) {
    auto created =
        makeExecutor(std::move(*programs->shardInit), *device, "shard init");
    if (!created)
      return fail(created.takeError());
    trainerPrograms.shardInit = std::move(*created);
  }
  if (programs->castWeights) {
    auto created = makeExecutor(std::move(*programs->castWeights), *device,
                                "weight casts");
    if (!created)
      return fail(created.takeError());
    trainerPrograms.castWeights = std::move(*created);
  }
  timings.end("trainer options");
  auto firstGrad = std::make_shared<std::unique_ptr<rt::Executor>>(
      std::move(*grad));
  auto firstNoSync = std::make_shared<std::optional<::llmc::kir::Program>>(
      std::move(programs->gradStepNoSync));
  trainerPrograms.gradStepFor =
      [&, firstGrad, firstNoSync](int64_t seqLen, bool sync)
      -> llvm::Expected<std::unique_ptr<rt::Executor>> {
    std::string what =
        llvm::formatv("grad step{0} (T={1})", sync ? "" : " no_sync", seqLen)
            .str();
    if (seqLen == config.seqLen && sync && *firstGrad)
      return std::move(*firstGrad);
    if (seqLen == config.seqLen && !sync && firstNoSync->has_value()) {
      ::llmc::kir::Program program = std::move(**firstNoSync);
      firstNoSync->reset();
      return makeExecutor(std::move(program), *device, what);
    }
    llvm::Expected<OwningOpRef<ModuleOp>> shorter =
        source.build(seqLen, /*withDropout=*/true);
    if (!shorter)
      return shorter.takeError();
    llvm::Expected<::llmc::TrainingPrograms> compiled =
        ::llmc::compileTraining(**shorter, training);
    if (!compiled)
      return compiled.takeError();
    if (!sync && !compiled->gradStepNoSync)
      return llvm::createStringError("the training step has no "
                                     "@grad_step_no_sync");
    return makeExecutor(sync ? std::move(compiled->gradStep)
                             : std::move(*compiled->gradStepNoSync),
                        *device, what);
  };

  rt::Trainer trainer(std::move(options), std::move(trainerPrograms),
                      std::move(trainerData), device->store);
  if (initialParams)
    trainer.setFullTensors(std::move(*initialParams));
  if (checkpoint) {
    if (llvm::Error err = trainer.resume(*checkpoint, resume))
      return fail(std::move(err));
    timings.end("restoring the checkpoint");
    memoryPhases.end("restoring the checkpoint");
    out << "llmc run: resumed from " << resume << " at step "
                 << checkpoint->step << "\n";
  }

  // 7. Everything checked: now OUT is written (by rank 0).
  if (rank == 0) {
    if (std::error_code ec = llvm::sys::fs::create_directories(config.out))
      return fail("cannot create '" + config.out + "': " + ec.message());
    // What a run killed while writing (SIGKILL, a node lost) left: the
    // temporary files of a checkpoint, config.yaml, metrics.jsonl or
    // loss.svg, never renamed, and rank files of a ZeRO checkpoint whose
    // main file never came.
    llvm::Expected<std::vector<std::string>> stale =
        rt::removeInterruptedCheckpointFiles(checkpointDir);
    if (!stale)
      return fail(stale.takeError());
    // And the temporaries of OUT's own files, written the same way.
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(config.out, ec), end;
         !ec && it != end; it.increment(ec)) {
      llvm::StringRef name = llvm::sys::path::filename(it->path());
      if (!llvm::any_of(std::initializer_list<llvm::StringRef>{
                            "config.yaml", "metrics.jsonl", "loss.svg"},
                        [&](llvm::StringRef target) {
                          return ::llmc::kir::isTemporaryFileOf(name, target);
                        }))
        continue;
      if (std::error_code removeEc = llvm::sys::fs::remove(it->path()))
        return fail("cannot remove '" + it->path() + "': " +
                    removeEc.message());
      stale->push_back(it->path());
    }
    if (!stale->empty())
      out << "llmc run: removed " << stale->size() << " file"
          << (stale->size() == 1 ? "" : "s")
          << " of an interrupted write (" << stale->front()
          << (stale->size() > 1 ? ", ..." : "") << ")\n";
    for (const rt::DamagedCheckpoint &d : damaged) {
      if (llvm::Error err = rt::setAsideCheckpoint(d.path))
        return fail(std::move(err));
      out << "llmc run: renamed the damaged checkpoint to " << d.path
          << ".damaged\n";
    }
    std::string text;
    llvm::raw_string_ostream os(text);
    printTrainingConfig(config, os);
    if (llvm::Error err = ::llmc::kir::writeFileAtomically(
            joinPath(config.out, "config.yaml"),
            llvm::ArrayRef<uint8_t>(
                reinterpret_cast<const uint8_t *>(text.data()), text.size())))
      return fail(std::move(err));
  }
  timings.end("output directory, config.yaml");
  int64_t microBatches = config.globalBatchSize / config.microBatchSize;
  out << llvm::format(
      "llmc run: %lld steps of %lld x %lld tokens (%lld micro-batch%s of "
      "%lld), %s, %s lr %g -> %g; data: %zu train / %zu val tokens (%s); "
      "out: %s\n",
      (long long)config.maxSteps, (long long)config.globalBatchSize,
      (long long)config.seqLen, (long long)microBatches,
      microBatches == 1 ? "" : "es", (long long)config.microBatchSize,
      config.optimizer.kind == ::llmc::OptimizerConfig::Kind::AdamW ? "adamw"
                                                                    : "sgd",
      ::llmc::stringifyLrScheduleKind(config.schedule.kind).str().c_str(),
      config.schedule.lr, config.schedule.minLr, trainTokens->size(),
      valTokens->size(), tok.describe().c_str(), config.out.c_str());
  if (config.maxSteps < config.schedule.warmupSteps)
    out << llvm::format("llmc run: note: the run ends within the warmup "
                        "(max_steps %lld < warmup_steps %lld): the learning "
                        "rate only ramps up\n",
                        (long long)config.maxSteps,
                        (long long)config.schedule.warmupSteps);
  // Compiling freed most of what it allocated (MLIR modules, LLVM's code
  // generation); glibc keeps such memory resident in its free lists until
  // asked to give it back.
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  memoryPhases.end("setup");
  timings.end("malloc_trim");
  if (printTimings) {
    timings.addBefore("exec to main (loading libraries)",
                      std::max(0.0, ::llmc::secondsSinceProcessStart() -
                                        std::chrono::duration<double>(
                                            std::chrono::steady_clock::now() -
                                            timingsStart)
                                            .count()));
    timings.print(out);
    out.flush();
  }
  installStopHandlers(/*quiet=*/rank != 0);
  if (llvm::Error err = trainer.run())
    return fail(std::move(err));
  // The training is over: measuring now costs no start-up time, and a
  // better figure than the record becomes the next runs' yardstick.
  if (remeasurePeakThreads > 0 && !trainer.stopSignal())
    (void)rt::machineSgemmPeak(kPeakSgemmSize, remeasurePeakThreads,
                               /*reps=*/3);
  if (int signal = trainer.stopSignal()) {
    // 128 + the signal: what a shell reports for a process the signal
    // killed, so a job script or scheduler that treats SIGTERM's death as
    // "preempted, requeue" sees the same; 0 stays "finished".
    out << "llmc run: stopped by " << signalName(signal) << " at step "
        << trainer.step() << " of " << config.maxSteps << "; checkpoint "
        << joinPath(checkpointDir, rt::checkpointFileName(trainer.step()))
        << "; continue with --resume (exit status " << 128 + signal << ")\n";
    out.flush();
    return 128 + signal;
  }
  return 0;
}
