// The llmc-squares-in-grad-step pass: the gradient norm's sums of squares
// move from @update_step, which reads every gradient from memory again to
// take them, to @grad_step, right after each gradient is made.
//
// llmc-optimizer leaves, for each parameter p,
//   @grad_step:   %g' = llmc.add %grad_p, %x       (at the end of the step)
//                 return ..., %g' {llmc.updates = "grad.p"}
//   @update_step: %sq = llmc.mul %grad_p, %grad_p
//                 %s  = llmc.reduce_sum %sq dims [all]
// and this pass makes it
//   @grad_step:   %g' = llmc.add %grad_p, %x       (right after %x)
//                 %s  = llmc.reduce_sum (llmc.mul %g', %g') dims [all]
//                 return ..., %g', %s {llmc.updates = "grad.p.squares"}
//   @update_step: reads the state argument grad.p.squares for %s
// so that the sum runs right after the GEMM that accumulates %x into
// grad.p (llmc-fusion keeps the add in that GEMM's epilogue and the sum in
// a kernel of its own), while its result is still in the caches: the
// norm pass in @update_step reads every gradient from memory again, and a
// sum taken here costs a fraction of that. The largest gradients stay
// (max-elements: the tied embedding's is out of the caches by the time
// its sum would run, so it would cost more here than in @update_step's
// pass), and so do small ones (biases, norm weights): their sums cost
// less than the kernels @grad_step would add for them (min-elements).
// The paired measurements are bench-train's (bench/README.md).
//
// The sum is of the gradient the update reads: the runtime runs
// @update_step right after the last micro-batch's @grad_step (with ZeRO,
// the one that reduce-scatters, whose block sums are of the reduced
// gradients; the @grad_step_no_sync micro-batches before it do not write
// the sums). Under pipeline parallelism the runtime adds a tied copy's
// gradient between the two steps, so nothing moves there; nor where
// @update_step squares a value other than the state as it reads it (loss
// scaling's unscaled gradients, a 2:4 mask's), nor a gradient that
// @grad_step does not accumulate with one add (under DDP the gradient is
// an all-reduce's result). test/dist/squares.test trains with it under
// DDP, ZeRO-2 and tp=2 against one process.
#include "ir/LlmcOps.h"
#include "passes/NamedArguments.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_SQUARESINGRADSTEPPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

/// A sum of squares of @update_step's state argument, over all its
/// dimensions: reduce_sum(mul(%a, %a)).
struct SumOfSquares {
  ReduceSumOp sum;
  MulOp square;
  StringAttr name;
};

std::optional<SumOfSquares> sumOfSquares(func::FuncOp func, Operation &op) {
  auto sum = dyn_cast<ReduceSumOp>(op);
  if (!sum || sum.getKeepDims())
    return std::nullopt;
  auto type = cast<RankedTensorType>(sum.getInput().getType());
  if (int64_t(sum.getDims().size()) != type.getRank())
    return std::nullopt;
  auto square = sum.getInput().getDefiningOp<MulOp>();
  if (!square || square.getLhs() != square.getRhs() || !square->hasOneUse())
    return std::nullopt;
  auto state = dyn_cast<BlockArgument>(square.getLhs());
  if (!state || state.getOwner() != &func.getBody().front())
    return std::nullopt;
  auto name =
      func.getArgAttrOfType<StringAttr>(state.getArgNumber(), "llmc.state");
  if (!name)
    return std::nullopt;
  return SumOfSquares{sum, square, name};
}

class SquaresInGradStepPass
    : public llmc::impl::SquaresInGradStepPassBase<SquaresInGradStepPass> {
public:
  using SquaresInGradStepPassBase::SquaresInGradStepPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grad = module.lookupSymbol<func::FuncOp>("grad_step");
    auto update = module.lookupSymbol<func::FuncOp>("update_step");
    if (!grad || !update || grad.isExternal() || update.isExternal() ||
        grad->hasAttr("llmc.pipeline"))
      return;
    SmallVector<SumOfSquares> sums;
    for (Operation &op : update.getBody().front())
      if (std::optional<SumOfSquares> found = sumOfSquares(update, op))
        sums.push_back(*found);
    for (SumOfSquares &found : sums)
      moveIntoGradStep(grad, update, found);
  }

private:
  void moveIntoGradStep(func::FuncOp grad, func::FuncOp update,
                        SumOfSquares found) {
    StringRef name = found.name.getValue();
    std::optional<unsigned> result = resultUpdating(grad, name);
    std::optional<BlockArgument> old = argumentNamed(grad, "llmc.state", name);
    if (!result || !old)
      return;
    Block &body = grad.getBody().front();
    Value updated = body.getTerminator()->getOperand(*result);
    auto add = updated.getDefiningOp<AddOp>();
    int64_t elements =
        cast<RankedTensorType>(updated.getType()).getNumElements();
    if (!add || add->getBlock() != &body ||
        updated.getType() != old->getType() || elements > maxElements ||
        elements < minElements)
      return;
    Value term = add.getLhs() == *old   ? add.getRhs()
                 : add.getRhs() == *old ? add.getLhs()
                                        : Value();
    if (!term || term.getType() != updated.getType())
      return;
    // The accumulation right after its term is made (it reads nothing
    // else but the argument), the sum right after it.
    Operation *def = term.getDefiningOp();
    if (def && def->getBlock() != &body)
      return;
    std::string squares = (name + ".squares").str();
    // (A parameter named <p>.squares would have this state's name.)
    if (argumentNamed(grad, "llmc.state", squares) ||
        argumentNamed(update, "llmc.state", squares))
      return;
    if (def)
      add->moveAfter(def);
    else
      add->moveBefore(&body, body.begin());
    OpBuilder b(add->getContext());
    b.setInsertionPointAfter(add);
    Location loc = found.sum.getLoc();
    Value square = MulOp::create(b, loc, updated, updated);
    Value sum = ReduceSumOp::create(b, loc, square, found.sum.getDimsAttr(),
                                    /*keep_dims=*/UnitAttr());
    auto scalar = cast<RankedTensorType>(sum.getType());
    insertStateArgument(grad, scalar, squares);
    appendResult(grad, sum,
                 {b.getNamedAttr("llmc.output", b.getStringAttr(squares)),
                  b.getNamedAttr("llmc.updates", b.getStringAttr(squares))});
    // @update_step reads the state in place of its own sum.
    BlockArgument read = insertStateArgument(update, scalar, squares);
    found.sum.getResult().replaceAllUsesWith(read);
    found.sum.erase();
    found.square.erase();
  }
};

} // namespace
