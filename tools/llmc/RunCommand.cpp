// llmc run: trains a model from a training config. Parses its own command
// line (every config key is a flag), installs the stop signals and the
// fault-injection hooks of the tests, and trains through the training
// session (training/Session.h), which does the rest.
#include "frontend/TrainConfig.h"
#include "runtime/Weights/Checkpoint.h"
#include "tools/llmc/GuardInject.h"
#include "training/Layout.h"
#include "training/Session.h"
#include "training/StartupTimings.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

using namespace mlir::llmc;
namespace rt = ::llmc::runtime;
namespace training = ::llmc::training;

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
        "  --report memory       at the end, the memory table (planned against "
        "resident memory,\n"
        "                        by category); without it one line of memory "
        "per rank\n"
        "  --timings             print the wall and CPU seconds of each "
        "start-up phase (config,\n"
        "                        data, IR build, passes and lowering, kernels "
        "and buffers of each\n"
        "                        program, weights, sgemm peak, ...) before "
        "the first step\n"
        "  --data-trace DIR      each rank appends a line per training "
        "window it reads to\n"
        "                        DIR/rank-R.tsv: step, micro-batch, row, "
        "window, source, file,\n"
        "                        token offset (tab separated; "
        "docs/data.md)\n"
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

/// What `llmc run` was asked besides the config's keys.
struct RunArguments {
  std::string configPath;
  training::ResumeRequest resume;
  bool printConfig = false, printTimings = false, reportMemory = false;
  std::string dataTraceDir; // --data-trace
  std::vector<std::string> flags; // --KEY VALUE: the config's keys
};

/// Parses the command line; an exit status when it is all that happens
/// (--help, a usage error).
std::optional<int> parseArguments(int argc, char **argv, RunArguments &args) {
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      printUsage(llvm::outs());
      return 0;
    }
    if (arg == "--resume") {
      // `--resume PATH` when PATH is a checkpoint file, else the latest.
      if (i + 1 < argc && llvm::StringRef(argv[i + 1]).ends_with(".ckpt"))
        args.resume.path = argv[++i];
      else
        args.resume.latest = true;
      continue;
    }
    if (arg.consume_front("--resume=")) {
      args.resume.path = arg.str();
      continue;
    }
    if (arg == "--print-config") {
      args.printConfig = true;
      continue;
    }
    if (arg == "--timings") {
      args.printTimings = true;
      continue;
    }
    if (arg == "--report" && i + 1 < argc &&
        llvm::StringRef(argv[i + 1]) == "memory") {
      args.reportMemory = true;
      ++i;
      continue;
    }
    if (arg == "--data-trace" || arg.starts_with("--data-trace=")) {
      if (arg.consume_front("--data-trace="))
        args.dataTraceDir = arg.str();
      else if (i + 1 < argc)
        args.dataTraceDir = argv[++i];
      if (args.dataTraceDir.empty())
        return fail("--data-trace: missing directory");
      continue;
    }
    if (arg == "--report=memory") {
      args.reportMemory = true;
      continue;
    }
    if (arg.starts_with("-")) {
      args.flags.push_back(arg.str());
      bool hasValue = arg.contains('=');
      if (!hasValue && i + 1 < argc &&
          !llvm::StringRef(argv[i + 1]).starts_with("--"))
        args.flags.push_back(argv[++i]);
      continue;
    }
    if (!args.configPath.empty())
      return fail("more than one config given ('" + args.configPath +
                  "', '" + arg +
                  "'); usage: llmc run CONFIG.yaml [--KEY VALUE ...]");
    args.configPath = arg.str();
  }
  if (args.configPath.empty()) {
    printUsage(llvm::errs());
    return fail("no training config given");
  }
  return std::nullopt;
}

