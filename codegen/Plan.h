// `llmc plan`: memory, compute, time and cost of a training configuration on
// a cluster, and the search for the fastest parallel layout that fits.
//
// Every number says where it comes from: the IR (parameter counts and shapes
// of the built @forward, the compiled program's memory plan and FLOPs), a
// formula (activations that the backward pass keeps, which the IR cannot
// show until the training step exists; communication; time), the hardware
// data file (peak FLOP/s, memory, bandwidths) or the user's configs.
#ifndef LLMC_CODEGEN_PLAN_H
#define LLMC_CODEGEN_PLAN_H

#include "frontend/ModelConfig.h"

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
/// Activation recomputation (Korthikanti et al. 2022): none keeps every
/// activation, selective recomputes the attention core (softmax and its
/// dropout), full keeps only each block's input and recomputes the block.
enum class Remat : uint8_t { None, Selective, Full };

llvm::StringRef stringifyPrecision(Precision precision); // "fp32", "bf16", ...
llvm::StringRef stringifyOptimizer(Optimizer optimizer); // "adamw", ...
llvm::StringRef stringifyRemat(Remat remat); // "none", "selective", "full"
std::optional<Precision> parsePrecision(llvm::StringRef text);
std::optional<Optimizer> parseOptimizer(llvm::StringRef text);
std::optional<Remat> parseRemat(llvm::StringRef text);

/// Where each configured value came from, for error messages:
/// "train.yaml:4:15" or "--tp".
using Origins = std::map<std::string, std::string>;

struct TrainConfig {
  Precision precision = Precision::Bf16;
  Optimizer optimizer = Optimizer::AdamW;
  /// Mixed precision accumulates gradients in fp32 by default (Megatron,
  /// BLOOM: the 18 bytes per parameter); false keeps them in 16 bits.
  bool fp32Gradients = true;
  int64_t microBatch = 1;  // sequences per device per forward/backward
  int64_t globalBatch = 0; // sequences per optimizer step; 0: 512
  int64_t seqLen = 0;      // tokens per sequence; 0: the model's seq_len
  Remat remat = Remat::None;
  int zero = 0; // ZeRO stage 0-3 over the data-parallel group
  int64_t tensorParallel = 1;
  int64_t pipelineParallel = 1;
  double tokens = 0; // training tokens; 0: Chinchilla's 20 * P
  Origins origins;
};

struct ClusterConfig {
  std::string gpu; // a name in the hardware data file; empty: none
  int64_t gpusPerNode = 8;
  int64_t nodes = 1;
  double pricePerGpuHour = 0; // USD; 0: no cost estimate
  double mfu = 0.4;           // model FLOPs utilization of the kernels
  double reserveGiB = 1.0;    // CUDA context, library workspaces, allocator
  Origins origins;

  int64_t numGpus() const { return gpusPerNode * nodes; }
};

/// Reads the keys given in a train / cluster YAML file over `config` (keys
/// not given keep their value). Errors are "file:line:col: error: ...".
llvm::Error parseTrainConfig(llvm::StringRef text, llvm::StringRef bufferName,
                             TrainConfig &config);
llvm::Error parseClusterConfig(llvm::StringRef text, llvm::StringRef bufferName,
                               ClusterConfig &config);
llvm::Error loadTrainConfigFile(llvm::StringRef path, TrainConfig &config);
llvm::Error loadClusterConfigFile(llvm::StringRef path, ClusterConfig &config);

/// "80GB" (1e9), "80GiB" (2^30), "81920MiB", "0.5TB"; a bare number is GiB.
llvm::Expected<double> parseMemorySize(llvm::StringRef text);
/// "180e9", "180B", "1.4T", "300M", "20K".
llvm::Expected<double> parseCount(llvm::StringRef text);

//===----------------------------------------------------------------------===//
// Hardware data file
//===----------------------------------------------------------------------===//

