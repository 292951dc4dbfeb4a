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
//
// Training functions add:
// - reductions over leading dimensions (bias and norm-weight gradients) as
//   kernels whose row runs down a column (strides, no transposed copy), and
//   reductions to a scalar in two stages (per row, then over the rows), so
//   neither is one thread walking a whole tensor;
// - attention and embedding gradients as library steps;
// - dropout masks from kir::Op::Random, keyed by the `rng` input;
// - `llmc.state` arguments as State buffers and `llmc.updates` results
//   written into the named Param or State buffer: by the kernel that
//   computes them when that is safe (it is the last reader of the buffer and
//   reads it only at the element it writes), else by a copy at the end;
// - an `llmc.updates` result X + p (a gradient accumulated into its
//   persistent buffer X), p a GEMM without epilogue or an embedding
//   gradient, as that step accumulating straight into X (planAccumulation).
//
// f16 and bf16 tensors (after llmc-amp) are stored narrow and computed in
// f32: kernels load them widened and store them rounded to nearest even,
// GEMMs take f16/bf16 A and B and accumulate in f32, attention and its
// gradient compute in f32 on narrow q, k, v (lse stays f32). Inside a
// kernel, values compute in f32, but every f16/bf16 value that another op
// of the kernel reads is rounded to its type where it is computed (kir
// RoundF16/RoundBF16), as if stored and loaded again: a fused kernel
// computes the same bits as its ops unfused, so results do not depend on
// how fusion groups ops (remat regroups them). A narrow GEMM product is rounded to its type too: C
// has the product's type, or is f32 when a one-result epilogue casts it
// back up (C then holds the epilogue's result in place and the epilogue
// rounds the product as it loads it). A weight gradient X + cast(dW), dW a
// GEMM of f16/bf16 operands, accumulates dW's f32 sums straight into X
// (Megatron-LM's gradient_accumulation_fusion): the one place the lowering
// skips a rounding that the IR's types imply. Embedding gradients of narrow
// gradients widen them first (the scatter-add sums in f32).
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "codegen/LlmcToKernel/GemmEpilogue.h"
#include "ir/kernel/MemoryPlan.h"
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
    Access access = accessOf(view, dimMap);
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
  /// The access `operand` makes for `view` and `dimMap`, without adding it.
  Access accessOf(const TensorView &view, ArrayRef<int> dimMap) const {
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
    return access;
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
  int32_t index(int dim) { return emit(KOp::Index, DType::I64, {}, -1, dim); }
  bool hasStores() const {
    return llvm::any_of(kernel.body, [](const Instr &instr) {
      return instr.op == KOp::Store;
    });
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
  /// A contiguous copy of `view` (a copy kernel), for consumers that need
  /// one; converted to `dtype` when given (widened exactly, or rounded to
  /// nearest even).
  TensorView copyContiguous(const TensorView &view, StringRef name,
                            std::optional<DType> dtype = std::nullopt);

  LogicalResult lowerView(Operation *op);
  void roundNarrowResults(KernelBuilder &kb, Operation *op);
  LogicalResult lowerGemm(Operation *matmul, Operation *fusion,
                          ArrayRef<Operation *> epilogue);
  LogicalResult lowerAttention(AttentionOp op);
  LogicalResult lowerAttentionGrad(AttentionGradOp op);
  LogicalResult lowerEmbeddingGrad(EmbeddingGradOp op);
  /// The weight (result 1) and bias (result 2) gradients of a layer_norm_grad
  /// or rms_norm_grad: sums over the leading dims, one kernel over
  /// [C, rows] whose row walks down a column. `wanted`: result number and
  /// the value it becomes.
  LogicalResult lowerNormParamGrads(Operation *op,
                                    ArrayRef<std::pair<unsigned, Value>> wanted);
  /// Reduces `dims` of `input` (sum, max, or mean), returning a contiguous
  /// view with those dims as size 1, of type `resultType` (stages between
  /// are f32): one kernel when the dims can be walked as one strided run
  /// and that leaves enough rows to split across threads, else in stages
  /// (innermost reduced dim first).
  FailureOr<TensorView> reduceDims(const TensorView &input,
                                   ArrayRef<int64_t> dims, KOp reduce,
                                   bool mean, StringRef name,
                                   DType resultType = DType::F32);
  /// `view` restrided to `shape` (a reshape), copied first if strides
  /// cannot express it.
  TensorView reshaped(TensorView view, ArrayRef<int64_t> shape,
                      StringRef name);
  /// Stores attention-like outputs ([B, H, T, D]) in the order of the
  /// transpose that follows them, so that it and a merging reshape are free.
  void orderLikeTransposeUser(Value result, TensorView &view);
  /// The view of the `rng` input, element `index` (0: seed, 1: step),
  /// creating the input on first use.
  TensorView rngElement(int64_t index);
  /// The buffer an `llmc.updates` result can be stored into by the kernel
  /// of `anchor` (see the file comment), or nothing.
  std::optional<TensorView> inPlaceTarget(Value result, Operation *anchor);
  /// Whether the kernel being built reads `buffer` only through `access`,
  /// without index overrides.
  static bool readsOnlyAt(const Kernel &kernel, const Access &access);
  /// Plans `result` (an `llmc.updates` of `target`) as accumulated into
  /// target's buffer by the steps that compute its terms, when it is
  /// target + p1 (+ p2 ...) in one of these forms:
  ///   llmc.add(X, p)  or a pointwise fusion of that one add,
  ///     p a matmul, batch_matmul or embedding_grad used only there, or
  ///     p = llmc.cast(q) to X's type, q a matmul or batch_matmul of
  ///     f16/bf16 operands used only by the cast (q's f32 sums go into X
  ///     unrounded);
  ///   a gemm fusion whose epilogue only adds X and such terms (grad.wte
  ///     of tied embeddings: the logits' dW + the embedding gradient);
  /// and nothing but that add reads X from the first of those steps on
  /// (inPlaceTarget's rule). The product must have X's type: a weight
  /// gradient summed over a batch by a reduction after the GEMM is not
  /// matched (the lowering sees dW = dY^T X as one GEMM over B*T rows).
  void planAccumulation(Value result, BlockArgument target);
  /// The view of the argument `op` accumulates into, if planned.
  std::optional<TensorView> accumulationTarget(Operation *op) {
    auto it = accumulateInto.find(op);
    if (it == accumulateInto.end())
      return std::nullopt;
    return views.lookup(it->second);
  }
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
  /// Outputs (named by `llmc.output`, else loss, logits, resultN) and the
  /// copies of `llmc.updates` results not stored in place.
  LogicalResult lowerResults(func::ReturnOp ret);

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
  int32_t rngBuffer = -1;
  // Multi-dimension reductions in a row group: the kernel reduces the row,
  // a second stage the other dims.
  DenseMap<Value, Operation *> partialReductions;
  // `llmc.updates`: returned value -> the argument it is written into, and
  // the values already stored there by their kernel.
  DenseMap<Value, BlockArgument> updateTargets;
  DenseSet<Value> storedInPlace;
  // Planned accumulations (planAccumulation): the op whose step adds into
  // an argument's buffer -> that argument, and the adds they replace ->
  // the argument that holds their result.
  DenseMap<Operation *, BlockArgument> accumulateInto;
  DenseMap<Operation *, BlockArgument> accumulatedAdds;
  // Casts of narrow GEMM products that an accumulating GEMM replaces.
  DenseSet<Operation *> accumulatedCasts;
  DenseMap<Operation *, unsigned> positions; // block order of top-level ops
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
    // A fusion's block argument stands for the value it is given.
    if (arg.getOwner() != &func.getBody().front()) {
      auto it = outer.find(value);
      return it != outer.end() ? nameOf(it->second) : "input";
    }
    for (const char *attr : {"llmc.param", "llmc.state", "llmc.input"})
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

TensorView Lowering::copyContiguous(const TensorView &view, StringRef name,
                                   std::optional<DType> dtype) {
  TensorView copy;
  copy.dtype = dtype.value_or(view.dtype);
  copy.buffer = newBuffer(name, BufferKind::Arena, copy.dtype, view.shape);
  copy.shape = view.shape;
  copy.strides = contiguousStrides(copy.shape);
  SmallVector<int64_t> domain = view.shape;
  if (domain.empty())
    domain.push_back(1);
  std::string what = copy.dtype == view.dtype
                         ? "copy"
                         : std::string("convert_") +
                               ::llmc::kir::dtypeName(copy.dtype);
  KernelBuilder kb(kernelName(what), what + " " + name.str(), domain);
  SmallVector<int> map = identityMap(view.shape.size());
  kb.store(copy, map, kb.load(view, map));
  addKernelStep(std::move(kb.kernel), what + " " + name.str());
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
  FailureOr<DType> productType = dtypeOf(resultType);
  if (failed(productType) || lhs->dtype != rhs->dtype ||
      !::llmc::kir::isFloat(lhs->dtype))
    return matmul->emitOpError("internal error: GEMM operands must share one "
                               "float type");

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

  Step step;
  step.kind = StepKind::Gemm;
  step.origin = nameOf(fusion ? fusion->getResult(0) : matmul->getResult(0));
  // A planned accumulation: C is the argument's buffer (contiguous, of the
  // product's type) and the epilogue's adds are the GEMM's beta = 1.
  if (std::optional<TensorView> target =
          accumulationTarget(fusion ? fusion : matmul)) {
    gemm.c.buffer = target->buffer;
    gemm.c.offset = 0;
    gemm.c.strides = {gemm.m * gemm.n, gemm.n, 1};
    gemm.accumulate = true;
    if (fusion) {
      views[fusion->getResult(0)] = *target;
      storedInPlace.insert(fusion->getResult(0));
    }
    step.gemm = std::move(gemm);
    program.steps.push_back(std::move(step));
    return success();
  }

  // C: the product, contiguous, of the product's type (a GEMM rounds a
  // narrow product itself); the epilogue (if any) runs on it in place when
  // its one final value has C's type, else into buffers of its own. A
  // narrow product that a one-result epilogue casts back up to f32 gets an
  // f32 C instead, which the epilogue rounds as it loads it and overwrites
  // in place: no narrow buffer, the same values.
  DType cType = *productType;
  bool roundOnLoad = false;
  if (!epilogue.empty() && fusion->getNumResults() == 1 &&
      cType != DType::F32) {
    FailureOr<DType> finalType = dtypeOf(fusion->getResult(0).getType());
    if (failed(finalType))
      return failure();
    roundOnLoad = *finalType == DType::F32;
    if (roundOnLoad)
      cType = DType::F32;
  }
  FailureOr<TensorView> c = newTensor(
      fusion ? fusion->getResult(0) : matmul->getResult(0),
      nameOf(fusion ? fusion->getResult(0) : matmul->getResult(0)));
  if (failed(c))
    return failure();
  c->dtype = cType;
  program.buffers[c->buffer].dtype = cType;
  gemm.c.buffer = c->buffer;
  gemm.c.offset = 0;
  gemm.c.strides = {gemm.m * gemm.n, gemm.n, 1};

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
    if (roundOnLoad)
      scalars[product] = kb.unary(*productType == DType::F16 ? KOp::RoundF16
                                                             : KOp::RoundBF16,
                                  scalars[product]);
    dimMaps[product] = map;
    for (Operation *op : epilogue) {
      if (failed(expand(kb, op)))
        return failure();
      roundNarrowResults(kb, op);
    }
    auto yield = cast<YieldOp>(fusionOp.getBody().front().getTerminator());
    for (auto [inner, result] :
         llvm::zip(yield.getValues(), fusionOp.getResults())) {
      FailureOr<DType> dtype = dtypeOf(result.getType());
      if (failed(dtype))
        return failure();
      TensorView out = *c;
      if (*dtype != c->dtype || fusionOp.getNumResults() > 1) {
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
  // f32, f16 or bf16 alike (computed in f32); one type for all four.
  for (const TensorView &view : {qkv[1], qkv[2], *out})
    if (view.dtype != qkv[0].dtype)
      return op.emitOpError("code generation needs q, k, v and the output "
                            "of one element type");
  orderLikeTransposeUser(op.getResult(), *out);
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

void Lowering::orderLikeTransposeUser(Value result, TensorView &view) {
  // Heads are usually transposed back next ([B, H, T, D] -> [B, T, H, D])
  // to be merged: store the output in that order, so the transpose and the
  // reshape after it are free. The head dimension stays innermost.
  int64_t rank = view.shape.size();
  if (!result.hasOneUse())
    return;
  auto transpose = dyn_cast<TransposeOp>(*result.getUsers().begin());
  if (!transpose)
    return;
  ArrayRef<int64_t> perm = transpose.getPermutation();
  if (perm.empty() || perm.back() != rank - 1)
    return;
  SmallVector<int64_t> shape, strides(rank);
  for (int64_t p : perm)
    shape.push_back(view.shape[p]);
  program.buffers[view.buffer].shape.assign(shape.begin(), shape.end());
  SmallVector<int64_t> contiguous = contiguousStrides(shape);
  for (int64_t j = 0; j < rank; ++j)
    strides[perm[j]] = contiguous[j];
  view.strides = strides;
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
  // A result of lower rank than the domain is row-level (a row statistic,
  // or a rank-0 value of a scalar group run over the padded domain [1]):
  // its dimensions are the leading ones.
  if (resultShape.size() < full.size())
    resultMap.resize(resultShape.size());
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
  // Flags (i1) and selection. x - x is 0 for every finite x and NaN for
  // inf and NaN; no emitter uses fast-math flags that would fold it.
  if (isa<IsFiniteOp>(op))
    return unaryOp([&](int32_t x) {
      return kb.emit(KOp::CmpEq, DType::I1,
                     {kb.binary(KOp::Sub, x, x), kb.constant(0.0)});
    });
  if (auto compare = dyn_cast<CompareOp>(op)) {
    KOp kop = compare.getPredicate() == ComparePredicate::LT   ? KOp::CmpLt
              : compare.getPredicate() == ComparePredicate::LE ? KOp::CmpLe
                                                               : KOp::CmpEq;
    FailureOr<int32_t> a = arg(0), b = arg(1);
    if (failed(a) || failed(b))
      return failure();
    define(op->getResult(0), kb.emit(kop, DType::I1, {*a, *b}), resultMap);
    return success();
  }
  if (isa<SelectOp>(op)) {
    FailureOr<int32_t> c = arg(0), a = arg(1), b = arg(2);
    if (failed(c) || failed(a) || failed(b))
      return failure();
    define(op->getResult(0), kb.emit(KOp::Select, DType::F32, {*c, *a, *b}),
           resultMap);
    return success();
  }
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
  if (auto dropout = dyn_cast<DropoutOp>(op)) {
    if (dropout.getRate().isZero())
      return unaryOp([](int32_t x) { return x; });
    // Element i (row-major in the dropout's tensor) is kept iff
    // Random(seed, (step << 32) | stream, i) >= rate (see kir::Op::Random).
    int64_t stream = dropout.getStreamAttr().getInt();
    if (stream >= (int64_t(1) << 32))
      return op->emitOpError("code generation needs dropout streams below "
                             "2^32, got ")
             << stream;
    FailureOr<int32_t> x = arg(0);
    if (failed(x))
      return failure();
    SmallVector<int> map(full);
    int32_t seed = kb.load(rngElement(0), {-1});
    int32_t step = kb.load(rngElement(1), {-1});
    int32_t high = kb.binary(
        KOp::Add, kb.binary(KOp::Mul, step, kb.intConstant(int64_t(1) << 32)),
        kb.intConstant(stream));
    SmallVector<int64_t> strides = contiguousStrides(resultShape);
    int32_t flat = -1;
    for (auto [d, dim] : llvm::enumerate(resultMap)) {
      if (dim < 0 || resultShape[d] == 1)
        continue;
      int32_t term = kb.index(dim);
      if (strides[d] != 1)
        term = kb.binary(KOp::Mul, term, kb.intConstant(strides[d]));
      flat = flat < 0 ? term : kb.binary(KOp::Add, flat, term);
    }
    if (flat < 0)
      flat = kb.intConstant(0);
    int32_t random = kb.emit(KOp::Random, DType::F32, {seed, high, flat});
    float rate = dropout.getRate().convertToFloat();
    int32_t keep = kb.emit(KOp::CmpLe, DType::I1,
                           {kb.constant(double(rate)), random});
    int32_t scaled =
        kb.binary(KOp::Mul, *x, kb.constant(double(1.0f / (1.0f - rate))));
    define(dropout.getResult(),
           kb.emit(KOp::Select, DType::F32, {keep, scaled, kb.constant(0.0)}),
           resultMap);
    return success();
  }
  // Activation gradients: grad * f'(x).
  auto activationGrad = [&](auto derivative) -> LogicalResult {
    FailureOr<int32_t> g = arg(0), x = arg(1);
    if (failed(g) || failed(x))
      return failure();
    define(op->getResult(0), kb.binary(KOp::Mul, *g, derivative(*x)),
           resultMap);
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
      int32_t one = kb.constant(1.0), half = kb.constant(0.5);
      int32_t x2 = kb.binary(KOp::Mul, x, x);
      if (gelu.getApproximate() == GeluApproximation::Tanh) {
        // 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
        // t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
        double k = std::sqrt(2.0 / M_PI);
        int32_t poly = kb.binary(
            KOp::Add, x,
            kb.binary(KOp::Mul, kb.constant(0.044715),
                      kb.binary(KOp::Mul, x2, x)));
        int32_t t =
            kb.unary(KOp::Tanh, kb.binary(KOp::Mul, kb.constant(k), poly));
        int32_t left = kb.binary(KOp::Mul, half, kb.binary(KOp::Add, one, t));
        int32_t sech2 = kb.binary(KOp::Sub, one, kb.binary(KOp::Mul, t, t));
        int32_t dpoly = kb.binary(
            KOp::Add, kb.constant(k),
            kb.binary(KOp::Mul, kb.constant(k * 3.0 * 0.044715), x2));
        int32_t right = kb.binary(
            KOp::Mul, kb.binary(KOp::Mul, half, x),
            kb.binary(KOp::Mul, sech2, dpoly));
        return kb.binary(KOp::Add, left, right);
      }
      // 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)
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
    });
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

  // Backward row ops. Row statistics (mean, rstd, lse, targets) have the
  // domain's shape without the row; they are loaded once per row.
  auto rowScalar = [&](Value value) -> FailureOr<int32_t> {
    auto it = scalars.find(value);
    if (it != scalars.end() && dimMaps.lookup(value) == rowLevel)
      return it->second;
    return loadWithMap(kb, value, rowLevel);
  };
  if (auto grad = dyn_cast<SoftmaxGradOp>(op)) {
    // y (g - sum(g y))
    FailureOr<int32_t> g = arg(0), y = arg(1);
    if (failed(g) || failed(y))
      return failure();
    int32_t dot = kb.unary(KOp::ReduceSum, kb.binary(KOp::Mul, *g, *y));
    define(grad.getResult(),
           kb.binary(KOp::Mul, *y, kb.binary(KOp::Sub, *g, dot)), full);
    return success();
  }
  if (isa<LayerNormGradOp, RmsNormGradOp>(op)) {
    // xhat = (x - mean) rstd (rms: x rstd), dxhat = dy w;
    // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), without the
    // mean(dxhat) term for rms. The weight and bias gradients are sums over
    // rows: lowerNormParamGrads.
    bool layerNorm = isa<LayerNormGradOp>(op);
    FailureOr<int32_t> dy = arg(0), x = arg(1), w = arg(2);
    FailureOr<int32_t> rstd = rowScalar(op->getOperand(layerNorm ? 4 : 3));
    if (failed(dy) || failed(x) || failed(w) || failed(rstd))
      return failure();
    int32_t xhat = kb.binary(KOp::Mul, *x, *rstd);
    if (layerNorm) {
      FailureOr<int32_t> mean = rowScalar(op->getOperand(3));
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
    define(op->getResult(0), kb.binary(KOp::Mul, centered, *rstd), full);
    return success();
  }
  if (auto grad = dyn_cast<CrossEntropyGradOp>(op)) {
    // dloss (exp(l - lse) - [v == target]) / N: the probabilities of the
    // forward are recomputed from its lse, never stored.
    FailureOr<int32_t> l = arg(1);
    FailureOr<int32_t> lse = rowScalar(grad.getLse());
    FailureOr<int32_t> target = rowScalar(grad.getTargets());
    FailureOr<int32_t> dloss = loadWithMap(kb, grad.getGrad(), {});
    if (failed(l) || failed(lse) || failed(target) || failed(dloss))
      return failure();
    int32_t p = kb.unary(KOp::Exp, kb.binary(KOp::Sub, *l, *lse));
    int32_t hit =
        kb.emit(KOp::CmpEq, DType::I1, {kb.index(rank - 1), *target});
    int32_t diff = kb.binary(
        KOp::Sub, p,
        kb.emit(KOp::Select, DType::F32,
                {hit, kb.constant(1.0), kb.constant(0.0)}));
    int64_t positions = kb.kernel.numRows();
    int32_t scale = kb.binary(KOp::Mul, *dloss,
                              kb.constant(1.0 / double(positions)));
    define(grad.getResult(), kb.binary(KOp::Mul, diff, scale), full);
    noteIdBound(grad.getTargets(), rowLength);
    return success();
  }
  return op->emitOpError("is not supported inside a kernel by code generation");
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
            ReduceMaxOp>(op))
      shaped = op->getOperand(0);
    else if (isa<SoftmaxGradOp, LayerNormGradOp, RmsNormGradOp,
                 CrossEntropyGradOp>(op))
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

bool Lowering::readsOnlyAt(const Kernel &kernel, const Access &access) {
  for (const Instr &instr : kernel.body) {
    if (instr.op != KOp::Load)
      continue;
    const Access &read = kernel.operands[instr.operand];
    if (read.buffer != access.buffer)
      continue;
    bool overridden = llvm::any_of(instr.args, [](int32_t a) { return a >= 0; });
    if (overridden || read.offset != access.offset ||
        read.strides != access.strides)
      return false;
  }
  return true;
}

void Lowering::planAccumulation(Value result, BlockArgument target) {
  auto resultOp = dyn_cast<OpResult>(result);
  if (!resultOp || resultOp.getOwner()->getNumResults() != 1 ||
      resultOp.getOwner()->getBlock() != &func.getBody().front())
    return;
  Operation *consumer = resultOp.getOwner();
  Type type = result.getType();
  FailureOr<DType> dtype = dtypeOf(type);
  if (failed(dtype) || *dtype != DType::F32)
    return;
  // A term of the sum: an op whose step can accumulate, used only by the
  // consumer, of X's type.
  auto isTerm = [&](Value value) {
    Operation *def = value.getDefiningOp();
    return def && value.getType() == type && value.hasOneUse() &&
           def->getBlock() == consumer->getBlock() &&
           isa<MatmulOp, BatchMatmulOp, EmbeddingGradOp>(def);
  };
  // A GEMM of f16/bf16 operands whose product only a cast to X's type
  // reads (the weight gradient of a low-precision copy): its step sums its
  // f32 products into X without rounding them to the narrow type first.
  auto narrowProduct = [&](Value value) -> Operation * {
    Operation *def = value.getDefiningOp();
    FailureOr<DType> narrow = dtypeOf(value.getType());
    if (!def || !value.hasOneUse() || def->getBlock() != consumer->getBlock() ||
        !isa<MatmulOp, BatchMatmulOp>(def) || failed(narrow) ||
        *narrow == DType::F32)
      return nullptr;
    return def;
  };
  auto castToType = [&](Operation *op) {
    return isa_and_nonnull<CastOp>(op) && op->getResult(0).getType() == type &&
           op->getResult(0).hasOneUse();
  };
  SmallVector<Operation *> producers;
  SmallVector<Operation *> casts; // top-level casts of narrow products
  if (auto fusion = dyn_cast<FusionOp>(consumer)) {
    Block &body = fusion.getBody().front();
    auto yield = cast<YieldOp>(body.getTerminator());
    bool gemm = fusion.getKind() == FusionKind::Gemm;
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    if (ops.empty() || yield.getValues().size() != 1 ||
        yield.getValues()[0] != ops.back()->getResult(0) ||
        (gemm && !isa<MatmulOp, BatchMatmulOp>(ops.front())))
      return;
    // The chain starts from the product in a gemm fusion: cast up to X's
    // type first if it is narrow.
    Value sum = gemm ? ops.front()->getResult(0) : Value();
    size_t next = gemm ? 1 : 0;
    if (gemm && sum.getType() != type) {
      FailureOr<DType> narrow = dtypeOf(sum.getType());
      if (failed(narrow) || *narrow == DType::F32 || !sum.hasOneUse() ||
          next >= ops.size() || !castToType(ops[next]) ||
          ops[next]->getOperand(0) != sum)
        return;
      sum = ops[next++]->getResult(0);
    }
    // Each add takes the previous sum (first: the product, in a gemm
    // fusion) and one chain operand: a block argument that is X or a term,
    // or a cast to X's type of a block argument that is a narrow product.
    bool sawTarget = false;
    int numAdds = 0;
    auto takeOperand = [&](Value arg) {
      Value inner = arg;
      Operation *def = arg.getDefiningOp();
      bool widened = castToType(def) && def->getBlock() == &body;
      if (widened)
        inner = def->getOperand(0);
      auto blockArg = dyn_cast<BlockArgument>(inner);
      if (!blockArg || blockArg.getOwner() != &body || !inner.hasOneUse())
        return false;
      Value outer = fusion.getInputs()[blockArg.getArgNumber()];
      if (widened) {
        Operation *gemmOp = narrowProduct(outer);
        if (gemmOp)
          producers.push_back(gemmOp);
        return gemmOp != nullptr;
      }
      if (outer == target && !sawTarget) {
        sawTarget = true;
        return true;
      }
      if (!isTerm(outer))
        return false;
      producers.push_back(outer.getDefiningOp());
      return true;
    };
    for (Operation *op : ArrayRef(ops).drop_front(next)) {
      if (castToType(op))
        continue; // taken by the add that reads it
      if (!isa<AddOp>(op) || op->getResult(0).getType() != type)
        return;
      ++numAdds;
      Value lhs = op->getOperand(0), rhs = op->getOperand(1);
      SmallVector<Value> args;
      if (!sum)
        args = {lhs, rhs};
      else if (lhs == sum && rhs != sum)
        args = {rhs};
      else if (rhs == sum)
        args = {lhs};
      else
        return;
      for (Value arg : args)
        if (!takeOperand(arg))
          return;
      sum = op->getResult(0);
    }
    // X is read once, by its add; the product's operands are not X; a
    // pointwise fusion is the one add.
    if (!sawTarget || llvm::count(fusion.getInputs(), Value(target)) != 1 ||
        numAdds == 0 || (!gemm && numAdds != 1))
      return;
    if (gemm)
      producers.push_back(fusion);
  } else if (isa<AddOp>(consumer)) {
    Value lhs = consumer->getOperand(0), rhs = consumer->getOperand(1);
    Value term = lhs == target ? rhs : rhs == target ? lhs : Value();
    if (!term || term == target)
      return;
    Operation *def = term.getDefiningOp();
    if (isTerm(term)) {
      producers.push_back(def);
    } else if (castToType(def) && def->getBlock() == consumer->getBlock()) {
      Operation *gemmOp = narrowProduct(def->getOperand(0));
      if (!gemmOp)
        return;
      producers.push_back(gemmOp);
      casts.push_back(def);
    } else {
      return;
    }
  } else {
    return;
  }
  if (producers.empty())
    return;

  // From the first producer on, the consumer's add is the only reader of
  // X (through views too; the return op counts).
  unsigned first = positions.lookup(consumer);
  for (Operation *op : producers)
    first = std::min(first, positions.lookup(op));
  SmallVector<Value> worklist = {target};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (user == consumer && value == target)
        continue;
      Operation *top = func.getBody().front().findAncestorOpInBlock(*user);
      if (!top || positions.lookup(top) >= first)
        return;
      if (isa<ReshapeOp, TransposeOp, SliceOp, BroadcastOp>(user))
        worklist.push_back(user->getResult(0));
    }
  }
  for (Operation *op : producers)
    accumulateInto[op] = target;
  for (Operation *op : casts)
    accumulatedCasts.insert(op);
  auto fusion = dyn_cast<FusionOp>(consumer);
  if (!fusion || fusion.getKind() != FusionKind::Gemm)
    accumulatedAdds[consumer] = target;
}

std::optional<TensorView> Lowering::inPlaceTarget(Value result,
                                                  Operation *anchor) {
  auto it = updateTargets.find(result);
  if (it == updateTargets.end())
    return std::nullopt;
  BlockArgument arg = it->second;
  // Safe only if nothing after `anchor` reads the argument, through views
  // too (the return op counts as a reader: the old value may be returned).
  unsigned at = positions.lookup(anchor);
  SmallVector<Value> worklist = {arg};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      Operation *top = func.getBody().front().findAncestorOpInBlock(*user);
      if (!top || positions.lookup(top) > at)
        return std::nullopt;
      if (isa<ReshapeOp, TransposeOp, SliceOp, BroadcastOp>(user))
        worklist.push_back(user->getResult(0));
    }
  }
  TensorView view = views.lookup(arg);
  FailureOr<DType> dtype = dtypeOf(result.getType());
  if (failed(dtype) || *dtype != view.dtype ||
      cast<RankedTensorType>(result.getType()).getShape() !=
          ArrayRef<int64_t>(view.shape))
    return std::nullopt;
  return view;
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
  if (accumulatedCasts.contains(op))
    return success(); // its GEMM sums its products in f32 into the target
  if (auto it = accumulatedAdds.find(op); it != accumulatedAdds.end()) {
    // The producers of its terms already added them into the argument.
    views[op->getResult(0)] = views.lookup(it->second);
    storedInPlace.insert(op->getResult(0));
    return success();
  }
  if (isa<ReshapeOp, TransposeOp, SliceOp, BroadcastOp>(op))
    return lowerView(op);
  if (isa<MatmulOp, BatchMatmulOp>(op))
    return lowerGemm(op, nullptr, {});
  if (auto attention = dyn_cast<AttentionOp>(op))
    return lowerAttention(attention);
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return lowerAttentionGrad(grad);
  if (auto grad = dyn_cast<EmbeddingGradOp>(op))
    return lowerEmbeddingGrad(grad);
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
    if (fusion.getKind() == FusionKind::Gemm)
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
  // dimensions, reduceDims walks them by strides.
  auto inputType = cast<RankedTensorType>(op->getOperand(0).getType());
  ArrayRef<int64_t> dims =
      op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
  int64_t rank = inputType.getRank();
  // (One long row, a rank-1 input, goes to reduceDims, which splits it.)
  bool oneLongRow = rank == 1 && inputType.getDimSize(0) >= 65536;
  if (dims.size() == 1 && dims[0] == rank - 1 && !oneLongRow)
    return lowerGroup(op, op->getName().stripDialect(), {op},
                      op->getOperands(), op->getOperands(), op->getResults(),
                      op->getResults());
  FailureOr<TensorView> input = viewOf(op->getOperand(0));
  FailureOr<DType> resultType = dtypeOf(op->getResult(0).getType());
  if (failed(input) || failed(resultType))
    return failure();
  FailureOr<TensorView> reduced =
      reduceDims(*input, dims,
                 isa<ReduceMaxOp>(op) ? KOp::ReduceMax : KOp::ReduceSum,
                 isa<ReduceMeanOp>(op), nameOf(op->getResult(0)),
                 *resultType);
  if (failed(reduced))
    return failure();
  auto resultShape = cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  views[op->getResult(0)] =
      reshaped(*reduced, resultShape, nameOf(op->getResult(0)));
  return success();
}

TensorView Lowering::reshaped(TensorView view, ArrayRef<int64_t> shape,
                              StringRef name) {
  std::optional<SmallVector<int64_t>> strides = reshapeStrides(view, shape);
  if (!strides) {
    view = copyContiguous(view, name);
    strides = reshapeStrides(view, shape);
  }
  view.shape.assign(shape.begin(), shape.end());
  view.strides = *strides;
  return view;
}

FailureOr<TensorView> Lowering::reduceDims(const TensorView &input,
                                           ArrayRef<int64_t> dims, KOp reduce,
                                           bool mean, StringRef name,
                                           DType resultType) {
  // Size-1 dims need no work.
  SmallVector<int64_t> todo;
  for (int64_t d : dims)
    if (input.shape[d] != 1)
      todo.push_back(d);
  if (todo.empty())
    return input;
  int64_t length = 1, keptRows = 1;
  for (auto [d, extent] : llvm::enumerate(input.shape))
    (llvm::is_contained(todo, int64_t(d)) ? length : keptRows) *= extent;

  // The reduced dims walk as one run of stride `step` if, ordered by
  // stride, each one's stride is the next one's times its extent.
  SmallVector<int64_t> byStride(todo);
  llvm::stable_sort(byStride, [&](int64_t a, int64_t b) {
    return input.strides[a] > input.strides[b];
  });
  bool oneRun = true;
  for (size_t i = 0; i + 1 < byStride.size(); ++i)
    oneRun &= input.strides[byStride[i]] ==
              input.strides[byStride[i + 1]] * input.shape[byStride[i + 1]];
  // Few rows and long runs would leave threads idle: reduce in stages, the
  // innermost dim first (then its partial sums are the next stage's input).
  bool fewRows = keptRows < 64 && length >= 65536;
  if (!oneRun || (fewRows && todo.size() > 1)) {
    int64_t innermost = byStride.back();
    FailureOr<TensorView> first = reduceDims(input, {innermost}, reduce, mean,
                                             name);
    if (failed(first))
      return failure();
    SmallVector<int64_t> rest;
    for (int64_t d : todo)
      if (d != innermost)
        rest.push_back(d);
    return reduceDims(*first, rest, reduce, mean, name, resultType);
  }
  if (fewRows) {
    // One long dim: split it into [blocks, length / blocks] when it
    // divides, and reduce the inner part first.
    int64_t d = todo.front();
    for (int64_t blocks = 1024; blocks >= 64; --blocks) {
      if (length % blocks != 0)
        continue;
      TensorView split = input;
      split.shape[d] = length / blocks;
      split.shape.insert(split.shape.begin() + d, blocks);
      split.strides.insert(split.strides.begin() + d,
                           input.strides[d] * (length / blocks));
      FailureOr<TensorView> partial =
          reduceDims(split, {d + 1}, reduce, mean, name);
      if (failed(partial))
        return failure();
      FailureOr<TensorView> total = reduceDims(*partial, {d}, reduce, mean,
                                               name, resultType);
      if (failed(total))
        return failure();
      // Drop the block dim (size 1 now) to give the input's rank back.
      SmallVector<int64_t> shape(input.shape);
      shape[d] = 1;
      return reshaped(*total, shape, name);
    }
  }

  // One kernel: domain [kept dims..., the run], the result stored once per
  // row (a kept index).
  SmallVector<int64_t> domain, inStrides, outShape(input.shape), outStrides;
  for (int64_t d : todo)
    outShape[d] = 1;
  SmallVector<int64_t> contiguous = contiguousStrides(outShape);
  for (auto [d, extent] : llvm::enumerate(input.shape)) {
    if (llvm::is_contained(todo, int64_t(d)))
      continue;
    domain.push_back(extent);
    inStrides.push_back(input.strides[d]);
    outStrides.push_back(contiguous[d]);
  }
  if (domain.empty()) {
    domain.push_back(1);
    inStrides.push_back(0);
    outStrides.push_back(0);
  }
  domain.push_back(length);
  inStrides.push_back(input.strides[byStride.back()]);
  outStrides.push_back(0);

  KernelBuilder kb(kernelName(name), name.str(), domain);
  TensorView walk = input;
  walk.shape = domain;
  walk.strides = inStrides;
  SmallVector<int> map = identityMap(domain.size());
  int32_t r = kb.unary(reduce, kb.load(walk, map));
  if (mean)
    r = kb.binary(KOp::Mul, r, kb.constant(1.0 / double(length)));
  TensorView out;
  out.buffer = newBuffer(name, BufferKind::Arena, resultType, outShape);
  out.shape = outShape;
  out.strides = contiguous;
  out.dtype = resultType;
  TensorView store = out;
  store.shape = domain;
  store.strides = outStrides;
  kb.store(store, map, r);
  addKernelStep(std::move(kb.kernel), name);
  return out;
}

LogicalResult Lowering::lowerNormParamGrads(
    Operation *op, ArrayRef<std::pair<unsigned, Value>> wanted) {
  // dw[c] = sum_n dy[n, c] xhat[n, c], db[c] = sum_n dy[n, c]: the kernel's
  // rows are the channels, each walking down its column (stride C), so the
  // sums need no transposed copy and split across threads by channel.
  auto outside = [&](Value value) {
    return outer.count(value) ? outer.lookup(value) : value;
  };
  auto source = [&](Value value) { return viewOf(value); };
  bool layerNorm = isa<LayerNormGradOp>(op);
  Value dyValue = outside(op->getOperand(0)), xValue = outside(op->getOperand(1));
  Value rstdValue = outside(op->getOperand(layerNorm ? 4 : 3));
  FailureOr<TensorView> dy = source(dyValue), x = source(xValue),
                        rstd = source(rstdValue);
  if (failed(dy) || failed(x) || failed(rstd))
    return failure();
  int64_t channels = dy->shape.back();
  int64_t rows = product(dy->shape) / channels;
  std::string name = op->getName().stripDialect().str() + " params";
  TensorView dy2 = reshaped(*dy, {rows, channels}, nameOf(dyValue));
  TensorView x2 = reshaped(*x, {rows, channels}, nameOf(xValue));
  TensorView rstd1 = reshaped(*rstd, {rows}, nameOf(rstdValue));
  KernelBuilder kb(kernelName(name), name, {channels, rows});
  int32_t g = kb.load(dy2, {1, 0});
  int32_t centered = kb.load(x2, {1, 0});
  if (layerNorm) {
    Value meanValue = outside(op->getOperand(3));
    FailureOr<TensorView> mean = source(meanValue);
    if (failed(mean))
      return failure();
    TensorView mean1 = reshaped(*mean, {rows}, nameOf(meanValue));
    centered = kb.binary(KOp::Sub, centered, kb.load(mean1, {1}));
  }
  int32_t xhat = kb.binary(KOp::Mul, centered, kb.load(rstd1, {1}));
  for (auto [number, result] : wanted) {
    int32_t sum = kb.unary(KOp::ReduceSum,
                           number == 1 ? kb.binary(KOp::Mul, g, xhat) : g);
    FailureOr<TensorView> out = newTensor(result, nameOf(result));
    if (failed(out))
      return failure();
    kb.store(*out, {0}, sum);
    views[result] = *out;
  }
  std::string error = ::llmc::kir::verifyKernel(kb.kernel);
  if (!error.empty())
    return op->emitOpError("internal error: ") << error;
  addKernelStep(std::move(kb.kernel), name);
  return success();
}

TensorView Lowering::rngElement(int64_t index) {
  if (rngBuffer < 0) {
    rngBuffer = newBuffer(::llmc::kir::kRngInputName, BufferKind::Input,
                          DType::I64, {2});
    program.inputs.push_back({::llmc::kir::kRngInputName, rngBuffer});
  }
  TensorView view;
  view.buffer = rngBuffer;
  view.offset = index;
  view.shape = {1};
  view.strides = {1};
  view.dtype = DType::I64;
  return view;
}

LogicalResult Lowering::lowerAttentionGrad(AttentionGradOp op) {
  SmallVector<TensorView> in;
  for (Value operand : {op.getGrad(), op.getQuery(), op.getKey(),
                        op.getValue(), op.getOutput()}) {
    FailureOr<TensorView> view = viewOf(operand);
    if (failed(view))
      return failure();
    if (view->strides.back() != 1)
      *view = copyContiguous(*view, nameOf(operand));
    in.push_back(*view);
  }
  FailureOr<TensorView> lse = viewOf(op.getLse());
  if (failed(lse))
    return failure();
  int64_t rank = in[0].shape.size();
  if (rank != 3 && rank != 4)
    return op.emitOpError("code generation supports attention gradients on "
                          "[batch, seq, head_dim] or [batch, heads, seq, "
                          "head_dim], got rank ")
           << rank;
  SmallVector<TensorView> grads;
  for (Value result : op.getResults()) {
    FailureOr<TensorView> view = newTensor(result, nameOf(result));
    if (failed(view))
      return failure();
    orderLikeTransposeUser(result, *view);
    views[result] = *view;
    grads.push_back(*view);
  }
  // f32, f16 or bf16 alike (computed in f32); one type for all eight.
  for (const TensorView &view : llvm::concat<TensorView>(in, grads))
    if (view.dtype != in[0].dtype)
      return op.emitOpError("code generation needs the gradient, q, k, v, "
                            "the output and the results of one element type");
  auto toView = [&](const TensorView &view) {
    View result;
    result.buffer = view.buffer;
    result.offset = view.offset;
    result.strides.assign(view.strides.begin(), view.strides.end());
    if (rank == 3) // [batch, seq, ...]: one head
      result.strides.insert(result.strides.begin() + 1, 0);
    return result;
  };
  ::llmc::kir::AttentionGradStep step;
  step.batch = in[1].shape[0];
  step.heads = rank == 4 ? in[1].shape[1] : 1;
  step.seq = in[1].shape[rank - 2];
  step.headDim = in[1].shape[rank - 1];
  step.scale = op.getScale().convertToFloat();
  step.causal = op.getCausal();
  step.dout = toView(in[0]);
  step.q = toView(in[1]);
  step.k = toView(in[2]);
  step.v = toView(in[3]);
  step.out = toView(in[4]);
  step.lse = toView(*lse);
  step.dq = toView(grads[0]);
  step.dk = toView(grads[1]);
  step.dv = toView(grads[2]);
  Step s;
  s.kind = StepKind::AttentionGrad;
  s.attentionGrad = std::move(step);
  s.origin = nameOf(op.getResult(0));
  program.steps.push_back(std::move(s));
  return success();
}

LogicalResult Lowering::lowerEmbeddingGrad(EmbeddingGradOp op) {
  FailureOr<TensorView> grad = viewOf(op.getGrad());
  FailureOr<TensorView> ids = viewOf(op.getIndices());
  if (failed(grad) || failed(ids))
    return failure();
  auto resultType = op.getResult().getType();
  int64_t rows = resultType.getDimSize(0), channels = resultType.getDimSize(1);
  int64_t positions = product(ids->shape);
  TensorView grad2 =
      reshaped(*grad, {positions, channels}, nameOf(op.getGrad()));
  // The scatter-add sums f32 rows into an f32 table: a narrow gradient is
  // widened first, a narrow result rounded after.
  if (grad2.dtype != DType::F32)
    grad2 = copyContiguous(grad2, nameOf(op.getGrad()), DType::F32);
  TensorView ids1 = reshaped(*ids, {positions}, nameOf(op.getIndices()));
  std::optional<TensorView> target = accumulationTarget(op);
  FailureOr<TensorView> out =
      target ? FailureOr<TensorView>(*target)
             : newTensor(op.getResult(), nameOf(op.getResult()));
  if (failed(out))
    return failure();
  DType resultDtype = out->dtype;
  if (resultDtype != DType::F32) {
    out->dtype = DType::F32;
    program.buffers[out->buffer].dtype = DType::F32;
  }
  auto toView = [](const TensorView &view) {
    View result;
    result.buffer = view.buffer;
    result.offset = view.offset;
    result.strides.assign(view.strides.begin(), view.strides.end());
    return result;
  };
  ::llmc::kir::EmbeddingGradStep step;
  step.positions = positions;
  step.rows = rows;
  step.channels = channels;
  step.ids = toView(ids1);
  step.grad = toView(grad2);
  step.out = toView(*out);
  step.accumulate = target.has_value();
  if (!target) // else its only use, the add, is the accumulation
    views[op.getResult()] = *out;
  noteIdBound(op.getIndices(), rows);
  Step s;
  s.kind = StepKind::EmbeddingGrad;
  s.embeddingGrad = std::move(step);
  s.origin = nameOf(op.getResult());
  program.steps.push_back(std::move(s));
  if (resultDtype != DType::F32)
    views[op.getResult()] =
        copyContiguous(*out, nameOf(op.getResult()), resultDtype);
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

LogicalResult Lowering::lowerResults(func::ReturnOp ret) {
  static const char *names[] = {"loss", "logits"};
  // Updates whose kernel could not store in place: (source, target), copied
  // after everything else, when no step reads the old values any more.
  SmallVector<std::pair<Value, BlockArgument>> copies;
  for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
    auto update = func.getResultAttrOfType<StringAttr>(index, "llmc.updates");
    auto output = func.getResultAttrOfType<StringAttr>(index, "llmc.output");
    if (update) {
      BlockArgument target;
      for (BlockArgument arg : func.getArguments())
        for (const char *attr : {"llmc.param", "llmc.state"})
          if (func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr) ==
              update)
            target = arg;
      int32_t buffer = views.lookup(target).buffer;
      program.updates.push_back({update.str(), buffer});
      bool inPlace = storedInPlace.contains(value) &&
                     updateTargets.lookup(value) == target;
      if (!inPlace && value != target)
        copies.push_back({value, target});
      // Named as an output too, the result is read from the buffer it
      // updates: a copy into the arena would cost a pass over it.
      if (output)
        program.outputs.push_back({output.str(), buffer});
      continue;
    }
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
    std::string name = output  ? output.str()
                       : index < 2 ? names[index]
                                   : "result" + std::to_string(index);
    program.outputs.push_back({name, view->buffer});
  }
  // A source that is itself a parameter or state another copy may
  // overwrite is first copied to the arena.
  SmallVector<std::pair<TensorView, BlockArgument>> sources;
  for (auto [value, target] : copies) {
    auto splat = splats.find(value);
    if (splat != splats.end() && !views.count(value)) {
      sources.push_back({TensorView(), target});
      continue;
    }
    FailureOr<TensorView> view = viewOf(value);
    if (failed(view))
      return failure();
    if (::llmc::kir::isPersistent(program.buffers[view->buffer].kind))
      *view = copyContiguous(*view, nameOf(value));
    sources.push_back({*view, target});
  }
  for (auto [source, target] : llvm::zip(sources, copies)) {
    TensorView into = views.lookup(target.second);
    SmallVector<int64_t> domain = into.shape;
    if (domain.empty())
      domain.push_back(1);
    std::string what = "update " + nameOf(target.second);
    KernelBuilder kb(kernelName("update"), what, domain);
    SmallVector<int> map = identityMap(into.shape.size());
    int32_t value;
    if (source.first.buffer < 0) { // a splat (zeroed gradients)
      double splat = splats.lookup(target.first);
      value = ::llmc::kir::isFloat(into.dtype)
                  ? kb.constant(splat)
                  : kb.intConstant(int64_t(splat));
    } else {
      value = kb.load(source.first, map);
    }
    kb.store(into, map, value);
    addKernelStep(std::move(kb.kernel), what);
  }
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
    bool isState = bool(func.getArgAttr(arg.getArgNumber(), "llmc.state"));
    BufferKind kind = isParam   ? BufferKind::Param
                      : isState ? BufferKind::State
                                : BufferKind::Input;
    std::string name = nameOf(arg);
    int32_t buffer = newBuffer(name, kind, *dtype, type.getShape());
    if (auto init = func.getArgAttrOfType<FloatAttr>(arg.getArgNumber(),
                                                     "llmc.state_init")) {
      if (!isState)
        return func.emitError("argument #")
               << arg.getArgNumber()
               << " has llmc.state_init but is not an llmc.state";
      program.buffers[buffer].initialValue = init.getValueAsDouble();
    }
    (isParam   ? program.params
     : isState ? program.states
               : program.inputs)
        .push_back({name, buffer});
    TensorView view;
    view.buffer = buffer;
    view.shape.assign(type.getShape().begin(), type.getShape().end());
    view.strides = contiguousStrides(view.shape);
    view.dtype = *dtype;
    views[arg] = view;
  }
  // `llmc.updates` results: the argument each one is written into.
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
    auto target = func.getResultAttrOfType<StringAttr>(index, "llmc.updates");
    if (!target)
      continue;
    std::optional<BlockArgument> found;
    for (BlockArgument arg : func.getArguments())
      for (const char *attr : {"llmc.param", "llmc.state"})
        if (func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr) ==
            target)
          found = arg;
    if (!found)
      return func.emitError("result #")
             << index << " updates '" << target.getValue()
             << "', which no llmc.param or llmc.state argument is named";
    if (found->getType() != value.getType())
      return func.emitError("result #")
             << index << " updates '" << target.getValue() << "' of type "
             << found->getType() << " with a " << value.getType();
    updateTargets.try_emplace(value, *found);
  }
  for (auto [index, op] : llvm::enumerate(body))
    positions[&op] = index;
  for (auto [result, target] : updateTargets)
    planAccumulation(result, target);

  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (failed(lowerResults(ret)))
        return failure();
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
  ::llmc::classifyGemmEpilogues(program);
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
