// The training loop of `llmc run`: per step, gradient accumulation over
// micro-batches through the grad-step program, the learning rate from the
// schedule and the update-step program; progress lines, metrics
// (OUT/metrics.jsonl), evaluation with a text sample, the loss plot
// (OUT/loss.svg) and checkpoints (OUT/checkpoints/). No MLIR: the programs
// come compiled, the data through callbacks. With dynamic loss scaling
// (fp16) a step whose gradients overflow is skipped: Adam's step count t
// does not advance, and an overflow at the minimum scale stops the run.
// The training guard (runtime/Train/TrainingGuard.h) judges every step: a NaN or
// inf loss or gradient norm stops the run (or rolls it back), and loss or
// gradient-norm spikes are logged, stop it or roll it back to an in-memory
// snapshot with the data since skipped and the learning rate lowered.
#ifndef LLMC_RUNTIME_TRAINER_H
#define LLMC_RUNTIME_TRAINER_H

#include "runtime/Comm/Communicator.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Exec/MemoryReport.h"
#include "runtime/Train/Console.h"
#include "runtime/Train/TrainingGuard.h"
#include "runtime/Weights/Checkpoint.h"
#include "runtime/Weights/Weights.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace llmc::runtime {

struct PrunedTensor;

/// The shape of one step: its global batch (sequences, a multiple of the
/// micro-batch) and its sequence length.
struct StepShape {
  int64_t globalBatch = 0;
  int64_t seqLen = 0;
};

