// Graph passes over the llmc dialect. Each is runnable alone from llmc-opt.
#ifndef LLMC_PASSES_TD
#define LLMC_PASSES_TD

include "mlir/Pass/PassBase.td"

def VerifyLegalityPass : Pass<"llmc-verify-legality", "mlir::ModuleOp"> {
  let summary = "Checks that a module is a model the llmc pipeline accepts";
  let description = [{
    The contract every later pass relies on, checked once at the start:
    the module holds `func.func @forward(params..., tokens, targets) -> loss`
    (or `-> (loss, logits)`) where the parameters are f32, f16 or bf16
    tensors, `tokens` and `targets` are i32 or i64 tensors of one shape (the
    types the llmc ops accept), the loss is a `tensor<f32>`, the optional
    logits a float tensor of the tokens' shape plus the vocabulary, and the
    body is a single block
    of llmc ops ending in `func.return`. Parameter
    names (`llmc.param` argument attributes), when given, are unique, and so
    are the `stream` ids of dropout sites. The pass changes nothing.
  }];
}

def FusionPass : Pass<"llmc-fusion", "mlir::ModuleOp"> {
  let summary = "Groups ops into llmc.fusion regions, one kernel each";
  let description = [{
    Forms the kernels code generation emits, in three rounds: row groups
    around each reduction along the last dimension (layer_norm, rms_norm,
    softmax, cross_entropy, reduce_* over the last dim) with their
    elementwise producers and consumers; then GEMM epilogues (a matmul with
    the single-use chain of elementwise ops after it: bias, GELU, ReLU,
    residual add); then pointwise groups of the remaining elementwise ops.
    Row groups choose first, so in a pre-norm transformer the projection's
    bias add and the residual add join the next layer_norm (llm.c's fused
    residual + layernorm) and that projection's GEMM keeps no epilogue. An op joins a group
    only at the group's shape, when no path leaves the group and returns,
    and when no member reads it at another index than its own (the rotary
    partner, the embedding table, the logit at the target id). Matmuls
    without an epilogue, attention and the view ops (reshape, transpose,
    slice, broadcast) stay outside: they become library calls and strided
    accesses. Results used outside a group become extra fusion outputs.
  }];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

#endif // LLMC_PASSES_TD
