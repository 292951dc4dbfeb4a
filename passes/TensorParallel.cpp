// The llmc-tensor-parallel pass: Megatron-LM tensor parallelism as a
// rewrite of @forward into the program of one rank of mesh axis "tp".
//
// Column-parallel layers (c_attn, c_fc) keep 1/tp of their output rows,
// row-parallel layers (attn.c_proj, mlp.c_proj) 1/tp of their input
// columns, so that everything between the two is the rank's share (its
// heads, its hidden units) and needs no communication:
//
//   %x1 = llmc.copy_to_axis %x on "tp" size 2      // f
//   %h  = llmc.matmul %x1, %w_fc {transpose_b}     // [B, T, F/tp]
//   %a  = llmc.gelu %h
//   %p  = llmc.matmul %a, %w_proj {transpose_b}    // partial [B, T, C]
//   %y  = llmc.all_reduce %p sum on "tp" size 2 replicated   // g
//   %z  = llmc.add %y, %bias                       // replicated bias, once
//
// The shards are found by propagation from the sharded parameters: each
// value records the dimension along which it is the rank's share, and each
// op that reads one is retyped (slices and reshapes get their sizes cut); a
// matmul that contracts over a shared dimension is a partial sum and gets
// g. The backward's collectives come from autodiff of f and g.
//
// The vocabulary is split too (Megatron's VocabParallelEmbedding and
// vocab_parallel_cross_entropy): wte (and an untied lm_head) keep
// ceil(V/tp) rows each, the last rank's block padded with zero rows. The
// lookup selects only the rank's ids and g sums the ranks' rows; the
// classifier is column-parallel, and its logits [B, T, V/tp] go into the
// loss split:
//
//   %m = llmc.vocab_shard_max %logits vocab_start 128 vocab_size 256
//   %M = llmc.all_reduce %m max on "tp" size 2 replicated
//   %s, %t = llmc.vocab_shard_cross_entropy %logits, %targets, %M ...
//   %S = llmc.all_reduce %s sum on "tp" size 2 replicated
//   %T = llmc.all_reduce %t sum on "tp" size 2 replicated
//   %loss, %lse = llmc.cross_entropy_combine %M, %S, %T
//
// so neither the loss nor its gradient gathers the logits; only @forward's
// logits result (for sampling) is all-gathered, and cut back to V.
// vocab_start is the one rank-dependent number of the program: the pass
// option `rank` says which rank's program this is.
//
// With `sp` (sequence parallelism, Korthikanti et al. 2022) the residual
// stream between the blocks is the rank's slice of the sequence,
// [B, T/tp, C]: each g becomes a reduce-scatter over the sequence and
// each f an all-gather over it (each other's VJP), so the norms, dropout,
// biases and residual adds of the row-parallel side run on 1/tp of the
// positions:
//
//   %t  = llmc.transpose %p, [1, 0, 2]                 // [T, B, C]
//   %s  = llmc.reduce_scatter %t sum dim 0 on "tp" size 2
//   %y  = llmc.transpose %s, [1, 0, 2]                 // [B, T/2, C]
//   %b  = llmc.copy_to_axis %bias on "tp" size 2       // gradient summed
//   %z  = llmc.add %y, %b
//   ...
//   %g  = llmc.all_gather %n dim 0 on "tp" size 2      // (transposed too)
//   %h  = llmc.matmul %g, %w_fc {transpose_b}
//
// (the transposes put the sequence in front, where a rank's block is
// contiguous; with B = 1 they are left out). A whole value that meets the
// slice (a norm's weight, a bias, the positions' rows of wpe) passes
// through copy_to_axis, whose VJP sums the ranks' partial gradients over
// tp (Megatron's all-reduce of sequence-parallel parameters' gradients),
// and a slice to the rank's positions where it has a sequence dimension.
// Dropout on the slice names the whole tensor and the block's offsets, so
// each rank draws the masks one process draws at those positions.
#include "ir/LlmcOps.h"
#include "ir/TensorParallelSplit.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_TENSORPARALLELPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

