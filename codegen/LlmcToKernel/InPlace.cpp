// In-place planning of `llmc.updates` results: stored by the kernel that
// computes them when safe (inPlaceTarget), or accumulated by the GEMM or
// embedding-gradient step that computes their terms (planAccumulation).

#include "codegen/LlmcToKernel/LoweringState.h"

namespace mlir::llmc::lowering {

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
      if (user->hasTrait<OpTrait::llmc::View>())
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
      if (user->hasTrait<OpTrait::llmc::View>())
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

} // namespace mlir::llmc::lowering
