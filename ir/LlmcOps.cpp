// Verifiers, result type inference and folders of the llmc ops.
#include "ir/LlmcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

using namespace mlir;
using namespace mlir::llmc;

bool mlir::llmc::isDataElementType(Type type) {
  return isa<Float32Type, Float16Type, BFloat16Type>(type);
}

bool mlir::llmc::isIdElementType(Type type) {
  return type.isSignlessInteger(32) || type.isSignlessInteger(64);
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {

// Shape checks live in inferReturnTypes: the parser calls it before the op
// exists (results are not spelled out in the assembly), and the
// InferTypeOpInterface verifier calls it again on every verification. So
// every diagnostic names the op itself, and operand types are checked here
// too because the ODS constraints have not run yet when parsing.
struct Inference {
  std::optional<Location> loc;
  StringRef opName;
  DictionaryAttr attrs;

  template <typename... Args> LogicalResult fail(Args &&...args) const {
    return emitOptionalError(loc, "'", opName, "' op ",
                             std::forward<Args>(args)...);
  }

  FailureOr<RankedTensorType> tensor(Value value, StringRef what) const {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || !type.hasStaticShape())
      return fail(what, " must be a statically shaped tensor, got ",
                  value.getType());
    return type;
  }

  FailureOr<RankedTensorType> floatTensor(Value value, StringRef what) const {
    FailureOr<RankedTensorType> type = tensor(value, what);
    if (failed(type))
      return failure();
    if (!isDataElementType(type->getElementType()))
      return fail(what, " must have element type f32, f16 or bf16, got ",
                  type->getElementType());
    return type;
  }

  FailureOr<RankedTensorType> indexTensor(Value value, StringRef what) const {
    FailureOr<RankedTensorType> type = tensor(value, what);
    if (failed(type))
      return failure();
    if (!isIdElementType(type->getElementType()))
      return fail(what, " must have element type i32 or i64, got ",
                  type->getElementType());
    return type;
  }

  // Attributes are read from the op's dictionary and checked here for the
  // same reason as operands: parsing infers result types before the ODS
  // attribute constraints run, so a missing or mistyped attribute has to be
  // a diagnostic at this point, not a bad cast.
  Attribute attr(StringRef name) const {
    return attrs ? attrs.get(name) : Attribute();
  }

  template <typename AttrT>
  FailureOr<AttrT> required(StringRef name, StringRef kind) const {
    Attribute value = attr(name);
    if (!value)
      return fail("requires attribute '", name, "'");
    auto typed = dyn_cast<AttrT>(value);
    if (!typed)
      return fail("attribute '", name, "' must be ", kind, ", got ", value);
    return typed;
  }

  FailureOr<double> f32Attr(StringRef name) const {
    auto value = required<FloatAttr>(name, "an f32 attribute");
    if (failed(value))
      return failure();
    if (!value->getType().isF32())
      return fail("attribute '", name, "' must be an f32 attribute, got ",
                  *value);
    return value->getValueAsDouble();
  }

  FailureOr<double> positiveF32Attr(StringRef name) const {
    FailureOr<double> value = f32Attr(name);
    if (failed(value))
      return failure();
    if (!(*value > 0.0 && std::isfinite(*value)))
      return fail(name, " must be positive and finite, got ", *value);
    return value;
  }

  FailureOr<bool> unitAttr(StringRef name) const {
    Attribute value = attr(name);
    if (value && !isa<UnitAttr>(value))
      return fail("attribute '", name, "' must be a unit attribute, got ",
                  value);
    return bool(value);
  }

  // The transpose_a / transpose_b flags of matmul and batch_matmul.
  FailureOr<std::pair<bool, bool>> transposeFlags() const {
    FailureOr<bool> a = unitAttr("transpose_a"), b = unitAttr("transpose_b");
    if (failed(a) || failed(b))
      return failure();
    return std::make_pair(*a, *b);
  }

  FailureOr<ArrayRef<int64_t>> i64ArrayAttr(StringRef name) const {
    auto value = required<DenseI64ArrayAttr>(name, "an array<i64>");
    if (failed(value))
      return failure();
    return value->asArrayRef();
  }

  FailureOr<int64_t> i64Attr(StringRef name) const {
    auto value = required<IntegerAttr>(name, "an i64 attribute");
    if (failed(value))
      return failure();
    if (!value->getType().isSignlessInteger(64))
      return fail("attribute '", name, "' must be an i64 attribute, got ",
                  *value);
    return value->getInt();
  }

  LogicalResult sameElementType(RankedTensorType a, StringRef aName,
                                RankedTensorType b, StringRef bName) const {
    if (a.getElementType() == b.getElementType())
      return success();
    return fail(aName, " and ", bName, " must have one element type, got ",
                a.getElementType(), " and ", b.getElementType());
  }
};

template <typename OpT>
Inference inference(std::optional<Location> loc, DictionaryAttr attrs = {}) {
  return Inference{loc, OpT::getOperationName(), attrs};
}

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string result = "[";
  llvm::raw_string_ostream os(result);
  llvm::interleave(shape, os, ", ");
  os << "]";
  return result;
}

Type f32(MLIRContext *ctx) { return Float32Type::get(ctx); }

// The NumPy rule: align at the last dimension; each pair is equal or has a 1.
std::optional<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                    ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    result[rank - 1 - i] = da == 1 ? db : da;
  }
  return result;
}