/// The tests' hooks from the environment: LLMC_FAULT_INJECT (a signal to
/// a rank before a step) and LLMC_GUARD_INJECT (spikes and divergences for
/// the guard, tools/llmc/GuardInject.h).
llvm::Error faultInjectionHooks(int rank, training::SessionOptions &hooks) {
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
      return llvm::createStringError(llvm::Twine("LLMC_FAULT_INJECT='") + fault +
                  "': expected kill:RANK:STEP, hang:RANK:STEP, "
                  "int:RANK:STEP, term:RANK:STEP or crash-hang:RANK:STEP");
    int signal = parts[0] == "kill"         ? SIGKILL
                 : parts[0] == "hang"       ? SIGSTOP
                 : parts[0] == "int"        ? SIGINT
                 : parts[0] == "crash-hang" ? SIGABRT
                                            : SIGTERM;
    if (faultRank == rank && signal == SIGABRT)
      hooks.beforeStep = [faultStep](int64_t step) {
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
      hooks.beforeStep = [signal, faultStep](int64_t step) {
        if (step == faultStep)
          raise(signal);
      };
  }

  if (const char *inject = std::getenv("LLMC_GUARD_INJECT")) {
    auto hook = parseGuardInjection(inject);
    if (!hook)
      return hook.takeError();
    hooks.injectFault = std::move(*hook);
  }
  return llvm::Error::success();
}

/// Prints the --timings table, with the time before main.
void printTimings(::llmc::StartupTimings &timings,
                  std::chrono::steady_clock::time_point start,
                  llvm::raw_ostream &out) {
  timings.addBefore("exec to main (loading libraries)",
                    std::max(0.0, ::llmc::secondsSinceProcessStart() -
                                      std::chrono::duration<double>(
                                          std::chrono::steady_clock::now() -
                                          start)
                                          .count()));
  timings.print(out);
  out.flush();
}

} // namespace

int runTrainCommand(int argc, char **argv) {
  // argv[0] is "run".
  ::llmc::StartupTimings timings;
  auto timingsStart = std::chrono::steady_clock::now();
  RunArguments args;
  if (std::optional<int> status = parseArguments(argc, argv, args))
    return *status;

  // The config; nothing is written before it, the data, the checkpoint
  // and the compiled programs are all known to be good.
  llvm::Expected<TrainingConfig> loaded =
      loadTrainingConfig(args.configPath, args.flags);
  if (!loaded)
    return fail(loaded.takeError());
  TrainingConfig config = std::move(*loaded);

  // The ranks: one process, or the world of a launcher (mpirun, srun).
  llvm::Expected<training::Layout> opened = training::openWorld(config);
  if (!opened)
    return fail(opened.takeError());
  training::Layout layout = std::move(*opened);
  // From here on an error on one rank ends the job: the other ranks may be
  // waiting in a collective for this one.
  auto fail = [&](llvm::Error error) -> int {
    std::string text = llvm::toString(std::move(error));
    if (layout.worldSize == 1)
      return ::fail(text);
    // Collectives' errors name their rank already.
    if (!llvm::StringRef(text).starts_with("rank "))
      text = "rank " + std::to_string(layout.rank) + ": " + text;
    ::fail(text);
    llvm::errs().flush();
    layout.world->abort(1); // ends every rank of the job
    return 1;
  };
  if (llvm::Error err = training::resolveMesh(config, layout))
    return fail(std::move(err));
  if (args.printConfig) {
    if (layout.rank == 0)
      printTrainingConfig(config, llvm::outs());
    return 0;
  }
  if (llvm::Error err = training::splitMesh(config, layout))
    return fail(std::move(err));
  timings.end("config");

  training::SessionOptions options;
  options.resume = args.resume;
  options.timings = &timings;
  options.reportMemory = args.reportMemory;
  options.dataTraceDir = args.dataTraceDir;
  options.stopRequested = [] { return stopSignal.load(); };
  if (llvm::Error err = faultInjectionHooks(layout.rank, options))
    return fail(std::move(err));
  llvm::Expected<std::unique_ptr<training::Session>> session =
      training::Session::create(config, layout, options);
  if (!session)
    return fail(session.takeError());
  llvm::raw_ostream &out = layout.out();
  if (args.printTimings)
    printTimings(timings, timingsStart, out);
  installStopHandlers(/*quiet=*/layout.rank != 0);
  if (llvm::Error err = (*session)->run())
    return fail(std::move(err));
  if (int signal = (*session)->stopSignal()) {
    // 128 + the signal: what a shell reports for a process the signal
    // killed, so a job script or scheduler that treats SIGTERM's death as
    // "preempted, requeue" sees the same; 0 stays "finished".
    out << "llmc run: stopped by " << signalName(signal) << " at step "
        << (*session)->step() << " of " << config.maxSteps << "; checkpoint "
        << (*session)->checkpointPath()
        << "; continue with --resume (exit status " << 128 + signal << ")\n";
    out.flush();
    return 128 + signal;
  }
  return 0;
}
