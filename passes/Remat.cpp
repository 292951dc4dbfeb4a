// The llmc-remat pass: activation checkpointing of @grad_step.
//
// @grad_step is the forward ops (the ones its `loss` result depends on)
// followed by the backward sweep, which reads forward values directly. A
// policy picks the set S of forward values that stay stored. Every backward
// use of a forward value outside S is then replaced by a recomputation: its
// producer is cloned right before the backward op, with operands that are
// in S (or arguments) read as they are and the others recomputed the same
// way. A clone is made once and shared by later uses (it dominates them),
// so a block is recomputed once, just before its own backward.
//
// Arithmetic is unchanged: a clone is the same op on the same values, and
// dropout regenerates its mask from (seed, step, stream, index), so
// gradients are bitwise those without remat (in f16/bf16 only as long as a
// fused kernel rounds what it computes as its ops' types say, since remat
// changes where kernels begin and end; see test/unit/passes/RematTest.cpp).
//
// Memory is judged as code generation will plan it: `budget` fuses a copy
// of the step for each candidate S and asks the driver's PlannedPeakFn
// (code generation lowers it and reads kir::Program::arenaBytes, the planned
// peak the runtime then measures); passes cannot include codegen.
#include "passes/Remat.h"
#include "ir/LlmcOps.h"
#include "ir/kernel/StepScalar.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <functional>

namespace mlir::llmc {
#define GEN_PASS_DEF_REMATPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;
using ::llmc::kir::StepScalar;
using ::llmc::kir::stepScalarName;

namespace {

enum class Policy { None, Full, Selective, Budget };

std::optional<Policy> parsePolicy(StringRef name) {
  return llvm::StringSwitch<std::optional<Policy>>(name)
      .Case("none", Policy::None)
      .Case("full", Policy::Full)
      .Case("selective", Policy::Selective)
      .Case("budget", Policy::Budget)
      .Default(std::nullopt);
}

bool isView(Operation *op) { return op->hasTrait<OpTrait::llmc::View>(); }

/// Splats (fills, splat constants) live in no buffer: kernels read them as
/// constants.
bool isSplat(Operation *op) {
  return op->hasTrait<OpTrait::llmc::NoBuffer>();
}

int64_t bytesOf(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return 0;
  int64_t bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * std::max<int64_t>(bits / 8, 1);
}

} // namespace

std::optional<int64_t> mlir::llmc::blockOfParameter(StringRef name) {
  SmallVector<StringRef> parts;
  name.split(parts, '.');
  for (StringRef part : parts)
    if (!part.empty() && llvm::all_of(part, llvm::isDigit)) {
      int64_t index;
      if (!part.getAsInteger(10, index))
        return index;
    }
  return std::nullopt;
}

namespace {

/// The forward/backward split of @grad_step and each forward op's block.
class StepStructure {
public:
  /// Fails with a diagnostic on a step without a `loss` result.
  static FailureOr<StepStructure> analyze(func::FuncOp func);

  bool isForward(Operation *op) const { return forward.contains(op); }
  bool isForwardValue(Value value) const {
    Operation *op = value.getDefiningOp();
    return op && forward.contains(op);
  }
  std::optional<int64_t> blockOf(Operation *op) const {
    auto it = blocks.find(op);
    if (it == blocks.end())
      return std::nullopt;
    return it->second;
  }

