// The llmc-shard pass: data parallelism and ZeRO as a rewrite of the
// training step that llmc-optimizer made, so that every rank runs the same
// program on its own part of the global batch.
//
// The mesh axis is "dp" of size `dp`. Each rank's @grad_step sees its own
// micro-batches with dloss = 1 / (its micro-batches), so the average over
// the ranks of their accumulated gradients is the gradient of the global
// batch's mean loss: the same as one process with the same global batch.
//
// zero=0 (DDP). After llmc-optimizer, @grad_step returns, per parameter p,
// acc_p = grad.p + g_p (updates grad.p). This pass sorts the parameters by
// where the backward produces g_p, cuts them into buckets of at most
// `bucket-mb` MiB (whole gradients; DDP's buckets), and right after the
// last g_p of a bucket computes the bucket's sums, flattens them into one
// vector, all-reduces it (avg) and returns the pieces:
//   %acc_i = llmc.add %grad.p_i, %g_i                 (moved up to here)
//   %flat  = llmc.concat (reshape %acc_i to 1-D)... dim 0
//   %avg   = llmc.all_reduce %flat avg on "dp" size dp
//   result_i = reshape(slice %avg at p_i's offset)
// Code generation issues each all-reduce where it stands and waits for it
// just before its first reader (the update copies at the end), so the
// backward of the earlier layers runs while a bucket is in flight. The old
// step stays as @grad_step_no_sync (local accumulation, DDP's no_sync) for
// the micro-batches before the last of a step.
#include "ir/LlmcOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_SHARDPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

constexpr const char *kAxis = "dp";

/// One gradient that @grad_step returns: the parameter's name, the result
/// index, the accumulating add (grad.p + g) and g's producer position.
struct Gradient {
  std::string name;
  unsigned result = 0;
  AddOp add;
  Value fresh;            // g_p, the gradient of this micro-batch
  unsigned produced = 0;  // position in the body of g_p's defining op
  int64_t elements = 0;
  int64_t bytes = 0;
};

int64_t elementsOf(Type type) {
  return cast<RankedTensorType>(type).getNumElements();
}

int64_t bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() *
         std::max<int64_t>(1, tensor.getElementTypeBitWidth() / 8);
}

class ShardPass : public llmc::impl::ShardPassBase<ShardPass> {
public:
  using ShardPassBase::ShardPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (dp < 1) {
      module.emitError("llmc-shard: dp must be at least 1, got ") << int64_t(dp);
      return signalPassFailure();
    }
    if (zero < 0 || zero > 3) {
      module.emitError("llmc-shard: zero must be 0, 1, 2 or 3, got ") << int64_t(zero);
      return signalPassFailure();
    }
    if (!(bucketMb > 0)) {
      module.emitError("llmc-shard: bucket-mb must be positive, got ")
          << double(bucketMb);
      return signalPassFailure();
    }
    auto gradStep = module.lookupSymbol<func::FuncOp>("grad_step");
    auto updateStep = module.lookupSymbol<func::FuncOp>("update_step");
    if (!gradStep || !updateStep) {
      module.emitError("llmc-shard needs @grad_step and @update_step: run "
                       "llmc-optimizer first");
      return signalPassFailure();
    }
    if (dp == 1)
      return; // one rank: nothing to communicate
    if (zero != 0) {
      module.emitError("llmc-shard: ZeRO stage ")
          << int64_t(zero) << " is not implemented yet; zero=0 (DDP) is";
      return signalPassFailure();
    }
    FailureOr<SmallVector<Gradient>> grads = readGradients(gradStep);
    if (failed(grads))
      return signalPassFailure();
    keepNoSyncCopy(module, gradStep);
    allReduceInBuckets(gradStep, *grads);
  }

