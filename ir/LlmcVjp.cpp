// The reverse-mode rules (vector-Jacobian products) of the differentiable
// llmc ops: each op's DifferentiableOpInterface::buildVjp.
//
// A rule gets one gradient per result (null where none flows back; the
// autodiff pass calls it only when at least one is set) and builds, at the
// builder's insertion point, one gradient per operand of the operand's type,
// null for integer operands (ids, targets). Rules read the op's operands and
// results directly: the backward sweep runs after a copy of the forward body
// and keeps those values alive. Two conventions the rules rely on:
//   * `llmc.relu_grad %g, %x` is `g * (x > 0)`: the step at 0 belongs to
//     the left side, as in PyTorch. The max rules use it as a select.
//   * Broadcasting binary ops sum the gradient over the stretched dimensions
//     and reshape it to the operand (reduceToOperand).
#include "ir/LlmcOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::llmc;

namespace {

using Grads = SmallVector<Value>;

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

// A rank-0 fill: binary ops broadcast it against any shape.
Value scalar(OpBuilder &b, Location loc, Type elementType, double value) {
  return FillOp::create(b, loc, RankedTensorType::get({}, elementType),
                        b.getF64FloatAttr(value));
}

Value fill(OpBuilder &b, Location loc, RankedTensorType type, double value) {
  return FillOp::create(b, loc, type, b.getF64FloatAttr(value));
}

// Sums the gradient of a broadcast result over the dimensions in which
// `operand` was stretched (the missing leading ones and those of size 1),
// then reshapes it to the operand's shape.
Value reduceToOperand(OpBuilder &b, Location loc, Value grad, Value operand) {
  RankedTensorType from = tensorType(grad), to = tensorType(operand);
  if (from == to)
    return grad;
  ArrayRef<int64_t> big = from.getShape(), small = to.getShape();
  int64_t lead = big.size() - small.size();
  SmallVector<int64_t> dims;
  for (int64_t d = 0, e = big.size(); d < e; ++d)
    if (d < lead || (small[d - lead] == 1 && big[d] != 1))
      dims.push_back(d);
  Value reduced = grad;
  if (!dims.empty())
    reduced = ReduceSumOp::create(b, loc, grad, b.getDenseI64ArrayAttr(dims),
                                  /*keep_dims=*/UnitAttr());
  if (reduced.getType() != to)
    reduced = ReshapeOp::create(b, loc, to, reduced);
  return reduced;
}

// The gradients of a broadcasting binary op from the gradients of its
// operands at the result's shape.
Grads binaryGrads(OpBuilder &b, Operation *op, Value dlhs, Value drhs) {
  Location loc = op->getLoc();
  return {reduceToOperand(b, loc, dlhs, op->getOperand(0)),
          reduceToOperand(b, loc, drhs, op->getOperand(1))};
}

Value swapLastTwo(OpBuilder &b, Location loc, Value x) {
  int64_t rank = tensorType(x).getRank();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 2], perm[rank - 1]);
  return TransposeOp::create(b, loc, x, b.getDenseI64ArrayAttr(perm));
}

// [d0, ..., dn-2, dn-1] -> [d0 * ... * dn-2, dn-1].
Value flattenRows(OpBuilder &b, Location loc, Value x) {
  RankedTensorType type = tensorType(x);
  int64_t cols = type.getShape().back();
  auto flat = RankedTensorType::get({type.getNumElements() / cols, cols},
                                    type.getElementType());
  return ReshapeOp::create(b, loc, flat, x);
}

// The input shape with the reduced dimensions kept as 1.
RankedTensorType keptDimsType(RankedTensorType input, ArrayRef<int64_t> dims,
                              Type elementType) {
  SmallVector<int64_t> shape(input.getShape());
  for (int64_t d : dims)
    shape[d] = 1;
  return RankedTensorType::get(shape, elementType);
}

