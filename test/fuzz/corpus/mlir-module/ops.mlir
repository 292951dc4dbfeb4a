// Round trip of every llmc op. Each function returns the values it defines,
// so the `return` line checks the result types that inferReturnTypes
// computed (the func verifier rejects a mismatch with the signature).

// Tests constants of every element type and a fill.
func.func @constant() -> (tensor<f32>, tensor<2x2xbf16>, tensor<3xi64>, tensor<2xi32>, tensor<4x8xf16>) {
  %half = llmc.constant dense<5.000000e-01> : tensor<f32>
  %mat = llmc.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xbf16>
  %ids = llmc.constant dense<[0, 7, 50256]> : tensor<3xi64>
  %ones = llmc.constant dense<1> : tensor<2xi32>
  %fill = llmc.fill 1.0 : tensor<4x8xf16>
  return %half, %mat, %ids, %ones, %fill : tensor<f32>, tensor<2x2xbf16>, tensor<3xi64>, tensor<2xi32>, tensor<4x8xf16>
}

// Tests embedding (bf16 table, i64 ids: result is ids shape then C) and its
// gradient (f32, i32 ids).
func.func @embedding(%wte: tensor<50x16xbf16>, %tokens: tensor<2x8xi64>, %ids: tensor<8xi32>, %dx: tensor<8x16xf32>) -> (tensor<2x8x16xbf16>, tensor<50x16xf32>) {
  %x = llmc.embedding %wte, %tokens : tensor<50x16xbf16>, tensor<2x8xi64>
  %dwte = llmc.embedding_grad %dx, %ids : tensor<8x16xf32>, tensor<8xi32> -> tensor<50x16xf32>
  return %x, %dwte : tensor<2x8x16xbf16>, tensor<50x16xf32>
}

// Tests matmul with a rank-2 and a rank-3 (batch-shared weight) lhs and
// every combination of the transpose flags.
func.func @matmul(%x2: tensor<4x8xf32>, %x3: tensor<2x4x8xf16>, %w: tensor<8x16xf32>, %wth: tensor<16x8xf16>, %xt: tensor<8x4xf32>, %wt: tensor<16x8xf32>) -> (tensor<4x16xf32>, tensor<2x4x16xf16>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = llmc.matmul %x2, %w : tensor<4x8xf32>, tensor<8x16xf32>
  %1 = llmc.matmul %x3, %wth {transpose_b} : tensor<2x4x8xf16>, tensor<16x8xf16>
  %2 = llmc.matmul %xt, %w {transpose_a} : tensor<8x4xf32>, tensor<8x16xf32>
  %3 = llmc.matmul %xt, %wt {transpose_a, transpose_b} : tensor<8x4xf32>, tensor<16x8xf32>
  return %0, %1, %2, %3 : tensor<4x16xf32>, tensor<2x4x16xf16>, tensor<4x16xf32>, tensor<4x16xf32>
}

// Tests batch_matmul with two batch dimensions and with the transpose flags.
func.func @batch_matmul(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x5x8xf32>, %v: tensor<2x3x5x6xf32>, %a: tensor<2x8x4xbf16>, %b: tensor<2x6x8xbf16>) -> (tensor<2x3x4x5xf32>, tensor<2x3x8x6xf32>, tensor<2x4x6xbf16>) {
  %0 = llmc.batch_matmul %q, %k {transpose_b} : tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>
  %1 = llmc.batch_matmul %k, %v {transpose_a} : tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>
  %2 = llmc.batch_matmul %a, %b {transpose_a, transpose_b} : tensor<2x8x4xbf16>, tensor<2x6x8xbf16>
  return %0, %1, %2 : tensor<2x3x4x5xf32>, tensor<2x3x8x6xf32>, tensor<2x4x6xbf16>
}