  SmallVector<Operation *> forwardOps;  // in block order
  SmallVector<Operation *> backwardOps; // in block order, no terminator

private:
  DenseSet<Operation *> forward;
  DenseMap<Operation *, int64_t> blocks;
};

FailureOr<StepStructure> StepStructure::analyze(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return func.emitError("llmc-remat: @grad_step must have one block");
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Value loss;
  for (auto [index, value] : llvm::enumerate(ret.getOperands()))
    if (auto name = func.getResultAttrOfType<StringAttr>(index, "llmc.output"))
      if (name.getValue() == stepScalarName(StepScalar::Loss))
        loss = value;
  if (!loss)
    return func.emitError("llmc-remat: @grad_step has no result with "
                          "llmc.output = \"")
           << stepScalarName(StepScalar::Loss)
           << "\" to tell its forward ops by";

  StepStructure step;
  SmallVector<Operation *> worklist;
  auto visit = [&](Value value) {
    Operation *def = value.getDefiningOp();
    if (def && def->getBlock() == &body && step.forward.insert(def).second)
      worklist.push_back(def);
  };
  visit(loss);
  while (!worklist.empty())
    for (Value operand : worklist.pop_back_val()->getOperands())
      visit(operand);

  for (Operation &op : body.without_terminator()) {
    if (!step.forward.contains(&op)) {
      step.backwardOps.push_back(&op);
      continue;
    }
    step.forwardOps.push_back(&op);
    // An op using parameters is in the block they all name; one using any
    // other parameter (wte, ln_f) is in none. An op without parameters is
    // in the latest block among its operands (a residual add reads the
    // block's input and its branch).
    bool usesParameter = false, outsideBlocks = false;
    std::optional<int64_t> block;
    for (Value operand : op.getOperands()) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg || arg.getOwner() != &body)
        continue;
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    "llmc.param");
      if (!name)
        continue;
      usesParameter = true;
      std::optional<int64_t> index = blockOfParameter(name.getValue());
      if (!index || (block && *block != *index))
        outsideBlocks = true;
      block = index;
    }
    if (usesParameter) {
      if (!outsideBlocks)
        step.blocks[&op] = *block;
      continue;
    }
    for (Value operand : op.getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (std::optional<int64_t> index = step.blockOf(def))
          block = block ? std::max(*block, *index) : *index;
    if (block)
      step.blocks[&op] = *block;
  }
  return step;
}

/// The stored set of the fixed policies, and the budget's floor (`full`).
DenseSet<Value> storedSet(const StepStructure &step, Policy policy) {
  DenseSet<Value> stored;
  for (Operation *op : step.forwardOps) {
    std::optional<int64_t> block = step.blockOf(op);
    // Only pure ops can run twice (every llmc op is).
    bool keepOp = policy == Policy::None || !block || !isPure(op) ||
                  (policy == Policy::Selective &&
                   !op->hasTrait<OpTrait::llmc::CheapToRecompute>());
    for (Value result : op->getResults()) {
      // A view is stored with its source (it is that buffer); any value
      // a forward op of another block reads is a block boundary.
      bool keep = keepOp;
      if (isView(op) && !keep)
        keep = !step.isForwardValue(op->getOperand(0)) ||
               stored.contains(op->getOperand(0));
      for (Operation *user : result.getUsers())
        if (step.isForward(user) && step.blockOf(user) != block)
          keep = true;
      if (keep)
        stored.insert(result);
    }
  }
  return stored;
}

/// What a stored set costs, without rewriting anything: the forward ops
/// that would be cloned and the activation bytes the backward keeps.
struct RematCost {
  int64_t clonedOps = 0, flops = 0, storedBytes = 0, recomputedValues = 0;
  DenseSet<Value> kept; // the stored values read, as buffers (view sources)
};

RematCost costOf(const StepStructure &step, const DenseSet<Value> &stored) {
  RematCost cost;
  DenseSet<Operation *> cloned;
  DenseSet<Value> &kept = cost.kept;
  DenseSet<Value> recomputed;
  auto keep = [&](Value value) {
    // The buffer a value lives in: a view's source's.
    while (Operation *def = value.getDefiningOp()) {
      if (!isView(def))
        break;
      value = def->getOperand(0);
    }
    Operation *def = value.getDefiningOp();
    if (def && !isSplat(def) && kept.insert(value).second)
      cost.storedBytes += bytesOf(value);
  };
  std::function<void(Value)> need = [&](Value value) {
    if (!step.isForwardValue(value))
      return;
    if (stored.contains(value))
      return keep(value);
    Operation *op = value.getDefiningOp();
    if (!cloned.insert(op).second)
      return;
    cost.flops += countRematFlops(op);
    for (Value operand : op->getOperands())
      need(operand);
  };
  for (Operation *op : step.backwardOps)
    for (Value operand : op->getOperands()) {
      if (step.isForwardValue(operand) && !stored.contains(operand))
        recomputed.insert(operand);
      need(operand);
    }
  cost.clonedOps = cloned.size();
  cost.recomputedValues = recomputed.size();
  return cost;
}

