// compileTraining: the training passes in their pipeline order, then the
// lowering of each of the three functions a training run executes; and the
// planned peak llmc-remat's budget policy reads, with the remat policies
// compared side by side.
#include "codegen/Training.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "ir/PipelineStages.h"
#include "passes/Pipelines.h"
#include "passes/Remat.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

namespace {
/// llmc-amp's options for `precision`; none for fp32.
std::optional<mlir::llmc::AmpPassOptions>
ampOptions(const llmc::PrecisionConfig &precision) {
  if (precision.kind == llmc::PrecisionConfig::Kind::FP32)
    return std::nullopt;
  mlir::llmc::AmpPassOptions amp;
  amp.precision =
      precision.kind == llmc::PrecisionConfig::Kind::FP16 ? "fp16" : "bf16";
  amp.allow.assign(precision.allow.begin(), precision.allow.end());
  amp.deny.assign(precision.deny.begin(), precision.deny.end());
  return amp;
}
/// llmc-shard's options; none for one process.
std::optional<mlir::llmc::ShardPassOptions>
shardOptions(const llmc::ParallelConfig &parallel) {
  if (parallel.dp <= 1)
    return std::nullopt;
  mlir::llmc::ShardPassOptions shard;
  shard.dp = parallel.dp;
  shard.zero = parallel.zero;
  shard.bucketMb = parallel.bucketMb;
  return shard;
}
/// llmc-sparsify's options; none for a dense run.
std::optional<mlir::llmc::SparsifyPassOptions>
sparsifyOptions(const llmc::SparsityConfig &sparsity) {
  if (!sparsity.enabled)
    return std::nullopt;
  mlir::llmc::SparsifyPassOptions options;
  options.pattern = sparsity.pattern;
  options.params.assign(sparsity.params.begin(), sparsity.params.end());
  return options;
}

/// llmc-tensor-parallel's options; none without tensor parallelism.
std::optional<mlir::llmc::TensorParallelPassOptions>
tensorParallelOptions(const llmc::TrainingOptions &training) {
  if (training.parallel.tp <= 1)
    return std::nullopt;
  mlir::llmc::TensorParallelPassOptions options;
  options.tp = training.parallel.tp;
  options.rank = training.tpRank;
  options.sp = training.parallel.sp;
  return options;
}

/// llmc-pipeline-parallel's options; none without pipeline parallelism.
/// The cut is the one the caller chose (`llmc run` chooses it once, for
/// every program it compiles) or else the balanced cut of the whole model,
/// taken before llmc-tensor-parallel splits its parameters.
std::optional<mlir::llmc::PipelineParallelPassOptions>
pipelineParallelOptions(const llmc::TrainingOptions &training,
                        mlir::ModuleOp module) {
  if (training.parallel.pp <= 1)
    return std::nullopt;
  mlir::llmc::PipelineParallelPassOptions options;
  options.pp = training.parallel.pp;
  options.stage = training.ppStage;
  std::vector<int64_t> firstBlocks = training.ppStageBlocks;
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (firstBlocks.empty() && forward) {
    mlir::llmc::PipelineCosts costs = mlir::llmc::pipelineCostsOf(forward);
    // Too few blocks: the pass says so.
    if (static_cast<int64_t>(costs.blocks.size()) >= training.parallel.pp)
      firstBlocks =
          mlir::llmc::balancePipeline(costs, training.parallel.pp).firstBlocks;
  }
  options.stageBlocks.assign(firstBlocks.begin(), firstBlocks.end());
  return options;
}
} // namespace

llvm::Expected<llmc::kir::Program>
llmc::compileForward(mlir::ModuleOp module, const TrainingOptions &training) {
  mlir::PassManager pm(module.getContext());
  // Only ZeRO-3 changes the forward (its parameters are blocks).
  std::optional<mlir::llmc::ShardPassOptions> shard;
  if (training.parallel.zero == 3)
    shard = shardOptions(training.parallel);
  mlir::llmc::buildCompilePipeline(pm, ampOptions(training.precision), shard,
                                   sparsifyOptions(training.sparsity),
                                   tensorParallelOptions(training),
                                   pipelineParallelOptions(training, module));
  if (mlir::failed(pm.run(module)))
    return llvm::createStringError("the compile pipeline failed (see the "
                                   "diagnostics above)");
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  mlir::FailureOr<kir::Program> program = mlir::llmc::lowerToProgram(forward);
  if (mlir::failed(program))
    return llvm::createStringError("lowering @forward to kernels failed (see "
                                   "the diagnostics above)");
  return std::move(*program);
}

