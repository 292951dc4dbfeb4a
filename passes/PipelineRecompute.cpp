// The llmc-pipeline-recompute pass: @grad_step of a pipeline stage as the
// backward half of 1F1B, which recomputes the stage's forward from the
// activation its @forward received instead of receiving it again.
//
// Under 1F1B a micro-batch's forward and backward are separate runs with
// other micro-batches' in between, so the forward's receive cannot be
// repeated in the backward (the previous stage sends each activation
// once), nor its send (the next stage receives it once):
//
//   %h = llmc.pipeline_recv from stage 0 of 2 : tensor<4x64x64xf32>
//     becomes the argument {llmc.input = "stage_input"}, set by the runtime
//     from @forward's result of the same name, stashed per micro-batch;
//   %z = llmc.pipeline_send %out to stage 2 of 3 : ... -> tensor<f32>
//     is dropped, its placeholder loss a zero fill.
//
// The backward's transfers (`gradient`) stay. This trades one recomputed
// forward per micro-batch for keeping only the stage's input between the
// two halves (full activation checkpointing at stage granularity).
#include "ir/LlmcOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::llmc {
#define GEN_PASS_DEF_PIPELINERECOMPUTEPASS
#include "passes/Passes.h.inc"
} // namespace mlir::llmc

using namespace mlir;
using namespace mlir::llmc;

namespace {

struct PipelineRecomputePass
    : llmc::impl::PipelineRecomputePassBase<PipelineRecomputePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto gradStep = module.lookupSymbol<func::FuncOp>("grad_step");
    if (!gradStep) {
      module.emitError("llmc-pipeline-recompute runs after llmc-autodiff "
                       "(it rewrites @grad_step)");
      return signalPassFailure();
    }
    SmallVector<PipelineRecvOp> recvs;
    SmallVector<PipelineSendOp> sends;
    gradStep.walk([&](Operation *op) {
      if (auto recv = dyn_cast<PipelineRecvOp>(op); recv && !recv.getGradient())
        recvs.push_back(recv);
      if (auto send = dyn_cast<PipelineSendOp>(op); send && !send.getGradient())
        sends.push_back(send);
    });
    if (recvs.size() > 1 || sends.size() > 1) {
      gradStep.emitError("llmc-pipeline-recompute: a stage receives and "
                         "sends one activation each, @grad_step has ")
          << recvs.size() << " receives and " << sends.size() << " sends";
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    for (PipelineRecvOp recv : recvs) {
      unsigned index = gradStep.getNumArguments();
      if (failed(gradStep.insertArgument(
              index, recv.getType(),
              b.getDictionaryAttr(b.getNamedAttr(
                  "llmc.input", b.getStringAttr("stage_input"))),
              recv.getLoc())))
        return signalPassFailure();
      recv.getResult().replaceAllUsesWith(gradStep.getArgument(index));
      recv.erase();
    }
    for (PipelineSendOp send : sends) {
      b.setInsertionPoint(send);
      Value zero = FillOp::create(b, send.getLoc(), send.getType(),
                                  b.getF64FloatAttr(0.0));
      send.getResult().replaceAllUsesWith(zero);
      send.erase();
    }
  }
};

} // namespace
