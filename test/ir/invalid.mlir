// RUN: llmc-opt %s --split-input-file --verify-diagnostics

// One case per diagnostic of ir/LlmcOps.cpp, then a few of the ODS
// constraints. Ops with inferred result types check their operands while
// parsing the custom form; what the custom form cannot express (a declared
// result type, a missing operand) is written in the generic form, where the
// InferTypeOpInterface verifier adds "failed to infer returned types".

//===----------------------------------------------------------------------===//
// Operand checks shared by all inferred ops
//===----------------------------------------------------------------------===//

// Tests that a dynamically shaped operand is rejected while inferring.
func.func @dynamic_operand(%x: tensor<?x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op lhs must be a statically shaped tensor, got 'tensor<?x8xf32>'}}
  %0 = llmc.matmul %x, %w : tensor<?x8xf32>, tensor<8x16xf32>
  return
}

// -----

// Tests that a data operand must be floating point.
func.func @integer_table(%wte: tensor<50x16xi32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding' op table must have element type f32, f16 or bf16, got 'i32'}}
  %0 = llmc.embedding %wte, %tokens : tensor<50x16xi32>, tensor<2x8xi32>
  return
}

// -----

// Tests that ids must be i32 or i64.
func.func @float_ids(%wte: tensor<50x16xf32>, %tokens: tensor<2x8xf32>) {
  // expected-error @+1 {{'llmc.embedding' op indices must have element type i32 or i64, got 'f32'}}
  %0 = llmc.embedding %wte, %tokens : tensor<50x16xf32>, tensor<2x8xf32>
  return
}

// -----

// Tests that ids of another integer width are rejected.
func.func @i16_ids(%logits: tensor<2x8x50xf32>, %targets: tensor<2x8xi16>) {
  // expected-error @+1 {{'llmc.cross_entropy' op targets must have element type i32 or i64, got 'i16'}}
  %0:2 = llmc.cross_entropy %logits, %targets : tensor<2x8x50xf32>, tensor<2x8xi16>
  return
}

// -----

// Tests that binary operands must share their element type (no implicit cast).
func.func @mixed_element_types(%a: tensor<4x8xf32>, %b: tensor<4x8xf16>) {
  // expected-error @+1 {{'llmc.add' op lhs and rhs must have one element type, got 'f32' and 'f16'}}
  %0 = llmc.add %a, %b : tensor<4x8xf32>, tensor<4x8xf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

// Tests the constant verifier: i8 data is rejected (the generic form declares
// an allowed result type so that the ODS result constraint passes).
func.func @constant_i8() {
  // expected-error @+1 {{'llmc.constant' op value must have element type f32, f16, bf16, i32 or i64, got 'i8'}}
  %0 = "llmc.constant"() {value = dense<1> : tensor<2xi8>} : () -> tensor<2xi32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

// Tests that the table must be [V, C].
func.func @embedding_table_rank(%wte: tensor<2x50x16xf32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding' op table must have rank 2 [V, C], got [2, 50, 16]}}
  %0 = llmc.embedding %wte, %tokens : tensor<2x50x16xf32>, tensor<2x8xi32>
  return
}

// -----

// Tests that the embedding gradient must be [V, C].
func.func @embedding_grad_result_rank(%dx: tensor<2x8x16xf32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding_grad' op result must have rank 2 [V, C], got [50]}}
  %0 = llmc.embedding_grad %dx, %tokens : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<50xf32>
  return
}

// -----

// Tests that grad must be [indices..., C].
func.func @embedding_grad_shape(%dx: tensor<2x8x12xf32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding_grad' op grad must have shape [2, 8, 16] (indices shape, then C), got [2, 8, 12]}}
  %0 = llmc.embedding_grad %dx, %tokens : tensor<2x8x12xf32>, tensor<2x8xi32> -> tensor<50x16xf32>
  return
}

// -----

// Tests that the embedding gradient keeps grad's element type.
func.func @embedding_grad_element_type(%dx: tensor<2x8x16xf16>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding_grad' op grad and result must have one element type, got 'f16' and 'f32'}}
  %0 = llmc.embedding_grad %dx, %tokens : tensor<2x8x16xf16>, tensor<2x8xi32> -> tensor<50x16xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

// Tests that matmul needs a matrix (or a batch of them) on the left.
func.func @matmul_lhs_rank(%x: tensor<8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op lhs must have rank >= 2, got 1}}
  %0 = llmc.matmul %x, %w : tensor<8xf32>, tensor<8x16xf32>
  return
}

// -----

// Tests that matmul's weight is a matrix.
func.func @matmul_rhs_rank(%x: tensor<2x4x8xf32>, %w: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op rhs must have rank 2 (use llmc.batch_matmul for batched operands), got 3}}
  %0 = llmc.matmul %x, %w : tensor<2x4x8xf32>, tensor<2x8x16xf32>
  return
}

// -----

// Tests that matmul operands share their element type.
func.func @matmul_element_types(%x: tensor<4x8xbf16>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op lhs and rhs must have one element type, got 'bf16' and 'f32'}}
  %0 = llmc.matmul %x, %w : tensor<4x8xbf16>, tensor<8x16xf32>
  return
}

// -----

// Tests that transpose_b makes K the weight's last dimension.
func.func @matmul_contraction(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op contraction dimensions differ: lhs [4, 8] has K = 8, rhs [8, 16] (transposed) has K = 16}}
  %0 = llmc.matmul %x, %w {transpose_b} : tensor<4x8xf32>, tensor<8x16xf32>
  return
}

// -----

// Tests that batch_matmul needs batched operands of one rank.
func.func @batch_matmul_rank(%a: tensor<2x4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.batch_matmul' op operands must have one rank >= 3, got 3 and 2}}
  %0 = llmc.batch_matmul %a, %b : tensor<2x4x8xf32>, tensor<8x16xf32>
  return
}

// -----

