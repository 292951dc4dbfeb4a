// The programs of a session: the model's @forward built for a shape (from
// the config or a .mlir file), the config mapped to the passes' options
// for this rank's place in the layout (the one place that mapping lives:
// codegen takes pass options only), and the training step compiled.
#ifndef LLMC_TRAINING_PROGRAMS_H
#define LLMC_TRAINING_PROGRAMS_H

#include "codegen/TrainingStep.h"
#include "frontend/TrainConfig.h"
#include "runtime/Exec/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"

#include <map>
#include <memory>
#include <string>

namespace llmc::training {

using mlir::llmc::TrainingConfig;

/// The training passes' options for `training` (the config's optimizer,
/// precision, loss scaling, remat, parallelism and sparsity, and this
/// rank's tp rank and pp stage). The pipeline cut is the one in
/// `training.ppStageBlocks`, else the balanced cut of `module`'s @forward.
mlir::llmc::TrainingPipelineOptions
trainingPipelineOptions(const TrainingStepOptions &training,
                        mlir::ModuleOp module);

/// The compile pipeline's options for a forward alone in the run's
/// precision and layout (with ZeRO-3, on the rank's parameter blocks).
ForwardPipelineOptions
forwardPipelineOptions(const TrainingStepOptions &training,
                       mlir::ModuleOp module);

/// compileTrainingStep with the options of `training`.
llvm::Expected<TrainingStepPrograms>
compileTrainingStep(mlir::ModuleOp module, const TrainingStepOptions &training);

/// compileForward with the options of `training`.
llvm::Expected<kir::Program>
compileForward(mlir::ModuleOp module, const TrainingStepOptions &training);

/// Builds the modules a run compiles: @forward for (micro-batch, length),
/// from the config or (one length only) the .mlir file.
class ModelSource {
public:
  ModelSource(mlir::MLIRContext &context, const TrainingConfig &config,
              std::shared_ptr<llvm::SourceMgr> sourceMgr)
      : context(context), config(config), sourceMgr(std::move(sourceMgr)) {}

  /// `batch` 0: the micro-batch size.
  llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
  build(int64_t seqLen, bool withDropout, int64_t batch = 0);

private:
  mlir::MLIRContext &context;
  const TrainingConfig &config;
  std::shared_ptr<llvm::SourceMgr> sourceMgr;
};

/// Registers the dialects a run's modules use.
void registerDialects(mlir::MLIRContext &context);

/// Pipeline parallelism: the cut of `module`'s blocks into `config`'s
/// stages (by FLOPs per token), into `training.ppStageBlocks`, and the
/// parameters the first and the last stage both hold (a tied wte), as the
/// pass marks them on the last stage. Logs the cut to `out`.
llvm::Expected<std::vector<std::string>>
cutPipeline(mlir::ModuleOp module, const TrainingConfig &config,
            TrainingStepOptions &training, llvm::raw_ostream &out);

/// Tensor parallelism: the parameters llmc-tensor-parallel split in
/// `module` (compiled), and how.
std::map<std::string, runtime::TpShard> tpShardsOf(mlir::ModuleOp module);

} // namespace llmc::training

#endif // LLMC_TRAINING_PROGRAMS_H
