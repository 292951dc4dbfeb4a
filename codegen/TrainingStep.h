// Compiling a training step: from a module with @forward to the three
// programs a training run executes, given the passes' options (the
// training layer maps a config to them: training/Programs.h). The passes do the work (llmc-autodiff
// adds @grad_step, llmc-optimizer makes it accumulate and adds
// @update_step, the compile pipeline fuses); this is the one place that
// runs them in order and lowers each function.
//
// How a runtime uses the programs (all three share one PersistentStore, so
// parameters, gradients and optimizer state are bound by name, never
// copied; the scalars below are the rows of ir/kernel/StepScalar.h, which
// the runtime binds by role):
//   per micro-batch:  gradStep   inputs tokens, targets [B, T] i32,
//                                 dloss (f32 scalar: 1 / micro-batches),
//                                 rng [2] i64 (seed, step) if it has dropout
//                                 outputs loss; accumulates into grad.<p>
//                                 and, on the CPU, writes the sum of its
//                                 squares into grad.<p>.squares for the
//                                 update's norm (llmc-squares-in-grad-step:
//                                 the last micro-batch's is the one read)
//   per step:         updateStep inputs lr, bias_correction1 (1 / (1 -
//                                 beta1^t)), bias_correction2 (1 / (1 -
//                                 beta2^t)), f32 scalars, from the betas
//                                 the program records (adamBetas)
//                                 outputs grad_norm (before clipping);
//                                 updates params and state in place and
//                                 zeroes grad.<p>; fp16 (loss scaling):
//                                 also outputs overflow (1: the update was
//                                 skipped, params and state kept) and
//                                 used_loss_scale, and updates the
//                                 loss_scale* states (see
//                                 passes/LossScaling.cpp)
//   evaluation:       forward    inputs tokens, targets; outputs loss, logits
#ifndef LLMC_CODEGEN_TRAININGSTEP_H
#define LLMC_CODEGEN_TRAININGSTEP_H

#include "ir/kernel/Program.h"
#include "passes/Pipelines.h"
#include "passes/Remat.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <optional>


namespace llmc {

struct TrainingStepPrograms {
  kir::Program forward, gradStep, updateStep;
  /// With data parallelism (dp > 1): @grad_step_no_sync, the grad step
  /// without gradient communication, for the micro-batches before a step's
  /// last. Unset otherwise.
  std::optional<kir::Program> gradStepNoSync;
  /// With ZeRO (stage 1 or more): @shard_init, each rank's blocks of the
  /// parameters and of full optimizer states given as inputs. Unset
  /// otherwise.
  std::optional<kir::Program> shardInit;
  /// With mixed precision: @cast_weights, which writes the persistent
  /// 16-bit copy of every master weight the other programs read
  /// (llmc-persistent-casts). Run it before the first program and whenever
  /// the weights are set from outside the programs. Unset in f32.
  std::optional<kir::Program> castWeights;
};

/// The options of the compile pipeline a forward alone goes through
/// (passes/Pipelines.h: buildCompilePipeline); unset: the pass does not run.
struct ForwardPipelineOptions {
  std::optional<mlir::llmc::AmpPassOptions> amp;
  std::optional<mlir::llmc::ShardPassOptions> shard;
  std::optional<mlir::llmc::SparsifyPassOptions> sparsify;
  std::optional<mlir::llmc::TensorParallelPassOptions> tensorParallel;
  std::optional<mlir::llmc::PipelineParallelPassOptions> pipelineParallel;
};

/// Runs the training pipeline with `options` on `module` (which holds
/// @forward built for one batch size and sequence length) and lowers
/// @forward, @grad_step and @update_step (and the functions sharding and
/// mixed precision add). Diagnostics go to the context's handler; the error
/// says which phase failed. `options.plannedPeak` unset: plannedPeakBytes.
llvm::Expected<TrainingStepPrograms>
compileTrainingStep(mlir::ModuleOp module,
                    mlir::llmc::TrainingPipelineOptions options);

/// @forward alone through the compile pipeline with `options`, lowered:
/// what a training run evaluates and samples with when it needs a forward
/// of another shape or without dropout.
llvm::Expected<kir::Program>
compileForward(mlir::ModuleOp module, const ForwardPipelineOptions &options);

} // namespace llmc

namespace mlir::llmc {

/// The planned peak (arena bytes) of a fused function: it is lowered to a
/// kir::Program and its memory plan read. llmc-remat's budget policy takes
/// this as its PlannedPeakFn (passes cannot lower).
mlir::FailureOr<int64_t> plannedPeakBytes(mlir::func::FuncOp fused);

/// One remat policy's training step, as compareRematPolicies measures it.
struct RematPolicyFigures {
  std::string policy;
  bool compiled = false;   // false: the pipeline failed (diagnostics emitted)
  int64_t plannedPeak = 0; // arena bytes of the lowered @grad_step
  int64_t stepFlops = 0;   // its FLOPs (kir::countFlops)
  RematSummary summary;
};

/// Runs the training pipeline with `options` on a copy of `module` (which
/// holds @forward) once per policy in `policies` (llmc-remat runs for
/// "none" too, changing nothing but telling the bytes stored), lowers each
/// @grad_step and reads its plan.
SmallVector<RematPolicyFigures>
compareRematPolicies(ModuleOp module, const TrainingPipelineOptions &options,
                     ArrayRef<RematPassOptions> policies);

} // namespace mlir::llmc

#endif // LLMC_CODEGEN_TRAININGSTEP_H