// Tests that batch_matmul does not broadcast batch dimensions.
func.func @batch_matmul_batch(%a: tensor<2x4x8xf32>, %b: tensor<3x8x16xf32>) {
  // expected-error @+1 {{'llmc.batch_matmul' op batch dimensions differ: [2] vs [3]}}
  %0 = llmc.batch_matmul %a, %b : tensor<2x4x8xf32>, tensor<3x8x16xf32>
  return
}

// -----

// Tests the contraction check of batch_matmul under transpose_a.
func.func @batch_matmul_contraction(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'llmc.batch_matmul' op contraction dimensions differ: 4 vs 8}}
  %0 = llmc.batch_matmul %a, %b {transpose_a} : tensor<2x4x8xf32>, tensor<2x8x16xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// Tests that binary operands must broadcast.
func.func @binary_broadcast(%a: tensor<4x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.mul' op shapes [4, 8] and [4] do not broadcast}}
  %0 = llmc.mul %a, %b : tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

// Tests that cast keeps the shape.
func.func @cast_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.cast' op changes the shape from [4, 8] to [8, 4]}}
  %0 = llmc.cast %x : tensor<4x8xf32> -> tensor<8x4xbf16>
  return
}

// -----

// Tests that a dropout rate of 1 (drop everything) is rejected.
func.func @dropout_rate(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op rate must be in [0, 1), got 1.000000e+00}}
  %0 = llmc.dropout %x {rate = 1.0 : f32, stream = 0 : i64} : tensor<4x8xf32>
  return
}

// -----

// Tests that a block of a whole tensor needs both its whole shape and its
// offsets.
func.func @dropout_half_block(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op needs both whole_shape and offsets, or neither}}
  %0 = llmc.dropout %x {rate = 0.1 : f32, stream = 0 : i64, whole_shape = array<i64: 4, 16>} : tensor<4x8xf32>
  return
}

// -----

// Tests that the whole shape has the result's rank.
func.func @dropout_block_rank(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op whole_shape and offsets must have one entry per dimension of the result (2)}}
  %0 = llmc.dropout %x {rate = 0.1 : f32, stream = 0 : i64, whole_shape = array<i64: 4, 16, 1>, offsets = array<i64: 0, 8, 0>} : tensor<4x8xf32>
  return
}

// -----

// Tests that the block lies inside the whole tensor.
func.func @dropout_block_outside(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op block of dimension 1 at offset 12 of size 8 lies outside the whole tensor's 16}}
  %0 = llmc.dropout %x {rate = 0.1 : f32, stream = 0 : i64, whole_shape = array<i64: 4, 16>, offsets = array<i64: 0, 12>} : tensor<4x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Predicates and selection
//===----------------------------------------------------------------------===//

// Tests that is_finite tests float tensors only.
func.func @is_finite_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{'llmc.is_finite' op input must have element type f32, f16 or bf16, got 'i32'}}
  %0 = llmc.is_finite %x : tensor<4xi32>
  return
}

// -----

// Tests that compared operands have one element type.
func.func @compare_mixed(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{'llmc.compare' op lhs and rhs must have one element type, got 'f32' and 'f16'}}
  %0 = llmc.compare lt, %a, %b : tensor<4xf32>, tensor<4xf16>
  return
}

// -----

// Tests that compared shapes must broadcast.
func.func @compare_shapes(%a: tensor<4xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'llmc.compare' op shapes [4] and [3] do not broadcast}}
  %0 = llmc.compare le, %a, %b : tensor<4xf32>, tensor<3xf32>
  return
}

// -----

// Tests that the predicate is required (generic form).
func.func @compare_no_predicate(%a: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.compare' op requires attribute 'predicate'}}
  %0 = "llmc.compare"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return
}

// -----

// Tests that the predicate is one of lt, le and eq (the ODS constraint).
func.func @compare_predicate(%a: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.compare' op attribute 'predicate' failed to satisfy constraint: an ordered comparison (false when either side is NaN)}}
  %0 = "llmc.compare"(%a, %a) {predicate = "gt"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return
}

// -----

// Tests that the condition broadcasts to the result without growing it.
func.func @select_condition_shape(%c: tensor<2x4xi1>, %a: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.select' op condition of shape [2, 4] does not broadcast to the result shape [4]}}
  %0 = llmc.select %c, %a, %a : tensor<2x4xi1>, tensor<4xf32>
  return
}

// -----

// Tests that both values have the result's type (generic form).
func.func @select_types(%c: tensor<i1>, %a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{'llmc.select' op failed to verify that all of {true_value, false_value, result} have same type}}
  %0 = "llmc.select"(%c, %a, %b) : (tensor<i1>, tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

// Tests that the condition is an i1 tensor.
func.func @select_float_condition(%c: tensor<f32>, %a: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.select' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<f32>'}}
  %0 = llmc.select %c, %a, %a : tensor<f32>, tensor<4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

// Tests that layer_norm needs a dimension to normalize over.
func.func @layer_norm_rank(%x: tensor<f32>, %w: tensor<1xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op input must have rank >= 1}}
  %0:3 = llmc.layer_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<f32>, tensor<1xf32>
  return
}

// -----

// Tests that the weight matches the input's last dimension.
func.func @layer_norm_weight(%x: tensor<4x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op weight must have shape [8] to match the input's last dimension, got [4]}}
  %0:3 = llmc.layer_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

// Tests that the bias is checked like the weight.
func.func @layer_norm_bias(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<1x8xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op bias must have shape [8] to match the input's last dimension, got [1, 8]}}
  %0:3 = llmc.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32} : tensor<4x8xf32>, tensor<8xf32>, tensor<1x8xf32>
  return
}

// -----

// Tests that the weight has the input's element type.
func.func @layer_norm_weight_type(%x: tensor<4x8xf32>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{'llmc.layer_norm' op input and weight must have one element type, got 'f32' and 'bf16'}}
  %0:3 = llmc.layer_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<4x8xf32>, tensor<8xbf16>
  return
}

// -----

// Tests that the bias has the input's element type.
func.func @layer_norm_bias_type(%x: tensor<4x8xf16>, %w: tensor<8xf16>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op input and bias must have one element type, got 'f16' and 'f32'}}
  %0:3 = llmc.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32} : tensor<4x8xf16>, tensor<8xf16>, tensor<8xf32>
  return
}