// Checks a norm's weight (and bias) against the input's last dimension and
// returns the type of the per-row statistics.
FailureOr<RankedTensorType> normStatistics(const Inference &inf,
                                           RankedTensorType input,
                                           RankedTensorType weight,
                                           StringRef weightName) {
  if (input.getRank() < 1)
    return inf.fail("input must have rank >= 1");
  int64_t channels = input.getShape().back();
  if (weight.getRank() != 1 || weight.getDimSize(0) != channels)
    return inf.fail(weightName, " must have shape [", channels,
                    "] to match the input's last dimension, got ",
                    shapeString(weight.getShape()));
  if (failed(inf.sameElementType(input, "input", weight, weightName)))
    return failure();
  return RankedTensorType::get(input.getShape().drop_back(),
                               f32(input.getContext()));
}

// Shared by attention and its gradient: returns the output and lse types.
FailureOr<std::pair<RankedTensorType, RankedTensorType>>
inferAttention(const Inference &inf, Value queryV, Value keyV, Value valueV) {
  FailureOr<bool> causal = inf.unitAttr("causal");
  if (failed(causal) || failed(inf.positiveF32Attr("scale")))
    return failure();
  auto query = inf.floatTensor(queryV, "query");
  auto key = inf.floatTensor(keyV, "key");
  auto value = inf.floatTensor(valueV, "value");
  if (failed(query) || failed(key) || failed(value))
    return failure();
  int64_t rank = query->getRank();
  if (rank < 2 || key->getRank() != rank || value->getRank() != rank)
    return inf.fail("query, key and value must have one rank >= 2, got ", rank,
                    ", ", key->getRank(), " and ", value->getRank());
  if (failed(inf.sameElementType(*query, "query", *key, "key")) ||
      failed(inf.sameElementType(*query, "query", *value, "value")))
    return failure();
  ArrayRef<int64_t> q = query->getShape(), k = key->getShape(),
                    v = value->getShape();
  if (q.drop_back(2) != k.drop_back(2) || q.drop_back(2) != v.drop_back(2))
    return inf.fail("query, key and value must have the same batch "
                    "dimensions, got ",
                    shapeString(q), ", ", shapeString(k), " and ",
                    shapeString(v));
  if (q.back() != k.back())
    return inf.fail("query and key head sizes differ: ", q.back(), " vs ",
                    k.back());
  if (k[rank - 2] != v[rank - 2])
    return inf.fail("key and value lengths differ: ", k[rank - 2], " vs ",
                    v[rank - 2]);
  if (*causal && q[rank - 2] > k[rank - 2])
    return inf.fail("causal attention needs no more queries than keys, got ",
                    q[rank - 2], " queries and ", k[rank - 2], " keys");
  SmallVector<int64_t> outShape(q.drop_back());
  outShape.push_back(v.back());
  return std::make_pair(
      RankedTensorType::get(outShape, query->getElementType()),
      RankedTensorType::get(q.drop_back(), f32(query->getContext())));
}

// Shared by cross_entropy and its gradient.
LogicalResult checkCrossEntropy(const Inference &inf, RankedTensorType logits,
                                RankedTensorType targets) {
  if (logits.getRank() < 1)
    return inf.fail("logits must have rank >= 1");
  if (targets.getShape() != logits.getShape().drop_back())
    return inf.fail("targets must have the logits' shape without the vocab "
                    "dimension, ",
                    shapeString(logits.getShape().drop_back()), ", got ",
                    shapeString(targets.getShape()));
  return success();
}

// The vocabulary block of a tensor-parallel rank (the vocab_shard_* ops):
// `vocab_start` in [0, vocab_size).
LogicalResult checkVocabShard(const Inference &inf) {
  FailureOr<int64_t> start = inf.i64Attr("vocab_start");
  FailureOr<int64_t> size = inf.i64Attr("vocab_size");
  if (failed(start) || failed(size))
    return failure();
  if (*start < 0 || *start >= *size)
    return inf.fail("vocab_start (", *start, ") must lie in [0, vocab_size = ",
                    *size, ")");
  return success();
}

// One f32 row statistic of the vocab-parallel cross-entropy: the targets'
// shape.
LogicalResult checkRowStatistic(const Inference &inf, Value value,
                                StringRef what, ArrayRef<int64_t> shape) {
  FailureOr<RankedTensorType> type = inf.tensor(value, what);
  if (failed(type))
    return failure();
  auto expected = RankedTensorType::get(shape, f32(value.getContext()));
  if (*type != expected)
    return inf.fail(what, " must have type ", expected, ", got ", *type);
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &results) {
  auto value = inference<ConstantOp>(loc, adaptor.getAttributes())
                   .required<ElementsAttr>("value", "an elements attribute");
  if (failed(value))
    return failure();
  results.push_back(value->getType());
  return success();
}

LogicalResult ConstantOp::verify() {
  Type elementType = getValue().getElementType();
  if (!isDataElementType(elementType) && !isIdElementType(elementType))
    return emitOpError("value must have element type f32, f16, bf16, i32 or "
                       "i64, got ")
           << elementType;
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  Inference inf = inference<EmbeddingOp>(loc, adaptor.getAttributes());
  auto table = inf.floatTensor(adaptor.getTable(), "table");
  auto indices = inf.indexTensor(adaptor.getIndices(), "indices");
  if (failed(table) || failed(indices))
    return failure();
  if (table->getRank() != 2)
    return inf.fail("table must have rank 2 [V, C], got ",
                    shapeString(table->getShape()));
  SmallVector<int64_t> shape(indices->getShape());
  shape.push_back(table->getDimSize(1));
  results.push_back(RankedTensorType::get(shape, table->getElementType()));
  return success();
}

// The optional block of the vocabulary of embedding and embedding_grad.
static LogicalResult verifyVocabBlock(Operation *op, IntegerAttr start,
                                      IntegerAttr size) {
  if (bool(start) != bool(size))
    return op->emitOpError("needs both vocab_start and vocab_size, or neither");
  if (start && (start.getInt() < 0 || start.getInt() >= size.getInt()))
    return op->emitOpError("vocab_start (")
           << start.getInt() << ") must lie in [0, vocab_size = "
           << size.getInt() << ")";
  return success();
}

