// The llmc-amp pass: automatic mixed precision of @forward by op lists, in
// the manner of torch.autocast and NVIDIA Apex AMP.
//
// Every op of @forward gets one compute type and its float operands are
// cast to it:
//   allow  -> the low-precision type (fp16 or bf16): the matrix products,
//             whose tensor-core throughput is the point of mixed precision;
//   deny   -> f32: ops whose range or accumulated rounding error fp16 does
//             not survive (exp, log, softmax, the loss, norm statistics,
//             reductions);
//   follow -> the widest float type among the operands that are neither
//             parameters nor constants (f16 with bf16 widens to f32), so a
//             bias add after an f16 matmul stays f16 while the residual add
//             of the f32 stream and an f16 projection is f32; f32 when the
//             op has no such operand (the embedding of wte).
// Parameters and constants do not vote because they are not activations:
// torch's linear casts its bias to the input's type in the same way.
//
// Parameters stay f32 arguments (the master weights that the optimizer
// updates); each gets one cast per low-precision type, right before its
// first use and shared by all its uses, which is the "low-precision copy
// made once per step" of Apex AMP. Since the pass runs before llmc-autodiff, the
// VJP of that cast (a cast back) delivers an f32 gradient to the master.
// Results keep their types: ops whose results are f32 by definition
// (statistics, the loss) keep them, and the function's results are cast
// back to their declared types at the return.
//
// Last, the casts are cleaned up in one sweep in block order: a cast whose
// input is an exactly widening cast is folded through it (CastOp::fold:
// f16 -> f32 -> f16 is the value itself), identical casts of one value are
// merged into the first, and casts left unused are erased.
#include "ir/LlmcOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace mlir::llmc {
#define GEN_PASS_DEF_AMPPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

/// How an op chooses the type it computes in: by default its AMP trait
/// (ir/LlmcInterfaces.td: Llmc_AmpAllow, Llmc_AmpDeny, neither: follow),
/// unless the allow= or deny= option moved it.
enum class Policy { Allow, Deny, Follow };

Policy defaultPolicy(OperationName name) {
  switch (getAmpCategory(name)) {
  case AmpCategory::Allow:
    return Policy::Allow;
  case AmpCategory::Deny:
    return Policy::Deny;
  case AmpCategory::Follow:
  case AmpCategory::Exempt:
    return Policy::Follow;
  }
  llvm_unreachable("unknown AMP category");
}

/// The pass description with the default lists spelled out, read from the
/// ops' traits so that `llmc-opt --help` shows the table itself.
const std::string &describeDefaultLists() {
  static const std::string description = [] {
    return "Mixed precision by op lists (torch.autocast, Apex AMP); default "
           "allow list: " +
           llvm::join(getOpNamesOfAmpCategory(AmpCategory::Allow), ", ") +
           "; default deny list: " +
           llvm::join(getOpNamesOfAmpCategory(AmpCategory::Deny), ", ") +
           "; other ops follow their inputs";
  }();
  return description;
}

/// f16 with bf16 has no common narrow type: like torch's type promotion,
/// the pair widens to f32.
Type widest(Type a, Type b) {
  if (!a || a == b)
    return b;
  return Float32Type::get(b.getContext());
}

Type floatElementType(Value value) {
  auto tensor = dyn_cast<RankedTensorType>(value.getType());
  if (!tensor || !isDataElementType(tensor.getElementType()))
    return Type();
  return tensor.getElementType();
}

RankedTensorType withElementType(Value value, Type elementType) {
  return cast<RankedTensorType>(value.getType()).clone(elementType);
}

/// Rewrites the ops of one @forward body.
class AmpRewriter {
public:
  AmpRewriter(func::FuncOp forward, Type lowType,
              const llvm::StringMap<Policy> &moved)
      : forward(forward), lowType(lowType), moved(moved),
        f32Type(Float32Type::get(forward.getContext())) {}

