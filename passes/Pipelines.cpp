// The order of the llmc graph passes. Every pipeline is defined here and
// nowhere else; each step says why it is where it is.
#include "passes/Pipelines.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void mlir::llmc::buildCompilePipeline(OpPassManager &pm) {
  // First: every later pass assumes @forward(params..., tokens, targets)
  // -> loss made of llmc ops, so a module that is not one stops here with
  // a diagnostic instead of failing somewhere deep in the pipeline.
  pm.addPass(createVerifyLegalityPass());
  // Last: fusion decides the kernels, so every graph pass that rewrites ops
  // runs before it; code generation lowers each llmc.fusion to a kernel.
  pm.addPass(createFusionPass());
}

void mlir::llmc::buildTrainingPipeline(OpPassManager &pm,
                                       const TrainingPipelineOptions &options) {
  pm.addPass(createVerifyLegalityPass());
  // Autodiff differentiates the forward ops as the user wrote them, before
  // any pass rewrites them (mixed precision and rematerialization, when
  // they come, work on the differentiated step).
  pm.addPass(createAutodiffPass());
  // The optimizer consumes @grad_step's gradients and adds @update_step.
  pm.addPass(createOptimizerPass(options.optimizer));
  // Fusion last, over all three functions, as in the compile pipeline.
  pm.addPass(createFusionPass());
}

void mlir::llmc::registerLlmcPipelines() {
  PassPipelineRegistration<>(
      "llmc-compile-pipeline",
      "The passes `llmc compile` runs on a model module",
      [](OpPassManager &pm) { buildCompilePipeline(pm); });
  PassPipelineRegistration<>(
      "llmc-training-pipeline",
      "The passes `llmc run` runs on a model module (default AdamW options)",
      [](OpPassManager &pm) { buildTrainingPipeline(pm, {}); });
}