// Tests the binary ops and broadcasting: a trailing-dimension bias, two
// size-1 dimensions stretching each other, a rank-0 scalar, equal shapes,
// and a missing leading dimension together with size-1 stretches.
func.func @binary(%x: tensor<2x4x8xf32>, %bias: tensor<8xf32>, %col: tensor<4x1xf32>, %row: tensor<1x8xf32>, %s: tensor<f32>, %h: tensor<4x8xf16>, %b1: tensor<2x1x8xbf16>, %b2: tensor<3x1xbf16>) -> (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf16>, tensor<2x3x8xbf16>) {
  %0 = llmc.add %x, %bias : tensor<2x4x8xf32>, tensor<8xf32>
  %1 = llmc.sub %col, %row : tensor<4x1xf32>, tensor<1x8xf32>
  %2 = llmc.mul %s, %x : tensor<f32>, tensor<2x4x8xf32>
  %3 = llmc.div %h, %h : tensor<4x8xf16>, tensor<4x8xf16>
  %4 = llmc.max %b1, %b2 : tensor<2x1x8xbf16>, tensor<3x1xbf16>
  return %0, %1, %2, %3, %4 : tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf16>, tensor<2x3x8xbf16>
}

// Tests the unary elementwise ops on f32, f16 and bf16.
func.func @unary(%x: tensor<4x8xf32>, %h: tensor<4x8xf16>, %b: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xbf16>) {
  %0 = llmc.neg %x : tensor<4x8xf32>
  %1 = llmc.exp %0 : tensor<4x8xf32>
  %2 = llmc.log %1 : tensor<4x8xf32>
  %3 = llmc.tanh %2 : tensor<4x8xf32>
  %4 = llmc.sqrt %h : tensor<4x8xf16>
  %5 = llmc.rsqrt %4 : tensor<4x8xf16>
  %6 = llmc.relu %b : tensor<4x8xbf16>
  %7 = llmc.silu %6 : tensor<4x8xbf16>
  return %3, %5, %7 : tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xbf16>
}

// Tests both GELU approximations, a cast chain f32 -> f16 -> bf16 and dropout.
func.func @gelu_cast_dropout(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>) {
  %0 = llmc.gelu %x approximate = tanh : tensor<4x8xf32>
  %1 = llmc.gelu %0 approximate = none : tensor<4x8xf32>
  %2 = llmc.cast %1 : tensor<4x8xf32> -> tensor<4x8xf16>
  %3 = llmc.cast %2 : tensor<4x8xf16> -> tensor<4x8xbf16>
  %4 = llmc.dropout %x {rate = 1.000000e-01 : f32, stream = 3 : i64} : tensor<4x8xf32>
  return %1, %3, %4 : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>
}

// Tests is_finite, the three comparisons (one broadcasting a scalar) and
// select with a scalar and with a full-shape condition.
func.func @predicates(%x: tensor<4x8xf16>, %n: tensor<f32>, %a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4x8xi1>, tensor<4x8xi1>, tensor<i1>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = llmc.is_finite %x : tensor<4x8xf16>
  %1 = llmc.is_finite %n : tensor<f32>
  %2 = llmc.compare lt, %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  %3 = llmc.compare le, %n, %a : tensor<f32>, tensor<4x8xf32>
  %4 = llmc.compare eq, %n, %n : tensor<f32>, tensor<f32>
  %5 = llmc.select %1, %a, %b : tensor<i1>, tensor<4x8xf32>
  %6 = llmc.select %2, %a, %b : tensor<4x8xi1>, tensor<4x8xf32>
  return %0, %3, %4, %5, %6 : tensor<4x8xi1>, tensor<4x8xi1>, tensor<i1>, tensor<4x8xf32>, tensor<4x8xf32>
}

