// The order of the llmc graph passes. Every pipeline is defined here and
// nowhere else; each step says why it is where it is.
#include "passes/Pipelines.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void mlir::llmc::buildCompilePipeline(
    OpPassManager &pm, const std::optional<AmpPassOptions> &amp,
    const std::optional<ShardPassOptions> &shard,
    const std::optional<SparsifyPassOptions> &sparsify,
    const std::optional<TensorParallelPassOptions> &tensorParallel,
    const std::optional<PipelineParallelPassOptions> &pipelineParallel) {
  // First: every later pass assumes @forward(params..., tokens, targets)
  // -> loss made of llmc ops, so a module that is not one stops here with
  // a diagnostic instead of failing somewhere deep in the pipeline.
  pm.addPass(createVerifyLegalityPass());
  // The forward of one tp rank, as in the training pipeline.
  if (tensorParallel)
    pm.addPass(createTensorParallelPass(*tensorParallel));
  // ... and of one pipeline stage.
  if (pipelineParallel)
    pm.addPass(createPipelineParallelPass(*pipelineParallel));
  // Mixed precision types the ops, so it comes before fusion groups them.
  if (amp)
    pm.addPass(createAmpPass(*amp));
  // ZeRO-3's forward gathers the parameters it reads (after the casts,
  // before fusion, as in the training pipeline).
  if (shard)
    pm.addPass(createShardPass(*shard));
  // The forward of a sparse run (evaluation) reads the masked weights as
  // the training step does.
  if (sparsify)
    pm.addPass(createSparsifyPass(*sparsify));
  // Last: fusion decides the kernels, so every graph pass that rewrites ops
  // runs before it; code generation lowers each llmc.fusion to a kernel.
  pm.addPass(createFusionPass());
}

void mlir::llmc::buildTrainingPipeline(OpPassManager &pm,
                                       const TrainingPipelineOptions &options) {
  pm.addPass(createVerifyLegalityPass());
  // Tensor parallelism cuts @forward into one tp rank's share and places
  // Megatron's f and g in it, before autodiff, which then makes the
  // backward's collectives from their VJPs; and before mixed precision, so
  // that the tp all-reduces stay f32 (llmc-amp exempts collectives) and
  // the casts are made on the shards.
  if (options.tensorParallel)
    pm.addPass(createTensorParallelPass(*options.tensorParallel));
  // Pipeline parallelism keeps one stage's blocks of @forward (of the tp
  // rank's shares: the two compose) and places the stage's transfers,
  // before autodiff for the same reason: the backward's transfers come
  // from the VJPs of the forward's.
  if (options.pipelineParallel)
    pm.addPass(createPipelineParallelPass(*options.pipelineParallel));
  // Mixed precision rewrites @forward before autodiff, so that the gradient
  // step differentiates the casts: each f32 master weight's gradient comes
  // back through its cast as f32.
  if (options.amp)
    pm.addPass(createAmpPass(*options.amp));
  // Autodiff differentiates the forward ops as the user wrote them (or as
  // llmc-amp typed them), before any pass rewrites the step
  // (rematerialization works on the differentiated step).
  pm.addPass(createAutodiffPass());
  // 1F1B runs a stage's backward apart from its forward: @grad_step
  // recomputes the stage from the stashed input instead of transferring
  // the activations again. Right after autodiff, before any pass reads or
  // copies @grad_step.
  if (options.pipelineParallel)
    pm.addPass(createPipelineRecomputePass());
  // The optimizer consumes @grad_step's gradients and adds @update_step.
  pm.addPass(createOptimizerPass(options.optimizer));
  // Sharding makes the optimizer's steps programs of every data-parallel
  // rank (gradient collectives, ZeRO's sharded state). Before loss
  // scaling, whose overflow test then reads the gradient norm already
  // reduced across the ranks, and before remat and fusion, which treat the
  // collectives as fixed points.
  if (options.shard)
    pm.addPass(createShardPass(*options.shard));
  // Loss scaling rewrites both steps the optimizer leaves: the scaled seed
  // of @grad_step, and the unscaling, overflow test and skipped update of
  // @update_step (which must exist first).
  if (options.lossScaling)
    pm.addPass(createLossScalingPass(*options.lossScaling));
  // 2:4 sparsity masks the weights' reads in the finished forward and
  // backward, and the gradients, moments and new weights of the update
  // (after the optimizer and loss scaling built it, so that it wraps their
  // final form); before remat, whose clones then read the masked weights,
  // and fusion, which fuses each mask product into its reader's kernel.
  if (options.sparsify)
    pm.addPass(createSparsifyPass(*options.sparsify));
  // Mixed precision's 16-bit weight copies become state the update step
  // writes: after the passes that make @update_step's final values (the
  // optimizer, loss scaling's skipped update, sparsity's masked weights),
  // before remat and fusion, which then see reads of state, not casts.
  if (options.amp)
    pm.addPass(createPersistentCastsPass());
  // The norm's sums of squares move to where @grad_step makes each
  // gradient: after every pass that changes either step's gradients (the
  // optimizer, sharding, loss scaling, 2:4 masks) or adds state, before
  // remat (which then sees the whole backward) and fusion (which keeps
  // each sum in a kernel right after the GEMM that accumulates its
  // gradient). On the CPU only: on a GPU the update step's sums run as one
  // batched launch (runtime/Cuda), which a kernel per gradient in
  // @grad_step would not beat.
  if (!options.forCuda)
    pm.addPass(createSquaresInGradStepPass());
  // Remat rewrites the finished step (after the passes that add forward
  // or backward ops), and before fusion, so that recomputed ops fuse like
  // the others and its budget sees the kernels fusion will make.
  if (options.remat)
    pm.addPass(createRematPass(*options.remat, options.plannedPeak));
  // Fusion last, over all three functions, as in the compile pipeline.
  pm.addPass(createFusionPass());
}

void mlir::llmc::buildInferencePipeline(OpPassManager &pm) {
  // The inference functions (@prefill, @decode: frontend/GptBuilder.h) are
  // built by the frontend, not written by users, and are not @forward-shaped
  // (no targets, a KV cache state), so legality and llmc-amp, which check
  // and rewrite @forward, do not run. Fusion decides their kernels as it
  // does the training step's.
  pm.addPass(createFusionPass());
}

void mlir::llmc::registerLlmcPipelines() {
  PassPipelineRegistration<>(
      "llmc-inference-pipeline",
      "The passes `llmc generate` and `llmc export` run on @prefill and "
      "@decode",
      [](OpPassManager &pm) { buildInferencePipeline(pm); });
  PassPipelineRegistration<>(
      "llmc-compile-pipeline",
      "The passes `llmc compile` runs on a model module",
      [](OpPassManager &pm) { buildCompilePipeline(pm); });
  PassPipelineRegistration<>(
      "llmc-training-pipeline",
      "The passes `llmc run` runs on a model module (default AdamW options)",
      [](OpPassManager &pm) { buildTrainingPipeline(pm, {}); });
}