// -----

// Tests that a zero epsilon is rejected.
func.func @layer_norm_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op epsilon must be positive and finite, got 0.000000e+00}}
  %0:3 = llmc.layer_norm %x, %w {epsilon = 0.0 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests that an infinite epsilon is rejected.
func.func @rms_norm_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.rms_norm' op epsilon must be positive and finite, got INF}}
  %0:2 = llmc.rms_norm %x, %w {epsilon = 0x7F800000 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests that rms_norm checks its weight.
func.func @rms_norm_weight(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) {
  // expected-error @+1 {{'llmc.rms_norm' op weight must have shape [8] to match the input's last dimension, got [8, 8]}}
  %0:2 = llmc.rms_norm %x, %w {epsilon = 1.0e-6 : f32} : tensor<4x8xf32>, tensor<8x8xf32>
  return
}

// -----

// Tests that softmax needs a last dimension.
func.func @softmax_rank(%x: tensor<f32>) {
  // expected-error @+1 {{'llmc.softmax' op input must have rank >= 1}}
  %0 = llmc.softmax %x : tensor<f32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Attention and positions
//===----------------------------------------------------------------------===//

// Tests that query, key and value have one rank.
func.func @attention_rank(%q: tensor<4x8xf32>, %v: tensor<1x4x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op query, key and value must have one rank >= 2, got 2, 2 and 3}}
  %0:2 = llmc.attention %q, %q, %v {scale = 0.125 : f32} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<1x4x8xf32>
  return
}

// -----

// Tests that query and key share their element type.
func.func @attention_key_type(%q: tensor<4x8xf32>, %k: tensor<4x8xf16>) {
  // expected-error @+1 {{'llmc.attention' op query and key must have one element type, got 'f32' and 'f16'}}
  %0:2 = llmc.attention %q, %k, %q {scale = 0.125 : f32} : tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xf32>
  return
}

// -----

// Tests that query and value share their element type.
func.func @attention_value_type(%q: tensor<4x8xf32>, %v: tensor<4x8xbf16>) {
  // expected-error @+1 {{'llmc.attention' op query and value must have one element type, got 'f32' and 'bf16'}}
  %0:2 = llmc.attention %q, %q, %v {scale = 0.125 : f32} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xbf16>
  return
}

// -----

// Tests that attention does not broadcast batch or head dimensions.
func.func @attention_batch(%q: tensor<2x3x4x8xf32>, %k: tensor<2x1x4x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op query, key and value must have the same batch dimensions, got [2, 3, 4, 8], [2, 1, 4, 8] and [2, 1, 4, 8]}}
  %0:2 = llmc.attention %q, %k, %k {scale = 0.125 : f32} : tensor<2x3x4x8xf32>, tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>
  return
}

// -----

// Tests that query and key have one head size.
func.func @attention_head_size(%q: tensor<4x8xf32>, %k: tensor<4x16xf32>) {
  // expected-error @+1 {{'llmc.attention' op query and key head sizes differ: 8 vs 16}}
  %0:2 = llmc.attention %q, %k, %k {scale = 0.125 : f32} : tensor<4x8xf32>, tensor<4x16xf32>, tensor<4x16xf32>
  return
}

// -----

// Tests that every key has a value.
func.func @attention_lengths(%q: tensor<4x8xf32>, %k: tensor<6x8xf32>, %v: tensor<5x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op key and value lengths differ: 6 vs 5}}
  %0:2 = llmc.attention %q, %k, %v {scale = 0.125 : f32} : tensor<4x8xf32>, tensor<6x8xf32>, tensor<5x8xf32>
  return
}

// -----

// Tests that causal attention rejects Tq > Tk (the first query would see no key).
func.func @attention_causal(%q: tensor<6x8xf32>, %k: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op causal attention needs no more queries than keys, got 6 queries and 4 keys}}
  %0:2 = llmc.attention %q, %k, %k {causal, scale = 0.125 : f32} : tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  return
}

// -----

// Tests that the scale is positive.
func.func @attention_scale(%q: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op scale must be positive and finite, got -1.000000e+00}}
  %0:2 = llmc.attention %q, %q, %q {scale = -1.0 : f32} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  return
}

// -----

// Tests that rotary needs positions and a head dimension.
func.func @rotary_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.rotary' op input must have rank >= 2 [..., T, D], got 1}}
  %0 = llmc.rotary %x {theta = 1.0e4 : f32} : tensor<8xf32>
  return
}

// -----

// Tests that rotary pairs need an even head size.
func.func @rotary_odd(%x: tensor<4x7xf32>) {
  // expected-error @+1 {{'llmc.rotary' op head size must be even, got 7}}
  %0 = llmc.rotary %x {theta = 1.0e4 : f32} : tensor<4x7xf32>
  return
}

// -----