LogicalResult EmbeddingOp::verify() {
  return verifyVocabBlock(*this, getVocabStartAttr(), getVocabSizeAttr());
}

LogicalResult EmbeddingGradOp::verify() {
  auto grad = getGrad().getType(), result = getResult().getType();
  ArrayRef<int64_t> indices = getIndices().getType().getShape();
  if (result.getRank() != 2)
    return emitOpError("result must have rank 2 [V, C], got ")
           << shapeString(result.getShape());
  SmallVector<int64_t> expected(indices);
  expected.push_back(result.getDimSize(1));
  if (grad.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("grad must have shape ")
           << shapeString(expected) << " (indices shape, then C), got "
           << shapeString(grad.getShape());
  if (grad.getElementType() != result.getElementType())
    return emitOpError("grad and result must have one element type, got ")
           << grad.getElementType() << " and " << result.getElementType();
  return verifyVocabBlock(*this, getVocabStartAttr(), getVocabSizeAttr());
}

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  Inference inf = inference<MatmulOp>(loc, adaptor.getAttributes());
  auto lhs = inf.floatTensor(adaptor.getLhs(), "lhs");
  auto rhs = inf.floatTensor(adaptor.getRhs(), "rhs");
  if (failed(lhs) || failed(rhs))
    return failure();
  if (lhs->getRank() < 2)
    return inf.fail("lhs must have rank >= 2, got ", lhs->getRank());
  if (rhs->getRank() != 2)
    return inf.fail("rhs must have rank 2 (use llmc.batch_matmul for "
                    "batched operands), got ",
                    rhs->getRank());
  if (failed(inf.sameElementType(*lhs, "lhs", *rhs, "rhs")))
    return failure();
  ArrayRef<int64_t> a = lhs->getShape(), b = rhs->getShape();
  int64_t r = a.size();
  FailureOr<std::pair<bool, bool>> transpose = inf.transposeFlags();
  if (failed(transpose))
    return failure();
  auto [ta, tb] = *transpose;
  int64_t m = ta ? a[r - 1] : a[r - 2], ka = ta ? a[r - 2] : a[r - 1];
  int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (ka != kb)
    return inf.fail("contraction dimensions differ: lhs ", shapeString(a),
                    ta ? " (transposed)" : "", " has K = ", ka, ", rhs ",
                    shapeString(b), tb ? " (transposed)" : "", " has K = ", kb);
  SmallVector<int64_t> shape(a.drop_back(2));
  shape.append({m, n});
  results.push_back(RankedTensorType::get(shape, lhs->getElementType()));
  return success();
}