// The result gradient of a reduction with the reduced dimensions as 1, so
// that it broadcasts against the input.
Value withKeptDims(OpBuilder &b, Location loc, Value grad,
                   RankedTensorType input, ArrayRef<int64_t> dims) {
  RankedTensorType kept =
      keptDimsType(input, dims, tensorType(grad).getElementType());
  if (grad.getType() == kept)
    return grad;
  return ReshapeOp::create(b, loc, kept, grad);
}

// Rejects gradients flowing into saved statistics (mean, rstd, lse): no
// model differentiates through them, and no backward op takes them.
LogicalResult noStatisticGrads(Operation *op, ValueRange resultGrads) {
  for (auto [index, grad] : llvm::enumerate(resultGrads))
    if (index > 0 && grad)
      return op->emitOpError("cannot be differentiated through result #")
             << index << ", a statistic saved for the backward pass";
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Embedding and matrix products
//===----------------------------------------------------------------------===//

FailureOr<Grads> EmbeddingOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  // A rank's block of the vocabulary gets the gradient of its own rows.
  Value table = EmbeddingGradOp::create(b, getLoc(), getTable().getType(),
                                        resultGrads[0], getIndices(),
                                        getVocabStartAttr(), getVocabSizeAttr());
  return Grads{table, Value()};
}

// result = op(A) op(B) with op(A) : [..., M, K], op(B) : [K, N] and the
// batch dimensions of A shared by B:
//   d op(A) = G op(B)^T,   d op(B) = sum over the batch of op(A)^T G.
FailureOr<Grads> MatmulOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0], a = getLhs(), w = getRhs();
  bool ta = getTransposeA(), tb = getTransposeB();
  Value dOpA = MatmulOp::create(b, loc, g, w, false, !tb);
  Value da = ta ? swapLastTwo(b, loc, dOpA) : dOpA;
  Value dw;
  if (tensorType(a).getRank() == 2) {
    // tb: d B = (d op(B))^T = G^T op(A).
    dw = tb ? MatmulOp::create(b, loc, g, a, true, ta)
            : MatmulOp::create(b, loc, a, g, !ta, false);
  } else {
    // Fold the batch into the rows: [P * M, K] and [P * M, N].
    Value opA = flattenRows(b, loc, ta ? swapLastTwo(b, loc, a) : a);
    Value g2 = flattenRows(b, loc, g);
    dw = tb ? MatmulOp::create(b, loc, g2, opA, true, false)
            : MatmulOp::create(b, loc, opA, g2, true, false);
  }
  return Grads{da, dw};
}

// Per batch: d op(A) = G op(B)^T and d op(B) = op(A)^T G, transposed back
// where the operand was used transposed.
FailureOr<Grads> BatchMatmulOp::buildVjp(OpBuilder &b,
                                         ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0], a = getLhs(), bb = getRhs();
  bool ta = getTransposeA(), tb = getTransposeB();
  Value da = ta ? BatchMatmulOp::create(b, loc, bb, g, tb, true)
                : BatchMatmulOp::create(b, loc, g, bb, false, !tb);
  Value db = tb ? BatchMatmulOp::create(b, loc, g, a, true, ta)
                : BatchMatmulOp::create(b, loc, a, g, !ta, false);
  return Grads{da, db};
}

//===----------------------------------------------------------------------===//
// Elementwise arithmetic
//===----------------------------------------------------------------------===//

FailureOr<Grads> AddOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return binaryGrads(b, *this, resultGrads[0], resultGrads[0]);
}

FailureOr<Grads> SubOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Value g = resultGrads[0];
  return binaryGrads(b, *this, g, NegOp::create(b, getLoc(), g));
}

FailureOr<Grads> MulOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  Value dlhs = MulOp::create(b, loc, g, getRhs());
  Value drhs = MulOp::create(b, loc, g, getLhs());
  return binaryGrads(b, *this, dlhs, drhs);
}

