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

def AmpPass : Pass<"llmc-amp", "mlir::ModuleOp"> {
  let summary = "Mixed precision by op lists (torch.autocast, Apex AMP)";
  let description = [{
    Runs on `@forward` before `llmc-autodiff`, so that the gradient step
    differentiates the casts too. Each op is classified by name:
    allow-listed ops (the matrix products) run in `precision`, fp16 or
    bf16; deny-listed ops (softmax, the loss, norms, exp/log, reductions)
    run in f32; every other op runs in the widest float type among its
    operands that are neither parameters nor constants (f16 and bf16
    together widen to f32), or in f32 when it has none. Operands of another
    type are cast with `llmc.cast`. The default lists are one table in
    passes/Amp.cpp, shown by `llmc-opt --help`; `allow=` and `deny=` move
    ops between them by name (`allow=llmc.softmax`).

    Parameters stay f32 arguments (the master weights); each one gets a
    single cast per low-precision type at the top of the function that all
    its uses share, the copy made once per step. Statistics results (norm
    mean/rstd, attention and cross-entropy log-sum-exp) stay f32, and the
    function's result types are kept by casting back before the return.
    Last, redundant casts are folded: a cast to the same type disappears,
    `cast(cast(x))` whose inner cast loses nothing (f16 -> f32 -> f16, or
    f16 -> f32 -> bf16) becomes one cast of `x` or none, and identical
    casts of one value are merged.
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"fp16\"",
           "fp16 or bf16: the type allow-listed ops run in">,
    ListOption<"allow", "allow", "std::string",
               "Op names moved onto the allow list (e.g. llmc.softmax)">,
    ListOption<"deny", "deny", "std::string",
               "Op names moved onto the deny list (e.g. llmc.gelu)">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
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
    Option<"beta1", "beta1", "double",
           /*default=*/"::mlir::llmc::defaults::kAdamBeta1", "AdamW beta1">,
    Option<"beta2", "beta2", "double",
           /*default=*/"::mlir::llmc::defaults::kAdamBeta2", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double",
           /*default=*/"::mlir::llmc::defaults::kAdamEpsilon", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double",
           /*default=*/"::mlir::llmc::defaults::kWeightDecay",
           "Weight decay (decoupled for AdamW, L2 for SGD)">,
    Option<"momentum", "momentum", "double",
           /*default=*/"::mlir::llmc::defaults::kSgdMomentum",
           "SGD momentum (0: plain SGD, no state)">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD Nesterov momentum">,
    Option<"maxGradNorm", "max-grad-norm", "double",
           /*default=*/"::mlir::llmc::defaults::kMaxGradNorm",
           "Clip the global gradient norm to this; 0 turns clipping off">,
    Option<"decayNormsAndBiases", "decay-norms-and-biases", "bool",
           /*default=*/"false",
           "Also apply weight decay to rank-1 parameters (biases, norms)">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def ShardPass : Pass<"llmc-shard", "mlir::ModuleOp"> {
  let summary = "Data parallelism and ZeRO: the training step as a program of every rank";
  let description = [{
    Runs after `llmc-optimizer` (and before `llmc-loss-scaling`, which then
    sees the reduced gradient norm). With `dp` ranks on mesh axis "dp",
    each rank runs the same `@grad_step` on its own part of the global
    batch, and the gradients are averaged across the ranks:

    - `zero=0` (DDP): `@grad_step` all-reduces (avg) the accumulated
      gradients in buckets of whole gradients, in the order the backward
      produces them (reverse parameter order, as DDP's buckets), each
      issued right after its last gradient is computed, so the all-reduce
      overlaps the rest of the backward. `@grad_step_no_sync` is the old
      step (local accumulation only, DDP's no_sync), for every micro-batch
      of a step but the last.

    `bucket-mb` caps a bucket (MiB of gradients, DDP's bucket_cap_mb); a
    gradient larger than the cap is a bucket of its own. `dp=1` changes
    nothing.
  }];
  let options = [
    Option<"dp", "dp", "int64_t", /*default=*/"1",
           "Data-parallel ranks (the size of mesh axis dp)">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "ZeRO stage: 0 replicates everything (DDP)">,
    Option<"bucketMb", "bucket-mb", "double",
           /*default=*/"::mlir::llmc::defaults::kGradientBucketMb",
           "Gradient bucket cap in MiB (DDP's bucket_cap_mb)">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def TensorParallelPass : Pass<"llmc-tensor-parallel", "mlir::ModuleOp"> {
  let summary = "Megatron-LM tensor parallelism: @forward as the program of one tp rank";
  let description = [{
    Runs on `@forward` before `llmc-amp` and `llmc-autodiff`. With `tp`
    ranks on mesh axis "tp", the parameters of the transformer blocks (by
    their GPT-2 names) become each rank's shards:

    - column-parallel (output rows split): `*.attn.c_attn` (Q, K and V each
      split by heads: rank r holds heads [r h/tp, (r+1) h/tp) of each) and
      `*.mlp.c_fc` (SwiGLU's gate and up each split), weights and biases;
      their input passes through `llmc.copy_to_axis` (Megatron's f:
      identity forward, all-reduce of the gradient backward);
    - row-parallel (input columns split): `*.attn.c_proj` and
      `*.mlp.c_proj`; their matmul is followed by `llmc.all_reduce sum on
      "tp" ... replicated` (Megatron's g), before the bias, which stays
      replicated and is added once.

    - vocabulary-parallel (Megatron's VocabParallelEmbedding): `wte` and
      an untied `lm_head.weight` keep ceil(V/tp) rows, rank r the ids from
      r ceil(V/tp) (the last block padded with zero rows when tp does not
      divide V). The lookup becomes `llmc.embedding ... vocab_start
      vocab_size` (zeros for other ranks' ids) followed by g; the
      classifier is column-parallel, and `llmc.cross_entropy` of its split
      logits becomes `llmc.vocab_shard_max`, an all-reduce (max),
      `llmc.vocab_shard_cross_entropy`, two all-reduces (sum) and
      `llmc.cross_entropy_combine`: the loss and its gradient never gather
      the logits. A logits result of @forward is all-gathered (and cut
      back to V).

    Every op between the two (slices, reshapes to heads, transposes,
    rotary, attention, activations) is retyped to the rank's share; the
    norms and wpe stay replicated. The sharded parameters carry
    `llmc.tp_shard = {dim, groups, size}` (and `pad`, the zero rows added
    to the vocabulary): dimension `dim`, seen as `groups` x `size` blocks
    of equal rows (Q, K, V: groups 3), rank r holding block r of every
    group. Autodiff then produces the backward's collectives from the VJPs
    of f and g; llmc-optimizer sums the sharded gradients' squares over
    "tp" for the global norm. `tp=1` changes nothing. `rank` picks the
    rank whose program this is: only its vocab_start depends on it.

    `sp` adds sequence parallelism (Korthikanti et al. 2022): each g
    becomes `llmc.reduce_scatter ... sum` over the sequence dimension (T
    must be a multiple of tp) and each f `llmc.all_gather` over it (the
    sequence transposed to the front around each collective when B > 1),
    so the residual stream between them is [B, T/tp, C] on each rank and
    the norms, dropout (its `whole_shape` and `offsets` set, so the masks
    are one process's), biases and residual adds of the row-parallel side
    run on 1/tp of the positions. A whole value used there (norm weights,
    row-parallel biases, the rows of wpe, cut to the rank's positions)
    passes through `llmc.copy_to_axis`, whose VJP all-reduces its partial
    gradient over tp.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "Tensor-parallel ranks (the size of mesh axis tp)">,
    Option<"rank", "rank", "int64_t", /*default=*/"0",
           "This program's rank on mesh axis tp (its block of the vocabulary)">,
    Option<"sp", "sp", "bool", /*default=*/"false",
           "Sequence parallelism: the residual stream is the rank's slice of "
           "the sequence between the blocks">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def PipelineParallelPass : Pass<"llmc-pipeline-parallel", "mlir::ModuleOp"> {
  let summary = "Pipeline parallelism: @forward as the program of one pipeline stage";
  let description = [{
    Runs on `@forward` after `llmc-tensor-parallel` and before `llmc-amp`
    and `llmc-autodiff`. With `pp` stages on mesh axis "pp", the
    transformer blocks h.0 ... h.{L-1} are cut into `pp` contiguous runs
    of at least one block: those `stage-blocks` lists (the first block of
    each stage), or else the cut balanced by the planner's FLOPs per token
    (ir/PipelineStages.h: the slowest stage as cheap as it can be, the
    classifier's 6Vh counted on the last stage), which `llmc plan` and
    `llmc run --pp` print. The embedding lookup (and learned positions)
    joins stage 0, the final norm, classifier and loss the last stage. An
    op belongs to the stage of the latest block whose parameters it depends
    on.

    Stage `stage` keeps its ops and the parameters they read (a tied
    `wte` is kept by the first and the last stage), and the one value
    that crosses each boundary becomes a transfer:

    ```mlir
    %h = llmc.pipeline_recv from stage 0 of 2 : tensor<4x64x64xf32>   // stages > 0
    ...
    %z = llmc.pipeline_send %out to stage 2 of 3 : tensor<4x64x64xf32> -> tensor<f32>
    return %z : tensor<f32>
    ```

    A stage before the last returns the send's zero scalar as its loss, so
    that llmc-autodiff differentiates it as any forward: the VJP of the
    send receives the output's gradient from the next stage, the VJP of
    the receive sends the input's gradient back. `@forward` gets the
    attribute `llmc.pipeline = {stage, stages}`. `pp` must not exceed the
    number of blocks; `pp=1` changes nothing. The balanced cut is computed
    from the parameters' shapes, so a caller that runs
    `llmc-tensor-parallel` first passes the whole model's cut in
    `stage-blocks` (codegen/Training.cpp does).
  }];
  let options = [
    Option<"pp", "pp", "int64_t", /*default=*/"1",
           "Pipeline stages (the size of mesh axis pp)">,
    Option<"stage", "stage", "int64_t", /*default=*/"0",
           "This program's stage on mesh axis pp">,
    ListOption<"stageBlocks", "stage-blocks", "int64_t",
               "The first block of each of the pp stages (0 first); "
               "empty: the cut balanced by FLOPs">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def PipelineRecomputePass : Pass<"llmc-pipeline-recompute", "mlir::ModuleOp"> {
  let summary = "@grad_step of a pipeline stage recomputes its forward from the stashed stage input";
  let description = [{
    Runs right after `llmc-autodiff` on a stage cut by
    `llmc-pipeline-parallel`. Under 1F1B a micro-batch's forward
    (`@forward`, which receives and sends the activations) and its
    backward (`@grad_step`) are separate runs, so `@grad_step` must not
    transfer the activations again: its forward `llmc.pipeline_recv`
    becomes the argument `{llmc.input = "stage_input"}` (the runtime sets
    it from `@forward`'s result of that name, kept per micro-batch in
    flight) and its forward `llmc.pipeline_send` is dropped (the
    placeholder loss becomes a zero fill). The backward's transfers
    (`gradient`) stay. The stage's forward is computed twice per
    micro-batch: full recomputation at stage granularity.
  }];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def LossScalingPass : Pass<"llmc-loss-scaling", "mlir::ModuleOp"> {
  let summary = "Dynamic loss scaling inside the compiled training step";
  let description = [{
    Runs after `llmc-optimizer`, for fp16 training (bf16 has f32's range
    and needs none). The scale is persistent state, shared by name like the
    gradients: `loss_scale` (starting at 2^initial-scale-power),
    `loss_scale.clean_steps`, `loss_scale.hysteresis` (starting at
    `hysteresis`) and `loss_scale.skipped_steps`, f32 scalar `llmc.state`
    arguments whose first values `llmc.state_init` gives.

    `@grad_step` seeds the backward sweep with `dloss * loss_scale` instead
    of `dloss`, so the accumulated gradients are scaled. `@update_step`
    multiplies every gradient it reads by `1 / loss_scale` before the
    norm, the clipping and the update; a gradient norm that is not finite
    is an overflow, and then every parameter and optimizer state keeps its
    old value (`llmc.select`) while the gradients are zeroed as always. The
    scale follows DeepSpeed's DynamicLossScaler: an overflow with at most
    one hysteresis left divides it by `factor` (not below `min-scale`),
    one with more consumes a hysteresis; `window` clean steps in a row
    multiply it by `factor` and refill the hysteresis (every clean step
    refills it with `consecutive-hysteresis`). `@update_step` returns two
    more results, `overflow` (1 for a skipped update, else 0) and
    `used_loss_scale` (the scale this step's gradients carry), and the new
    values of the four states (named as outputs by the state names).
  }];
  let options = [
    Option<"initialScalePower", "initial-scale-power", "double",
           /*default=*/"::mlir::llmc::defaults::kLossScaleInitialPower",
           "The scale starts at 2^this">,
    Option<"window", "window", "int64_t",
           /*default=*/"::mlir::llmc::defaults::kLossScaleWindow",
           "Clean steps in a row after which the scale grows">,
    Option<"hysteresis", "hysteresis", "int64_t",
           /*default=*/"::mlir::llmc::defaults::kLossScaleHysteresis",
           "Overflows it takes to lower the scale">,
    Option<"minScale", "min-scale", "double",
           /*default=*/"::mlir::llmc::defaults::kLossScaleMin",
           "The scale never goes below this">,
    Option<"factor", "factor", "double",
           /*default=*/"::mlir::llmc::defaults::kLossScaleFactor",
           "The scale grows and shrinks by this factor">,
    Option<"consecutiveHysteresis", "consecutive-hysteresis", "bool",
           /*default=*/"false",
           "Refill the hysteresis after every clean step, not only when the "
           "scale grows">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def SparsifyPass : Pass<"llmc-sparsify", "mlir::ModuleOp"> {
  let summary = "2:4 structured sparsity of matmul weights (Apex ASP, m4n2_1d)";
  let description = [{
    Runs after `llmc-optimizer` and `llmc-loss-scaling`, before
    `llmc-remat` (so recomputed forward ops read the masked weights too) and
    `llmc-fusion`; in the compile pipeline on `@forward` alone. The
    selected weights are the matmul weights (the rhs of `llmc.matmul`,
    through casts) that `params` names by glob pattern (`h.*.mlp.*`), by
    default every one inside a transformer block (a parameter name with an
    all-digit component: not the embeddings nor the classifier). A selected
    weight must be read in the [N, K] layout (`transpose_b`) with K a
    multiple of 4: the groups of 4 run along the reduction dimension K.

    Each selected weight `W` gets a persistent f32 state
    `sparsity_mask.W` of its shape, `llmc.state_init` 1 (dense until the
    runtime prunes: it writes the mask, keeping the 2 largest magnitudes of
    every 4, and the masked weight). `@forward` and `@grad_step` read
    `W * mask` everywhere (one product, shared); `@update_step` reads the
    gradient and every optimizer state of `W` times the mask and writes
    `W' * mask`, so the norm, clipping and moments see masked gradients and
    pruned weights stay exactly 0 through any number of steps. The module
    gets `llmc.sparsity = {pattern, params}`.

    Errors: a pattern other than 2:4, a glob matching no matmul weight, a
    selected weight read only as [K, N] or with K not a multiple of 4, and
    ZeRO-sharded optimizer state.
  }];
  let options = [
    Option<"pattern", "pattern", "std::string", /*default=*/"\"2:4\"",
           "The sparsity pattern (2:4: 2 of every 4 along K kept)">,
    ListOption<"params", "params", "std::string",
               "Glob patterns of the weights to sparsify (default: the "
               "matmul weights inside transformer blocks)">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def PersistentCastsPass : Pass<"llmc-persistent-casts", "mlir::ModuleOp"> {
  let summary = "Mixed precision: each master weight's 16-bit copy is state the update step writes";
  let description = [{
    Runs after `llmc-amp`, `llmc-optimizer`, `llmc-loss-scaling` and
    `llmc-sparsify`. Every f32 parameter that `@grad_step` (or another
    function but `@update_step`) casts to f16 or bf16 gets a persistent
    copy, the `llmc.state` argument `cast.<p>`, which those functions read
    in place of the cast; `@update_step` writes the cast of the value it
    writes into the parameter into it (`llmc.updates`), and a new function
    `@cast_weights(params..., cast.<p>...)` writes every copy from its
    master, for the runtime to run whenever it sets the masters from
    outside the programs. The copies hold the casts' values bit for bit,
    so training computes the same numbers, without reading every master
    weight and writing its copy in each micro-batch (Megatron-LM's and
    llm.c's bf16 weights beside f32 masters).
  }];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def SquaresInGradStepPass : Pass<"llmc-squares-in-grad-step", "mlir::ModuleOp"> {
  let summary = "The gradient norm's sums of squares, taken where @grad_step makes each gradient";
  let description = [{
    Runs after the passes that finish `@grad_step` and `@update_step`
    (`llmc-optimizer`, `llmc-shard`, `llmc-loss-scaling`, `llmc-sparsify`,
    `llmc-persistent-casts`), before `llmc-remat` and `llmc-fusion`.
    `@update_step` sums the squares of every gradient for the clipping
    norm: a pass over all of them from memory (GPT-2 124M: 497 MB, 16 ms
    of a 1 s step on a 2-core Zen 4). For a gradient that `@grad_step`
    accumulates as `grad.<p> + x` and `@update_step` squares as it reads
    it, this pass moves the accumulation right after `x` is made and the
    sum of its squares right after that, into the `llmc.state`
    `<grad>.squares` that `@grad_step` writes (`llmc.updates`) and
    `@update_step` reads in place of its own sum: the sum reads the
    gradient while the GEMM that made it has left it in the caches. The
    last micro-batch's sum is the one the update reads, over the gradient
    it updates with. Gradients of more than `max-elements` elements stay
    summed in `@update_step` (they are out of the caches by then), and so
    do those under `min-elements` (their sums cost less than the kernels
    that would take them in `@grad_step`). Nothing
    moves under pipeline parallelism (the runtime adds a tied copy's
    gradient between the two steps), nor where `@update_step` squares a
    gradient it has changed first (loss scaling's unscaling, a 2:4 mask),
    nor a gradient `@grad_step` does not make by one add into its state
    (under DDP it is an all-reduce's result).
  }];
  let options = [
    Option<"minElements", "min-elements", "int64_t",
           /*default=*/"::mlir::llmc::defaults::kSquaresInGradStepMinElements",
           "Smallest gradient (elements) whose squares move">,
    Option<"maxElements", "max-elements", "int64_t",
           /*default=*/"::mlir::llmc::defaults::kSquaresInGradStepMaxElements",
           "Largest gradient (elements) whose squares move (0: none)">,
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

def RematPass : Pass<"llmc-remat", "mlir::ModuleOp"> {
  let summary = "Activation checkpointing: recomputes saved activations in @grad_step";
  let description = [{
    Runs on `@grad_step` after `llmc-optimizer` (and loss scaling), before
    `llmc-fusion`. The forward ops of the step are those the `loss` result
    depends on; every forward value a backward op reads is a saved
    activation. A policy chooses the set of forward values that stay
    stored; every backward use of any other forward value is replaced by a
    recomputation: its producers are cloned, back to stored values and
    function arguments, right before the first backward op that needs it,
    and later uses share those clones. Dropout recomputes the same mask
    (it is a function of seed, step, stream and index), so gradients are
    bitwise those of the step without remat.

    A transformer block is the ops that use parameters named with an
    all-digit component N (`h.3.mlp.c_fc.weight`: block 3), plus the ops
    without parameters whose operands come from that block or from before
    it (the residual adds); ops using other parameters (`wte`, `ln_f`)
    belong to no block, and their results are always stored.
    - `none`: everything is stored (the pass changes nothing);
    - `full` (Chen et al. 2016, Megatron-LM): per block only its input is
      stored; the block is recomputed before its backward;
    - `selective` (Korthikanti et al. 2022): block inputs and the outputs
      of matmul, batch_matmul and attention (with its log-sum-exp) are
      stored; norms, activations, bias and residual adds, dropout and casts
      are recomputed;
    - `budget`: the fewest recomputations, chosen greedily by bytes freed
      per recomputed FLOP, for which the planned peak (the arena of the
      fused and lowered step, planned as code generation plans it) fits in
      `budget-bytes`; an error names the smallest peak the policies reach
      when the budget is below it.

    `@grad_step` gets a `llmc.remat` dictionary: the policy, the values
    recomputed, the ops cloned, their FLOPs (`extra_flops`), the bytes of
    activations kept (`stored_bytes`) and, for `budget`, the planned peak.
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"full\"",
           "none, full, selective or budget">,
    Option<"budgetBytes", "budget-bytes", "int64_t", /*default=*/"0",
           "budget: the largest planned peak (arena bytes) allowed">
  ];
  let dependentDialects = ["mlir::llmc::LlmcDialect"];
}

#endif // LLMC_PASSES_TD
