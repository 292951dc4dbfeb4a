// The llmc-optimizer pass: gradient accumulation in @grad_step and the
// optimizer step @update_step, both as llmc ops so that fusion and code
// generation treat them like the rest of the model.
//
// After llmc-autodiff, @grad_step(params..., tokens, targets, dloss) returns
// (loss, grad(p)...). This pass rebuilds it as
//   @grad_step(params..., grad.<p>..., tokens, targets, dloss)
//       -> (loss, grad.<p> + grad(p)...)
// where each new argument is a persistent gradient buffer (`llmc.state`) and
// each sum is written back into it (`llmc.updates`), and adds
//   @update_step(params..., grad.<p>..., <optimizer state>..., lr[,
//                bias_correction1, bias_correction2])
//       -> (grad_norm, p'..., state'..., zeroed grad.<p>...)
// whose results all update their buffers in place except grad_norm. The
// scalar inputs and outputs are named by ir/kernel/StepScalar.h; under
// AdamW the module records the betas (`llmc.adam_betas`), which the
// lowering copies into the update program, so that the runtime computes
// bc1 and bc2 from the betas the kernels were built with.
//
// The arithmetic follows PyTorch, operation for operation, so that a run can
// be checked against torch.optim step by step:
//   clip_grad_norm_: norm = sqrt(sum over all gradients of g^2),
//                    c = min(1, max_norm / (norm + 1e-6)), g <- g * c
//   AdamW:           p <- p * (1 - lr * wd)            (decay: see below)
//                    m <- beta1 * m + (1 - beta1) * g
//                    v <- beta2 * v + (1 - beta2) * g * g
//                    p <- p - (lr * bc1) * m / (sqrt(v) * sqrt(bc2) + eps)
//                    with bc1 = 1 / (1 - beta1^t), bc2 = 1 / (1 - beta2^t)
//   SGD:             d <- g + wd * p;  b <- momentum * b + d;
//                    d <- nesterov ? d + momentum * b : b;  p <- p - lr * d
// Weight decay skips rank-1 parameters (biases, norm weights) unless
// decay-norms-and-biases is set, as GPT-2/nanoGPT/Megatron configure it.
#include "ir/LlmcOps.h"
#include "ir/kernel/StepScalar.h"
#include "passes/NamedArguments.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;
using ::llmc::kir::StepScalar;
using ::llmc::kir::stepScalarName;

namespace {

/// One trained parameter: its name, type and index among @grad_step's
/// arguments.
struct Parameter {
  std::string name;
  RankedTensorType type;
  /// The ranks of mesh axis "tp" it is split over (llmc.tp_shard); 1:
  /// every rank holds it whole.
  int64_t tpSize = 1;
  /// A pipeline stage's copy of a parameter the first stage holds too
  /// (llmc.pp_tied: a tied wte on the last stage): counted in the global
  /// norm on the first stage only.
  bool ppTied = false;
};

/// Scalar arithmetic on tensor<f32> values and elementwise arithmetic with
/// scalar broadcasting, at one location.
class Arith {
public:
  Arith(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  Value constant(double value, Type elementType) {
    auto type = RankedTensorType::get({}, elementType);
    return ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(type, b.getFloatAttr(elementType, value)));
  }
  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value sqrt(Value x) { return SqrtOp::create(b, loc, x); }
  Value min(Value x, Value y) {
    // min(x, y) = -max(-x, -y): the dialect has max only.
    Value negX = NegOp::create(b, loc, x);
    Value negY = NegOp::create(b, loc, y);
    return NegOp::create(b, loc, MaxOp::create(b, loc, negX, negY));
  }
  /// The sum of every element, as tensor<f32>.
  Value sumAll(Value x) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < type.getRank(); ++d)
      dims.push_back(d);
    if (dims.empty())
      return x;
    return ReduceSumOp::create(b, loc, x, b.getDenseI64ArrayAttr(dims),
                               /*keep_dims=*/UnitAttr());
  }
  Value zeros(RankedTensorType type) {
    return FillOp::create(b, loc, type, b.getF64FloatAttr(0.0));
  }

private:
  OpBuilder &b;
  Location loc;
};

