// `llmc plan`'s memory and time of one parallel layout: model states,
// activations (formulas), step time by component, and the checks a layout
// must pass.
#ifndef LLMC_CODEGEN_PLAN_ESTIMATE_H
#define LLMC_CODEGEN_PLAN_ESTIMATE_H

#include "training/Plan/Hardware.h"
#include "training/Plan/ModelAnalysis.h"
#include "frontend/PlanConfig.h"
#include "ir/PipelineStages.h"

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
// Memory and time of one layout
//===----------------------------------------------------------------------===//

/// Bytes per parameter of each model state (before ZeRO sharding).
struct StateBytes {
  double weights = 0, gradients = 0, master = 0, optimizer = 0;
  double total() const { return weights + gradients + master + optimizer; }
};
/// `sgdMomentum`: SGD keeps its fp32 momentum buffer (SGD only).
StateBytes getStateBytes(Precision precision, Optimizer optimizer,
                         bool fp32Gradients, bool sgdMomentum = true);

/// Bytes per parameter of the fp32 copy the optimizer steps under ZeRO
/// `zero` over `dp` ranks (before sharding): the master weights, or with
/// ZeRO-1/2 in fp32 the partition llmc-shard keeps beside full weights.
double masterBytesPerParameter(const StateBytes &perParameter, int zero,
                               int64_t dp);

/// Bytes of model states on one device holding `parameters` parameters
/// under ZeRO `zero` over `dp` data-parallel ranks.
StateBytes shardStates(const StateBytes &perParameter, double parameters,
                       int zero, int64_t dp);

/// Activation bytes one transformer block keeps for its backward pass, per
/// micro-batch of `batch` sequences of `seqLen` tokens, on one of `tp`
/// tensor-parallel ranks, by term. Tensor parallelism splits the terms
/// between the column- and row-parallel projections (Korthikanti's
/// 10sbh + 24sbh/t); `sp` (llmc run --sp) also the norms' inputs, the
/// dropout masks and the block input, which live on the rank's slice of
/// the sequence. The inputs of the column-parallel projections stay whole:
/// llmc keeps the all-gathered tensor for the weight gradient (Megatron-LM
/// gathers it again in the backward for Korthikanti's 34sbh/t), so llmc's
/// is 4sbh + 30sbh/t.
///
/// A formula: the per-layer terms of Korthikanti et al. 2022 ("Reducing
/// Activation Recomputation in Large Transformer Models", sec. 4),
/// sbh(34 + 5as/h) bytes for 16-bit activations with dropout and a 4h MLP,
/// generalized to the element size, the MLP width and activation and to
/// models without dropout. Where the planner can compile the training step
/// (no tensor or pipeline parallelism, fp8 or remat `attention`), the
/// memory plan of the compiled @grad_step replaces it; the layout
/// comparison and `--fit` search still use it.
///
/// llmc-remat's selective policy is not one of Korthikanti's: it keeps the
/// outputs of the ops that are not cheap to recompute (matmuls, attention)
/// and the block boundary, and recomputes norms, activations, dropout and
/// residual adds: e(7sbh + sbf) per block (QKV 3sbh, attention output,
/// projection, second MLP matmul and block input sbh each, the first MLP
/// matmul sbf, 2sbf for SwiGLU's two). Korthikanti's "selective" (the
/// attention core recomputed) is the planner's `attention`.
struct BlockActivations {
  double norms = 0;         // inputs of the two norms
  double attention = 0;     // QKV input, Q, K, V, projection input, mask
  double attentionCore = 0; // softmax output, its dropout mask and output
  double mlp = 0;           // MLP input, activation input/output, mask
  double blockInput = 0;    // all that full recompute keeps
  double matmulOutputs = 0; // all that llmc-remat's selective keeps
  double stored(Remat remat) const;
};
BlockActivations getBlockActivations(const ModelConfig &config, int64_t batch,
                                     int64_t seqLen, int64_t tp,
                                     Precision precision, bool sp = false);

/// A parallel layout and per-device batch: tp * pp * dp is the GPU count.
struct Layout {
  int64_t tp = 1, pp = 1, dp = 1;
  int zero = 0;
  int64_t microBatch = 1;
  Remat remat = Remat::None;
  bool sp = false; // sequence parallelism over the tp ranks (llmc run --sp)
};

