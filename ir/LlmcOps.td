// Operations of the llmc dialect: forward ops of GPT-2/GPT-3, OPT and
// Llama-style models, and the backward ops their gradients are built from.
#ifndef LLMC_OPS_TD
#define LLMC_OPS_TD

include "ir/LlmcBase.td"
include "ir/LlmcInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Differentiable ops implement their VJP rule (ir/LlmcVjp.cpp).
defvar Differentiable =
    DeclareOpInterfaceMethods<Llmc_DifferentiableOpInterface, ["buildVjp"]>;
// A reduce is a row reduction when its dims end at the last one.
defvar RowReductionIfLastDim =
    DeclareOpInterfaceMethods<Llmc_RowReduction, ["reducesRows"]>;

// Every op lists its categories (ir/LlmcInterfaces.td) after `Pure`:
// Llmc_Pointwise, Llmc_RowReduction, Llmc_RowGradient, Llmc_View,
// Llmc_NoBuffer, Llmc_CheapToRecompute and one AMP category (Llmc_AmpAllow,
// Llmc_AmpDeny, Llmc_AmpExempt; none: the op follows its inputs).

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Llmc_ConstantOp : Llmc_Op<"constant",
    [ConstantLike, Pure, Llmc_NoBuffer, Llmc_CheapToRecompute, Llmc_AmpExempt,
     InferTypeOpAdaptor]> {
  let summary = "A tensor constant";
  let description = [{
    Example:
    ```mlir
    %half = llmc.constant dense<5.000000e-01> : tensor<f32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Llmc_AnyTensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Llmc_FillOp : Llmc_Op<"fill", [Pure, Llmc_NoBuffer, Llmc_CheapToRecompute,
                                   Llmc_AmpExempt]> {
  let summary = "A floating-point tensor whose every element is `value`";
  let description = [{
    Unlike `llmc.constant`, a fill carries no data, so a large zero or one
    tensor costs nothing in the IR or the artifact. Example:
    ```mlir
    %zeros = llmc.fill 0.000000e+00 : tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

def Llmc_EmbeddingOp : Llmc_Op<"embedding",
    [Pure, Llmc_Pointwise, Llmc_CheapToRecompute, InferTypeOpAdaptor,
     Differentiable]> {
  let summary = "Looks up rows of a table by integer ids";
  let description = [{
    `result[i..., :] = table[indices[i...], :]`. Ids outside `[0, V)` are
    undefined behaviour of the model, and the runtime reports them as a data
    error. Example:
    ```mlir
    %x = llmc.embedding %wte, %tokens : tensor<50257x768xf32>, tensor<4x64xi32>
    // %x : tensor<4x64x768xf32>
    ```
    With `vocab_start` and `vocab_size` the table is one tensor-parallel
    rank's block of rows of a vocabulary of `vocab_size` ids, row r holding
    id `vocab_start + r` (Megatron's VocabParallelEmbedding): an id in the
    block selects its row, any other id in `[0, vocab_size)` gives zeros,
    so the sum over the ranks (an all-reduce) is the whole lookup.
    ```mlir
    %x = llmc.embedding %wte1, %tokens vocab_start 25129 vocab_size 50257
        : tensor<25129x768xf32>, tensor<4x64xi32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$table, Llmc_IndexTensor:$indices,
                       OptionalAttr<I64Attr>:$vocab_start,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $indices (`vocab_start` $vocab_start^ `vocab_size` $vocab_size)?
    attr-dict `:` type($table) `,` type($indices)
  }];
  let builders = [
    OpBuilder<(ins "Value":$table, "Value":$indices), [{
      build($_builder, $_state, table, indices, IntegerAttr(), IntegerAttr());
    }]>
  ];
  let hasVerifier = 1;
}

def Llmc_EmbeddingGradOp : Llmc_Op<"embedding_grad", [Pure,
                                                      Llmc_CheapToRecompute]> {
  let summary = "Scatter-adds row gradients into a table-shaped gradient";
  let description = [{
    The gradient of `llmc.embedding` with respect to its table:
    `result = 0; result[indices[i...], :] += grad[i..., :]`. Rows that no id
    selects are zero. Example:
    ```mlir
    %dwte = llmc.embedding_grad %dx, %tokens
        : tensor<4x64x768xf32>, tensor<4x64xi32> -> tensor<50257x768xf32>
    ```
    With `vocab_start` and `vocab_size` (the embedding's), the result is
    the block of rows from `vocab_start`: ids outside it add nothing.
  }];
  let arguments = (ins Llmc_FloatTensor:$grad, Llmc_IndexTensor:$indices,
                       OptionalAttr<I64Attr>:$vocab_start,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $indices (`vocab_start` $vocab_start^ `vocab_size` $vocab_size)?
    attr-dict `:` type($grad) `,` type($indices) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

def Llmc_MatmulOp : Llmc_Op<"matmul",
    [Pure, Llmc_AmpAllow, InferTypeOpAdaptor, Differentiable]> {
  let summary = "Activations times a weight matrix, with transpose flags";
  let description = [{
    `lhs` has shape `[..., M, K]` (`[..., K, M]` with `transpose_a`) and the
    rank-2 `rhs` has shape `[K, N]` (`[N, K]` with `transpose_b`, the
    PyTorch `nn.Linear` and llm.c weight layout). The leading dimensions of
    `lhs` are batch dimensions the weight is shared across; the result is
    `[..., M, N]`. Operands have one element type; the product accumulates
    in f32. Example:
    ```mlir
    %qkv = llmc.matmul %x, %w {transpose_b}
        : tensor<4x64x768xf32>, tensor<2304x768xf32>
    // %qkv : tensor<4x64x2304xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$lhs, Llmc_FloatTensor:$rhs,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

def Llmc_BatchMatmulOp : Llmc_Op<"batch_matmul",
    [Pure, Llmc_AmpAllow, InferTypeOpAdaptor, Differentiable]> {
  let summary = "A batch of independent matrix products, with transpose flags";
  let description = [{
    `lhs` is `[B..., M, K]` and `rhs` is `[B..., K, N]` with the same batch
    dimensions `B...` (at least one); `transpose_a` / `transpose_b` swap the
    last two dimensions of the operand. The result is `[B..., M, N]`.
    Example:
    ```mlir
    %att = llmc.batch_matmul %q, %k {transpose_b}
        : tensor<4x12x64x64xf32>, tensor<4x12x64x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$lhs, Llmc_FloatTensor:$rhs,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

//===----------------------------------------------------------------------===//
// Elementwise arithmetic
//===----------------------------------------------------------------------===//

class Llmc_BinaryOp<string mnemonic, string expr, list<Trait> traits = []>
    : Llmc_Op<mnemonic, !listconcat(traits,
                        [Pure, Llmc_Pointwise, Llmc_CheapToRecompute,
                         InferTypeOpAdaptor, Differentiable])> {
  let summary = "Elementwise `" # expr # "` with broadcasting";
  let description = [{
    Computes `}] # expr # [{` elementwise. Both operands have the same
    element type. Shapes broadcast as in NumPy: they are aligned at their
    last dimension, a missing leading dimension counts as 1, and each
    aligned pair must be equal or contain a 1, which stretches. Example:
    ```mlir
    %y = llmc.}] # mnemonic # [{ %x, %bias : tensor<4x64x768xf32>, tensor<768xf32>
    // %y : tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$lhs, Llmc_FloatTensor:$rhs);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

def Llmc_AddOp : Llmc_BinaryOp<"add", "lhs + rhs", [Commutative]>;
def Llmc_SubOp : Llmc_BinaryOp<"sub", "lhs - rhs">;
def Llmc_MulOp : Llmc_BinaryOp<"mul", "lhs * rhs", [Commutative]>;
def Llmc_DivOp : Llmc_BinaryOp<"div", "lhs / rhs">;
def Llmc_MaxOp : Llmc_BinaryOp<"max", "max(lhs, rhs)", [Commutative]>;

class Llmc_UnaryOp<string mnemonic, string expr, list<Trait> traits = []>
    : Llmc_Op<mnemonic, !listconcat(traits,
                        [Pure, Llmc_Pointwise, Llmc_CheapToRecompute,
                         SameOperandsAndResultType, Differentiable])> {
  let summary = "Elementwise `" # expr # "`";
  let description = [{
    Computes `}] # expr # [{` elementwise; the result has the operand's
    type. Example:
    ```mlir
    %y = llmc.}] # mnemonic # [{ %x : tensor<4x64x3072xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Llmc_NegOp : Llmc_UnaryOp<"neg", "-x">;
def Llmc_ExpOp : Llmc_UnaryOp<"exp", "exp(x)", [Llmc_AmpDeny]>;
def Llmc_LogOp : Llmc_UnaryOp<"log", "log(x)", [Llmc_AmpDeny]>;
def Llmc_TanhOp : Llmc_UnaryOp<"tanh", "tanh(x)">;
def Llmc_SqrtOp : Llmc_UnaryOp<"sqrt", "sqrt(x)">;
def Llmc_RsqrtOp : Llmc_UnaryOp<"rsqrt", "1 / sqrt(x)">;
def Llmc_ReluOp : Llmc_UnaryOp<"relu", "max(x, 0)">;
def Llmc_SiluOp : Llmc_UnaryOp<"silu", "x * sigmoid(x)">;

def Llmc_GeluOp : Llmc_Op<"gelu",
    [Pure, Llmc_Pointwise, Llmc_CheapToRecompute, SameOperandsAndResultType,
     Differentiable]> {
  let summary = "Elementwise GELU, exact or with the tanh approximation";
  let description = [{
    `approximate = none`: `x * Phi(x)` with the Gaussian CDF through erf.
    `approximate = tanh` (GPT-2, llm.c):
    `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`. Example:
    ```mlir
    %y = llmc.gelu %x approximate = tanh : tensor<4x64x3072xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input,
                       Llmc_GeluApproximationAttr:$approximate);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `approximate` `=` `` $approximate attr-dict `:` type($input)
  }];
}

def Llmc_CastOp : Llmc_Op<"cast", [Pure, Llmc_Pointwise, Llmc_CheapToRecompute,
                                   Llmc_AmpExempt, Differentiable]> {
  let summary = "Converts between f32, f16 and bf16";
  let description = [{
    Elementwise conversion with round-to-nearest-even; the shape is kept.
    Example:
    ```mlir
    %h = llmc.cast %x : tensor<4x64x768xf32> -> tensor<4x64x768xbf16>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Llmc_DropoutOp : Llmc_Op<"dropout",
    [Pure, Llmc_Pointwise, Llmc_CheapToRecompute, SameOperandsAndResultType,
     Differentiable]> {
  let summary = "Inverted dropout with a counter-based, regenerable mask";
  let description = [{
    `result = x * mask / (1 - rate)` where element `i` is dropped with
    probability `rate`. The mask is a pure function of (run seed, step,
    `stream`, i) through a counter-based generator whose seed and step the
    runtime supplies with each step, so the op is deterministic within a step
    and the backward pass and rematerialization regenerate the mask instead
    of storing it. `stream` tells apart the dropout sites of a model: two
    dropouts with one `stream`, `rate` and shape apply the same mask. The
    forward function uses each stream once (llmc-verify-legality checks it);
    the gradient function that llmc-autodiff builds repeats each forward
    dropout on the gradient with the same stream, which is its VJP. Example:
    ```mlir
    %y = llmc.dropout %x {rate = 1.000000e-01 : f32, stream = 3 : i64}
        : tensor<4x64x768xf32>
    ```
    A tensor that is one rank's block of a larger one (sequence
    parallelism: positions [16, 32) of a [4, 64, 768] activation) names the
    whole tensor's shape and the block's offsets; element i is then the
    whole tensor's row-major index of the element, so the ranks' blocks
    carry exactly the masks one process draws for the whole:
    ```mlir
    %y = llmc.dropout %x {rate = 1.000000e-01 : f32, stream = 3 : i64,
                          whole_shape = array<i64: 4, 64, 768>,
                          offsets = array<i64: 0, 16, 0>} : tensor<4x16x768xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, F32Attr:$rate, I64Attr:$stream,
                       OptionalAttr<DenseI64ArrayAttr>:$whole_shape,
                       OptionalAttr<DenseI64ArrayAttr>:$offsets);
  let results = (outs Llmc_FloatTensor:$result);
  let builders = [
    OpBuilder<(ins "Value":$input, "FloatAttr":$rate, "IntegerAttr":$stream),
    [{ build($_builder, $_state, input.getType(), input, rate, stream,
             DenseI64ArrayAttr(), DenseI64ArrayAttr()); }]>
  ];
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Predicates and selection
//===----------------------------------------------------------------------===//

// Flags: the conditions of llmc.select. Kernels compute them in registers and
// never store them (llmc-fusion puts each one in the kernel that uses it).
def Llmc_BoolTensor : StaticShapeTensorOf<[I1]>;

def Llmc_IsFiniteOp : Llmc_Op<"is_finite", [Pure, Llmc_Pointwise,
                                            Llmc_CheapToRecompute,
                                            InferTypeOpAdaptor]> {
  let summary = "Elementwise test for a finite value (neither inf nor NaN)";
  let description = [{
    The result has the input's shape and element type i1. Dynamic loss
    scaling (llmc-loss-scaling) tests the global gradient norm with it to
    detect an overflow. Not differentiable. Example:
    ```mlir
    %finite = llmc.is_finite %norm : tensor<f32>
    // %finite : tensor<i1>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input);
  let results = (outs Llmc_BoolTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Llmc_ComparePredicate : I32EnumAttr<"ComparePredicate",
    "an ordered comparison (false when either side is NaN)", [
      I32EnumAttrCase<"LT", 0, "lt">,
      I32EnumAttrCase<"LE", 1, "le">,
      I32EnumAttrCase<"EQ", 2, "eq">
    ]> {
  let cppNamespace = "::mlir::llmc";
  let genSpecializedAttr = 0;
}
def Llmc_ComparePredicateAttr : EnumAttr<Llmc_Dialect, Llmc_ComparePredicate,
                                         "compare_predicate"> {
  let assemblyFormat = "$value";
}

def Llmc_CompareOp : Llmc_Op<"compare", [Pure, Llmc_Pointwise,
                                         Llmc_CheapToRecompute,
                                         InferTypeOpAdaptor]> {
  let summary = "Elementwise ordered comparison with broadcasting";
  let description = [{
    `lhs < rhs` (`lt`), `lhs <= rhs` (`le`) or `lhs == rhs` (`eq`),
    elementwise, false where either side is NaN. Operands have one element
    type and broadcast as in `llmc.add`; the result is an i1 tensor of the
    broadcast shape. Not differentiable. Example:
    ```mlir
    %full = llmc.compare le, %window, %clean : tensor<f32>, tensor<f32>
    // %full : tensor<i1>
    ```
  }];
  let arguments = (ins Llmc_ComparePredicateAttr:$predicate,
                       Llmc_FloatTensor:$lhs, Llmc_FloatTensor:$rhs);
  let results = (outs Llmc_BoolTensor:$result);
  let assemblyFormat = [{
    `` $predicate `,` $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

def Llmc_SelectOp : Llmc_Op<"select",
    [Pure, Llmc_Pointwise, Llmc_CheapToRecompute, AllTypesMatch<["true_value",
     "false_value", "result"]>]> {
  let summary = "Elementwise choice between two tensors by an i1 condition";
  let description = [{
    `result = condition ? true_value : false_value`, elementwise. The two
    values have one type, which is the result's; the condition broadcasts to
    it (NumPy rule, as in `llmc.add`), so a scalar flag chooses between two
    whole tensors. The unchosen value does not leak through: a NaN in it
    leaves the result alone. Not differentiable. Example (keep the old
    parameter when the gradients overflowed):
    ```mlir
    %p = llmc.select %finite, %updated, %old
        : tensor<i1>, tensor<768x768xf32>
    ```
  }];
  let arguments = (ins Llmc_BoolTensor:$condition,
                       Llmc_FloatTensor:$true_value,
                       Llmc_FloatTensor:$false_value);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $condition `,` $true_value `,` $false_value attr-dict `:`
    type($condition) `,` type($true_value)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

def Llmc_LayerNormOp : Llmc_Op<"layer_norm",
    [Pure, Llmc_RowReduction, Llmc_CheapToRecompute, Llmc_AmpDeny,
     InferTypeOpAdaptor, Differentiable]> {
  let summary = "LayerNorm over the last dimension";
  let description = [{
    `y = (x - mean) * rstd * weight + bias` over the last dimension `C`,
    `rstd = 1 / sqrt(var + epsilon)` with the biased variance. Returns the
    normalized output and the per-row mean and rstd (f32, shape of `x`
    without its last dimension) that the backward pass reuses. `bias` is
    optional. Example:
    ```mlir
    %y, %mean, %rstd = llmc.layer_norm %x, %w, %b {epsilon = 1.000000e-05 : f32}
        : tensor<4x64x768xf32>, tensor<768xf32>, tensor<768xf32>
    // %mean, %rstd : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, Llmc_FloatTensor:$weight,
                       Optional<Llmc_FloatTensor>:$bias, F32Attr:$epsilon);
  let results = (outs Llmc_FloatTensor:$result, Llmc_F32Tensor:$mean,
                      Llmc_F32Tensor:$rstd);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,` type($weight)
    (`,` type($bias)^)?
  }];
}

def Llmc_RmsNormOp : Llmc_Op<"rms_norm",
    [Pure, Llmc_RowReduction, Llmc_CheapToRecompute, Llmc_AmpDeny,
     InferTypeOpAdaptor, Differentiable]> {
  let summary = "RMSNorm over the last dimension";
  let description = [{
    `y = x * rstd * weight`, `rstd = 1 / sqrt(mean(x^2) + epsilon)` over the
    last dimension (Llama). Returns the output and the per-row rstd (f32)
    that the backward pass reuses. Example:
    ```mlir
    %y, %rstd = llmc.rms_norm %x, %w {epsilon = 1.000000e-06 : f32}
        : tensor<2x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, Llmc_FloatTensor:$weight,
                       F32Attr:$epsilon);
  let results = (outs Llmc_FloatTensor:$result, Llmc_F32Tensor:$rstd);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight)
  }];
}

def Llmc_SoftmaxOp : Llmc_Op<"softmax",
    [Pure, Llmc_RowReduction, Llmc_CheapToRecompute, Llmc_AmpDeny,
     SameOperandsAndResultType, Differentiable]> {
  let summary = "Softmax over the last dimension";
  let description = [{
    `y = exp(x - max(x)) / sum(exp(x - max(x)))` along the last dimension,
    computed in f32 whatever the storage type. Example:
    ```mlir
    %p = llmc.softmax %scores : tensor<4x12x64x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention and positions
//===----------------------------------------------------------------------===//

def Llmc_AttentionOp : Llmc_Op<"attention",
    [Pure, Llmc_AmpAllow, InferTypeOpAdaptor, Differentiable]> {
  let summary = "Scaled dot-product attention, optionally causal";
  let description = [{
    `out = softmax(scale * q k^T + mask) v` with `q : [B..., Tq, D]`,
    `k : [B..., Tk, D]`, `v : [B..., Tk, Dv]` and equal batch dimensions
    (batch and heads). With `causal`, query `i` sees keys `j <= i + Tk - Tq`
    (the masks of training, Tq = Tk, and of decoding with a cache, Tq < Tk).
    With `positions : [B, Tq]` (integers; causal only), the keys are the
    slots of a KV cache and query `i` of sequence `b` sees keys
    `j <= positions[b, i]`: the position of the token it belongs to, so
    slots past a sequence's current length are masked whatever they hold.
    Also returns the per-query log-sum-exp of the scaled, masked scores (f32)
    so the backward pass recomputes probabilities without storing them, as
    flash attention does. Examples:
    ```mlir
    %o, %lse = llmc.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32}
        : tensor<4x12x64x64xf32>, tensor<4x12x64x64xf32>, tensor<4x12x64x64xf32>
    // %o : tensor<4x12x64x64xf32>, %lse : tensor<4x12x64xf32>
    // Decoding: one query per sequence over a cache of 1024 slots.
    %d, %dlse = llmc.attention %q1, %kc, %vc positions %pos : tensor<4x1xi32>
        {causal, scale = 1.250000e-01 : f32}
        : tensor<4x12x1x64xf32>, tensor<4x12x1024x64xf32>,
          tensor<4x12x1024x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$query, Llmc_FloatTensor:$key,
                       Llmc_FloatTensor:$value,
                       Optional<Llmc_IndexTensor>:$positions, F32Attr:$scale,
                       UnitAttr:$causal);
  let results = (outs Llmc_FloatTensor:$result, Llmc_F32Tensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`positions` $positions^ `:` type($positions))?
    attr-dict `:` type($query) `,` type($key) `,` type($value)
  }];
  let hasVerifier = 1;
}

