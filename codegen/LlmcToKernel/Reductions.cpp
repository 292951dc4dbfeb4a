// Reductions that are not one row of a kernel: over leading or several
// dims (by strides, in stages when needed), the weight and bias gradients
// of norms, and cross-entropy (per-row loss and lse, then the mean).

#include "codegen/LlmcToKernel/LoweringState.h"

namespace mlir::llmc::lowering {

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

LogicalResult Lowering::lowerCrossEntropyCombine(CrossEntropyCombineOp op) {
  // One kernel over the N positions as one row [1, N]: lse = max +
  // log(sum_exp) at each, and the mean of lse - target_logit.
  if (op.getLoss().use_empty() && op.getLse().use_empty())
    return success();
  auto rowType = cast<RankedTensorType>(op.getMax().getType());
  int64_t n = rowType.getNumElements();
  auto flat = [&](Value value) -> FailureOr<TensorView> {
    FailureOr<TensorView> view = viewOf(value);
    if (failed(view))
      return failure();
    return reshaped(*view, {1, n}, nameOf(value));
  };
  FailureOr<TensorView> max = flat(op.getMax()), sum = flat(op.getSumExp()),
                        target = flat(op.getTargetLogit());
  if (failed(max) || failed(sum) || failed(target))
    return failure();
  KernelBuilder kb(kernelName("cross_entropy_combine"),
                   "cross_entropy_combine", {1, n});
  int32_t lse = kb.binary(KOp::Add, kb.load(*max, {0, 1}),
                          kb.unary(KOp::Log, kb.load(*sum, {0, 1})));
  if (!op.getLse().use_empty()) {
    FailureOr<TensorView> lseView = newTensor(op.getLse(), nameOf(op.getLse()));
    if (failed(lseView))
      return failure();
    views[op.getLse()] = *lseView;
    kb.store(reshaped(*lseView, {1, n}, nameOf(op.getLse())), {0, 1}, lse);
  }
  if (!op.getLoss().use_empty()) {
    int32_t total = kb.unary(
        KOp::ReduceSum, kb.binary(KOp::Sub, lse, kb.load(*target, {0, 1})));
    FailureOr<TensorView> loss = newTensor(op.getLoss(), nameOf(op.getLoss()));
    if (failed(loss))
      return failure();
    views[op.getLoss()] = *loss;
    TensorView lossView = *loss;
    lossView.shape = {1};
    lossView.strides = {0};
    kb.store(lossView, {0},
             kb.binary(KOp::Mul, total, kb.constant(1.0 / double(n))));
  }
  std::string error = ::llmc::kir::verifyKernel(kb.kernel);
  if (!error.empty())
    return op.emitOpError("internal error: ") << error;
  addKernelStep(std::move(kb.kernel), "cross_entropy_combine");
  return success();
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

} // namespace mlir::llmc::lowering