  LogicalResult run() {
    Block &body = forward.getBody().front();
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (isa<func::ReturnOp>(op)) {
        castResultsBack(cast<func::ReturnOp>(op));
        continue;
      }
      if (isa<FusionOp>(op))
        return op.emitOpError("llmc-amp runs before llmc-fusion");
      // Casts, constants and fills (Llmc_AmpExempt) keep their types. So do
      // collectives: a tensor-parallel all-reduce of a low-precision
      // matmul's partial sums gets them cast back to its f32 (MPI sums no
      // f16; Megatron's fp32 all-reduce option), as does sequence
      // parallelism's reduce-scatter, and the all-gather of
      // vocabulary-parallel logits gathers f32 as @forward returns them.
      if (getAmpCategory(op.getName()) == AmpCategory::Exempt) {
        if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp>(op)) {
          Value input = op.getOperand(0);
          Type elementType = getElementTypeOrSelf(op.getResult(0).getType());
          if (getElementTypeOrSelf(input.getType()) != elementType) {
            OpBuilder b(&op);
            op.setOperand(0, CastOp::create(
                                 b, op.getLoc(),
                                 withElementType(input, elementType), input));
          }
        }
        continue;
      }
      if (failed(rewrite(&op)))
        return failure();
    }
    foldCasts(body);
    return success();
  }

private:
  bool isParameter(Value value) {
    auto arg = dyn_cast<BlockArgument>(value);
    return arg && forward.getArgAttr(arg.getArgNumber(), "llmc.param");
  }

  /// Parameters and constants are cast to the type of the activations they
  /// meet instead of choosing it.
  bool isWeak(Value value) {
    return isParameter(value) || value.getDefiningOp<ConstantOp>() ||
           value.getDefiningOp<FillOp>();
  }

  /// The type `op` computes in, or null when it has no float operand.
  Type computeType(Operation *op) {
    Type widestActivation, anyFloat;
    for (Value operand : op->getOperands()) {
      Type type = floatElementType(operand);
      if (!type)
        continue;
      anyFloat = type;
      if (!isWeak(operand))
        widestActivation = widest(widestActivation, type);
    }
    if (!anyFloat)
      return Type();
    auto it = moved.find(op->getName().getStringRef());
    Policy policy =
        it == moved.end() ? defaultPolicy(op->getName()) : it->second;
    if (policy == Policy::Allow)
      return lowType;
    if (policy == Policy::Deny || !widestActivation)
      return f32Type;
    return widestActivation;
  }

  /// The parameter's single cast to `elementType`, made right before its
  /// first user (`user`: ops are rewritten in block order, so the first
  /// request comes from the first use, which the cast then dominates with
  /// all later ones). Made there and not at the top of the function, the
  /// copy of a late layer's weights does not exist while the early layers
  /// run, and llmc-remat can recompute it next to its backward use.
  Value parameterCast(Value param, Type elementType, Operation *user) {
    Value &slot = parameterCasts[{param, elementType}];
    if (slot)
      return slot;
    OpBuilder b(user);
    auto castOp = CastOp::create(b, param.getLoc(),
                                 withElementType(param, elementType), param);
    slot = castOp.getResult();
    return slot;
  }

  LogicalResult rewrite(Operation *op) {
    Type target = computeType(op);
    if (!target)
      return success();
    OpBuilder b(op);
    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      Type type = floatElementType(value);
      if (!type || type == target)
        continue;
      Value converted =
          isParameter(value)
              ? parameterCast(value, target, op)
              : CastOp::create(b, op->getLoc(), withElementType(value, target),
                               value)
                    .getResult();
      operand.set(converted);
    }
    return retypeResults(op, target);
  }

  /// Gives the results the types the new operand types imply: inferred
  /// where the op infers them (so statistics stay f32), otherwise the float
  /// results take the compute type (elementwise ops, reshape, broadcast).
  LogicalResult retypeResults(Operation *op, Type target) {
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      SmallVector<Type> types;
      if (failed(infer.inferReturnTypes(
              op->getContext(), op->getLoc(), op->getOperands(),
              op->getAttrDictionary(), op->getPropertiesStorage(),
              op->getRegions(), types)))
        return failure();
      for (auto [result, type] : llvm::zip_equal(op->getResults(), types))
        result.setType(type);
      return success();
    }
    for (Value result : op->getResults())
      if (floatElementType(result))
        result.setType(withElementType(result, target));
    return success();
  }

  /// Keeps the declared result types of @forward (the f32 loss and logits).
  void castResultsBack(func::ReturnOp ret) {
    OpBuilder b(ret);
    for (auto [operand, type] : llvm::zip_equal(
             ret->getOpOperands(), forward.getFunctionType().getResults()))
      if (operand.get().getType() != type)
        operand.set(CastOp::create(b, ret.getLoc(), type, operand.get()));
  }

  /// Folds cast chains, merges identical casts and erases unused ones.
  /// Walking in block order, a cast's input is final by the time it is
  /// visited, and the first of identical casts dominates the others.
  static void foldCasts(Block &body) {
    llvm::DenseMap<std::pair<Value, Type>, CastOp> firstCast;
    for (CastOp castOp : llvm::make_early_inc_range(body.getOps<CastOp>())) {
      SmallVector<OpFoldResult, 1> folded;
      // An in-place fold shortens the chain by one cast; repeat to the end.
      while (succeeded(castOp->fold(folded)) && folded.empty()) {
      }
      if (!folded.empty()) {
        castOp.replaceAllUsesWith(cast<Value>(folded.front()));
        castOp.erase();
        continue;
      }
      auto [it, inserted] =
          firstCast.try_emplace({castOp.getInput(), castOp.getType()}, castOp);
      if (!inserted) {
        castOp.replaceAllUsesWith(it->second.getResult());
        castOp.erase();
      }
    }
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (isa<CastOp>(op) && op.use_empty())
        op.erase();
  }

  func::FuncOp forward;
  Type lowType;
  /// The ops the allow= and deny= options moved, by name.
  const llvm::StringMap<Policy> &moved;
  Type f32Type;
  llvm::DenseMap<std::pair<Value, Type>, Value> parameterCasts;
};