def Llmc_RotaryOp : Llmc_Op<"rotary",
    [Pure, Llmc_Pointwise, Llmc_CheapToRecompute,
     AllTypesMatch<["input", "result"]>, Differentiable]> {
  let summary = "Rotary position embedding (RoPE) over `[..., T, D]`";
  let description = [{
    Rotates pairs `(x[..., t, i], x[..., t, i + D/2])` by the angle
    `p * theta^(-2i/D)` for `i < D/2` (the half-split pairing of GPT-NeoX and
    Hugging Face Llama), where the position `p` is `t`, the index in the
    second-to-last dimension, or, with `positions : [B, T]` (integers, the
    input `[B, ..., T, D]`), `positions[b, t]`: the tokens of a decoding
    step sit at their places in the sequence. `inverse` rotates by the
    negated angle, which is the transpose of the rotation and so its
    gradient. Example:
    ```mlir
    %qr = llmc.rotary %q {theta = 1.000000e+04 : f32} : tensor<2x4x16x16xf32>
    %kr = llmc.rotary %k positions %pos : tensor<2x1xi32>
        {theta = 1.000000e+04 : f32} : tensor<2x4x1x16xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input,
                       Optional<Llmc_IndexTensor>:$positions, F32Attr:$theta,
                       UnitAttr:$inverse);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`positions` $positions^ `:` type($positions))? attr-dict `:`
    type($input)
  }];
  let hasVerifier = 1;
}

def Llmc_CacheWriteOp : Llmc_Op<"cache_write",
    [Pure, Llmc_AmpExempt, AllTypesMatch<["cache", "result"]>]> {
  let summary = "Writes keys or values into a KV cache at their positions";
  let description = [{
    `result` is `cache : [B, H, S, D]` with `result[b, h, positions[b, t], :]
    = update[b, h, t, :]` for `update : [B, H, T, D]` and integer
    `positions : [B, T]` in `[0, S)`; other slots keep their values. A
    prefill or decode step returns it as the `llmc.updates` of the cache's
    `llmc.state`, and code generation writes the T new rows in place (the
    cache is never copied). Two tokens of one sequence at the same
    position write the same slot in an unspecified order. Example:
    ```mlir
    %kc2 = llmc.cache_write %k into %kc at %pos
        : tensor<4x12x1x64xf32>, tensor<4x12x1024x64xf32>, tensor<4x1xi32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$update, Llmc_FloatTensor:$cache,
                       Llmc_IndexTensor:$positions);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $update `into` $cache `at` $positions attr-dict `:` type($update) `,`
    type($cache) `,` type($positions)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def Llmc_CrossEntropyOp : Llmc_Op<"cross_entropy",
    [Pure, Llmc_RowReduction, Llmc_CheapToRecompute, Llmc_AmpDeny,
     InferTypeOpAdaptor, Differentiable]> {
  let summary = "Mean softmax cross-entropy of logits against target ids";
  let description = [{
    `loss = mean_i(logsumexp(logits[i, :]) - logits[i, targets[i]])` over
    every position `i` of `targets : [N...]` with `logits : [N..., V]`.
    Probabilities are never materialized. Returns the scalar f32 loss and
    the per-position log-sum-exp (f32) that the backward pass reuses.
    Targets must lie in `[0, V)`. Example:
    ```mlir
    %loss, %lse = llmc.cross_entropy %logits, %targets
        : tensor<4x64x50257xf32>, tensor<4x64xi32>
    // %loss : tensor<f32>, %lse : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$logits, Llmc_IndexTensor:$targets);
  let results = (outs Llmc_Scalar:$loss, Llmc_F32Tensor:$lse);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` type($logits) `,` type($targets)
  }];
}

// Vocabulary-parallel cross-entropy (Megatron's vocab_parallel_cross_entropy):
// each tp rank holds the logits of its block of the vocabulary, and the
// loss is assembled from per-row statistics that llmc-tensor-parallel
// all-reduces in between, so the logits are never gathered:
//   %m = llmc.vocab_shard_max %logits ...             // local max
//   %M = llmc.all_reduce %m max on "tp" ...           // global max
//   %s, %t = llmc.vocab_shard_cross_entropy %logits, %targets, %M ...
//   %S = llmc.all_reduce %s sum ... replicated        // sum of exp(l - M)
//   %T = llmc.all_reduce %t sum ... replicated        // the target's logit
//   %loss, %lse = llmc.cross_entropy_combine %M, %S, %T
// The max is only a shift that keeps exp in range: the loss does not depend
// on it, so no gradient flows into it (vocab_shard_max has no VJP, and the
// rules of the two ops that read %M give it none).

def Llmc_VocabShardMaxOp : Llmc_Op<"vocab_shard_max",
    [Pure, Llmc_RowReduction, Llmc_CheapToRecompute, Llmc_AmpDeny,
     InferTypeOpAdaptor]> {
  let summary = "Row maximum of one rank's block of vocabulary logits";
  let description = [{
    `max[i] = max over v of logits[i, v]` for the columns v whose id
    `vocab_start + v` is below `vocab_size` (the padding columns of the
    last rank's block are left out). The result is f32, the logits' shape
    without the last dimension. Example:
    ```mlir
    %m = llmc.vocab_shard_max %logits vocab_start 128 vocab_size 255
        : tensor<4x64x128xf32>
    // %m : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$logits, I64Attr:$vocab_start,
                       I64Attr:$vocab_size);
  let results = (outs Llmc_F32Tensor:$max);
  let assemblyFormat = [{
    $logits `vocab_start` $vocab_start `vocab_size` $vocab_size attr-dict `:`
    type($logits)
  }];
}

def Llmc_VocabShardCrossEntropyOp : Llmc_Op<"vocab_shard_cross_entropy",
    [Pure, Llmc_RowReduction, Llmc_CheapToRecompute, Llmc_AmpDeny,
     InferTypeOpAdaptor, Differentiable]> {
  let summary = "One rank's part of a vocabulary-parallel cross-entropy";
  let description = [{
    Given the max over the whole vocabulary (`max`, all-reduced), returns
    per row the sum of `exp(logits[i, v] - max[i])` over the rank's real
    columns (ids `vocab_start + v < vocab_size`) and the target's logit
    `logits[i, targets[i] - vocab_start]` when the rank holds that id, 0
    otherwise. Summed over the ranks they are the whole row's. Targets must
    lie in `[0, vocab_size)`. The gradient is
    `llmc.vocab_shard_cross_entropy_grad`; `max` gets none. Example:
    ```mlir
    %s, %t = llmc.vocab_shard_cross_entropy %logits, %targets, %max
        vocab_start 128 vocab_size 255
        : tensor<4x64x128xf32>, tensor<4x64xi32>, tensor<4x64xf32>
    // %s, %t : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$logits, Llmc_IndexTensor:$targets,
                       Llmc_F32Tensor:$max, I64Attr:$vocab_start,
                       I64Attr:$vocab_size);
  let results = (outs Llmc_F32Tensor:$sum_exp, Llmc_F32Tensor:$target_logit);
  let assemblyFormat = [{
    $logits `,` $targets `,` $max `vocab_start` $vocab_start `vocab_size`
    $vocab_size attr-dict `:` type($logits) `,` type($targets) `,` type($max)
  }];
}

def Llmc_CrossEntropyCombineOp : Llmc_Op<"cross_entropy_combine",
    [Pure, Llmc_CheapToRecompute, Llmc_AmpDeny, InferTypeOpAdaptor,
     AllTypesMatch<["max", "sum_exp", "target_logit"]>, Differentiable]> {
  let summary = "Mean cross-entropy from whole-row statistics";
  let description = [{
    `lse = max + log(sum_exp)` and `loss = mean_i(lse[i] - target_logit[i])`
    from the statistics of every position (all f32, one shape): what
    `llmc.cross_entropy` returns, for logits that no rank holds whole.
    The VJP gives `sum_exp` the gradient `dloss / (N sum_exp)` and
    `target_logit` `-dloss / N` (N positions), `max` none: the loss does
    not depend on the shift. Example:
    ```mlir
    %loss, %lse = llmc.cross_entropy_combine %max, %sum_exp, %target_logit
        : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_F32Tensor:$max, Llmc_F32Tensor:$sum_exp,
                       Llmc_F32Tensor:$target_logit);
  let results = (outs Llmc_Scalar:$loss, Llmc_F32Tensor:$lse);
  let assemblyFormat = [{
    $max `,` $sum_exp `,` $target_logit attr-dict `:` type($max)
  }];
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Llmc_ReshapeOp : Llmc_Op<"reshape", [Pure, Llmc_View, Llmc_CheapToRecompute,
                                         Differentiable]> {
  let summary = "Reinterprets a tensor's row-major elements with a new shape";
  let description = [{
    The element count and element type are kept. Example:
    ```mlir
    %y = llmc.reshape %x : tensor<4x64x768xf32> -> tensor<4x64x12x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Llmc_TransposeOp : Llmc_Op<"transpose",
    [Pure, Llmc_View, Llmc_CheapToRecompute, InferTypeOpAdaptor,
     Differentiable]> {
  let summary = "Permutes dimensions";
  let description = [{
    `result` dimension `i` is `input` dimension `permutation[i]`. Example:
    ```mlir
    %y = llmc.transpose %x, [0, 2, 1, 3] : tensor<4x64x12x64xf32>
    // %y : tensor<4x12x64x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$input `,` $permutation attr-dict `:` type($input)";
}

def Llmc_SliceOp : Llmc_Op<"slice",
    [Pure, Llmc_View, Llmc_CheapToRecompute, InferTypeOpAdaptor,
     Differentiable]> {
  let summary = "A contiguous static sub-block";
  let description = [{
    Takes `sizes[d]` elements starting at `offsets[d]` in every dimension
    `d`; the block must lie inside the input. Example:
    ```mlir
    %k = llmc.slice %qkv offsets [0, 0, 768] sizes [4, 64, 768]
        : tensor<4x64x2304xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, DenseI64ArrayAttr:$offsets,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `offsets` $offsets `sizes` $sizes attr-dict `:` type($input)
  }];
}

def Llmc_ConcatOp : Llmc_Op<"concat",
    [Pure, Llmc_CheapToRecompute, InferTypeOpAdaptor, Differentiable]> {
  let summary = "Joins tensors along one dimension";
  let description = [{
    All inputs have the same rank and element type and agree in every
    dimension but `dim`. Example:
    ```mlir
    %y = llmc.concat %a, %b dim 1 : tensor<4x8xf32>, tensor<4x24xf32>
    // %y : tensor<4x32xf32>
    ```
  }];
  let arguments = (ins Variadic<Llmc_FloatTensor>:$inputs, I64Attr:$dim);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$inputs `dim` $dim attr-dict `:` type($inputs)";
}

def Llmc_BroadcastOp : Llmc_Op<"broadcast", [Pure, Llmc_View,
                                             Llmc_CheapToRecompute,
                                             Differentiable]> {
  let summary = "Stretches a tensor to a larger shape";
  let description = [{
    Follows the broadcasting rule of the binary ops: shapes align at the
    last dimension, and each input dimension equals the result's or is 1.
    The result may have more leading dimensions. Example:
    ```mlir
    %y = llmc.broadcast %b : tensor<768xf32> -> tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Llmc_ReduceOp<string mnemonic, string what>
    : Llmc_Op<mnemonic, [Pure, RowReductionIfLastDim, Llmc_CheapToRecompute,
                         Llmc_AmpDeny, InferTypeOpAdaptor, Differentiable]> {
  let summary = "Reduces dimensions by their " # what;
  let description = [{
    Reduces the listed dimensions (strictly increasing) by their }] # what #
    [{. With `keep_dims` they stay as size 1, otherwise they are dropped.
    The accumulation is in f32. Example:
    ```mlir
    %y = llmc.}] # mnemonic # [{ %x dims [2] : tensor<4x64x768xf32>
    // %y : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$keep_dims);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `dims` $dims (`keep_dims` $keep_dims^)? attr-dict `:` type($input)
  }];
  let extraClassDefinition = [{
    bool $cppClass::reducesRows() {
      ArrayRef<int64_t> dims = getDims();
      int64_t rank = ::llvm::cast<RankedTensorType>(getInput().getType())
                         .getRank();
      return !dims.empty() && dims.back() == rank - 1;
    }
  }];
}

def Llmc_ReduceSumOp : Llmc_ReduceOp<"reduce_sum", "sum">;
def Llmc_ReduceMeanOp : Llmc_ReduceOp<"reduce_mean", "mean">;
def Llmc_ReduceMaxOp : Llmc_ReduceOp<"reduce_max", "maximum">;

//===----------------------------------------------------------------------===//
// Backward ops: the gradients that are not compositions of forward ops
//===----------------------------------------------------------------------===//

class Llmc_ActivationGradOp<string mnemonic, string what>
    : Llmc_Op<mnemonic, [Pure, Llmc_Pointwise, Llmc_CheapToRecompute,
                         SameOperandsAndResultType]> {
  let summary = "Gradient of " # what # " given the output gradient and input";
  let description = [{
    `result = grad * f'(input)` elementwise for f = }] # what # [{. Example:
    ```mlir
    %dx = llmc.}] # mnemonic # [{ %dy, %x : tensor<4x64x3072xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$grad, Llmc_FloatTensor:$input);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($grad)";
}

def Llmc_ReluGradOp : Llmc_ActivationGradOp<"relu_grad", "relu">;
def Llmc_SiluGradOp : Llmc_ActivationGradOp<"silu_grad", "silu">;

def Llmc_GeluGradOp : Llmc_Op<"gelu_grad", [Pure, Llmc_Pointwise,
                                            Llmc_CheapToRecompute,
                                            SameOperandsAndResultType]> {
  let summary = "Gradient of GELU given the output gradient and input";
  let description = [{
    `result = grad * gelu'(input)` with the same approximation as the
    forward op. Example:
    ```mlir
    %dx = llmc.gelu_grad %dy, %x approximate = tanh : tensor<4x64x3072xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$grad, Llmc_FloatTensor:$input,
                       Llmc_GeluApproximationAttr:$approximate);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input `approximate` `=` `` $approximate attr-dict `:` type($grad)
  }];
}

def Llmc_SoftmaxGradOp : Llmc_Op<"softmax_grad",
    [Pure, Llmc_RowReduction, Llmc_RowGradient, Llmc_CheapToRecompute,
     SameOperandsAndResultType]> {
  let summary = "Gradient of softmax from its output";
  let description = [{
    `result = y * (grad - sum(grad * y))` along the last dimension, where
    `y` is the softmax output. Example:
    ```mlir
    %dx = llmc.softmax_grad %dy, %y : tensor<4x12x64x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$grad, Llmc_FloatTensor:$output);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $output attr-dict `:` type($grad)";
}

def Llmc_LayerNormGradOp : Llmc_Op<"layer_norm_grad",
    [Pure, Llmc_RowReduction, Llmc_RowGradient, Llmc_CheapToRecompute,
     InferTypeOpAdaptor]> {
  let summary = "Gradients of layer_norm from its saved mean and rstd";
  let description = [{
    Returns the gradients of the input, the weight and the bias (the last
    is unused when the forward op had no bias). Example:
    ```mlir
    %dx, %dw, %db = llmc.layer_norm_grad %dy, %x, %w, %mean, %rstd
        : tensor<4x64x768xf32>, tensor<4x64x768xf32>, tensor<768xf32>,
          tensor<4x64xf32>, tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$grad, Llmc_FloatTensor:$input,
                       Llmc_FloatTensor:$weight, Llmc_F32Tensor:$mean,
                       Llmc_F32Tensor:$rstd);
  let results = (outs Llmc_FloatTensor:$input_grad,
                      Llmc_FloatTensor:$weight_grad,
                      Llmc_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight `,` $mean `,` $rstd attr-dict `:` type($grad)
    `,` type($input) `,` type($weight) `,` type($mean) `,` type($rstd)
  }];
}

def Llmc_RmsNormGradOp : Llmc_Op<"rms_norm_grad", [Pure, Llmc_RowReduction,
                                                   Llmc_RowGradient,
                                                   Llmc_CheapToRecompute,
                                                   InferTypeOpAdaptor]> {
  let summary = "Gradients of rms_norm from its saved rstd";
  let description = [{
    Returns the gradients of the input and the weight. Example:
    ```mlir
    %dx, %dw = llmc.rms_norm_grad %dy, %x, %w, %rstd
        : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>,
          tensor<2x16xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$grad, Llmc_FloatTensor:$input,
                       Llmc_FloatTensor:$weight, Llmc_F32Tensor:$rstd);
  let results = (outs Llmc_FloatTensor:$input_grad,
                      Llmc_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight `,` $rstd attr-dict `:` type($grad) `,`
    type($input) `,` type($weight) `,` type($rstd)
  }];
}

def Llmc_AttentionGradOp : Llmc_Op<"attention_grad",
    [Pure, InferTypeOpAdaptor]> {
  let summary = "Gradients of attention from its output and log-sum-exp";
  let description = [{
    Recomputes the probabilities from `q`, `k` and the saved `lse` (flash
    attention's backward) and returns the gradients of `q`, `k` and `v`.
    `scale` and `causal` must be those of the forward op. Example:
    ```mlir
    %dq, %dk, %dv = llmc.attention_grad %do, %q, %k, %v, %o, %lse
        {causal, scale = 1.250000e-01 : f32}
        : tensor<4x12x64x64xf32>, tensor<4x12x64x64xf32>, tensor<4x12x64x64xf32>,
          tensor<4x12x64x64xf32>, tensor<4x12x64x64xf32>, tensor<4x12x64xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$grad, Llmc_FloatTensor:$query,
                       Llmc_FloatTensor:$key, Llmc_FloatTensor:$value,
                       Llmc_FloatTensor:$output, Llmc_F32Tensor:$lse,
                       F32Attr:$scale, UnitAttr:$causal);
  let results = (outs Llmc_FloatTensor:$query_grad,
                      Llmc_FloatTensor:$key_grad,
                      Llmc_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output `,` $lse attr-dict `:`
    type($grad) `,` type($query) `,` type($key) `,` type($value) `,`
    type($output) `,` type($lse)
  }];
}

def Llmc_CrossEntropyGradOp : Llmc_Op<"cross_entropy_grad",
    [Pure, Llmc_RowReduction, Llmc_RowGradient, Llmc_CheapToRecompute,
     InferTypeOpAdaptor]> {
  let summary = "Gradient of the mean cross-entropy with respect to logits";
  let description = [{
    `result[i, v] = grad * (exp(logits[i, v] - lse[i]) - (v == targets[i])) / N`
    with N the number of positions, reusing the forward log-sum-exp.
    Example:
    ```mlir
    %dlogits = llmc.cross_entropy_grad %dloss, %logits, %targets, %lse
        : tensor<f32>, tensor<4x64x50257xf32>, tensor<4x64xi32>, tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_Scalar:$grad, Llmc_FloatTensor:$logits,
                       Llmc_IndexTensor:$targets, Llmc_F32Tensor:$lse);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $logits `,` $targets `,` $lse attr-dict `:` type($grad) `,`
    type($logits) `,` type($targets) `,` type($lse)
  }];
}

def Llmc_VocabShardCrossEntropyGradOp
    : Llmc_Op<"vocab_shard_cross_entropy_grad",
              [Pure, Llmc_RowReduction, Llmc_RowGradient,
               Llmc_CheapToRecompute, InferTypeOpAdaptor]> {
  let summary = "Gradient of llmc.vocab_shard_cross_entropy for its logits";
  let description = [{
    `result[i, v] = sum_exp_grad[i] * exp(logits[i, v] - max[i])` for the
    rank's real columns (0 for padding), plus `target_logit_grad[i]` where
    `vocab_start + v == targets[i]`. After cross_entropy_combine's VJP this
    is `dloss (softmax - onehot) / N` on the rank's columns: the whole
    vocabulary's softmax from the all-reduced max and sum alone. Example:
    ```mlir
    %dl = llmc.vocab_shard_cross_entropy_grad %ds, %dt, %logits, %targets,
        %max vocab_start 128 vocab_size 255
        : tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64x128xf32>,
          tensor<4x64xi32>, tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Llmc_F32Tensor:$sum_exp_grad,
                       Llmc_F32Tensor:$target_logit_grad,
                       Llmc_FloatTensor:$logits, Llmc_IndexTensor:$targets,
                       Llmc_F32Tensor:$max, I64Attr:$vocab_start,
                       I64Attr:$vocab_size);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $sum_exp_grad `,` $target_logit_grad `,` $logits `,` $targets `,` $max
    `vocab_start` $vocab_start `vocab_size` $vocab_size attr-dict `:`
    type($sum_exp_grad) `,` type($target_logit_grad) `,` type($logits) `,`
    type($targets) `,` type($max)
  }];
}

//===----------------------------------------------------------------------===//
// Collectives: communication between the ranks of one mesh axis
//===----------------------------------------------------------------------===//

// A collective runs on every rank of one axis of the device mesh ("dp" data
// parallel, "tp" tensor parallel, "pp" pipeline parallel), whose size it
// carries so that shapes verify. Each rank's program holds the same
// collectives in the same order; a collective is not Pure (no side-effect
// interface), so no pass merges, drops or reorders it: the sharding pass
// gathers a parameter twice on purpose (before the forward and again before
// the backward) and every rank must issue what every other rank issues.
// Their VJPs follow SPMD semantics: the objective is the sum over the ranks
// of each rank's own result, so all_gather and reduce_scatter (sum) are each
// other's VJP and all_reduce (sum) is its own.
class Llmc_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Llmc_Op<mnemonic, !listconcat([Llmc_AmpExempt, InferTypeOpAdaptor],
                                    traits)>;

def Llmc_AllReduceOp : Llmc_CollectiveOp<"all_reduce", [Differentiable]> {
  let summary = "Combines a tensor over the ranks of a mesh axis";
  let description = [{
    Every rank gets the elementwise sum, average or maximum of the input
    over the `axis_size` ranks of `axis`. Example (data-parallel gradient
    averaging over 4 ranks):
    ```mlir
    %g = llmc.all_reduce %local avg on "dp" size 4 : tensor<768x3072xf32>
    ```
    With `replicated`, the ranks of the axis go on with the result as one
    value that each computes redundantly (Megatron-LM's g operator after a
    row-parallel matmul: the objective counts that computation once, not
    once per rank), so the VJP is the result's gradient unchanged; without
    it the VJP is the SPMD one (an all_reduce of the gradients).
    ```mlir
    %y = llmc.all_reduce %partial sum on "tp" size 2 replicated : tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input,
                       Llmc_CollectiveReductionAttr:$reduction,
                       StrAttr:$axis, I64Attr:$axis_size,
                       UnitAttr:$replicated);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `` $reduction `on` $axis `size` $axis_size (`replicated` $replicated^)?
    attr-dict `:` type($input)
  }];
}

def Llmc_CopyToAxisOp : Llmc_Op<"copy_to_axis",
    [Pure, SameOperandsAndResultType, Llmc_View, Llmc_CheapToRecompute,
     Differentiable]> {
  let summary = "Identity forward, all-reduce (sum) of the gradient backward";
  let description = [{
    Megatron-LM's f operator (copy_to_tensor_model_parallel_region): the
    input is a value every rank of `axis` holds alike; each rank uses it
    for its own part of a column-parallel matmul, so each rank's gradient
    of it is partial, and the VJP sums them over the axis (an
    `llmc.all_reduce ... replicated`). The forward is the input itself (a
    view: no kernel). llmc-tensor-parallel places it; autodiff turns it
    into the backward's collective. Example:
    ```mlir
    %x1 = llmc.copy_to_axis %x on "tp" size 2 : tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, StrAttr:$axis,
                       I64Attr:$axis_size);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `on` $axis `size` $axis_size attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

def Llmc_ReduceScatterOp : Llmc_CollectiveOp<"reduce_scatter",
                                             [Differentiable]> {
  let summary = "Combines a tensor over a mesh axis, each rank keeping a block";
  let description = [{
    Cuts dimension `dim` of the input into `axis_size` equal blocks; rank r
    gets block r of the sum, average or maximum over the ranks. Example
    (ZeRO-2 gradient sharding over 4 ranks):
    ```mlir
    %g = llmc.reduce_scatter %flat avg dim 0 on "dp" size 4 : tensor<4096xf32>
    // %g : tensor<1024xf32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input,
                       Llmc_CollectiveReductionAttr:$reduction, I64Attr:$dim,
                       StrAttr:$axis, I64Attr:$axis_size);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `` $reduction `dim` $dim `on` $axis `size` $axis_size attr-dict `:`
    type($input)
  }];
}

def Llmc_AllGatherOp : Llmc_CollectiveOp<"all_gather", [Differentiable]> {
  let summary = "Concatenates the ranks' tensors along one dimension";
  let description = [{
    Every rank gets the inputs of the `axis_size` ranks of `axis`
    concatenated along `dim`, rank 0's first. Example (ZeRO-3 parameter
    gathering over 4 ranks):
    ```mlir
    %p = llmc.all_gather %shard dim 0 on "dp" size 4 : tensor<1024xf32>
    // %p : tensor<4096xf32>
    ```
  }];
  let arguments = (ins Llmc_AnyTensor:$input, I64Attr:$dim, StrAttr:$axis,
                       I64Attr:$axis_size);
  let results = (outs Llmc_AnyTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `on` $axis `size` $axis_size attr-dict `:` type($input)
  }];
}