// d lhs = g / rhs, d rhs = -g * lhs / rhs^2 = -(g * result) / rhs.
FailureOr<Grads> DivOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  Value dlhs = DivOp::create(b, loc, g, getRhs());
  Value drhs = NegOp::create(
      b, loc,
      DivOp::create(b, loc, MulOp::create(b, loc, g, getResult()), getRhs()));
  return binaryGrads(b, *this, dlhs, drhs);
}

// The gradient goes to the larger operand; on a tie (lhs == rhs) all of it
// goes to rhs. relu_grad(g, lhs - rhs) = g * (lhs > rhs) is the select.
FailureOr<Grads> MaxOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  Value lhsWins = ReluGradOp::create(b, loc, g,
                                     SubOp::create(b, loc, getLhs(), getRhs()));
  return binaryGrads(b, *this, lhsWins, SubOp::create(b, loc, g, lhsWins));
}

FailureOr<Grads> NegOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{NegOp::create(b, getLoc(), resultGrads[0])};
}

FailureOr<Grads> ExpOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{MulOp::create(b, getLoc(), resultGrads[0], getResult())};
}

FailureOr<Grads> LogOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{DivOp::create(b, getLoc(), resultGrads[0], getInput())};
}

// d x = g * (1 - y^2) = g - g * y * y.
FailureOr<Grads> TanhOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0], y = getResult();
  Value gyy = MulOp::create(b, loc, MulOp::create(b, loc, g, y), y);
  return Grads{SubOp::create(b, loc, g, gyy)};
}

// d x = g / (2 y).
FailureOr<Grads> SqrtOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  Value half = scalar(b, loc, getType().getElementType(), 0.5);
  return Grads{
      DivOp::create(b, loc, MulOp::create(b, loc, g, half), getResult())};
}

// y = x^(-1/2): d x = -0.5 * g * y^3.
FailureOr<Grads> RsqrtOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0], y = getResult();
  Value minusHalf = scalar(b, loc, getType().getElementType(), -0.5);
  Value y3 = MulOp::create(b, loc, MulOp::create(b, loc, y, y), y);
  return Grads{
      MulOp::create(b, loc, MulOp::create(b, loc, g, minusHalf), y3)};
}

FailureOr<Grads> ReluOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{ReluGradOp::create(b, getLoc(), resultGrads[0], getInput())};
}

FailureOr<Grads> SiluOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{SiluGradOp::create(b, getLoc(), resultGrads[0], getInput())};
}

FailureOr<Grads> GeluOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{GeluGradOp::create(b, getLoc(), resultGrads[0], getInput(),
                                  getApproximateAttr())};
}

// The gradient converts back to the input's element type.
FailureOr<Grads> CastOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{CastOp::create(b, getLoc(), getInput().getType(),
                              resultGrads[0])};
}

// The same rate and stream on a tensor of the same shape (and the same
// block of the same whole tensor): the same mask and the same
// 1 / (1 - rate) scale.
FailureOr<Grads> DropoutOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{DropoutOp::create(b, getLoc(), resultGrads[0], getRateAttr(),
                                 getStreamAttr(), getWholeShapeAttr(),
                                 getOffsetsAttr())};
}

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

FailureOr<Grads> LayerNormOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  if (failed(noStatisticGrads(*this, resultGrads)))
    return failure();
  auto grads = LayerNormGradOp::create(b, getLoc(), resultGrads[0], getInput(),
                                       getWeight(), getMean(), getRstd());
  Grads result{grads.getInputGrad(), grads.getWeightGrad()};
  if (getBias())
    result.push_back(grads.getBiasGrad());
  return result;
}

FailureOr<Grads> RmsNormOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  if (failed(noStatisticGrads(*this, resultGrads)))
    return failure();
  auto grads = RmsNormGradOp::create(b, getLoc(), resultGrads[0], getInput(),
                                     getWeight(), getRstd());
  return Grads{grads.getInputGrad(), grads.getWeightGrad()};
}

