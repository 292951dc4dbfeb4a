// The llmc-persistent-casts pass: mixed precision's 16-bit weight copies as
// state the optimizer writes, instead of a cast of every master weight in
// every micro-batch.
//
// After llmc-amp, llmc-autodiff and llmc-optimizer, each function that
// reads the f32 master weights (`llmc.param` arguments) in 16 bits holds
//   %c = llmc.cast %w : tensor<...xf32> -> tensor<...xbf16>
// which reads 4 and writes 2 bytes per parameter per micro-batch (GPT-2
// 124M: 0.74 GB). This pass makes the copy persistent, as Megatron-LM and
// llm.c keep their bf16 weights beside the f32 masters:
//   - every function but @update_step reads a state argument
//     `cast.<w>` (`llmc.state`) in place of the cast;
//   - @update_step writes cast(w') into it (`llmc.updates`), w' being the
//     value it writes into w: after loss scaling and 2:4 masking, so a
//     skipped update keeps the old copy and a masked weight's copy is
//     masked;
//   - the new @cast_weights(w..., cast.<w>...) writes cast(w) into every
//     copy: the runtime runs it whenever the masters are set from outside
//     the programs (initialization, a resume, a rollback), before any
//     program reads a copy.
// The values are the casts' own, bit for bit: a training run computes the
// same numbers as with a cast per micro-batch.
//
// A cast whose operand is not a parameter (a masked weight before 2:4
// training ran its mask, a ZeRO-3 block) stays as it is.
#include "ir/LlmcOps.h"
#include "passes/NamedArguments.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_PERSISTENTCASTSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

/// A master weight with a persistent 16-bit copy.
struct CastWeight {
  std::string param;     // the master's name (`llmc.param`)
  RankedTensorType type; // the copy's type
  std::string state() const { return "cast." + param; }
};

class PersistentCastsPass
    : public llmc::impl::PersistentCastsPassBase<PersistentCastsPass> {
public:
  using PersistentCastsPassBase::PersistentCastsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto update = module.lookupSymbol<func::FuncOp>("update_step");
    if (!update) {
      module.emitError("llmc-persistent-casts needs @update_step: run "
                       "llmc-optimizer first");
      return signalPassFailure();
    }
    if (module.lookupSymbol("cast_weights")) {
      module.emitError("the module already has @cast_weights");
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> readers;
    for (auto func : module.getOps<func::FuncOp>())
      if (func != update && func.getName() != "shard_init")
        readers.push_back(func);

    // The weights: every f32 parameter some reader casts to 16 bits and
    // @update_step writes. Collected in @update_step's argument order.
    SmallVector<CastWeight> weights;
    for (unsigned i = 0; i < update.getNumArguments(); ++i) {
      auto name = update.getArgAttrOfType<StringAttr>(i, "llmc.param");
      if (!name || !newValueOf(update, name.getValue()))
        continue;
      std::optional<RankedTensorType> type;
      for (func::FuncOp func : readers)
        for (CastOp castOp : castsOf(func, name.getValue())) {
          auto result = cast<RankedTensorType>(castOp.getType());
          if (type && *type != result) {
            castOp.emitError("parameter '")
                << name.getValue() << "' is cast to both " << *type << " and "
                << result << "; llmc-persistent-casts keeps one copy";
            return signalPassFailure();
          }
          type = result;
        }
      if (type)
        weights.push_back({name.str(), *type});
    }
    if (weights.empty())
      return;

    for (func::FuncOp func : readers)
      readCopies(func, weights);
    writeCopies(update, weights);
    buildCastWeights(module, update, weights);
  }

private:
  /// The f32 -> 16-bit casts of parameter `name` in `func`.
  static SmallVector<CastOp> castsOf(func::FuncOp func, StringRef name) {
    SmallVector<CastOp> casts;
    std::optional<BlockArgument> param =
        argumentNamed(func, "llmc.param", name);
    if (!param ||
        !cast<RankedTensorType>(param->getType()).getElementType().isF32())
      return casts;
    for (Operation *user : param->getUsers())
      if (auto castOp = dyn_cast<CastOp>(user)) {
        Type element = castOp.getType().getElementType();
        if (element.isF16() || element.isBF16())
          casts.push_back(castOp);
      }
    // In block order (use lists are not), so diagnostics are stable.
    llvm::sort(casts, [](CastOp x, CastOp y) {
      return x->isBeforeInBlock(y);
    });
    return casts;
  }

  /// The value @update_step writes into parameter `name`, or null.
  static Value newValueOf(func::FuncOp update, StringRef name) {
    std::optional<unsigned> index = resultUpdating(update, name);
    if (!index)
      return nullptr;
    return update.getBody().front().getTerminator()->getOperand(*index);
  }

  /// `func` reads each weight's copy instead of casting the master.
  static void readCopies(func::FuncOp func, ArrayRef<CastWeight> weights) {
    for (const CastWeight &w : weights) {
      SmallVector<CastOp> casts = castsOf(func, w.param);
      if (casts.empty())
        continue;
      BlockArgument copy = insertStateArgument(func, w.type, w.state());
      for (CastOp castOp : casts) {
        castOp.getResult().replaceAllUsesWith(copy);
        castOp.erase();
      }
    }
  }

  /// @update_step writes cast(w') into each copy, right after w'.
  static void writeCopies(func::FuncOp update, ArrayRef<CastWeight> weights) {
    OpBuilder b(update.getContext());
    for (const CastWeight &w : weights) {
      Value newValue = newValueOf(update, w.param);
      insertStateArgument(update, w.type, w.state());
      b.setInsertionPointAfterValue(newValue);
      Value copy = CastOp::create(b, newValue.getLoc(), w.type, newValue);
      appendResult(update, copy,
                   b.getNamedAttr("llmc.updates", b.getStringAttr(w.state())));
    }
  }

  /// @cast_weights(w..., cast.<w>...): every copy from its master.
  static void buildCastWeights(ModuleOp module, func::FuncOp update,
                               ArrayRef<CastWeight> weights) {
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    Location loc = NameLoc::get(b.getStringAttr("cast_weights"));
    SmallVector<Type> argTypes;
    for (const CastWeight &w : weights)
      argTypes.push_back(
          argumentNamed(update, "llmc.param", w.param)->getType());
    auto func = func::FuncOp::create(b, loc, "cast_weights",
                                     b.getFunctionType(argTypes, {}));
    for (auto [i, w] : llvm::enumerate(weights))
      func.setArgAttr(i, "llmc.param", b.getStringAttr(w.param));
    Block *body = func.addEntryBlock();
    b.setInsertionPointToStart(body);
    SmallVector<Value> copies;
    for (auto [i, w] : llvm::enumerate(weights))
      copies.push_back(CastOp::create(b, loc, w.type, body->getArgument(i)));
    func::ReturnOp::create(b, loc, ValueRange{});
    for (auto [w, copy] : llvm::zip(weights, copies)) {
      insertStateArgument(func, w.type, w.state());
      appendResult(func, copy,
                   b.getNamedAttr("llmc.updates", b.getStringAttr(w.state())));
    }
  }
};

} // namespace