// Tests that theta = 1 (no rotation frequency spread) is rejected.
func.func @rotary_theta(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.rotary' op theta must be finite and greater than 1, got 1.000000e+00}}
  %0 = llmc.rotary %x {theta = 1.0 : f32} : tensor<4x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

// Tests that logits need a vocabulary dimension.
func.func @cross_entropy_rank(%logits: tensor<f32>, %targets: tensor<i32>) {
  // expected-error @+1 {{'llmc.cross_entropy' op logits must have rank >= 1}}
  %0:2 = llmc.cross_entropy %logits, %targets : tensor<f32>, tensor<i32>
  return
}

// -----

// Tests that targets have one id per logits row.
func.func @cross_entropy_targets(%logits: tensor<2x8x50xf32>, %targets: tensor<2x9xi32>) {
  // expected-error @+1 {{'llmc.cross_entropy' op targets must have the logits' shape without the vocab dimension, [2, 8], got [2, 9]}}
  %0:2 = llmc.cross_entropy %logits, %targets : tensor<2x8x50xf32>, tensor<2x9xi32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

// Tests that reshape keeps the element count.
func.func @reshape_count(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.reshape' op changes the element count from 32 [4, 8] to 30 [5, 6]}}
  %0 = llmc.reshape %x : tensor<4x8xf32> -> tensor<5x6xf32>
  return
}

// -----

// Tests that reshape keeps the element type.
func.func @reshape_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.reshape' op changes the element type from 'f32' to 'f16'}}
  %0 = llmc.reshape %x : tensor<4x8xf32> -> tensor<32xf16>
  return
}

// -----

// Tests that a repeated dimension is not a permutation.
func.func @transpose_permutation(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.transpose' op permutation [0, 0] is not a permutation of the 2 dimensions}}
  %0 = llmc.transpose %x, [0, 0] : tensor<4x8xf32>
  return
}

// -----

// Tests that slice needs an offset and a size per dimension.
func.func @slice_arity(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.slice' op needs one offset and one size per dimension (2), got 1 offsets and 2 sizes}}
  %0 = llmc.slice %x offsets [0] sizes [4, 8] : tensor<4x8xf32>
  return
}

// -----

// Tests that the block lies inside the input.
func.func @slice_bounds(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.slice' op block at offset 4 of size 8 does not fit in dimension 1 of size 8}}
  %0 = llmc.slice %x offsets [0, 4] sizes [4, 8] : tensor<4x8xf32>
  return
}

// -----

// Tests that concat needs an input (only the generic form can omit them).
func.func @concat_empty() {
  // expected-error @+2 {{'llmc.concat' op needs at least one input}}
  // expected-error @+1 {{'llmc.concat' op failed to infer returned types}}
  %0 = "llmc.concat"() {dim = 0 : i64} : () -> tensor<4xf32>
  return
}

// -----

// Tests that the concatenated dimension exists.
func.func @concat_dim(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.concat' op dim 2 is out of range for rank 2}}
  %0 = llmc.concat %a, %a dim 2 : tensor<4x8xf32>, tensor<4x8xf32>
  return
}

// -----

// Tests that concat inputs share their element type.
func.func @concat_type(%a: tensor<4x8xf32>, %b: tensor<4x8xf16>) {
  // expected-error @+1 {{'llmc.concat' op input #0 and input #1 must have one element type, got 'f32' and 'f16'}}
  %0 = llmc.concat %a, %b dim 1 : tensor<4x8xf32>, tensor<4x8xf16>
  return
}

// -----

// Tests that concat inputs share their rank.
func.func @concat_rank(%a: tensor<4x8xf32>, %b: tensor<1x4x8xf32>) {
  // expected-error @+1 {{'llmc.concat' op inputs must have one rank, got 2 and 3}}
  %0 = llmc.concat %a, %b dim 1 : tensor<4x8xf32>, tensor<1x4x8xf32>
  return
}

// -----

// Tests that concat inputs agree outside the concatenated dimension.
func.func @concat_shape(%a: tensor<4x8xf32>, %b: tensor<4x2xf32>, %c: tensor<5x8xf32>) {
  // expected-error @+1 {{'llmc.concat' op inputs differ in dimension 0 (4 vs 5), which is not the concatenated one}}
  %0 = llmc.concat %a, %b, %c dim 1 : tensor<4x8xf32>, tensor<4x2xf32>, tensor<5x8xf32>
  return
}

// -----

// Tests that broadcast keeps the element type.
func.func @broadcast_type(%b: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.broadcast' op changes the element type from 'f32' to 'bf16'}}
  %0 = llmc.broadcast %b : tensor<8xf32> -> tensor<4x8xbf16>
  return
}

// -----

// Tests that broadcast only stretches size-1 or missing dimensions.
func.func @broadcast_shape(%b: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.broadcast' op cannot broadcast [4, 8] to [2, 8, 8]}}
  %0 = llmc.broadcast %b : tensor<4x8xf32> -> tensor<2x8x8xf32>
  return
}

// -----

// Tests that broadcast cannot shrink.
func.func @broadcast_shrink(%b: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.broadcast' op cannot broadcast [4, 8] to [8]}}
  %0 = llmc.broadcast %b : tensor<4x8xf32> -> tensor<8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// Tests that a reduction needs a dimension.
func.func @reduce_no_dims(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.reduce_sum' op needs at least one dimension to reduce}}
  %0 = llmc.reduce_sum %x dims [] : tensor<4x8xf32>
  return
}

// -----

// Tests that dims must be strictly increasing.
func.func @reduce_unsorted(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.reduce_mean' op dims [1, 0] must be strictly increasing and in [0, 2)}}
  %0 = llmc.reduce_mean %x dims [1, 0] keep_dims : tensor<4x8xf32>
  return
}

// -----

// Tests that dims must exist.
func.func @reduce_out_of_range(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.reduce_max' op dims [2] must be strictly increasing and in [0, 2)}}
  %0 = llmc.reduce_max %x dims [2] : tensor<4x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

// Tests that the layer_norm gradient has the input's type.
func.func @layer_norm_grad_grad(%dy: tensor<4x8xf16>, %x: tensor<4x8xf32>, %w: tensor<8xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.layer_norm_grad' op grad must have the input's type 'tensor<4x8xf32>', got 'tensor<4x8xf16>'}}
  %0:3 = llmc.layer_norm_grad %dy, %x, %w, %s, %s : tensor<4x8xf16>, tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// Tests that mean and rstd are the forward op's per-row statistics.
func.func @layer_norm_grad_stats(%dy: tensor<4x8xf32>, %w: tensor<8xf32>, %mean: tensor<4xf32>, %rstd: tensor<4x1xf32>) {
  // expected-error @+1 {{'llmc.layer_norm_grad' op mean and rstd must have type 'tensor<4xf32>', got 'tensor<4xf32>' and 'tensor<4x1xf32>'}}
  %0:3 = llmc.layer_norm_grad %dy, %dy, %w, %mean, %rstd : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4x1xf32>
  return
}

// -----

// Tests that the rms_norm gradient has the input's type.
func.func @rms_norm_grad_grad(%dy: tensor<4x4xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>, %rstd: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.rms_norm_grad' op grad must have the input's type 'tensor<4x8xf32>', got 'tensor<4x4xf32>'}}
  %0:2 = llmc.rms_norm_grad %dy, %x, %w, %rstd : tensor<4x4xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

// Tests that rstd is the forward op's per-row statistic.
func.func @rms_norm_grad_rstd(%dy: tensor<4x8xbf16>, %w: tensor<8xbf16>, %rstd: tensor<4xbf16>) {
  // expected-error @+1 {{'llmc.rms_norm_grad' op rstd must have type 'tensor<4xf32>', got 'tensor<4xbf16>'}}
  %0:2 = llmc.rms_norm_grad %dy, %dy, %w, %rstd : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<8xbf16>, tensor<4xbf16>
  return
}

// -----

// Tests that grad and output have the forward output's type ([Tq, Dv]).
func.func @attention_grad_output(%q: tensor<4x8xf32>, %k: tensor<6x8xf32>, %v: tensor<6x16xf32>, %o: tensor<4x8xf32>, %lse: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.attention_grad' op grad and output must have the forward output's type 'tensor<4x16xf32>', got 'tensor<4x8xf32>' and 'tensor<4x8xf32>'}}
  %0:3 = llmc.attention_grad %o, %q, %k, %v, %o, %lse {scale = 0.125 : f32} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<6x8xf32>, tensor<6x16xf32>, tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

