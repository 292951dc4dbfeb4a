// Lowering of a fused llmc function to a kir::Program: kernels in the
// target-neutral kernel IR, GEMM and attention library steps, and buffers
// with a static memory plan.
#ifndef LLMC_CODEGEN_LLMCTOKERNEL_LLMCTOKERNEL_H
#define LLMC_CODEGEN_LLMCTOKERNEL_LLMCTOKERNEL_H

#include "ir/kernel/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace mlir::llmc {

/// Lowers `func` (after llmc-fusion; unfused ops are lowered one kernel
/// each) to a program and plans its memory. Emits a diagnostic on the op
/// that cannot be lowered and fails.
FailureOr<::llmc::kir::Program> lowerToProgram(func::FuncOp func);

/// lowerToProgram of the module's @`name` for the drivers that lower the
/// functions a pipeline made: std::nullopt when the module has no such
/// function, an error naming it when its lowering fails.
llvm::Expected<std::optional<::llmc::kir::Program>>
lowerFunction(ModuleOp module, StringRef name);

/// The module's `llmc.model` config as JSON (kir::Program::modelJson): its
/// bool, integer, float and string entries. Empty without the attribute.
std::string modelConfigJson(ModuleOp module);

} // namespace mlir::llmc

#endif // LLMC_CODEGEN_LLMCTOKERNEL_LLMCTOKERNEL_H
