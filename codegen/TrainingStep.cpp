// compileTrainingStep: the training passes in their pipeline order, then the
// lowering of each of the three functions a training run executes; and the
// planned peak llmc-remat's budget policy reads, with the remat policies
// compared side by side.
#include "codegen/TrainingStep.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "passes/Pipelines.h"
#include "passes/Remat.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

llvm::Expected<llmc::kir::Program>
llmc::compileForward(mlir::ModuleOp module,
                     const ForwardPipelineOptions &options) {
  mlir::PassManager pm(module.getContext());
  mlir::llmc::buildCompilePipeline(pm, options.amp, options.shard,
                                   options.sparsify, options.tensorParallel,
                                   options.pipelineParallel);
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

llvm::Expected<llmc::TrainingStepPrograms>
llmc::compileTrainingStep(mlir::ModuleOp module,
                          mlir::llmc::TrainingPipelineOptions pipeline) {
  if (!pipeline.plannedPeak)
    pipeline.plannedPeak = mlir::llmc::plannedPeakBytes;
  mlir::PassManager pm(module.getContext());
  mlir::llmc::buildTrainingPipeline(pm, pipeline);
  if (mlir::failed(pm.run(module)))
    return llvm::createStringError("the training pipeline failed (see the "
                                   "diagnostics above)");

  TrainingStepPrograms programs;
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