LogicalResult BatchMatmulOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &results) {
  Inference inf = inference<BatchMatmulOp>(loc, adaptor.getAttributes());
  auto lhs = inf.floatTensor(adaptor.getLhs(), "lhs");
  auto rhs = inf.floatTensor(adaptor.getRhs(), "rhs");
  if (failed(lhs) || failed(rhs))
    return failure();
  if (lhs->getRank() < 3 || lhs->getRank() != rhs->getRank())
    return inf.fail("operands must have one rank >= 3, got ", lhs->getRank(),
                    " and ", rhs->getRank());
  if (failed(inf.sameElementType(*lhs, "lhs", *rhs, "rhs")))
    return failure();
  ArrayRef<int64_t> a = lhs->getShape(), b = rhs->getShape();
  int64_t r = a.size();
  if (a.drop_back(2) != b.drop_back(2))
    return inf.fail("batch dimensions differ: ", shapeString(a.drop_back(2)),
                    " vs ", shapeString(b.drop_back(2)));
  FailureOr<std::pair<bool, bool>> transpose = inf.transposeFlags();
  if (failed(transpose))
    return failure();
  auto [ta, tb] = *transpose;
  int64_t m = ta ? a[r - 1] : a[r - 2], ka = ta ? a[r - 2] : a[r - 1];
  int64_t kb = tb ? b[r - 1] : b[r - 2], n = tb ? b[r - 2] : b[r - 1];
  if (ka != kb)
    return inf.fail("contraction dimensions differ: ", ka, " vs ", kb);
  SmallVector<int64_t> shape(a.drop_back(2));
  shape.append({m, n});
  results.push_back(RankedTensorType::get(shape, lhs->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename OpT>
static LogicalResult inferBinary(std::optional<Location> loc, Value lhsV,
                                 Value rhsV, SmallVectorImpl<Type> &results) {
  Inference inf = inference<OpT>(loc);
  auto lhs = inf.floatTensor(lhsV, "lhs");
  auto rhs = inf.floatTensor(rhsV, "rhs");
  if (failed(lhs) || failed(rhs) ||
      failed(inf.sameElementType(*lhs, "lhs", *rhs, "rhs")))
    return failure();
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(lhs->getShape(), rhs->getShape());
  if (!shape)
    return inf.fail("shapes ", shapeString(lhs->getShape()), " and ",
                    shapeString(rhs->getShape()), " do not broadcast");
  results.push_back(RankedTensorType::get(*shape, lhs->getElementType()));
  return success();
}

#define LLMC_BINARY_INFER(OpT)                                                 \
  LogicalResult OpT::inferReturnTypes(                                         \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &results) {                                        \
    return inferBinary<OpT>(loc, adaptor.getLhs(), adaptor.getRhs(), results); \
  }
LLMC_BINARY_INFER(AddOp)
LLMC_BINARY_INFER(SubOp)
LLMC_BINARY_INFER(MulOp)
LLMC_BINARY_INFER(DivOp)
LLMC_BINARY_INFER(MaxOp)
#undef LLMC_BINARY_INFER

LogicalResult CastOp::verify() {
  if (getInput().getType().getShape() != getResult().getType().getShape())
    return emitOpError("changes the shape from ")
           << shapeString(getInput().getType().getShape()) << " to "
           << shapeString(getResult().getType().getShape());
  return success();
}

// Whether every value of element type `from` is exactly a value of `to`:
// f16 and bf16 both widen to f32 without rounding.
static bool widensExactly(Type from, Type to) {
  return from == to || to.isF32();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // cast(cast(x)) whose inner cast loses nothing rounds x's exact value
  // once, as one cast of x does: f16 -> f32 -> f16 is x itself and
  // f16 -> f32 -> bf16 is f16 -> bf16. A narrowing inner cast
  // (f32 -> f16 -> f32) rounds and stays.
  if (auto inner = getInput().getDefiningOp<CastOp>()) {
    Value source = inner.getInput();
    if (widensExactly(getElementTypeOrSelf(source.getType()),
                      getElementTypeOrSelf(inner.getType()))) {
      if (source.getType() == getType())
        return source;
      getInputMutable().assign(source);
      return getResult();
    }
  }
  return {};
}

LogicalResult DropoutOp::verify() {
  double rate = getRate().convertToDouble();
  if (!(rate >= 0.0 && rate < 1.0))
    return emitOpError("rate must be in [0, 1), got ") << rate;
  // The generated getter returns the i64 as unsigned; read it signed.
  int64_t stream = getStreamAttr().getInt();
  if (stream < 0)
    return emitOpError("stream must be non-negative, got ") << stream;
  std::optional<ArrayRef<int64_t>> whole = getWholeShape();
  std::optional<ArrayRef<int64_t>> offsets = getOffsets();
  if (whole.has_value() != offsets.has_value())
    return emitOpError("needs both whole_shape and offsets, or neither");
  if (!whole)
    return success();
  ArrayRef<int64_t> shape = cast<RankedTensorType>(getType()).getShape();
  if (whole->size() != shape.size() || offsets->size() != shape.size())
    return emitOpError("whole_shape and offsets must have one entry per "
                       "dimension of the result (")
           << shape.size() << ")";
  for (auto [d, size] : llvm::enumerate(shape))
    if ((*offsets)[d] < 0 || (*offsets)[d] + size > (*whole)[d])
      return emitOpError("block of dimension ")
             << d << " at offset " << (*offsets)[d] << " of size " << size
             << " lies outside the whole tensor's " << (*whole)[d];
  return success();
}

//===----------------------------------------------------------------------===//
// Predicates and selection
//===----------------------------------------------------------------------===//

static RankedTensorType flagsLike(ArrayRef<int64_t> shape, MLIRContext *ctx) {
  return RankedTensorType::get(shape, IntegerType::get(ctx, 1));
}

LogicalResult IsFiniteOp::inferReturnTypes(MLIRContext *ctx,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &results) {
  auto input =
      inference<IsFiniteOp>(loc).floatTensor(adaptor.getInput(), "input");
  if (failed(input))
    return failure();
  results.push_back(flagsLike(input->getShape(), ctx));
  return success();
}

LogicalResult CompareOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  Inference inf = inference<CompareOp>(loc, adaptor.getAttributes());
  if (failed(inf.required<ComparePredicateAttr>("predicate",
                                                "lt, le or eq")))
    return failure();
  auto lhs = inf.floatTensor(adaptor.getLhs(), "lhs");
  auto rhs = inf.floatTensor(adaptor.getRhs(), "rhs");
  if (failed(lhs) || failed(rhs) ||
      failed(inf.sameElementType(*lhs, "lhs", *rhs, "rhs")))
    return failure();
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(lhs->getShape(), rhs->getShape());
  if (!shape)
    return inf.fail("shapes ", shapeString(lhs->getShape()), " and ",
                    shapeString(rhs->getShape()), " do not broadcast");
  results.push_back(flagsLike(*shape, ctx));
  return success();
}

LogicalResult SelectOp::verify() {
  ArrayRef<int64_t> condition = getCondition().getType().getShape();
  ArrayRef<int64_t> result = getType().getShape();
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(condition, result);
  if (!shape || ArrayRef<int64_t>(*shape) != result)
    return emitOpError("condition of shape ")
           << shapeString(condition)
           << " does not broadcast to the result shape "
           << shapeString(result);
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  Inference inf = inference<LayerNormOp>(loc, adaptor.getAttributes());
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  auto weight = inf.floatTensor(adaptor.getWeight(), "weight");
  if (failed(input) || failed(weight))
    return failure();
  auto stats = normStatistics(inf, *input, *weight, "weight");
  if (failed(stats))
    return failure();
  if (Value biasV = adaptor.getBias()) {
    auto bias = inf.floatTensor(biasV, "bias");
    if (failed(bias) || failed(normStatistics(inf, *input, *bias, "bias")))
      return failure();
  }
  if (failed(inf.positiveF32Attr("epsilon")))
    return failure();
  results.append({*input, *stats, *stats});
  return success();
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  Inference inf = inference<RmsNormOp>(loc, adaptor.getAttributes());
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  auto weight = inf.floatTensor(adaptor.getWeight(), "weight");
  if (failed(input) || failed(weight))
    return failure();
  auto stats = normStatistics(inf, *input, *weight, "weight");
  if (failed(stats) || failed(inf.positiveF32Attr("epsilon")))
    return failure();
  results.append({*input, *stats});
  return success();
}

LogicalResult SoftmaxOp::verify() {
  if (getInput().getType().getRank() < 1)
    return emitOpError("input must have rank >= 1");
  return success();
}

//===----------------------------------------------------------------------===//
// Attention and positions
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto types =
      inferAttention(inference<AttentionOp>(loc, adaptor.getAttributes()),
                     adaptor.getQuery(), adaptor.getKey(), adaptor.getValue());
  if (failed(types))
    return failure();
  results.append({types->first, types->second});
  return success();
}

/// Checks `positions` of an op over `[B, ..., T, D]` (the op's `input`):
/// shape [B, T].
static LogicalResult verifyPositions(Operation *op, RankedTensorType input,
                                     Value positions) {
  auto type = cast<RankedTensorType>(positions.getType());
  int64_t rank = input.getRank();
  if (rank < 3)
    return op->emitOpError("positions need an input of rank >= 3 [B, ..., "
                           "T, D], got rank ")
           << rank;
  SmallVector<int64_t> expected = {input.getDimSize(0),
                                   input.getDimSize(rank - 2)};
  if (type.getShape() != ArrayRef<int64_t>(expected))
    return op->emitOpError("positions must have shape [")
           << expected[0] << ", " << expected[1] << "] (batch, tokens), got "
           << type;
  return success();
}

LogicalResult AttentionOp::verify() {
  if (!getPositions())
    return success();
  if (!getCausal())
    return emitOpError("positions mask keys causally; they need `causal`");
  return verifyPositions(*this, getQuery().getType(), getPositions());
}

LogicalResult CacheWriteOp::verify() {
  RankedTensorType cache = getCache().getType(), update = getUpdate().getType();
  if (cache.getRank() != 4 || update.getRank() != 4)
    return emitOpError("cache and update must be [B, H, S, D] and [B, H, T, "
                       "D], got ranks ")
           << cache.getRank() << " and " << update.getRank();
  if (cache.getElementType() != update.getElementType())
    return emitOpError("cache and update must have one element type, got ")
           << cache.getElementType() << " and " << update.getElementType();
  for (int64_t d : {0, 1, 3})
    if (cache.getDimSize(d) != update.getDimSize(d))
      return emitOpError("cache ")
             << cache << " and update " << update
             << " differ in batch, heads or head size";
  if (update.getDimSize(2) > cache.getDimSize(2))
    return emitOpError("update has ")
           << update.getDimSize(2) << " tokens, more than the cache's "
           << cache.getDimSize(2) << " slots";
  return verifyPositions(*this, update, getPositions());
}

LogicalResult RotaryOp::verify() {
  RankedTensorType type = getInput().getType();
  if (type.getRank() < 2)
    return emitOpError("input must have rank >= 2 [..., T, D], got ")
           << type.getRank();
  if (getPositions() &&
      failed(verifyPositions(*this, type, getPositions())))
    return failure();
  if (type.getShape().back() % 2 != 0)
    return emitOpError("head size must be even, got ")
           << type.getShape().back();
  double theta = getTheta().convertToDouble();
  if (!(theta > 1.0 && std::isfinite(theta)))
    return emitOpError("theta must be finite and greater than 1, got ")
           << theta;
  return success();
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *ctx,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &results) {
  Inference inf = inference<CrossEntropyOp>(loc);
  auto logits = inf.floatTensor(adaptor.getLogits(), "logits");
  auto targets = inf.indexTensor(adaptor.getTargets(), "targets");
  if (failed(logits) || failed(targets) ||
      failed(checkCrossEntropy(inf, *logits, *targets)))
    return failure();
  results.push_back(RankedTensorType::get({}, f32(ctx)));
  results.push_back(RankedTensorType::get(targets->getShape(), f32(ctx)));
  return success();
}

LogicalResult VocabShardMaxOp::inferReturnTypes(MLIRContext *ctx,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &results) {
  Inference inf = inference<VocabShardMaxOp>(loc, adaptor.getAttributes());
  auto logits = inf.floatTensor(adaptor.getLogits(), "logits");
  if (failed(logits) || failed(checkVocabShard(inf)))
    return failure();
  if (logits->getRank() < 1)
    return inf.fail("logits must have rank >= 1");
  results.push_back(
      RankedTensorType::get(logits->getShape().drop_back(), f32(ctx)));
  return success();
}

LogicalResult VocabShardCrossEntropyOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  Inference inf =
      inference<VocabShardCrossEntropyOp>(loc, adaptor.getAttributes());
  auto logits = inf.floatTensor(adaptor.getLogits(), "logits");
  auto targets = inf.indexTensor(adaptor.getTargets(), "targets");
  if (failed(logits) || failed(targets) ||
      failed(checkCrossEntropy(inf, *logits, *targets)) ||
      failed(checkRowStatistic(inf, adaptor.getMax(), "max",
                               targets->getShape())) ||
      failed(checkVocabShard(inf)))
    return failure();
  auto row = RankedTensorType::get(targets->getShape(), f32(ctx));
  results.append({row, row});
  return success();
}

