// The llmc-sparsify pass: 2:4 structured sparsity (NVIDIA Apex ASP's
// m4n2_1d) for the selected matmul weights of the training step.
//
// Each selected weight W ([N, K], the nn.Linear layout a matmul reads with
// transpose_b) gets a persistent mask state `sparsity_mask.<W>` of W's type,
// 1 everywhere until the runtime prunes (runtime/Weights/Sparsity.h computes it
// from magnitudes: in each group of 4 consecutive elements along K, the 2
// largest are kept). Then
//   @forward, @grad_step, @grad_step_no_sync: every read of W reads
//       W * mask, one product at the top of the function that all readers
//       share (AMP's cast, the forward and backward matmuls, and the clones
//       llmc-remat makes later, which read what their originals read);
//   @update_step: every read of W's gradient and optimizer state
//       (`grad.W`, `adam_m.W`, `adam_v.W`, `momentum.W`) reads it times the
//       mask, one product per reader so that it fuses into the reader's
//       kernel, as llmc-loss-scaling unscales; and the new W is written as
//       W' * mask. So the gradient norm, the clipping and the moments see
//       the masked gradient only, and a pruned weight is exactly 0 after
//       every update, whatever the optimizer, precision or loss scale (an
//       overflow's select keeps the old, already masked W).
#include "ir/LlmcOps.h"
#include "passes/NamedArguments.h"
#include "passes/Passes.h"
#include "passes/Remat.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/GlobPattern.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_SPARSIFYPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

/// The state a mask is stored in; runtime/Weights/Sparsity.h (kSparsityMaskPrefix)
/// reads masks by this prefix, groups along their last dimension.
std::string maskName(StringRef param) {
  return ("sparsity_mask." + param).str();
}

/// How a parameter is read by matmuls (through casts): as a weight in the
/// [N, K] layout (rhs with transpose_b), or only in the [K, N] layout.
struct MatmulUse {
  bool nk = false, kn = false;
};

void collectMatmulUses(Value value, MatmulUse &use) {
  for (OpOperand &operand : value.getUses()) {
    Operation *owner = operand.getOwner();
    if (auto matmul = dyn_cast<MatmulOp>(owner)) {
      if (operand.getOperandNumber() == 1)
        (matmul.getTransposeB() ? use.nk : use.kn) = true;
    } else if (isa<CastOp>(owner)) {
      collectMatmulUses(owner->getResult(0), use);
    }
  }
}

class SparsifyPass : public llmc::impl::SparsifyPassBase<SparsifyPass> {
public:
  using SparsifyPassBase::SparsifyPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (pattern != "2:4") {
      module.emitError("llmc-sparsify: unknown sparsity pattern '")
          << pattern << "' (supported: 2:4)";
      return signalPassFailure();
    }
    // The selection is made on @forward when there is one (the function
    // the user wrote), else on @grad_step (whose forward part is a copy).
    auto source = module.lookupSymbol<func::FuncOp>("forward");
    if (!source)
      source = module.lookupSymbol<func::FuncOp>("grad_step");
    if (!source) {
      module.emitError("llmc-sparsify needs @forward or @grad_step");
      return signalPassFailure();
    }
    FailureOr<SmallVector<std::pair<std::string, RankedTensorType>>>
        selected = select(source);
    if (failed(selected))
      return signalPassFailure();

    for (StringRef name : {"forward", "grad_step", "grad_step_no_sync"})
      if (auto func = module.lookupSymbol<func::FuncOp>(name))
        maskReads(func, *selected);
    if (auto update = module.lookupSymbol<func::FuncOp>("update_step"))
      if (failed(maskUpdate(update, *selected)))
        return signalPassFailure();

    OpBuilder b(module.getContext());
    SmallVector<Attribute> names;
    for (const auto &entry : *selected)
      names.push_back(b.getStringAttr(entry.first));
    module->setAttr("llmc.sparsity",
                    b.getDictionaryAttr(
                        {b.getNamedAttr("pattern", b.getStringAttr(pattern)),
                         b.getNamedAttr("params", b.getArrayAttr(names))}));
  }