/// Replaces every backward use of a forward value outside `stored` by a
/// recomputation (see the file comment). Returns what it cloned.
RematCost recompute(const StepStructure &step, const DenseSet<Value> &stored) {
  RematCost cost = costOf(step, stored);
  if (step.backwardOps.empty())
    return cost;
  OpBuilder builder(step.backwardOps.front()->getContext());
  DenseMap<Value, Value> recomputed;
  auto needsRecompute = [&](Value value) {
    return step.isForwardValue(value) && !stored.contains(value);
  };
  std::function<Value(Value, Operation *)> materialize =
      [&](Value value, Operation *before) -> Value {
    if (Value done = recomputed.lookup(value))
      return done;
    Operation *op = value.getDefiningOp();
    IRMapping mapping;
    for (Value operand : op->getOperands())
      if (needsRecompute(operand))
        mapping.map(operand, materialize(operand, before));
    builder.setInsertionPoint(before);
    Operation *clone = builder.clone(*op, mapping);
    for (auto [result, copy] : llvm::zip(op->getResults(), clone->getResults()))
      recomputed[result] = copy;
    return recomputed.lookup(value);
  };
  for (Operation *op : step.backwardOps)
    for (OpOperand &use : op->getOpOperands())
      if (needsRecompute(use.get()))
        use.set(materialize(use.get(), op));
  return cost;
}

/// The planned peak of `func` recomputing outside `stored`: a copy is
/// rewritten and fused as the pipeline would, and `estimate` plans it. The
/// copy lives in a module of its own; `func` is not touched.
FailureOr<int64_t> plannedPeak(func::FuncOp func, const DenseSet<Value> &stored,
                               const PlannedPeakFn &estimate) {
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(func.getLoc());
  IRMapping mapping;
  auto copy = cast<func::FuncOp>(func->clone(mapping));
  scratch->push_back(copy);
  FailureOr<StepStructure> step = StepStructure::analyze(copy);
  if (failed(step))
    return failure();
  DenseSet<Value> copied;
  for (Value value : stored)
    copied.insert(mapping.lookupOrDefault(value));
  recompute(*step, copied);
  if (failed(fuseFunction(copy)))
    return failure();
  return estimate(copy);
}

/// Takes `value` out of `stored`, with the views of it that `keep` (the
/// budget's floor) does not hold: a view is stored with its source.
void unstore(DenseSet<Value> &stored, Value value,
             const DenseSet<Value> &keep) {
  stored.erase(value);
  for (Operation *user : value.getUsers())
    if (isView(user) && !keep.contains(user->getResult(0)))
      unstore(stored, user->getResult(0), keep);
}