private:
  /// The accumulated gradients @grad_step returns (`llmc.updates` of a
  /// `grad.*` state, computed by llmc-optimizer's add).
  FailureOr<SmallVector<Gradient>> readGradients(func::FuncOp gradStep) {
    Block &body = gradStep.getBody().front();
    DenseMap<Operation *, unsigned> position;
    for (auto [index, op] : llvm::enumerate(body))
      position[&op] = index;
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<Gradient> grads;
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      auto target = gradStep.getResultAttrOfType<StringAttr>(index,
                                                             "llmc.updates");
      if (!target || !target.getValue().starts_with("grad."))
        continue;
      auto add = value.getDefiningOp<AddOp>();
      if (!add || !add->hasOneUse()) {
        gradStep.emitError("llmc-shard: the result updating '")
            << target.getValue()
            << "' is not llmc-optimizer's accumulation (grad + g)";
        return failure();
      }
      Gradient g;
      g.name = target.getValue().drop_front(strlen("grad.")).str();
      g.result = index;
      g.add = add;
      g.fresh = add.getRhs();
      Operation *producer = g.fresh.getDefiningOp();
      g.produced = producer ? position.lookup(producer) : 0;
      g.elements = elementsOf(value.getType());
      g.bytes = bytesOf(value.getType());
      grads.push_back(std::move(g));
    }
    if (grads.empty()) {
      gradStep.emitError("llmc-shard: @grad_step returns no accumulated "
                         "gradients");
      return failure();
    }
    return grads;
  }

  /// @grad_step_no_sync: the step as llmc-optimizer made it.
  void keepNoSyncCopy(ModuleOp module, func::FuncOp gradStep) {
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(gradStep);
    auto copy = cast<func::FuncOp>(b.clone(*gradStep));
    copy.setSymName("grad_step_no_sync");
  }

  /// DDP: buckets of whole gradients in production order, each all-reduced
  /// (avg) right after its last gradient.
  void allReduceInBuckets(func::FuncOp gradStep,
                          SmallVector<Gradient> &grads) {
    llvm::stable_sort(grads, [](const Gradient &a, const Gradient &b) {
      return a.produced < b.produced;
    });
    const int64_t cap = int64_t(bucketMb * 1024 * 1024);
    SmallVector<SmallVector<Gradient *>> buckets;
    int64_t filled = 0;
    for (Gradient &g : grads) {
      if (buckets.empty() || (filled > 0 && filled + g.bytes > cap)) {
        buckets.emplace_back();
        filled = 0;
      }
      buckets.back().push_back(&g);
      filled += g.bytes;
    }
    Block &body = gradStep.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    for (auto [index, bucket] : llvm::enumerate(buckets)) {
      // After the last-produced gradient of the bucket (its producers come
      // before it; a gradient without a producer op is an argument).
      Operation *last = nullptr;
      for (Gradient *g : bucket)
        if (Operation *op = g->fresh.getDefiningOp())
          if (!last || last->isBeforeInBlock(op))
            last = op;
      // The bucket's sums move up to there, in bucket order; the bucket's
      // ops follow them.
      for (Gradient *g : bucket) {
        if (last)
          g->add->moveAfter(last);
        else
          g->add->moveBefore(&body.front());
        last = g->add;
      }
      OpBuilder b(gradStep.getContext());
      b.setInsertionPointAfter(last);
      Location loc = NameLoc::get(
          b.getStringAttr("grad_bucket." + std::to_string(index)));
      SmallVector<Value> flat;
      for (Gradient *g : bucket) {
        auto type = cast<RankedTensorType>(g->add.getType());
        flat.push_back(ReshapeOp::create(
            b, loc, RankedTensorType::get({g->elements}, type.getElementType()),
            g->add.getResult()));
      }
      Value joined = flat.size() == 1
                         ? flat.front()
                         : ConcatOp::create(b, loc, flat,
                                            b.getI64IntegerAttr(0))
                               .getResult();
      Value averaged = AllReduceOp::create(
          b, loc, joined,
          CollectiveReductionAttr::get(b.getContext(),
                                       CollectiveReduction::Avg),
          b.getStringAttr(kAxis), b.getI64IntegerAttr(dp));
      averaged.getDefiningOp()->setAttr(
          "llmc.bucket", b.getI64IntegerAttr(int64_t(index)));
      int64_t offset = 0;
      for (Gradient *g : bucket) {
        auto type = cast<RankedTensorType>(g->add.getType());
        Value piece = averaged;
        if (bucket.size() > 1)
          piece = SliceOp::create(b, loc, averaged,
                                  b.getDenseI64ArrayAttr({offset}),
                                  b.getDenseI64ArrayAttr({g->elements}));
        Value shaped = ReshapeOp::create(b, loc, type, piece);
        ret->setOperand(g->result, shaped);
        offset += g->elements;
      }
    }
  }
};

} // namespace
