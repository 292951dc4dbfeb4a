// The training config of `llmc run`: a YAML file whose every key can also
// be given as a command-line flag. One table of keys drives the YAML
// parser, the flag parser and `llmc run --help`, so they cannot drift.
//
//   model: examples/tiny.yaml      # preset, model .yaml/.mlir, or inline
//   optimizer: {name: adamw, lr: 1e-3, betas: [0.9, 0.95], weight_decay: 0.1}
//   schedule: {name: cosine, warmup_steps: 20, min_lr: 1e-4}
//   global_batch_size: 16
//   micro_batch_size: 8
//   max_steps: 300
//   data: {train: [corpus/*.txt], val_fraction: 0.05, tokenizer: byte}
//
// Paths in the file (model, data, init_from) are relative to the file's
// directory; paths in flags and `out` are relative to the working directory.
// `llmc plan` reads the same file and flags (frontend/PlanConfig.h): a run's
// config plans as it is, its layout from `parallel:`; what only the planner
// needs (the GPUs, their price, restarts, an observed run) is the `plan:`
// section of the same table, which `llmc run` reads and ignores.
// docs/config-keys.md is generated from the table (`llmc help config
// --markdown`).
#ifndef LLMC_FRONTEND_TRAINCONFIG_H
#define LLMC_FRONTEND_TRAINCONFIG_H

#include "frontend/ModelConfig.h"
#include "frontend/Schedule.h"
#include "ir/TrainingDefaults.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llmc {

// What shapes the compiled training step besides the model; codegen/TrainingStep
// compiles it (training/Programs.h maps it to the passes' options).

/// The optimizer compiled into @update_step. Names follow PyTorch's
/// AdamW/SGD; `maxGradNorm` is clip_grad_norm_'s max_norm.
struct OptimizerConfig {
  enum class Kind { AdamW, SGD };
  Kind kind = Kind::AdamW;
  double beta1 = mlir::llmc::defaults::kAdamBeta1;
  double beta2 = mlir::llmc::defaults::kAdamBeta2;
  double epsilon = mlir::llmc::defaults::kAdamEpsilon;
  // Decoupled (Loshchilov & Hutter).
  double weightDecay = mlir::llmc::defaults::kWeightDecay;
  double momentum = mlir::llmc::defaults::kSgdMomentum; // SGD
  bool nesterov = false;                                // SGD
  // Clip by global norm; 0 turns clipping off.
  double maxGradNorm = mlir::llmc::defaults::kMaxGradNorm;
  /// Weight decay on biases and norm weights (rank-1 parameters) too.
  bool decayNormsAndBiases = false;
};

/// Mixed precision (llmc-amp): the type allow-listed ops run in, and op
/// names (e.g. "llmc.softmax") moved onto the allow or deny list.
struct PrecisionConfig {
  enum class Kind { FP32, FP16, BF16 };
  Kind kind = Kind::FP32;
  std::vector<std::string> allow, deny;
};

/// Dynamic loss scaling (llmc-loss-scaling, fp16 only). DeepSpeed's names:
/// the scale starts at 2^initialScalePower, is divided by `factor` after
/// `hysteresis` overflows (never below `minScale`) and multiplied by it
/// after `window` clean steps in a row.
struct LossScaleConfig {
  double initialScalePower = mlir::llmc::defaults::kLossScaleInitialPower;
  int64_t window = mlir::llmc::defaults::kLossScaleWindow;
  int64_t hysteresis = mlir::llmc::defaults::kLossScaleHysteresis;
  double minScale = mlir::llmc::defaults::kLossScaleMin;
  double factor = mlir::llmc::defaults::kLossScaleFactor;
  bool consecutiveHysteresis = false;
};

