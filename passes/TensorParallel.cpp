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
#include "ir/LlmcOps.h"
#include "ir/TensorParallel.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

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
    if (failed(checkDivisible(module)) || failed(shardForward(module, forward)))
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
      if (spec->dim >= type.getRank() ||
          type.getDimSize(spec->dim) % (spec->groups * tp) != 0)
        return forward.emitError("llmc-tensor-parallel: parameter '")
               << name.getValue() << "' of type " << type
               << " does not split into " << spec->groups << " x " << int64_t(tp)
               << " blocks along dimension " << spec->dim;
      arg.setType(cut(type, spec->dim, tp));
      argTypes[arg.getArgNumber()] = arg.getType();
      sharded[arg] = spec->dim;
      forward.setArgAttr(
          arg.getArgNumber(), "llmc.tp_shard",
          b.getDictionaryAttr(
              {b.getNamedAttr("dim", b.getI64IntegerAttr(spec->dim)),
               b.getNamedAttr("groups", b.getI64IntegerAttr(spec->groups)),
               b.getNamedAttr("size", b.getI64IntegerAttr(tp))}));
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
    for (Value v : ret.getOperands())
      if (sharded.count(v))
        return forward.emitError("llmc-tensor-parallel: a result of "
                                 "@forward is a rank's share, not the whole");
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
        // Column-parallel: f on the input, output columns are the share.
        Value copy = CopyToAxisOp::create(b, loc, matmul.getLhs(),
                                          b.getStringAttr(kAxis),
                                          b.getI64IntegerAttr(tp));
        matmul->setOperand(0, copy);
        Value y = matmul.getResult();
        y.setType(cut(y.getType(), lhsRank - 1, tp));
        sharded[y] = lhsRank - 1;
        return success();
      }
      if (rhs->second == 1 && lhs != sharded.end() &&
          lhs->second == lhsRank - 1) {
        // Row-parallel: a partial sum of the whole; g makes it whole.
        b.setInsertionPointAfter(matmul);
        auto reduce = AllReduceOp::create(
            b, loc, matmul.getResult(),
            CollectiveReductionAttr::get(b.getContext(),
                                         CollectiveReduction::Sum),
            b.getStringAttr(kAxis), b.getI64IntegerAttr(tp), b.getUnitAttr());
        matmul.getResult().replaceAllUsesExcept(reduce.getResult(), reduce);
        return success();
      }
      return fail("its operands are not split as a column- or row-parallel "
                  "projection");
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
