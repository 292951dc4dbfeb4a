// Tensor values as strided views of buffers: reshape, transpose, slice and
// broadcast change offsets and strides only; a view a consumer cannot take
// is copied contiguous by a copy kernel. Also concat (one copy kernel per
// input into its slice) and the views of the `rng` input.

#include "codegen/LlmcToKernel/LoweringState.h"

#include <numeric>

namespace mlir::llmc::lowering {

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

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

TensorView Lowering::rngElement(int64_t index) {
  if (rngBuffer < 0) {
    rngBuffer = newBuffer(
        ::llmc::kir::stepScalarName(::llmc::kir::StepScalar::Rng).str(),
        BufferKind::Input, DType::I64, {2});
    program.inputs.push_back(
        {::llmc::kir::stepScalarName(::llmc::kir::StepScalar::Rng).str(),
         rngBuffer});
  }
  TensorView view;
  view.buffer = rngBuffer;
  view.offset = index;
  view.shape = {1};
  view.strides = {1};
  view.dtype = DType::I64;
  return view;
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

} // namespace mlir::llmc::lowering
