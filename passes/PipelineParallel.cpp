// The llmc-pipeline-parallel pass: @forward cut into the program of one
// pipeline stage of mesh axis "pp", with point-to-point transfers where the
// residual stream crosses from one stage to the next.
//
// Every op gets the index of the latest transformer block whose parameters
// it depends on (-1 before the first block: the embedding lookup and
// position add), so a block's ops, the residual add after it and every op
// after the last block (final norm, classifier, loss) are placed without
// naming any op kind. Blocks go to stages in the runs `stage-blocks` gives
// or else in the cut balanced by the planner's FLOPs (ir/PipelineStages.h,
// the rule `llmc plan` counts per stage); ops that depend on no argument
// at all (constants, fills) go wherever they are used. For stage 1 of 2 of
// the tiny GPT:
//
//   %h  = llmc.pipeline_recv from stage 0 of 2 : tensor<4x64x64xf32>
//   ... block h.1, ln_f, classifier (tied wte), cross-entropy ...
//   return %loss, %logits
//
// and stage 0 ends with `%z = llmc.pipeline_send %res to stage 1 of 2`,
// returning %z as its loss: autodiff turns the send into the receive of the
// residual's gradient and the receive into its send.
#include "ir/LlmcOps.h"
#include "ir/PipelineStages.h"
#include "passes/NamedArguments.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <climits>

namespace mlir::llmc {
#define GEN_PASS_DEF_PIPELINEPARALLELPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

/// An op that depends on no argument: it is placed where it is used.
constexpr int64_t kFree = INT64_MIN;

/// The block index i of a parameter named "h.<i>.*", or -1.
int64_t blockOfParam(StringRef name) {
  if (!name.consume_front("h."))
    return -1;
  int64_t index = -1;
  StringRef digits = name.take_until([](char c) { return c == '.'; });
  if (digits.getAsInteger(10, index) || index < 0)
    return -1;
  return index;
}

class PipelineParallelPass
    : public llmc::impl::PipelineParallelPassBase<PipelineParallelPass> {
public:
  using PipelineParallelPassBase::PipelineParallelPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (pp < 1) {
      module.emitError("llmc-pipeline-parallel: pp must be at least 1, got ")
          << int64_t(pp);
      return signalPassFailure();
    }
    if (pp == 1)
      return;
    if (stage < 0 || stage >= pp) {
      module.emitError("llmc-pipeline-parallel: stage must lie in [0, pp), "
                       "got ")
          << int64_t(stage) << " for pp=" << int64_t(pp);
      return signalPassFailure();
    }
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward || forward.isExternal() || !forward.getBody().hasOneBlock()) {
      module.emitError("llmc-pipeline-parallel needs @forward with one block");
      return signalPassFailure();
    }
    if (module.lookupSymbol<func::FuncOp>("grad_step")) {
      module.emitError("llmc-pipeline-parallel runs before llmc-autodiff (the "
                       "backward's transfers come from the forward's)");
      return signalPassFailure();
    }
    if (failed(cutStage(forward)))
      return signalPassFailure();
  }