LogicalResult CrossEntropyCombineOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  Inference inf = inference<CrossEntropyCombineOp>(loc);
  auto max = inf.tensor(adaptor.getMax(), "max");
  if (failed(max))
    return failure();
  for (auto [value, what] :
       {std::pair{adaptor.getMax(), "max"}, {adaptor.getSumExp(), "sum_exp"},
        {adaptor.getTargetLogit(), "target_logit"}})
    if (failed(checkRowStatistic(inf, value, what, max->getShape())))
      return failure();
  results.push_back(RankedTensorType::get({}, f32(ctx)));
  results.push_back(*max);
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("changes the element count from ")
           << in.getNumElements() << " " << shapeString(in.getShape()) << " to "
           << out.getNumElements() << " " << shapeString(out.getShape());
  if (in.getElementType() != out.getElementType())
    return emitOpError("changes the element type from ")
           << in.getElementType() << " to " << out.getElementType();
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // reshape(reshape(x)) is one reshape of x.
  if (auto producer = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(producer.getInput());
    return getResult();
  }
  return {};
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  Inference inf = inference<TransposeOp>(loc, adaptor.getAttributes());
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  FailureOr<ArrayRef<int64_t>> permutation = inf.i64ArrayAttr("permutation");
  if (failed(input) || failed(permutation))
    return failure();
  ArrayRef<int64_t> perm = *permutation;
  int64_t rank = input->getRank();
  SmallVector<bool> seen(rank, false);
  bool valid = static_cast<int64_t>(perm.size()) == rank;
  for (int64_t p : perm) {
    if (!valid || p < 0 || p >= rank || seen[p]) {
      valid = false;
      break;
    }
    seen[p] = true;
  }
  if (!valid)
    return inf.fail("permutation ", shapeString(perm),
                    " is not a permutation of the ", rank, " dimensions");
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(input->getDimSize(p));
  results.push_back(RankedTensorType::get(shape, input->getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  Inference inf = inference<SliceOp>(loc, adaptor.getAttributes());
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  FailureOr<ArrayRef<int64_t>> offsetsAttr = inf.i64ArrayAttr("offsets");
  FailureOr<ArrayRef<int64_t>> sizesAttr = inf.i64ArrayAttr("sizes");
  if (failed(input) || failed(offsetsAttr) || failed(sizesAttr))
    return failure();
  ArrayRef<int64_t> offsets = *offsetsAttr, sizes = *sizesAttr;
  int64_t rank = input->getRank();
  if (static_cast<int64_t>(offsets.size()) != rank ||
      static_cast<int64_t>(sizes.size()) != rank)
    return inf.fail("needs one offset and one size per dimension (", rank,
                    "), got ", offsets.size(), " offsets and ", sizes.size(),
                    " sizes");
  for (int64_t d = 0; d < rank; ++d) {
    // Written so that huge offsets or sizes cannot overflow.
    int64_t dimSize = input->getDimSize(d);
    if (offsets[d] < 0 || sizes[d] < 1 || offsets[d] > dimSize ||
        sizes[d] > dimSize - offsets[d])
      return inf.fail("block at offset ", offsets[d], " of size ", sizes[d],
                      " does not fit in dimension ", d, " of size ", dimSize);
  }
  results.push_back(RankedTensorType::get(sizes, input->getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  Inference inf = inference<ConcatOp>(loc, adaptor.getAttributes());
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return inf.fail("needs at least one input");
  auto first = inf.floatTensor(inputs.front(), "input #0");
  FailureOr<int64_t> dimAttr = inf.i64Attr("dim");
  if (failed(first) || failed(dimAttr))
    return failure();
  int64_t rank = first->getRank(), dim = *dimAttr;
  if (dim < 0 || dim >= rank)
    return inf.fail("dim ", dim, " is out of range for rank ", rank);
  SmallVector<int64_t> shape(first->getShape());
  for (auto [index, value] : llvm::enumerate(inputs)) {
    if (index == 0)
      continue;
    std::string name = "input #" + std::to_string(index);
    auto type = inf.floatTensor(value, name);
    if (failed(type) ||
        failed(inf.sameElementType(*first, "input #0", *type, name)))
      return failure();
    if (type->getRank() != rank)
      return inf.fail("inputs must have one rank, got ", rank, " and ",
                      type->getRank());
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && type->getDimSize(d) != shape[d])
        return inf.fail("inputs differ in dimension ", d, " (", shape[d],
                        " vs ", type->getDimSize(d),
                        "), which is not the concatenated one");
    shape[dim] += type->getDimSize(dim);
  }
  results.push_back(RankedTensorType::get(shape, first->getElementType()));
  return success();
}

LogicalResult BroadcastOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("changes the element type from ")
           << in.getElementType() << " to " << out.getElementType();
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(in.getShape(), out.getShape());
  if (!shape || ArrayRef<int64_t>(*shape) != out.getShape())
    return emitOpError("cannot broadcast ")
           << shapeString(in.getShape()) << " to "
           << shapeString(out.getShape());
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename OpT>
static LogicalResult inferReduce(std::optional<Location> loc,
                                 typename OpT::Adaptor adaptor,
                                 SmallVectorImpl<Type> &results) {
  Inference inf = inference<OpT>(loc, adaptor.getAttributes());
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  FailureOr<ArrayRef<int64_t>> dimsAttr = inf.i64ArrayAttr("dims");
  FailureOr<bool> keepDims = inf.unitAttr("keep_dims");
  if (failed(input) || failed(dimsAttr) || failed(keepDims))
    return failure();
  ArrayRef<int64_t> dims = *dimsAttr;
  int64_t rank = input->getRank();
  if (dims.empty())
    return inf.fail("needs at least one dimension to reduce");
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0 || dims[i] >= rank || (i > 0 && dims[i] <= dims[i - 1]))
      return inf.fail("dims ", shapeString(dims),
                      " must be strictly increasing and in [0, ", rank, ")");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!llvm::is_contained(dims, d))
      shape.push_back(input->getDimSize(d));
    else if (*keepDims)
      shape.push_back(1);
  }
  results.push_back(RankedTensorType::get(shape, input->getElementType()));
  return success();
}