/// What the trainer runs. The values come from the training config, whose
/// schema holds every default (frontend/TrainConfig.h and
/// frontend/Schedule.h); the training session fills this struct in one
/// function (Session::trainerOptions in training/Session.cpp). The runtime knows no
/// schedule: it asks for each step's shape and learning rate.
struct TrainerOptions {
  /// The shape of step `step` after `consumedSamples` sequences (batch-size
  /// ramp-up and sequence-length warmup).
  std::function<StepShape(int64_t step, int64_t consumedSamples)> stepShape;
  /// The learning rate of update `step` (0-based).
  std::function<double(int64_t step)> learningRate;
  /// Sequences per micro-batch, and the largest global batch of the run
  /// (micro-batches per step bound the dropout streams).
  int64_t microBatch = 0;
  int64_t maxGlobalBatch = 0;
  int64_t maxSteps = 0;
  int64_t logInterval = 0;
  int64_t evalInterval = 0; // 0: at the end only
  int64_t evalSteps = 0;
  int64_t sampleTokens = 0;
  int64_t checkpointInterval = 0; // 0: at the end only
  int64_t keepCheckpoints = 0;    // 0: keep all
  uint64_t seed = 0;
  /// Where metrics.jsonl, loss.svg and checkpoints/ go (must exist).
  std::string outDir;
  /// Stored in checkpoints; a resume must match them.
  std::map<std::string, std::string> configSections;
  /// Progress lines and samples; null: quiet.
  llvm::raw_ostream *log = nullptr;
  /// On a terminal: `log` itself, which also shows a live status line
  /// (progress bar, loss, tokens/s, MFU, ETA) redrawn after every step.
  StatusConsole *console = nullptr;
  /// MFU: the model's training FLOPs per token at the full sequence length
  /// (6N + 12 L h s, PaLM's definition, as `llmc plan` counts them) and the
  /// peak FLOP/s it is measured against; 0: no MFU.
  double modelFlopsPerToken = 0;
  double peakFlops = 0;
  /// Measures the peak now (FLOP/s); called at most once, when a logged
  /// interval's MFU exceeds 100% (peakFlops was a record taken while the
  /// machine was busier). Null: never.
  std::function<double()> remeasurePeakFlops;
  /// Data parallelism: the ranks of mesh axis "dp" (null: one process).
  /// Each rank runs its contiguous share of every step's micro-batches
  /// and reads only those: the others' it skips unread (TrainerData::skip),
  /// so every rank's loader position is the same; losses are gathered so that every
  /// rank sums them in the global order; rank 0 alone logs and writes
  /// metrics, the plot, samples and checkpoints.
  comm::Communicator *dp = nullptr;
  /// Tensor parallelism: the ranks of mesh axis "tp" (null: none). They
  /// read the same micro-batches and hold the same losses; only tp rank 0
  /// of dp rank 0 (world rank 0) writes.
  comm::Communicator *tp = nullptr;
  /// Pipeline parallelism: the ranks of mesh axis "pp" (null: none), one
  /// per stage. Each step runs this rank's micro-batches in the 1F1B order
  /// (warm-up forwards, one forward and one backward in turn, cool-down
  /// backwards) through TrainerPrograms::pipelineForward and the grad
  /// step, which recomputes the stage from the stashed stage input. The
  /// last stage has the losses and sends them to the others; the stages of
  /// world rank 0 gather their tensors there for checkpoints.
  comm::Communicator *pp = nullptr;
  /// The first and the last stage's ranks of one (dp, tp) place: they
  /// all-reduce (sum) the gradients of `ppTiedParams` (a tied wte, which
  /// both hold) before each update. Null without such parameters.
  comm::Communicator *ppTied = nullptr;
  std::vector<std::string> ppTiedParams;
  /// Every communicator of the mesh this rank uses (the axes', the tied
  /// group's, NCCL's on the GPU): the run's last line gives what the steps
  /// moved on them per step, by axis (Communicator::traffic).
  std::vector<const comm::Communicator *> meshComms;
  /// The parameters split over "tp" (llmc.tp_shard), by name; their
  /// optimizer states (adam_m.<p>, ...) are split alike. Checkpoints hold
  /// them whole (joined over the tp ranks), so that a run resumes at any
  /// tp; a resume cuts this rank's share again.
  std::map<std::string, TpShard> tpShards;
  /// Whether the micro-batches before a step's last skip the gradient
  /// communication (DDP and ZeRO-1: the no_sync grad step); ZeRO-2
  /// reduce-scatters every micro-batch's gradients.
  bool accumulateWithoutSync = true;
  /// Called before each step (fault-injection tests stop or kill a rank
  /// here); null: nothing.
  std::function<void(int64_t step)> beforeStep;
  /// The phases of the run so far (setup, compiling, kernels), which the
  /// trainer continues (steps, checkpoints, evaluations) to say in which
  /// one the resident set peaked; null: the trainer's phases only.
  MemoryPhases *memoryPhases = nullptr;
  /// 2:4 sparsity (runtime/Weights/Sparsity.h): before update `pruneAtStep` the
  /// weights with a `sparsity_mask.` state are pruned once (masks from
  /// magnitudes) and the run fine-tunes them with the masks fixed; the
  /// validation loss right before and after, and each tensor's fraction of
  /// zeros, are logged and written as a metrics.jsonl `prune` event. -1:
  /// no pruning (a dense run, or a resumed one past its prune step).
  int64_t pruneAtStep = -1;
  /// Spike and divergence handling (runtime/Train/TrainingGuard.h).
  GuardOptions guard;
  /// Test hook (LLMC_GUARD_INJECT): called before each step's first
  /// micro-batch; may poison the store or scale the step's learning rate.
  /// Null: nothing.
  std::function<llvm::Error(int64_t step, TensorStore &store,
                            double &lrScale)>
      injectFault;
  /// Asked at every step boundary (before each step and after the last):
  /// the signal that asks the run to stop (SIGINT, SIGTERM), 0 while none
  /// has; null: never. On a stop the run writes a checkpoint of the step
  /// it is at (unless it just did) and returns; stopSignal() says why.
  /// With data parallelism every rank's answer is gathered at the
  /// boundary and the first non-zero one in rank order counts, so all
  /// ranks stop after the same step whichever got the signal.
  std::function<int()> stopRequested;
  /// The end-of-run memory table (planned against resident memory, a row
  /// per category); false: its summary line only. metrics.jsonl gets the
  /// whole breakdown either way.
  bool reportMemory = true;
};

