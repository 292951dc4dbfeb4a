// The ops of the llmc dialect, their interfaces and op categories (traits).
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

/// The op categories of ir/LlmcInterfaces.td (what each means is written
/// there); marker traits, read with `op->hasTrait<OpTrait::llmc::Pointwise>()`
/// (in MLIR's OpTrait namespace, as other dialects' traits).
namespace mlir::OpTrait::llmc {
#define LLMC_OP_TRAIT(NAME)                                                    \
  template <typename ConcreteType>                                             \
  class NAME : public ::mlir::OpTrait::TraitBase<ConcreteType, NAME> {};
LLMC_OP_TRAIT(Pointwise)
LLMC_OP_TRAIT(RowGradient)
LLMC_OP_TRAIT(CheapToRecompute)
LLMC_OP_TRAIT(View)
LLMC_OP_TRAIT(NoBuffer)
LLMC_OP_TRAIT(AmpAllow)
LLMC_OP_TRAIT(AmpDeny)
LLMC_OP_TRAIT(AmpExempt)
#undef LLMC_OP_TRAIT
} // namespace mlir::OpTrait::llmc

namespace mlir::llmc {
/// Element types of llmc data tensors: f32, f16, bf16.
bool isDataElementType(Type type);
/// Element types of token ids and targets: i32, i64.
bool isIdElementType(Type type);

/// Whether `op` reduces along the last dimension (Llmc_RowReduction): the
/// norms, softmax, cross_entropy, their backward ops, and a reduce whose
/// dims end at the last.
bool isRowReduction(Operation *op);

/// The axes of the device mesh a collective runs on: data, tensor and
/// pipeline parallel.
inline constexpr StringLiteral kMeshAxes[] = {"dp", "tp", "pp"};
bool isMeshAxis(StringRef axis);

/// How llmc-amp chooses an op's compute type, from its AMP trait.
enum class AmpCategory { Allow, Deny, Follow, Exempt };
AmpCategory getAmpCategory(OperationName name);

/// The names of the llmc ops of one AMP category, in the order of their
/// ODS op list (no context needed: `llmc-opt --help` prints the default
/// AMP lists from these).
SmallVector<StringRef> getOpNamesOfAmpCategory(AmpCategory category);
} // namespace mlir::llmc

#define GET_OP_CLASSES
#include "ir/LlmcOps.h.inc"

#endif // LLMC_IR_LLMCOPS_H
