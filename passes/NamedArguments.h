// The named arguments and results of the training functions
// (`llmc.param`, `llmc.state`, `llmc.input`; `llmc.output`,
// `llmc.updates`): finding an argument by name and the result that
// updates a name, adding a state where the passes put them (after the last
// parameter or state argument, before the inputs), and appending a named
// result; the module attribute that carries AdamW's betas to the
// program. Shared by llmc-optimizer, llmc-shard,
// llmc-sparsify, llmc-loss-scaling, llmc-persistent-casts and
// llmc-pipeline-parallel.
#ifndef LLMC_PASSES_NAMEDARGUMENTS_H
#define LLMC_PASSES_NAMEDARGUMENTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace mlir::llmc {

/// The module attribute in which llmc-optimizer records AdamW's betas
/// (array<f64: beta1, beta2>). The lowering copies it into the program
/// that takes the bias corrections (kir::Program::adamBetas), so that the
/// runtime derives them from the betas the kernels were compiled with.
constexpr llvm::StringLiteral kAdamBetasAttr = "llmc.adam_betas";

/// The argument of `func` named `name` by `attr`, if any.
inline std::optional<BlockArgument>
argumentNamed(func::FuncOp func, StringRef attr, StringRef name) {
  for (BlockArgument arg : func.getArguments())
    if (auto value =
            func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr))
      if (value.getValue() == name)
        return arg;
  return std::nullopt;
}

/// The index of the result of `func` that updates `name` (`llmc.updates`),
/// if any.
inline std::optional<unsigned> resultUpdating(func::FuncOp func,
                                              StringRef name) {
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto target = func.getResultAttrOfType<StringAttr>(i, "llmc.updates"))
      if (target.getValue() == name)
        return i;
  return std::nullopt;
}

/// Inserts the `llmc.state` argument `name` of `type` after the last
/// `llmc.param` or `llmc.state` argument of `func`, with `initial` as its
/// first value (`llmc.state_init`) when given; returns it.
inline BlockArgument
insertStateArgument(func::FuncOp func, Type type, StringRef name,
                    std::optional<double> initial = std::nullopt) {
  unsigned index = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, "llmc.param") || func.getArgAttr(i, "llmc.state"))
      index = i + 1;
  OpBuilder b(func.getContext());
  SmallVector<NamedAttribute> attrs = {
      b.getNamedAttr("llmc.state", b.getStringAttr(name))};
  if (initial)
    attrs.push_back(
        b.getNamedAttr("llmc.state_init", b.getF64FloatAttr(*initial)));
  if (failed(func.insertArgument(index, type, b.getDictionaryAttr(attrs),
                                 func.getLoc())))
    llvm_unreachable("inserting an argument of a function with a body");
  return func.getArgument(index);
}

/// Appends `value` to the results of `func` (and to its return) with the
/// result attributes `attrs` (`llmc.output`, `llmc.updates`).
inline void appendResult(func::FuncOp func, Value value,
                         ArrayRef<NamedAttribute> attrs) {
  OpBuilder b(func.getContext());
  unsigned index = func.getNumResults();
  if (failed(func.insertResult(index, value.getType(),
                               b.getDictionaryAttr(attrs))))
    llvm_unreachable("appending a result of a function with a body");
  func.getBody().front().getTerminator()->insertOperands(index, value);
}

} // namespace mlir::llmc

#endif // LLMC_PASSES_NAMEDARGUMENTS_H