struct GpuSpec {
  std::string name;        // the key in the data file, e.g. "a100-80gb"
  std::string description; // e.g. "NVIDIA A100 SXM4 80GB"
  double memoryGiB = 0;
  double hbmTBps = 0;
  double nvlinkGBps = 0; // intra-node, both directions as datasheets state
  double ibGBps = 0;     // inter-node per GPU, one direction
  /// Dense peak TFLOP/s by precision; 0: not supported.
  std::array<double, kNumPrecisions> peakTflops{};
  std::string location; // "hardware.yaml:12:1", for labels

  double peakFlops(Precision p) const {
    return peakTflops[static_cast<unsigned>(p)] * 1e12;
  }
};

struct HardwareTable {
  std::string path;
  std::vector<GpuSpec> gpus;
  /// Case-insensitive lookup; nullptr when absent.
  const GpuSpec *find(llvm::StringRef name) const;
};

llvm::Expected<HardwareTable> parseHardware(llvm::StringRef text,
                                            llvm::StringRef bufferName);
llvm::Expected<HardwareTable> loadHardwareFile(llvm::StringRef path);
/// The data file a build uses when none is given: $LLMC_HARDWARE if set,
/// else examples/hardware.yaml of the source tree.
std::string getDefaultHardwarePath();
/// The named GPU, or an error that names the data file to add it to.
llvm::Expected<GpuSpec> lookupGpu(const HardwareTable &table,
                                  llvm::StringRef name);

//===----------------------------------------------------------------------===//
// The model, from its IR
//===----------------------------------------------------------------------===//

/// Parameter counts read from the IR of @forward, split by where a layout
/// puts them.
struct PlanModel {
  ModelConfig config;
  std::string input;    // preset name, config path or model.mlir path
  std::string irSource; // how the IR was obtained, for labels
  int64_t numParameters = 0;
  int64_t numBlocks = 0;
  /// Per transformer block (h.<i>.*; every block has the same shapes):
  /// parameters tensor parallelism splits and those it replicates.
  int64_t blockSplit = 0, blockReplicated = 0;
  /// Outside the blocks, on the first stage (token and position
  /// embeddings) and on the last (final norm, untied classifier).
  int64_t firstSplit = 0, firstReplicated = 0;
  int64_t lastSplit = 0, lastReplicated = 0;
  /// Parameters of the token embedding a tied classifier reuses; pipeline
  /// parallelism keeps a copy on the last stage.
  int64_t tiedEmbedding = 0;
  /// The token shape of a model.mlir input (its @forward is compiled as
  /// is when the plan asks for that shape).
  int64_t mlirBatch = 0, mlirSeqLen = 0;
  std::string mlirText;

  int64_t blockParameters() const { return blockSplit + blockReplicated; }
};

/// `input` is a preset name, a YAML model config or a model.mlir whose
/// `llmc.model` attribute gives the config. Parameters are counted from the
/// IR (getModelInfo).
llvm::Expected<PlanModel> loadPlanModel(MLIRContext &context,
                                        llvm::StringRef input);
llvm::Expected<PlanModel> analyzeModel(MLIRContext &context,
                                       const ModelConfig &config);

/// The compiled forward pass of one micro-batch: the memory planner's peak
/// of its intermediates (f32, whole model on one device) and its FLOPs.
struct ForwardPlan {
  int64_t batch = 0, seqLen = 0;
  int64_t arenaBytes = 0;
  int64_t flops = 0;
  std::string source;
};
llvm::Expected<ForwardPlan> planForward(MLIRContext &context,
                                        const PlanModel &model, int64_t batch,
                                        int64_t seqLen);

//===----------------------------------------------------------------------===//
// Memory and time of one layout
//===----------------------------------------------------------------------===//

/// Bytes per parameter of each model state (before ZeRO sharding).
struct StateBytes {
  double weights = 0, gradients = 0, master = 0, optimizer = 0;
  double total() const { return weights + gradients + master + optimizer; }
};
StateBytes getStateBytes(Precision precision, Optimizer optimizer,
                         bool fp32Gradients);

