// Declarations and registration of the llmc graph passes.
#ifndef LLMC_PASSES_PASSES_H
#define LLMC_PASSES_PASSES_H

#include "ir/TrainingDefaults.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

#include <functional>

namespace mlir::llmc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// The grouping llmc-fusion does, on one function: for passes that must see
/// the kernels their rewrite leads to (llmc-remat plans the memory of a
/// fused copy of @grad_step).
LogicalResult fuseFunction(func::FuncOp func);

/// The planned peak (arena bytes) of a fused function, as code generation
/// plans its memory (codegen/TrainingStep.h: plannedPeakBytes). llmc-remat's
/// budget policy needs it; passes do not lower, so drivers supply it.
using PlannedPeakFn = std::function<FailureOr<int64_t>(func::FuncOp fused)>;

/// llmc-remat whose budget policy reads planned peaks from `plannedPeak`.
std::unique_ptr<Pass> createRematPass(const RematPassOptions &options,
                                      PlannedPeakFn plannedPeak);

/// The estimator of the llmc-remat instances the pass registry makes
/// (textual pipelines: `llmc-opt --llmc-remat=policy=budget`); llmc-opt
/// registers code generation's. Instances made with one above use theirs.
void registerRematPlannedPeak(PlannedPeakFn plannedPeak);

} // namespace mlir::llmc

#endif // LLMC_PASSES_PASSES_H
