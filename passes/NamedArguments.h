// The named arguments of the training functions (`llmc.param`,
// `llmc.state`, `llmc.input`): finding one by name, and adding a state
// where the passes put them (after the last parameter or state argument,
// before the inputs). Shared by llmc-shard, llmc-sparsify,
// llmc-loss-scaling and llmc-persistent-casts.
#ifndef LLMC_PASSES_NAMEDARGUMENTS_H
#define LLMC_PASSES_NAMEDARGUMENTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace mlir::llmc {

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

} // namespace mlir::llmc

#endif // LLMC_PASSES_NAMEDARGUMENTS_H
