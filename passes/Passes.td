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

def AutodiffPass : Pass<"llmc-autodiff", "mlir::ModuleOp"> {
  let summary = "Adds @grad_step, the reverse-mode gradient of @forward";
  let description = [{
    Adds to the module
    `@grad_step(params..., tokens, targets, %dloss: tensor<f32>
                {llmc.input = "dloss"}) -> (loss, grad_0, ..., grad_{P-1})`,
    one gradient per `llmc.param` argument of `@forward`, of the
    parameter's type and in argument order, with result attributes
    `llmc.output = "loss"` and `llmc.output = "grad.<param name>"`.
    `@forward` is left as it is. The body of `@grad_step` is a copy of the
    forward body (minus its return) followed by the backward sweep, which
    reads the forward values it needs (saved statistics, activations)
    directly. The sweep visits the ops in reverse, seeds the loss (the first
    result of `@forward`) with `%dloss`, and calls each op's
    DifferentiableOpInterface rule (ir/LlmcVjp.cpp) with the gradients of
    its results, null for results that receive none. Gradients of a value
    used several times are summed with `llmc.add`, except that the
    gradients of slices cutting one dimension of a value into disjoint
    blocks (the q/k/v split) are joined by one `llmc.concat`, with zero
    fills in any gaps. Only values that depend
    on a parameter get a gradient (ids and constants do not), a parameter
    no gradient reaches gets a zero `llmc.fill`, and ops that end up unused
    are removed. An op on the gradient path without a rule is an error.
  }];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
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

def OptimizerPass : Pass<"llmc-optimizer", "mlir::ModuleOp"> {
  let summary = "Makes @grad_step accumulate and adds the optimizer's @update_step";
  let description = [{
    Runs after `llmc-autodiff`. Rewrites `@grad_step` so that it adds each
    parameter gradient into a persistent gradient buffer (an argument with
    `llmc.state = "grad.<p>"`, the result written back in place through
    `llmc.updates`), which is gradient accumulation over micro-batches, and
    adds `@update_step`: the global gradient norm (returned as
    `grad_norm`), clipping by that norm (PyTorch's clip_grad_norm_), the
    update of every parameter and its optimizer state in place, and the
    zeroing of the gradient buffers. AdamW follows PyTorch's AdamW
    (decoupled weight decay, Loshchilov & Hutter), by default not on rank-1
    parameters (biases, norm weights); SGD follows PyTorch's SGD with
    momentum, dampening 0 and optional Nesterov. The learning rate and
    Adam's bias corrections 1/(1-beta^t) are scalar inputs the runtime sets
    each step (the schedule lives on the host); everything else is
    constant in the IR. The update is elementwise llmc ops, so llmc-fusion
    makes one kernel per parameter of it.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw or sgd">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.95", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.1",
           "Weight decay (decoupled for AdamW, L2 for SGD)">,
    Option<"momentum", "momentum", "double", /*default=*/"0.9",
           "SGD momentum (0: plain SGD, no state)">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD Nesterov momentum">,
    Option<"maxGradNorm", "max-grad-norm", "double", /*default=*/"1.0",
           "Clip the global gradient norm to this; 0 turns clipping off">,
    Option<"decayNormsAndBiases", "decay-norms-and-biases", "bool",
           /*default=*/"false",
           "Also apply weight decay to rank-1 parameters (biases, norms)">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

#endif // LLMC_PASSES_TD
