// The llmc-fusion pass: groups ops into llmc.fusion regions, each of which
// code generation turns into one kernel (or one GEMM with its epilogue).
//
// Groups are formed greedily, in three rounds, each round only taking ops
// that no earlier round took:
//   1. row groups: every reduction along the last dimension (layer_norm,
//      rms_norm, softmax, cross_entropy, reduce_* over dims that include the
//      last, and the backward row ops softmax_grad, layer_norm_grad,
//      rms_norm_grad, cross_entropy_grad) pulls in the elementwise producers
//      of its input (the residual add before a layer_norm, the embedding
//      lookup and position add before the first one, the square before a
//      sum of squares) and the elementwise consumers of its full-shape
//      results (the residual gradient added to a layer_norm_grad);
//   2. GEMM epilogues: a matmul whose product has one use, by an elementwise
//      op of the product's shape, takes that op and the single-use chain
//      after it (bias add, GELU, ReLU, residual add);
//   3. pointwise groups: what is left of the elementwise ops, each group
//      pulling in its elementwise producers of the same shape.
// An op joins a group only if the group's shape is its shape (no producer
// is recomputed per broadcast element), no path leaves the group and comes
// back (which would make the fused kernel depend on itself), and operands
// that a kernel reads at another index than its own (the rotary partner,
// the embedding table, the logit at the target id) stay kernel inputs, as
// do the operands of a norm gradient (its weight and bias gradients are
// column sums that code generation computes in a second kernel, from memory).
// A row group does not pull in a producer whose result a function returns
// as a state's new value (`llmc.updates`): that value is made where its
// own step makes it (a gradient accumulated by its GEMM's epilogue), and
// the row kernel reads it from there (llmc-squares-in-grad-step's sums).
// Results used outside their group become extra outputs of the fusion.
// Flags (the i1 results of is_finite and compare) are never stored: each
// use gets its own copy of the flag's op, which joins the user's group,
// even a group of a larger shape when the flag is a scalar (a scalar
// condition broadcast over a whole tensor, as dynamic loss scaling selects
// every parameter by one overflow flag).
#include "ir/LlmcOps.h"
#include "passes/Passes.h"

#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_FUSIONPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

bool isPointwise(Operation *op) {
  return op->hasTrait<OpTrait::llmc::Pointwise>();
}

/// Ops whose result is an i1 flag, which kernels compute but never store.
bool producesFlag(Operation *op) { return isa<IsFiniteOp, CompareOp>(op); }

/// Gives every use of a flag its own copy of the flag's op, so that each
/// copy can join the group of its one user.
void copyFlagsPerUse(Block &block) {
  SmallVector<Operation *> flags;
  for (Operation &op : block)
    if (producesFlag(&op))
      flags.push_back(&op);
  OpBuilder builder(block.getParentOp()->getContext());
  for (Operation *flag : flags) {
    SmallVector<OpOperand *> uses = llvm::to_vector(llvm::map_range(
        flag->getUses(), [](OpOperand &use) { return &use; }));
    for (OpOperand *use : llvm::drop_begin(uses)) {
      builder.setInsertionPoint(use->getOwner());
      use->set(builder.clone(*flag)->getResult(0));
    }
  }
}

/// Backward ops that work on whole rows; their domain is their result.
bool isBackwardRowOp(Operation *op) {
  return op->hasTrait<OpTrait::llmc::RowGradient>();
}

/// Operands a kernel reads at an index other than the op's own, so they
/// must be kernel inputs (loaded from memory), not values computed in it.
bool mustBeKernelInput(Operation *op, unsigned operand) {
  if (isa<RotaryOp>(op))
    return true;
  if (isa<EmbeddingOp>(op))
    return operand == 0; // the table
  if (isa<CrossEntropyOp>(op))
    return operand == 0; // the logits, read again at the target id
  if (isa<LayerNormGradOp, RmsNormGradOp>(op))
    return true; // read again by the weight and bias gradient kernel
  return false;
}

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The shape a group iterates over, from its root op.
SmallVector<int64_t> domainOf(Operation *root) {
  if (isBackwardRowOp(root))
    return llvm::to_vector(shapeOf(root->getResult(0)));
  if (isRowReduction(root))
    return llvm::to_vector(shapeOf(root->getOperand(0)));
  return llvm::to_vector(shapeOf(root->getResult(0)));
}

class GroupBuilder {
public:
  explicit GroupBuilder(Block &block) : block(block) {
    for (auto [index, op] : llvm::enumerate(block.without_terminator()))
      position[&op] = index;
  }
  // Positions order members; they do not bound the cycle search, since a
  // group formed earlier may span any range of the block.

  void formGroups();
  LogicalResult materialize();

private:
  struct Group {
    FusionKind kind;
    SmallVector<int64_t> domain;
    llvm::SetVector<Operation *> ops;
  };

