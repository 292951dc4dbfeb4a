// What llmc-remat (passes/Remat.cpp) leaves on @grad_step for drivers to
// print, the policies compared side by side, and the FLOP count it charges
// recomputation with.
#ifndef LLMC_PASSES_REMAT_H
#define LLMC_PASSES_REMAT_H

#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>

namespace mlir::llmc {

/// The `llmc.remat` dictionary llmc-remat sets on @grad_step.
struct RematSummary {
  std::string policy;           // none, full, selective or budget
  int64_t recomputedValues = 0; // saved activations no longer stored
  int64_t clonedOps = 0;        // forward ops cloned into the backward
  int64_t extraFlops = 0;       // their FLOPs (countRematFlops)
  int64_t storedBytes = 0;      // activations the backward reads, kept
  int64_t plannedPeak = -1;     // budget: the arena it planned; else -1
  int64_t budgetBytes = -1;     // budget: the budget; else -1
};

/// The summary of the llmc-remat run on `gradStep`, if one ran.
std::optional<RematSummary> getRematSummary(func::FuncOp gradStep);

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

/// FLOPs of one run of `op`: 2MNK for matmuls, 4 B H Tq Tk D for attention
/// (half when causal), 5 per element for norms and softmax, 1 per result
/// element for elementwise ops, 0 for views, fills and constants.
int64_t countRematFlops(Operation *op);

} // namespace mlir::llmc

#endif // LLMC_PASSES_REMAT_H