// Tests that the attention lse is per query.
func.func @attention_grad_lse(%q: tensor<4x8xf32>, %k: tensor<6x8xf32>, %lse: tensor<6xf32>) {
  // expected-error @+1 {{'llmc.attention_grad' op lse must have type 'tensor<4xf32>', got 'tensor<6xf32>'}}
  %0:3 = llmc.attention_grad %q, %q, %k, %k, %q, %lse {causal, scale = 0.125 : f32} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<4x8xf32>, tensor<6xf32>
  return
}

// -----

// Tests that the attention gradient rechecks the forward shapes.
func.func @attention_grad_causal(%q: tensor<6x8xf32>, %k: tensor<4x8xf32>, %lse: tensor<6xf32>) {
  // expected-error @+1 {{'llmc.attention_grad' op causal attention needs no more queries than keys, got 6 queries and 4 keys}}
  %0:3 = llmc.attention_grad %q, %q, %k, %k, %q, %lse {causal, scale = 0.125 : f32} : tensor<6x8xf32>, tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<6x8xf32>, tensor<6xf32>
  return
}

// -----

// Tests that the cross-entropy lse is f32 per position.
func.func @cross_entropy_grad_lse(%dloss: tensor<f32>, %logits: tensor<2x8x50xf32>, %targets: tensor<2x8xi32>, %lse: tensor<2x8xf16>) {
  // expected-error @+1 {{'llmc.cross_entropy_grad' op lse must have type 'tensor<2x8xf32>', got 'tensor<2x8xf16>'}}
  %0 = llmc.cross_entropy_grad %dloss, %logits, %targets, %lse : tensor<f32>, tensor<2x8x50xf32>, tensor<2x8xi32>, tensor<2x8xf16>
  return
}

// -----

// Tests that the cross-entropy gradient checks targets against logits.
func.func @cross_entropy_grad_targets(%dloss: tensor<f32>, %logits: tensor<2x8x50xf32>, %targets: tensor<8xi32>, %lse: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.cross_entropy_grad' op targets must have the logits' shape without the vocab dimension, [2, 8], got [8]}}
  %0 = llmc.cross_entropy_grad %dloss, %logits, %targets, %lse : tensor<f32>, tensor<2x8x50xf32>, tensor<8xi32>, tensor<8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Generic form and ODS constraints
//===----------------------------------------------------------------------===//

// Tests that a declared result type must equal the inferred one.
func.func @matmul_wrong_result(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+2 {{'llmc.matmul' op inferred type(s) 'tensor<4x16xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>'}}
  // expected-error @+1 {{'llmc.matmul' op failed to infer returned types}}
  %0 = "llmc.matmul"(%x, %w) {transpose_b} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that a wrong statistics type of layer_norm is caught in generic form.
func.func @layer_norm_wrong_stats(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+2 {{'llmc.layer_norm' op inferred type(s) 'tensor<4x8xf32>', 'tensor<4xf32>', 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>', 'tensor<4x1xf32>', 'tensor<4x1xf32>'}}
  // expected-error @+1 {{'llmc.layer_norm' op failed to infer returned types}}
  %0:3 = "llmc.layer_norm"(%x, %w) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return
}

// -----

// Tests the ODS static-shape constraint on a generic-form operand.
func.func @generic_dynamic(%x: tensor<?x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op operand #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<?x8xf32>'}}
  %0 = "llmc.matmul"(%x, %w) : (tensor<?x8xf32>, tensor<8x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

// Tests the ODS element-type constraint on an op without inference.
func.func @relu_integer(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{'llmc.relu' op operand #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4x8xi32>'}}
  %0 = llmc.relu %x : tensor<4x8xi32>
  return
}

// -----

// Tests that unary ops keep their operand's type.
func.func @relu_result_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.relu' op requires the same type for all operands and results}}
  %0 = "llmc.relu"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf16>
  return
}

// -----

// Tests that a required attribute is missing (generic form).
func.func @layer_norm_no_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op requires attribute 'epsilon'}}
  %0:3 = "llmc.layer_norm"(%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Tests that a required attribute of an op without inference is missing.
func.func @dropout_no_stream(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op requires attribute 'stream'}}
  %0 = llmc.dropout %x {rate = 0.1 : f32} : tensor<4x8xf32>
  return
}

// -----

// Tests that epsilon must be an f32 attribute (checked while inferring the
// result types, before the ODS constraint).
func.func @layer_norm_f64_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op attribute 'epsilon' must be an f32 attribute, got 1.000000e-05 : f64}}
  %0:3 = llmc.layer_norm %x, %w {epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests that the incoming loss gradient is a scalar.
func.func @cross_entropy_grad_scalar(%dloss: tensor<1xf32>, %logits: tensor<2x8x50xf32>, %targets: tensor<2x8xi32>, %lse: tensor<2x8xf32>) {
  // expected-error @+1 {{'llmc.cross_entropy_grad' op operand #0 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %0 = llmc.cross_entropy_grad %dloss, %logits, %targets, %lse : tensor<1xf32>, tensor<2x8x50xf32>, tensor<2x8xi32>, tensor<2x8xf32>
  return
}

// -----

// Tests that the fill result is a float tensor.
func.func @fill_integer() {
  // expected-error @+1 {{'llmc.fill' op result #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi32>'}}
  %0 = llmc.fill 0.0 : tensor<4xi32>
  return
}

// -----

// Tests the constant's ODS result constraint in the custom form.
func.func @constant_f64() {
  // expected-error @+1 {{'llmc.constant' op result #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type or 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2xf64>'}}
  %0 = llmc.constant dense<1.0> : tensor<2xf64>
  return
}

// -----

// Tests that a missing required attribute in the custom form is a
// diagnostic (the parser infers result types before ODS checks attributes).
func.func @layer_norm_custom_no_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.layer_norm' op requires attribute 'epsilon'}}
  %0:3 = llmc.layer_norm %x, %w : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests a missing epsilon on rms_norm in the custom form.
func.func @rms_norm_custom_no_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.rms_norm' op requires attribute 'epsilon'}}
  %0:2 = llmc.rms_norm %x, %w : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests a missing scale on attention in the custom form.
func.func @attention_custom_no_scale(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op requires attribute 'scale'}}
  %0:2 = llmc.attention %q, %q, %q {causal} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Tests a missing scale on attention_grad in the custom form.