/// Bytes of model states on one device holding `parameters` parameters
/// under ZeRO `zero` over `dp` data-parallel ranks.
StateBytes shardStates(const StateBytes &perParameter, double parameters,
                       int zero, int64_t dp);

/// Activation bytes one transformer block keeps for its backward pass, per
/// micro-batch of `batch` sequences of `seqLen` tokens, on one of `tp`
/// tensor-parallel ranks (with sequence parallelism), by term.
///
/// Today this is a formula: the per-layer terms of Korthikanti et al. 2022
/// ("Reducing Activation Recomputation in Large Transformer Models", sec. 4),
/// sbh(34 + 5as/h) bytes for 16-bit activations with dropout and a 4h MLP,
/// generalized to the element size, the MLP width and activation and to
/// models without dropout. Once the training step exists, this is the one
/// function to replace by the memory plan of its compiled backward.
struct BlockActivations {
  double norms = 0;         // inputs of the two norms
  double attention = 0;     // QKV input, Q, K, V, projection input, mask
  double attentionCore = 0; // softmax output, its dropout mask and output
  double mlp = 0;           // MLP input, activation input/output, mask
  double blockInput = 0;    // all that full recompute keeps
  double stored(Remat remat) const;
};
BlockActivations getBlockActivations(const ModelConfig &config, int64_t batch,
                                     int64_t seqLen, int64_t tp,
                                     Precision precision);

/// A parallel layout and per-device batch: tp * pp * dp is the GPU count.
struct Layout {
  int64_t tp = 1, pp = 1, dp = 1;
  int zero = 0;
  int64_t microBatch = 1;
  Remat remat = Remat::None;
};

/// Memory of the most loaded device (first or last pipeline stage).
struct DeviceMemory {
  int64_t stage = 0;
  double parameters = 0; // held by this device before ZeRO
  StateBytes states;     // after ZeRO
  double activations = 0;
  double workspace = 0;
  double reserve = 0;
  int64_t microBatchesInFlight = 1;
  double total() const {
    return states.total() + activations + workspace + reserve;
  }
};

/// Step time by component, in seconds.
struct StepTime {
  double compute = 0;   // model FLOPs at the assumed MFU
  double recompute = 0; // remat's extra forward FLOPs
  double bubble = 0;    // pipeline fill and drain (1F1B)
  double tpComm = 0;    // tensor-parallel all-reduces (not overlapped)
  double ppComm = 0;    // activations between stages
  double dpComm = 0;    // data-parallel traffic not hidden by backward
  double optimizer = 0; // the update, bound by HBM bandwidth
  double total() const {
    return compute + recompute + bubble + tpComm + ppComm + dpComm + optimizer;
  }
};

/// Everything `llmc plan` reports for one layout.
struct Estimate {
  Layout layout;
  int64_t seqLen = 0;
  int64_t globalBatch = 0;
  int64_t microBatchesPerStep = 0; // per pipeline: gradient accumulation
  DeviceMemory memory;
  BlockActivations block;               // per block, per micro-batch, this tp
  double extraFirst = 0, extraLast = 0; // embedding / logits activations
  std::array<double, 3> activationsByRemat{}; // of the device, per policy
  // Compute and time; time and cost need a GPU.
  double tokens = 0;
  bool tokensFromChinchilla = false;
  double modelFlopsPerToken = 0; // 6P + 12 L h s (PaLM's MFU definition)
  double recomputeFlopsPerToken = 0;
  double trainingFlops = 0; // modelFlopsPerToken * tokens
  double steps = 0;
  StepTime step;
  double seconds = 0, cost = 0, achievedMfu = 0;
  bool hasGpu = false;
};

/// The layout a train config and cluster ask for (dp = GPUs / (tp * pp),
/// rounded down; validateLayout reports a remainder).
Layout getConfiguredLayout(const TrainConfig &train,
                           const ClusterConfig &cluster);