/// The data, through callbacks (the command adapts its loader).
struct TrainerData {
  /// The next micro-batch of [microBatch, seqLen] tokens and targets, micro-
  /// batch `microBatch` of step `step` (for traces); rows are cut to
  /// `seqLen` when it is below the full length (sequence-length warmup
  /// truncates, as DeepSpeed's curriculum does). An error (an id beyond the
  /// vocabulary, a read that failed) stops the run.
  std::function<llvm::Error(int64_t step, int64_t microBatch, int64_t seqLen,
                            std::vector<int32_t> &tokens,
                            std::vector<int32_t> &targets)>
      next;
  /// Moves past `windows` sequences without reading them: the micro-batches
  /// of the other data-parallel ranks. Null: they are read by next.
  std::function<void(int64_t windows)> skip;
  /// The loader's position as JSON text, and back.
  std::function<std::string()> savePosition;
  std::function<llvm::Error(llvm::StringRef)> restorePosition;
  /// Validation batch `index` (< valBatches), full length.
  std::function<llvm::Error(int64_t index, std::vector<int32_t> &tokens,
                            std::vector<int32_t> &targets)>
      valBatch;
  int64_t valBatches = 0;
  /// Samples start from this context and are decoded token by token.
  std::vector<int32_t> samplePrompt;
  std::function<std::string(int32_t)> decode;
  /// Adds the loader's host memory (token buffers, mapped shards) to the
  /// end-of-run memory report; null: none.
  std::function<void(MemoryLedger &)> describeMemory;
};

/// The compiled programs, all bound to one TensorStore.
struct TrainerPrograms {
  /// The grad step for a sequence length (called once per length and
  /// kind; the trainer caches what it returns). `sync` false: the step
  /// without gradient communication (DDP's no_sync: @grad_step_no_sync)
  /// for the micro-batches before a step's last, asked for only with
  /// data parallelism.
  std::function<llvm::Expected<std::unique_ptr<Executor>>(int64_t seqLen,
                                                          bool sync)>
      gradStepFor;
  std::unique_ptr<Executor> updateStep;
  /// @forward at the full length without dropout: evaluation.
  std::unique_ptr<Executor> eval;
  /// The same for one sequence, for samples (null: `eval` samples).
  std::unique_ptr<Executor> sampler;
  /// ZeRO: each rank's blocks of the parameters and of the full optimizer
  /// states given as its inputs (run once, before the first step). Null
  /// without ZeRO. A ZeRO checkpoint is one file per rank with its blocks
  /// and rank 0's main file with the rest and a manifest of them; a resume
  /// joins the blocks into full tensors, so any world size and stage can
  /// continue it.
  std::unique_ptr<Executor> shardInit;
  /// Mixed precision: @cast_weights, which writes the persistent 16-bit
  /// copy of every master weight the other programs read
  /// (llmc-persistent-casts; the update step keeps them current). Run at
  /// the start of run() and after pruning; the copies are not in
  /// checkpoints. Null in f32.
  std::unique_ptr<Executor> castWeights;
  /// Pipeline parallelism: the stage's training @forward (with dropout as
  /// the grad step has it), 1F1B's forward half. Null without pp.
  std::unique_ptr<Executor> pipelineForward;
};

/// One logged training step or evaluation, as metrics.jsonl holds it.
struct MetricPoint {
  int64_t step = 0;
  double value = 0; // loss or val_loss
};

/// A guard event the loss plot marks: "rollback" (at the step that
/// spiked), "spike" (logged by action warn) or "stop".
struct PlotEvent {
  int64_t step = 0;
  std::string kind;
};

class Trainer {
public:
  Trainer(TrainerOptions options, TrainerPrograms programs, TrainerData data,
          std::shared_ptr<TensorStore> store);

  /// Continues from `checkpoint`: restores tensors, step, counters and the
  /// loader; keeps the metrics of earlier steps (later lines, from a run
  /// that went on past the checkpoint, are dropped). The config must match
  /// (the error names what differs).
  llvm::Error resume(const Checkpoint &checkpoint, llvm::StringRef source);

  /// ZeRO: full tensors (the seeded parameters of a ZeRO-3 run) that
  /// @shard_init cuts every rank's blocks from before the first step.
  void setFullTensors(TensorMap tensors) {
    for (auto &entry : tensors)
      pendingFullStates[entry.first] = std::move(entry.second);
  }

  /// Trains until maxSteps.
  llvm::Error run();

