// Lowers a fused llmc function to a kir::Program.
//
// Every tensor value becomes a strided view of a buffer: parameters and
// inputs are buffers of their own, every op that computes data gets a new
// arena buffer, and the view ops (reshape, transpose, slice, broadcast) only
// change offsets and strides, so they cost nothing at run time. Kernels read
// their inputs through those strides. A view that a consumer cannot take (a
// GEMM operand without a unit stride, a reshape that strides cannot express)
// is first copied into a contiguous buffer by a copy kernel.
//
// A fusion region becomes one kernel: its ops are expanded into scalar
// instructions over the group's domain (the shape it iterates over; for a
// row group the input of its reduction). Each value carries a map from its
// dimensions to domain dimensions, so an input broadcast against an op's
// result is loaded with stride 0 where it broadcasts, and a row statistic
// (a layer_norm mean) is stored once per row.
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "codegen/MemoryPlan.h"
#include "ir/LlmcOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace mlir::llmc;
using ::llmc::kir::Access;
using ::llmc::kir::AttentionStep;
using ::llmc::kir::Buffer;
using ::llmc::kir::BufferKind;
using ::llmc::kir::DType;
using ::llmc::kir::GemmStep;
using ::llmc::kir::Instr;
using ::llmc::kir::Kernel;
using ::llmc::kir::Program;
using ::llmc::kir::Step;
using ::llmc::kir::StepKind;
using ::llmc::kir::View;
using KOp = ::llmc::kir::Op;

