// GEMM and library steps: matmul and batch_matmul (with a fused epilogue
// kernel or accumulating into a planned target), attention, attention
// gradient and embedding gradient.

#include "codegen/LlmcToKernel/LoweringState.h"
#include "ir/kernel/MemoryPlan.h"

namespace mlir::llmc::lowering {

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
    appendStep(std::move(step));
    return success();
  }

  // A weight in the nn.Linear layout ([N, K], read transposed) may run from
  // a 2:4 compressed copy; the backend checks its values when they are
  // loaded (kir::GemmStep::sparseWeight).
  gemm.sparseWeight =
      transB && shared && lhs->dtype == DType::F32 &&
      *productType == DType::F32 && gemm.k % 4 == 0 &&
      gemm.b.strides[2] == 1 &&
      program.buffers[gemm.b.buffer].kind == ::llmc::kir::BufferKind::Param;

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
    FailureOr<int32_t> kernel = lowerGemmEpilogue(
        cast<FusionOp>(fusion), matmul, epilogue, *c,
        roundOnLoad ? std::optional<DType>(*productType) : std::nullopt);
    if (failed(kernel))
      return failure();
    gemm.epilogue = *kernel;
  } else {
    views[fusion ? fusion->getResult(0) : matmul->getResult(0)] = *c;
  }
  step.gemm = std::move(gemm);
  appendStep(std::move(step));
  return success();
}

FailureOr<int32_t> Lowering::lowerGemmEpilogue(FusionOp fusionOp,
                                               Operation *matmul,
                                               ArrayRef<Operation *> epilogue,
                                               const TensorView &c,
                                               std::optional<DType> roundTo) {
  auto resultType = cast<RankedTensorType>(matmul->getResult(0).getType());
  Value product = matmul->getResult(0);
  views[product] = c;
  SmallVector<int> map = identityMap(resultType.getRank());
  KernelBuilder kb(kernelName(fusionOp.getName()), fusionOp.getName().str(),
                   resultType.getShape());
  scalars.clear();
  dimMaps.clear();
  scalars[product] = kb.load(c, map);
  if (roundTo)
    scalars[product] = kb.unary(*roundTo == DType::F16 ? KOp::RoundF16
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
    TensorView out = c;
    if (*dtype != c.dtype || fusionOp.getNumResults() > 1) {
      FailureOr<TensorView> own = newTensor(result, nameOf(result));
      if (failed(own))
        return failure();
      out = *own;
    }
    kb.store(out, dimMaps.lookup(inner), scalars.lookup(inner));
    views[result] = out;
  }
  program.kernels.push_back(std::move(kb.kernel));
  return int32_t(program.kernels.size() - 1);
}

