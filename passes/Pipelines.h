// The llmc pass pipelines: the order of the graph passes, in one place.
#ifndef LLMC_PASSES_PIPELINES_H
#define LLMC_PASSES_PIPELINES_H

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"

namespace mlir::llmc {

/// What `llmc compile` runs on a model module. Registered as
/// `llmc-compile-pipeline` so that lit tests run exactly the same passes.
void buildCompilePipeline(OpPassManager &pm);

/// The options of the training passes, one field per pass.
struct TrainingPipelineOptions {
  OptimizerPassOptions optimizer;
};

/// What `llmc run` compiles: the compile pipeline with the training passes
/// in between. Registered as `llmc-training-pipeline` (default options) for
/// lit tests.
void buildTrainingPipeline(OpPassManager &pm,
                           const TrainingPipelineOptions &options);

/// Registers the pipelines above with the pass registry (for llmc-opt).
void registerLlmcPipelines();

} // namespace mlir::llmc

#endif // LLMC_PASSES_PIPELINES_H
