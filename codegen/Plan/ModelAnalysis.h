// `llmc plan`'s model analysis: parameter counts read from the IR of
// @forward, split by where a parallel layout puts them, and the memory plan
// and FLOPs of the compiled forward pass.
#ifndef LLMC_CODEGEN_PLAN_MODELANALYSIS_H
#define LLMC_CODEGEN_PLAN_MODELANALYSIS_H

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

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_MODELANALYSIS_H