llvm::Expected<llmc::TrainingPrograms>
llmc::compileTraining(mlir::ModuleOp module,
                      const TrainingOptions &training) {
  const OptimizerConfig &optimizer = training.optimizer;
  mlir::llmc::TrainingPipelineOptions pipeline;
  mlir::llmc::OptimizerPassOptions &options = pipeline.optimizer;
  options.optimizer =
      optimizer.kind == OptimizerConfig::Kind::AdamW ? "adamw" : "sgd";
  options.beta1 = optimizer.beta1;
  options.beta2 = optimizer.beta2;
  options.epsilon = optimizer.epsilon;
  options.weightDecay = optimizer.weightDecay;
  options.momentum = optimizer.momentum;
  options.nesterov = optimizer.nesterov;
  options.maxGradNorm = optimizer.maxGradNorm;
  options.decayNormsAndBiases = optimizer.decayNormsAndBiases;

  const PrecisionConfig &precision = training.precision;
  pipeline.amp = ampOptions(precision);
  // fp16 needs dynamic loss scaling; bf16 has f32's exponent range.
  if (precision.kind == PrecisionConfig::Kind::FP16) {
    const LossScaleConfig &lossScale = training.lossScale;
    mlir::llmc::LossScalingPassOptions &scaling =
        pipeline.lossScaling.emplace();
    scaling.initialScalePower = lossScale.initialScalePower;
    scaling.window = lossScale.window;
    scaling.hysteresis = lossScale.hysteresis;
    scaling.minScale = lossScale.minScale;
    scaling.factor = lossScale.factor;
    scaling.consecutiveHysteresis = lossScale.consecutiveHysteresis;
  }

  pipeline.shard = shardOptions(training.parallel);
  pipeline.sparsify = sparsifyOptions(training.sparsity);
  pipeline.tensorParallel = tensorParallelOptions(training);
  pipeline.pipelineParallel = pipelineParallelOptions(training, module);

  const RematConfig &remat = training.remat;
  if (remat.policy != RematConfig::Policy::None) {
    mlir::llmc::RematPassOptions &rematOptions = pipeline.remat.emplace();
    rematOptions.policy = stringifyRematPolicy(remat.policy).str();
    rematOptions.budgetBytes = remat.budgetBytes;
  }
  pipeline.forCuda = training.forCuda;
  pipeline.plannedPeak = mlir::llmc::plannedPeakBytes;

  mlir::PassManager pm(module.getContext());
  mlir::llmc::buildTrainingPipeline(pm, pipeline);
  if (mlir::failed(pm.run(module)))
    return llvm::createStringError("the training pipeline failed (see the "
                                   "diagnostics above)");

  TrainingPrograms programs;
  for (auto [name, program] :
       {std::pair<const char *, kir::Program *>{"forward", &programs.forward},
        {"grad_step", &programs.gradStep},
        {"update_step", &programs.updateStep}}) {
    auto lowered = mlir::llmc::lowerFunction(module, name);
    if (!lowered)
      return lowered.takeError();
    if (!*lowered)
      return llvm::createStringError(
          llvm::Twine("the training pipeline produced no @") + name);
    *program = std::move(**lowered);
  }
  // The functions llmc-shard adds when it shards the step, and
  // llmc-persistent-casts in mixed precision.
  for (auto [name, program] :
       {std::pair<const char *, std::optional<kir::Program> *>{
            "grad_step_no_sync", &programs.gradStepNoSync},
        {"shard_init", &programs.shardInit},
        {"cast_weights", &programs.castWeights}}) {
    auto lowered = mlir::llmc::lowerFunction(module, name);
    if (!lowered)
      return lowered.takeError();
    *program = std::move(*lowered);
  }
  return programs;
}

mlir::FailureOr<int64_t>
mlir::llmc::plannedPeakBytes(mlir::func::FuncOp fused) {
  FailureOr<::llmc::kir::Program> program = lowerToProgram(fused);
  if (mlir::failed(program))
    return mlir::failure();
  return program->arenaBytes;
}

mlir::SmallVector<mlir::llmc::RematPolicyFigures>
mlir::llmc::compareRematPolicies(ModuleOp module,
                                 const TrainingPipelineOptions &options,
                                 ArrayRef<RematPassOptions> policies) {
  SmallVector<RematPolicyFigures> rows;
  for (const RematPassOptions &remat : policies) {
    RematPolicyFigures &row = rows.emplace_back();
    row.policy = remat.policy;
    row.summary.policy = remat.policy;
    OwningOpRef<ModuleOp> copy = module.clone();
    // Policy none runs the pass too: it changes nothing, and its summary
    // tells the bytes of activations the step keeps.
    TrainingPipelineOptions pipeline = options;
    pipeline.remat = remat;
    pipeline.plannedPeak = plannedPeakBytes;
    PassManager pm(module.getContext());
    buildTrainingPipeline(pm, pipeline);
    if (failed(pm.run(*copy)))
      continue;
    auto gradStep = copy->lookupSymbol<func::FuncOp>("grad_step");
    FailureOr<::llmc::kir::Program> program = lowerToProgram(gradStep);
    if (failed(program))
      continue;
    row.compiled = true;
    row.plannedPeak = program->arenaBytes;
    row.stepFlops = ::llmc::kir::countFlops(*program);
    if (std::optional<RematSummary> summary = getRematSummary(gradStep))
      row.summary = *summary;
  }
  return rows;
}
