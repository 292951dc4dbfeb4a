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
//
// Files, one job each (shared state in LoweringState.h):
//   LlmcToKernel.cpp  the driver: arguments, the walk over the function's
//                     ops, outputs and update copies;
//   Views.cpp         views (reshape/transpose/slice/broadcast as strides),
//                     contiguous copies, concat;
//   LibrarySteps.cpp  GEMM (with epilogue kernels) and the attention,
//                     attention-gradient and embedding-gradient steps;
//   Expand.cpp        scalar expansion of fusion groups into kernels;
//   Reductions.cpp    reductions over non-row dims, norm parameter
//                     gradients, cross-entropy;
//   InPlace.cpp       in-place stores and accumulation into updated buffers.
//   GemmEpilogue.cpp  the epilogue kind of each GEMM step (kernel IR only,
//                     its own library: backends need no MLIR to use it).

#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "codegen/LlmcToKernel/GemmEpilogue.h"
#include "codegen/LlmcToKernel/LoweringState.h"
#include "ir/kernel/MemoryPlan.h"
#include "passes/NamedArguments.h"

#include "llvm/Support/JSON.h"

namespace mlir::llmc::lowering {

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
  if (op->hasTrait<OpTrait::llmc::View>())
    return lowerView(op);
  if (isa<MatmulOp, BatchMatmulOp>(op))
    return lowerGemm(op, nullptr, {});
  if (auto attention = dyn_cast<AttentionOp>(op))
    return lowerAttention(attention);
  if (auto write = dyn_cast<CacheWriteOp>(op))
    return lowerCacheWrite(write);
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return lowerAttentionGrad(grad);
  if (auto grad = dyn_cast<EmbeddingGradOp>(op))
    return lowerEmbeddingGrad(grad);
  if (auto ce = dyn_cast<CrossEntropyOp>(op))
    return lowerCrossEntropy(ce, ce.getLogits(), ce.getTargets(), ce.getLoss(),
                             ce.getLse());
  if (auto combine = dyn_cast<CrossEntropyCombineOp>(op))
    return lowerCrossEntropyCombine(combine);
  if (auto concat = dyn_cast<ConcatOp>(op))
    return lowerConcat(concat);
  if (isa<AllReduceOp, ReduceScatterOp, AllGatherOp, BroadcastFromOp>(op))
    return lowerCollective(op);
  if (isa<PipelineSendOp, PipelineRecvOp>(op))
    return lowerPipelineTransfer(op);
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

LogicalResult Lowering::lowerResults(func::ReturnOp ret) {
  // An unnamed result 0 is the loss (a hand-written @forward), 1 the logits.
  const std::string names[] = {
      ::llmc::kir::stepScalarName(::llmc::kir::StepScalar::Loss).str(),
      "logits"};
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
    // A whole buffer seen through a reshape (a flat vector returned as a
    // matrix) takes the result's shape: runtimes read outputs by buffer.
    program.buffers[view->buffer].shape.assign(view->shape.begin(),
                                               view->shape.end());
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

LogicalResult Lowering::recordAdamBetas() {
  using ::llmc::kir::StepScalar;
  if (!::llmc::kir::findStepScalar(program.inputs,
                                   StepScalar::BiasCorrection1) &&
      !::llmc::kir::findStepScalar(program.inputs, StepScalar::BiasCorrection2))
    return success();
  auto module = func->getParentOfType<ModuleOp>();
  auto betas = module->getAttrOfType<DenseF64ArrayAttr>(kAdamBetasAttr);
  if (!betas) // a hand-written update: the runtime says what it lacks
    return success();
  if (betas.size() != 2)
    return module.emitError() << kAdamBetasAttr << " holds " << betas.size()
                              << " values, not (beta1, beta2)";
  program.adamBetas.assign(betas.asArrayRef().begin(),
                           betas.asArrayRef().end());
  return success();
}

FailureOr<Program> Lowering::run() {
  program.function = func.getName().str();
  program.modelJson = modelConfigJson(func->getParentOfType<ModuleOp>());

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
  completeCollectives();
  for (auto [buffer, bound] : idBounds)
    program.buffers[buffer].idBound = bound;
  ::llmc::kir::assignStepScalars(program);
  if (failed(recordAdamBetas()))
    return failure();
  ::llmc::kir::planMemory(program);
  ::llmc::classifyGemmEpilogues(program);
  std::string error = ::llmc::kir::verifyProgram(program);
  if (!error.empty())
    return func.emitError("internal error: the lowered program is invalid: ")
           << error;
  return program;
}

} // namespace mlir::llmc::lowering

mlir::FailureOr<::llmc::kir::Program>
mlir::llmc::lowerToProgram(mlir::func::FuncOp func) {
  return lowering::Lowering(func).run();
}

llvm::Expected<std::optional<::llmc::kir::Program>>
mlir::llmc::lowerFunction(ModuleOp module, StringRef name) {
  auto func = module.lookupSymbol<func::FuncOp>(name);
  if (!func)
    return std::nullopt;
  FailureOr<::llmc::kir::Program> lowered = lowerToProgram(func);
  if (failed(lowered))
    return llvm::createStringError("lowering @" + name +
                                   " to kernels failed (see the diagnostics "
                                   "above)");
  return std::optional<::llmc::kir::Program>(std::move(*lowered));
}

std::string mlir::llmc::modelConfigJson(ModuleOp module) {
  auto model = module->getAttrOfType<DictionaryAttr>("llmc.model");
  if (!model)
    return "";
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
  return text;
}
