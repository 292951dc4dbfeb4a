// compileTraining: the training passes in their pipeline order, then the
// lowering of each of the three functions a training run executes.
#include "codegen/Training.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

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
    auto func = module.lookupSymbol<mlir::func::FuncOp>(name);
    if (!func)
      return llvm::createStringError(
          llvm::Twine("the training pipeline produced no @") + name);
    mlir::FailureOr<kir::Program> lowered = mlir::llmc::lowerToProgram(func);
    if (mlir::failed(lowered))
      return llvm::createStringError(llvm::Twine("lowering @") + name +
                                     " to kernels failed (see the "
                                     "diagnostics above)");
    *program = std::move(*lowered);
  }
  return programs;
}
