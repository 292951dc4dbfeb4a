// The configs of `llmc plan`: the training facts it estimates, read from an
// `llmc run` config (frontend/TrainConfig.h, the one training schema), and
// the cluster schema: the parallel layout and the machines it runs on, read
// from the --cluster YAML file (frontend/ConfigYaml.h) with file:line:col
// errors.
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
/// Without a training config (no --train), the planner estimates a
/// pretraining run of this global batch and micro-batch 1; with one, the
/// config's values and `llmc run`'s defaults (frontend/TrainConfig.h) apply.
constexpr int64_t kDefaultGlobalBatch = 512;

/// The training facts the planner estimates: from an `llmc run` config
/// (trainConfigFromRun), then the flags. Origins are keyed by the run
/// schema's names (micro_batch_size, ...).
struct TrainConfig {
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
  int64_t keepCheckpoints = kDefaultKeepCheckpoints;
  Origins origins;
};

/// The training facts of an `llmc run` config (read with
/// TrainingConfigUse::Plan): precision, optimizer, micro/global batch,
/// seq_len, remat, max_tokens or max_steps, with llmc run's defaults. The
/// budget policy has no estimate: an error at its key.
llvm::Expected<TrainConfig> trainConfigFromRun(const TrainingConfig &run);

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
int64_t globalBatchOf(const TrainConfig &train);

/// The cluster schema: the parallel layout and the machines.
struct ClusterConfig {
  int zero = 0; // ZeRO stage 0-3 over the data-parallel group
  int64_t tensorParallel = 1;
  bool sequenceParallel = false; // with tensorParallel > 1 (llmc run --sp)
  int64_t pipelineParallel = 1;
  std::string gpu; // a name in the hardware data file; empty: none
  int64_t gpusPerNode = 8;
  int64_t nodes = 1;
  double pricePerGpuHour = 0; // USD; 0: no cost estimate
  double mfu = 0.4;           // model FLOPs utilization of the kernels
  double reserveGiB = 1.0;    // CUDA context, library workspaces, allocator
  /// Run overheads (the goodput model of codegen/Plan/Goodput.h). The
  /// defaults are assumptions, and the report says so.
  int64_t restarts = 0;         // job restarts over the run
  double restartMinutes = 10;   // re-launch per restart, before reloading
  double storageWriteGBps = 10; // aggregate checkpoint write, GB/s
  double storageReadGBps = 0;   // aggregate reload, GB/s; 0: the write's
  /// An observed run, at most one of the two: its wall-clock days, or its
  /// seconds per optimizer step; 0: not given.
  double observedDays = 0;
  double observedStepSeconds = 0;
  Origins origins;

  int64_t numGpus() const { return gpusPerNode * nodes; }
};

/// The keys of the cluster schema, for messages that point a key given in
/// the wrong file here.
llvm::ArrayRef<llvm::StringRef> clusterConfigKeys();

/// Reads the keys given in a cluster YAML file over `config` (keys not
/// given keep their value). Errors are "file:line:col: error: ...".
llvm::Error parseClusterConfig(llvm::StringRef text, llvm::StringRef bufferName,
                               ClusterConfig &config);
llvm::Error loadClusterConfigFile(llvm::StringRef path, ClusterConfig &config);

/// "80GB" (1e9), "80GiB" (2^30), "81920MiB", "0.5TB"; a bare number is GiB.
llvm::Expected<double> parseMemorySize(llvm::StringRef text);
/// "180e9", "180B", "1.4T", "300M", "20K".
llvm::Expected<double> parseCount(llvm::StringRef text);

} // namespace mlir::llmc::plan

#endif // LLMC_FRONTEND_PLANCONFIG_H
