// Scalar expansion: a fusion group (or an unfused op) becomes one kernel
// whose ops are expanded into kir instructions over the group's domain, one
// helper per op category.

#include "codegen/LlmcToKernel/LoweringState.h"

#include <cmath>
#include <limits>

namespace mlir::llmc::lowering {

FailureOr<int32_t> Lowering::loadWithMap(KernelBuilder &kb, Value value,
                                         ArrayRef<int> map) {
  Value source = outer.count(value) ? outer.lookup(value) : value;
  auto splat = splats.find(source);
  if (splat != splats.end() && !views.count(source)) {
    auto elem = cast<RankedTensorType>(source.getType()).getElementType();
    return isa<FloatType>(elem) ? kb.constant(splat->second)
                                : kb.intConstant(int64_t(splat->second));
  }
  FailureOr<TensorView> view = viewOf(source);
  if (failed(view))
    return failure();
  return kb.load(*view, map);
}

FailureOr<int32_t> Lowering::scalarOf(KernelBuilder &kb, Value value,
                                      ArrayRef<int> resultMap,
                                      ArrayRef<int64_t> resultShape) {
  // Broadcast against the result (NumPy rule: aligned at the last
  // dimension; size-1 dimensions repeat).
  ArrayRef<int64_t> shape = cast<RankedTensorType>(value.getType()).getShape();
  size_t lead = resultShape.size() - shape.size();
  SmallVector<int> map;
  for (size_t i = 0; i < shape.size(); ++i)
    map.push_back(shape[i] == 1 && resultShape[lead + i] != 1
                      ? -1
                      : resultMap[lead + i]);
  auto it = scalars.find(value);
  if (it == scalars.end())
    return loadWithMap(kb, value, map); // a kernel input
  // A value of the kernel is at hand only at the current domain index.
  if (dimMaps.lookup(value) != map)
    return emitError(value.getLoc(), "internal error: a fused value is used "
                                     "with a broadcast that needs another "
                                     "index");
  return it->second;
}

/// Rounds the f16/bf16 results of `op`, an op of a fusion expanded into `kb`,
/// that other ops of the same kernel read: a kernel computes in f32, and
/// without this a value kept in a register would be more precise than the
/// same value stored and loaded again, so results would depend on where
/// fusion draws kernel boundaries (activation checkpointing regroups ops).
/// Rounded here, every narrow value is what its IR type says, and a kernel
/// computes the same bits as its ops unfused. A result that only the yield
/// reads is left to the store, which rounds it anyway; an unfused op's
/// results are only stored.
void Lowering::roundNarrowResults(KernelBuilder &kb, Operation *op) {
  if (!isa<FusionOp>(op->getParentOp()))
    return;
  for (Value result : op->getResults()) {
    auto type = dyn_cast<RankedTensorType>(result.getType());
    if (!type)
      continue;
    Type elem = type.getElementType();
    if (!elem.isF16() && !elem.isBF16())
      continue;
    bool usedInside = llvm::any_of(result.getUsers(), [](Operation *user) {
      return !isa<YieldOp>(user);
    });
    auto it = scalars.find(result);
    if (!usedInside || it == scalars.end())
      continue;
    it->second = kb.unary(elem.isF16() ? KOp::RoundF16 : KOp::RoundBF16,
                          it->second);
  }
}

/// One op being expanded into a kernel: the maps of its result over the
/// kernel's domain, which every op category's helper reads.
struct ExpandFrame {
  ExpandFrame(KernelBuilder &kb, Operation *op)
      : kb(kb), op(op), rank(kb.kernel.domain.size()),
        full(identityMap(rank)), rowLevel(full.begin(), full.end() - 1),
        resultMap(full), rowLength(kb.kernel.domain.back()) {
    // The result map of elementwise ops: that of their full-shape operand
    // (every op in a group has the group's shape or is a row statistic).
    if (op->getNumResults() > 0)
      resultShape =
          cast<RankedTensorType>(op->getResult(0).getType()).getShape();
    // A result of lower rank than the domain is row-level (a row statistic,
    // or a rank-0 value of a scalar group run over the padded domain [1]):
    // its dimensions are the leading ones.
    if (resultShape.size() < full.size())
      resultMap.resize(resultShape.size());
  }