func.func @attention_grad_custom_no_scale(%q: tensor<2x4x8xf32>, %lse: tensor<2x4xf32>) {
  // expected-error @+1 {{'llmc.attention_grad' op requires attribute 'scale'}}
  %0:3 = llmc.attention_grad %q, %q, %q, %q, %q, %lse : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

// Tests that scale must be an f32 attribute, not an integer.
func.func @attention_integer_scale(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op attribute 'scale' must be an f32 attribute, got 1 : i64}}
  %0:2 = llmc.attention %q, %q, %q {scale = 1 : i64} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Tests that a transpose flag given a value is rejected, not taken as set.
func.func @matmul_bool_transpose(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op attribute 'transpose_b' must be a unit attribute, got false}}
  %0 = llmc.matmul %a, %b {transpose_b = false} : tensor<4x8xf32>, tensor<8x16xf32>
  return
}

// -----

// Tests the unit-attribute check on batch_matmul.
func.func @batch_matmul_int_transpose(%a: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'llmc.batch_matmul' op attribute 'transpose_a' must be a unit attribute, got 0 : i32}}
  %0 = llmc.batch_matmul %a, %a {transpose_a = 0 : i32, transpose_b} : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Tests that a second dim in the attribute dictionary is rejected (it once
// overrode the parsed one with garbage).
func.func @concat_string_dim(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{custom op 'llmc.concat' attribute 'dim' occurs more than once in the attribute list}}
  %0 = llmc.concat %x, %x dim 1 {dim = "a"} : tensor<4x8xf32>, tensor<4x8xf32>
  return
}

// -----

// Tests that concat's dim must be i64 (generic form: the ODS constraint).
func.func @concat_i32_dim(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.concat' op attribute 'dim' failed to satisfy constraint: 64-bit signless integer attribute}}
  %0 = "llmc.concat"(%x, %x) {dim = 1 : i32} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  return
}

// -----

// Tests that the reduced dims must be an array<i64> (generic form: ODS).
func.func @reduce_dense_dims(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.reduce_sum' op attribute 'dims' failed to satisfy constraint: i64 dense array attribute}}
  %0 = "llmc.reduce_sum"(%x) {dims = dense<1> : tensor<1xi64>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests the permutation's kind on transpose.
func.func @transpose_missing_permutation(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.transpose' op requires attribute 'permutation'}}
  %0 = "llmc.transpose"(%x) : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return
}

// -----

// Tests that a huge slice offset cannot overflow past the bounds check.
func.func @slice_offset_overflow(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.slice' op block at offset 9223372036854775807 of size 1 does not fit in dimension 1 of size 8}}
  %0 = llmc.slice %x offsets [0, 9223372036854775807] sizes [4, 1] : tensor<4x8xf32>
  return
}

// -----

// Tests that a huge slice size cannot overflow past the bounds check.
func.func @slice_size_overflow(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.slice' op block at offset 1 of size 9223372036854775807 does not fit in dimension 1 of size 8}}
  %0 = llmc.slice %x offsets [0, 1] sizes [4, 9223372036854775807] : tensor<4x8xf32>
  return
}

// -----

// Tests that dropout streams are non-negative.
func.func @dropout_negative_stream(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op stream must be non-negative, got -1}}
  %0 = llmc.dropout %x {rate = 0.1 : f32, stream = -1 : i64} : tensor<4x8xf32>
  return
}


// -----

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// Tests that a collective runs on a mesh axis.
func.func @collective_unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.all_reduce' op axis 'ep' is not a mesh axis (dp, tp or pp)}}
  %0 = llmc.all_reduce %x sum on "ep" size 2 : tensor<8xf32>
  return
}

// -----

// Tests that copy_to_axis copies to a mesh axis.
func.func @copy_to_unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.copy_to_axis' op axis 'ep' is not a mesh axis (dp, tp or pp)}}
  %0 = llmc.copy_to_axis %x on "ep" size 2 : tensor<8xf32>
  return
}

// -----

// Tests that copy_to_axis's axis has at least one rank.
func.func @copy_to_empty_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.copy_to_axis' op axis_size must be at least 1, got 0}}
  %0 = llmc.copy_to_axis %x on "tp" size 0 : tensor<8xf32>
  return
}

// -----