  bool grouped(Operation *op) const { return groupOf.count(op); }
  void add(int group, Operation *op) {
    groups[group].ops.insert(op);
    groupOf[op] = group;
    // A flag cannot be a kernel input: its op (one per use) comes along.
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && producesFlag(def) && canJoin(group, def)) {
        add(group, def);
        pullProducers(group, def);
      }
  }
  int newGroup(FusionKind kind, Operation *root) {
    groups.push_back({kind, domainOf(root), {}});
    add(groups.size() - 1, root);
    return groups.size() - 1;
  }
  bool createsCycle(int group, Operation *candidate);
  bool canJoin(int group, Operation *op);
  void pullProducers(int group, Operation *op);
  void pullConsumers(int group, Operation *op);

  Block &block;
  DenseMap<Operation *, unsigned> position;
  DenseMap<Operation *, int> groupOf;
  std::vector<Group> groups;
};

/// True if adding `candidate` to `group` would make the group depend on
/// itself: some input of the extended group is computed, through ops
/// outside it, from one of its own results. Groups formed earlier run as
/// one kernel, so reaching any member of one reaches all its inputs.
bool GroupBuilder::createsCycle(int group, Operation *candidate) {
  auto inGroup = [&](Operation *op) {
    return op == candidate || groups[group].ops.contains(op);
  };
  SmallVector<Operation *> worklist;
  DenseSet<Operation *> visited;
  DenseSet<int> visitedGroups;
  auto pushDefsOf = [&](Operation *op) {
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (!inGroup(def) && def->getBlock() == &block &&
            visited.insert(def).second)
          worklist.push_back(def);
  };
  pushDefsOf(candidate);
  for (Operation *op : groups[group].ops)
    pushDefsOf(op);
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    SmallVector<Operation *> sources = {op};
    auto other = groupOf.find(op);
    if (other != groupOf.end() && other->second != group &&
        visitedGroups.insert(other->second).second)
      sources.append(groups[other->second].ops.begin(),
                     groups[other->second].ops.end());
    for (Operation *source : sources) {
      for (Value operand : source->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (inGroup(def))
            return true;
      pushDefsOf(source);
    }
  }
  return false;
}

bool GroupBuilder::canJoin(int group, Operation *op) {
  if (grouped(op) || !isPointwise(op) || op->getBlock() != &block)
    return false;
  // A scalar flag is computed once and broadcast; any other op (or flag)
  // joins only at the group's shape.
  bool scalarFlag = producesFlag(op) && shapeOf(op->getResult(0)).empty();
  if (!scalarFlag &&
      shapeOf(op->getResult(0)) != ArrayRef<int64_t>(groups[group].domain))
    return false;
  // An op that reads an operand at another index needs that operand from
  // memory: it cannot be fed by a value the group computes, whether the
  // reader is the candidate or already a member.
  for (OpOperand &use : op->getOpOperands())
    if (Operation *def = use.get().getDefiningOp())
      if (groups[group].ops.contains(def) &&
          mustBeKernelInput(op, use.getOperandNumber()))
        return false;
  for (OpOperand &use : op->getUses())
    if (groups[group].ops.contains(use.getOwner()) &&
        mustBeKernelInput(use.getOwner(), use.getOperandNumber()))
      return false;
  return !createsCycle(group, op);
}

/// Whether a result of `op` is returned as a state's new value.
bool updatesState(Operation *op) {
  auto func = dyn_cast<func::FuncOp>(op->getParentOp());
  if (!func)
    return false;
  for (Value result : op->getResults())
    for (OpOperand &use : result.getUses())
      if (isa<func::ReturnOp>(use.getOwner()) &&
          func.getResultAttr(use.getOperandNumber(), "llmc.updates"))
        return true;
  return false;
}

void GroupBuilder::pullProducers(int group, Operation *op) {
  for (OpOperand &use : op->getOpOperands()) {
    if (mustBeKernelInput(op, use.getOperandNumber()))
      continue;
    Operation *def = use.get().getDefiningOp();
    if (!def || !canJoin(group, def))
      continue;
    if (groups[group].kind == FusionKind::Row && updatesState(def))
      continue;
    add(group, def);
    pullProducers(group, def);
  }
}

void GroupBuilder::pullConsumers(int group, Operation *op) {
  for (Value result : op->getResults()) {
    if (shapeOf(result) != ArrayRef<int64_t>(groups[group].domain))
      continue; // row statistics: consumers would need them broadcast
    for (Operation *user : llvm::make_early_inc_range(result.getUsers())) {
      if (!canJoin(group, user))
        continue;
      add(group, user);
      pullProducers(group, user);
      pullConsumers(group, user);
    }
  }
}

