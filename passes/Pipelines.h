// The llmc pass pipelines: the order of the graph passes, in one place.
#ifndef LLMC_PASSES_PIPELINES_H
#define LLMC_PASSES_PIPELINES_H

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <optional>

namespace mlir::llmc {

/// What `llmc compile` runs on a model module. Registered as
/// `llmc-compile-pipeline` so that lit tests run exactly the same passes.
/// With `amp`, the forward runs in mixed precision as a training run of that
/// precision evaluates it. With `shard` (ZeRO-3), its parameters are the
/// rank's blocks, gathered where the forward reads them. With `sparsify`,
/// the selected weights are read through their 2:4 masks. With
/// `tensorParallel` (tp > 1), the forward is one tp rank's; with
/// `pipelineParallel` (pp > 1), one pipeline stage's.
void buildCompilePipeline(
    OpPassManager &pm, const std::optional<AmpPassOptions> &amp = {},
    const std::optional<ShardPassOptions> &shard = {},
    const std::optional<SparsifyPassOptions> &sparsify = {},
    const std::optional<TensorParallelPassOptions> &tensorParallel = {},
    const std::optional<PipelineParallelPassOptions> &pipelineParallel = {});

/// What the inference programs (@prefill, @decode with a KV cache) go
/// through before lowering. Registered as `llmc-inference-pipeline`.
void buildInferencePipeline(OpPassManager &pm);

/// The options of the training passes, one field per pass.
struct TrainingPipelineOptions {
  /// Mixed precision; unset trains in f32 and llmc-amp does not run.
  std::optional<AmpPassOptions> amp;
  OptimizerPassOptions optimizer;
  /// Tensor parallelism; unset (or tp 1): llmc-tensor-parallel does not run.
  std::optional<TensorParallelPassOptions> tensorParallel;
  /// Pipeline parallelism; unset (or pp 1): llmc-pipeline-parallel and
  /// llmc-pipeline-recompute do not run.
  std::optional<PipelineParallelPassOptions> pipelineParallel;
  /// Data parallelism and ZeRO; unset (or dp 1): llmc-shard changes
  /// nothing.
  std::optional<ShardPassOptions> shard;
  /// Dynamic loss scaling (fp16); unset: llmc-loss-scaling does not run.
  std::optional<LossScalingPassOptions> lossScaling;
  /// 2:4 sparsity; unset: llmc-sparsify does not run.
  std::optional<SparsifyPassOptions> sparsify;
  /// The programs run on a GPU: llmc-squares-in-grad-step does not run
  /// (the update step's sums of squares are one batched launch there).
  bool forCuda = false;
  /// Activation checkpointing; unset (policy none): llmc-remat does not run.
  std::optional<RematPassOptions> remat;
  /// The planned peak llmc-remat's budget policy fits into the budget: code
  /// generation's (codegen/TrainingStep.h: plannedPeakBytes); empty, the one
  /// registered with registerRematPlannedPeak.
  PlannedPeakFn plannedPeak;
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