FailureOr<Grads> SoftmaxOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{
      SoftmaxGradOp::create(b, getLoc(), resultGrads[0], getResult())};
}

//===----------------------------------------------------------------------===//
// Attention, positions and loss
//===----------------------------------------------------------------------===//

FailureOr<Grads> AttentionOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  if (failed(noStatisticGrads(*this, resultGrads)))
    return failure();
  if (getPositions())
    return emitOpError("attention over a KV cache (positions) is for "
                       "inference and has no gradient");
  auto grads = AttentionGradOp::create(
      b, getLoc(), resultGrads[0], getQuery(), getKey(), getValue(),
      getResult(), getLse(), getScaleAttr(), getCausalAttr());
  return Grads{grads.getQueryGrad(), grads.getKeyGrad(), grads.getValueGrad()};
}

// A rotation's transpose is the rotation by the negated angle.
FailureOr<Grads> RotaryOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  UnitAttr inverse = getInverse() ? UnitAttr() : b.getUnitAttr();
  Grads grads = {RotaryOp::create(b, getLoc(), resultGrads[0], getPositions(),
                                  getThetaAttr(), inverse)};
  if (getPositions())
    grads.push_back(Value()); // integers
  return grads;
}

FailureOr<Grads> CrossEntropyOp::buildVjp(OpBuilder &b,
                                          ValueRange resultGrads) {
  if (failed(noStatisticGrads(*this, resultGrads)))
    return failure();
  Value logits = CrossEntropyGradOp::create(b, getLoc(), resultGrads[0],
                                            getLogits(), getTargets(),
                                            getLse());
  return Grads{logits, Value()};
}

// d sum_exp and d target_logit (either may be null: zeros) to the rank's
// logits; the shared max is a shift the loss does not depend on.
FailureOr<Grads> VocabShardCrossEntropyOp::buildVjp(OpBuilder &b,
                                                    ValueRange resultGrads) {
  Location loc = getLoc();
  auto row = cast<RankedTensorType>(getSumExp().getType());
  Value ds = resultGrads[0] ? resultGrads[0] : fill(b, loc, row, 0.0);
  Value dt = resultGrads[1] ? resultGrads[1] : fill(b, loc, row, 0.0);
  Value logits = VocabShardCrossEntropyGradOp::create(
      b, loc, ds, dt, getLogits(), getTargets(), getMax(),
      getVocabStartAttr(), getVocabSizeAttr());
  return Grads{logits, Value(), Value()};
}

// loss = mean(max + log(sum_exp) - target_logit) over N positions.
FailureOr<Grads> CrossEntropyCombineOp::buildVjp(OpBuilder &b,
                                                 ValueRange resultGrads) {
  if (failed(noStatisticGrads(*this, resultGrads)))
    return failure();
  Location loc = getLoc();
  auto row = cast<RankedTensorType>(getSumExp().getType());
  Type f32 = row.getElementType();
  double n = double(row.getNumElements());
  Value perPosition =
      MulOp::create(b, loc, resultGrads[0], scalar(b, loc, f32, 1.0 / n));
  Value dsum = DivOp::create(b, loc, perPosition, getSumExp());
  Value dtarget = BroadcastOp::create(
      b, loc, row, MulOp::create(b, loc, perPosition, scalar(b, loc, f32, -1.0)));
  return Grads{Value(), dsum, dtarget};
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

FailureOr<Grads> ReshapeOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{ReshapeOp::create(b, getLoc(), getInput().getType(),
                                 resultGrads[0])};
}

FailureOr<Grads> TransposeOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [index, p] : llvm::enumerate(perm))
    inverse[p] = index;
  return Grads{TransposeOp::create(b, getLoc(), resultGrads[0],
                                   b.getDenseI64ArrayAttr(inverse))};
}