void GroupBuilder::formGroups() {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);

  for (Operation *op : ops) {
    if (grouped(op) || !isRowReduction(op))
      continue;
    int group = newGroup(FusionKind::Row, op);
    // Reductions over other dimensions stay alone: their domain is permuted.
    pullProducers(group, op);
    pullConsumers(group, op);
  }

  for (Operation *op : ops) {
    if (grouped(op) || !isa<MatmulOp, BatchMatmulOp>(op))
      continue;
    Value product = op->getResult(0);
    if (!product.hasOneUse())
      continue;
    Operation *first = *product.getUsers().begin();
    int group = newGroup(FusionKind::Gemm, op);
    if (!canJoin(group, first)) {
      groupOf.erase(op);
      groups.pop_back();
      continue;
    }
    Value value = product;
    while (value.hasOneUse()) {
      Operation *user = *value.getUsers().begin();
      if (!canJoin(group, user))
        break;
      add(group, user);
      value = user->getResult(0);
    }
  }

  for (Operation *op : llvm::reverse(ops)) {
    // Dead ops stay as they are: a kernel would compute nothing anyone reads.
    if (grouped(op) || !isPointwise(op) || op->use_empty())
      continue;
    int group = newGroup(FusionKind::Pointwise, op);
    pullProducers(group, op);
  }
}

LogicalResult GroupBuilder::materialize() {
  OpBuilder builder(block.getParentOp()->getContext());
  for (Group &group : groups) {
    // Members in block order; inputs and outputs in order of first use.
    SmallVector<Operation *> members(group.ops.begin(), group.ops.end());
    llvm::sort(members, [&](Operation *a, Operation *b) {
      return position.lookup(a) < position.lookup(b);
    });
    llvm::SetVector<Value> inputs;
    SmallVector<Value> outputs;
    SmallVector<std::string> names;
    for (Operation *op : members) {
      names.push_back(op->getName().stripDialect().str());
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def || !group.ops.contains(def))
          inputs.insert(operand);
      }
      for (Value result : op->getResults())
        if (llvm::any_of(result.getUsers(), [&](Operation *user) {
              return !group.ops.contains(user);
            })) {
          if (producesFlag(op))
            return op->emitOpError("computes a flag (i1) that its user '")
                   << (*result.getUsers().begin())->getName()
                   << "' cannot compute in the same kernel; kernels never "
                      "store flags";
          outputs.push_back(result);
        }
    }

    // A fusion sits at its last member, except that a GEMM group sits as
    // early as its inputs allow: at its matmul, or right after the latest
    // producer of an epilogue operand. Its only output is the last member's
    // result, so any point up to that member is valid, and the earliest
    // ends its operands' lives soonest: a weight gradient accumulated by an
    // add at the end of @grad_step would otherwise hold the activation and
    // the output gradient it is made from alive to the end of the step.
    Operation *anchor = members.back();
    if (group.kind == FusionKind::Gemm) {
      anchor = members.front();
      for (Value input : inputs)
        if (Operation *def = input.getDefiningOp())
          if (def->getBlock() == &block && !def->isBeforeInBlock(anchor))
            anchor = def->getNextNode();
    }
    builder.setInsertionPoint(anchor);
    Location loc = builder.getFusedLoc(llvm::to_vector(
        llvm::map_range(members, [](Operation *op) { return op->getLoc(); })));
    auto fusion = FusionOp::create(
        builder, loc, ValueRange(outputs).getTypes(), inputs.getArrayRef(),
        builder.getStringAttr(llvm::join(names, "_")),
        FusionKindAttr::get(builder.getContext(), group.kind));
    Block *body = builder.createBlock(&fusion.getBody());
    IRMapping mapping;
    for (Value input : inputs)
      mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
    for (Operation *op : members)
      builder.clone(*op, mapping);
    YieldOp::create(builder, loc,
                    llvm::to_vector(llvm::map_range(outputs, [&](Value v) {
                      return mapping.lookup(v);
                    })));
    for (auto [output, result] : llvm::zip(outputs, fusion.getResults()))
      output.replaceUsesWithIf(result, [&](OpOperand &use) {
        return !group.ops.contains(use.getOwner());
      });
    for (Operation *op : llvm::reverse(members))
      op->erase();
  }
  // A fusion sits where its last member was; a result used before that
  // point (possible with several outputs) moves its users after it.
  if (!sortTopologically(&block))
    return block.getParentOp()->emitError(
        "internal error: llmc-fusion formed groups that depend on each other");
  return success();
}

struct FusionPass : llmc::impl::FusionPassBase<FusionPass> {
  void runOnOperation() override {
    getOperation()->walk([&](func::FuncOp func) {
      if (failed(fuseFunction(func)))
        signalPassFailure();
    });
  }
};

} // namespace

LogicalResult mlir::llmc::fuseFunction(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return success();
  copyFlagsPerUse(func.getBody().front());
  GroupBuilder builder(func.getBody().front());
  builder.formGroups();
  return builder.materialize();
}