#define LLMC_REDUCE_INFER(OpT)                                                 \
  LogicalResult OpT::inferReturnTypes(                                         \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &results) {                                        \
    return inferReduce<OpT>(loc, adaptor, results);                            \
  }
LLMC_REDUCE_INFER(ReduceSumOp)
LLMC_REDUCE_INFER(ReduceMeanOp)
LLMC_REDUCE_INFER(ReduceMaxOp)
#undef LLMC_REDUCE_INFER

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

LogicalResult
LayerNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &results) {
  Inference inf = inference<LayerNormGradOp>(loc);
  auto grad = inf.floatTensor(adaptor.getGrad(), "grad");
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  auto weight = inf.floatTensor(adaptor.getWeight(), "weight");
  auto mean = inf.floatTensor(adaptor.getMean(), "mean");
  auto rstd = inf.floatTensor(adaptor.getRstd(), "rstd");
  if (failed(grad) || failed(input) || failed(weight) || failed(mean) ||
      failed(rstd))
    return failure();
  if (*grad != *input)
    return inf.fail("grad must have the input's type ", *input, ", got ",
                    *grad);
  auto stats = normStatistics(inf, *input, *weight, "weight");
  if (failed(stats))
    return failure();
  if (*mean != *stats || *rstd != *stats)
    return inf.fail("mean and rstd must have type ", *stats, ", got ", *mean,
                    " and ", *rstd);
  results.append({*input, *weight, *weight});
  return success();
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &results) {
  Inference inf = inference<RmsNormGradOp>(loc);
  auto grad = inf.floatTensor(adaptor.getGrad(), "grad");
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  auto weight = inf.floatTensor(adaptor.getWeight(), "weight");
  auto rstd = inf.floatTensor(adaptor.getRstd(), "rstd");
  if (failed(grad) || failed(input) || failed(weight) || failed(rstd))
    return failure();
  if (*grad != *input)
    return inf.fail("grad must have the input's type ", *input, ", got ",
                    *grad);
  auto stats = normStatistics(inf, *input, *weight, "weight");
  if (failed(stats))
    return failure();
  if (*rstd != *stats)
    return inf.fail("rstd must have type ", *stats, ", got ", *rstd);
  results.append({*input, *weight});
  return success();
}