/// Loss-spike and divergence handling (runtime/Train/TrainingGuard.h). A NaN or
/// inf loss or gradient norm always stops the run unless `action` is
/// rollback; spikes are judged against the last `window` steps.
struct GuardConfig {
  std::string action = "warn"; // off, warn, stop or rollback
  int64_t window = 50;
  double zscore = 6;           // 0: off
  double ratio = 0;            // 0: off
  double maxGradNormRatio = 0; // 0: off
  int64_t snapshotInterval = 50;
  double lrFactor = 0.5;
  int64_t cooldown = 100; // 0: the lower rate for the rest of the run
  int64_t maxRollbacks = 3;
};

/// Activation checkpointing (llmc-remat).
struct RematConfig {
  enum class Policy { None, Full, Selective, Budget };
  Policy policy = Policy::None;
  int64_t budgetBytes = 0; // Budget: the planned peak must fit in this
};

/// 2:4 structured sparsity (llmc-sparsify, Apex ASP's recipe): dense
/// training up to `pruneAtStep`, then the selected weights are pruned once
/// (by magnitude, 2 of every 4 along the reduction dimension) and the rest
/// of the run fine-tunes them with the masks fixed.
struct SparsityConfig {
  bool enabled = false;
  std::string pattern = "2:4";
  int64_t pruneAtStep = 0;
  /// Glob patterns of parameter names; empty: every matmul weight inside
  /// the transformer blocks.
  std::vector<std::string> params;
};

/// A size in bytes: "123", "64KiB", "1.5 MiB", "2GiB" (remat budgets);
/// none for anything else or a size that is not positive.
std::optional<int64_t> parseByteSize(llvm::StringRef text);

llvm::StringRef stringifyPrecision(PrecisionConfig::Kind kind);
/// "none", "full", "selective", "budget" (llmc-remat's policy option).
llvm::StringRef stringifyRematPolicy(RematConfig::Policy policy);
std::optional<RematConfig::Policy> parseRematPolicy(llvm::StringRef name);

/// Seconds a collective may make no progress before the job stops with the
/// rank that did not arrive (runtime/Comm): under a minute to detect a hung
/// or dead rank, well above the skew of ranks doing the same work.
constexpr double kDefaultCollectiveTimeoutSeconds = 30;

/// The device mesh (dp x tp x pp ranks, tp fastest: world rank
/// (pp_i * dp + dp_i) * tp + tp_i, as Megatron-LM lays them out), ZeRO
/// over dp (llmc-shard), tensor parallelism over tp
/// (llmc-tensor-parallel), and the collectives' timeout.
struct ParallelConfig {
  int64_t dp = 1; // 1 also when not given: `llmc run` sets world / (tp * pp)
  int64_t tp = 1;
  bool sp = false; // sequence parallelism over the tp ranks
  int64_t pp = 1; // pipeline stages
  int64_t zero = 0;
  double bucketMb = mlir::llmc::defaults::kGradientBucketMb;
  double timeoutSeconds = kDefaultCollectiveTimeoutSeconds;
};

/// Checkpoints `llmc run` keeps on disk unless keep_checkpoints says
/// otherwise (0 keeps all); `llmc plan` sizes the disk by it.
constexpr int64_t kDefaultKeepCheckpoints = 3;
/// data.shuffle_windows: each epoch's windows are shuffled in groups of
/// this many (a permutation of 4 bytes a window per source in memory).
constexpr int64_t kDefaultShuffleWindows = int64_t(1) << 20;

/// The `plan:` section of a training config: what `llmc plan` needs besides
/// the run itself (the machines, their price and speed, restarts, an
/// observed run) and the estimates it makes of what llmc run does not train.
/// `llmc run` reads these keys and ignores them.
struct PlanSection {
  std::string gpu;            // a name in the hardware data file; empty: none
  int64_t gpusPerNode = 8;
  int64_t nodes = 1;
  double pricePerGpuHour = 0; // USD; 0: no cost estimate
  double mfu = 0.4;           // model FLOPs utilization of the kernels
  double reserveGiB = 1.0;    // CUDA context, library workspaces, allocator
  /// Run overheads (the goodput model of training/Plan/Goodput.h). The
  /// defaults are assumptions, and the report says so.
  int64_t restarts = 0;         // job restarts over the run
  double restartMinutes = 10;   // re-launch per restart, before reloading
  double storageWriteGBps = 10; // aggregate checkpoint write, GB/s
  double storageReadGBps = 0;   // aggregate reload, GB/s; 0: the write's
  /// An observed run, at most one of the two: its wall-clock days, or its
  /// seconds per optimizer step; 0: not given.
  double observedDays = 0;
  double observedStepSeconds = 0;
  /// Gradients accumulate in fp32 (llmc run's step); false: 16 bits, as
  /// Megatron-LM's fp16 runs keep them.
  bool fp32Gradients = true;
  /// Values of precision, optimizer.name and remat that llmc plan estimates
  /// and llmc run does not train (tf32, fp8; adamw-8bit; attention); empty
  /// where the key holds one llmc run trains.
  std::string estimatedPrecision, estimatedOptimizer, estimatedRemat;
};