  KernelBuilder &kb;
  Operation *op;
  int rank;
  SmallVector<int> full;     // the domain's own dims
  SmallVector<int> rowLevel; // the domain without its row (row statistics)
  ArrayRef<int64_t> resultShape;
  SmallVector<int> resultMap;
  int64_t rowLength;
};

static double inv(int64_t n) { return 1.0 / double(n); }

FailureOr<int32_t> Lowering::arg(ExpandFrame &f, unsigned index) {
  return scalarOf(f.kb, f.op->getOperand(index), f.resultMap, f.resultShape);
}

void Lowering::define(Value result, int32_t scalar, ArrayRef<int> map) {
  scalars[result] = scalar;
  dimMaps[result] = SmallVector<int>(map.begin(), map.end());
}

FailureOr<int32_t> Lowering::rowScalar(ExpandFrame &f, Value value) {
  auto it = scalars.find(value);
  if (it != scalars.end() && dimMaps.lookup(value) == f.rowLevel)
    return it->second;
  return loadWithMap(f.kb, value, f.rowLevel);
}

LogicalResult Lowering::expand(KernelBuilder &kb, Operation *op) {
  ExpandFrame f(kb, op);
  if (std::optional<LogicalResult> done = expandArithmetic(f))
    return *done;
  if (std::optional<LogicalResult> done = expandActivation(f))
    return *done;
  if (auto dropout = dyn_cast<DropoutOp>(op))
    return expandDropout(f, dropout);
  if (std::optional<LogicalResult> done = expandActivationGrad(f))
    return *done;
  if (auto embedding = dyn_cast<EmbeddingOp>(op))
    return expandEmbedding(f, embedding);
  if (auto rotary = dyn_cast<RotaryOp>(op))
    return expandRotary(f, rotary);
  if (std::optional<LogicalResult> done = expandRowReduction(f))
    return *done;
  if (std::optional<LogicalResult> done = expandRowGrad(f))
    return *done;
  return op->emitOpError("is not supported inside a kernel by code generation");
}

std::optional<LogicalResult> Lowering::expandArithmetic(ExpandFrame &f) {
  KernelBuilder &kb = f.kb;
  Operation *op = f.op;
  auto binaryOp = [&](KOp kop) -> LogicalResult {
    FailureOr<int32_t> a = arg(f, 0), b = arg(f, 1);
    if (failed(a) || failed(b))
      return failure();
    define(op->getResult(0), kb.binary(kop, *a, *b), f.resultMap);
    return success();
  };
  if (isa<AddOp>(op))
    return binaryOp(KOp::Add);
  if (isa<SubOp>(op))
    return binaryOp(KOp::Sub);
  if (isa<MulOp>(op))
    return binaryOp(KOp::Mul);
  if (isa<DivOp>(op))
    return binaryOp(KOp::Div);
  if (isa<MaxOp>(op))
    return binaryOp(KOp::Max);
  // Flags (i1) and selection. x - x is 0 for every finite x and NaN for
  // inf and NaN; no emitter uses fast-math flags that would fold it.
  if (isa<IsFiniteOp>(op)) {
    FailureOr<int32_t> x = arg(f, 0);
    if (failed(x))
      return failure();
    define(op->getResult(0),
           kb.emit(KOp::CmpEq, DType::I1,
                   {kb.binary(KOp::Sub, *x, *x), kb.constant(0.0)}),
           f.resultMap);
    return success();
  }
  if (auto compare = dyn_cast<CompareOp>(op)) {
    KOp kop = compare.getPredicate() == ComparePredicate::LT   ? KOp::CmpLt
              : compare.getPredicate() == ComparePredicate::LE ? KOp::CmpLe
                                                               : KOp::CmpEq;
    FailureOr<int32_t> a = arg(f, 0), b = arg(f, 1);
    if (failed(a) || failed(b))
      return failure();
    define(op->getResult(0), kb.emit(kop, DType::I1, {*a, *b}), f.resultMap);
    return success();
  }
  if (isa<SelectOp>(op)) {
    FailureOr<int32_t> c = arg(f, 0), a = arg(f, 1), b = arg(f, 2);
    if (failed(c) || failed(a) || failed(b))
      return failure();
    define(op->getResult(0), kb.emit(KOp::Select, DType::F32, {*c, *a, *b}),
           f.resultMap);
    return success();
  }
  return std::nullopt;
}

std::optional<LogicalResult> Lowering::expandActivation(ExpandFrame &f) {
  KernelBuilder &kb = f.kb;
  Operation *op = f.op;
  auto unaryOp = [&](auto fn) -> LogicalResult {
    FailureOr<int32_t> x = arg(f, 0);
    if (failed(x))
      return failure();
    define(op->getResult(0), fn(*x), f.resultMap);
    return success();
  };
  static const std::pair<StringRef, KOp> unaries[] = {
      {"llmc.neg", KOp::Neg},   {"llmc.exp", KOp::Exp},
      {"llmc.log", KOp::Log},   {"llmc.tanh", KOp::Tanh},
      {"llmc.sqrt", KOp::Sqrt}, {"llmc.rsqrt", KOp::Rsqrt}};
  for (auto [name, kop] : unaries)
    if (op->getName().getStringRef() == name)
      return unaryOp([&, kop = kop](int32_t x) { return kb.unary(kop, x); });
  if (isa<ReluOp>(op))
    return unaryOp([&](int32_t x) {
      return kb.binary(KOp::Max, x, kb.constant(0.0));
    });
  if (isa<SiluOp>(op))
    return unaryOp([&](int32_t x) {
      // x * sigmoid(x) = x / (1 + exp(-x))
      int32_t e = kb.unary(KOp::Exp, kb.unary(KOp::Neg, x));
      return kb.binary(KOp::Div, x, kb.binary(KOp::Add, kb.constant(1.0), e));
    });
  if (auto gelu = dyn_cast<GeluOp>(op))
    return unaryOp([&](int32_t x) {
      int32_t inner;
      if (gelu.getApproximate() == GeluApproximation::Tanh) {
        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        int32_t x3 = kb.binary(KOp::Mul, kb.binary(KOp::Mul, x, x), x);
        int32_t poly = kb.binary(
            KOp::Add, x, kb.binary(KOp::Mul, kb.constant(0.044715), x3));
        inner = kb.unary(KOp::Tanh,
                         kb.binary(KOp::Mul,
                                   kb.constant(std::sqrt(2.0 / M_PI)), poly));
      } else {
        // 0.5 x (1 + erf(x / sqrt(2)))
        inner = kb.unary(KOp::Erf, kb.binary(KOp::Mul, x,
                                            kb.constant(1.0 / std::sqrt(2.0))));
      }
      int32_t half = kb.binary(KOp::Mul, kb.constant(0.5), x);
      return kb.binary(KOp::Mul, half,
                       kb.binary(KOp::Add, kb.constant(1.0), inner));
    });
  if (isa<CastOp>(op)) {
    // Values compute in f32: widening is exact, and a narrowing cast is
    // rounded like any narrow result (roundNarrowResults, or the store).
    return unaryOp([](int32_t x) { return x; });
  }
  return std::nullopt;
}

LogicalResult Lowering::expandDropout(ExpandFrame &f, DropoutOp dropout) {
  KernelBuilder &kb = f.kb;
  if (dropout.getRate().isZero()) {
    FailureOr<int32_t> x = arg(f, 0);
    if (failed(x))
      return failure();
    define(dropout.getResult(), *x, f.resultMap);
    return success();
  }
  // Element i (row-major in the dropout's tensor) is kept iff
  // Random(seed, (step << 32) | stream, i) >= rate (see kir::Op::Random).
  int64_t stream = dropout.getStreamAttr().getInt();
  if (stream >= (int64_t(1) << 32))
    return dropout.emitOpError("code generation needs dropout streams below "
                               "2^32, got ")
           << stream;
  FailureOr<int32_t> x = arg(f, 0);
  if (failed(x))
    return failure();
  int32_t seed = kb.load(rngElement(0), {-1});
  int32_t step = kb.load(rngElement(1), {-1});
  int32_t high = kb.binary(
      KOp::Add, kb.binary(KOp::Mul, step, kb.intConstant(int64_t(1) << 32)),
      kb.intConstant(stream));
  // A block of a whole tensor (sequence parallelism) indexes the whole
  // tensor: coordinates shifted by the block's offsets, strides of the
  // whole shape.
  SmallVector<int64_t> strides = contiguousStrides(
      dropout.getWholeShape() ? SmallVector<int64_t>(*dropout.getWholeShape())
                              : SmallVector<int64_t>(f.resultShape));
  SmallVector<int64_t> offsets(f.resultShape.size(), 0);
  if (std::optional<ArrayRef<int64_t>> o = dropout.getOffsets())
    offsets.assign(o->begin(), o->end());
  int64_t base = 0;
  for (auto [d, offset] : llvm::enumerate(offsets))
    base += offset * strides[d];
  int32_t flat = -1;
  for (auto [d, dim] : llvm::enumerate(f.resultMap)) {
    if (dim < 0 || f.resultShape[d] == 1)
      continue;
    int32_t term = kb.index(dim);
    if (strides[d] != 1)
      term = kb.binary(KOp::Mul, term, kb.intConstant(strides[d]));
    flat = flat < 0 ? term : kb.binary(KOp::Add, flat, term);
  }
  if (base != 0)
    flat = flat < 0 ? kb.intConstant(base)
                    : kb.binary(KOp::Add, flat, kb.intConstant(base));
  if (flat < 0)
    flat = kb.intConstant(0);
  int32_t random = kb.emit(KOp::Random, DType::F32, {seed, high, flat});
  float rate = dropout.getRate().convertToFloat();
  int32_t keep =
      kb.emit(KOp::CmpLe, DType::I1, {kb.constant(double(rate)), random});
  int32_t scaled =
      kb.binary(KOp::Mul, *x, kb.constant(double(1.0f / (1.0f - rate))));
  define(dropout.getResult(),
         kb.emit(KOp::Select, DType::F32, {keep, scaled, kb.constant(0.0)}),
         f.resultMap);
  return success();
}

std::optional<LogicalResult> Lowering::expandActivationGrad(ExpandFrame &f) {
  KernelBuilder &kb = f.kb;
  Operation *op = f.op;
  // grad * f'(x).
  auto activationGrad = [&](auto derivative) -> LogicalResult {
    FailureOr<int32_t> g = arg(f, 0), x = arg(f, 1);
    if (failed(g) || failed(x))
      return failure();
    define(op->getResult(0), kb.binary(KOp::Mul, *g, derivative(*x)),
           f.resultMap);
    return success();
  };
  if (isa<ReluGradOp>(op))
    return activationGrad([&](int32_t x) {
      int32_t positive = kb.emit(KOp::CmpLt, DType::I1, {kb.constant(0.0), x});
      return kb.emit(KOp::Select, DType::F32,
                     {positive, kb.constant(1.0), kb.constant(0.0)});
    });
  if (isa<SiluGradOp>(op))
    return activationGrad([&](int32_t x) {
      // s (1 + x (1 - s)), s = sigmoid(x)
      int32_t one = kb.constant(1.0);
      int32_t sig = kb.binary(
          KOp::Div, one,
          kb.binary(KOp::Add, one, kb.unary(KOp::Exp, kb.unary(KOp::Neg, x))));
      int32_t inner = kb.binary(
          KOp::Add, one, kb.binary(KOp::Mul, x, kb.binary(KOp::Sub, one, sig)));
      return kb.binary(KOp::Mul, sig, inner);
    });
  if (auto gelu = dyn_cast<GeluGradOp>(op))
    return activationGrad([&](int32_t x) {
      return gelu.getApproximate() == GeluApproximation::Tanh
                 ? geluTanhDerivative(kb, x)
                 : geluErfDerivative(kb, x);
    });
  return std::nullopt;
}

int32_t Lowering::geluTanhDerivative(KernelBuilder &kb, int32_t x) {
  // 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
  // t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
  int32_t one = kb.constant(1.0), half = kb.constant(0.5);
  int32_t x2 = kb.binary(KOp::Mul, x, x);
  double k = std::sqrt(2.0 / M_PI);
  int32_t poly = kb.binary(
      KOp::Add, x,
      kb.binary(KOp::Mul, kb.constant(0.044715), kb.binary(KOp::Mul, x2, x)));
  int32_t t = kb.unary(KOp::Tanh, kb.binary(KOp::Mul, kb.constant(k), poly));
  int32_t left = kb.binary(KOp::Mul, half, kb.binary(KOp::Add, one, t));
  int32_t sech2 = kb.binary(KOp::Sub, one, kb.binary(KOp::Mul, t, t));
  int32_t dpoly = kb.binary(
      KOp::Add, kb.constant(k),
      kb.binary(KOp::Mul, kb.constant(k * 3.0 * 0.044715), x2));
  int32_t right = kb.binary(KOp::Mul, kb.binary(KOp::Mul, half, x),
                            kb.binary(KOp::Mul, sech2, dpoly));
  return kb.binary(KOp::Add, left, right);
}

int32_t Lowering::geluErfDerivative(KernelBuilder &kb, int32_t x) {
  // 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)
  int32_t one = kb.constant(1.0), half = kb.constant(0.5);
  int32_t x2 = kb.binary(KOp::Mul, x, x);
  int32_t cdf = kb.binary(
      KOp::Mul, half,
      kb.binary(KOp::Add, one,
                kb.unary(KOp::Erf,
                         kb.binary(KOp::Mul, x,
                                   kb.constant(1.0 / std::sqrt(2.0))))));
  int32_t pdf = kb.binary(
      KOp::Mul, kb.constant(1.0 / std::sqrt(2.0 * M_PI)),
      kb.unary(KOp::Exp, kb.binary(KOp::Mul, kb.constant(-0.5), x2)));
  return kb.binary(KOp::Add, cdf, kb.binary(KOp::Mul, x, pdf));
}

LogicalResult Lowering::expandEmbedding(ExpandFrame &f, EmbeddingOp embedding) {
  KernelBuilder &kb = f.kb;
  int rank = f.rank;
  // out[i..., c] = table[ids[i...], c]: the table is read with the domain's
  // first index replaced by the id (the row stride put on that dim).
  if (rank < 2)
    return embedding.emitOpError("code generation needs ids of rank >= 1");
  SmallVector<int> idsMap(f.rowLevel);
  FailureOr<int32_t> id = loadWithMap(kb, embedding.getIndices(), idsMap);
  Value tableValue = outer.count(embedding.getTable())
                         ? outer.lookup(embedding.getTable())
                         : embedding.getTable();
  FailureOr<TensorView> table = viewOf(tableValue);
  if (failed(id) || failed(table))
    return failure();
  int32_t index = kb.operand(*table, {-1, rank - 1}, /*overrideDim=*/0,
                             /*overrideStride=*/table->strides[0]);
  std::optional<int64_t> start = embedding.getVocabStart();
  int32_t row = *id;
  if (start) {
    // A rank's block of the vocabulary: rows from vocab_start. The row is
    // clamped into the block (so the load stays inside the table) and
    // other ids give zeros.
    int64_t rows = table->shape[0];
    int32_t local = kb.binary(KOp::Sub, *id, kb.intConstant(*start));
    row = kb.binary(KOp::Min, kb.binary(KOp::Max, local, kb.intConstant(0)),
                    kb.intConstant(rows - 1));
    std::vector<int32_t> at(rank, -1);
    at[0] = row;
    int32_t value = kb.emit(KOp::Load, DType::F32, at, index);
    int32_t inside = kb.emit(KOp::CmpEq, DType::I1, {local, row});
    define(embedding.getResult(),
           kb.emit(KOp::Select, DType::F32, {inside, value, kb.constant(0.0)}),
           f.full);
    noteIdBound(embedding.getIndices(), *embedding.getVocabSize());
    return success();
  }
  std::vector<int32_t> at(rank, -1);
  at[0] = row;
  int32_t value = kb.emit(KOp::Load, DType::F32, at, index);
  define(embedding.getResult(), value, f.full);
  noteIdBound(embedding.getIndices(), table->shape[0]);
  return success();
}

int32_t Lowering::realVocabColumn(KernelBuilder &kb, int dim,
                                  int64_t vocabStart, int64_t vocabSize) {
  return kb.emit(KOp::CmpLt, DType::I1,
                 {kb.binary(KOp::Add, kb.index(dim), kb.intConstant(vocabStart)),
                  kb.intConstant(vocabSize)});
}

LogicalResult Lowering::expandRotary(ExpandFrame &f, RotaryOp rotary) {
  KernelBuilder &kb = f.kb;
  int rank = f.rank;
  int64_t rowLength = f.rowLength;
  // (x[i], x[i + D/2]) rotated by t * theta^(-2i/D), i < D/2, t the index
  // in the second-to-last dimension.
  if (rank < 2 || rowLength % 2 != 0)
    return rotary.emitOpError("code generation needs rank >= 2 and an even "
                              "last dimension");
  int64_t half = rowLength / 2;
  int32_t j = kb.emit(KOp::Index, DType::I64, {}, -1, rank - 1);
  int32_t halfC = kb.intConstant(half);
  int32_t lower = kb.emit(KOp::CmpLt, DType::I1, {j, halfC});
  int32_t pair = kb.binary(KOp::Rem, j, halfC);
  int32_t partner = kb.binary(KOp::Rem, kb.binary(KOp::Add, j, halfC),
                              kb.intConstant(rowLength));
  double logTheta = std::log(double(rotary.getTheta().convertToFloat()));
  int32_t freq = kb.unary(
      KOp::Exp,
      kb.binary(KOp::Mul, kb.emit(KOp::IToF, DType::F32, {pair}),
                kb.constant(-2.0 * logTheta / double(rowLength))));
  // The position: the token's index, or its place in the sequence.
  int32_t position;
  if (Value positions = rotary.getPositions()) {
    if (rank < 3)
      return rotary.emitOpError("code generation needs rank >= 3 with "
                                "positions");
    FailureOr<int32_t> loaded =
        loadWithMap(kb, positions, {f.full[0], f.full[rank - 2]});
    if (failed(loaded))
      return failure();
    position = *loaded;
  } else {
    position = kb.emit(KOp::Index, DType::I64, {}, -1, rank - 2);
  }
  int32_t t = kb.emit(KOp::IToF, DType::F32, {position});
  int32_t angle = kb.binary(KOp::Mul, t, freq);
  int32_t cosA = kb.unary(KOp::Cos, angle), sinA = kb.unary(KOp::Sin, angle);
  if (rotary.getInverse())
    sinA = kb.unary(KOp::Neg, sinA);
  Value input = outer.count(rotary.getInput()) ? outer.lookup(rotary.getInput())
                                               : rotary.getInput();
  FailureOr<TensorView> x = viewOf(input);
  if (failed(x))
    return failure();
  int32_t xi = kb.load(*x, f.full);
  std::vector<int32_t> at(rank, -1);
  at[rank - 1] = partner;
  int32_t xp = kb.emit(KOp::Load, DType::F32, at, kb.operand(*x, f.full));
  // lower half: x cos - partner sin; upper half: x cos + partner sin.
  int32_t signedSin =
      kb.emit(KOp::Select, DType::F32, {lower, kb.unary(KOp::Neg, sinA), sinA});
  int32_t result = kb.binary(KOp::Add, kb.binary(KOp::Mul, xi, cosA),
                             kb.binary(KOp::Mul, xp, signedSin));
  define(rotary.getResult(), result, f.full);
  return success();
}

std::optional<LogicalResult> Lowering::expandRowReduction(ExpandFrame &f) {
  KernelBuilder &kb = f.kb;
  Operation *op = f.op;
  int64_t rowLength = f.rowLength;
  if (auto norm = dyn_cast<LayerNormOp>(op)) {
    FailureOr<int32_t> x = arg(f, 0), w = arg(f, 1);
    if (failed(x) || failed(w))
      return failure();
    int32_t mean = kb.binary(KOp::Mul, kb.unary(KOp::ReduceSum, *x),
                             kb.constant(inv(rowLength)));
    int32_t d = kb.binary(KOp::Sub, *x, mean);
    int32_t var = kb.binary(KOp::Mul,
                            kb.unary(KOp::ReduceSum, kb.binary(KOp::Mul, d, d)),
                            kb.constant(inv(rowLength)));
    double eps = norm.getEpsilon().convertToFloat();
    int32_t rstd =
        kb.unary(KOp::Rsqrt, kb.binary(KOp::Add, var, kb.constant(eps)));
    int32_t y = kb.binary(KOp::Mul, kb.binary(KOp::Mul, d, rstd), *w);
    if (norm.getBias()) {
      FailureOr<int32_t> b = arg(f, 2);
      if (failed(b))
        return failure();
      y = kb.binary(KOp::Add, y, *b);
    }
    define(norm.getResult(), y, f.full);
    define(norm.getMean(), mean, f.rowLevel);
    define(norm.getRstd(), rstd, f.rowLevel);
    return success();
  }
  if (auto norm = dyn_cast<RmsNormOp>(op)) {
    FailureOr<int32_t> x = arg(f, 0), w = arg(f, 1);
    if (failed(x) || failed(w))
      return failure();
    int32_t ms = kb.binary(KOp::Mul,
                           kb.unary(KOp::ReduceSum, kb.binary(KOp::Mul, *x, *x)),
                           kb.constant(inv(rowLength)));
    double eps = norm.getEpsilon().convertToFloat();
    int32_t rstd =
        kb.unary(KOp::Rsqrt, kb.binary(KOp::Add, ms, kb.constant(eps)));
    define(norm.getResult(),
           kb.binary(KOp::Mul, kb.binary(KOp::Mul, *x, rstd), *w), f.full);
    define(norm.getRstd(), rstd, f.rowLevel);
    return success();
  }
  if (auto softmax = dyn_cast<SoftmaxOp>(op)) {
    FailureOr<int32_t> x = arg(f, 0);
    if (failed(x))
      return failure();
    int32_t m = kb.unary(KOp::ReduceMax, *x);
    int32_t e = kb.unary(KOp::Exp, kb.binary(KOp::Sub, *x, m));
    int32_t s = kb.unary(KOp::ReduceSum, e);
    define(softmax.getResult(), kb.binary(KOp::Div, e, s), f.full);
    return success();
  }
  if (isa<VocabShardMaxOp, VocabShardCrossEntropyOp>(op)) {
    // One rank's block of vocabulary logits; padding columns count for
    // nothing. The target's logit is summed out of the row (at most one
    // column matches), so no load depends on the target id.
    Value logits = op->getOperand(0);
    FailureOr<int32_t> x =
        scalarOf(kb, logits, f.full,
                 cast<RankedTensorType>(logits.getType()).getShape());
    if (failed(x))
      return failure();
    auto start = op->getAttrOfType<IntegerAttr>("vocab_start").getInt();
    auto size = op->getAttrOfType<IntegerAttr>("vocab_size").getInt();
    int32_t real = realVocabColumn(kb, f.rank - 1, start, size);
    if (auto max = dyn_cast<VocabShardMaxOp>(op)) {
      // The lowest float, not -inf: a block of padding only stays finite.
      int32_t masked = kb.emit(
          KOp::Select, DType::F32,
          {real, *x, kb.constant(-double(std::numeric_limits<float>::max()))});
      define(max.getMax(), kb.unary(KOp::ReduceMax, masked), f.rowLevel);
      return success();
    }
    auto stats = cast<VocabShardCrossEntropyOp>(op);
    FailureOr<int32_t> m = rowScalar(f, stats.getMax());
    FailureOr<int32_t> target = rowScalar(f, stats.getTargets());
    if (failed(m) || failed(target))
      return failure();
    int32_t zero = kb.constant(0.0);
    int32_t e = kb.emit(KOp::Select, DType::F32,
                        {real, kb.unary(KOp::Exp, kb.binary(KOp::Sub, *x, *m)),
                         zero});
    int32_t id = kb.binary(KOp::Add, kb.index(f.rank - 1), kb.intConstant(start));
    int32_t hit = kb.emit(KOp::CmpEq, DType::I1, {id, *target});
    define(stats.getSumExp(), kb.unary(KOp::ReduceSum, e), f.rowLevel);
    define(stats.getTargetLogit(),
           kb.unary(KOp::ReduceSum,
                    kb.emit(KOp::Select, DType::F32, {hit, *x, zero})),
           f.rowLevel);
    noteIdBound(stats.getTargets(), size);
    return success();
  }
  if (isa<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>(op)) {
    FailureOr<int32_t> x =
        scalarOf(kb, op->getOperand(0), f.full,
                 cast<RankedTensorType>(op->getOperand(0).getType()).getShape());
    if (failed(x))
      return failure();
    int32_t r = kb.unary(isa<ReduceMaxOp>(op) ? KOp::ReduceMax : KOp::ReduceSum,
                         *x);
    if (isa<ReduceMeanOp>(op))
      r = kb.binary(KOp::Mul, r, kb.constant(inv(rowLength)));
    SmallVector<int> map(f.rowLevel);
    if (op->getAttrOfType<DenseI64ArrayAttr>("dims").size() > 1) {
      // The row's part of a reduction over more dims: lowerGroup stores it
      // per row and reduces the rest in a second stage.
      partialReductions[op->getResult(0)] = op;
    } else if (op->hasAttr("keep_dims")) {
      map.push_back(-1);
    }
    define(op->getResult(0), r, map);
    return success();
  }
  return std::nullopt;
}

std::optional<LogicalResult> Lowering::expandRowGrad(ExpandFrame &f) {
  // Row statistics (mean, rstd, lse, targets) have the domain's shape
  // without the row; rowScalar loads them once per row.
  KernelBuilder &kb = f.kb;
  Operation *op = f.op;
  int64_t rowLength = f.rowLength;
  if (auto grad = dyn_cast<SoftmaxGradOp>(op)) {
    // y (g - sum(g y))
    FailureOr<int32_t> g = arg(f, 0), y = arg(f, 1);
    if (failed(g) || failed(y))
      return failure();
    int32_t dot = kb.unary(KOp::ReduceSum, kb.binary(KOp::Mul, *g, *y));
    define(grad.getResult(),
           kb.binary(KOp::Mul, *y, kb.binary(KOp::Sub, *g, dot)), f.full);
    return success();
  }
  if (isa<LayerNormGradOp, RmsNormGradOp>(op)) {
    // xhat = (x - mean) rstd (rms: x rstd), dxhat = dy w;
    // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), without the
    // mean(dxhat) term for rms. The weight and bias gradients are sums over
    // rows: lowerNormParamGrads.
    bool layerNorm = isa<LayerNormGradOp>(op);
    FailureOr<int32_t> dy = arg(f, 0), x = arg(f, 1), w = arg(f, 2);
    FailureOr<int32_t> rstd = rowScalar(f, op->getOperand(layerNorm ? 4 : 3));
    if (failed(dy) || failed(x) || failed(w) || failed(rstd))
      return failure();
    int32_t xhat = kb.binary(KOp::Mul, *x, *rstd);
    if (layerNorm) {
      FailureOr<int32_t> mean = rowScalar(f, op->getOperand(3));
      if (failed(mean))
        return failure();
      xhat = kb.binary(KOp::Mul, kb.binary(KOp::Sub, *x, *mean), *rstd);
    }
    int32_t dxhat = kb.binary(KOp::Mul, *dy, *w);
    int32_t invC = kb.constant(inv(rowLength));
    int32_t projection = kb.binary(
        KOp::Mul,
        kb.unary(KOp::ReduceSum, kb.binary(KOp::Mul, dxhat, xhat)), invC);
    int32_t centered =
        kb.binary(KOp::Sub, dxhat, kb.binary(KOp::Mul, xhat, projection));
    if (layerNorm)
      centered = kb.binary(
          KOp::Sub, centered,
          kb.binary(KOp::Mul, kb.unary(KOp::ReduceSum, dxhat), invC));
    define(op->getResult(0), kb.binary(KOp::Mul, centered, *rstd), f.full);
    return success();
  }
  if (auto grad = dyn_cast<VocabShardCrossEntropyGradOp>(op)) {
    // ds exp(l - max) on real columns, plus dt at the target's column:
    // with cross_entropy_combine's VJP, dloss (softmax - onehot) / N.
    FailureOr<int32_t> l = arg(f, 2);
    FailureOr<int32_t> ds = rowScalar(f, grad.getSumExpGrad());
    FailureOr<int32_t> dt = rowScalar(f, grad.getTargetLogitGrad());
    FailureOr<int32_t> m = rowScalar(f, grad.getMax());
    FailureOr<int32_t> target = rowScalar(f, grad.getTargets());
    if (failed(l) || failed(ds) || failed(dt) || failed(m) || failed(target))
      return failure();
    int64_t start = grad.getVocabStart(), size = grad.getVocabSize();
    int32_t zero = kb.constant(0.0);
    int32_t real = realVocabColumn(kb, f.rank - 1, start, size);
    int32_t softmax = kb.emit(
        KOp::Select, DType::F32,
        {real,
         kb.binary(KOp::Mul, *ds,
                   kb.unary(KOp::Exp, kb.binary(KOp::Sub, *l, *m))),
         zero});
    int32_t id = kb.binary(KOp::Add, kb.index(f.rank - 1), kb.intConstant(start));
    int32_t hit = kb.emit(KOp::CmpEq, DType::I1, {id, *target});
    define(grad.getResult(),
           kb.binary(KOp::Add, softmax,
                     kb.emit(KOp::Select, DType::F32, {hit, *dt, zero})),
           f.full);
    noteIdBound(grad.getTargets(), size);
    return success();
  }
  if (auto grad = dyn_cast<CrossEntropyGradOp>(op)) {
    // dloss (exp(l - lse) - [v == target]) / N: the probabilities of the
    // forward are recomputed from its lse, never stored.
    FailureOr<int32_t> l = arg(f, 1);
    FailureOr<int32_t> lse = rowScalar(f, grad.getLse());
    FailureOr<int32_t> target = rowScalar(f, grad.getTargets());
    FailureOr<int32_t> dloss = loadWithMap(kb, grad.getGrad(), {});
    if (failed(l) || failed(lse) || failed(target) || failed(dloss))
      return failure();
    int32_t p = kb.unary(KOp::Exp, kb.binary(KOp::Sub, *l, *lse));
    int32_t hit =
        kb.emit(KOp::CmpEq, DType::I1, {kb.index(f.rank - 1), *target});
    int32_t diff = kb.binary(
        KOp::Sub, p,
        kb.emit(KOp::Select, DType::F32,
                {hit, kb.constant(1.0), kb.constant(0.0)}));
    int64_t positions = kb.kernel.numRows();
    int32_t scale = kb.binary(KOp::Mul, *dloss,
                              kb.constant(1.0 / double(positions)));
    define(grad.getResult(), kb.binary(KOp::Mul, diff, scale), f.full);
    noteIdBound(grad.getTargets(), rowLength);
    return success();
  }
  return std::nullopt;
}

LogicalResult Lowering::lowerGroup(Operation *anchor, StringRef name,
                                   ArrayRef<Operation *> ops, ValueRange inputs,
                                   ValueRange outerInputs, ValueRange results,
                                   ValueRange outerResults) {
  // The domain: the input of the row reduction (the result of a backward
  // row op), or the shape of the ops.
  SmallVector<int64_t> domain;
  for (Operation *op : ops) {
    Value shaped;
    if (isa<LayerNormOp, RmsNormOp, SoftmaxOp, ReduceSumOp, ReduceMeanOp,
            ReduceMaxOp, VocabShardMaxOp, VocabShardCrossEntropyOp>(op))
      shaped = op->getOperand(0);
    else if (op->hasTrait<OpTrait::llmc::RowGradient>())
      shaped = op->getResult(0);
    if (shaped) {
      auto shape = cast<RankedTensorType>(shaped.getType());
      domain.assign(shape.getShape().begin(), shape.getShape().end());
      break;
    }
  }
  if (domain.empty()) {
    auto shape = cast<RankedTensorType>(ops.back()->getResult(0).getType());
    domain.assign(shape.getShape().begin(), shape.getShape().end());
  }
  if (domain.empty())
    domain.push_back(1);

  scalars.clear();
  dimMaps.clear();
  outer.clear();
  for (auto [inner, out] : llvm::zip(inputs, outerInputs))
    outer[inner] = out;
  KernelBuilder kb(kernelName(name), name.str(), domain);
  for (Operation *op : ops) {
    if (failed(expand(kb, op)))
      return failure();
    roundNarrowResults(kb, op);
  }

  // Results: stored by this kernel (into an updated parameter or state when
  // safe), or finished by a second kernel: the rest of a multi-dim
  // reduction, or the weight and bias gradients of a norm.
  SmallVector<std::pair<Operation *, SmallVector<std::pair<unsigned, Value>>>>
      normGrads;
  SmallVector<std::tuple<TensorView, Operation *, Value>> secondStages;
  for (auto [inner, result] : llvm::zip(results, outerResults)) {
    auto opResult = dyn_cast<OpResult>(inner);
    Operation *def = opResult ? opResult.getOwner() : nullptr;
    if (def && isa<LayerNormGradOp, RmsNormGradOp>(def) &&
        opResult.getResultNumber() > 0) {
      auto it = llvm::find_if(normGrads, [&](auto &entry) {
        return entry.first == def;
      });
      if (it == normGrads.end()) {
        normGrads.push_back({def, {}});
        it = normGrads.end() - 1;
      }
      it->second.push_back({opResult.getResultNumber(), result});
      continue;
    }
    SmallVector<int> map = dimMaps.lookup(inner);
    if (Operation *reduce = partialReductions.lookup(inner)) {
      SmallVector<int64_t> rowShape(domain.begin(), domain.end() - 1);
      TensorView rows;
      rows.buffer = newBuffer(nameOf(result) + ".rows", BufferKind::Arena,
                              DType::F32, rowShape);
      rows.shape = rowShape;
      rows.strides = contiguousStrides(rowShape);
      kb.store(rows, map, scalars.lookup(inner));
      secondStages.push_back({rows, reduce, result});
      continue;
    }
    std::optional<TensorView> target = inPlaceTarget(result, anchor);
    if (target && map == identityMap(domain.size()) &&
        target->shape == ArrayRef<int64_t>(domain) &&
        readsOnlyAt(kb.kernel, kb.accessOf(*target, map))) {
      kb.store(*target, map, scalars.lookup(inner));
      views[result] = *target;
      storedInPlace.insert(result);
      continue;
    }
    FailureOr<TensorView> out = newTensor(result, nameOf(result));
    if (failed(out))
      return failure();
    kb.store(*out, map, scalars.lookup(inner));
    views[result] = *out;
  }
  if (kb.hasStores()) {
    std::string error = ::llmc::kir::verifyKernel(kb.kernel);
    if (!error.empty())
      return anchor->emitOpError("internal error: ") << error;
    addKernelStep(std::move(kb.kernel), name);
  }
  for (auto &[rows, reduce, result] : secondStages) {
    // The row kernel reduced the last dim; the rest are the leading ones.
    ArrayRef<int64_t> dims =
        reduce->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
    SmallVector<int64_t> rest(dims.drop_back());
    FailureOr<DType> resultType = dtypeOf(result.getType());
    if (failed(resultType))
      return failure();
    FailureOr<TensorView> reduced = reduceDims(
        rows, rest, isa<ReduceMaxOp>(reduce) ? KOp::ReduceMax : KOp::ReduceSum,
        isa<ReduceMeanOp>(reduce), nameOf(result), *resultType);
    if (failed(reduced))
      return failure();
    auto resultShape = cast<RankedTensorType>(result.getType()).getShape();
    views[result] = reshaped(*reduced, resultShape, nameOf(result));
  }
  for (auto &[op, wanted] : normGrads)
    if (failed(lowerNormParamGrads(op, wanted)))
      return failure();
  return success();
}

} // namespace mlir::llmc::lowering