LogicalResult
AttentionGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &results) {
  Inference inf = inference<AttentionGradOp>(loc, adaptor.getAttributes());
  auto types = inferAttention(inf, adaptor.getQuery(), adaptor.getKey(),
                              adaptor.getValue());
  if (failed(types))
    return failure();
  auto grad = inf.floatTensor(adaptor.getGrad(), "grad");
  auto output = inf.floatTensor(adaptor.getOutput(), "output");
  auto lse = inf.floatTensor(adaptor.getLse(), "lse");
  if (failed(grad) || failed(output) || failed(lse))
    return failure();
  if (*grad != types->first || *output != types->first)
    return inf.fail("grad and output must have the forward output's type ",
                    types->first, ", got ", *grad, " and ", *output);
  if (*lse != types->second)
    return inf.fail("lse must have type ", types->second, ", got ", *lse);
  results.append({adaptor.getQuery().getType(), adaptor.getKey().getType(),
                  adaptor.getValue().getType()});
  return success();
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  Inference inf = inference<CrossEntropyGradOp>(loc);
  auto logits = inf.floatTensor(adaptor.getLogits(), "logits");
  auto targets = inf.indexTensor(adaptor.getTargets(), "targets");
  auto lse = inf.floatTensor(adaptor.getLse(), "lse");
  if (failed(logits) || failed(targets) || failed(lse) ||
      failed(checkCrossEntropy(inf, *logits, *targets)))
    return failure();
  auto expected = RankedTensorType::get(targets->getShape(), f32(ctx));
  if (*lse != expected)
    return inf.fail("lse must have type ", expected, ", got ", *lse);
  results.push_back(*logits);
  return success();
}

LogicalResult VocabShardCrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  Inference inf =
      inference<VocabShardCrossEntropyGradOp>(loc, adaptor.getAttributes());
  auto logits = inf.floatTensor(adaptor.getLogits(), "logits");
  auto targets = inf.indexTensor(adaptor.getTargets(), "targets");
  if (failed(logits) || failed(targets) ||
      failed(checkCrossEntropy(inf, *logits, *targets)) ||
      failed(checkVocabShard(inf)))
    return failure();
  for (auto [value, what] :
       {std::pair{adaptor.getSumExpGrad(), "sum_exp_grad"},
        {adaptor.getTargetLogitGrad(), "target_logit_grad"},
        {adaptor.getMax(), "max"}})
    if (failed(checkRowStatistic(inf, value, what, targets->getShape())))
      return failure();
  results.push_back(*logits);
  return success();
}

#define GET_OP_CLASSES
#include "ir/LlmcOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Op categories
//===----------------------------------------------------------------------===//

bool mlir::llmc::isRowReduction(Operation *op) {
  auto row = dyn_cast<RowReductionOpInterface>(op);
  return row && row.reducesRows();
}

AmpCategory mlir::llmc::getAmpCategory(OperationName name) {
  if (name.hasTrait<OpTrait::llmc::AmpAllow>())
    return AmpCategory::Allow;
  if (name.hasTrait<OpTrait::llmc::AmpDeny>())
    return AmpCategory::Deny;
  if (name.hasTrait<OpTrait::llmc::AmpExempt>())
    return AmpCategory::Exempt;
  return AmpCategory::Follow;
}

namespace {
template <typename OpT>
constexpr AmpCategory ampCategoryOf() {
  if constexpr (OpT::template hasTrait<OpTrait::llmc::AmpAllow>())
    return AmpCategory::Allow;
  else if constexpr (OpT::template hasTrait<OpTrait::llmc::AmpDeny>())
    return AmpCategory::Deny;
  else if constexpr (OpT::template hasTrait<OpTrait::llmc::AmpExempt>())
    return AmpCategory::Exempt;
  else
    return AmpCategory::Follow;
}

template <typename... Ops>
SmallVector<StringRef> opNamesOfAmpCategory(AmpCategory category) {
  SmallVector<StringRef> names;
  (
      [&] {
        if (ampCategoryOf<Ops>() == category)
          names.push_back(Ops::getOperationName());
      }(),
      ...);
  return names;
}
} // namespace

