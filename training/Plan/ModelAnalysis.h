// `llmc plan`'s model analysis: parameter counts read from the IR of
// @forward, split by where a parallel layout puts them, and the memory plan
// and FLOPs of the compiled forward pass.
#ifndef LLMC_CODEGEN_PLAN_MODELANALYSIS_H
#define LLMC_CODEGEN_PLAN_MODELANALYSIS_H

#include "frontend/ModelConfig.h"
#include "frontend/PlanConfig.h"

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
  /// embeddings) and on the last (final norm, untied classifier). The
  /// split ones are split by vocabulary rows (wte, an untied lm_head): a
  /// tp rank holds ceil(V/tp) of their V rows (vocabRowsPerRank).
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
struct ForwardMemory {
  int64_t batch = 0, seqLen = 0;
  int64_t arenaBytes = 0;
  int64_t flops = 0;
  std::string source;
};
llvm::Expected<ForwardMemory> compileForwardMemory(MLIRContext &context,
                                        const PlanModel &model, int64_t batch,
                                        int64_t seqLen);

/// The compiled training step of one micro-batch on one data-parallel
/// rank (whole model, no tensor or pipeline parallelism): @grad_step
/// through the training pipeline (llmc-amp in the plan's precision,
/// llmc-shard at the plan's dp and ZeRO stage, llmc-remat under each of
/// its policies none, selective and full), lowered, its memory planned.
struct StepMemory {
  int64_t batch = 0, seqLen = 0, dp = 1;
  int zero = 0;
  Precision precision = Precision::Fp32;
  /// Per llmc-remat policy (indexed by Remat; attention is not one):
  /// whether it compiled, the arena of @grad_step (its planned peak:
  /// activations kept, their gradients, logits and temporaries) and the
  /// activations llmc-remat counts as kept for the backward.
  std::array<bool, kNumRemats> compiled{};
  std::array<int64_t, kNumRemats> arenaBytes{}, storedBytes{};
  std::string source;
};
/// Whether compileStepMemory can compile a step of this precision and
/// layout: the training pipeline has fp32 (tf32 only changes GEMMs), fp16
/// and bf16, data parallelism and ZeRO, but no tensor or pipeline
/// parallelism and no fp8.
bool canCompileStep(Precision precision, int64_t tp, int64_t pp);
llvm::Expected<StepMemory> compileStepMemory(MLIRContext &context,
                                          const PlanModel &model,
                                          int64_t batch, int64_t seqLen,
                                          Precision precision,
                                          Optimizer optimizer, int64_t dp,
                                          int zero);

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_MODELANALYSIS_H
