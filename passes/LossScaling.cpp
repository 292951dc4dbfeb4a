// The llmc-loss-scaling pass: dynamic loss scaling (fp16 training) inside
// the compiled step, with DeepSpeed's DynamicLossScaler rules.
//
// After llmc-optimizer, this pass adds four f32 scalar states, shared by
// name through the runtime's persistent store:
//   loss_scale                (starts at 2^initial-scale-power)
//   loss_scale.clean_steps    (clean steps since the last overflow or growth)
//   loss_scale.hysteresis     (overflows left before the scale drops; starts
//                              at `hysteresis`)
//   loss_scale.skipped_steps  (updates skipped so far: the runtime does not
//                              count them in Adam's step)
// and rewrites
//   @grad_step:   dloss -> dloss * loss_scale, where the backward sweep is
//                 seeded, so the accumulated gradients carry the scale (and
//                 @grad_step_no_sync, llmc-shard's step without
//                 communication, the same way);
//   @update_step: every gradient read -> gradient * (1 / loss_scale), so the
//                 norm, the clipping and the update see unscaled gradients;
//                 finite = is_finite(grad_norm); each parameter and optimizer
//                 state result -> select(finite, new, old); the gradients are
//                 zeroed either way; and the scale update:
//     overflow (not finite):
//       hysteresis <= 1: scale = max(scale / factor, min-scale)
//       else:            hysteresis -= 1
//       clean_steps = 0, skipped_steps += 1
//     clean:
//       clean_steps += 1; when it reaches `window`: scale *= factor,
//       clean_steps = 0 and hysteresis refilled (every clean step refills it
//       with consecutive-hysteresis)
//   returning the states' new values (`llmc.updates`, and as outputs under
//   their names) and two outputs: `overflow` (f32 1 or 0) and
//   `used_loss_scale` (the scale this step's gradients carry).
//
// A power-of-two scale changes no bit of the unscaled gradients (scaling by
// 2^k commutes with rounding) as long as nothing overflows or becomes
// subnormal, so f32 training with loss scaling equals training without it.
#include "ir/LlmcOps.h"
#include "ir/kernel/StepScalar.h"
#include "passes/NamedArguments.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>

namespace mlir::llmc {
#define GEN_PASS_DEF_LOSSSCALINGPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

using ::llmc::kir::StepScalar;
using ::llmc::kir::stepScalarName;

const llvm::StringRef kScale = stepScalarName(StepScalar::LossScale);
const llvm::StringRef kCleanSteps =
    stepScalarName(StepScalar::LossScaleCleanSteps);
const llvm::StringRef kHysteresis =
    stepScalarName(StepScalar::LossScaleHysteresis);
const llvm::StringRef kSkippedSteps =
    stepScalarName(StepScalar::LossScaleSkippedSteps);

/// Builds f32 scalar arithmetic at one place.
class Scalars {
public:
  Scalars(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  Value constant(double value) {
    auto type = RankedTensorType::get({}, b.getF32Type());
    return ConstantOp::create(
        b, loc, DenseElementsAttr::get(type, b.getF32FloatAttr(value)));
  }
  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value max(Value x, Value y) { return MaxOp::create(b, loc, x, y); }
  Value lessEqual(Value x, Value y) {
    return CompareOp::create(b, loc, ComparePredicate::LE, x, y);
  }
  Value select(Value condition, Value ifTrue, Value ifFalse) {
    return SelectOp::create(b, loc, condition, ifTrue, ifFalse);
  }

private:
  OpBuilder &b;
  Location loc;
};

/// The index of the first argument that is an `llmc.input`: new state
/// arguments go before it, after the parameters and the other states.
unsigned firstInputArgument(func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, "llmc.input"))
      return i;
  return func.getNumArguments();
}

/// The argument named `name` by `llmc.param` or `llmc.state`, if any.
std::optional<BlockArgument> namedArgument(func::FuncOp func, StringRef name) {
  if (std::optional<BlockArgument> param =
          argumentNamed(func, "llmc.param", name))
    return param;
  return argumentNamed(func, "llmc.state", name);
}