/// The budget policy: from `full`'s stored set plus every other forward
/// value, values leave the set a move at a time, each time the move that
/// frees the most stored bytes per recomputed FLOP, until none frees any.
/// A move recomputes one value and, with it, every value its recomputation
/// would newly keep (a GELU output with the bias add and the matmul output
/// before it), back to values already kept. The planned peaks after each
/// move are searched for the first that fits: by bisection when the last
/// fits (peaks mostly fall as values leave), else one by one.
FailureOr<std::pair<DenseSet<Value>, int64_t>>
budgetSet(func::FuncOp func, const StepStructure &step, int64_t budget,
          const PlannedPeakFn &estimate) {
  DenseSet<Value> floor = storedSet(step, Policy::Full);
  DenseSet<Value> stored = storedSet(step, Policy::None);
  SmallVector<Value> candidates;
  for (Operation *op : step.forwardOps)
    if (!isView(op) && !isSplat(op) && isPure(op))
      for (Value result : op->getResults())
        if (!floor.contains(result))
          candidates.push_back(result);

  // The moves, in the order they are made: the values each takes out.
  SmallVector<SmallVector<Value>> moves;
  RematCost current = costOf(step, stored);
  while (true) {
    SmallVector<Value> best;
    RematCost bestCost;
    double bestScore = 0;
    for (Value candidate : candidates) {
      if (!stored.contains(candidate))
        continue;
      DenseSet<Value> trial = stored;
      SmallVector<Value> move = {candidate};
      unstore(trial, candidate, floor);
      RematCost cost = costOf(step, trial);
      // Values the recomputation would newly keep are recomputed too.
      while (true) {
        SmallVector<Value> grown;
        for (Value value : cost.kept)
          if (!current.kept.contains(value) && !floor.contains(value) &&
              trial.contains(value))
            grown.push_back(value);
        if (grown.empty())
          break;
        for (Value value : grown) {
          unstore(trial, value, floor);
          move.push_back(value);
        }
        cost = costOf(step, trial);
      }
      int64_t freed = current.storedBytes - cost.storedBytes;
      if (freed <= 0)
        continue;
      double score = double(freed) /
                     double(std::max<int64_t>(cost.flops - current.flops, 1));
      if (best.empty() || score > bestScore) {
        best = std::move(move);
        bestCost = std::move(cost);
        bestScore = score;
      }
    }
    if (best.empty())
      break;
    for (Value value : best)
      unstore(stored, value, floor);
    moves.push_back(std::move(best));
    current = std::move(bestCost);
  }

  // The stored set after the first `count` moves.
  auto prefix = [&](size_t count) {
    DenseSet<Value> set = storedSet(step, Policy::None);
    for (ArrayRef<Value> move : ArrayRef(moves).take_front(count))
      for (Value value : move)
        unstore(set, value, floor);
    return set;
  };
  DenseMap<size_t, int64_t> peaks;
  auto peakAt = [&](size_t count) -> FailureOr<int64_t> {
    if (auto it = peaks.find(count); it != peaks.end())
      return it->second;
    FailureOr<int64_t> peak = plannedPeak(func, prefix(count), estimate);
    if (succeeded(peak))
      peaks[count] = *peak;
    return peak;
  };

  FailureOr<int64_t> none = peakAt(0);
  if (failed(none))
    return failure();
  if (*none <= budget)
    return std::make_pair(prefix(0), *none);
  FailureOr<int64_t> last = peakAt(moves.size());
  if (failed(last))
    return failure();
  if (*last <= budget) {
    size_t lo = 0, hi = moves.size(); // peakAt(lo) > budget >= peakAt(hi)
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      FailureOr<int64_t> peak = peakAt(mid);
      if (failed(peak))
        return failure();
      (*peak <= budget ? hi : lo) = mid;
    }
    return std::make_pair(prefix(hi), peaks.lookup(hi));
  }
  // The last moves can raise the peak (the last block's activations,
  // recomputed while the logits' gradient is alive), so an earlier prefix
  // may fit where the last does not: try them all, then `full`.
  int64_t smallest = *last;
  for (size_t count = 1; count < moves.size(); ++count) {
    FailureOr<int64_t> peak = peakAt(count);
    if (failed(peak))
      return failure();
    if (*peak <= budget)
      return std::make_pair(prefix(count), *peak);
    smallest = std::min(smallest, *peak);
  }
  FailureOr<int64_t> full = plannedPeak(func, floor, estimate);
  if (failed(full))
    return failure();
  if (*full <= budget)
    return std::make_pair(floor, *full);
  smallest = std::min(smallest, *full);
  return func.emitError("llmc-remat: a budget of ")
         << budget << " bytes is below the smallest planned peak of "
         << "@grad_step that recomputation reaches, " << smallest
         << " bytes (policy full: " << *full << " bytes; no remat: " << *none
         << " bytes)";
}

/// The estimator registerRematPlannedPeak set (empty: none).
PlannedPeakFn &registeredPlannedPeak() {
  static PlannedPeakFn estimate;
  return estimate;
}