private:
  /// The selected weights of `func`, in argument order: the matmul weights
  /// that the patterns match (by default those inside transformer blocks).
  FailureOr<SmallVector<std::pair<std::string, RankedTensorType>>>
  select(func::FuncOp func) {
    SmallVector<llvm::GlobPattern> globs;
    for (const std::string &text : params) {
      llvm::Expected<llvm::GlobPattern> glob = llvm::GlobPattern::create(text);
      if (!glob) {
        func.emitError("llmc-sparsify: bad parameter pattern '")
            << text << "': " << llvm::toString(glob.takeError());
        return failure();
      }
      globs.push_back(std::move(*glob));
    }
    SmallVector<bool> patternUsed(globs.size(), false);
    SmallVector<std::string> weights; // every matmul weight, for messages
    SmallVector<std::pair<std::string, RankedTensorType>> selected;
    for (BlockArgument arg : func.getArguments()) {
      auto name =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "llmc.param");
      if (!name)
        continue;
      MatmulUse use;
      collectMatmulUses(arg, use);
      if (!use.nk && !use.kn)
        continue;
      weights.push_back(name.str());
      bool chosen = globs.empty() && blockOfParameter(name.getValue());
      for (auto [i, glob] : llvm::enumerate(globs))
        if (glob.match(name.getValue())) {
          patternUsed[i] = true;
          chosen = true;
        }
      if (!chosen)
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      if (!use.nk)
        return func.emitError("llmc-sparsify: '")
               << name.getValue() << "' " << type
               << " is read as [K, N] (a matmul rhs without transpose_b); "
                  "2:4 groups run along the reduction dimension, which "
                  "llmc-sparsify needs last: store the weight as [N, K]";
      int64_t k = type.getShape().back();
      if (type.getRank() != 2 || ShapedType::isDynamic(k) || k % 4 != 0)
        return func.emitError("llmc-sparsify: the reduction dimension of '")
               << name.getValue() << "' " << type << " is " << k
               << ", not a multiple of 4: 2:4 needs whole groups of 4 "
                  "(leave it dense by naming the others in params=)";
      selected.push_back({name.str(), type});
    }
    for (auto [i, used] : llvm::enumerate(patternUsed))
      if (!used)
        return func.emitError("llmc-sparsify: parameter pattern '")
               << params[i] << "' matches no matmul weight (they are: "
               << llvm::join(weights, ", ") << ")";
    if (selected.empty())
      return func.emitError("llmc-sparsify: no matmul weight to sparsify "
                            "(none is inside a transformer block; name them "
                            "with params=)");
    return selected;
  }

  void maskReads(func::FuncOp func,
                 ArrayRef<std::pair<std::string, RankedTensorType>> selected) {
    // The products lead the body, in the order of the weights.
    OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
    for (const auto &[name, type] : selected) {
      std::optional<BlockArgument> weight =
          argumentNamed(func, "llmc.param", name);
      if (!weight)
        continue;
      BlockArgument mask = insertStateArgument(func, type, maskName(name), 1.0);
      Value masked = MulOp::create(b, func.getLoc(), *weight, mask);
      weight->replaceAllUsesExcept(masked, masked.getDefiningOp());
      b.setInsertionPointAfter(masked.getDefiningOp());
    }
  }

  LogicalResult
  maskUpdate(func::FuncOp update,
             ArrayRef<std::pair<std::string, RankedTensorType>> selected) {
    Block &body = update.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Location loc = update.getLoc();
    for (const auto &[name, type] : selected) {
      if (!argumentNamed(update, "llmc.state", "grad." + name))
        return update.emitError("llmc-sparsify: @update_step has no "
                                "gradient state 'grad.")
               << name << "' of the weight's shape (ZeRO-sharded state is "
                          "not supported)";
      BlockArgument mask =
          insertStateArgument(update, type, maskName(name), 1.0);
      OpBuilder b(update.getContext());
      // The gradient and optimizer state: `<kind>.<name>`, kind one word.
      for (BlockArgument arg : update.getArguments()) {
        auto state = update.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                         "llmc.state");
        if (!state || arg.getType() != type)
          continue;
        auto [kind, rest] = state.getValue().split('.');
        if (rest != name || kind == "sparsity_mask")
          continue;
        SmallVector<OpOperand *> uses;
        for (OpOperand &use : arg.getUses())
          uses.push_back(&use);
        DenseMap<Operation *, Value> masked; // one product per reader
        for (OpOperand *use : uses) {
          Value &value = masked[use->getOwner()];
          if (!value) {
            b.setInsertionPoint(use->getOwner());
            value = MulOp::create(b, loc, arg, mask);
          }
          use->set(value);
        }
      }
      if (std::optional<unsigned> i = resultUpdating(update, name)) {
        b.setInsertionPoint(ret);
        ret->setOperand(*i, MulOp::create(b, loc, ret->getOperand(*i), mask));
      }
    }
    return success();
  }
};

} // namespace