namespace {
/// A [batch, heads, seq, headDim] view of a rank-3 ([batch, seq, headDim]:
/// one head, stride 0) or rank-4 tensor, as attention steps take them.
View attentionView(const TensorView &view, int64_t rank) {
  View result;
  result.buffer = view.buffer;
  result.offset = view.offset;
  result.strides.assign(view.strides.begin(), view.strides.end());
  if (rank == 3) // [batch, seq, ...]: one head
    result.strides.insert(result.strides.begin() + 1, 0);
  return result;
}

/// The shape, scale and masking attention and its gradient share, from q
/// and the op's attributes.
template <typename Step, typename Op>
void setAttentionShape(Step &step, const TensorView &q, Op op) {
  int64_t rank = q.shape.size();
  step.batch = q.shape[0];
  step.heads = rank == 4 ? q.shape[1] : 1;
  step.seq = q.shape[rank - 2];
  step.headDim = q.shape[rank - 1];
  step.scale = op.getScale().convertToFloat();
  step.causal = op.getCausal();
}
} // namespace

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
    return attentionView(view, rank);
  };
  AttentionStep step;
  setAttentionShape(step, qkv[0], op);
  step.kvSeq = qkv[1].shape[rank - 2];
  if (Value positions = op.getPositions()) {
    if (rank != 4)
      return op.emitOpError("code generation supports positions on [batch, "
                            "heads, seq, head_dim] attention");
    FailureOr<TensorView> view = viewOf(positions);
    if (failed(view))
      return failure();
    if (view->dtype != DType::I32)
      *view = copyContiguous(*view, nameOf(positions), DType::I32);
    step.positions.buffer = view->buffer;
    step.positions.offset = view->offset;
    step.positions.strides.assign(view->strides.begin(), view->strides.end());
  }
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
  appendStep(std::move(s));
  return success();
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
    return attentionView(view, rank);
  };
  ::llmc::kir::AttentionGradStep step;
  setAttentionShape(step, in[1], op);
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
  appendStep(std::move(s));
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
  if (std::optional<int64_t> start = op.getVocabStart()) {
    // A rank's block of the vocabulary: the ids as rows of the block, -1
    // (which selects no row) for the other ranks' ids.
    KernelBuilder kb(kernelName("embedding_grad_rows"), "embedding_grad rows",
                     {positions});
    int32_t local =
        kb.binary(KOp::Sub, kb.load(ids1, {0}), kb.intConstant(*start));
    int32_t none = kb.intConstant(-1);
    int32_t below = kb.emit(KOp::CmpLt, DType::I1, {local, kb.intConstant(0)});
    int32_t above =
        kb.emit(KOp::CmpLt, DType::I1, {kb.intConstant(rows - 1), local});
    int32_t row = kb.emit(
        KOp::Select, DType::I64,
        {below, none, kb.emit(KOp::Select, DType::I64, {above, none, local})});
    TensorView rowsView;
    rowsView.buffer = newBuffer(nameOf(op.getIndices()) + ".rows",
                                BufferKind::Arena, DType::I32, {positions});
    rowsView.shape = {positions};
    rowsView.strides = {1};
    rowsView.dtype = DType::I32;
    kb.store(rowsView, {0}, row);
    std::string error = ::llmc::kir::verifyKernel(kb.kernel);
    if (!error.empty())
      return op.emitOpError("internal error: ") << error;
    addKernelStep(std::move(kb.kernel), "embedding_grad rows");
    noteIdBound(op.getIndices(), *op.getVocabSize());
    ids1 = rowsView;
  }
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
  if (!op.getVocabStart())
    noteIdBound(op.getIndices(), rows);
  Step s;
  s.kind = StepKind::EmbeddingGrad;
  s.embeddingGrad = std::move(step);
  s.origin = nameOf(op.getResult());
  appendStep(std::move(s));
  if (resultDtype != DType::F32)
    views[op.getResult()] =
        copyContiguous(*out, nameOf(op.getResult()), resultDtype);
  return success();
}

/// The wait of the collective started at step `start`.
static Step waitFor(const Program &program, int32_t start) {
  Step wait;
  wait.kind = StepKind::CollectiveWait;
  wait.collective = program.steps[start].collective;
  wait.collective.start = start;
  wait.origin = program.steps[start].origin;
  return wait;
}

void Lowering::appendStep(Step step) {
  std::vector<int32_t> touched = ::llmc::kir::buffersOfStep(program, step);
  auto touches = [&](int32_t buffer) {
    return llvm::is_contained(touched, buffer);
  };
  SmallVector<int32_t> stillInFlight;
  for (int32_t start : collectivesInFlight) {
    const ::llmc::kir::CollectiveStep &c = program.steps[start].collective;
    if (touches(c.input.buffer) || touches(c.output.buffer))
      program.steps.push_back(waitFor(program, start));
    else
      stillInFlight.push_back(start);
  }
  collectivesInFlight = std::move(stillInFlight);
  program.steps.push_back(std::move(step));
}

void Lowering::completeCollectives() {
  for (int32_t start : collectivesInFlight)
    program.steps.push_back(waitFor(program, start));
  collectivesInFlight.clear();
}

LogicalResult Lowering::lowerPipelineTransfer(Operation *op) {
  using ::llmc::kir::CollectiveKind;
  ::llmc::kir::CollectiveStep c;
  c.axis = "pp";
  Value result = op->getResult(0);
  if (auto send = dyn_cast<PipelineSendOp>(op)) {
    c.kind = CollectiveKind::Send;
    c.root = send.getPeer();
    c.axisSize = send.getStages();
    FailureOr<TensorView> in = viewOf(send.getInput());
    if (failed(in))
      return failure();
    if (ArrayRef<int64_t>(in->strides) !=
        ArrayRef<int64_t>(contiguousStrides(in->shape)))
      *in = copyContiguous(*in, nameOf(send.getInput()));
    c.count = product(in->shape);
    c.input = {in->buffer, in->offset, {1}};
  } else {
    auto recv = cast<PipelineRecvOp>(op);
    c.kind = CollectiveKind::Recv;
    c.root = recv.getPeer();
    c.axisSize = recv.getStages();
    c.count = product(recv.getType().getShape());
  }
  return startCollective(std::move(c), result);
}

