// What llmc-remat (passes/Remat.cpp) leaves on @grad_step for drivers to
// print, and the FLOP count it charges recomputation with (the policies
// compared side by side, which needs lowering, are in codegen/TrainingStep.h).
#ifndef LLMC_PASSES_REMAT_H
#define LLMC_PASSES_REMAT_H

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

/// The transformer block a parameter belongs to: its first all-digit name
/// component (`h.3.mlp.c_fc.weight` -> 3); none for `wte`, `ln_f.weight`.
/// llmc-remat groups ops into blocks by it, llmc-sparsify selects the
/// weights inside blocks by it.
std::optional<int64_t> blockOfParameter(StringRef name);

/// FLOPs of one run of `op`: 2MNK for matmuls, 4 B H Tq Tk D for attention
/// (half when causal), 5 per element for norms and softmax, 1 per result
/// element for elementwise ops, 0 for views, fills and constants.
int64_t countRematFlops(Operation *op);

} // namespace mlir::llmc

#endif // LLMC_PASSES_REMAT_H