namespace {

/// A strided view of a buffer: element (i0, ..., in-1) is element
/// offset + sum strides[d] * i_d of `buffer`.
struct TensorView {
  int32_t buffer = -1;
  int64_t offset = 0;
  SmallVector<int64_t> shape;
  SmallVector<int64_t> strides;
  DType dtype = DType::F32;
};

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// The dimension map of a value over a domain of its own shape: dim d
/// runs along domain dim d.
SmallVector<int> identityMap(int64_t rank) {
  SmallVector<int> map(rank);
  std::iota(map.begin(), map.end(), 0);
  return map;
}

int64_t product(ArrayRef<int64_t> values) {
  return std::accumulate(values.begin(), values.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

FailureOr<DType> dtypeOf(Type type) {
  Type elem = cast<RankedTensorType>(type).getElementType();
  if (elem.isF32())
    return DType::F32;
  if (elem.isF16())
    return DType::F16;
  if (elem.isBF16())
    return DType::BF16;
  if (elem.isInteger(32))
    return DType::I32;
  if (elem.isInteger(64))
    return DType::I64;
  return failure();
}

/// Strides for `newShape` that view the same elements as `view`, if they
/// exist (each run of old dimensions merged or split must be contiguous
/// within itself), else nothing.
std::optional<SmallVector<int64_t>> reshapeStrides(const TensorView &view,
                                                   ArrayRef<int64_t> newShape) {
  // Drop size-1 dimensions: their strides do not matter.
  SmallVector<int64_t> oldShape, oldStrides;
  for (auto [extent, stride] : llvm::zip(view.shape, view.strides))
    if (extent != 1) {
      oldShape.push_back(extent);
      oldStrides.push_back(stride);
    }
  SmallVector<int64_t> strides(newShape.size(), 0);
  size_t o = 0, n = 0;
  while (n < newShape.size()) {
    if (newShape[n] == 1) {
      strides[n++] = 0;
      continue;
    }
    if (o >= oldShape.size())
      return std::nullopt;
    // Grow a chunk of old dims [o, oe) and new dims [n, ne) to one size.
    size_t oe = o + 1, ne = n + 1;
    int64_t oldSize = oldShape[o], newSize = newShape[n];
    while (oldSize != newSize) {
      if (oldSize < newSize) {
        if (oe >= oldShape.size())
          return std::nullopt;
        oldSize *= oldShape[oe++];
      } else {
        if (ne >= newShape.size())
          return std::nullopt;
        newSize *= newShape[ne++];
      }
    }
    for (size_t d = o; d + 1 < oe; ++d)
      if (oldStrides[d] != oldStrides[d + 1] * oldShape[d + 1])
        return std::nullopt;
    int64_t stride = oldStrides[oe - 1];
    for (size_t d = ne; d-- > n;) {
      strides[d] = newShape[d] == 1 ? 0 : stride;
      stride *= newShape[d];
    }
    o = oe;
    n = ne;
  }
  if (o != oldShape.size())
    return std::nullopt;
  return strides;
}

/// Builds one kernel: the instruction list, with loads of kernel inputs
/// shared between uses that read them with the same dimension map.
class KernelBuilder {
public:
  KernelBuilder(std::string name, std::string origin,
                ArrayRef<int64_t> domain) {
    kernel.name = std::move(name);
    kernel.origin = std::move(origin);
    kernel.domain.assign(domain.begin(), domain.end());
  }

  int32_t emit(KOp op, DType type, std::vector<int32_t> args = {},
               int32_t operand = -1, int32_t dim = -1, double imm = 0.0) {
    Instr instr;
    instr.op = op;
    instr.type = type;
    instr.args = std::move(args);
    instr.operand = operand;
    instr.dim = dim;
    instr.imm = imm;
    kernel.body.push_back(std::move(instr));
    return kernel.body.size() - 1;
  }
  int32_t constant(double value) {
    auto [it, inserted] = constants.try_emplace(value, -1);
    if (inserted)
      it->second = emit(KOp::Const, DType::F32, {}, -1, -1, value);
    return it->second;
  }
  int32_t intConstant(int64_t value) {
    return emit(KOp::Const, DType::I64, {}, -1, -1, double(value));
  }
  int32_t unary(KOp op, int32_t a) { return emit(op, DType::F32, {a}); }
  int32_t binary(KOp op, int32_t a, int32_t b) {
    return emit(op, kernel.body[a].type, {a, b});
  }

  /// The operand index of an access of `view` where view dimension i runs
  /// along domain dimension dimMap[i] (-1: not at all, i.e. size 1).
  int32_t operand(const TensorView &view, ArrayRef<int> dimMap,
                  int overrideDim = -1, int64_t overrideStride = 0) {
    Access access;
    access.buffer = view.buffer;
    access.dtype = view.dtype;
    access.offset = view.offset;
    access.strides.assign(kernel.domain.size(), 0);
    // A size-1 dimension broadcast over a longer domain dimension reads
    // one element (stride 0); over a domain dimension of extent 1 it keeps
    // its stride, so a row of length 1 still reads per column.
    for (auto [i, d] : llvm::enumerate(dimMap))
      if (d >= 0 && (view.shape[i] != 1 || kernel.domain[d] == 1))
        access.strides[d] += view.strides[i];
    if (overrideDim >= 0)
      access.strides[overrideDim] = overrideStride;
    for (auto [index, existing] : llvm::enumerate(kernel.operands))
      if (existing.buffer == access.buffer &&
          existing.dtype == access.dtype &&
          existing.offset == access.offset &&
          existing.strides == access.strides)
        return index;
    kernel.operands.push_back(std::move(access));
    return kernel.operands.size() - 1;
  }
  int32_t load(const TensorView &view, ArrayRef<int> dimMap) {
    int32_t index = operand(view, dimMap);
    auto [it, inserted] = loads.try_emplace(index, -1);
    if (inserted)
      it->second = emit(KOp::Load, ::llmc::kir::computeType(view.dtype), {}, index);
    return it->second;
  }
  void store(const TensorView &view, ArrayRef<int> dimMap, int32_t value) {
    emit(KOp::Store, DType::F32, {value}, operand(view, dimMap));
  }

  Kernel kernel;

private:
  std::map<double, int32_t> constants;
  DenseMap<int32_t, int32_t> loads;
};

class Lowering {
public:
  explicit Lowering(func::FuncOp func) : func(func) {}

  FailureOr<Program> run();

private:
  // Values and buffers.
  int32_t newBuffer(StringRef name, BufferKind kind, DType dtype,
                    ArrayRef<int64_t> shape) {
    Buffer buffer;
    buffer.name = name.str();
    buffer.kind = kind;
    buffer.dtype = dtype;
    buffer.shape.assign(shape.begin(), shape.end());
    program.buffers.push_back(std::move(buffer));
    return program.buffers.size() - 1;
  }
  FailureOr<TensorView> newTensor(Value value, StringRef name) {
    auto type = cast<RankedTensorType>(value.getType());
    FailureOr<DType> dtype = dtypeOf(type);
    if (failed(dtype))
      return failure();
    TensorView view;
    view.buffer = newBuffer(name, BufferKind::Arena, *dtype, type.getShape());
    view.shape.assign(type.getShape().begin(), type.getShape().end());
    view.strides = contiguousStrides(view.shape);
    view.dtype = *dtype;
    return view;
  }
  std::string nameOf(Value value);
  std::string kernelName(StringRef what) {
    std::string name = "k" + std::to_string(program.kernels.size()) + "_" +
                       what.str();
    for (char &c : name)
      if (!llvm::isAlnum(c))
        c = '_';
    return name;
  }
  void addKernelStep(Kernel kernel, StringRef origin) {
    program.kernels.push_back(std::move(kernel));
    Step step;
    step.kind = StepKind::Kernel;
    step.kernel = program.kernels.size() - 1;
    step.origin = origin.str();
    program.steps.push_back(std::move(step));
  }

  /// The view of a value, materializing splat constants and fills (which
  /// kernels otherwise read as constants) on first use.
  FailureOr<TensorView> viewOf(Value value);
  /// A contiguous copy of `view` (a copy kernel), for consumers that need one.
  TensorView copyContiguous(const TensorView &view, StringRef name);

  LogicalResult lowerView(Operation *op);
  LogicalResult lowerGemm(Operation *matmul, Operation *fusion,
                          ArrayRef<Operation *> epilogue);
  LogicalResult lowerAttention(AttentionOp op);
  LogicalResult lowerGroup(Operation *anchor, StringRef name,
                           ArrayRef<Operation *> ops, ValueRange inputs,
                           ValueRange outerInputs, ValueRange results,
                           ValueRange outerResults);
  LogicalResult lowerCrossEntropy(CrossEntropyOp op, Value outerLogits,
                                  Value outerTargets, Value outerLoss,
                                  Value outerLse);
  LogicalResult lowerReduce(Operation *op);
  LogicalResult lowerConcat(ConcatOp op);
  LogicalResult lowerOp(Operation *op);

  /// Scalar expansion of one op inside a kernel.
  LogicalResult expand(KernelBuilder &kb, Operation *op);
  /// The scalar of `value` as an operand of an op whose result has `resultMap`
  /// (its dims to domain dims) and `resultShape`.
  FailureOr<int32_t> scalarOf(KernelBuilder &kb, Value value,
                              ArrayRef<int> resultMap,
                              ArrayRef<int64_t> resultShape);
  FailureOr<int32_t> loadWithMap(KernelBuilder &kb, Value value,
                                 ArrayRef<int> map);

  /// Ids read from an input index a table of `bound` rows: the runtime
  /// checks them before running (an out-of-range id is a data error).
  void noteIdBound(Value value, int64_t bound) {
    Value source = outer.count(value) ? outer.lookup(value) : value;
    auto it = views.find(source);
    if (it == views.end() ||
        program.buffers[it->second.buffer].kind != BufferKind::Input)
      return;
    auto [entry, inserted] = idBounds.try_emplace(it->second.buffer, bound);
    if (!inserted)
      entry->second = std::min(entry->second, bound);
  }

  func::FuncOp func;
  Program program;
  std::map<int32_t, int64_t> idBounds;
  DenseMap<Value, TensorView> views;
  DenseMap<Value, double> splats; // constants and fills not in memory
  // While expanding a kernel: the scalars and dimension maps of its values,
  // and the outer value each block argument stands for.
  DenseMap<Value, int32_t> scalars;
  DenseMap<Value, SmallVector<int>> dimMaps;
  DenseMap<Value, Value> outer;
};

std::string Lowering::nameOf(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    for (const char *attr : {"llmc.param", "llmc.input"})
      if (auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                         attr))
        return name.str();
    return "arg" + std::to_string(arg.getArgNumber());
  }
  Operation *op = value.getDefiningOp();
  std::string name = op->getName().stripDialect().str();
  if (auto fusion = dyn_cast<FusionOp>(op))
    name = fusion.getName().str();
  if (auto loc = dyn_cast<NameLoc>(op->getLoc()))
    name = loc.getName().str() + "." + name;
  if (op->getNumResults() > 1)
    name += "#" + std::to_string(cast<OpResult>(value).getResultNumber());
  return name;
}

FailureOr<TensorView> Lowering::viewOf(Value value) {
  auto it = views.find(value);
  if (it != views.end())
    return it->second;
  auto splat = splats.find(value);
  if (splat == splats.end())
    return emitError(value.getLoc(), "internal error: no buffer for a value");
  // A fill kernel writes the constant into a buffer of its own.
  FailureOr<TensorView> view = newTensor(value, nameOf(value));
  if (failed(view))
    return failure();
  SmallVector<int64_t> domain = view->shape;
  if (domain.empty())
    domain.push_back(1);
  KernelBuilder kb(kernelName("fill"), "fill", domain);
  SmallVector<int> map = identityMap(view->shape.size());
  int32_t v = ::llmc::kir::isFloat(view->dtype) ? kb.constant(splat->second)
                                   : kb.intConstant(int64_t(splat->second));
  kb.store(*view, map, v);
  addKernelStep(std::move(kb.kernel), "fill");
  views[value] = *view;
  return *view;
}

TensorView Lowering::copyContiguous(const TensorView &view, StringRef name) {
  TensorView copy;
  copy.buffer = newBuffer(name, BufferKind::Arena, view.dtype, view.shape);
  copy.shape = view.shape;
  copy.strides = contiguousStrides(copy.shape);
  copy.dtype = view.dtype;
  SmallVector<int64_t> domain = view.shape;
  if (domain.empty())
    domain.push_back(1);
  KernelBuilder kb(kernelName("copy"), "copy " + name.str(), domain);
  SmallVector<int> map = identityMap(view.shape.size());
  kb.store(copy, map, kb.load(view, map));
  addKernelStep(std::move(kb.kernel), ("copy " + name).str());
  return copy;
}

LogicalResult Lowering::lowerView(Operation *op) {
  FailureOr<TensorView> input = viewOf(op->getOperand(0));
  if (failed(input))
    return failure();
  TensorView view = *input;
  auto resultShape =
      cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  if (auto transpose = dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = transpose.getPermutation();
    SmallVector<int64_t> strides;
    for (int64_t p : perm)
      strides.push_back(input->strides[p]);
    view.strides = strides;
  } else if (auto slice = dyn_cast<SliceOp>(op)) {
    for (auto [offset, stride] : llvm::zip(slice.getOffsets(), view.strides))
      view.offset += offset * stride;
  } else if (isa<ReshapeOp>(op)) {
    std::optional<SmallVector<int64_t>> strides =
        reshapeStrides(*input, resultShape);
    if (!strides) {
      view = copyContiguous(*input, nameOf(op->getOperand(0)));
      strides = reshapeStrides(view, resultShape);
    }
    view.strides = *strides;
  } else if (isa<BroadcastOp>(op)) {
    size_t lead = resultShape.size() - input->shape.size();
    SmallVector<int64_t> strides(lead, 0);
    for (auto [extent, stride] : llvm::zip(input->shape, input->strides))
      strides.push_back(extent == 1 ? 0 : stride);
    view.strides = strides;
  }
  view.shape.assign(resultShape.begin(), resultShape.end());
  views[op->getResult(0)] = view;
  return success();
}

/// GEMM operands: a [batch, rows, cols] view with a unit stride in one of the
/// last two dims, the leading dims of `view` folded into `rows` (if
/// `foldIntoRows` and the layout allows) or into the batch.
static std::optional<View> gemmView(const TensorView &view, bool foldIntoRows,
                                    int64_t &batch, int64_t &rows) {
  size_t rank = view.shape.size();
  if (rank < 2)
    return std::nullopt;
  View result;
  result.buffer = view.buffer;
  result.offset = view.offset;
  int64_t rowStride = view.strides[rank - 2], colStride = view.strides[rank - 1];
  rows = view.shape[rank - 2];
  batch = 1;
  int64_t batchStride = 0;
  // Leading dims: fold each into rows while contiguous with them, then the
  // rest into one batch dimension with a uniform stride.
  size_t d = rank - 2;
  if (foldIntoRows)
    while (d > 0 && (view.shape[d - 1] == 1 ||
                     view.strides[d - 1] == rowStride * rows)) {
      rows *= view.shape[d - 1];
      --d;
    }
  for (size_t b = d; b-- > 0;) {
    if (view.shape[b] == 1)
      continue;
    if (batch == 1)
      batchStride = view.strides[b];
    else if (view.strides[b] != batchStride * batch)
      return std::nullopt;
    batch *= view.shape[b];
  }
  if (rowStride != 1 && colStride != 1)
    return std::nullopt;
  if (rows == 1 && colStride == 1)
    rowStride = view.shape[rank - 1]; // any valid leading dimension
  result.strides = {batchStride, rowStride, colStride};
  return result;
}

LogicalResult Lowering::lowerGemm(Operation *matmul, Operation *fusion,
                                  ArrayRef<Operation *> epilogue) {
  bool transA = matmul->hasAttr("transpose_a");
  bool transB = matmul->hasAttr("transpose_b");
  bool shared = isa<MatmulOp>(matmul); // rhs is one weight for all batches
  auto operandView = [&](unsigned index) -> FailureOr<TensorView> {
    Value value = matmul->getOperand(index);
    if (fusion)
      value = outer.lookup(value);
    return viewOf(value);
  };
  FailureOr<TensorView> lhs = operandView(0), rhs = operandView(1);
  if (failed(lhs) || failed(rhs))
    return failure();
  auto resultType = cast<RankedTensorType>(matmul->getResult(0).getType());
  if (lhs->dtype != DType::F32 || rhs->dtype != DType::F32)
    return matmul->emitOpError(
        "GEMMs on f16/bf16 operands are not supported by code generation yet");

  GemmStep gemm;
  gemm.transA = transA;
  gemm.transB = transB;
  int64_t batchA = 1, rowsA = 0, batchB = 1, rowsB = 0;
  // Rows of A fold into M only when A is not transposed and the weight is
  // shared; otherwise leading dims are a batch.
  std::optional<View> a = gemmView(*lhs, shared && !transA, batchA, rowsA);
  if (!a) {
    *lhs = copyContiguous(*lhs, nameOf(matmul->getOperand(0)));
    a = gemmView(*lhs, shared && !transA, batchA, rowsA);
  }
  std::optional<View> b = gemmView(*rhs, false, batchB, rowsB);
  if (!b) {
    *rhs = copyContiguous(*rhs, nameOf(matmul->getOperand(1)));
    b = gemmView(*rhs, false, batchB, rowsB);
  }
  int64_t rank = resultType.getRank();
  gemm.n = resultType.getDimSize(rank - 1);
  gemm.k = lhs->shape[transA ? lhs->shape.size() - 2 : lhs->shape.size() - 1];
  gemm.batch = batchA;
  gemm.m = transA ? lhs->shape.back() : rowsA;
  if (!shared && batchB != batchA)
    return matmul->emitOpError("internal error: batch dims of a batch_matmul "
                               "fold differently");
  if (shared)
    b->strides[0] = 0;
  gemm.a = *a;
  gemm.b = *b;

  // C: the product, contiguous; the epilogue (if any) runs on it in place
  // when its final value has C's type, else into a buffer of its own.
  FailureOr<TensorView> c = newTensor(
      fusion ? fusion->getResult(0) : matmul->getResult(0),
      nameOf(fusion ? fusion->getResult(0) : matmul->getResult(0)));
  if (failed(c))
    return failure();
  c->dtype = DType::F32;
  program.buffers[c->buffer].dtype = DType::F32;
  gemm.c.buffer = c->buffer;
  gemm.c.offset = 0;
  gemm.c.strides = {gemm.m * gemm.n, gemm.n, 1};

  Step step;
  step.kind = StepKind::Gemm;
  step.origin = nameOf(fusion ? fusion->getResult(0) : matmul->getResult(0));
  if (!epilogue.empty()) {
    auto fusionOp = cast<FusionOp>(fusion);
    Value product = matmul->getResult(0);
    views[product] = *c;
    SmallVector<int> map = identityMap(rank);
    KernelBuilder kb(kernelName(fusionOp.getName()), fusionOp.getName().str(),
                     resultType.getShape());
    scalars.clear();
    dimMaps.clear();
    scalars[product] = kb.load(*c, map);
    dimMaps[product] = map;
    for (Operation *op : epilogue)
      if (failed(expand(kb, op)))
        return failure();
    auto yield = cast<YieldOp>(fusionOp.getBody().front().getTerminator());
    for (auto [inner, result] :
         llvm::zip(yield.getValues(), fusionOp.getResults())) {
      FailureOr<DType> dtype = dtypeOf(result.getType());
      if (failed(dtype))
        return failure();
      TensorView out = *c;
      if (*dtype != DType::F32 || fusionOp.getNumResults() > 1) {
        FailureOr<TensorView> own = newTensor(result, nameOf(result));
        if (failed(own))
          return failure();
        out = *own;
      }
      kb.store(out, dimMaps.lookup(inner), scalars.lookup(inner));
      views[result] = out;
    }
    program.kernels.push_back(std::move(kb.kernel));
    gemm.epilogue = program.kernels.size() - 1;
  } else {
    views[fusion ? fusion->getResult(0) : matmul->getResult(0)] = *c;
  }
  step.gemm = std::move(gemm);
  program.steps.push_back(std::move(step));
  return success();
}

LogicalResult Lowering::lowerAttention(AttentionOp op) {
  SmallVector<TensorView> qkv;
  for (Value operand : {op.getQuery(), op.getKey(), op.getValue()}) {
    FailureOr<TensorView> view = viewOf(operand);
    if (failed(view))
      return failure();
    if (view->dtype != DType::F32)
      return op.emitOpError("attention on f16/bf16 is not supported by code "
                            "generation yet");
    if (view->strides.back() != 1)
      *view = copyContiguous(*view, nameOf(operand));
    qkv.push_back(*view);
  }
  int64_t rank = qkv[0].shape.size();
  if (rank != 3 && rank != 4)
    return op.emitOpError("code generation supports attention on "
                          "[batch, seq, head_dim] or [batch, heads, seq, "
                          "head_dim], got rank ")
           << rank;
  FailureOr<TensorView> out = newTensor(op.getResult(), nameOf(op.getResult()));
  FailureOr<TensorView> lse = newTensor(op.getLse(), nameOf(op.getLse()));
  if (failed(out) || failed(lse))
    return failure();
  // Heads are usually transposed back next ([B, H, T, D] -> [B, T, H, D])
  // to be merged: store the output in that order, so the transpose and the
  // reshape after it are free. The head dimension stays innermost.
  if (op.getResult().hasOneUse())
    if (auto transpose =
            dyn_cast<TransposeOp>(*op.getResult().getUsers().begin())) {
      ArrayRef<int64_t> perm = transpose.getPermutation();
      if (!perm.empty() && perm.back() == rank - 1) {
        SmallVector<int64_t> shape, strides(rank);
        for (int64_t p : perm)
          shape.push_back(out->shape[p]);
        program.buffers[out->buffer].shape.assign(shape.begin(), shape.end());
        SmallVector<int64_t> contiguous = contiguousStrides(shape);
        for (int64_t j = 0; j < rank; ++j)
          strides[perm[j]] = contiguous[j];
        out->strides = strides;
      }
    }
  auto toView = [&](const TensorView &view) {
    View result;
    result.buffer = view.buffer;
    result.offset = view.offset;
    result.strides.assign(view.strides.begin(), view.strides.end());
    if (rank == 3) // [batch, seq, ...]: one head
      result.strides.insert(result.strides.begin() + 1, 0);
    return result;
  };
  AttentionStep step;
  step.batch = qkv[0].shape[0];
  step.heads = rank == 4 ? qkv[0].shape[1] : 1;
  step.seq = qkv[0].shape[rank - 2];
  step.headDim = qkv[0].shape[rank - 1];
  step.scale = op.getScale().convertToFloat();
  step.causal = op.getCausal();
  step.q = toView(qkv[0]);
  step.k = toView(qkv[1]);
  step.v = toView(qkv[2]);
  step.out = toView(*out);
  step.lse = toView(*lse);
  views[op.getResult()] = *out;
  views[op.getLse()] = *lse;
  Step s;
  s.kind = StepKind::Attention;
  s.attention = std::move(step);
  s.origin = nameOf(op.getResult());
  program.steps.push_back(std::move(s));
  return success();
}

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

LogicalResult Lowering::expand(KernelBuilder &kb, Operation *op) {
  int rank = kb.kernel.domain.size();
  SmallVector<int> full = identityMap(rank);
  SmallVector<int> rowLevel(full.begin(), full.end() - 1);

  // The result map of elementwise ops: that of their full-shape operand
  // (every op in a group has the group's shape or is a row statistic).
  ArrayRef<int64_t> resultShape;
  SmallVector<int> resultMap = full;
  if (op->getNumResults() > 0)
    resultShape = cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  auto arg = [&](unsigned index) {
    return scalarOf(kb, op->getOperand(index), resultMap, resultShape);
  };
  auto define = [&](Value result, int32_t scalar, ArrayRef<int> map) {
    scalars[result] = scalar;
    dimMaps[result] = SmallVector<int>(map.begin(), map.end());
  };
  auto inv = [](int64_t n) { return 1.0 / double(n); };
  int64_t rowLength = kb.kernel.domain.back();

  // Elementwise ops.
  auto binaryOp = [&](KOp kop) -> LogicalResult {
    FailureOr<int32_t> a = arg(0), b = arg(1);
    if (failed(a) || failed(b))
      return failure();
    define(op->getResult(0), kb.binary(kop, *a, *b), resultMap);
    return success();
  };
  auto unaryOp = [&](auto fn) -> LogicalResult {
    FailureOr<int32_t> x = arg(0);
    if (failed(x))
      return failure();
    define(op->getResult(0), fn(*x), resultMap);
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
  if (auto cast = dyn_cast<CastOp>(op)) {
    // Values compute in f32 and narrow when stored; a narrowed value reused
    // in the same kernel would skip the rounding.
    bool narrows = !cast.getResult().getType().getElementType().isF32();
    bool usedInside = llvm::any_of(cast->getUsers(), [](Operation *user) {
      return !isa<YieldOp>(user);
    });
    if (narrows && usedInside)
      return op->emitOpError("a cast to f16/bf16 used inside the same kernel "
                             "is not supported by code generation yet");
    return unaryOp([](int32_t x) { return x; });
  }
  if (auto dropout = dyn_cast<DropoutOp>(op)) {
    if (!dropout.getRate().isZero())
      return op->emitOpError("dropout with a rate above 0 runs in training, "
                             "which code generation does not support yet");
    return unaryOp([](int32_t x) { return x; });
  }
  if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
    // out[i..., c] = table[ids[i...], c]: the table is read with the domain's
    // first index replaced by the id (the row stride put on that dim).
    if (rank < 2)
      return op->emitOpError("code generation needs ids of rank >= 1");
    SmallVector<int> idsMap(rowLevel);
    FailureOr<int32_t> id = loadWithMap(kb, embedding.getIndices(), idsMap);
    Value tableValue = outer.count(embedding.getTable())
                           ? outer.lookup(embedding.getTable())
                           : embedding.getTable();
    FailureOr<TensorView> table = viewOf(tableValue);
    if (failed(id) || failed(table))
      return failure();
    int32_t index = kb.operand(*table, {-1, rank - 1}, /*overrideDim=*/0,
                               /*overrideStride=*/table->strides[0]);
    std::vector<int32_t> at(rank, -1);
    at[0] = *id;
    int32_t value = kb.emit(KOp::Load, DType::F32, at, index);
    define(embedding.getResult(), value, full);
    noteIdBound(embedding.getIndices(), table->shape[0]);
    return success();
  }
  if (auto rotary = dyn_cast<RotaryOp>(op)) {
    // (x[i], x[i + D/2]) rotated by t * theta^(-2i/D), i < D/2, t the index
    // in the second-to-last dimension.
    if (rank < 2 || rowLength % 2 != 0)
      return op->emitOpError("code generation needs rank >= 2 and an even "
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
    int32_t t = kb.emit(KOp::IToF, DType::F32,
                        {kb.emit(KOp::Index, DType::I64, {}, -1, rank - 2)});
    int32_t angle = kb.binary(KOp::Mul, t, freq);
    int32_t cosA = kb.unary(KOp::Cos, angle), sinA = kb.unary(KOp::Sin, angle);
    if (rotary.getInverse())
      sinA = kb.unary(KOp::Neg, sinA);
    Value input = outer.count(rotary.getInput())
                      ? outer.lookup(rotary.getInput())
                      : rotary.getInput();
    FailureOr<TensorView> x = viewOf(input);
    if (failed(x))
      return failure();
    int32_t xi = kb.load(*x, full);
    std::vector<int32_t> at(rank, -1);
    at[rank - 1] = partner;
    int32_t xp = kb.emit(KOp::Load, DType::F32, at, kb.operand(*x, full));
    // lower half: x cos - partner sin; upper half: x cos + partner sin.
    int32_t signedSin =
        kb.emit(KOp::Select, DType::F32, {lower, kb.unary(KOp::Neg, sinA), sinA});
    int32_t result = kb.binary(KOp::Add, kb.binary(KOp::Mul, xi, cosA),
                               kb.binary(KOp::Mul, xp, signedSin));
    define(rotary.getResult(), result, full);
    return success();
  }

  // Row reductions.
  if (auto norm = dyn_cast<LayerNormOp>(op)) {
    FailureOr<int32_t> x = arg(0), w = arg(1);
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
      FailureOr<int32_t> b = arg(2);
      if (failed(b))
        return failure();
      y = kb.binary(KOp::Add, y, *b);
    }
    define(norm.getResult(), y, full);
    define(norm.getMean(), mean, rowLevel);
    define(norm.getRstd(), rstd, rowLevel);
    return success();
  }
  if (auto norm = dyn_cast<RmsNormOp>(op)) {
    FailureOr<int32_t> x = arg(0), w = arg(1);
    if (failed(x) || failed(w))
      return failure();
    int32_t ms = kb.binary(KOp::Mul,
                           kb.unary(KOp::ReduceSum, kb.binary(KOp::Mul, *x, *x)),
                           kb.constant(inv(rowLength)));
    double eps = norm.getEpsilon().convertToFloat();
    int32_t rstd =
        kb.unary(KOp::Rsqrt, kb.binary(KOp::Add, ms, kb.constant(eps)));
    define(norm.getResult(),
           kb.binary(KOp::Mul, kb.binary(KOp::Mul, *x, rstd), *w), full);
    define(norm.getRstd(), rstd, rowLevel);
    return success();
  }
  if (auto softmax = dyn_cast<SoftmaxOp>(op)) {
    FailureOr<int32_t> x = arg(0);
    if (failed(x))
      return failure();
    int32_t m = kb.unary(KOp::ReduceMax, *x);
    int32_t e = kb.unary(KOp::Exp, kb.binary(KOp::Sub, *x, m));
    int32_t s = kb.unary(KOp::ReduceSum, e);
    define(softmax.getResult(), kb.binary(KOp::Div, e, s), full);
    return success();
  }
  if (isa<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>(op)) {
    FailureOr<int32_t> x =
        scalarOf(kb, op->getOperand(0), full,
                 cast<RankedTensorType>(op->getOperand(0).getType()).getShape());
    if (failed(x))
      return failure();
    int32_t r = kb.unary(isa<ReduceMaxOp>(op) ? KOp::ReduceMax : KOp::ReduceSum,
                         *x);
    if (isa<ReduceMeanOp>(op))
      r = kb.binary(KOp::Mul, r, kb.constant(inv(rowLength)));
    SmallVector<int> map(rowLevel);
    if (op->hasAttr("keep_dims"))
      map.push_back(-1);
    define(op->getResult(0), r, map);
    return success();
  }
  return op->emitOpError("is not supported inside a kernel by code generation");
}

LogicalResult Lowering::lowerGroup(Operation *anchor, StringRef name,
                                   ArrayRef<Operation *> ops, ValueRange inputs,
                                   ValueRange outerInputs, ValueRange results,
                                   ValueRange outerResults) {
  // The domain: the input of the row reduction, or the shape of the ops.
  SmallVector<int64_t> domain;
  for (Operation *op : ops)
    if (isa<LayerNormOp, RmsNormOp, SoftmaxOp, ReduceSumOp, ReduceMeanOp,
            ReduceMaxOp>(op)) {
      auto shape = cast<RankedTensorType>(op->getOperand(0).getType());
      domain.assign(shape.getShape().begin(), shape.getShape().end());
      break;
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
  for (Operation *op : ops)
    if (failed(expand(kb, op)))
      return failure();
  for (auto [inner, result] : llvm::zip(results, outerResults)) {
    FailureOr<TensorView> out = newTensor(result, nameOf(result));
    if (failed(out))
      return failure();
    SmallVector<int> map = dimMaps.lookup(inner);
    kb.store(*out, map, scalars.lookup(inner));
    views[result] = *out;
  }
  std::string error = ::llmc::kir::verifyKernel(kb.kernel);
  if (!error.empty())
    return anchor->emitOpError("internal error: ") << error;
  addKernelStep(std::move(kb.kernel), name);
  return success();
}

LogicalResult Lowering::lowerCrossEntropy(CrossEntropyOp op, Value logitsValue,
                                          Value targetsValue, Value lossResult,
                                          Value lseResult) {
  // Kernel 1, per row: lse = max + log sum exp(l - max); the row's loss is
  // lse - l[target]. Kernel 2: the mean over rows. Probabilities are never
  // stored.
  FailureOr<TensorView> logits = viewOf(logitsValue);
  if (failed(logits))
    return failure();
  SmallVector<int64_t> domain = logits->shape;
  int rank = domain.size();
  SmallVector<int> full = identityMap(rank);
  SmallVector<int> rowLevel(full.begin(), full.end() - 1);

  KernelBuilder kb(kernelName("cross_entropy"), "cross_entropy", domain);
  outer.clear();
  int32_t l = kb.load(*logits, full);
  int32_t m = kb.unary(KOp::ReduceMax, l);
  int32_t s = kb.unary(KOp::ReduceSum, kb.unary(KOp::Exp, kb.binary(KOp::Sub, l, m)));
  int32_t lse = kb.binary(KOp::Add, m, kb.unary(KOp::Log, s));
  FailureOr<int32_t> target = loadWithMap(kb, targetsValue, rowLevel);
  if (failed(target))
    return failure();
  std::vector<int32_t> at(rank, -1);
  at[rank - 1] = *target;
  int32_t picked = kb.emit(KOp::Load, DType::F32, at, kb.operand(*logits, full));
  int32_t rowLoss = kb.binary(KOp::Sub, lse, picked);
  noteIdBound(targetsValue, domain.back());

  SmallVector<int64_t> rowShape(domain.begin(), domain.end() - 1);
  int32_t rowBuffer = newBuffer(nameOf(lossResult) + ".rows", BufferKind::Arena,
                                DType::F32, rowShape);
  TensorView rows;
  rows.buffer = rowBuffer;
  rows.shape = rowShape;
  rows.strides = contiguousStrides(rowShape);
  kb.store(rows, rowLevel, rowLoss);
  if (lseResult && !lseResult.use_empty()) {
    FailureOr<TensorView> lseView = newTensor(lseResult, nameOf(lseResult));
    if (failed(lseView))
      return failure();
    kb.store(*lseView, rowLevel, lse);
    views[lseResult] = *lseView;
  }
  std::string error = ::llmc::kir::verifyKernel(kb.kernel);
  if (!error.empty())
    return op.emitOpError("internal error: ") << error;
  addKernelStep(std::move(kb.kernel), "cross_entropy");

  int64_t n = product(rowShape);
  KernelBuilder mean(kernelName("cross_entropy_mean"), "cross_entropy mean",
                     {1, n});
  TensorView flat = rows;
  flat.shape = {1, n};
  flat.strides = {0, 1};
  int32_t total = mean.unary(KOp::ReduceSum, mean.load(flat, {0, 1}));
  FailureOr<TensorView> loss = newTensor(lossResult, nameOf(lossResult));
  if (failed(loss))
    return failure();
  TensorView lossView = *loss;
  lossView.shape = {1};
  lossView.strides = {0};
  mean.store(lossView, {0},
             mean.binary(KOp::Mul, total, mean.constant(1.0 / double(n))));
  addKernelStep(std::move(mean.kernel), "cross_entropy mean");
  views[lossResult] = *loss;
  return success();
}

LogicalResult Lowering::lowerOp(Operation *op) {
  if (auto constant = dyn_cast<ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!dense || !dense.isSplat())
      return op->emitOpError("only splat constants are supported by code "
                             "generation");
    Type elem = dense.getElementType();
    splats[constant.getResult()] =
        isa<FloatType>(elem)
            ? dense.getSplatValue<APFloat>().convertToDouble()
            : double(dense.getSplatValue<APInt>().getSExtValue());
    return success();
  }
  if (auto fill = dyn_cast<FillOp>(op)) {
    splats[fill.getResult()] = fill.getValue().convertToDouble();
    return success();
  }
  if (isa<ReshapeOp, TransposeOp, SliceOp, BroadcastOp>(op))
    return lowerView(op);
  if (isa<MatmulOp, BatchMatmulOp>(op))
    return lowerGemm(op, nullptr, {});
  if (auto attention = dyn_cast<AttentionOp>(op))
    return lowerAttention(attention);
  if (auto ce = dyn_cast<CrossEntropyOp>(op))
    return lowerCrossEntropy(ce, ce.getLogits(), ce.getTargets(), ce.getLoss(),
                             ce.getLse());
  if (auto concat = dyn_cast<ConcatOp>(op))
    return lowerConcat(concat);
  if (auto fusion = dyn_cast<FusionOp>(op)) {
    Block &body = fusion.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &inner : body.without_terminator())
      ops.push_back(&inner);
    outer.clear();
    for (auto [arg, input] : llvm::zip(body.getArguments(), fusion.getInputs()))
      outer[arg] = input;
    if (fusion.getKind() == "gemm")
      return lowerGemm(ops.front(), fusion, ArrayRef(ops).drop_front());
    if (auto ce = dyn_cast<CrossEntropyOp>(ops.front())) {
      if (ops.size() != 1)
        return op->emitOpError("cross_entropy must be alone in its fusion");
      auto yield = cast<YieldOp>(body.getTerminator());
      Value loss, lse;
      for (auto [inner, result] :
           llvm::zip(yield.getValues(), fusion.getResults())) {
        if (inner == ce.getLoss())
          loss = result;
        else
          lse = result;
      }
      if (!loss)
        return success(); // nothing of it is used
      return lowerCrossEntropy(ce, outer.lookup(ce.getLogits()),
                               outer.lookup(ce.getTargets()), loss, lse);
    }
    auto yield = cast<YieldOp>(body.getTerminator());
    return lowerGroup(op, fusion.getName(), ops, body.getArguments(),
                      fusion.getInputs(), yield.getValues(),
                      fusion.getResults());
  }
  if (isa<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>(op))
    return lowerReduce(op);
  if (isa<LlmcDialect>(op->getDialect())) // unfused: a kernel of its own
    return lowerGroup(op, op->getName().stripDialect(), {op},
                      op->getOperands(), op->getOperands(), op->getResults(),
                      op->getResults());
  return op->emitOpError("is not supported by code generation");
}