// Tests that an axis has at least one rank.
func.func @collective_empty_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.all_gather' op axis_size must be at least 1, got 0}}
  %0 = llmc.all_gather %x dim 0 on "dp" size 0 : tensor<8xf32>
  return
}

// -----

// Tests that reduce_scatter splits its dimension evenly.
func.func @reduce_scatter_uneven(%x: tensor<6x4xf32>) {
  // expected-error @+1 {{'llmc.reduce_scatter' op dimension 0 of size 6 does not split into 4 equal blocks}}
  %0 = llmc.reduce_scatter %x sum dim 0 on "dp" size 4 : tensor<6x4xf32>
  return
}

// -----

// Tests that the gathered dimension exists.
func.func @all_gather_dim_out_of_range(%x: tensor<6x4xf32>) {
  // expected-error @+1 {{'llmc.all_gather' op dim 2 is out of range for rank 2}}
  %0 = llmc.all_gather %x dim 2 on "dp" size 2 : tensor<6x4xf32>
  return
}

// -----

// Tests that reductions are of data tensors.
func.func @all_reduce_ids(%x: tensor<6xi32>) {
  // expected-error @+1 {{'llmc.all_reduce' op input must have element type f32, f16 or bf16, got 'i32'}}
  %0 = llmc.all_reduce %x sum on "dp" size 2 : tensor<6xi32>
  return
}

// -----

// Tests that the root of a broadcast is a rank of its axis.
func.func @broadcast_from_bad_root(%x: tensor<6xf32>) {
  // expected-error @+1 {{'llmc.broadcast_from' op root 2 is not a rank of an axis of size 2}}
  %0 = llmc.broadcast_from %x root 2 on "dp" size 2 : tensor<6xf32>
  return
}

// -----