/// Everything that shapes the compiled training step besides the model.
struct TrainingStepOptions {
  OptimizerConfig optimizer;
  PrecisionConfig precision;
  LossScaleConfig lossScale;
  RematConfig remat;
  ParallelConfig parallel;
  SparsityConfig sparsity;
  /// This process's rank on mesh axis tp (not configured: `llmc run` sets
  /// it): the block of the vocabulary its programs hold.
  int64_t tpRank = 0;
  /// This process's stage on mesh axis pp (`llmc run` sets it too): the
  /// blocks its programs hold.
  int64_t ppStage = 0;
  /// The first block of each pipeline stage (ir/PipelineStages.h); empty:
  /// the balanced cut of the module compiled.
  std::vector<int64_t> ppStageBlocks;
  /// The programs run on a GPU (not configured: `llmc run --device cuda`
  /// sets it); the training pipeline's target-dependent choices follow it
  /// (passes/Pipelines.h: TrainingPipelineOptions::forCuda).
  bool forCuda = false;
};

} // namespace llmc

namespace mlir::llmc {

/// One source of a weighted blend (data.train as a list of mappings).
struct TrainSourceConfig {
  /// Default: the first path as written.
  std::string name;
  /// Token files or text; globs allowed.
  std::vector<std::string> paths;
  double weight = 1;
};

struct TrainDataConfig {
  /// The training data as one source: token files or text; globs allowed.
  /// Empty when `blend` is given.
  std::vector<std::string> train;
  /// The training data as weighted sources (data.train as a list of
  /// mappings); empty for one source.
  std::vector<TrainSourceConfig> blend;
  /// Validation files; empty: hold out `valFraction` of the training data.
  std::vector<std::string> val;
  double valFraction = 0.0;
  /// The loader's shuffle buffer, in windows.
  int64_t shuffleWindows = ::llmc::kDefaultShuffleWindows;
  /// "byte", or the directory of a GPT-2 BPE tokenizer (vocab.json and
  /// merges.txt).
  std::string tokenizer = "byte";
};

struct TrainingConfig {
  /// The file the config came from ("" when built in code).
  std::string path;

  /// `model:` as given: a preset name, a path, or "(inline)".
  std::string modelSource;
  /// Set when the model is a .mlir file (its @forward is trained as is).
  std::string modelMlirPath;
  /// The model (for .mlir: read from its `llmc.model` attribute later).
  ModelConfig model;

  ::llmc::OptimizerConfig optimizer;
  ::llmc::LrSchedule schedule;

  int64_t globalBatchSize = 0; // 0: micro_batch_size
  int64_t microBatchSize = kDefaultMicroBatchSize;
  int64_t seqLen = 0; // 0: the model's seq_len
  ::llmc::BatchRampup batchRampup;
  ::llmc::SeqLenWarmup seqLenWarmup;
  int64_t maxSteps = 0;
  int64_t maxTokens = 0;

  TrainDataConfig data;