LogicalResult Lowering::lowerReduce(Operation *op) {
  // A reduction over the last dimension is a row kernel; over other
  // dimensions, one dimension at a time, each moved last by the strides.
  auto inputType = cast<RankedTensorType>(op->getOperand(0).getType());
  ArrayRef<int64_t> dims =
      op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
  int64_t rank = inputType.getRank();
  if (dims.size() == 1 && dims[0] == rank - 1)
    return lowerGroup(op, op->getName().stripDialect(), {op},
                      op->getOperands(), op->getOperands(), op->getResults(),
                      op->getResults());
  FailureOr<TensorView> input = viewOf(op->getOperand(0));
  if (failed(input))
    return failure();
  TensorView current = *input;
  bool mean = isa<ReduceMeanOp>(op), max = isa<ReduceMaxOp>(op);
  // Reduce the listed dims from the last to the first, keeping them as
  // size 1 until the end.
  for (int64_t dim : llvm::reverse(dims)) {
    SmallVector<int64_t> domain;
    SmallVector<int> map(rank, -1);
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim) {
        map[d] = domain.size();
        domain.push_back(current.shape[d]);
      }
    map[dim] = domain.size();
    domain.push_back(current.shape[dim]);
    KernelBuilder kb(kernelName(op->getName().stripDialect()),
                     op->getName().stripDialect().str(), domain);
    int32_t r = kb.unary(max ? KOp::ReduceMax : KOp::ReduceSum,
                         kb.load(current, map));
    if (mean)
      r = kb.binary(KOp::Mul, r, kb.constant(1.0 / double(current.shape[dim])));
    SmallVector<int64_t> shape = current.shape;
    shape[dim] = 1;
    TensorView next;
    next.buffer = newBuffer(nameOf(op->getResult(0)), BufferKind::Arena,
                            DType::F32, shape);
    next.shape = shape;
    next.strides = contiguousStrides(shape);
    map[dim] = -1;
    kb.store(next, map, r);
    addKernelStep(std::move(kb.kernel), op->getName().stripDialect());
    current = next;
  }
  auto resultShape = cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  std::optional<SmallVector<int64_t>> strides =
      reshapeStrides(current, resultShape);
  current.shape.assign(resultShape.begin(), resultShape.end());
  current.strides = *strides;
  views[op->getResult(0)] = current;
  return success();
}