class OptimizerPass
    : public mlir::llmc::impl::OptimizerPassBase<OptimizerPass> {
public:
  using OptimizerPassBase::OptimizerPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto gradStep = module.lookupSymbol<func::FuncOp>("grad_step");
    if (!gradStep) {
      module.emitError("llmc-optimizer needs @grad_step: run llmc-autodiff "
                       "first");
      return signalPassFailure();
    }
    if (module.lookupSymbol("update_step")) {
      module.emitError("the module already has @update_step");
      return signalPassFailure();
    }
    if (optimizer != "adamw" && optimizer != "sgd") {
      module.emitError("unknown optimizer '")
          << optimizer << "' (expected adamw or sgd)";
      return signalPassFailure();
    }
    FailureOr<SmallVector<Parameter>> params = readParameters(gradStep);
    if (failed(params))
      return signalPassFailure();
    accumulateGradients(gradStep, *params);
    buildUpdateStep(module, *params);
  }

private:
  /// The parameters of @grad_step: its leading `llmc.param` arguments, one
  /// per gradient result after the loss.
  FailureOr<SmallVector<Parameter>> readParameters(func::FuncOp gradStep) {
    SmallVector<Parameter> params;
    for (unsigned i = 0; i < gradStep.getNumArguments(); ++i) {
      auto name = gradStep.getArgAttrOfType<StringAttr>(i, "llmc.param");
      if (!name)
        break;
      int64_t tpSize = 1;
      if (auto shard =
              gradStep.getArgAttrOfType<DictionaryAttr>(i, "llmc.tp_shard"))
        if (auto size = shard.getAs<IntegerAttr>("size"))
          tpSize = size.getInt();
      params.push_back(
          {name.str(),
           cast<RankedTensorType>(gradStep.getArgument(i).getType()),
           tpSize, bool(gradStep.getArgAttr(i, "llmc.pp_tied"))});
    }
    if (params.empty() ||
        gradStep.getNumResults() != params.size() + 1) {
      gradStep.emitError("@grad_step must return the loss and one gradient "
                         "per llmc.param argument; it has ")
          << params.size() << " parameters and " << gradStep.getNumResults()
          << " results";
      return failure();
    }
    for (const Parameter &param : params)
      if (!param.type.getElementType().isF32()) {
        // Mixed precision keeps f32 master weights (the AMP pass casts
        // copies), so the optimizer only ever updates f32 tensors.
        gradStep.emitError("llmc-optimizer updates f32 parameters; '")
            << param.name << "' is " << param.type;
        return failure();
      }
    for (auto [i, param] : llvm::enumerate(params))
      if (gradStep.getResultTypes()[i + 1] != param.type) {
        gradStep.emitError("the gradient of '")
            << param.name << "' has type " << gradStep.getResultTypes()[i + 1]
            << ", not the parameter's " << param.type;
        return failure();
      }
    return params;
  }

  /// Inserts the gradient buffers after the parameters and returns the
  /// accumulated sums in place of the gradients.
  void accumulateGradients(func::FuncOp gradStep,
                           ArrayRef<Parameter> params) {
    OpBuilder b(gradStep.getContext());
    Block &body = gradStep.getBody().front();
    unsigned numParams = params.size();
    SmallVector<Value> buffers;
    for (auto [i, param] : llvm::enumerate(params)) {
      unsigned index = numParams + i;
      std::string name = "grad." + param.name;
      if (failed(gradStep.insertArgument(
              index, param.type,
              b.getDictionaryAttr(b.getNamedAttr("llmc.state",
                                                 b.getStringAttr(name))),
              gradStep.getLoc())))
        llvm_unreachable("inserting an argument of a function with a body");
      buffers.push_back(body.getArgument(index));
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    b.setInsertionPoint(ret);
    Arith arith(b, ret.getLoc());
    for (auto [i, param] : llvm::enumerate(params)) {
      unsigned result = i + 1;
      ret->setOperand(result,
                      arith.add(buffers[i], ret->getOperand(result)));
      std::string name = "grad." + param.name;
      gradStep.setResultAttr(result, "llmc.output", b.getStringAttr(name));
      gradStep.setResultAttr(result, "llmc.updates", b.getStringAttr(name));
    }
  }

  bool decays(const Parameter &param) const {
    return weightDecay != 0.0 &&
           (decayNormsAndBiases || param.type.getRank() >= 2);
  }

  /// The sum of the squares of every gradient, over the tp ranks and the
  /// pipeline's stages where they split the parameters: the square of the
  /// global gradient norm.
  Value sumOfSquares(OpBuilder &b, ModuleOp module,
                     ArrayRef<Parameter> params, ArrayRef<Value> grads) {
    Location loc = module.getLoc();
    Arith arith(b, loc);
    Type f32 = b.getF32Type();
    size_t n = params.size();
    // Under tensor parallelism a split parameter's squares are summed over
    // its ranks (each holds a share); a whole one is counted once.
    // Under pipeline parallelism each stage sums its own parameters' and
    // the stages' sums are added over "pp" (a tied copy counted once).
    Value sumSquares, splitSquares;
    int64_t tpSize = 1;
    for (size_t i = 0; i < n; ++i) {
      if (params[i].ppTied)
        continue;
      Value squares = arith.mul(grads[i], grads[i]);
      Value sum = arith.sumAll(squares);
      Value &total = params[i].tpSize > 1 ? splitSquares : sumSquares;
      tpSize = std::max(tpSize, params[i].tpSize);
      total = total ? arith.add(total, sum) : sum;
    }
    if (splitSquares) {
      Value reduced = AllReduceOp::create(
          b, loc, splitSquares,
          CollectiveReductionAttr::get(b.getContext(), CollectiveReduction::Sum),
          b.getStringAttr("tp"), b.getI64IntegerAttr(tpSize), UnitAttr());
      sumSquares = sumSquares ? arith.add(sumSquares, reduced) : reduced;
    }
    if (auto pipeline =
            module.lookupSymbol<func::FuncOp>("grad_step")
                ->getAttrOfType<DictionaryAttr>("llmc.pipeline")) {
      auto stages = pipeline.getAs<IntegerAttr>("stages");
      if (!sumSquares)
        sumSquares = arith.constant(0.0, f32);
      if (stages && stages.getInt() > 1)
        sumSquares = AllReduceOp::create(
            b, loc, sumSquares,
            CollectiveReductionAttr::get(b.getContext(),
                                         CollectiveReduction::Sum),
            b.getStringAttr("pp"), b.getI64IntegerAttr(stages.getInt()),
            UnitAttr());
    }
    return sumSquares;
  }

  void buildUpdateStep(ModuleOp module, ArrayRef<Parameter> params) {
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    Location loc = module.getLoc();
    bool adamw = optimizer == "adamw";
    bool sgdMomentum = !adamw && momentum != 0.0;
    Type f32 = b.getF32Type();
    auto scalar = RankedTensorType::get({}, f32);

    // Arguments: parameters, gradients, optimizer state, scalar inputs.
    SmallVector<Type> argTypes;
    SmallVector<NamedAttribute> argAttrs;
    auto addArg = [&](Type type, StringRef kind, const std::string &name) {
      argTypes.push_back(type);
      argAttrs.push_back(b.getNamedAttr(kind, b.getStringAttr(name)));
    };
    SmallVector<std::string> stateNames; // kind prefixes, in argument order
    if (adamw)
      stateNames = {"adam_m", "adam_v"};
    else if (sgdMomentum)
      stateNames = {"momentum"};
    for (const Parameter &param : params)
      addArg(param.type, "llmc.param", param.name);
    for (const Parameter &param : params)
      addArg(param.type, "llmc.state", "grad." + param.name);
    for (const std::string &prefix : stateNames)
      for (const Parameter &param : params)
        addArg(param.type, "llmc.state", prefix + "." + param.name);
    SmallVector<StepScalar> scalarInputs = {StepScalar::Lr};
    if (adamw)
      scalarInputs.append(
          {StepScalar::BiasCorrection1, StepScalar::BiasCorrection2});
    for (StepScalar input : scalarInputs)
      addArg(scalar, "llmc.input", stepScalarName(input).str());
    // The runtime derives the bias corrections from the betas the kernels
    // are built with: the lowering copies them into the program.
    if (adamw)
      module->setAttr(kAdamBetasAttr, b.getDenseF64ArrayAttr({beta1, beta2}));

    auto func = func::FuncOp::create(b, loc, "update_step",
                                     b.getFunctionType(argTypes, {}));
    for (auto [i, attr] : llvm::enumerate(argAttrs))
      func.setArgAttr(i, attr.getName(), attr.getValue());
    Block *body = func.addEntryBlock();
    b.setInsertionPointToStart(body);
    Arith arith(b, loc);

    size_t n = params.size();
    auto arg = [&](size_t index) { return body->getArgument(index); };
    auto param = [&](size_t i) { return arg(i); };
    auto grad = [&](size_t i) { return arg(n + i); };
    auto state = [&](size_t which, size_t i) {
      return arg(2 * n + which * n + i);
    };
    size_t scalars = (2 + stateNames.size()) * n;
    Value lr = arg(scalars);

    // Each op is built in its own statement: C++ leaves the order of
    // argument evaluation open, and the IR must not depend on the compiler.
    // The global gradient norm, then the clipping coefficient.
    SmallVector<Value> grads;
    for (size_t i = 0; i < n; ++i)
      grads.push_back(grad(i));
    Value sumSquares = sumOfSquares(b, module, params, grads);
    Value gradNorm = arith.sqrt(sumSquares);
    Value clip;
    if (maxGradNorm > 0.0) {
      Value one = arith.constant(1.0, f32);
      Value maxNorm = arith.constant(maxGradNorm, f32);
      Value tiny = arith.constant(1e-6, f32);
      Value safeNorm = arith.add(gradNorm, tiny);
      clip = arith.min(one, arith.div(maxNorm, safeNorm));
    }

    SmallVector<Value> results = {gradNorm};
    SmallVector<std::pair<std::string, std::string>> resultNames = {
        {"llmc.output", stepScalarName(StepScalar::GradNorm).str()}};

    // The scalars every parameter's update shares, built once: constants
    // (f32; the update of a low-precision parameter would need its own),
    // the decay factor 1 - lr * wd, and Adam's step size and sqrt(bc2).
    auto c = [&](double value) { return arith.constant(value, f32); };
    Value keep, stepSize, rootBc2;
    Value beta1c, oneMinusBeta1, beta2c, oneMinusBeta2, epsilonc;
    Value momentumc, weightDecayc;
    if (adamw) {
      if (weightDecay != 0.0) {
        Value one = c(1.0);
        Value lrDecay = arith.mul(lr, c(weightDecay));
        keep = arith.sub(one, lrDecay);
      }
      beta1c = c(beta1);
      oneMinusBeta1 = c(1.0 - beta1);
      beta2c = c(beta2);
      oneMinusBeta2 = c(1.0 - beta2);
      epsilonc = c(epsilon);
      stepSize = arith.mul(lr, arg(scalars + 1));
      rootBc2 = arith.sqrt(arg(scalars + 2));
    } else {
      momentumc = c(momentum);
      weightDecayc = c(weightDecay);
    }

    SmallVector<Value> newParams, newStates[2], zeroedGrads;
    for (size_t i = 0; i < n; ++i) {
      const Parameter &p = params[i];
      Value g = clip ? arith.mul(grad(i), clip) : grad(i);
      Value x = param(i);
      if (adamw) {
        if (decays(p))
          x = arith.mul(x, keep);
        Value mOld = arith.mul(beta1c, state(0, i));
        Value mNew = arith.mul(oneMinusBeta1, g);
        Value m = arith.add(mOld, mNew);
        Value vOld = arith.mul(beta2c, state(1, i));
        Value g2 = arith.mul(g, g);
        Value vNew = arith.mul(oneMinusBeta2, g2);
        Value v = arith.add(vOld, vNew);
        Value rootV = arith.sqrt(v);
        Value scaledRoot = arith.mul(rootV, rootBc2);
        Value denom = arith.add(scaledRoot, epsilonc);
        Value numer = arith.mul(stepSize, m);
        Value step = arith.div(numer, denom);
        x = arith.sub(x, step);
        newStates[0].push_back(m);
        newStates[1].push_back(v);
      } else {
        Value d = g;
        if (decays(p)) {
          Value decay = arith.mul(weightDecayc, x);
          d = arith.add(d, decay);
        }
        if (sgdMomentum) {
          Value kept = arith.mul(momentumc, state(0, i));
          Value buf = arith.add(kept, d);
          newStates[0].push_back(buf);
          if (nesterov) {
            Value ahead = arith.mul(momentumc, buf);
            d = arith.add(d, ahead);
          } else {
            d = buf;
          }
        }
        Value step = arith.mul(lr, d);
        x = arith.sub(x, step);
      }
      newParams.push_back(x);
      zeroedGrads.push_back(arith.zeros(p.type));
    }
    for (size_t i = 0; i < n; ++i) {
      results.push_back(newParams[i]);
      resultNames.push_back({"llmc.updates", params[i].name});
    }
    for (auto [which, prefix] : llvm::enumerate(stateNames))
      for (size_t i = 0; i < n; ++i) {
        results.push_back(newStates[which][i]);
        resultNames.push_back({"llmc.updates", prefix + "." + params[i].name});
      }
    for (size_t i = 0; i < n; ++i) {
      results.push_back(zeroedGrads[i]);
      resultNames.push_back({"llmc.updates", "grad." + params[i].name});
    }
    func::ReturnOp::create(b, loc, results);
    SmallVector<Type> resultTypes;
    for (Value v : results)
      resultTypes.push_back(v.getType());
    func.setFunctionType(b.getFunctionType(argTypes, resultTypes));
    for (auto [i, name] : llvm::enumerate(resultNames)) {
      func.setResultAttr(i, name.first, b.getStringAttr(name.second));
      if (name.first == "llmc.updates")
        func.setResultAttr(i, "llmc.output", b.getStringAttr(name.second));
    }
  }
};

} // namespace