struct RematPass : mlir::llmc::impl::RematPassBase<RematPass> {
  using RematPassBase::RematPassBase;
  RematPass(const RematPassOptions &options, PlannedPeakFn plannedPeak)
      : RematPassBase(options), plannedPeak(std::move(plannedPeak)) {}

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<Policy> kind = parsePolicy(policy);
    if (!kind) {
      module.emitError("llmc-remat: unknown policy '")
          << policy << "' (none, full, selective, budget)";
      return signalPassFailure();
    }
    if (*kind == Policy::Budget && budgetBytes <= 0) {
      module.emitError("llmc-remat: policy budget needs budget-bytes > 0");
      return signalPassFailure();
    }
    const PlannedPeakFn &estimate =
        plannedPeak ? plannedPeak : registeredPlannedPeak();
    if (*kind == Policy::Budget && !estimate) {
      module.emitError("llmc-remat: policy budget needs code generation's "
                       "planned peak (the driver did not supply one)");
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>("grad_step");
    if (!func) {
      module.emitError("llmc-remat: the module has no @grad_step (run "
                       "llmc-autodiff first)");
      return signalPassFailure();
    }
    FailureOr<StepStructure> step = StepStructure::analyze(func);
    if (failed(step))
      return signalPassFailure();

    DenseSet<Value> stored;
    int64_t peak = -1;
    if (*kind == Policy::Budget) {
      auto chosen = budgetSet(func, *step, budgetBytes, estimate);
      if (failed(chosen))
        return signalPassFailure();
      stored = std::move(chosen->first);
      peak = chosen->second;
    } else {
      stored = storedSet(*step, *kind);
    }
    RematCost cost = recompute(*step, stored);

    Builder b(&getContext());
    SmallVector<NamedAttribute> summary = {
        b.getNamedAttr("policy", b.getStringAttr(policy)),
        b.getNamedAttr("recomputed_values",
                       b.getI64IntegerAttr(cost.recomputedValues)),
        b.getNamedAttr("cloned_ops", b.getI64IntegerAttr(cost.clonedOps)),
        b.getNamedAttr("extra_flops", b.getI64IntegerAttr(cost.flops)),
        b.getNamedAttr("stored_bytes", b.getI64IntegerAttr(cost.storedBytes))};
    if (*kind == Policy::Budget) {
      summary.push_back(
          b.getNamedAttr("budget_bytes", b.getI64IntegerAttr(budgetBytes)));
      summary.push_back(
          b.getNamedAttr("planned_peak", b.getI64IntegerAttr(peak)));
    }
    func->setAttr("llmc.remat", b.getDictionaryAttr(summary));
  }

  /// Empty: the registered one (registerRematPlannedPeak).
  PlannedPeakFn plannedPeak;
};

} // namespace

std::unique_ptr<Pass>
mlir::llmc::createRematPass(const RematPassOptions &options,
                            PlannedPeakFn plannedPeak) {
  return std::make_unique<RematPass>(options, std::move(plannedPeak));
}

void mlir::llmc::registerRematPlannedPeak(PlannedPeakFn plannedPeak) {
  registeredPlannedPeak() = std::move(plannedPeak);
}

std::optional<RematSummary> mlir::llmc::getRematSummary(func::FuncOp func) {
  auto dict = func->getAttrOfType<DictionaryAttr>("llmc.remat");
  if (!dict)
    return std::nullopt;
  RematSummary summary;
  if (auto policy = dict.getAs<StringAttr>("policy"))
    summary.policy = policy.str();
  auto read = [&](StringRef name, int64_t &field) {
    if (auto value = dict.getAs<IntegerAttr>(name))
      field = value.getInt();
  };
  read("recomputed_values", summary.recomputedValues);
  read("cloned_ops", summary.clonedOps);
  read("extra_flops", summary.extraFlops);
  read("stored_bytes", summary.storedBytes);
  read("planned_peak", summary.plannedPeak);
  read("budget_bytes", summary.budgetBytes);
  return summary;
}

int64_t mlir::llmc::countRematFlops(Operation *op) {
  auto numel = [](Value value) -> int64_t {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    return type ? type.getNumElements() : 0;
  };
  if (isView(op) || isSplat(op))
    return 0;
  if (isa<MatmulOp, BatchMatmulOp>(op)) {
    auto lhs = cast<RankedTensorType>(op->getOperand(0).getType());
    int64_t rank = lhs.getRank();
    int64_t k = lhs.getDimSize(op->hasAttr("transpose_a") ? rank - 2 : rank - 1);
    return 2 * numel(op->getResult(0)) * k;
  }
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    auto q = cast<RankedTensorType>(attention.getQuery().getType());
    auto k = cast<RankedTensorType>(attention.getKey().getType());
    auto v = cast<RankedTensorType>(attention.getValue().getType());
    int64_t rank = q.getRank();
    int64_t headDim = q.getDimSize(rank - 1);
    int64_t queries = q.getNumElements() / std::max<int64_t>(headDim, 1);
    int64_t keys = k.getDimSize(rank - 2);
    // QK^T and PV.
    int64_t flops = 2 * queries * keys * (headDim + v.getDimSize(rank - 1));
    return attention.getCausal() ? flops / 2 : flops;
  }
  if (isa<LayerNormOp, RmsNormOp, SoftmaxOp, CrossEntropyOp>(op))
    return 5 * numel(op->getOperand(0));
  int64_t flops = 0;
  for (Value result : op->getResults())
    flops = std::max(flops, numel(result));
  return flops;
}