LogicalResult Lowering::startCollective(::llmc::kir::CollectiveStep c,
                                        Value result) {
  FailureOr<TensorView> out = newTensor(result, nameOf(result));
  if (failed(out))
    return failure();
  c.output.buffer = out->buffer;
  c.output.offset = out->offset;
  c.output.strides = {1};
  views[result] = *out;
  Step s;
  s.kind = StepKind::CollectiveStart;
  s.collective = std::move(c);
  s.origin = nameOf(result);
  appendStep(std::move(s));
  collectivesInFlight.push_back(program.steps.size() - 1);
  return success();
}

LogicalResult Lowering::lowerCollective(Operation *op) {
  using ::llmc::kir::CollectiveKind;
  using ::llmc::kir::Reduction;
  Value input = op->getOperand(0), result = op->getResult(0);
  FailureOr<TensorView> in = viewOf(input);
  if (failed(in))
    return failure();
  ::llmc::kir::CollectiveStep c;
  auto reduction = [](CollectiveReduction r) {
    switch (r) {
    case CollectiveReduction::Sum:
      return Reduction::Sum;
    case CollectiveReduction::Avg:
      return Reduction::Avg;
    case CollectiveReduction::Max:
      return Reduction::Max;
    }
    return Reduction::Sum;
  };
  std::optional<int64_t> dim;
  if (auto r = dyn_cast<AllReduceOp>(op)) {
    c.kind = CollectiveKind::AllReduce;
    c.reduction = reduction(r.getReduction());
  } else if (auto r = dyn_cast<ReduceScatterOp>(op)) {
    c.kind = CollectiveKind::ReduceScatter;
    c.reduction = reduction(r.getReduction());
    dim = r.getDim();
  } else if (auto g = dyn_cast<AllGatherOp>(op)) {
    c.kind = CollectiveKind::AllGather;
    dim = g.getDim();
  } else {
    c.kind = CollectiveKind::Broadcast;
    c.root = cast<BroadcastFromOp>(op).getRoot();
  }
  c.axis = op->getAttrOfType<StringAttr>("axis").str();
  c.axisSize = op->getAttrOfType<IntegerAttr>("axis_size").getInt();
  // Rank r's block along `dim` is a contiguous run of elements when every
  // dimension before `dim` has size 1.
  if (dim && product(ArrayRef<int64_t>(in->shape).take_front(*dim)) != 1)
    return op->emitOpError("along dim ")
           << *dim << " needs the dimensions before it to have size 1 "
           << "(transpose the blocked dimension to the front)";
  if (ArrayRef<int64_t>(in->strides) !=
      ArrayRef<int64_t>(contiguousStrides(in->shape)))
    *in = copyContiguous(*in, nameOf(input));
  c.count = product(in->shape);
  c.input.buffer = in->buffer;
  c.input.offset = in->offset;
  c.input.strides = {1};
  return startCollective(std::move(c), result);
}
} // namespace mlir::llmc::lowering

namespace mlir::llmc::lowering {

LogicalResult Lowering::lowerCacheWrite(CacheWriteOp op) {
  // The cache is a persistent state that this function updates with the
  // op's result: the new rows are stored straight into its buffer, and no
  // other op may read the old cache (it no longer exists once written).
  auto cache = dyn_cast<BlockArgument>(op.getCache());
  if (!cache || !func.getArgAttr(cache.getArgNumber(), "llmc.state") ||
      updateTargets.lookup(op.getResult()) != cache)
    return op.emitOpError("code generation writes a cache in place: its "
                          "cache must be an llmc.state argument that the "
                          "function returns the result as the llmc.updates "
                          "of");
  if (!op.getCache().hasOneUse())
    return op.emitOpError("code generation writes the cache in place, so "
                          "nothing else may read the cache it replaces");
  FailureOr<TensorView> update = viewOf(op.getUpdate());
  if (failed(update))
    return failure();
  TensorView into = views.lookup(cache);
  // update (B, H, T, D) -> cache (B, H, S, D) at row positions[b, t]: a
  // kernel over the update's elements whose store replaces the token index.
  ArrayRef<int64_t> shape = update->shape;
  std::string origin = nameOf(op.getResult());
  KernelBuilder kb(kernelName("cache_write"), origin, shape);
  SmallVector<int> map = identityMap(4);
  int32_t value = kb.load(*update, map);
  FailureOr<int32_t> position = loadWithMap(kb, op.getPositions(), {0, 2});
  if (failed(position))
    return failure();
  int32_t operand = kb.operand(into, map);
  kb.emit(KOp::Store, DType::F32, {value, -1, -1, *position, -1}, operand);
  noteIdBound(op.getPositions(), into.shape[2]);
  addKernelStep(std::move(kb.kernel), origin);
  views[op.getResult()] = into;
  storedInPlace.insert(op.getResult());
  return success();
}

} // namespace mlir::llmc::lowering