class LossScalingPass
    : public mlir::llmc::impl::LossScalingPassBase<LossScalingPass> {
public:
  using LossScalingPassBase::LossScalingPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkOptions(module)))
      return signalPassFailure();
    auto gradStep = module.lookupSymbol<func::FuncOp>("grad_step");
    auto updateStep = module.lookupSymbol<func::FuncOp>("update_step");
    if (!gradStep || !updateStep) {
      module.emitError("llmc-loss-scaling needs @grad_step and @update_step: "
                       "run llmc-autodiff and llmc-optimizer first");
      return signalPassFailure();
    }
    if (namedArgument(gradStep, kScale) || namedArgument(updateStep, kScale)) {
      module.emitError("the training step already has a '")
          << kScale << "' state: llmc-loss-scaling runs once";
      return signalPassFailure();
    }
    if (failed(scaleGradStep(gradStep)) || failed(scaleUpdateStep(updateStep)))
      return signalPassFailure();
    // Data parallelism's step without communication (llmc-shard) runs the
    // micro-batches before a step's last: its gradients carry the scale too.
    if (auto noSync = module.lookupSymbol<func::FuncOp>("grad_step_no_sync"))
      if (failed(scaleGradStep(noSync)))
        return signalPassFailure();
  }

private:
  double initialScale() const {
    return std::ldexp(1.0, int(initialScalePower));
  }

  LogicalResult checkOptions(ModuleOp module) {
    auto fail = [&]() { return module.emitError("llmc-loss-scaling: "); };
    // 2^p must be a normal f32, like every scale the rules reach.
    if (initialScalePower != std::floor(initialScalePower) ||
        initialScalePower < -126 || initialScalePower > 127)
      return fail() << "initial-scale-power must be an integer in [-126, "
                       "127], got "
                    << double(initialScalePower);
    // The counters are f32 states: exact integers up to 2^24.
    constexpr int64_t kMaxCount = int64_t(1) << 24;
    if (window < 1 || window > kMaxCount)
      return fail() << "window must be in [1, 2^24], got " << int64_t(window);
    if (hysteresis < 1 || hysteresis > kMaxCount)
      return fail() << "hysteresis must be in [1, 2^24], got "
                    << int64_t(hysteresis);
    if (!(factor > 1.0) || !std::isfinite(factor))
      return fail() << "factor must be finite and above 1, got "
                    << double(factor);
    if (!(minScale > 0.0) || minScale > initialScale())
      return fail() << "min-scale must be positive and at most the initial "
                       "scale "
                    << initialScale() << ", got " << double(minScale);
    return success();
  }

  /// Inserts an f32 scalar state argument before the inputs.
  BlockArgument addState(func::FuncOp func, StringRef name, double initial) {
    OpBuilder b(func.getContext());
    unsigned index = firstInputArgument(func);
    SmallVector<NamedAttribute> attrs = {
        b.getNamedAttr("llmc.state", b.getStringAttr(name))};
    if (initial != 0.0)
      attrs.push_back(
          b.getNamedAttr("llmc.state_init", b.getF64FloatAttr(initial)));
    if (failed(func.insertArgument(index,
                                   RankedTensorType::get({}, b.getF32Type()),
                                   b.getDictionaryAttr(attrs), func.getLoc())))
      llvm_unreachable("inserting an argument of a function with a body");
    return func.getArgument(index);
  }

  /// Seeds the backward sweep with dloss * loss_scale.
  LogicalResult scaleGradStep(func::FuncOp gradStep) {
    std::optional<BlockArgument> dloss;
    for (BlockArgument arg : gradStep.getArguments())
      if (auto name = gradStep.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                            "llmc.input"))
        if (name.getValue() == stepScalarName(StepScalar::DLoss))
          dloss = arg;
    if (!dloss)
      return gradStep.emitError("@grad_step has no llmc.input = \"")
             << stepScalarName(StepScalar::DLoss) << "\" argument to scale";
    BlockArgument scale = addState(gradStep, kScale, initialScale());
    OpBuilder b = OpBuilder::atBlockBegin(&gradStep.getBody().front());
    Value seed = MulOp::create(b, gradStep.getLoc(), *dloss, scale);
    dloss->replaceAllUsesExcept(seed, seed.getDefiningOp());
    return success();
  }

  LogicalResult scaleUpdateStep(func::FuncOp update) {
    Block &body = update.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    std::optional<unsigned> normIndex;
    for (unsigned i = 0; i < update.getNumResults(); ++i)
      if (auto name = update.getResultAttrOfType<StringAttr>(i, "llmc.output"))
        if (name.getValue() == stepScalarName(StepScalar::GradNorm))
          normIndex = i;
    if (!normIndex)
      return update.emitError("@update_step has no ")
             << stepScalarName(StepScalar::GradNorm)
             << " result to test for overflow";

    BlockArgument scale = addState(update, kScale, initialScale());
    BlockArgument clean = addState(update, kCleanSteps, 0.0);
    BlockArgument hyst = addState(update, kHysteresis, double(hysteresis));
    BlockArgument skipped = addState(update, kSkippedSteps, 0.0);
    Location loc = update.getLoc();

    // Unscale every gradient where it is read: the norm, the clipping and
    // the update all see the true gradient. One multiply per reader, so
    // that each kernel unscales as it loads instead of one kernel storing
    // an unscaled copy of the gradient for the others.
    OpBuilder b = OpBuilder::atBlockBegin(&body);
    Scalars s(b, loc);
    Value inverse = s.div(s.constant(1.0), scale);
    for (BlockArgument arg : update.getArguments()) {
      auto name =
          update.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "llmc.state");
      if (!name || !name.getValue().starts_with("grad."))
        continue;
      DenseMap<Operation *, Value> unscaled;
      for (OpOperand &use : llvm::make_early_inc_range(arg.getUses())) {
        Value &value = unscaled[use.getOwner()];
        if (!value) {
          b.setInsertionPoint(use.getOwner());
          value = s.mul(arg, inverse);
        }
        use.set(value);
      }
    }

    // An overflow keeps every parameter and optimizer state as it was. Each
    // new value is selected right where it is computed, and later uses (the
    // moments in the parameter's step) read the selection: equal on a clean
    // step, and it lets llmc-fusion keep one kernel per parameter.
    Value norm = ret.getOperand(*normIndex);
    if (Operation *def = norm.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&body);
    Operation *finiteOp = IsFiniteOp::create(b, loc, norm);
    Value finite = finiteOp->getResult(0);
    for (unsigned i = 0; i < update.getNumResults(); ++i) {
      auto target = update.getResultAttrOfType<StringAttr>(i, "llmc.updates");
      if (!target || target.getValue().starts_with("grad."))
        continue;
      std::optional<BlockArgument> old = namedArgument(update, target);
      if (!old)
        return update.emitError("result #")
               << i << " updates '" << target.getValue()
               << "', which no argument is named";
      Value value = ret.getOperand(i);
      Operation *def = value.getDefiningOp();
      if (def && finiteOp->isBeforeInBlock(def)) {
        b.setInsertionPointAfter(def);
        Value kept = s.select(finite, value, *old);
        value.replaceAllUsesExcept(kept, kept.getDefiningOp());
      } else {
        b.setInsertionPoint(ret);
        ret->setOperand(i, s.select(finite, value, *old));
      }
    }
    b.setInsertionPoint(ret);

    // The scale, with each op in its own statement: C++ leaves the order of
    // argument evaluation open, and the IR must not depend on the compiler.
    Value one = s.constant(1.0);
    Value zero = s.constant(0.0);
    Value factorC = s.constant(factor);
    Value refill = s.constant(double(hysteresis));
    // On an overflow: lower the scale at the last hysteresis, else use one.
    Value lastChance = s.lessEqual(hyst, one);
    Value divided = s.div(scale, factorC);
    Value lowered = s.max(divided, s.constant(minScale));
    Value scaleOnOverflow = s.select(lastChance, lowered, scale);
    Value hystLess = s.sub(hyst, one);
    Value hystOnOverflow = s.select(lastChance, hyst, hystLess);
    // On a clean step: count it; `window` of them in a row raise the scale.
    Value counted = s.add(clean, one);
    Value full = s.lessEqual(s.constant(double(window)), counted);
    Value raised = s.mul(scale, factorC);
    Value scaleOnClean = s.select(full, raised, scale);
    Value cleanOnClean = s.select(full, zero, counted);
    Value hystOnClean =
        consecutiveHysteresis ? refill : s.select(full, refill, hyst);

    Value newScale = s.select(finite, scaleOnClean, scaleOnOverflow);
    Value newClean = s.select(finite, cleanOnClean, zero);
    Value newHyst = s.select(finite, hystOnClean, hystOnOverflow);
    Value overflow = s.select(finite, zero, one);
    Value newSkipped = s.add(skipped, overflow);

    // The new results: the states (written back, and outputs under their
    // names, as llmc-optimizer names its updates), then the flag and the
    // scale the gradients carried.
    auto addResult = [&](Value value, StringRef name, bool updatesState) {
      SmallVector<NamedAttribute> attrs = {
          b.getNamedAttr("llmc.output", b.getStringAttr(name))};
      if (updatesState)
        attrs.push_back(b.getNamedAttr("llmc.updates", b.getStringAttr(name)));
      appendResult(update, value, attrs);
    };
    addResult(newScale, kScale, true);
    addResult(newClean, kCleanSteps, true);
    addResult(newHyst, kHysteresis, true);
    addResult(newSkipped, kSkippedSteps, true);
    addResult(overflow, stepScalarName(StepScalar::Overflow), false);
    addResult(scale, stepScalarName(StepScalar::UsedLossScale), false);
    return success();
  }
};

} // namespace
