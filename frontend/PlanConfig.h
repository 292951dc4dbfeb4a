// What `llmc plan` estimates, read from an `llmc run` config and its flags
// (frontend/TrainConfig.h, the one schema): the training facts, and the
// cluster: the config's parallel layout and its `plan:` section (the
// machines, their price, restarts, an observed run).
#ifndef LLMC_FRONTEND_PLANCONFIG_H
#define LLMC_FRONTEND_PLANCONFIG_H


#include "frontend/TrainConfig.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::llmc::plan {

//===----------------------------------------------------------------------===//
// Training and cluster configuration
//===----------------------------------------------------------------------===//

/// The precision GEMMs run in; it picks the peak FLOP/s column of the data
/// file and the bytes of weights, gradients and activations.
enum class Precision : uint8_t { Fp32, Tf32, Fp16, Bf16, Fp8 };
constexpr unsigned kNumPrecisions = 5;
enum class Optimizer : uint8_t { AdamW, AdamW8bit, Sgd };
/// Activation recomputation. none, selective and full are llmc-remat's
/// policies of the same names (`remat:` of an `llmc run` config): none keeps
/// every activation, selective keeps matmul and attention outputs and
/// recomputes the cheap ops, full keeps only each block's input and
/// recomputes the block. attention is Korthikanti et al. 2022's "selective"
/// (recompute the attention core: softmax and its dropout), which llmc-remat
/// does not implement; the planner estimates it for comparison.
enum class Remat : uint8_t { None, Selective, Full, Attention };
constexpr unsigned kNumRemats = 4;

llvm::StringRef stringifyPrecision(Precision precision); // "fp32", "bf16", ...
llvm::StringRef stringifyOptimizer(Optimizer optimizer); // "adamw", ...
llvm::StringRef stringifyRemat(Remat remat); // "none", "selective", "full"
std::optional<Precision> parsePrecision(llvm::StringRef text);
std::optional<Optimizer> parseOptimizer(llvm::StringRef text);
std::optional<Remat> parseRemat(llvm::StringRef text);

/// Where each configured value came from, for error messages:
/// "train.yaml:4:15" or "--tp".
using Origins = std::map<std::string, std::string>;

/// Sizes in bytes.
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// Without a training config file (a model given alone), the planner
/// estimates a pretraining run of this global batch, micro-batch 1 and
/// bf16; with one, the config's values and `llmc run`'s defaults
/// (frontend/TrainConfig.h) apply.
constexpr int64_t kDefaultGlobalBatch = 512;

/// The training facts the planner estimates: from an `llmc run` config and
/// its flags (trainingFactsFromRun). Origins are keyed by the config's paths
/// (micro_batch_size, ...).
struct TrainingFacts {
  Precision precision = Precision::Bf16;
  Optimizer optimizer = Optimizer::AdamW;
  /// SGD keeps a momentum buffer (fp32) unless llmc run's
  /// optimizer.momentum is 0.
  bool sgdMomentum = true;
  /// Mixed precision accumulates gradients in fp32 by default (Megatron,
  /// BLOOM: the 18 bytes per parameter); false keeps them in 16 bits.
  bool fp32Gradients = true;
  int64_t microBatch = 1;  // sequences per device per forward/backward
  int64_t globalBatch = 0; // sequences per optimizer step; 0: 512
  int64_t seqLen = 0;      // tokens per sequence; 0: the model's seq_len
  Remat remat = Remat::None;
  double tokens = 0; // training tokens; 0: steps, else Chinchilla's 20 * P
  int64_t steps = 0; // optimizer steps (max_steps) when tokens is 0
  /// Steps between checkpoints and how many are kept (llmc run's
  /// checkpoint_interval, 0: only at the end; keep_checkpoints, 0: all).
  int64_t checkpointInterval = 0;
  int64_t keepCheckpoints = ::llmc::kDefaultKeepCheckpoints;
  Origins origins;
};

/// The training facts of an `llmc run` config (read with
/// TrainingConfigUse::Plan): precision, optimizer, micro/global batch,
/// seq_len, remat, max_tokens or max_steps, with llmc run's defaults
/// (`runDefaults`, a config file was given) or, for keys not given, the
/// planner's pretraining run (TrainingFacts's). The budget policy has no
/// estimate: an error at its key.
llvm::Expected<TrainingFacts> trainingFactsFromRun(const TrainingConfig &run,
                                                   bool runDefaults = true);

/// Whether `p` keeps weights and activations in 16 bits (fp16, bf16, fp8).
bool isHalf(Precision p);
/// Where `key` was given ("train.yaml:4:15"), else "--flag".
std::string originOf(const Origins &origins, llvm::StringRef key,
                     llvm::StringRef flag);
/// "train.yaml:3:18: error: key: message" for a value from a file, or
/// "--flag: message" for a flag or a default.
llvm::Error layoutError(const Origins &origins, llvm::StringRef key,
                        llvm::StringRef flag, const llvm::Twine &message);
/// How a report names the origin of a configured value: the flag, `file`
/// for a value from it, else `fallback`.
std::string sourceOf(const Origins &origins, llvm::StringRef key,
                     llvm::StringRef file, llvm::StringRef fallback);
/// The global batch of a train config, kDefaultGlobalBatch when not given.
int64_t globalBatchOf(const TrainingFacts &train);

/// The cluster: the config's parallel layout and its `plan:` section (the
/// machines, their price, the run's overheads; defaults written once, in
/// ::llmc::PlanSection). Origins are keyed by the config's paths
/// (parallel.tp, plan.gpu, ...).
struct ClusterConfig : ::llmc::PlanSection {
  int zero = 0; // ZeRO stage 0-3 over the data-parallel group
  int64_t tensorParallel = 1;
  bool sequenceParallel = false; // with tensorParallel > 1
  int64_t pipelineParallel = 1;
  Origins origins;

  int64_t numGpus() const { return gpusPerNode * nodes; }
};

/// The cluster of a config: parallel.tp, .pp, .sp and .zero and the plan
/// section. A parallel.dp given sizes the cluster when the plan section
/// does not (nodes x gpus_per_node = dp x tp x pp), and must agree with it
/// when it does.
llvm::Expected<ClusterConfig> clusterConfigFromRun(const TrainingConfig &run);

/// "80GB" (1e9), "80GiB" (2^30), "81920MiB", "0.5TB"; a bare number is GiB.
llvm::Expected<double> parseMemorySize(llvm::StringRef text);
/// "180e9", "180B", "1.4T", "300M", "20K".
llvm::Expected<double> parseCount(llvm::StringRef text);

} // namespace mlir::llmc::plan

#endif // LLMC_FRONTEND_PLANCONFIG_H
