// The llmc-autodiff pass: builds @grad_step, the reverse-mode gradient of
// @forward, from the VJP rules of the ops (ir/LlmcVjp.cpp).
#include "ir/LlmcOps.h"
#include "ir/kernel/StepScalar.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace mlir::llmc {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;
using ::llmc::kir::StepScalar;
using ::llmc::kir::stepScalarName;

namespace {

constexpr StringLiteral kGradFunction = "grad_step";

// The reverse sweep over one copied forward body. Gradients are keyed by
// the copied values; `active` holds the values that depend on a parameter,
// the only ones whose gradient anyone needs.
class ReverseSweep {
public:
  explicit ReverseSweep(OpBuilder &builder) : b(builder) {}

  void markActive(Value value) { active.insert(value); }

  // Forward activity: a result is active when an operand is.
  void propagateActivity(ArrayRef<Operation *> ops) {
    for (Operation *op : ops)
      if (llvm::any_of(op->getOperands(),
                       [&](Value v) { return active.contains(v); }))
        for (Value result : op->getResults())
          if (isa<FloatType>(getElementTypeOrSelf(result.getType())))
            active.insert(result);
  }

  // Adds `grad` to the gradient of `value` (fan-out accumulation).
  void accumulate(Value value, Value grad) {
    if (!active.contains(value))
      return;
    Value &slot = grads[value];
    slot = slot ? AddOp::create(b, grad.getLoc(), slot, grad).getResult()
                : grad;
  }

  // The whole gradient of `value`, once every user has been visited.
  Value gradOf(Value value) {
    joinSliceGrads(value);
    return grads.lookup(value);
  }

  // Visits `ops` last to first, calling each op's VJP rule once a gradient
  // reaches one of its results.
  LogicalResult run(ArrayRef<Operation *> ops) {
    for (Operation *op : llvm::reverse(ops)) {
      // A pipeline receive has no operand but an active result.
      if (!isa<PipelineRecvOp>(op) &&
          llvm::none_of(op->getOperands(),
                        [&](Value v) { return active.contains(v); }))
        continue;
      SmallVector<Value> resultGrads;
      for (Value result : op->getResults())
        resultGrads.push_back(gradOf(result));
      if (llvm::all_of(resultGrads, [](Value g) { return !g; }))
        continue;
      if (auto slice = dyn_cast<SliceOp>(op)) {
        sliceGrads[slice.getInput()].push_back({slice, resultGrads[0]});
        continue;
      }
      auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
      if (!differentiable)
        return op->emitOpError("has no VJP rule, so llmc-autodiff cannot "
                               "differentiate @forward through it");
      FailureOr<SmallVector<Value>> operandGrads =
          differentiable.buildVjp(b, resultGrads);
      if (failed(operandGrads))
        return failure();
      if (operandGrads->size() != op->getNumOperands())
        return op->emitOpError("VJP rule returned ")
               << operandGrads->size() << " gradients for "
               << op->getNumOperands() << " operands";
      for (auto [index, operand, grad] :
           llvm::enumerate(op->getOperands(), *operandGrads)) {
        if (!grad || !differentiable.isDifferentiableOperand(index))
          continue;
        if (grad.getType() != operand.getType())
          return op->emitOpError("VJP rule returned a gradient of type ")
                 << grad.getType() << " for operand #" << index
                 << " of type " << operand.getType();
        accumulate(operand, grad);
      }
    }
    return success();
  }

private:
  struct SliceGrad {
    SliceOp slice;
    Value grad;
  };

  // The gradients of slices of one value are kept apart until the value's
  // gradient is read. When the slices cut one dimension into disjoint
  // blocks (the q/k/v split of a fused projection, SwiGLU's gate and up),
  // they become one concat, with zero fills in the gaps; otherwise each is
  // padded with zeros by the slice's own rule and the results are added.
  void joinSliceGrads(Value value) {
    auto it = sliceGrads.find(value);
    if (it == sliceGrads.end())
      return;
    SmallVector<SliceGrad> pieces = std::move(it->second);
    sliceGrads.erase(it);
    if (Value joined = concatSliceGrads(value, pieces)) {
      accumulate(value, joined);
      return;
    }
    for (SliceGrad &piece : pieces) {
      Value grad = piece.grad;
      FailureOr<SmallVector<Value>> padded =
          cast<DifferentiableOpInterface>(piece.slice.getOperation())
              .buildVjp(b, grad);
      // The slice rule cannot fail.
      accumulate(value, (*padded)[0]);
    }
  }