constexpr const char *kAxis = "tp";

/// The model's field `name` (the `llmc.model` dictionary GptBuilder
/// writes), or -1.
int64_t modelField(ModuleOp module, StringRef name) {
  auto model = module->getAttrOfType<DictionaryAttr>("llmc.model");
  if (!model)
    return -1;
  if (auto value = model.getAs<IntegerAttr>(name))
    return value.getInt();
  return -1;
}

bool isSwiGlu(ModuleOp module) {
  auto model = module->getAttrOfType<DictionaryAttr>("llmc.model");
  auto activation = model ? model.getAs<StringAttr>("activation") : nullptr;
  return activation && activation.getValue() == "swiglu";
}

class TensorParallelPass
    : public llmc::impl::TensorParallelPassBase<TensorParallelPass> {
public:
  using TensorParallelPassBase::TensorParallelPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tp < 1) {
      module.emitError("llmc-tensor-parallel: tp must be at least 1, got ")
          << int64_t(tp);
      return signalPassFailure();
    }
    if (tp == 1)
      return;
    if (rank < 0 || rank >= tp) {
      module.emitError("llmc-tensor-parallel: rank must lie in [0, tp), got ")
          << int64_t(rank) << " for tp=" << int64_t(tp);
      return signalPassFailure();
    }
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("llmc-tensor-parallel needs @forward");
      return signalPassFailure();
    }
    if (module.lookupSymbol<func::FuncOp>("grad_step")) {
      module.emitError("llmc-tensor-parallel runs before llmc-autodiff (the "
                       "backward's collectives come from the forward's)");
      return signalPassFailure();
    }
    if (failed(checkDivisible(module)) ||
        failed(shardForward(module, forward)) ||
        (sp && failed(sequenceParallel(forward))))
      return signalPassFailure();
  }