LogicalResult Lowering::lowerConcat(ConcatOp op) {
  FailureOr<TensorView> out = newTensor(op.getResult(), nameOf(op.getResult()));
  if (failed(out))
    return failure();
  int64_t dim = op.getDim(), offset = 0;
  for (Value input : op.getInputs()) {
    FailureOr<TensorView> in = viewOf(input);
    if (failed(in))
      return failure();
    TensorView part = *out;
    part.shape = in->shape;
    part.offset = offset * out->strides[dim];
    SmallVector<int> map = identityMap(in->shape.size());
    KernelBuilder kb(kernelName("concat"), "concat", in->shape);
    kb.store(part, map, kb.load(*in, map));
    addKernelStep(std::move(kb.kernel), "concat");
    offset += in->shape[dim];
  }
  views[op.getResult()] = *out;
  return success();
}

FailureOr<Program> Lowering::run() {
  program.function = func.getName().str();
  if (auto model = func->getParentOfType<ModuleOp>()->getAttrOfType<
                   DictionaryAttr>("llmc.model")) {
    llvm::json::Object object;
    for (NamedAttribute entry : model) {
      Attribute value = entry.getValue();
      if (auto b = dyn_cast<BoolAttr>(value))
        object[entry.getName().str()] = b.getValue();
      else if (auto i = dyn_cast<IntegerAttr>(value))
        object[entry.getName().str()] = i.getInt();
      else if (auto f = dyn_cast<FloatAttr>(value))
        object[entry.getName().str()] = f.getValueAsDouble();
      else if (auto s = dyn_cast<StringAttr>(value))
        object[entry.getName().str()] = s.str();
    }
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::json::Value(std::move(object));
    program.modelJson = text;
  }

  for (BlockArgument arg : func.getArguments()) {
    auto type = cast<RankedTensorType>(arg.getType());
    FailureOr<DType> dtype = dtypeOf(type);
    if (failed(dtype))
      return func.emitError("unsupported argument type ") << type;
    bool isParam = bool(func.getArgAttr(arg.getArgNumber(), "llmc.param"));
    std::string name = nameOf(arg);
    int32_t buffer =
        newBuffer(name, isParam ? BufferKind::Param : BufferKind::Input,
                  *dtype, type.getShape());
    (isParam ? program.params : program.inputs).push_back({name, buffer});
    TensorView view;
    view.buffer = buffer;
    view.shape.assign(type.getShape().begin(), type.getShape().end());
    view.strides = contiguousStrides(view.shape);
    view.dtype = *dtype;
    views[arg] = view;
  }
  for (Operation &op : func.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      static const char *names[] = {"loss", "logits"};
      for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
        FailureOr<TensorView> view = viewOf(value);
        if (failed(view))
          return failure();
        // Outputs are whole, contiguous arena buffers.
        bool whole =
            program.buffers[view->buffer].kind == BufferKind::Arena &&
            view->offset == 0 &&
            ArrayRef<int64_t>(view->strides) ==
                ArrayRef<int64_t>(contiguousStrides(view->shape)) &&
            program.buffers[view->buffer].numElements() == product(view->shape);
        if (!whole)
          *view = copyContiguous(*view, nameOf(value));
        std::string name = index < 2 ? names[index]
                                     : "result" + std::to_string(index);
        program.outputs.push_back({name, view->buffer});
      }
      continue;
    }
    // Dead pure ops (an unused fill, a forgotten intermediate) cost nothing.
    if (op.use_empty() && isPure(&op))
      continue;
    if (failed(lowerOp(&op)))
      return failure();
  }
  for (auto [buffer, bound] : idBounds)
    program.buffers[buffer].idBound = bound;
  ::llmc::kir::planMemory(program);
  std::string error = ::llmc::kir::verifyProgram(program);
  if (!error.empty())
    return func.emitError("internal error: the lowered program is invalid: ")
           << error;
  return program;
}

} // namespace

FailureOr<Program> mlir::llmc::lowerToProgram(func::FuncOp func) {
  return Lowering(func).run();
}