  // One concat along the single dimension every slice cuts, or null.
  Value concatSliceGrads(Value value, MutableArrayRef<SliceGrad> pieces) {
    auto type = cast<RankedTensorType>(value.getType());
    ArrayRef<int64_t> full = type.getShape();
    std::optional<int64_t> cutDim;
    for (SliceGrad &piece : pieces) {
      ArrayRef<int64_t> sizes = piece.slice.getSizes();
      for (int64_t d = 0, e = full.size(); d < e; ++d) {
        if (sizes[d] == full[d])
          continue;
        if (cutDim && *cutDim != d)
          return Value();
        cutDim = d;
      }
    }
    if (!cutDim)
      return Value();
    int64_t d = *cutDim;
    llvm::sort(pieces, [&](const SliceGrad &x, const SliceGrad &y) {
      return SliceOp(x.slice).getOffsets()[d] <
             SliceOp(y.slice).getOffsets()[d];
    });
    for (size_t i = 1; i < pieces.size(); ++i)
      if (pieces[i].slice.getOffsets()[d] <
          pieces[i - 1].slice.getOffsets()[d] +
              pieces[i - 1].slice.getSizes()[d])
        return Value(); // overlapping blocks: leave them to the adds
    Location loc = pieces.front().slice.getLoc();
    auto zeros = [&](int64_t size) -> Value {
      SmallVector<int64_t> shape(full);
      shape[d] = size;
      return FillOp::create(
          b, loc, RankedTensorType::get(shape, type.getElementType()),
          b.getF64FloatAttr(0.0));
    };
    SmallVector<Value> parts;
    int64_t next = 0;
    for (SliceGrad &piece : pieces) {
      int64_t offset = piece.slice.getOffsets()[d];
      if (offset > next)
        parts.push_back(zeros(offset - next));
      parts.push_back(piece.grad);
      next = offset + piece.slice.getSizes()[d];
    }
    if (next < full[d])
      parts.push_back(zeros(full[d] - next));
    if (parts.size() == 1)
      return parts.front();
    return ConcatOp::create(b, loc, parts, b.getI64IntegerAttr(d));
  }