private:
  /// The cut of this run: the stage of each block (block -1, before the
  /// first, is stage 0's).
  PipelineCut cut;

  LogicalResult cutStage(func::FuncOp forward) {
    Block &body = forward.getBody().front();
    // Blocks of values: arguments by their parameter names, ops by their
    // operands (the latest block any of them depends on).
    DenseMap<Value, int64_t> blockOf;
    int64_t blocks = 0;
    for (BlockArgument arg : body.getArguments()) {
      int64_t block = -1;
      if (auto name = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                           "llmc.param"))
        block = blockOfParam(name.getValue());
      blockOf[arg] = block;
      blocks = std::max(blocks, block + 1);
    }
    if (blocks == 0)
      return forward.emitError("llmc-pipeline-parallel: @forward has no "
                               "transformer blocks (parameters h.<i>.*) to "
                               "cut into stages");
    if (pp > blocks)
      return forward.emitError("llmc-pipeline-parallel: pp=")
             << int64_t(pp) << " is more than the model's " << blocks
             << " transformer blocks; every stage needs at least one (choose "
                "pp <= "
             << blocks << ")";
    PipelineCosts costs = pipelineCostsOf(forward);
    costs.blocks.resize(blocks, 0);
    if (stageBlocks.empty()) {
      cut = balancePipeline(costs, pp);
    } else {
      if (static_cast<int64_t>(stageBlocks.size()) != pp)
        return forward.emitError("llmc-pipeline-parallel: stage-blocks lists ")
               << stageBlocks.size() << " first blocks for pp=" << int64_t(pp)
               << " stages";
      llvm::Expected<PipelineCut> given =
          pipelineCutAt(costs, llvm::ArrayRef<int64_t>(stageBlocks));
      if (!given)
        return forward.emitError("llmc-pipeline-parallel: stage-blocks: ")
               << llvm::toString(given.takeError());
      cut = std::move(*given);
    }

    SmallVector<Operation *> ops;
    DenseMap<Operation *, int64_t> opBlock;
    for (Operation &op : body.without_terminator()) {
      if (op.getNumRegions() != 0)
        return op.emitOpError("has regions; llmc-pipeline-parallel runs "
                              "before fusion");
      int64_t block = kFree;
      for (Value operand : op.getOperands())
        block = std::max(block, blockOf.lookup(operand));
      opBlock[&op] = block;
      for (Value result : op.getResults())
        blockOf[result] = block;
      ops.push_back(&op);
    }

    // This stage's ops; the free ones its ops use (last to first, so a
    // free op's users are decided before it).
    const int64_t last = pp - 1;
    DenseSet<Operation *> kept;
    for (Operation *op : ops)
      if (opBlock[op] != kFree && cut.stageOfBlock(opBlock[op]) == stage)
        kept.insert(op);
    for (Operation *op : llvm::reverse(ops))
      if (opBlock[op] == kFree &&
          llvm::any_of(op->getUsers(),
                       [&](Operation *user) { return kept.contains(user); }))
        kept.insert(op);

    // What crosses into and out of the stage.
    llvm::SetVector<Value> incoming, outgoing;
    for (Operation *op : ops) {
      if (kept.contains(op)) {
        for (Value operand : op->getOperands()) {
          Operation *def = operand.getDefiningOp();
          if (!def || kept.contains(def))
            continue;
          int64_t from = cut.stageOfBlock(opBlock[def]);
          if (from != stage - 1)
            return op->emitOpError("on pipeline stage ")
                   << int64_t(stage) << " reads a value of stage " << from
                   << "; llmc-pipeline-parallel sends values to the next "
                      "stage only";
          incoming.insert(operand);
        }
      }
    }
    for (Operation *op : ops) {
      if (!kept.contains(op))
        continue;
      for (Value result : op->getResults())
        for (Operation *user : result.getUsers())
          if (!kept.contains(user) && user != body.getTerminator())
            outgoing.insert(result);
    }
    if (stage > 0 && incoming.size() != 1)
      return forward.emitError("llmc-pipeline-parallel: ")
             << incoming.size() << " values cross from stage " << stage - 1
             << " to stage " << int64_t(stage)
             << "; a stage boundary must be crossed by one value (the "
                "residual stream)";
    if (stage < last && outgoing.size() != 1)
      return forward.emitError("llmc-pipeline-parallel: ")
             << outgoing.size() << " values cross from stage "
             << int64_t(stage) << " to stage " << stage + 1
             << "; a stage boundary must be crossed by one value (the "
                "residual stream)";

    MLIRContext *ctx = forward.getContext();
    OpBuilder b(ctx);
    auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
    Value recv;
    if (stage > 0) {
      Value in = incoming.front();
      b.setInsertionPointToStart(&body);
      recv = PipelineRecvOp::create(b, in.getLoc(), in.getType(),
                                    i64(stage - 1), i64(pp), UnitAttr())
                 .getResult();
      in.replaceUsesWithIf(recv, [&](OpOperand &use) {
        return kept.contains(use.getOwner());
      });
      kept.insert(recv.getDefiningOp());
    }
    // Parameters the first stage reads too (a tied wte on the last
    // stage): llmc.pp_tied marks this stage's copy.
    DenseSet<Value> firstStageParams;
    for (Operation *op : ops)
      if (opBlock[op] != kFree && cut.stageOfBlock(opBlock[op]) == 0)
        for (Value operand : op->getOperands())
          if (isa<BlockArgument>(operand))
            firstStageParams.insert(operand);
    Operation *ret = body.getTerminator();
    if (stage < last) {
      Value out = outgoing.front();
      b.setInsertionPoint(ret);
      Value send =
          PipelineSendOp::create(b, out.getLoc(),
                                 RankedTensorType::get({}, b.getF32Type()),
                                 out, i64(stage + 1), i64(pp), UnitAttr())
              .getResult();
      if (ret->getNumOperands() < 1 || ret->getOperand(0).getType() !=
                                           send.getType())
        return forward.emitError("llmc-pipeline-parallel: @forward must "
                                 "return the loss (a tensor<f32>) first");
      // The stage's loss is the send's placeholder; the other results
      // (logits) are the last stage's.
      ret->setOperands(ValueRange{send});
      llvm::BitVector others(forward.getNumResults(), true);
      others.reset(0);
      if (failed(forward.eraseResults(others)))
        return failure();
    }
    // The received activation is a result too: 1F1B stashes it for the
    // backward, which recomputes the stage from it (llmc-pipeline-recompute).
    if (recv)
      appendResult(forward, recv,
                   b.getNamedAttr("llmc.output", b.getStringAttr("stage_input")));
    // Other stages' ops, last to first (their users go first).
    for (Operation *op : llvm::reverse(ops))
      if (!kept.contains(op))
        op->erase();
    // Other stages' parameters.
    llvm::BitVector unused(forward.getNumArguments());
    for (BlockArgument arg : body.getArguments())
      if (forward.getArgAttr(arg.getArgNumber(), "llmc.param") &&
          arg.use_empty())
        unused.set(arg.getArgNumber());
    for (BlockArgument arg : body.getArguments())
      if (stage > 0 && !unused.test(arg.getArgNumber()) &&
          firstStageParams.contains(arg) &&
          forward.getArgAttr(arg.getArgNumber(), "llmc.param"))
        forward.setArgAttr(arg.getArgNumber(), "llmc.pp_tied", b.getUnitAttr());
    if (failed(forward.eraseArguments(unused)))
      return failure();
    forward->setAttr("llmc.pipeline",
                     DictionaryAttr::get(
                         ctx, {b.getNamedAttr("stage", i64(stage)),
                               b.getNamedAttr("stages", i64(pp))}));
    return success();
  }
};

} // namespace