// Tests layer_norm with and without bias (bf16 data, f32 statistics),
// rms_norm and softmax.
func.func @norms(%x: tensor<2x4x8xbf16>, %w: tensor<8xbf16>, %b: tensor<8xbf16>, %y: tensor<4x8xf32>, %w32: tensor<8xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>) {
  %0:3 = llmc.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32} : tensor<2x4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
  %1:3 = llmc.layer_norm %y, %w32 {epsilon = 1.0e-5 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %2:2 = llmc.rms_norm %y, %w32 {epsilon = 1.0e-6 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %3 = llmc.softmax %y : tensor<4x8xf32>
  return %0#0, %0#1, %0#2, %1#0, %1#1, %1#2, %2#0, %2#1, %3 : tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>
}

// Tests attention: causal with Tq = Tk, causal with Tq < Tk and a value head
// size other than the query's, non-causal with Tq > Tk, and f16 with one
// batch dimension. The lse is always f32 of shape [B..., Tq].
func.func @attention(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x6x8xf32>, %v: tensor<2x3x6x16xf32>, %qh: tensor<2x4x8xf16>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6xf32>, tensor<2x4x8xf16>, tensor<2x4xf32>) {
  %0:2 = llmc.attention %q, %q, %q {causal, scale = 0.125 : f32} : tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>
  %1:2 = llmc.attention %q, %k, %v {causal, scale = 0.5 : f32} : tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>
  %2:2 = llmc.attention %k, %q, %q {scale = 0.5 : f32} : tensor<2x3x6x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>
  %3:2 = llmc.attention %qh, %qh, %qh {scale = 1.0 : f32} : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  return %0#0, %0#1, %1#0, %1#1, %2#0, %2#1, %3#0, %3#1 : tensor<2x3x4x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6xf32>, tensor<2x4x8xf16>, tensor<2x4xf32>
}

// Tests rotary and its inverse.
func.func @rotary(%q: tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> {
  %0 = llmc.rotary %q {theta = 1.0e4 : f32} : tensor<2x4x16x8xf32>
  %1 = llmc.rotary %0 {inverse, theta = 1.0e4 : f32} : tensor<2x4x16x8xf32>
  return %1 : tensor<2x4x16x8xf32>
}

// Tests cross_entropy: a scalar f32 loss and an f32 lse per position.
func.func @cross_entropy(%logits: tensor<2x8x50xf32>, %targets: tensor<2x8xi64>) -> (tensor<f32>, tensor<2x8xf32>) {
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x8x50xf32>, tensor<2x8xi64>
  return %loss, %lse : tensor<f32>, tensor<2x8xf32>
}

// Tests reshape, transpose, slice, a three-input concat and broadcast.
func.func @shapes(%x: tensor<2x4x24xf32>, %a: tensor<4x2xf16>, %b: tensor<4x3xf16>, %c: tensor<4x5xf16>, %bias: tensor<8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4x8xf32>, tensor<2x4x8xf32>, tensor<4x10xf16>, tensor<2x4x8xf32>) {
  %0 = llmc.reshape %x : tensor<2x4x24xf32> -> tensor<2x4x3x8xf32>
  %1 = llmc.transpose %0, [0, 2, 1, 3] : tensor<2x4x3x8xf32>
  %2 = llmc.slice %x offsets [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xf32>
  %3 = llmc.concat %a, %b, %c dim 1 : tensor<4x2xf16>, tensor<4x3xf16>, tensor<4x5xf16>
  %4 = llmc.broadcast %bias : tensor<8xf32> -> tensor<2x4x8xf32>
  return %0, %1, %2, %3, %4 : tensor<2x4x3x8xf32>, tensor<2x3x4x8xf32>, tensor<2x4x8xf32>, tensor<4x10xf16>, tensor<2x4x8xf32>
}

// Tests the reductions with and without keep_dims, over one and two dims.
func.func @reductions(%x: tensor<2x4x8xf32>, %h: tensor<2x4x8xf16>) -> (tensor<2x4xf32>, tensor<2x1x1xf32>, tensor<4xf16>, tensor<1x4x1xf16>, tensor<2x8xf32>, tensor<2x4x1xf32>) {
  %0 = llmc.reduce_sum %x dims [2] : tensor<2x4x8xf32>
  %1 = llmc.reduce_sum %x dims [1, 2] keep_dims : tensor<2x4x8xf32>
  %2 = llmc.reduce_mean %h dims [0, 2] : tensor<2x4x8xf16>
  %3 = llmc.reduce_mean %h dims [0, 2] keep_dims : tensor<2x4x8xf16>
  %4 = llmc.reduce_max %x dims [1] : tensor<2x4x8xf32>
  %5 = llmc.reduce_max %x dims [2] keep_dims : tensor<2x4x8xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<2x4xf32>, tensor<2x1x1xf32>, tensor<4xf16>, tensor<1x4x1xf16>, tensor<2x8xf32>, tensor<2x4x1xf32>
}

// Tests the elementwise gradient ops.
func.func @activation_grads(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %dh: tensor<4x8xbf16>, %h: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = llmc.relu_grad %dy, %x : tensor<4x8xf32>
  %1 = llmc.silu_grad %dh, %h : tensor<4x8xbf16>
  %2 = llmc.gelu_grad %dy, %x approximate = tanh : tensor<4x8xf32>
  %3 = llmc.gelu_grad %dy, %x approximate = none : tensor<4x8xf32>
  %4 = llmc.softmax_grad %dy, %x : tensor<4x8xf32>
  return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// Tests the norm gradients: input-typed dx, weight-typed dw (and db).
func.func @norm_grads(%dy: tensor<2x4x8xf16>, %x: tensor<2x4x8xf16>, %w: tensor<8xf16>, %mean: tensor<2x4xf32>, %rstd: tensor<2x4xf32>) -> (tensor<2x4x8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<2x4x8xf16>, tensor<8xf16>) {
  %0:3 = llmc.layer_norm_grad %dy, %x, %w, %mean, %rstd : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<8xf16>, tensor<2x4xf32>, tensor<2x4xf32>
  %1:2 = llmc.rms_norm_grad %dy, %x, %w, %rstd : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<8xf16>, tensor<2x4xf32>
  return %0#0, %0#1, %0#2, %1#0, %1#1 : tensor<2x4x8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<2x4x8xf16>, tensor<8xf16>
}

// Tests attention_grad of a causal Tq < Tk attention: dq, dk, dv have the
// types of q, k, v.
func.func @attention_grad(%do: tensor<2x3x4x16xf32>, %q: tensor<2x3x4x8xf32>, %k: tensor<2x3x6x8xf32>, %v: tensor<2x3x6x16xf32>, %o: tensor<2x3x4x16xf32>, %lse: tensor<2x3x4xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>) {
  %0:3 = llmc.attention_grad %do, %q, %k, %v, %o, %lse {causal, scale = 0.5 : f32} : tensor<2x3x4x16xf32>, tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>
  return %0#0, %0#1, %0#2 : tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>
}

// Tests cross_entropy_grad: the result has the logits' type.
func.func @cross_entropy_grad(%dloss: tensor<f32>, %logits: tensor<2x8x50xbf16>, %targets: tensor<2x8xi32>, %lse: tensor<2x8xf32>) -> tensor<2x8x50xbf16> {
  %0 = llmc.cross_entropy_grad %dloss, %logits, %targets, %lse : tensor<f32>, tensor<2x8x50xbf16>, tensor<2x8xi32>, tensor<2x8xf32>
  return %0 : tensor<2x8x50xbf16>
}

// Tests the collectives: all_reduce keeps the type, reduce_scatter divides
// and all_gather multiplies dimension `dim` by the axis size.
func.func @collectives(%g: tensor<8x6xf32>, %s: tensor<2x6xbf16>, %ids: tensor<3xi32>) -> (tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<2x6xf32>, tensor<8x2xf32>, tensor<8x6xbf16>, tensor<3xi32>) {
  %sum = llmc.all_reduce %g sum on "dp" size 4 : tensor<8x6xf32>
  %avg = llmc.all_reduce %g avg on "tp" size 2 : tensor<8x6xf32>
  %max = llmc.all_reduce %g max on "pp" size 1 : tensor<8x6xf32>
  %rs = llmc.reduce_scatter %g avg dim 0 on "dp" size 4 : tensor<8x6xf32>
  %rs1 = llmc.reduce_scatter %g sum dim 1 on "dp" size 3 : tensor<8x6xf32>
  %ag = llmc.all_gather %s dim 0 on "dp" size 4 : tensor<2x6xbf16>
  %bc = llmc.broadcast_from %ids root 1 on "dp" size 2 : tensor<3xi32>
  return %sum, %avg, %max, %rs, %rs1, %ag, %bc : tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<2x6xf32>, tensor<8x2xf32>, tensor<8x6xbf16>, tensor<3xi32>
}

// Tests that identical collectives are not merged (they are not Pure: every
// rank must issue each one).
func.func @collectives_not_merged(%s: tensor<2xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = llmc.all_gather %s dim 0 on "dp" size 2 : tensor<2xf32>
  %b = llmc.all_gather %s dim 0 on "dp" size 2 : tensor<2xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
