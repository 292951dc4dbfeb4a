// Declarations and registration of the llmc graph passes.
#ifndef LLMC_PASSES_PASSES_H
#define LLMC_PASSES_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::llmc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// The grouping llmc-fusion does, on one function: for passes that must see
/// the kernels their rewrite leads to (llmc-remat plans the memory of a
/// fused copy of @grad_step).
LogicalResult fuseFunction(func::FuncOp func);

} // namespace mlir::llmc

#endif // LLMC_PASSES_PASSES_H
