// The llmc-verify-legality pass: the shape of a module the pipeline accepts.
#include "ir/LlmcOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

#include <map>

namespace mlir::llmc {
#define GEN_PASS_DEF_VERIFYLEGALITYPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

// Parameters, tokens and targets have the element types the llmc ops accept.
bool isIdTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.hasStaticShape() &&
         isIdElementType(tensor.getElementType());
}

bool isParameterTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.hasStaticShape() &&
         isDataElementType(tensor.getElementType());
}

LogicalResult verifySignature(func::FuncOp forward) {
  FunctionType type = forward.getFunctionType();
  unsigned numInputs = type.getNumInputs();
  if (numInputs < 3)
    return forward.emitError("@forward must take parameters, then tokens and "
                             "targets; it has ")
           << numInputs << " arguments";
  Type tokens = type.getInput(numInputs - 2);
  Type targets = type.getInput(numInputs - 1);
  if (!isIdTensor(tokens) || !isIdTensor(targets))
    return forward.emitError("the last two arguments of @forward (tokens, "
                             "targets) must be i32 or i64 tensors, got ")
           << tokens << " and " << targets;
  if (cast<RankedTensorType>(tokens).getShape() !=
      cast<RankedTensorType>(targets).getShape())
    return forward.emitError("tokens and targets must have one shape, got ")
           << tokens << " and " << targets;
  llvm::StringMap<unsigned> names;
  for (unsigned i = 0; i + 2 < numInputs; ++i) {
    if (!isParameterTensor(type.getInput(i)))
      return forward.emitError("parameter #")
             << i
             << " must be a statically shaped f32, f16 or bf16 tensor, got "
             << type.getInput(i);
    Attribute nameAttr = forward.getArgAttr(i, "llmc.param");
    if (!nameAttr)
      continue;
    auto name = dyn_cast<StringAttr>(nameAttr);
    if (!name)
      return forward.emitError("the llmc.param name of parameter #")
             << i << " must be a string, got " << nameAttr;
    auto [it, inserted] = names.try_emplace(name.getValue(), i);
    if (!inserted)
      return forward.emitError("parameters #")
             << it->second << " and #" << i << " share the name '"
             << name.getValue() << "'";
  }
  Type loss = RankedTensorType::get({}, Float32Type::get(forward.getContext()));
  if (type.getNumResults() < 1 || type.getNumResults() > 2 ||
      type.getResult(0) != loss)
    return forward.emitError("@forward must return the loss as tensor<f32>, "
                             "optionally followed by the logits; got ")
           << type.getResults();
  if (type.getNumResults() == 2) {
    auto logits = dyn_cast<RankedTensorType>(type.getResult(1));
    auto ids = cast<RankedTensorType>(tokens);
    if (!logits || !isDataElementType(logits.getElementType()) ||
        logits.getRank() != ids.getRank() + 1 ||
        logits.getShape().drop_back() != ids.getShape())
      return forward.emitError("the second result of @forward must be the "
                               "logits, a float tensor of the tokens' shape "
                               "followed by the vocabulary; got ")
             << type.getResult(1);
  }
  return success();
}

LogicalResult verifyBody(func::FuncOp forward) {
  if (!forward.getBody().hasOneBlock())
    return forward.emitError("@forward must have one block, no control flow");
  std::map<int64_t, DropoutOp> streams;
  for (Operation &op : forward.getBody().front()) {
    if (isa<func::ReturnOp>(op))
      continue;
    if (!isa<LlmcDialect>(op.getDialect()))
      return op.emitOpError("is not an llmc op; @forward may contain only "
                            "llmc ops and func.return");
    if (auto dropout = dyn_cast<DropoutOp>(op)) {
      int64_t stream = dropout.getStreamAttr().getInt();
      auto [it, inserted] = streams.try_emplace(stream, dropout);
      if (!inserted) {
        InFlightDiagnostic diag = op.emitOpError("reuses dropout stream ")
                                  << stream;
        diag.attachNote(it->second.getLoc()) << "first used here";
        return diag;
      }
    }
  }
  return success();
}

struct VerifyLegalityPass
    : llmc::impl::VerifyLegalityPassBase<VerifyLegalityPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward || forward.isExternal()) {
      module.emitError("module has no @forward function with a body");
      return signalPassFailure();
    }
    if (failed(verifySignature(forward)) || failed(verifyBody(forward)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace
