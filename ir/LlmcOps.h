// The ops of the llmc dialect and the differentiation op interface.
#ifndef LLMC_IR_LLMCOPS_H
#define LLMC_IR_LLMCOPS_H

#include "ir/LlmcDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/LlmcInterfaces.h.inc"

namespace mlir::llmc {
/// Element types of llmc data tensors: f32, f16, bf16.
bool isDataElementType(Type type);
/// Element types of token ids and targets: i32, i64.
bool isIdElementType(Type type);
} // namespace mlir::llmc

#define GET_OP_CLASSES
#include "ir/LlmcOps.h.inc"

#endif // LLMC_IR_LLMCOPS_H