// The gradient sits in the sliced block of a zero tensor: one concat with
// zero fills before and after the block, per dimension that was cut.
FailureOr<Grads> SliceOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  Value padded = resultGrads[0];
  ArrayRef<int64_t> offsets = getOffsets(), sizes = getSizes();
  ArrayRef<int64_t> full = getInput().getType().getShape();
  for (int64_t d = 0, e = full.size(); d < e; ++d) {
    int64_t before = offsets[d], after = full[d] - offsets[d] - sizes[d];
    if (before == 0 && after == 0)
      continue;
    RankedTensorType type = tensorType(padded);
    auto zeros = [&](int64_t size) {
      SmallVector<int64_t> shape(type.getShape());
      shape[d] = size;
      return fill(b, loc, RankedTensorType::get(shape, type.getElementType()),
                  0.0);
    };
    SmallVector<Value> parts;
    if (before > 0)
      parts.push_back(zeros(before));
    parts.push_back(padded);
    if (after > 0)
      parts.push_back(zeros(after));
    padded = ConcatOp::create(b, loc, parts, b.getI64IntegerAttr(d));
  }
  return Grads{padded};
}

// Each input's gradient is its block of the result's gradient.
FailureOr<Grads> ConcatOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  int64_t dim = getDim();
  int64_t rank = getType().getRank();
  Grads grads;
  int64_t offset = 0;
  for (Value input : getInputs()) {
    SmallVector<int64_t> offsets(rank, 0);
    offsets[dim] = offset;
    ArrayRef<int64_t> sizes = tensorType(input).getShape();
    grads.push_back(SliceOp::create(b, loc, resultGrads[0],
                                    b.getDenseI64ArrayAttr(offsets),
                                    b.getDenseI64ArrayAttr(sizes)));
    offset += sizes[dim];
  }
  return grads;
}

FailureOr<Grads> BroadcastOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{reduceToOperand(b, getLoc(), resultGrads[0], getInput())};
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

FailureOr<Grads> ReduceSumOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  RankedTensorType input = getInput().getType();
  Value kept = withKeptDims(b, loc, resultGrads[0], input, getDims());
  return Grads{BroadcastOp::create(b, loc, input, kept)};
}

FailureOr<Grads> ReduceMeanOp::buildVjp(OpBuilder &b,
                                        ValueRange resultGrads) {
  Location loc = getLoc();
  RankedTensorType input = getInput().getType();
  int64_t count = 1;
  for (int64_t d : getDims())
    count *= input.getDimSize(d);
  Value kept = withKeptDims(b, loc, resultGrads[0], input, getDims());
  Value scaled = MulOp::create(
      b, loc, kept,
      scalar(b, loc, input.getElementType(), 1.0 / double(count)));
  return Grads{BroadcastOp::create(b, loc, input, scaled)};
}

// The gradient goes to the elements equal to the maximum, split evenly
// between them when several tie (as torch.amax does). With ones = 1:
//   below = relu_grad(ones, max - x) = (x < max),   isMax = ones - below,
//   d x = isMax * g / (number of maxima in the reduced block).
FailureOr<Grads> ReduceMaxOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  Location loc = getLoc();
  RankedTensorType input = getInput().getType();
  ArrayRef<int64_t> dims = getDims();
  Value g = withKeptDims(b, loc, resultGrads[0], input, dims);
  Value max = withKeptDims(b, loc, getResult(), input, dims);
  Value ones = fill(b, loc, input, 1.0);
  Value below = ReluGradOp::create(b, loc, ones,
                                   SubOp::create(b, loc, max, getInput()));
  Value isMax = SubOp::create(b, loc, ones, below);
  Value count = ReduceSumOp::create(b, loc, isMax, b.getDenseI64ArrayAttr(dims),
                                    b.getUnitAttr());
  Value share = DivOp::create(b, loc, g, count);
  return Grads{MulOp::create(b, loc, isMax, share)};
}