  /// The state a checkpoint holds now.
  llvm::Expected<Checkpoint> checkpoint() const;

  /// The validation loss over evalSteps batches (NaN without validation
  /// data) and, with sampleTokens, a text sample into `sample`.
  llvm::Expected<double> evaluate(std::string &sample);

  int64_t step() const { return currentStep; }
  /// The signal that stopped run() early (stopRequested), 0 if none.
  int stopSignal() const { return stoppedBy; }
  /// Losses of the logged steps and evaluations of the run so far.
  const std::vector<MetricPoint> &trainLosses() const { return trainPoints; }
  const std::vector<MetricPoint> &valLosses() const { return valPoints; }

private:
  llvm::Expected<Executor *> gradStep(int64_t seqLen, bool sync);
  int dpRank() const { return options.dp ? options.dp->rank() : 0; }
  int dpSize() const { return options.dp ? options.dp->size() : 1; }
  /// Rank 0 writes metrics, plots and checkpoints; the others only train.
  /// How `tensor` (a parameter or an optimizer state of one) is split over
  /// "tp"; null: whole on every rank.
  const TpShard *tpShardOf(llvm::StringRef tensor) const;
  bool writes() const {
    return dpRank() == 0 && (!options.tp || options.tp->rank() == 0) &&
           ppStage() == 0;
  }
  int ppStage() const { return options.pp ? options.pp->rank() : 0; }
  int ppSize() const { return options.pp ? options.pp->size() : 1; }
  bool lastStage() const { return ppStage() == ppSize() - 1; }
  /// Pipeline parallelism: `value` as the last stage has it, on every stage.
  llvm::Expected<double> fromLastStage(double value);
  /// Pipeline parallelism: one step's micro-batches in the 1F1B order; the
  /// last stage's losses go to `losses`.
  llvm::Error
  runPipelineStep(const std::vector<std::vector<int32_t>> &tokens,
                  const std::vector<std::vector<int32_t>> &targets,
                  int64_t seqLen, int64_t first, int64_t maxMicroBatches,
                  Executor &grad, Executor &noSync,
                  std::vector<float> &losses);
  /// Pipeline parallelism: the stages' tensors (other than world rank 0's
  /// stage's) sent to stage 0 for its checkpoint, into `tensors`.
  llvm::Error gatherStages(std::vector<std::string> &names,
                           TensorMap &tensors);
  /// Every rank's `local` values, rank 0's first (one process: `local`).
  llvm::Expected<std::vector<float>> gatherFloats(std::vector<float> local);
  /// Prunes the 2:4 weights (TrainerOptions::pruneAtStep) and logs it.
  llvm::Error pruneNow();
  /// Writes the checkpoint of the current step (rank 0 the main file; with
  /// ZeRO every rank its file). A failed write (disk full) is an error
  /// naming the file, the cause and the newest checkpoint, left intact.
  llvm::Error writeCheckpointNow();
  llvm::Error writeCheckpointFiles(const std::string &dir);
  /// stopRequested, agreed on by all ranks (a collective with data
  /// parallelism: every rank calls it at the same boundary).
  llvm::Expected<int> agreedStopSignal();
  /// The fraction of the peak that `tokensPerSecond` is in model FLOPs
  /// (every rank's tokens on every rank's peak); 0 when unknown.
  double modelFlopsUtilization(double tokensPerSecond) const;
  /// "[=====>    ]  120/500  24% | loss 2.3412 | 55.1k tok/s | MFU 23.4% |
  /// ETA 3.2s".
  std::string statusLine(double loss, double tokensPerSecond,
                         double eta) const;
  /// A checkpoint's counters, loader position and config, without tensors.
  Checkpoint checkpointState() const;
  /// The store's tensors a checkpoint holds, and how to stream them.
  std::vector<std::string> checkpointTensorNames() const;
  std::vector<StreamedTensor>
  streamFromStore(llvm::ArrayRef<std::string> names) const;
  /// ZeRO: fills the rank's blocks from the store's parameters and the
  /// full optimizer states of a resumed checkpoint (zeros when fresh).
  llvm::Error initializeShards();
  /// Mixed precision: the 16-bit weight copies from the masters (runs
  /// @cast_weights; nothing in f32).
  llvm::Error castWeights();
  /// Pipeline parallelism: every stage's pruned weights, in stage order,
  /// on every stage (each prunes its own).
  llvm::Error gatherPrunedOverStages(std::vector<PrunedTensor> &pruned);
  llvm::Error appendMetrics(const std::string &line);
  llvm::Error writePlot();
  /// What one run() carries from step to step: the loss scaler's
  /// counters, the clocks and sums behind the rates, the micro-batches'
  /// buffers. Evaluations, pruning and compiling grad steps for new
  /// lengths are not in the rates: their seconds are excluded.
  struct RunState {
    using Clock = std::chrono::steady_clock;
    bool lossScaling = false;  // fp16: the update step reports overflows
    int64_t skippedSteps = 0;  // updates skipped before currentStep
    int64_t skippedInARow = 0; // overflows since the last applied update
    double firstScale = 0;     // the loss scale this run() started with
    int64_t maxMicroBatches = 0;
    int64_t firstStep = 0, firstTokens = 0;
    Clock::time_point runStart, intervalStart, lastStatus;
    double excludedSeconds = 0, intervalExcludedSeconds = 0;
    int64_t intervalTokens = 0;
    double intervalFlops = 0;
    bool checkpointWritten = false;
    bool peakRemeasured = false; // options.remeasurePeakFlops was called
    std::map<const Executor *, int64_t> flops;
    std::vector<int32_t> tokens, targets;
    void excludeSeconds(double seconds) {
      excludedSeconds += seconds;
      intervalExcludedSeconds += seconds;
    }
  };
  /// One step's outcome: its shape, loss, learning rate, gradient norm and,
  /// with loss scaling, what the scaler did.
  struct StepResult {
    StepShape shape;
    int64_t microBatches = 0;
    Executor *grad = nullptr; // the grad step of the step's length
    double loss = 0, lr = 0, gradNorm = 0;
    bool skipped = false, atMinScale = false;
    double usedScale = 0, nextScale = 0, hysteresis = 0,
           hysteresisBefore = 0;
  };
  /// run()'s parts, in the order of a step.
  llvm::Error startRun(RunState &run);
  /// A stop asked for: checkpoint, plot, true.
  llvm::Expected<bool> stopIfAsked(RunState &run);
  /// Evaluation and pruning when due, the test hook, guard snapshots.
  llvm::Error beforeStep(RunState &run);
  /// The micro-batches (or the pipeline's 1F1B) and the update.
  llvm::Expected<StepResult> trainStep(RunState &run, double lrScale);
  /// Micro-batch `microBatch` of the step into run.tokens and run.targets,
  /// or past it unread (`skip`: another rank's).
  llvm::Error readMicroBatch(RunState &run, int64_t microBatch, int64_t seqLen,
                             bool skip);
  llvm::Error runMicroBatches(RunState &run, const StepResult &result,
                              int64_t first, int64_t mine, Executor &noSync,
                              std::vector<float> &losses);
  llvm::Error pipelineMicroBatches(RunState &run, const StepResult &result,
                                   int64_t first, int64_t mine,
                                   Executor &noSync,
                                   std::vector<float> &losses);
  /// The step's mean loss over every rank's micro-batches.
  llvm::Expected<double> stepLoss(std::vector<float> losses,
                                  int64_t microBatches);
  /// Pipeline parallelism: the tied parameters' gradients summed over the
  /// first and the last stage.
  llvm::Error sumTiedGradients();
  llvm::Error runUpdate(RunState &run, double lrScale, StepResult &result);
  /// The guard's verdict on the step; true: rolled back (the step is
  /// redone from the snapshot).
  llvm::Expected<bool> judgeStep(RunState &run, const StepResult &result);
  std::string divergenceMessage(const RunState &run,
                                const StepResult &result) const;
  /// Counters, the progress line and status, a checkpoint when due.
  llvm::Error finishStep(RunState &run, const StepResult &result);
  llvm::Error logStep(RunState &run, const StepResult &result, int64_t step);
  /// The last evaluation and checkpoint, the plot and the reports.
  llvm::Error finishRun(RunState &run);
  void reportCommunication(const RunState &run) const;
  llvm::Error evaluateAndLog();
  bool evalDue(int64_t step) const;
  bool checkpointDue(int64_t step) const;
  bool snapshotDue(int64_t step) const;
  int64_t flopsOf(RunState &run, const Executor &executor);
  /// The end-of-run memory report: the persistent tensors by kind (the
  /// "memory per rank" line), then planned against resident memory with
  /// every byte above the plan by category; into metrics.jsonl too.
  llvm::Error reportMemory();
  MemoryPhases &phases() {
    return options.memoryPhases ? *options.memoryPhases : ownPhases;
  }
  struct Snapshot;
  /// Rollback: keeps the state at currentStep in memory.
  llvm::Error takeSnapshot(Snapshot &into, int64_t skippedSteps);
  /// Handles the guard's `event` at step `eventStep` (not counted yet):
  /// logs it; for a rollback restores the snapshot and returns true; an
  /// error stops the run; false: train on (action warn).
  llvm::Expected<bool> handleGuardEvent(const GuardEvent &event,
                                        int64_t eventStep, double loss,
                                        int64_t &skippedSteps,
                                        const std::string &stopMessage);