/// Memory of one device: the most loaded pipeline stage's, or the stage
/// asked for (`llmc plan --stage`).
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
  double imbalance = 0; // the slowest stage's excess over an even share
  double tpComm = 0;    // tensor-parallel all-reduces (not overlapped)
  double ppComm = 0;    // activations between stages
  double dpComm = 0;    // data-parallel traffic not hidden by backward
  double optimizer = 0; // the update, bound by HBM bandwidth
  double total() const {
    return compute + recompute + bubble + imbalance + tpComm + ppComm +
           dpComm + optimizer;
  }
};

/// Bytes one device sends per step on each mesh axis: what StepTime's
/// communication terms divide by a bandwidth. Collectives are rings: an
/// all-reduce sends 2(n-1)/n of its buffer, a reduce-scatter or all-gather
/// (n-1)/n (llmc run's `mesh traffic` line counts the runtime's calls the
/// same way, runtime/Comm/Communicator.h).
struct StepTraffic {
  double tp = 0; // the blocks' all-reduces (reduce-scatter/all-gather pairs
                 // with sp): per micro-batch 2 forward and 2 backward, 2
                 // more when remat full recomputes the forward; the
                 // embedding's, classifier's and loss's; with sp the
                 // gradients of parameters used on the sequence slice
  double pp = 0; // a stage boundary: activations forward and their
                 // gradients back, both directions
  double ppTied = 0; // the tied embedding's gradient, first <-> last stage
  double dpGradients = 0; // gradients: all-reduce or reduce-scatter
  double dpWeights = 0;   // ZeRO's all-gathers of weights
  double dp() const { return dpGradients + dpWeights; }
};

/// Everything `llmc plan` reports for one layout.
struct Estimate {
  Layout layout;
  int64_t seqLen = 0;
  int64_t globalBatch = 0;
  int64_t microBatchesPerStep = 0; // per pipeline: gradient accumulation
  PipelineCut cut; // the blocks of each pipeline stage (one stage: all)
  DeviceMemory memory;
  BlockActivations block;               // per block, per micro-batch, this tp
  double extraFirst = 0, extraLast = 0; // embedding / logits activations
  std::array<double, kNumRemats> activationsByRemat{}; // of the device
  // Compute and time; time and cost need a GPU.
  double tokens = 0;
  bool tokensFromChinchilla = false;
  double modelFlopsPerToken = 0; // 6P + 12 L h s (PaLM's MFU definition)
  double recomputeFlopsPerToken = 0;
  double trainingFlops = 0; // modelFlopsPerToken * tokens
  double steps = 0;
  StepTraffic traffic; // needs no GPU
  StepTime step;
  double seconds = 0, cost = 0, achievedMfu = 0;
  bool hasGpu = false;
};

/// The layout a train config and cluster ask for (dp = GPUs / (tp * pp),
/// rounded down; validateLayout reports a remainder).
Layout getConfiguredLayout(const TrainingFacts &train,
                           const ClusterConfig &cluster);

/// Checks the layout against the model and cluster: tp divides the heads
/// and the MLP width, pp is at most the layers, the GPU count is
/// tp * pp * dp, the
/// global batch a multiple of micro-batch * dp, ZeRO-2/3 not with pp.
/// Errors name where the offending value was given.
llvm::Error validateLayout(const PlanModel &model, const TrainingFacts &train,
                           const ClusterConfig &cluster, const Layout &layout);

/// The estimate of a valid layout; `gpu` null for memory only. The memory
/// is the most loaded pipeline stage's, or with `stage` >= 0 (below pp)
/// that stage's; the step time is paced by the slowest stage either way.
Estimate estimate(const PlanModel &model, const TrainingFacts &train,
                  const ClusterConfig &cluster, const GpuSpec *gpu,
                  const Layout &layout, int64_t stage = -1);

/// Chinchilla-optimal training tokens, D = 20 * P (Hoffmann et al. 2022).
inline double chinchillaTokens(double parameters) { return 20 * parameters; }
/// Training FLOPs per token, 6P + 12 L h s: the matmuls with their weights
/// forward and backward, and attention's two products (Chowdhery et al.
/// 2022, PaLM appendix B, the definition of MFU).
double modelFlopsPerToken(const PlanModel &model, int64_t seqLen);
/// The same FLOPs by part: per block, and the classifier's
/// (ir/PipelineStages.h); they add up to modelFlopsPerToken.
PipelineCosts pipelineCostsOf(const PlanModel &model, int64_t seqLen);
/// The blocks of each of `pp` pipeline stages: the cut
/// llmc-pipeline-parallel makes (balanced by pipelineCostsOf).
PipelineCut pipelineCutOf(const PlanModel &model, int64_t seqLen, int64_t pp);

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_ESTIMATE_H
