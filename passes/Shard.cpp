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
#include "ir/kernel/StepScalar.h"
#include "passes/NamedArguments.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <map>

namespace mlir::llmc {
#define GEN_PASS_DEF_SHARDPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;
using ::llmc::kir::StepScalar;
using ::llmc::kir::stepScalarName;

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

/// One parameter's place in ZeRO's layout (PyTorch FSDP's): flattened,
/// padded with zeros to size * ranks, rank r holding elements
/// [r * size, (r + 1) * size).
struct Shard {
  std::string name;
  RankedTensorType type;     // the parameter's
  int64_t elements = 0;      // the parameter's
  int64_t size = 0;          // each rank's shard: ceil(elements / ranks)
  RankedTensorType shardType;
};

int64_t elementsOf(Type type) {
  return cast<RankedTensorType>(type).getNumElements();
}

int64_t bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() *
         std::max<int64_t>(1, tensor.getElementTypeBitWidth() / 8);
}

class ShardPass : public mlir::llmc::impl::ShardPassBase<ShardPass> {
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
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    // ZeRO-3 shards the parameters themselves, so a forward alone (the
    // evaluation of a ZeRO-3 run) is sharded too.
    bool forwardOnly = zero == 3 && forward && !gradStep && !updateStep;
    if ((!gradStep || !updateStep) && !forwardOnly) {
      module.emitError("llmc-shard needs @grad_step and @update_step: run "
                       "llmc-optimizer first");
      return signalPassFailure();
    }
    if (dp == 1)
      return; // one rank: nothing to communicate
    if (forwardOnly) {
      gatherParameters(forward, shardLayout(forward));
      return;
    }
    FailureOr<SmallVector<Gradient>> grads = readGradients(gradStep);
    if (failed(grads))
      return signalPassFailure();
    if (zero == 0) {
      keepNoSyncCopy(module, gradStep);
      allReduceInBuckets(gradStep, *grads);
      return;
    }
    // ZeRO-1 accumulates full gradients locally before the last
    // micro-batch; ZeRO-2 reduce-scatters every micro-batch's.
    if (zero == 1)
      keepNoSyncCopy(module, gradStep);
    SmallVector<Shard> shards = shardLayout(gradStep);
    reduceScatterInBuckets(gradStep, *grads, shards);
    if (zero == 3) {
      gatherParameters(gradStep, shards);
      if (forward)
        gatherParameters(forward, shards);
    }
    if (failed(shardUpdateStep(module, updateStep, shards)))
      return signalPassFailure();
    updateStep = module.lookupSymbol<func::FuncOp>("update_step");
    buildShardInit(module, updateStep, shards);
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

  /// The gradients in the order the backward produces them, in buckets of
  /// whole gradients of at most `bucket-mb` MiB (DDP's buckets).
  SmallVector<SmallVector<Gradient *>>
  gradientBuckets(SmallVector<Gradient> &grads) {
    llvm::stable_sort(grads, [](const Gradient &a, const Gradient &b) {
      return a.produced < b.produced;
    });
    return bucketsOf<Gradient>(grads,
                               [](const Gradient &g) { return g.bytes; });
  }

  /// A builder right after the bucket's last-produced gradient (its
  /// producers come before it; a gradient without a producer op is an
  /// argument), where the bucket's collective is issued. With `moveSums`
  /// llmc-optimizer's sums grad.<p> + g of the bucket move up to there
  /// first, in bucket order, and the builder follows them.
  OpBuilder afterBucket(Block &body, ArrayRef<Gradient *> bucket,
                        bool moveSums) {
    Operation *last = nullptr;
    for (Gradient *g : bucket)
      if (Operation *op = g->fresh.getDefiningOp())
        if (!last || last->isBeforeInBlock(op))
          last = op;
    if (moveSums)
      for (Gradient *g : bucket) {
        if (last)
          g->add->moveAfter(last);
        else
          g->add->moveBefore(&body.front());
        last = g->add;
      }
    OpBuilder b(body.getParentOp()->getContext());
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPointToStart(&body);
    return b;
  }