// Named broadcast_from: llmc.broadcast is the shape broadcast.
def Llmc_BroadcastFromOp : Llmc_CollectiveOp<"broadcast_from"> {
  let summary = "Every rank of a mesh axis gets one rank's tensor";
  let description = [{
    Every rank gets the input of rank `root` of `axis`. Example:
    ```mlir
    %w = llmc.broadcast_from %init root 0 on "dp" size 4 : tensor<768xf32>
    ```
  }];
  let arguments = (ins Llmc_AnyTensor:$input, I64Attr:$root, StrAttr:$axis,
                       I64Attr:$axis_size);
  let results = (outs Llmc_AnyTensor:$result);
  let assemblyFormat = [{
    $input `root` $root `on` $axis `size` $axis_size attr-dict `:`
    type($input)
  }];
}

// Pipeline parallelism: point-to-point transfers between neighbouring stages
// of mesh axis "pp". Not Pure: a transfer is communication that the stage
// on the other side waits for, so neither is ever erased as dead.
def Llmc_PipelineSendOp : Llmc_Op<"pipeline_send",
    [Llmc_AmpExempt, Differentiable]> {
  let summary = "Sends a tensor to a neighbouring pipeline stage";
  let description = [{
    Sends `input` to stage `peer` of the `stages` stages of mesh axis "pp"
    and returns a zero scalar that stands for the loss of a stage that
    does not compute it (its VJP ignores that scalar's gradient and
    receives the input's gradient from `peer` instead, so autodiff of a
    stage makes the backward's transfers). `gradient` marks the backward's
    transfers (a VJP's), which the runtime tags apart from activations.
    llmc-pipeline-stage places the activation send at a stage's end:
    ```mlir
    %z = llmc.pipeline_send %h to stage 1 of 2 : tensor<4x64x64xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Llmc_FloatTensor:$input, I64Attr:$peer,
                       I64Attr:$stages, UnitAttr:$gradient);
  let results = (outs Llmc_Scalar:$result);
  let assemblyFormat = [{
    $input `to` `stage` $peer `of` $stages (`gradient` $gradient^)?
    attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Llmc_PipelineRecvOp : Llmc_Op<"pipeline_recv",
    [Llmc_AmpExempt, Differentiable]> {
  let summary = "Receives a tensor from a neighbouring pipeline stage";
  let description = [{
    Returns the tensor stage `peer` of the `stages` stages of mesh axis
    "pp" sends (with its `llmc.pipeline_send`). Its VJP sends the result's
    gradient back to `peer`; llmc-autodiff counts the result as depending
    on parameters (those of the stages before). Example (the start of
    stage 1):
    ```mlir
    %h = llmc.pipeline_recv from stage 0 of 2 : tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins I64Attr:$peer, I64Attr:$stages, UnitAttr:$gradient);
  let results = (outs Llmc_FloatTensor:$result);
  let assemblyFormat = [{
    `from` `stage` $peer `of` $stages (`gradient` $gradient^)?
    attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion: groups of ops that code generation turns into one kernel
//===----------------------------------------------------------------------===//

def Llmc_FusionOp : Llmc_Op<"fusion",
    [IsolatedFromAbove, SingleBlock, Pure, Llmc_AmpExempt]> {
  let summary = "Ops that run as one fused kernel";
  let description = [{
    Made by `llmc-fusion`: the body computes the results from the block
    arguments (one per input) with llmc ops and yields them. `kind` (the
    enum `FusionKind`, printed as a bare keyword) says how code generation
    runs it:
    - `pointwise`: elementwise ops over one shape (inputs may broadcast);
    - `row`: one row reduction (layer_norm, rms_norm, softmax,
      cross_entropy, a reduce over the last dimension) with the elementwise
      producers and consumers fused around it;
    - `gemm`: one matmul or batch_matmul whose elementwise consumers run as
      its epilogue on each block of the product.
    `name` lists the fused ops, for people reading the IR. Example:
    ```mlir
    %y = llmc.fusion "matmul_add_gelu" gemm (%x, %w, %b)
        : (tensor<4x64x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>)
          -> tensor<4x64x3072xf32> {
    ^bb0(%a: tensor<4x64x768xf32>, %ww: tensor<3072x768xf32>, %bb: tensor<3072xf32>):
      %0 = llmc.matmul %a, %ww {transpose_b} : ...
      ...
      llmc.yield %2 : tensor<4x64x3072xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Llmc_AnyTensor>:$inputs, StrAttr:$name,
                       Llmc_FusionKindAttr:$kind);
  let results = (outs Variadic<Llmc_AnyTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $name `` $kind ` ` `(` $inputs `)` attr-dict `:`
    functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
}

def Llmc_YieldOp : Llmc_Op<"yield",
    [Pure, Llmc_AmpExempt, Terminator, HasParent<"FusionOp">]> {
  let summary = "Returns the results of a fusion";
  let arguments = (ins Variadic<Llmc_AnyTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // LLMC_OPS_TD