SmallVector<StringRef>
mlir::llmc::getOpNamesOfAmpCategory(AmpCategory category) {
  return opNamesOfAmpCategory<
#define GET_OP_LIST
#include "ir/LlmcOps.cpp.inc"
      >(category);
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

bool mlir::llmc::isMeshAxis(StringRef axis) {
  return llvm::is_contained(kMeshAxes, axis);
}

// Checks `axis` and `axis_size`; returns the size.
static FailureOr<int64_t> meshAxisSize(const Inference &inf) {
  auto axis = inf.required<StringAttr>("axis", "a string");
  FailureOr<int64_t> size = inf.i64Attr("axis_size");
  if (failed(axis) || failed(size))
    return failure();
  if (!isMeshAxis(axis->getValue()))
    return inf.fail("axis '", axis->getValue(),
                    "' is not a mesh axis (dp, tp or pp)");
  if (*size < 1)
    return inf.fail("axis_size must be at least 1, got ", *size);
  return *size;
}

// The shape of `input` with dimension `dim` cut into axis_size blocks
// (reduce_scatter: `gather` false, one block) or joined from them
// (all_gather), after checking the axis and `dim`.
static FailureOr<RankedTensorType> blockedType(const Inference &inf,
                                               RankedTensorType input,
                                               bool gather) {
  FailureOr<int64_t> size = meshAxisSize(inf);
  FailureOr<int64_t> dim = inf.i64Attr("dim");
  if (failed(size) || failed(dim))
    return failure();
  if (*dim < 0 || *dim >= input.getRank())
    return inf.fail("dim ", *dim, " is out of range for rank ",
                    input.getRank());
  SmallVector<int64_t> shape(input.getShape());
  if (gather) {
    shape[*dim] *= *size;
  } else {
    if (shape[*dim] % *size != 0)
      return inf.fail("dimension ", *dim, " of size ", shape[*dim],
                      " does not split into ", *size, " equal blocks");
    shape[*dim] /= *size;
  }
  return RankedTensorType::get(shape, input.getElementType());
}

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  Inference inf = inference<AllReduceOp>(loc, adaptor.getAttributes());
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  if (failed(input) || failed(meshAxisSize(inf)))
    return failure();
  results.push_back(*input);
  return success();
}

LogicalResult CopyToAxisOp::verify() {
  if (!isMeshAxis(getAxis()))
    return emitOpError("axis '")
           << getAxis() << "' is not a mesh axis (dp, tp or pp)";
  if (getAxisSize() < 1)
    return emitOpError("axis_size must be at least 1, got ") << getAxisSize();
  return success();
}

LogicalResult
ReduceScatterOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &results) {
  Inference inf = inference<ReduceScatterOp>(loc, adaptor.getAttributes());
  auto input = inf.floatTensor(adaptor.getInput(), "input");
  if (failed(input))
    return failure();
  FailureOr<RankedTensorType> result = blockedType(inf, *input, false);
  if (failed(result))
    return failure();
  results.push_back(*result);
  return success();
}

LogicalResult AllGatherOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  Inference inf = inference<AllGatherOp>(loc, adaptor.getAttributes());
  auto input = inf.tensor(adaptor.getInput(), "input");
  if (failed(input))
    return failure();
  FailureOr<RankedTensorType> result = blockedType(inf, *input, true);
  if (failed(result))
    return failure();
  results.push_back(*result);
  return success();
}

LogicalResult
BroadcastFromOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &results) {
  Inference inf = inference<BroadcastFromOp>(loc, adaptor.getAttributes());
  auto input = inf.tensor(adaptor.getInput(), "input");
  if (failed(input))
    return failure();
  FailureOr<int64_t> size = meshAxisSize(inf);
  FailureOr<int64_t> root = inf.i64Attr("root");
  if (failed(size) || failed(root))
    return failure();
  if (*root < 0 || *root >= *size)
    return inf.fail("root ", *root, " is not a rank of an axis of size ",
                    *size);
  results.push_back(*input);
  return success();
}

//===----------------------------------------------------------------------===//
// Pipeline transfers
//===----------------------------------------------------------------------===//

/// A transfer goes to a neighbouring stage of a pipeline of `stages`.
static LogicalResult verifyPipelinePeer(Operation *op, int64_t peer,
                                        int64_t stages) {
  if (stages < 2)
    return op->emitOpError("needs a pipeline of at least 2 stages, got ")
           << stages;
  if (peer < 0 || peer >= stages)
    return op->emitOpError("peer stage ")
           << peer << " is not a stage of a pipeline of " << stages;
  return success();
}

LogicalResult PipelineSendOp::verify() {
  return verifyPipelinePeer(*this, getPeer(), getStages());
}

LogicalResult PipelineRecvOp::verify() {
  return verifyPipelinePeer(*this, getPeer(), getStages());
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

LogicalResult FusionOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs but its body "
                               << "takes " << body.getNumArguments();
  for (auto [index, input, arg] :
       llvm::enumerate(getInputs(), body.getArguments()))
    if (input.getType() != arg.getType())
      return emitOpError("input ")
             << index << " has type " << input.getType()
             << " but its block argument has " << arg.getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end in llmc.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ")
           << yield.getValues().size() << " values whose types differ from "
           << "the results";
  for (Operation &op : body.without_terminator()) {
    if (!isa<LlmcDialect>(op.getDialect()) || isa<FusionOp>(op))
      return op.emitOpError("cannot be inside llmc.fusion");
  }
  return success();
}