  int64_t logInterval = 10;
  std::string progress = "auto"; // auto (bar on a terminal), bar or lines
  int64_t evalInterval = 100; // 0: evaluate only at the end
  int64_t evalSteps = 10;
  int64_t sampleTokens = 64; // 0: no sample at evaluations
  int64_t checkpointInterval = 0; // 0: only at the end
  int64_t keepCheckpoints = ::llmc::kDefaultKeepCheckpoints; // 0: all
  uint64_t seed = 1337;
  ::llmc::PrecisionConfig precision;
  ::llmc::LossScaleConfig lossScale; // fp16 only
  ::llmc::RematConfig remat;
  ::llmc::SparsityConfig sparsity;
  ::llmc::ParallelConfig parallel;
  ::llmc::GuardConfig guard;
  ::llmc::PlanSection plan; // read by llmc plan, ignored by llmc run
  std::optional<double> dropout; // overrides the model's dropout
  int64_t threads = 0;           // 0: every hardware thread
  std::string device = "cpu";    // cpu or cuda
  std::string out;               // default: runs/<config file stem>
  std::string initFrom; // llm.c checkpoint or safetensors to start from

  /// Where each key given came from, by YAML path: "train.yaml:4:15" for
  /// the file, "--lr" for a flag (`llmc plan` names them in its errors).
  std::map<std::string, std::string> origins;

  /// What the compiled training step is built with (training/Programs.h
  /// maps it to the passes' options for compileTrainingStep).
  ::llmc::TrainingStepOptions stepOptions() const;

  /// The batch schedule this config describes (after resolution).
  ::llmc::BatchSchedule batchSchedule() const;
};

/// What a config is read for. `llmc run` needs the model, the data and a
/// step count; `llmc plan` reads the same file for its training facts and
/// needs none of them (its tokens default to Chinchilla's), and accepts the
/// values only it estimates (precision fp8, ...).
enum class TrainingConfigUse { Run, Plan };

/// Reads `path` and applies `flags` (`--key value` or `--key=value`, as
/// listed by printTrainingConfigHelp) over it, then checks the result.
/// Errors in the file read "file:line:col: error: key: what is wrong"; in a
/// flag "--flag: what is wrong".
llvm::Expected<TrainingConfig>
loadTrainingConfig(llvm::StringRef path, llvm::ArrayRef<std::string> flags,
                   TrainingConfigUse use = TrainingConfigUse::Run);

/// The same from text (`bufferName` names it in errors; relative paths in
/// it are resolved against `baseDir`).
llvm::Expected<TrainingConfig>
parseTrainingConfig(llvm::StringRef text, llvm::StringRef bufferName,
                    llvm::StringRef baseDir, llvm::ArrayRef<std::string> flags,
                    TrainingConfigUse use = TrainingConfigUse::Run);

/// Whether a YAML text is a training config rather than a model config:
/// it has a `model:` key or another key of the training table that a model
/// config does not have (`llmc plan FILE.yaml` takes either).
bool isTrainingConfigText(llvm::StringRef text, llvm::StringRef bufferName);

/// Whether `flag` (without leading dashes, e.g. "lr" or "lr=3e-4") names a
/// config key; the command line parser uses it to tell its own options from
/// config overrides.
bool isTrainingConfigFlag(llvm::StringRef flag);

/// The table of keys: YAML path, flags, value and default, what it does.
void printTrainingConfigHelp(llvm::raw_ostream &os);

/// The same table as a Markdown reference, section by section: what
/// docs/config-keys.md holds (`llmc help config --markdown`).
void printConfigKeyReference(llvm::raw_ostream &os);

/// The resolved config as YAML that loadTrainingConfig reads back.
void printTrainingConfig(const TrainingConfig &config, llvm::raw_ostream &os);

/// The parts of a config a checkpoint must agree with to be resumed:
/// "model", "optimizer", "data" (files, tokenizer, batch shape and seed) and
/// "precision" (with the AMP lists and the loss scaling),
/// each as canonical `key: value` lines. Step counts, intervals and the
/// output directory are not among them, so a run can be extended.
std::map<std::string, std::string>
resumeSections(const TrainingConfig &config);

} // namespace mlir::llmc

#endif // LLMC_FRONTEND_TRAINCONFIG_H