struct AmpPass : llmc::impl::AmpPassBase<AmpPass> {
  using AmpPassBase::AmpPassBase;

  StringRef getDescription() const override { return describeDefaultLists(); }

  /// The user's moves onto the allow and deny lists, or failure with a
  /// diagnostic on `module` naming the bad entry.
  FailureOr<llvm::StringMap<Policy>> buildPolicies(ModuleOp module) {
    llvm::StringMap<Policy> moved;
    for (auto [list, policy, option] :
         {std::make_tuple(&allow, Policy::Allow, "allow"),
          std::make_tuple(&deny, Policy::Deny, "deny")}) {
      for (const std::string &name : *list) {
        // Exempt ops never take a list: casts are what the pass inserts,
        // constants and fills have no operands to cast, fusion runs after.
        std::optional<RegisteredOperationName> op =
            RegisteredOperationName::lookup(name, module.getContext());
        if (!op || !StringRef(name).starts_with("llmc.") ||
            getAmpCategory(*op) == AmpCategory::Exempt)
          return module.emitError("llmc-amp: '")
                 << name << "' in " << option
                 << "= is not an llmc op that a list can hold (write names "
                    "like llmc.softmax)";
        auto [it, inserted] = moved.try_emplace(name, policy);
        if (!inserted && it->second != policy)
          return module.emitError("llmc-amp: '")
                 << name << "' is on both the allow and the deny list";
      }
    }
    return moved;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    Type lowType;
    if (precision == "fp16")
      lowType = Float16Type::get(ctx);
    else if (precision == "bf16")
      lowType = BFloat16Type::get(ctx);
    else {
      module.emitError("llmc-amp: unknown precision '")
          << precision << "' (expected fp16 or bf16)";
      return signalPassFailure();
    }
    FailureOr<llvm::StringMap<Policy>> policies = buildPolicies(module);
    if (failed(policies))
      return signalPassFailure();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward || forward.isExternal()) {
      module.emitError("llmc-amp: module has no @forward function with a "
                       "body");
      return signalPassFailure();
    }
    if (Operation *gradStep = module.lookupSymbol("grad_step")) {
      gradStep->emitError("llmc-amp runs before llmc-autodiff, so that the "
                          "gradient step differentiates the casts; the "
                          "module already has @grad_step");
      return signalPassFailure();
    }
    if (!forward.getBody().hasOneBlock()) {
      forward.emitError("llmc-amp: @forward must have a single block");
      return signalPassFailure();
    }
    if (failed(AmpRewriter(forward, lowType, *policies).run()))
      return signalPassFailure();
  }
};

} // namespace