  OpBuilder &b;
  llvm::DenseSet<Value> active;
  llvm::DenseMap<Value, Value> grads;
  llvm::DenseMap<Value, SmallVector<SliceGrad>> sliceGrads;
};

LogicalResult checkForward(func::FuncOp forward) {
  if (!forward.getBody().hasOneBlock())
    return forward.emitError("@forward must have one block to be "
                             "differentiated");
  FunctionType type = forward.getFunctionType();
  Type loss = RankedTensorType::get({}, Float32Type::get(forward.getContext()));
  if (type.getNumResults() < 1 || type.getResult(0) != loss)
    return forward.emitError("@forward must return the loss as its first "
                             "result, a tensor<f32>; got ")
           << type.getResults();
  for (unsigned i = 0, e = type.getNumInputs(); i < e; ++i) {
    Attribute name = forward.getArgAttr(i, "llmc.param");
    if (name && !isa<StringAttr>(name))
      return forward.emitError("the llmc.param name of argument #")
             << i << " must be a string, got " << name;
    if (name && !isa<FloatType>(getElementTypeOrSelf(type.getInput(i))))
      return forward.emitError("parameter '")
             << cast<StringAttr>(name).getValue()
             << "' must be a float tensor to have a gradient, got "
             << type.getInput(i);
  }
  return success();
}

// Builds @grad_step next to @forward; erases it again on failure.
LogicalResult buildGradStep(func::FuncOp forward) {
  MLIRContext *ctx = forward.getContext();
  FunctionType forwardType = forward.getFunctionType();
  auto scalarF32 = RankedTensorType::get({}, Float32Type::get(ctx));

  SmallVector<unsigned> params;
  for (unsigned i = 0, e = forwardType.getNumInputs(); i < e; ++i)
    if (forward.getArgAttr(i, "llmc.param"))
      params.push_back(i);

  SmallVector<Type> inputs(forwardType.getInputs());
  inputs.push_back(scalarF32);
  SmallVector<Type> results{scalarF32};
  for (unsigned i : params)
    results.push_back(forwardType.getInput(i));

  OpBuilder b(forward);
  b.setInsertionPointAfter(forward);
  auto gradStep = func::FuncOp::create(b, forward.getLoc(), kGradFunction,
                                       b.getFunctionType(inputs, results));
  // Discardable attributes of @forward (model metadata) carry over.
  for (NamedAttribute attr : forward->getDiscardableAttrs())
    gradStep->setAttr(attr.getName(), attr.getValue());
  for (unsigned i = 0, e = forwardType.getNumInputs(); i < e; ++i)
    gradStep.setArgAttrs(i, forward.getArgAttrDict(i));
  unsigned dlossIndex = forwardType.getNumInputs();
  gradStep.setArgAttr(dlossIndex, "llmc.input",
                      b.getStringAttr(stepScalarName(StepScalar::DLoss)));
  gradStep.setResultAttr(0, "llmc.output",
                         b.getStringAttr(stepScalarName(StepScalar::Loss)));
  for (auto [index, arg] : llvm::enumerate(params)) {
    auto name = cast<StringAttr>(forward.getArgAttr(arg, "llmc.param"));
    gradStep.setResultAttr(index + 1, "llmc.output",
                           b.getStringAttr("grad." + name.getValue()));
  }

  // The forward body, copied: the ops the loss depends on. Those that
  // feed only @forward's other results stay out, collectives included
  // (under vocabulary parallelism the logits @forward returns are
  // all-gathered for sampling; the step needs no such gather, and every
  // rank leaves it out alike).
  Block *entry = gradStep.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  IRMapping mapping;
  mapping.map(forward.getArguments(),
              entry->getArguments().take_front(dlossIndex));
  SmallVector<Operation *> forwardOps;
  Operation *forwardReturn = forward.getBody().front().getTerminator();
  llvm::DenseSet<Operation *> needed;
  SmallVector<Value> worklist = {forwardReturn->getOperand(0)};
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (def && needed.insert(def).second)
      llvm::append_range(worklist, def->getOperands());
  }
  for (Operation &op : forward.getBody().front().without_terminator())
    if (needed.contains(&op))
      forwardOps.push_back(b.clone(op, mapping));
  Value loss = mapping.lookup(forwardReturn->getOperand(0));
  Location lossLoc = forwardReturn->getLoc();

  // The backward sweep, seeded with %dloss.
  ReverseSweep sweep(b);
  for (unsigned i : params)
    sweep.markActive(entry->getArgument(i));
  // An activation from the previous pipeline stage depends on that stage's
  // parameters: its gradient is sent back (the receive's VJP).
  for (Operation *op : forwardOps)
    if (auto recv = dyn_cast<PipelineRecvOp>(op))
      sweep.markActive(recv.getResult());
  sweep.propagateActivity(forwardOps);
  sweep.accumulate(loss, entry->getArgument(dlossIndex));
  if (failed(sweep.run(forwardOps))) {
    gradStep.erase();
    return failure();
  }

  SmallVector<Value> returned{loss};
  for (unsigned i : params) {
    BlockArgument param = entry->getArgument(i);
    Value grad = sweep.gradOf(param);
    if (!grad)
      grad = FillOp::create(b, param.getLoc(), param.getType(),
                            b.getF64FloatAttr(0.0));
    returned.push_back(grad);
  }
  func::ReturnOp::create(b, lossLoc, returned);

  // Rules build gradients for every operand; those of inactive values and
  // forward results nothing reads are dropped here.
  for (Operation &op :
       llvm::make_early_inc_range(llvm::reverse(entry->getOperations())))
    if (isOpTriviallyDead(&op))
      op.erase();
  return success();
}

struct AutodiffPass : mlir::llmc::impl::AutodiffPassBase<AutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward || forward.isExternal()) {
      module.emitError("module has no @forward function with a body to "
                       "differentiate");
      return signalPassFailure();
    }
    if (Operation *existing = module.lookupSymbol(kGradFunction)) {
      existing->emitError("module already has a @grad_step; llmc-autodiff "
                          "adds it");
      return signalPassFailure();
    }
    if (failed(checkForward(forward)) || failed(buildGradStep(forward)))
      return signalPassFailure();
  }
};

} // namespace