//===----------------------------------------------------------------------===//
// Collectives (SPMD: the objective is the sum over the ranks of each rank's
// result, so the gradient of a rank's input sums what every rank's result
// received)
//===----------------------------------------------------------------------===//

// y = reduce(x_0, ..., x_{n-1}) on every rank: dx_r = sum_s dy_s for a sum,
// and 1/n of it for an average. A maximum has no rule.
FailureOr<Grads> AllReduceOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  if (getReduction() == CollectiveReduction::Max)
    return emitOpError("has no gradient rule for a maximum");
  // Megatron's g: the ranks use the result redundantly, the gradient is the
  // same on each and passes through (an average of equal values, too).
  if (getReplicated()) {
    if (getReduction() == CollectiveReduction::Avg)
      return Grads{MulOp::create(
          b, getLoc(), resultGrads[0],
          scalar(b, getLoc(), tensorType(resultGrads[0]).getElementType(),
                 1.0 / double(getAxisSize())))};
    return Grads{resultGrads[0]};
  }
  return Grads{AllReduceOp::create(b, getLoc(), resultGrads[0],
                                   getReductionAttr(), getAxisAttr(),
                                   getAxisSizeAttr())};
}

// Megatron's f: each rank's gradient of the shared input is its part; the
// sum over the axis is the whole, and every rank goes on with it alike.
FailureOr<Grads> CopyToAxisOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{AllReduceOp::create(
      b, getLoc(), resultGrads[0],
      CollectiveReductionAttr::get(getContext(), CollectiveReduction::Sum),
      getAxisAttr(), getAxisSizeAttr(), b.getUnitAttr())};
}

// Rank r's block of the reduction: dx_s = the gathered blocks of every
// rank's dy (scaled by 1/n for an average).
FailureOr<Grads> ReduceScatterOp::buildVjp(OpBuilder &b,
                                           ValueRange resultGrads) {
  if (getReduction() == CollectiveReduction::Max)
    return emitOpError("has no gradient rule for a maximum");
  Location loc = getLoc();
  Value gathered = AllGatherOp::create(b, loc, resultGrads[0], getDimAttr(),
                                       getAxisAttr(), getAxisSizeAttr());
  if (getReduction() == CollectiveReduction::Avg)
    gathered = MulOp::create(
        b, loc, gathered,
        scalar(b, loc, tensorType(gathered).getElementType(),
               1.0 / double(getAxisSize())));
  return Grads{gathered};
}

// Rank r's input is block r of every rank's result: dx_r = sum_s dy_s[r],
// a reduce-scatter.
FailureOr<Grads> AllGatherOp::buildVjp(OpBuilder &b, ValueRange resultGrads) {
  return Grads{ReduceScatterOp::create(
      b, getLoc(), resultGrads[0],
      CollectiveReductionAttr::get(getContext(), CollectiveReduction::Sum),
      getDimAttr(), getAxisAttr(), getAxisSizeAttr())};
}

// Pipeline transfers: the gradient goes back the way the activation came.
// A send's result is a placeholder loss, whose gradient (dloss) is ignored:
// the input's gradient is what the receiving stage sends back.
FailureOr<Grads> PipelineSendOp::buildVjp(OpBuilder &b, ValueRange) {
  return Grads{PipelineRecvOp::create(b, getLoc(), getInput().getType(),
                                      getPeerAttr(), getStagesAttr(),
                                      b.getUnitAttr())
                   .getResult()};
}

// A receive has no operand: its VJP only sends the result's gradient.
FailureOr<Grads> PipelineRecvOp::buildVjp(OpBuilder &b,
                                          ValueRange resultGrads) {
  PipelineSendOp::create(b, getLoc(),
                         RankedTensorType::get({}, b.getF32Type()),
                         resultGrads[0], getPeerAttr(),
                         getStagesAttr(), b.getUnitAttr());
  return Grads{};
}