  Location bucketLoc(OpBuilder &b, size_t index) {
    return NameLoc::get(
        b.getStringAttr("grad_bucket." + std::to_string(index)));
  }

  /// DDP: buckets of whole gradients in production order, each all-reduced
  /// (avg) right after its last gradient.
  void allReduceInBuckets(func::FuncOp gradStep,
                          SmallVector<Gradient> &grads) {
    Block &body = gradStep.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    for (auto [index, bucket] : llvm::enumerate(gradientBuckets(grads))) {
      OpBuilder b = afterBucket(body, bucket, /*moveSums=*/true);
      Location loc = bucketLoc(b, index);
      SmallVector<Value> flat;
      for (Gradient *g : bucket) {
        auto type = cast<RankedTensorType>(g->add.getType());
        flat.push_back(ReshapeOp::create(
            b, loc, RankedTensorType::get({g->elements}, type.getElementType()),
            g->add.getResult()));
      }
      Value averaged = AllReduceOp::create(
          b, loc, joinShards(b, loc, flat),
          reduction(b, CollectiveReduction::Avg), b.getStringAttr(kAxis),
          b.getI64IntegerAttr(dp));
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

  //===--------------------------------------------------------------------===//
  // ZeRO-1 and ZeRO-2
  //===--------------------------------------------------------------------===//
  //
  // Every parameter is sharded by itself (FSDP2's per-parameter layout, the
  // flat padded FSDP layout of one parameter): rank r owns elements
  // [r * s, (r + 1) * s) of the flattened parameter padded to ranks * s.
  // Collectives move many parameters at once without knowing the rank: a
  // bucket's full tensors are interleaved as [ranks, S] (row r: every
  // parameter's block r, S the sum of their shard sizes) and
  // reduce-scattered, which leaves each rank the concatenation of its
  // shards; an all-gather of that concatenation gives [ranks, S] back.
  // State the optimizer keeps per rank:
  //   shard.<p>           the rank's f32 master copy of p (DeepSpeed's
  //                       fp32 partition), which the update steps
  //   shard.<state>.<p>   its block of each optimizer state (adam_m, ...)
  //   grad.shard.<p>      its block of the averaged gradient
  // ZeRO-1 keeps the full gradient buffers grad.<p> to accumulate the
  // micro-batches before a step's last without communicating; ZeRO-2 has
  // none. @update_step updates the blocks (the gradient norm is
  // all-reduced first), all-gathers the new master blocks into the full
  // parameters, and zeroes the gradient blocks. @shard_init cuts the
  // blocks from full tensors (the seeded weights, a checkpoint's state).

  SmallVector<Shard> shardLayout(func::FuncOp gradStep) {
    SmallVector<Shard> shards;
    for (unsigned i = 0; i < gradStep.getNumArguments(); ++i) {
      auto name = gradStep.getArgAttrOfType<StringAttr>(i, "llmc.param");
      if (!name)
        continue;
      Shard s;
      s.name = name.str();
      s.type = cast<RankedTensorType>(gradStep.getArgument(i).getType());
      s.elements = s.type.getNumElements();
      s.size = (s.elements + dp - 1) / dp;
      s.shardType = RankedTensorType::get({s.size}, s.type.getElementType());
      shards.push_back(std::move(s));
    }
    return shards;
  }

  static const Shard *findShard(ArrayRef<Shard> shards, StringRef name) {
    for (const Shard &s : shards)
      if (s.name == name)
        return &s;
    return nullptr;
  }

  /// `full` (a tensor of s's parameter's shape) as [ranks, s.size]: flat,
  /// zero padded.
  Value asBlocks(OpBuilder &b, Location loc, Value full, const Shard &s) {
    Type elem = s.type.getElementType();
    Value flat = ReshapeOp::create(
        b, loc, RankedTensorType::get({s.elements}, elem), full);
    int64_t padded = s.size * dp;
    if (padded > s.elements) {
      Value zeros = FillOp::create(
          b, loc, RankedTensorType::get({padded - s.elements}, elem),
          b.getF64FloatAttr(0.0));
      flat = ConcatOp::create(b, loc, ValueRange{flat, zeros},
                              b.getI64IntegerAttr(0));
    }
    return ReshapeOp::create(b, loc, RankedTensorType::get({dp, s.size}, elem),
                             flat);
  }

  /// The full tensors of `shards` interleaved as [ranks * S].
  Value interleave(OpBuilder &b, Location loc, ArrayRef<Value> fulls,
                   ArrayRef<const Shard *> shards) {
    SmallVector<Value> blocks;
    int64_t total = 0;
    for (auto [full, s] : llvm::zip(fulls, shards)) {
      blocks.push_back(asBlocks(b, loc, full, *s));
      total += s->size;
    }
    Value joined = blocks.size() == 1
                       ? blocks.front()
                       : ConcatOp::create(b, loc, blocks,
                                          b.getI64IntegerAttr(1))
                             .getResult();
    Type elem = shards.front()->type.getElementType();
    return ReshapeOp::create(b, loc,
                             RankedTensorType::get({dp * total}, elem),
                             joined);
  }

  /// The full tensors back from an interleaved [ranks * S].
  SmallVector<Value> deinterleave(OpBuilder &b, Location loc, Value flat,
                                  ArrayRef<const Shard *> shards) {
    int64_t total = 0;
    for (const Shard *s : shards)
      total += s->size;
    Type elem = shards.front()->type.getElementType();
    Value blocks = ReshapeOp::create(
        b, loc, RankedTensorType::get({dp, total}, elem), flat);
    SmallVector<Value> fulls;
    int64_t offset = 0;
    for (const Shard *s : shards) {
      Value mine = blocks;
      if (shards.size() > 1)
        mine = SliceOp::create(b, loc, blocks,
                               b.getDenseI64ArrayAttr({0, offset}),
                               b.getDenseI64ArrayAttr({dp, s->size}));
      Value padded = ReshapeOp::create(
          b, loc, RankedTensorType::get({dp * s->size}, elem), mine);
      Value flatParam = padded;
      if (dp * s->size > s->elements)
        flatParam = SliceOp::create(b, loc, padded, b.getDenseI64ArrayAttr({0}),
                                    b.getDenseI64ArrayAttr({s->elements}));
      fulls.push_back(ReshapeOp::create(b, loc, s->type, flatParam));
      offset += s->size;
    }
    return fulls;
  }

  /// A concatenation of shards [S] cut into each parameter's shard.
  SmallVector<Value> splitShards(OpBuilder &b, Location loc, Value joined,
                                 ArrayRef<const Shard *> shards) {
    if (shards.size() == 1)
      return {joined};
    SmallVector<Value> parts;
    int64_t offset = 0;
    for (const Shard *s : shards) {
      parts.push_back(SliceOp::create(b, loc, joined,
                                      b.getDenseI64ArrayAttr({offset}),
                                      b.getDenseI64ArrayAttr({s->size})));
      offset += s->size;
    }
    return parts;
  }

  Value joinShards(OpBuilder &b, Location loc, ArrayRef<Value> parts) {
    if (parts.size() == 1)
      return parts.front();
    return ConcatOp::create(b, loc, parts, b.getI64IntegerAttr(0));
  }

  CollectiveReductionAttr reduction(OpBuilder &b, CollectiveReduction r) {
    return CollectiveReductionAttr::get(b.getContext(), r);
  }

  /// Buckets of at most `bucket-mb` MiB, whole tensors, in the given order.
  template <typename T>
  SmallVector<SmallVector<T *>> bucketsOf(MutableArrayRef<T> items,
                                          function_ref<int64_t(const T &)>
                                              bytes) {
    const int64_t cap = int64_t(bucketMb * 1024 * 1024);
    SmallVector<SmallVector<T *>> buckets;
    int64_t filled = 0;
    for (T &item : items) {
      if (buckets.empty() || (filled > 0 && filled + bytes(item) > cap)) {
        buckets.emplace_back();
        filled = 0;
      }
      buckets.back().push_back(&item);
      filled += bytes(item);
    }
    return buckets;
  }

  /// Replaces `func`'s results with `values`, each updating and naming the
  /// buffer in `updates` (empty: `outputs` names a plain output).
  void setResults(func::FuncOp func, ArrayRef<Value> values,
                  ArrayRef<std::pair<std::string, bool>> names) {
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    ret->setOperands(values);
    SmallVector<Type> types;
    for (Value v : values)
      types.push_back(v.getType());
    func.setFunctionType(
        FunctionType::get(func.getContext(), func.getArgumentTypes(), types));
    OpBuilder b(func.getContext());
    SmallVector<DictionaryAttr> attrs;
    for (const auto &[name, update] : names) {
      SmallVector<NamedAttribute> entries = {
          b.getNamedAttr("llmc.output", b.getStringAttr(name))};
      if (update)
        entries.push_back(b.getNamedAttr("llmc.updates", b.getStringAttr(name)));
      attrs.push_back(b.getDictionaryAttr(entries));
    }
    func.setAllResultAttrs(attrs);
  }

  /// @grad_step: each bucket's gradients (ZeRO-1: the accumulated sums,
  /// ZeRO-2: this micro-batch's) reduce-scattered (avg) right after the last
  /// of them, each rank adding its blocks into grad.shard.<p>.
  void reduceScatterInBuckets(func::FuncOp gradStep,
                              SmallVector<Gradient> &grads,
                              ArrayRef<Shard> shards) {
    auto buckets = gradientBuckets(grads);
    Block &body = gradStep.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // Results: the loss and other outputs stay; each grad.<p> becomes zeros
    // (ZeRO-1: the full buffer is drained into the shard) or goes (ZeRO-2);
    // grad.shard.<p> updates follow.
    SmallVector<Value> results;
    SmallVector<std::pair<std::string, bool>> names;
    DenseSet<unsigned> gradResults;
    for (const Gradient &g : grads)
      gradResults.insert(g.result);
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      if (gradResults.contains(index))
        continue;
      auto output = gradStep.getResultAttrOfType<StringAttr>(index,
                                                             "llmc.output");
      results.push_back(value);
      names.push_back(
          {output ? output.str() : stepScalarName(StepScalar::Loss).str(),
           bool(gradStep.getResultAttr(index, "llmc.updates"))});
    }
    for (auto [index, bucket] : llvm::enumerate(buckets)) {
      OpBuilder b = afterBucket(body, bucket, /*moveSums=*/zero == 1);
      Location loc = bucketLoc(b, index);
      SmallVector<Value> sources;
      SmallVector<const Shard *> layout;
      for (Gradient *g : bucket) {
        sources.push_back(zero == 1 ? g->add.getResult() : g->fresh);
        layout.push_back(findShard(shards, g->name));
      }
      Value flat = interleave(b, loc, sources, layout);
      Value scattered = ReduceScatterOp::create(
          b, loc, flat, reduction(b, CollectiveReduction::Avg),
          b.getI64IntegerAttr(0), b.getStringAttr(kAxis),
          b.getI64IntegerAttr(dp));
      scattered.getDefiningOp()->setAttr("llmc.bucket",
                                         b.getI64IntegerAttr(int64_t(index)));
      SmallVector<Value> parts = splitShards(b, loc, scattered, layout);
      for (auto [g, part, s] : llvm::zip(bucket, parts, layout)) {
        std::string name = "grad.shard." + g->name;
        BlockArgument acc = insertStateArgument(gradStep, s->shardType, name);
        results.push_back(AddOp::create(b, loc, acc, part));
        names.push_back({name, true});
        if (zero == 1) {
          results.push_back(
              FillOp::create(b, loc, s->type, b.getF64FloatAttr(0.0)));
          names.push_back({"grad." + g->name, true});
        }
      }
    }
    setResults(gradStep, results, names);
    if (zero >= 2) {
      // ZeRO-2 and 3 hold no full gradients: llmc-optimizer's sums and their
      // buffers go.
      for (Gradient &g : grads)
        g.add->erase();
      for (int i = int(gradStep.getNumArguments()) - 1; i >= 0; --i) {
        auto name = gradStep.getArgAttrOfType<StringAttr>(i, "llmc.state");
        if (name && name.getValue().starts_with("grad.") &&
            !name.getValue().starts_with("grad.shard."))
          (void)gradStep.eraseArgument(i);
      }
    }
  }

  /// The transformer block a parameter belongs to ("h.3" of
  /// "h.3.attn.c_attn.weight"), or "" for the rest (embeddings, final norm,
  /// classifier): ZeRO-3 gathers parameters a block at a time, as FSDP
  /// wraps each block.
  static std::string unitOf(StringRef name) {
    auto [head, rest] = name.split('.');
    auto [index, tail] = rest.split('.');
    unsigned block;
    if (head == "h" && !tail.empty() && !index.getAsInteger(10, block))
      return (head + "." + index).str();
    return "";
  }

  /// ZeRO-3: `func`'s parameter arguments become their blocks
  /// (`shard.<p>`, llmc.state); each unit's parameters are all-gathered
  /// before the first of them is read by the forward, one unit ahead (the
  /// gather of unit k+1 is issued before unit k's first op, so it overlaps
  /// unit k's compute), and gathered again the same way for the backward
  /// (ops after the loss), so no full parameter lives from the forward to
  /// the backward.
  void gatherParameters(func::FuncOp func, ArrayRef<Shard> shards) {
    Block &body = func.getBody().front();
    DenseMap<Operation *, unsigned> position;
    for (auto [index, op] : llvm::enumerate(body))
      position[&op] = index;
    // The loss (the first result) ends the forward.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    unsigned lossEnd = position.size();
    if (func.getName() != "forward")
      if (Operation *loss = ret.getOperand(0).getDefiningOp())
        lossEnd = position.lookup(loss);
    struct Use {
      OpOperand *operand;
      bool backward;
    };
    // Per unit: its parameters' arguments and uses.
    struct Unit {
      std::string name;
      SmallVector<std::pair<BlockArgument, const Shard *>> params;
      unsigned first[2] = {~0u, ~0u}; // first use in forward, backward
    };
    SmallVector<Unit> units;
    auto unitFor = [&](StringRef name) -> Unit & {
      for (Unit &u : units)
        if (u.name == name)
          return u;
      units.push_back({name.str(), {}, {~0u, ~0u}});
      return units.back();
    };
    for (BlockArgument arg : func.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    "llmc.param");
      if (!name)
        continue;
      Unit &unit = unitFor(unitOf(name.getValue()));
      unit.params.push_back({arg, findShard(shards, name.getValue())});
      for (OpOperand &use : arg.getUses()) {
        Operation *owner = body.findAncestorOpInBlock(*use.getOwner());
        unsigned at = position.lookup(owner);
        bool backward = at > lossEnd;
        unit.first[backward] = std::min(unit.first[backward], at);
      }
    }
    std::vector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);
    // Each parameter's block: one state argument, gathered in both phases.
    llvm::StringMap<Value> blocks;
    auto blockOf = [&](const Shard *shard) {
      Value &block = blocks[shard->name];
      if (!block)
        block = insertStateArgument(func, shard->shardType,
                                    "shard." + shard->name);
      return block;
    };
    // Per phase, the units in the order they are first read; each unit's
    // gather goes before the first op of the unit read before it.
    std::map<std::pair<unsigned, bool>, Value> gathered; // (param arg, phase)
    for (bool backward : {false, true}) {
      SmallVector<Unit *> order;
      for (Unit &u : units)
        if (u.first[backward] != ~0u)
          order.push_back(&u);
      llvm::stable_sort(order, [&](Unit *a, Unit *b) {
        return a->first[backward] < b->first[backward];
      });
      for (auto [k, unit] : llvm::enumerate(order)) {
        unsigned at = k == 0 ? unit->first[backward]
                             : order[k - 1]->first[backward];
        OpBuilder b(ops[at]);
        Location loc = NameLoc::get(b.getStringAttr(
            std::string(backward ? "backward" : "forward") + ".gather." +
            (unit->name.empty() ? std::string("rest") : unit->name)));
        SmallVector<Value> parts;
        SmallVector<const Shard *> layout;
        for (auto [arg, shard] : unit->params) {
          parts.push_back(blockOf(shard));
          layout.push_back(shard);
        }
        Value all = AllGatherOp::create(
            b, loc, joinShards(b, loc, parts), b.getI64IntegerAttr(0),
            b.getStringAttr(kAxis), b.getI64IntegerAttr(dp));
        for (auto [param, full] : llvm::zip(
                 unit->params, deinterleave(b, loc, all, layout)))
          gathered[{param.first.getArgNumber(), backward}] = full;
      }
    }
    // Each read of a parameter takes its phase's gathered value; then the
    // parameter arguments go.
    SmallVector<unsigned> paramArgs;
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), "llmc.param"))
        paramArgs.push_back(arg.getArgNumber());
    for (unsigned index : paramArgs) {
      BlockArgument arg = func.getArgument(index);
      for (OpOperand &use : llvm::make_early_inc_range(arg.getUses())) {
        Operation *owner = body.findAncestorOpInBlock(*use.getOwner());
        bool backward = position.count(owner) &&
                        position.lookup(owner) > lossEnd;
        use.set(gathered.at({index, backward}));
      }
    }
    for (int i = int(func.getNumArguments()) - 1; i >= 0; --i)
      if (func.getArgAttr(i, "llmc.param"))
        (void)func.eraseArgument(i);
  }

  /// The type of `type` (a parameter's or its state's) as a shard, by
  /// element count (one size per count for a given number of ranks).
  static RankedTensorType shardTypeOf(ArrayRef<Shard> shards, Type type) {
    auto tensor = cast<RankedTensorType>(type);
    for (const Shard &s : shards)
      if (s.type.getNumElements() == tensor.getNumElements() &&
          s.type.getElementType() == tensor.getElementType())
        return s.shardType;
    return tensor;
  }

  /// Re-derives the result types of `op` (a copy of @update_step's whose
  /// operands became shards).
  LogicalResult retype(Operation *op, ArrayRef<Shard> shards) {
    if (auto fill = dyn_cast<FillOp>(op)) {
      if (cast<RankedTensorType>(fill.getType()).getRank() > 0)
        fill.getResult().setType(shardTypeOf(shards, fill.getType()));
      return success();
    }
    if (auto reduce = dyn_cast<ReduceSumOp>(op)) {
      // A sum over every dimension (the gradient norm's): over the shard.
      int64_t rank = cast<RankedTensorType>(reduce.getInput().getType())
                         .getRank();
      SmallVector<int64_t> dims = llvm::to_vector(llvm::seq<int64_t>(0, rank));
      reduce->setAttr("dims", OpBuilder(op).getDenseI64ArrayAttr(dims));
    }
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      SmallVector<Type> types;
      if (failed(infer.inferReturnTypes(
              op->getContext(), op->getLoc(), op->getOperands(),
              op->getAttrDictionary(), op->getPropertiesStorage(),
              op->getRegions(), types)))
        return failure();
      for (auto [result, type] : llvm::zip(op->getResults(), types))
        result.setType(type);
      return success();
    }
    if (op->hasTrait<OpTrait::SameOperandsAndResultType>()) {
      op->getResult(0).setType(op->getOperand(0).getType());
      return success();
    }
    return op->emitOpError("llmc-shard cannot shard this op of @update_step");
  }

  /// The parameter a state argument of @update_step belongs to:
  /// "<kind>.<param>" (adam_m.h.0.attn.c_attn.weight).
  static const Shard *ownerOf(ArrayRef<Shard> shards, StringRef state) {
    auto [kind, param] = state.split('.');
    return findShard(shards, param);
  }

  /// @update_step on the rank's blocks: see the ZeRO comment above.
  LogicalResult shardUpdateStep(ModuleOp module, func::FuncOp old,
                                ArrayRef<Shard> shards) {
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    b.setInsertionPointAfter(old);
    // Arguments: full parameters (the all-gather's targets), master
    // blocks, gradient blocks, optimizer-state blocks, scalar inputs.
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    auto addArg = [&](Type type, StringRef kind, StringRef name) {
      argTypes.push_back(type);
      argAttrs.push_back(b.getDictionaryAttr(
          b.getNamedAttr(kind, b.getStringAttr(name))));
      return argTypes.size() - 1;
    };
    DenseMap<unsigned, unsigned> newIndexOf; // old argument -> new argument
    // ZeRO-3 keeps no full parameters: the master blocks are the weights.
    if (zero < 3)
      for (const Shard &s : shards)
        addArg(s.type, "llmc.param", s.name);
    for (unsigned i = 0; i < old.getNumArguments(); ++i) {
      if (auto p = old.getArgAttrOfType<StringAttr>(i, "llmc.param")) {
        const Shard *s = findShard(shards, p.getValue());
        newIndexOf[i] = addArg(s->shardType, "llmc.state", "shard." + s->name);
      }
    }
    for (unsigned i = 0; i < old.getNumArguments(); ++i) {
      auto state = old.getArgAttrOfType<StringAttr>(i, "llmc.state");
      if (!state)
        continue;
      StringRef name = state.getValue();
      bool grad = name.starts_with("grad.");
      const Shard *s = grad ? findShard(shards, name.drop_front(5))
                            : ownerOf(shards, name);
      if (!s)
        return old.emitError("llmc-shard: state '")
               << name << "' belongs to no parameter";
      std::string shardName = grad ? "grad.shard." + s->name
                                   : ("shard." + name).str();
      newIndexOf[i] = addArg(s->shardType, "llmc.state", shardName);
    }
    for (unsigned i = 0; i < old.getNumArguments(); ++i)
      if (auto input = old.getArgAttrOfType<StringAttr>(i, "llmc.input"))
        newIndexOf[i] = addArg(old.getArgument(i).getType(), "llmc.input",
                               input.getValue());

    auto func = func::FuncOp::create(b, old.getLoc(), "update_step",
                                     FunctionType::get(ctx, argTypes, {}));
    for (auto [i, attrs] : llvm::enumerate(argAttrs))
      func.setArgAttrs(i, attrs);
    Block *body = func.addEntryBlock();
    IRMapping mapping;
    for (auto [from, to] : newIndexOf)
      mapping.map(old.getArgument(from), body->getArgument(to));
    b.setInsertionPointToStart(body);
    for (Operation &op : old.getBody().front().without_terminator()) {
      Operation *copy = b.clone(op, mapping);
      if (failed(retype(copy, shards)))
        return failure();
    }

    // Results, by what each old one updated or named.
    auto oldRet = cast<func::ReturnOp>(old.getBody().front().getTerminator());
    Location loc = old.getLoc();
    SmallVector<Value> results;
    SmallVector<std::pair<std::string, bool>> names;
    DenseMap<StringRef, Value> newMasters;
    for (auto [index, value] : llvm::enumerate(oldRet.getOperands())) {
      Value mapped = mapping.lookup(value);
      auto update = old.getResultAttrOfType<StringAttr>(index, "llmc.updates");
      auto output = old.getResultAttrOfType<StringAttr>(index, "llmc.output");
      if (!update) {
        // The gradient norm: the blocks' sums of squares are summed over
        // the ranks before the square root.
        if (output &&
            output.getValue() == stepScalarName(StepScalar::GradNorm)) {
          auto root = mapped.getDefiningOp<SqrtOp>();
          if (!root)
            return old.emitError("llmc-shard: grad_norm is not a square root");
          OpBuilder at(root);
          Value total = AllReduceOp::create(
              at, loc, root.getInput(), reduction(at, CollectiveReduction::Sum),
              at.getStringAttr(kAxis), at.getI64IntegerAttr(dp));
          root->setOperand(0, total);
        }
        results.push_back(mapped);
        names.push_back({output ? output.str() : "result", false});
        continue;
      }
      StringRef name = update.getValue();
      if (const Shard *s = findShard(shards, name)) {
        results.push_back(mapped);
        names.push_back({"shard." + s->name, true});
        newMasters[s->name] = mapped;
      } else if (name.starts_with("grad.")) {
        results.push_back(mapped);
        names.push_back({("grad.shard." + name.drop_front(5)).str(), true});
      } else {
        results.push_back(mapped);
        names.push_back({("shard." + name).str(), true});
      }
    }
    // The new parameters: master blocks all-gathered in buckets (ZeRO-3
    // gathers them where the steps read them).
    SmallVector<Shard> ordered(shards.begin(), shards.end());
    if (zero == 3)
      ordered.clear();
    auto buckets = bucketsOf<Shard>(ordered, [](const Shard &s) {
      return s.type.getNumElements() * 4;
    });
    for (auto [index, bucket] : llvm::enumerate(buckets)) {
      Location at = NameLoc::get(
          b.getStringAttr("param_bucket." + std::to_string(index)));
      SmallVector<Value> parts;
      SmallVector<const Shard *> layout;
      for (Shard *s : bucket) {
        parts.push_back(newMasters.lookup(s->name));
        layout.push_back(s);
      }
      Value gathered = AllGatherOp::create(
          b, at, joinShards(b, at, parts), b.getI64IntegerAttr(0),
          b.getStringAttr(kAxis), b.getI64IntegerAttr(dp));
      for (auto [s, full] :
           llvm::zip(bucket, deinterleave(b, at, gathered, layout))) {
        results.push_back(full);
        names.push_back({s->name, true});
      }
    }
    func::ReturnOp::create(b, loc, results);
    setResults(func, results, names);
    old.erase();
    return success();
  }

  /// @shard_init(params, full optimizer states as inputs): every rank's
  /// blocks of them, by a reduce-scatter (max) of identical tensors, which
  /// is an exact copy of the rank's block. Run once, after the weights are
  /// set or a checkpoint is read.
  void buildShardInit(ModuleOp module, func::FuncOp update,
                      ArrayRef<Shard> shards) {
    MLIRContext *ctx = module.getContext();
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    SmallVector<Type> argTypes;
    SmallVector<std::pair<std::string, std::string>> args; // kind, name
    // Sources: each parameter, and each optimizer state in full.
    SmallVector<std::pair<std::string, const Shard *>> targets;
    for (const Shard &s : shards) {
      argTypes.push_back(s.type);
      // ZeRO-3 has no full parameters in the store: they come as inputs.
      args.push_back({zero == 3 ? "llmc.input" : "llmc.param", s.name});
      targets.push_back({"shard." + s.name, &s});
    }
    for (unsigned i = 0; i < update.getNumArguments(); ++i) {
      auto state = update.getArgAttrOfType<StringAttr>(i, "llmc.state");
      if (!state || !state.getValue().starts_with("shard."))
        continue;
      StringRef full = state.getValue().drop_front(6);
      const Shard *owner = findShard(shards, full);
      if (owner)
        continue; // a master block: from the parameter
      owner = ownerOf(shards, full);
      argTypes.push_back(owner->type);
      args.push_back({"llmc.input", full.str()});
      targets.push_back({state.str(), owner});
    }
    auto func = func::FuncOp::create(b, module.getLoc(), "shard_init",
                                     FunctionType::get(ctx, argTypes, {}));
    for (auto [i, arg] : llvm::enumerate(args))
      func.setArgAttr(i, arg.first, b.getStringAttr(arg.second));
    Block *body = func.addEntryBlock();
    b.setInsertionPointToStart(body);
    Location loc = NameLoc::get(b.getStringAttr("shard_init"));
    SmallVector<Value> results;
    SmallVector<std::pair<std::string, bool>> names;
    for (auto [i, target] : llvm::enumerate(targets)) {
      const Shard *s = target.second;
      Value flat = interleave(b, loc, {body->getArgument(i)}, {s});
      results.push_back(ReduceScatterOp::create(
          b, loc, flat, reduction(b, CollectiveReduction::Max),
          b.getI64IntegerAttr(0), b.getStringAttr(kAxis),
          b.getI64IntegerAttr(dp)));
      names.push_back({target.first, true});
    }
    // The updated blocks are state: bind each as an argument of its own.
    for (auto [i, target] : llvm::enumerate(targets))
      insertStateArgument(func, target.second->shardType, target.first);
    func::ReturnOp::create(b, loc, results);
    setResults(func, results, names);
  }
};

} // namespace