  TrainerOptions options;
  TrainerPrograms programs;
  TrainerData data;
  std::shared_ptr<TensorStore> store;
  std::map<std::pair<int64_t, bool>, std::unique_ptr<Executor>> gradSteps;
  int64_t currentStep = 0;
  int64_t consumedSamples = 0;
  int64_t consumedTokens = 0;
  double lastLr = 0;
  std::vector<MetricPoint> trainPoints, valPoints;
  std::vector<std::string> keptMetricLines; // from before a resume
  bool metricsStarted = false;
  // ZeRO: the full optimizer states of the checkpoint resumed from, until
  // initializeShards hands them to @shard_init.
  TensorMap pendingFullStates;
  bool shardsInitialized = false;
  MemoryPhases ownPhases;
  // The guard and, for action rollback, snapshots: every persistent tensor
  // but the gradients, the counters and the guard's windows at `step`, and
  // how many micro-batches had been read. A snapshot is good once the step
  // it was taken at passed the guard (that step's loss is the first to see
  // the update before it); until then it is pending, and a rollback goes
  // to the good one. The state a run starts from is good.
  TrainingGuard guard;
  struct Snapshot {
    int64_t step = -1;
    int64_t consumedSamples = 0, consumedTokens = 0, skippedSteps = 0;
    int64_t batchesRead = 0;
    double lastLr = 0;
    TensorMap tensors;
    GuardState guard;
  };
  Snapshot goodSnapshot, pendingSnapshot;
  int64_t batchesRead = 0; // micro-batches read by this run() so far
  /// What the steps (micro-batches to update, not evaluation or
  /// checkpoints) moved on options.meshComms, by axis, over trafficSteps.
  std::map<std::string, comm::Traffic> meshTraffic() const;
  std::map<std::string, comm::Traffic> stepTraffic;
  int64_t trafficSteps = 0;
  std::vector<PlotEvent> eventPoints;
  int stoppedBy = 0;
};

/// The loss curves as a standalone SVG: axes with ticks, the training loss
/// (logged steps) and the validation loss (evaluations), a legend.
/// Guard events are marked by dashed vertical lines.
std::string renderLossPlot(llvm::ArrayRef<MetricPoint> train,
                           llvm::ArrayRef<MetricPoint> val,
                           llvm::StringRef title,
                           llvm::ArrayRef<PlotEvent> events = {});

/// Reads metrics.jsonl as a run resumed at `beforeStep` keeps it: the lines
/// (training steps and evaluations) of steps below `beforeStep`, and their
/// training and validation losses. Later lines come from a run that went on
/// past the checkpoint; the resumed run writes them again. A rollback's
/// line (at the step it went back to) drops the training losses of the
/// steps it undid; guard events go to `events`.
void readMetricLines(llvm::StringRef text, int64_t beforeStep,
                     std::vector<std::string> &kept,
                     std::vector<MetricPoint> &train,
                     std::vector<MetricPoint> &val,
                     std::vector<PlotEvent> *events = nullptr);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_TRAINER_H