private:
  /// Heads and hidden units must split evenly over the ranks.
  LogicalResult checkDivisible(ModuleOp module) {
    for (StringRef field : {"n_head", "ffn_hidden", "n_embd"}) {
      int64_t value = modelField(module, field);
      if (value > 0 && value % tp != 0)
        return module.emitError("llmc-tensor-parallel: the model's ")
               << field << " (" << value << ") does not split over tp=" << int64_t(tp)
               << " ranks; choose a tp that divides it";
    }
    return success();
  }

  static RankedTensorType cut(Type type, int64_t dim, int64_t parts) {
    auto tensor = cast<RankedTensorType>(type);
    SmallVector<int64_t> shape(tensor.getShape());
    shape[dim] /= parts;
    return RankedTensorType::get(shape, tensor.getElementType());
  }

  static RankedTensorType withDim(Type type, int64_t dim, int64_t size) {
    auto tensor = cast<RankedTensorType>(type);
    SmallVector<int64_t> shape(tensor.getShape());
    shape[dim] = size;
    return RankedTensorType::get(shape, tensor.getElementType());
  }

  /// The rank's block of a vocabulary of `size` ids: rows from `start`.
  struct VocabBlock {
    int64_t start = 0, size = 0;
  };
  /// Values whose last dimension (rows of a table: dimension 0) is the
  /// rank's block of the vocabulary.
  DenseMap<Value, VocabBlock> vocabBlocks;

  CollectiveReductionAttr reduction(CollectiveReduction kind) {
    return CollectiveReductionAttr::get(&getContext(), kind);
  }

  /// g: the sum over tp of each rank's partial `value`, used whole after.
  Value allReduce(OpBuilder &b, Location loc, Value value,
                  CollectiveReduction kind) {
    return AllReduceOp::create(b, loc, value, reduction(kind),
                               b.getStringAttr(kAxis),
                               b.getI64IntegerAttr(tp), b.getUnitAttr());
  }

  /// The g after each row-parallel matmul and the vocabulary-parallel
  /// lookup, and the f before each column-parallel matmul: sequence
  /// parallelism turns them into a reduce-scatter and an all-gather.
  SmallVector<AllReduceOp> gOps;
  SmallVector<CopyToAxisOp> fOps;

  LogicalResult shardForward(ModuleOp module, func::FuncOp forward) {
    bool swiglu = isSwiGlu(module);
    Block &body = forward.getBody().front();
    OpBuilder b(module.getContext());
    DenseMap<Value, int64_t> sharded; // value -> dimension that is a share
    SmallVector<Type> argTypes(forward.getArgumentTypes());
    int64_t count = 0;
    for (BlockArgument arg : forward.getArguments()) {
      auto name = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                       "llmc.param");
      if (!name)
        continue;
      std::optional<TensorParallelSplit> spec =
          tensorParallelSplit(name.getValue(), swiglu);
      if (!spec)
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      SmallVector<NamedAttribute> shard = {
          b.getNamedAttr("dim", b.getI64IntegerAttr(spec->dim)),
          b.getNamedAttr("groups", b.getI64IntegerAttr(spec->groups)),
          b.getNamedAttr("size", b.getI64IntegerAttr(tp))};
      if (spec->vocab && type.getRank() == 2) {
        // Rows [rank * Vr, (rank + 1) * Vr) of the vocabulary padded to
        // tp * Vr rows: `pad` zero rows end the last rank's block.
        int64_t vocab = type.getDimSize(0);
        int64_t rows = vocabRowsPerRank(vocab, tp);
        if (rows * (tp - 1) >= vocab)
          return forward.emitError("llmc-tensor-parallel: the vocabulary of ")
                 << vocab << " ids is too small for tp=" << int64_t(tp)
                 << ": the last rank's block of " << rows
                 << " rows would hold no id";
        arg.setType(withDim(type, 0, rows));
        vocabBlocks[arg] = {rank * rows, vocab};
        if (int64_t pad = rows * tp - vocab)
          shard.push_back(b.getNamedAttr("pad", b.getI64IntegerAttr(pad)));
      } else {
        if (spec->dim >= type.getRank() ||
            type.getDimSize(spec->dim) % (spec->groups * tp) != 0)
          return forward.emitError("llmc-tensor-parallel: parameter '")
                 << name.getValue() << "' of type " << type
                 << " does not split into " << spec->groups << " x "
                 << int64_t(tp) << " blocks along dimension " << spec->dim;
        arg.setType(cut(type, spec->dim, tp));
      }
      argTypes[arg.getArgNumber()] = arg.getType();
      sharded[arg] = spec->dim;
      forward.setArgAttr(arg.getArgNumber(), "llmc.tp_shard",
                         b.getDictionaryAttr(shard));
      ++count;
    }
    if (count == 0)
      return forward.emitError("llmc-tensor-parallel: no parameter of "
                               "@forward is a GPT-2 attention or MLP "
                               "projection (*.attn.c_attn, *.mlp.c_fc, "
                               "*.c_proj): nothing to split over tp");
    forward.setFunctionType(FunctionType::get(
        module.getContext(), argTypes, forward.getResultTypes()));

    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (isa<func::ReturnOp>(op))
        break;
      SmallVector<std::pair<unsigned, int64_t>> shares;
      for (OpOperand &operand : op.getOpOperands())
        if (auto it = sharded.find(operand.get()); it != sharded.end())
          shares.push_back({operand.getOperandNumber(), it->second});
      if (shares.empty())
        continue;
      if (failed(shardOp(&op, shares, sharded)))
        return failure();
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    for (OpOperand &result : ret->getOpOperands()) {
      Value v = result.get();
      if (!sharded.count(v))
        continue;
      auto block = vocabBlocks.find(v);
      if (block == vocabBlocks.end())
        return forward.emitError("llmc-tensor-parallel: a result of "
                                 "@forward is a rank's share, not the whole");
      // The logits @forward returns (for sampling) are gathered whole and
      // cut back to the vocabulary: the padding columns are never sampled.
      // The loss does not read them, so llmc-autodiff leaves this out of
      // @grad_step.
      // A gather concatenates whole blocks: the vocabulary goes in front
      // for it ([V/tp, B, T] -> [V, B, T]) and back after.
      b.setInsertionPoint(ret);
      auto type = cast<RankedTensorType>(v.getType());
      int64_t last = type.getRank() - 1;
      SmallVector<int64_t> toFront = {last}, toBack;
      for (int64_t d = 0; d < last; ++d) {
        toFront.push_back(d);
        toBack.push_back(d + 1);
      }
      toBack.push_back(0);
      Value front = TransposeOp::create(b, ret.getLoc(), v,
                                        b.getDenseI64ArrayAttr(toFront));
      Value gathered = AllGatherOp::create(
          b, ret.getLoc(), front, b.getI64IntegerAttr(0),
          b.getStringAttr(kAxis), b.getI64IntegerAttr(tp));
      Value whole = TransposeOp::create(b, ret.getLoc(), gathered,
                                        b.getDenseI64ArrayAttr(toBack));
      if (type.getDimSize(last) * tp != block->second.size) {
        SmallVector<int64_t> offsets(type.getRank(), 0);
        SmallVector<int64_t> sizes(type.getShape());
        sizes[last] = block->second.size;
        whole = SliceOp::create(b, ret.getLoc(), whole,
                                b.getDenseI64ArrayAttr(offsets),
                                b.getDenseI64ArrayAttr(sizes));
      }
      result.set(whole);
    }
    forward.setFunctionType(FunctionType::get(
        module.getContext(), argTypes, ret.getOperandTypes()));
    return success();
  }

  /// Retypes `op`, one of whose operands is a share; records its results'.
  LogicalResult shardOp(Operation *op,
                        ArrayRef<std::pair<unsigned, int64_t>> shares,
                        DenseMap<Value, int64_t> &sharded) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    auto fail = [&](const Twine &why) {
      return op->emitOpError("llmc-tensor-parallel cannot split this op: ")
             << why;
    };
    if (auto matmul = dyn_cast<MatmulOp>(op)) {
      if (!matmul.getTransposeB() || matmul.getTransposeA())
        return fail("only x @ W^T projections are split");
      auto lhs = sharded.find(matmul.getLhs());
      auto rhs = sharded.find(matmul.getRhs());
      if (rhs == sharded.end())
        return fail("the shared operand is not a weight");
      int64_t lhsRank = cast<RankedTensorType>(matmul.getLhs().getType())
                            .getRank();
      if (rhs->second == 0 && lhs == sharded.end()) {
        // Column-parallel: f on the input, output columns are the share
        // (the weight's rows: heads, hidden units or vocabulary ids).
        auto copy = CopyToAxisOp::create(b, loc, matmul.getLhs(),
                                         b.getStringAttr(kAxis),
                                         b.getI64IntegerAttr(tp));
        fOps.push_back(copy);
        matmul->setOperand(0, copy);
        Value y = matmul.getResult();
        y.setType(withDim(y.getType(), lhsRank - 1,
                          cast<RankedTensorType>(matmul.getRhs().getType())
                              .getDimSize(0)));
        sharded[y] = lhsRank - 1;
        if (auto block = vocabBlocks.find(matmul.getRhs());
            block != vocabBlocks.end())
          vocabBlocks[y] = block->second;
        return success();
      }
      if (rhs->second == 1 && lhs != sharded.end() &&
          lhs->second == lhsRank - 1) {
        // Row-parallel: a partial sum of the whole; g makes it whole.
        b.setInsertionPointAfter(matmul);
        Value whole =
            allReduce(b, loc, matmul.getResult(), CollectiveReduction::Sum);
        matmul.getResult().replaceAllUsesExcept(whole, whole.getDefiningOp());
        gOps.push_back(whole.getDefiningOp<AllReduceOp>());
        return success();
      }
      return fail("its operands are not split as a column- or row-parallel "
                  "projection");
    }
    if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
      // The rank's rows of the lookup, zeros for other ids; g sums them.
      auto block = vocabBlocks.find(embedding.getTable());
      if (block == vocabBlocks.end() || shares.size() != 1 ||
          shares[0].first != 0)
        return fail("only a table split by vocabulary rows is looked up");
      embedding.setVocabStart(block->second.start);
      embedding.setVocabSize(block->second.size);
      b.setInsertionPointAfter(embedding);
      Value whole = allReduce(b, loc, embedding.getResult(),
                              CollectiveReduction::Sum);
      embedding.getResult().replaceAllUsesExcept(whole,
                                                 whole.getDefiningOp());
      gOps.push_back(whole.getDefiningOp<AllReduceOp>());
      return success();
    }
    if (auto ce = dyn_cast<CrossEntropyOp>(op)) {
      auto block = vocabBlocks.find(ce.getLogits());
      if (block == vocabBlocks.end())
        return fail("its logits are not split by vocabulary");
      return splitCrossEntropy(ce, block->second);
    }
    if (auto slice = dyn_cast<SliceOp>(op)) {
      int64_t dim = shares[0].second;
      SmallVector<int64_t> offsets(slice.getOffsets()),
          sizes(slice.getSizes());
      if (offsets[dim] % tp || sizes[dim] % tp)
        return fail("the slice of the shared dimension does not split");
      offsets[dim] /= tp;
      sizes[dim] /= tp;
      slice.setOffsets(offsets);
      slice.setSizes(sizes);
      return retype(op, dim, sharded);
    }
    if (auto reshape = dyn_cast<ReshapeOp>(op)) {
      // The shared dimension maps to the output dimension with the same
      // number of elements before it (heads [B, T, C] <-> [B, T, H, D]),
      // which is cut.
      auto in = cast<RankedTensorType>(reshape.getInput().getType());
      auto out = cast<RankedTensorType>(reshape.getType());
      int64_t dim = shares[0].second, before = 1;
      for (int64_t i = 0; i < dim; ++i)
        before *= in.getDimSize(i);
      int64_t prefix = 1;
      for (int64_t e = 0; e < out.getRank(); ++e) {
        if (prefix == before && out.getDimSize(e) % tp == 0) {
          reshape.getResult().setType(cut(out, e, tp));
          sharded[reshape.getResult()] = e;
          return success();
        }
        prefix *= out.getDimSize(e);
      }
      return fail("the shared dimension has no counterpart in the result");
    }
    if (auto transpose = dyn_cast<TransposeOp>(op)) {
      ArrayRef<int64_t> perm = transpose.getPermutation();
      auto at = llvm::find(perm, shares[0].second);
      return retype(op, at - perm.begin(), sharded);
    }
    if (isa<AttentionOp>(op)) {
      if (shares.size() != 3 || llvm::any_of(shares, [](auto share) {
            return share.second != 1;
          }))
        return fail("query, key and value must all be split by heads");
      return retype(op, 1, sharded);
    }
    if (isa<RotaryOp>(op))
      return retype(op, shares[0].second, sharded);
    if (op->hasTrait<OpTrait::llmc::Pointwise>() ||
        isa<AddOp, MulOp, SubOp>(op)) {
      // Elementwise, operands aligned from the right (a bias broadcasts).
      auto result = cast<RankedTensorType>(op->getResult(0).getType());
      auto [index, dim] = shares[0];
      int64_t operandRank =
          cast<RankedTensorType>(op->getOperand(index).getType()).getRank();
      int64_t resultDim = result.getRank() - operandRank + dim;
      for (auto [i, d] : shares)
        if (result.getRank() -
                cast<RankedTensorType>(op->getOperand(i).getType()).getRank() +
                d !=
            resultDim)
          return fail("its operands are split along different dimensions");
      for (OpOperand &operand : op->getOpOperands()) {
        auto type = dyn_cast<RankedTensorType>(operand.get().getType());
        if (!type || sharded.count(operand.get()) || type.getRank() == 0)
          continue;
        int64_t d = type.getRank() - result.getRank() + resultDim;
        if (d >= 0 && type.getDimSize(d) != 1)
          return fail("it combines a share with a whole tensor");
      }
      return retype(op, resultDim, sharded);
    }
    return fail("no tensor-parallel rule for it");
  }

  /// The loss from per-row statistics of each rank's logits, all-reduced
  /// in between (Megatron's vocab_parallel_cross_entropy): the max first,
  /// then the sum of exponentials and the target's logit relative to it.
  LogicalResult splitCrossEntropy(CrossEntropyOp ce, VocabBlock block) {
    OpBuilder b(ce);
    Location loc = ce.getLoc();
    auto start = b.getI64IntegerAttr(block.start);
    auto size = b.getI64IntegerAttr(block.size);
    Value local = VocabShardMaxOp::create(b, loc, ce.getLogits(), start, size);
    Value max = allReduce(b, loc, local, CollectiveReduction::Max);
    auto stats = VocabShardCrossEntropyOp::create(b, loc, ce.getLogits(),
                                                  ce.getTargets(), max, start,
                                                  size);
    Value sumExp = allReduce(b, loc, stats.getSumExp(), CollectiveReduction::Sum);
    Value target =
        allReduce(b, loc, stats.getTargetLogit(), CollectiveReduction::Sum);
    auto combined = CrossEntropyCombineOp::create(b, loc, max, sumExp, target);
    ce.getLoss().replaceAllUsesWith(combined.getLoss());
    ce.getLse().replaceAllUsesWith(combined.getLse());
    ce.erase();
    return success();
  }

  //===------------------------------------------------------------------===//
  // Sequence parallelism
  //===------------------------------------------------------------------===//

  /// The sequence's dimension in the residual stream [B, T, C].
  static constexpr int64_t kSeqDim = 1;

  /// A permutation that moves dimension `dim` to the front, or none when
  /// the dimensions before it have size 1 (a rank's block along it is then
  /// contiguous, which is what the collectives move).
  static std::optional<SmallVector<int64_t>> seqToFront(RankedTensorType type,
                                                        int64_t dim) {
    if (llvm::all_of(type.getShape().take_front(dim),
                     [](int64_t size) { return size == 1; }))
      return std::nullopt;
    SmallVector<int64_t> perm = {dim};
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (d != dim)
        perm.push_back(d);
    return perm;
  }

  static SmallVector<int64_t> inverse(ArrayRef<int64_t> perm) {
    SmallVector<int64_t> back(perm.size());
    for (auto [i, p] : llvm::enumerate(perm))
      back[p] = i;
    return back;
  }

  /// `collective` along the sequence dimension of `value`, which is moved
  /// to the front and back around it when the dimensions before it are
  /// not all 1.
  Value alongSequence(OpBuilder &b, Location loc, Value value,
                      function_ref<Value(Value, IntegerAttr)> collective) {
    auto type = cast<RankedTensorType>(value.getType());
    std::optional<SmallVector<int64_t>> perm = seqToFront(type, kSeqDim);
    if (perm)
      value = TransposeOp::create(b, loc, value, b.getDenseI64ArrayAttr(*perm));
    value = collective(value, b.getI64IntegerAttr(perm ? 0 : kSeqDim));
    if (perm)
      value = TransposeOp::create(b, loc, value,
                                  b.getDenseI64ArrayAttr(inverse(*perm)));
    return value;
  }

  /// The g of sequence parallelism: the ranks' partial [B, T, C] summed,
  /// each rank keeping its positions [B, T/tp, C].
  Value scatterSequence(OpBuilder &b, Location loc, Value partial) {
    return alongSequence(b, loc, partial, [&](Value v, IntegerAttr dim) {
      return ReduceScatterOp::create(b, loc, v,
                                     reduction(CollectiveReduction::Sum), dim,
                                     b.getStringAttr(kAxis),
                                     b.getI64IntegerAttr(tp));
    });
  }

  /// The f of sequence parallelism (Megatron's g-bar): the ranks' slices
  /// gathered into the whole sequence.
  Value gatherSequence(OpBuilder &b, Location loc, Value slice) {
    return alongSequence(b, loc, slice, [&](Value v, IntegerAttr dim) {
      return AllGatherOp::create(b, loc, v, dim, b.getStringAttr(kAxis),
                                 b.getI64IntegerAttr(tp));
    });
  }

  /// State of the sequence-parallel rewrite: the values that are the
  /// rank's slice of the sequence (along kSeqDim), and what was made once
  /// per value (gathers; whole values with their gradients summed over tp,
  /// cut to the rank's positions along a dimension or -1).
  struct SeqState {
    DenseSet<Value> slices;
    DenseMap<Value, Value> gathered;
    DenseMap<std::pair<Value, int64_t>, Value> replicated;
  };

  /// A whole `value` (every rank holds it alike) used on the rank's slice:
  /// copy_to_axis, whose VJP sums the ranks' partial gradients over tp
  /// (the gradient of a norm's weight is a sum over the rank's tokens
  /// only), and cut to the rank's positions along `dim` unless it is -1.
  FailureOr<Value> replicate(OpBuilder &b, Location loc, Value value,
                             int64_t dim, SeqState &state) {
    Value &done = state.replicated[{value, dim}];
    if (done)
      return done;
    Value v = value;
    if (!matchPattern(value, m_Constant()))
      v = CopyToAxisOp::create(b, loc, v, b.getStringAttr(kAxis),
                               b.getI64IntegerAttr(tp));
    if (dim >= 0) {
      auto type = cast<RankedTensorType>(v.getType());
      int64_t size = type.getDimSize(dim);
      if (size % tp)
        return failure();
      SmallVector<int64_t> offsets(type.getRank(), 0);
      SmallVector<int64_t> sizes(type.getShape());
      sizes[dim] = size / tp;
      offsets[dim] = rank * sizes[dim];
      v = SliceOp::create(b, loc, v, b.getDenseI64ArrayAttr(offsets),
                          b.getDenseI64ArrayAttr(sizes));
    }
    done = v;
    return v;
  }

  /// Cuts the sequence dimension of `op`'s results: the rank's slice.
  void cutSequence(Operation *op, SeqState &state) {
    for (Value result : op->getResults()) {
      auto type = cast<RankedTensorType>(result.getType());
      if (type.getRank() <= kSeqDim)
        continue;
      result.setType(cut(type, kSeqDim, tp));
      state.slices.insert(result);
    }
  }

  /// Turns the tensor-parallel @forward into the sequence-parallel one: g
  /// becomes a reduce-scatter over the sequence, f an all-gather, and the
  /// ops between a g and the next f run on the rank's slice.
  LogicalResult sequenceParallel(func::FuncOp forward) {
    SeqState state;
    for (AllReduceOp g : gOps) {
      auto type = cast<RankedTensorType>(g.getType());
      if (type.getRank() <= kSeqDim)
        return g.emitOpError("llmc-tensor-parallel: sequence parallelism "
                             "needs a [B, T, C] activation here");
      if (int64_t seq = type.getDimSize(kSeqDim); seq % tp)
        return forward.emitError("llmc-tensor-parallel: sequence "
                                 "parallelism splits the sequence of ")
               << seq << " positions over tp=" << int64_t(tp)
               << " ranks; the sequence length must be a multiple of tp";
      OpBuilder b(g);
      Value slice = scatterSequence(b, g.getLoc(), g.getInput());
      g.replaceAllUsesWith(slice);
      g.erase();
      state.slices.insert(slice);
    }
    gOps.clear();
    Block &body = forward.getBody().front();
    for (Operation &op : llvm::make_early_inc_range(body)) {
      bool onSlice = llvm::any_of(op.getOperands(), [&](Value v) {
        return state.slices.contains(v);
      });
      if (!onSlice)
        continue;
      if (isa<func::ReturnOp>(op))
        return forward.emitError("llmc-tensor-parallel: with sp, a result of "
                                 "@forward is a rank's slice of the "
                                 "sequence, not the whole");
      if (failed(sliceOp(&op, state)))
        return failure();
    }
    return success();
  }

  /// Runs `op`, one of whose operands is the rank's slice, on the slice.
  LogicalResult sliceOp(Operation *op, SeqState &state) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    auto fail = [&](const Twine &why) {
      return op->emitOpError("llmc-tensor-parallel (sp) cannot run this op "
                             "on a slice of the sequence: ")
             << why;
    };
    if (auto copy = dyn_cast<CopyToAxisOp>(op)) {
      if (!llvm::is_contained(fOps, copy))
        return fail("it is not the f of a column-parallel projection");
      Value &whole = state.gathered[copy.getInput()];
      if (!whole)
        whole = gatherSequence(b, loc, copy.getInput());
      copy.replaceAllUsesWith(whole);
      copy.erase();
      return success();
    }
    if (isa<LayerNormOp, RmsNormOp>(op)) {
      if (!state.slices.contains(op->getOperand(0)))
        return fail("its weight or bias is a slice");
      for (OpOperand &operand : llvm::drop_begin(op->getOpOperands())) {
        FailureOr<Value> whole = replicate(b, loc, operand.get(), -1, state);
        if (failed(whole))
          return failure();
        operand.set(*whole);
      }
      cutSequence(op, state);
      return success();
    }
    if (auto dropout = dyn_cast<DropoutOp>(op)) {
      // The mask of the whole tensor's elements at the rank's positions.
      auto type = cast<RankedTensorType>(dropout.getType());
      SmallVector<int64_t> offsets(type.getRank(), 0);
      offsets[kSeqDim] = rank * (type.getDimSize(kSeqDim) / tp);
      dropout.setWholeShapeAttr(b.getDenseI64ArrayAttr(type.getShape()));
      dropout.setOffsetsAttr(b.getDenseI64ArrayAttr(offsets));
      cutSequence(op, state);
      return success();
    }
    if (op->hasTrait<OpTrait::llmc::Pointwise>() ||
        isa<AddOp, MulOp, SubOp>(op)) {
      // Operands aligned from the right: a whole operand with the
      // sequence dimension is cut to the rank's positions (wpe's rows).
      auto result = cast<RankedTensorType>(op->getResult(0).getType());
      for (OpOperand &operand : op->getOpOperands()) {
        auto type = dyn_cast<RankedTensorType>(operand.get().getType());
        if (state.slices.contains(operand.get())) {
          if (type.getRank() != result.getRank())
            return fail("a slice broadcasts into it");
          continue;
        }
        if (!type || type.getRank() == 0)
          continue;
        int64_t d = type.getRank() - result.getRank() + kSeqDim;
        bool cutIt = d >= 0 && type.getDimSize(d) != 1;
        FailureOr<Value> whole =
            replicate(b, loc, operand.get(), cutIt ? d : -1, state);
        if (failed(whole))
          return fail("a whole operand's sequence dimension does not split");
        operand.set(*whole);
      }
      cutSequence(op, state);
      return success();
    }
    return fail("no sequence-parallel rule for it");
  }

  /// Cuts dimension `dim` of every result of `op` (of that rank or more).
  LogicalResult retype(Operation *op, int64_t dim,
                       DenseMap<Value, int64_t> &sharded) {
    for (Value result : op->getResults()) {
      auto type = cast<RankedTensorType>(result.getType());
      if (dim >= type.getRank())
        continue;
      if (type.getDimSize(dim) % tp != 0)
        return op->emitOpError("llmc-tensor-parallel: dimension ")
               << dim << " of size " << type.getDimSize(dim)
               << " does not split over tp=" << int64_t(tp);
      result.setType(cut(type, dim, tp));
      sharded[result] = dim;
    }
    return success();
  }
};

} // namespace