/// Checks the layout against the model and cluster: tp divides the heads
/// and the MLP width, pp the layers, the GPU count is tp * pp * dp, the
/// global batch a multiple of micro-batch * dp, ZeRO-2/3 not with pp.
/// Errors name where the offending value was given.
llvm::Error validateLayout(const PlanModel &model, const TrainConfig &train,
                           const ClusterConfig &cluster, const Layout &layout);

/// The estimate of a valid layout; `gpu` null for memory only.
Estimate estimate(const PlanModel &model, const TrainConfig &train,
                  const ClusterConfig &cluster, const GpuSpec *gpu,
                  const Layout &layout);

/// Chinchilla-optimal training tokens, D = 20 * P (Hoffmann et al. 2022).
inline double chinchillaTokens(double parameters) { return 20 * parameters; }
/// Training FLOPs per token, 6P + 12 L h s: the matmuls with their weights
/// forward and backward, and attention's two products (Chowdhery et al.
/// 2022, PaLM appendix B, the definition of MFU).
double modelFlopsPerToken(const PlanModel &model, int64_t seqLen);

//===----------------------------------------------------------------------===//
// The --fit search
//===----------------------------------------------------------------------===//

struct FitResult {
  double budgetBytes = 0;
  int64_t candidates = 0; // layouts the search tried
  int64_t invalid = 0;    // batch not divisible, ZeRO-2/3 with pp
  int64_t tooBig = 0;     // did not fit
  std::optional<Estimate> smallestTooBig; // the closest miss
  std::vector<Estimate> fitting;          // fastest first
};

/// Tries every tp (powers of two dividing heads, MLP width and the GPU
/// count), pp (dividing the layers), ZeRO stage, micro-batch (powers of two
/// dividing the per-rank batch) and remat policy; keeps those whose most
/// loaded device fits in `budgetBytes`, fastest step first (ties: larger
/// micro-batch, lower ZeRO stage, less memory).
FitResult searchFit(const PlanModel &model, const TrainConfig &train,
                    const ClusterConfig &cluster, const GpuSpec &gpu,
                    double budgetBytes);

/// Why `other` is slower than `best`: its largest step-time components
/// over best's, e.g. "pipeline bubble +4.1%, recompute +2.7%".
std::string explainLoss(const Estimate &best, const Estimate &other);

//===----------------------------------------------------------------------===//
// Report
//===----------------------------------------------------------------------===//

/// One labelled number: a value in a base unit (bytes, FLOP, s, USD, ...)
/// and where it comes from.
struct Quantity {
  std::string key;   // JSON key
  std::string label; // for people
  double value = 0;
  std::string unit;   // "bytes", "parameters", "tokens", "FLOP", "FLOP/s",
                      // "s", "USD", "steps", "sequences", "fraction"
  std::string source; // "IR", "formula: ...", "data file", "train config"
};

struct Section {
  std::string key, title;
  std::vector<Quantity> rows;
};

/// A table whose rows are layouts (the by-layout comparison, --fit).
struct LayoutTable {
  std::string key, title, note;
  double capacityBytes = 0; // per device; 0: no "fits" column
  std::vector<Estimate> rows;
  std::vector<std::string> why; // per row, --fit only
};

struct Report {
  std::vector<std::string> header; // lines describing model, run, layout
  std::vector<Section> sections;
  std::vector<LayoutTable> tables;
  std::vector<std::string> notes; // closing lines (assumptions, misses)
  std::map<std::string, std::string> facts; // model/cluster strings (JSON)
};

struct PlanRequest {
  const PlanModel *model = nullptr;
  TrainConfig train;
  ClusterConfig cluster;
  const GpuSpec *gpu = nullptr; // null: memory and FLOPs only
  std::string hardwarePath;
  std::optional<ForwardPlan> forward;
  std::optional<double> fitBudget; // --fit
};

/// Builds the report of a validated request (and, with --fit, searches).
llvm::Expected<Report> buildReport(const PlanRequest &request);
void printReportTable(const Report &report, llvm::raw_ostream &os);
void printReportJson(const Report &report, llvm::raw_ostream &os);

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_H