// Tests that a declared result type must match the inferred one.
func.func @all_gather_wrong_result(%x: tensor<2xf32>) {
  // expected-error @+2 {{'llmc.all_gather' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<2xf32>'}}
  // expected-error @+1 {{'llmc.all_gather' op failed to infer returned types}}
  %0 = "llmc.all_gather"(%x) {dim = 0 : i64, axis = "dp", axis_size = 2 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests an unknown reduction.
func.func @all_reduce_bad_reduction(%x: tensor<6xf32>) {
  // expected-error @+2 {{expected ::mlir::llmc::CollectiveReduction to be one of: sum, avg, max}}
  // expected-error @+1 {{failed to parse Llmc_CollectiveReductionAttr parameter 'value'}}
  %0 = llmc.all_reduce %x min on "dp" size 2 : tensor<6xf32>
  return
}

// -----

// Tests that attention positions need causal masking.
func.func @attention_positions_causal(%q: tensor<2x4x1x8xf32>, %k: tensor<2x4x16x8xf32>, %p: tensor<2x1xi32>) {
  // expected-error @+1 {{'llmc.attention' op positions mask keys causally; they need `causal`}}
  %0:2 = llmc.attention %q, %k, %k positions %p : tensor<2x1xi32> {scale = 0.5 : f32} : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>
  return
}

// -----

// Tests that attention positions are [batch, queries].
func.func @attention_positions_shape(%q: tensor<2x4x1x8xf32>, %k: tensor<2x4x16x8xf32>, %p: tensor<1x2xi32>) {
  // expected-error @+1 {{'llmc.attention' op positions must have shape [2, 1] (batch, tokens), got 'tensor<1x2xi32>'}}
  %0:2 = llmc.attention %q, %k, %k positions %p : tensor<1x2xi32> {causal, scale = 0.5 : f32} : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>
  return
}

// -----

// Tests that positions need a batch dimension.
func.func @attention_positions_rank(%q: tensor<1x8xf32>, %k: tensor<16x8xf32>, %p: tensor<1x1xi32>) {
  // expected-error @+1 {{'llmc.attention' op positions need an input of rank >= 3 [B, ..., T, D], got rank 2}}
  %0:2 = llmc.attention %q, %k, %k positions %p : tensor<1x1xi32> {causal, scale = 0.5 : f32} : tensor<1x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
  return
}

// -----

// Tests that rotary positions are [batch, tokens].
func.func @rotary_positions_shape(%x: tensor<2x4x3x8xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{'llmc.rotary' op positions must have shape [2, 3] (batch, tokens), got 'tensor<2x4xi32>'}}
  %0 = llmc.rotary %x positions %p : tensor<2x4xi32> {theta = 1.0e4 : f32} : tensor<2x4x3x8xf32>
  return
}

// -----

// Tests that a cache is [B, H, S, D].
func.func @cache_write_rank(%u: tensor<2x1x8xf32>, %c: tensor<2x16x8xf32>, %p: tensor<2x1xi32>) {
  // expected-error @+1 {{'llmc.cache_write' op cache and update must be [B, H, S, D] and [B, H, T, D], got ranks 3 and 3}}
  %0 = llmc.cache_write %u into %c at %p : tensor<2x1x8xf32>, tensor<2x16x8xf32>, tensor<2x1xi32>
  return
}

// -----

// Tests that cache and update share an element type.
func.func @cache_write_type(%u: tensor<2x4x1x8xbf16>, %c: tensor<2x4x16x8xf32>, %p: tensor<2x1xi32>) {
  // expected-error @+1 {{'llmc.cache_write' op cache and update must have one element type, got 'f32' and 'bf16'}}
  %0 = llmc.cache_write %u into %c at %p : tensor<2x4x1x8xbf16>, tensor<2x4x16x8xf32>, tensor<2x1xi32>
  return
}

// -----

// Tests that cache and update agree in batch, heads and head size.
func.func @cache_write_heads(%u: tensor<2x2x1x8xf32>, %c: tensor<2x4x16x8xf32>, %p: tensor<2x1xi32>) {
  // expected-error @+1 {{'llmc.cache_write' op cache 'tensor<2x4x16x8xf32>' and update 'tensor<2x2x1x8xf32>' differ in batch, heads or head size}}
  %0 = llmc.cache_write %u into %c at %p : tensor<2x2x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x1xi32>
  return
}

// -----

// Tests that an update has no more tokens than the cache has slots.
func.func @cache_write_slots(%u: tensor<1x1x4x8xf32>, %c: tensor<1x1x2x8xf32>, %p: tensor<1x4xi32>) {
  // expected-error @+1 {{'llmc.cache_write' op update has 4 tokens, more than the cache's 2 slots}}
  %0 = llmc.cache_write %u into %c at %p : tensor<1x1x4x8xf32>, tensor<1x1x2x8xf32>, tensor<1x4xi32>
  return
}

// -----

// Tests that cache_write positions are [batch, tokens].
func.func @cache_write_positions(%u: tensor<2x4x1x8xf32>, %c: tensor<2x4x16x8xf32>, %p: tensor<2x2xi32>) {
  // expected-error @+1 {{'llmc.cache_write' op positions must have shape [2, 1] (batch, tokens), got 'tensor<2x2xi32>'}}
  %0 = llmc.cache_write %u into %c at %p : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x2xi32>
  return
}

// -----

// Tests that a rank's block of the vocabulary starts inside it.
func.func @embedding_vocab_start(%wte: tensor<25x16xf32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding' op vocab_start (49) must lie in [0, vocab_size = 49)}}
  %0 = llmc.embedding %wte, %tokens vocab_start 49 vocab_size 49 : tensor<25x16xf32>, tensor<2x8xi32>
  return
}

// -----

// Tests that a block of the vocabulary names both its start and the size.
func.func @embedding_vocab_size(%wte: tensor<25x16xf32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding' op needs both vocab_start and vocab_size, or neither}}
  %0 = "llmc.embedding"(%wte, %tokens) {vocab_start = 25 : i64} : (tensor<25x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
  return
}

// -----

// Tests the same two rules on embedding_grad.
func.func @embedding_grad_vocab_size(%dx: tensor<2x8x16xf32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding_grad' op needs both vocab_start and vocab_size, or neither}}
  %0 = "llmc.embedding_grad"(%dx, %tokens) {vocab_size = 49 : i64} : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<25x16xf32>
  return
}

// -----

func.func @embedding_grad_vocab_start(%dx: tensor<2x8x16xf32>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding_grad' op vocab_start (-1) must lie in [0, vocab_size = 49)}}
  %0 = llmc.embedding_grad %dx, %tokens vocab_start -1 vocab_size 49 : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<25x16xf32>
  return
}

// -----

// Tests that vocab_shard_max reduces logits of rank >= 1.
func.func @vocab_shard_max_rank(%l: tensor<f32>) {
  // expected-error @+1 {{'llmc.vocab_shard_max' op logits must have rank >= 1}}
  %0 = llmc.vocab_shard_max %l vocab_start 0 vocab_size 4 : tensor<f32>
  return
}

// -----

// Tests that the vocab_shard ops need their block of the vocabulary.
func.func @vocab_shard_max_block(%l: tensor<2x8x25xf32>) {
  // expected-error @+1 {{'llmc.vocab_shard_max' op requires attribute 'vocab_start'}}
  %0 = "llmc.vocab_shard_max"(%l) {vocab_size = 49 : i64} : (tensor<2x8x25xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that the all-reduced max is one f32 per position.
func.func @vocab_shard_cross_entropy_max(%l: tensor<2x8x25xf32>, %t: tensor<2x8xi32>, %m: tensor<2x8xbf16>) {
  // expected-error @+1 {{'llmc.vocab_shard_cross_entropy' op max must have type 'tensor<2x8xf32>', got 'tensor<2x8xbf16>'}}
  %0:2 = llmc.vocab_shard_cross_entropy %l, %t, %m vocab_start 0 vocab_size 49 : tensor<2x8x25xf32>, tensor<2x8xi32>, tensor<2x8xbf16>
  return
}

// -----

// Tests that the gradient's row statistics have the targets' shape.
func.func @vocab_shard_cross_entropy_grad_rows(%ds: tensor<8xf32>, %dt: tensor<2x8xf32>, %l: tensor<2x8x25xf32>, %t: tensor<2x8xi32>, %m: tensor<2x8xf32>) {
  // expected-error @+1 {{'llmc.vocab_shard_cross_entropy_grad' op sum_exp_grad must have type 'tensor<2x8xf32>', got 'tensor<8xf32>'}}
  %0 = llmc.vocab_shard_cross_entropy_grad %ds, %dt, %l, %t, %m vocab_start 0 vocab_size 49 : tensor<8xf32>, tensor<2x8xf32>, tensor<2x8x25xf32>, tensor<2x8xi32>, tensor<2x8xf32>
  return
}

// -----

// Tests that cross_entropy_combine reads f32 statistics.
func.func @cross_entropy_combine_f32(%m: tensor<2x8xf16>) {
  // expected-error @+1 {{'llmc.cross_entropy_combine' op max must have type 'tensor<2x8xf32>', got 'tensor<2x8xf16>'}}
  %0:2 = llmc.cross_entropy_combine %m, %m, %m : tensor<2x8xf16>
  return
}

// -----

// Tests that a pipeline transfer needs a pipeline of 2 stages or more.
func.func @pipeline_of_one() {
  // expected-error @+1 {{'llmc.pipeline_recv' op needs a pipeline of at least 2 stages, got 1}}
  %h = llmc.pipeline_recv from stage 0 of 1 : tensor<8xf32>
  return
}

// -----

// Tests that a pipeline transfer's peer is a stage of the pipeline.
func.func @pipeline_peer_outside(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.pipeline_send' op peer stage 2 is not a stage of a pipeline of 2}}
  %z = llmc.pipeline_send %x to stage 2 of 2 : tensor<8xf32> -> tensor<f32>
  return
}

// -----

// Tests that a send's result is the scalar placeholder loss.
func.func @pipeline_send_result(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.pipeline_send' op result #0 must be 0D tensor of 32-bit float values}}
  %z = llmc.pipeline_send %x to stage 1 of 2 : tensor<8xf32> -> tensor<8xf32>
  return
}
