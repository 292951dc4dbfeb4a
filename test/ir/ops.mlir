// RUN: llmc-opt %s | llmc-opt | FileCheck %s
// RUN: llmc-opt %s --mlir-print-op-generic | llmc-opt | FileCheck %s

// Round trip of every llmc op. Each function returns the values it defines,
// so the `return` line checks the result types that inferReturnTypes
// computed (the func verifier rejects a mismatch with the signature).

// Tests constants of every element type and a fill.
// CHECK-LABEL: func.func @constant()
// CHECK-SAME: -> (tensor<f32>, tensor<2x2xbf16>, tensor<3xi64>, tensor<2xi32>, tensor<4x8xf16>)
// CHECK-NEXT: %[[HALF:.*]] = llmc.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[MAT:.*]] = llmc.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xbf16>
// CHECK-NEXT: %[[IDS:.*]] = llmc.constant dense<[0, 7, 50256]> : tensor<3xi64>
// CHECK-NEXT: %[[ONES:.*]] = llmc.constant dense<1> : tensor<2xi32>
// CHECK-NEXT: %[[FILL:.*]] = llmc.fill 1.000000e+00 : tensor<4x8xf16>
// CHECK-NEXT: return %[[HALF]], %[[MAT]], %[[IDS]], %[[ONES]], %[[FILL]] : tensor<f32>, tensor<2x2xbf16>, tensor<3xi64>, tensor<2xi32>, tensor<4x8xf16>
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
// CHECK-LABEL: func.func @embedding(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<50x16xbf16>, %[[TOK:[a-z0-9]+]]: tensor<2x8xi64>, %[[IDS:[a-z0-9]+]]: tensor<8xi32>, %[[DX:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK-NEXT: %[[X:.*]] = llmc.embedding %[[WTE]], %[[TOK]] : tensor<50x16xbf16>, tensor<2x8xi64>
// CHECK-NEXT: %[[DWTE:.*]] = llmc.embedding_grad %[[DX]], %[[IDS]] : tensor<8x16xf32>, tensor<8xi32> -> tensor<50x16xf32>
// CHECK-NEXT: return %[[X]], %[[DWTE]] : tensor<2x8x16xbf16>, tensor<50x16xf32>
func.func @embedding(%wte: tensor<50x16xbf16>, %tokens: tensor<2x8xi64>, %ids: tensor<8xi32>, %dx: tensor<8x16xf32>) -> (tensor<2x8x16xbf16>, tensor<50x16xf32>) {
  %x = llmc.embedding %wte, %tokens : tensor<50x16xbf16>, tensor<2x8xi64>
  %dwte = llmc.embedding_grad %dx, %ids : tensor<8x16xf32>, tensor<8xi32> -> tensor<50x16xf32>
  return %x, %dwte : tensor<2x8x16xbf16>, tensor<50x16xf32>
}

// Tests matmul with a rank-2 and a rank-3 (batch-shared weight) lhs and
// every combination of the transpose flags.
// CHECK-LABEL: func.func @matmul(
// CHECK-SAME: %[[X2:[a-z0-9]+]]: tensor<4x8xf32>, %[[X3:[a-z0-9]+]]: tensor<2x4x8xf16>, %[[W:[a-z0-9]+]]: tensor<8x16xf32>, %[[WTH:[a-z0-9]+]]: tensor<16x8xf16>, %[[XT:[a-z0-9]+]]: tensor<8x4xf32>, %[[WT:[a-z0-9]+]]: tensor<16x8xf32>
// CHECK-NEXT: %[[M0:.*]] = llmc.matmul %[[X2]], %[[W]] : tensor<4x8xf32>, tensor<8x16xf32>
// CHECK-NEXT: %[[M1:.*]] = llmc.matmul %[[X3]], %[[WTH]] {transpose_b} : tensor<2x4x8xf16>, tensor<16x8xf16>
// CHECK-NEXT: %[[M2:.*]] = llmc.matmul %[[XT]], %[[W]] {transpose_a} : tensor<8x4xf32>, tensor<8x16xf32>
// CHECK-NEXT: %[[M3:.*]] = llmc.matmul %[[XT]], %[[WT]] {transpose_a, transpose_b} : tensor<8x4xf32>, tensor<16x8xf32>
// CHECK-NEXT: return %[[M0]], %[[M1]], %[[M2]], %[[M3]] : tensor<4x16xf32>, tensor<2x4x16xf16>, tensor<4x16xf32>, tensor<4x16xf32>
func.func @matmul(%x2: tensor<4x8xf32>, %x3: tensor<2x4x8xf16>, %w: tensor<8x16xf32>, %wth: tensor<16x8xf16>, %xt: tensor<8x4xf32>, %wt: tensor<16x8xf32>) -> (tensor<4x16xf32>, tensor<2x4x16xf16>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = llmc.matmul %x2, %w : tensor<4x8xf32>, tensor<8x16xf32>
  %1 = llmc.matmul %x3, %wth {transpose_b} : tensor<2x4x8xf16>, tensor<16x8xf16>
  %2 = llmc.matmul %xt, %w {transpose_a} : tensor<8x4xf32>, tensor<8x16xf32>
  %3 = llmc.matmul %xt, %wt {transpose_a, transpose_b} : tensor<8x4xf32>, tensor<16x8xf32>
  return %0, %1, %2, %3 : tensor<4x16xf32>, tensor<2x4x16xf16>, tensor<4x16xf32>, tensor<4x16xf32>
}

// Tests batch_matmul with two batch dimensions and with the transpose flags.
// CHECK-LABEL: func.func @batch_matmul(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x3x4x8xf32>, %[[K:[a-z0-9]+]]: tensor<2x3x5x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x3x5x6xf32>, %[[A:[a-z0-9]+]]: tensor<2x8x4xbf16>, %[[B:[a-z0-9]+]]: tensor<2x6x8xbf16>
// CHECK-NEXT: %[[S:.*]] = llmc.batch_matmul %[[Q]], %[[K]] {transpose_b} : tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>
// CHECK-NEXT: %[[KV:.*]] = llmc.batch_matmul %[[K]], %[[V]] {transpose_a} : tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>
// CHECK-NEXT: %[[AB:.*]] = llmc.batch_matmul %[[A]], %[[B]] {transpose_a, transpose_b} : tensor<2x8x4xbf16>, tensor<2x6x8xbf16>
// CHECK-NEXT: return %[[S]], %[[KV]], %[[AB]] : tensor<2x3x4x5xf32>, tensor<2x3x8x6xf32>, tensor<2x4x6xbf16>
func.func @batch_matmul(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x5x8xf32>, %v: tensor<2x3x5x6xf32>, %a: tensor<2x8x4xbf16>, %b: tensor<2x6x8xbf16>) -> (tensor<2x3x4x5xf32>, tensor<2x3x8x6xf32>, tensor<2x4x6xbf16>) {
  %0 = llmc.batch_matmul %q, %k {transpose_b} : tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>
  %1 = llmc.batch_matmul %k, %v {transpose_a} : tensor<2x3x5x8xf32>, tensor<2x3x5x6xf32>
  %2 = llmc.batch_matmul %a, %b {transpose_a, transpose_b} : tensor<2x8x4xbf16>, tensor<2x6x8xbf16>
  return %0, %1, %2 : tensor<2x3x4x5xf32>, tensor<2x3x8x6xf32>, tensor<2x4x6xbf16>
}

// Tests the binary ops and broadcasting: a trailing-dimension bias, two
// size-1 dimensions stretching each other, a rank-0 scalar, equal shapes,
// and a missing leading dimension together with size-1 stretches.
// CHECK-LABEL: func.func @binary(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[BIAS:[a-z0-9]+]]: tensor<8xf32>, %[[COL:[a-z0-9]+]]: tensor<4x1xf32>, %[[ROW:[a-z0-9]+]]: tensor<1x8xf32>, %[[S:[a-z0-9]+]]: tensor<f32>, %[[H:[a-z0-9]+]]: tensor<4x8xf16>, %[[B1:[a-z0-9]+]]: tensor<2x1x8xbf16>, %[[B2:[a-z0-9]+]]: tensor<3x1xbf16>
// CHECK-NEXT: %[[ADD:.*]] = llmc.add %[[X]], %[[BIAS]] : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[SUB:.*]] = llmc.sub %[[COL]], %[[ROW]] : tensor<4x1xf32>, tensor<1x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = llmc.mul %[[S]], %[[X]] : tensor<f32>, tensor<2x4x8xf32>
// CHECK-NEXT: %[[DIV:.*]] = llmc.div %[[H]], %[[H]] : tensor<4x8xf16>, tensor<4x8xf16>
// CHECK-NEXT: %[[MAX:.*]] = llmc.max %[[B1]], %[[B2]] : tensor<2x1x8xbf16>, tensor<3x1xbf16>
// CHECK-NEXT: return %[[ADD]], %[[SUB]], %[[MUL]], %[[DIV]], %[[MAX]] : tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf16>, tensor<2x3x8xbf16>
func.func @binary(%x: tensor<2x4x8xf32>, %bias: tensor<8xf32>, %col: tensor<4x1xf32>, %row: tensor<1x8xf32>, %s: tensor<f32>, %h: tensor<4x8xf16>, %b1: tensor<2x1x8xbf16>, %b2: tensor<3x1xbf16>) -> (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf16>, tensor<2x3x8xbf16>) {
  %0 = llmc.add %x, %bias : tensor<2x4x8xf32>, tensor<8xf32>
  %1 = llmc.sub %col, %row : tensor<4x1xf32>, tensor<1x8xf32>
  %2 = llmc.mul %s, %x : tensor<f32>, tensor<2x4x8xf32>
  %3 = llmc.div %h, %h : tensor<4x8xf16>, tensor<4x8xf16>
  %4 = llmc.max %b1, %b2 : tensor<2x1x8xbf16>, tensor<3x1xbf16>
  return %0, %1, %2, %3, %4 : tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf16>, tensor<2x3x8xbf16>
}

// Tests the unary elementwise ops on f32, f16 and bf16.
// CHECK-LABEL: func.func @unary(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[H:[a-z0-9]+]]: tensor<4x8xf16>, %[[B:[a-z0-9]+]]: tensor<4x8xbf16>
// CHECK-NEXT: %[[NEG:.*]] = llmc.neg %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: %[[EXP:.*]] = llmc.exp %[[NEG]] : tensor<4x8xf32>
// CHECK-NEXT: %[[LOG:.*]] = llmc.log %[[EXP]] : tensor<4x8xf32>
// CHECK-NEXT: %[[TANH:.*]] = llmc.tanh %[[LOG]] : tensor<4x8xf32>
// CHECK-NEXT: %[[SQRT:.*]] = llmc.sqrt %[[H]] : tensor<4x8xf16>
// CHECK-NEXT: %[[RSQRT:.*]] = llmc.rsqrt %[[SQRT]] : tensor<4x8xf16>
// CHECK-NEXT: %[[RELU:.*]] = llmc.relu %[[B]] : tensor<4x8xbf16>
// CHECK-NEXT: %[[SILU:.*]] = llmc.silu %[[RELU]] : tensor<4x8xbf16>
// CHECK-NEXT: return %[[TANH]], %[[RSQRT]], %[[SILU]] : tensor<4x8xf32>, tensor<4x8xf16>, tensor<4x8xbf16>
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
// CHECK-LABEL: func.func @gelu_cast_dropout(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32>
// CHECK-NEXT: %[[G0:.*]] = llmc.gelu %[[X]] approximate = tanh : tensor<4x8xf32>
// CHECK-NEXT: %[[G1:.*]] = llmc.gelu %[[G0]] approximate = none : tensor<4x8xf32>
// CHECK-NEXT: %[[H:.*]] = llmc.cast %[[G1]] : tensor<4x8xf32> -> tensor<4x8xf16>
// CHECK-NEXT: %[[B:.*]] = llmc.cast %[[H]] : tensor<4x8xf16> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[D:.*]] = llmc.dropout %[[X]] {rate = 1.000000e-01 : f32, stream = 3 : i64} : tensor<4x8xf32>
// CHECK-NEXT: %[[DB:.*]] = llmc.dropout %[[X]] {offsets = array<i64: 0, 8>, rate = 1.000000e-01 : f32, stream = 4 : i64, whole_shape = array<i64: 4, 16>} : tensor<4x8xf32>
// CHECK-NEXT: return %[[G1]], %[[B]], %[[D]], %[[DB]] : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>
func.func @gelu_cast_dropout(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = llmc.gelu %x approximate = tanh : tensor<4x8xf32>
  %1 = llmc.gelu %0 approximate = none : tensor<4x8xf32>
  %2 = llmc.cast %1 : tensor<4x8xf32> -> tensor<4x8xf16>
  %3 = llmc.cast %2 : tensor<4x8xf16> -> tensor<4x8xbf16>
  %4 = llmc.dropout %x {rate = 1.000000e-01 : f32, stream = 3 : i64} : tensor<4x8xf32>
  %5 = llmc.dropout %x {rate = 1.000000e-01 : f32, stream = 4 : i64, whole_shape = array<i64: 4, 16>, offsets = array<i64: 0, 8>} : tensor<4x8xf32>
  return %1, %3, %4, %5 : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>
}

// Tests is_finite, the three comparisons (one broadcasting a scalar) and
// select with a scalar and with a full-shape condition.
// CHECK-LABEL: func.func @predicates(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf16>, %[[N:[a-z0-9]+]]: tensor<f32>, %[[A:[a-z0-9]+]]: tensor<4x8xf32>, %[[B:[a-z0-9]+]]: tensor<4x8xf32>
// CHECK-NEXT: %[[F:.*]] = llmc.is_finite %[[X]] : tensor<4x8xf16>
// CHECK-NEXT: %[[FN:.*]] = llmc.is_finite %[[N]] : tensor<f32>
// CHECK-NEXT: %[[LT:.*]] = llmc.compare lt, %[[A]], %[[B]] : tensor<4x8xf32>, tensor<4x8xf32>
// CHECK-NEXT: %[[LE:.*]] = llmc.compare le, %[[N]], %[[A]] : tensor<f32>, tensor<4x8xf32>
// CHECK-NEXT: %[[EQ:.*]] = llmc.compare eq, %[[N]], %[[N]] : tensor<f32>, tensor<f32>
// CHECK-NEXT: %[[S0:.*]] = llmc.select %[[FN]], %[[A]], %[[B]] : tensor<i1>, tensor<4x8xf32>
// CHECK-NEXT: %[[S1:.*]] = llmc.select %[[LT]], %[[A]], %[[B]] : tensor<4x8xi1>, tensor<4x8xf32>
// CHECK-NEXT: return %[[F]], %[[LE]], %[[EQ]], %[[S0]], %[[S1]] : tensor<4x8xi1>, tensor<4x8xi1>, tensor<i1>, tensor<4x8xf32>, tensor<4x8xf32>
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
// CHECK-LABEL: func.func @norms(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xbf16>, %[[W:[a-z0-9]+]]: tensor<8xbf16>, %[[B:[a-z0-9]+]]: tensor<8xbf16>, %[[Y:[a-z0-9]+]]: tensor<4x8xf32>, %[[W32:[a-z0-9]+]]: tensor<8xf32>
// CHECK-NEXT: %[[LN:.*]], %[[MEAN:.*]], %[[RSTD:.*]] = llmc.layer_norm %[[X]], %[[W]], %[[B]] {epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
// CHECK-NEXT: %[[LN2:.*]], %[[MEAN2:.*]], %[[RSTD2:.*]] = llmc.layer_norm %[[Y]], %[[W32]] {epsilon = 9.99999974E-6 : f32} : tensor<4x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[RMS:.*]], %[[RRSTD:.*]] = llmc.rms_norm %[[Y]], %[[W32]] {epsilon = 9.99999997E-7 : f32} : tensor<4x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[SM:.*]] = llmc.softmax %[[Y]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[LN]], %[[MEAN]], %[[RSTD]], %[[LN2]], %[[MEAN2]], %[[RSTD2]], %[[RMS]], %[[RRSTD]], %[[SM]] : tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>
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
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x3x4x8xf32>, %[[K:[a-z0-9]+]]: tensor<2x3x6x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x3x6x16xf32>, %[[QH:[a-z0-9]+]]: tensor<2x4x8xf16>
// CHECK-NEXT: %[[O0:.*]], %[[L0:.*]] = llmc.attention %[[Q]], %[[Q]], %[[Q]] {causal, scale = 1.250000e-01 : f32} : tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>
// CHECK-NEXT: %[[O1:.*]], %[[L1:.*]] = llmc.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f32} : tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>
// CHECK-NEXT: %[[O2:.*]], %[[L2:.*]] = llmc.attention %[[K]], %[[Q]], %[[Q]] {scale = 5.000000e-01 : f32} : tensor<2x3x6x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>
// CHECK-NEXT: %[[O3:.*]], %[[L3:.*]] = llmc.attention %[[QH]], %[[QH]], %[[QH]] {scale = 1.000000e+00 : f32} : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
// CHECK-NEXT: return %[[O0]], %[[L0]], %[[O1]], %[[L1]], %[[O2]], %[[L2]], %[[O3]], %[[L3]] : tensor<2x3x4x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6xf32>, tensor<2x4x8xf16>, tensor<2x4xf32>
func.func @attention(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x6x8xf32>, %v: tensor<2x3x6x16xf32>, %qh: tensor<2x4x8xf16>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6xf32>, tensor<2x4x8xf16>, tensor<2x4xf32>) {
  %0:2 = llmc.attention %q, %q, %q {causal, scale = 0.125 : f32} : tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>
  %1:2 = llmc.attention %q, %k, %v {causal, scale = 0.5 : f32} : tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>
  %2:2 = llmc.attention %k, %q, %q {scale = 0.5 : f32} : tensor<2x3x6x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>
  %3:2 = llmc.attention %qh, %qh, %qh {scale = 1.0 : f32} : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  return %0#0, %0#1, %1#0, %1#1, %2#0, %2#1, %3#0, %3#1 : tensor<2x3x4x8xf32>, tensor<2x3x4xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6xf32>, tensor<2x4x8xf16>, tensor<2x4xf32>
}

// Tests rotary and its inverse.
// CHECK-LABEL: func.func @rotary(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x4x16x8xf32>
// CHECK-NEXT: %[[R:.*]] = llmc.rotary %[[Q]] {theta = 1.000000e+04 : f32} : tensor<2x4x16x8xf32>
// CHECK-NEXT: %[[I:.*]] = llmc.rotary %[[R]] {inverse, theta = 1.000000e+04 : f32} : tensor<2x4x16x8xf32>
// CHECK-NEXT: return %[[I]] : tensor<2x4x16x8xf32>
func.func @rotary(%q: tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> {
  %0 = llmc.rotary %q {theta = 1.0e4 : f32} : tensor<2x4x16x8xf32>
  %1 = llmc.rotary %0 {inverse, theta = 1.0e4 : f32} : tensor<2x4x16x8xf32>
  return %1 : tensor<2x4x16x8xf32>
}

// Tests the ops of a decoding step with a KV cache: rotary at given
// positions, cache_write, and attention masked by the queries' positions.
// CHECK-LABEL: func.func @kv_cache(
// CHECK-SAME: %[[K:[a-z0-9]+]]: tensor<2x4x1x8xf32>, %[[C:[a-z0-9]+]]: tensor<2x4x16x8xf32>, %[[P:[a-z0-9]+]]: tensor<2x1xi32>
// CHECK-NEXT: %[[R:.*]] = llmc.rotary %[[K]] positions %[[P]] : tensor<2x1xi32> {theta = 1.000000e+04 : f32} : tensor<2x4x1x8xf32>
// CHECK-NEXT: %[[W:.*]] = llmc.cache_write %[[R]] into %[[C]] at %[[P]] : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x1xi32>
// CHECK-NEXT: %{{.*}}, %{{.*}} = llmc.attention %[[R]], %[[W]], %[[W]] positions %[[P]] : tensor<2x1xi32> {causal, scale = 5.000000e-01 : f32} : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>
func.func @kv_cache(%k: tensor<2x4x1x8xf32>, %cache: tensor<2x4x16x8xf32>, %pos: tensor<2x1xi32>) -> (tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>) {
  %r = llmc.rotary %k positions %pos : tensor<2x1xi32> {theta = 1.0e4 : f32} : tensor<2x4x1x8xf32>
  %w = llmc.cache_write %r into %cache at %pos : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x1xi32>
  %o:2 = llmc.attention %r, %w, %w positions %pos : tensor<2x1xi32> {causal, scale = 0.5 : f32} : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>
  return %o#0, %w : tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>
}

// Tests cross_entropy: a scalar f32 loss and an f32 lse per position.
// CHECK-LABEL: func.func @cross_entropy(
// CHECK-SAME: %[[LOGITS:[a-z0-9]+]]: tensor<2x8x50xf32>, %[[TARGETS:[a-z0-9]+]]: tensor<2x8xi64>
// CHECK-NEXT: %[[LOSS:.*]], %[[LSE:.*]] = llmc.cross_entropy %[[LOGITS]], %[[TARGETS]] : tensor<2x8x50xf32>, tensor<2x8xi64>
// CHECK-NEXT: return %[[LOSS]], %[[LSE]] : tensor<f32>, tensor<2x8xf32>
func.func @cross_entropy(%logits: tensor<2x8x50xf32>, %targets: tensor<2x8xi64>) -> (tensor<f32>, tensor<2x8xf32>) {
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x8x50xf32>, tensor<2x8xi64>
  return %loss, %lse : tensor<f32>, tensor<2x8xf32>
}

// Tests reshape, transpose, slice, a three-input concat and broadcast.
// CHECK-LABEL: func.func @shapes(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x24xf32>, %[[A:[a-z0-9]+]]: tensor<4x2xf16>, %[[B:[a-z0-9]+]]: tensor<4x3xf16>, %[[C:[a-z0-9]+]]: tensor<4x5xf16>, %[[BIAS:[a-z0-9]+]]: tensor<8xf32>
// CHECK-NEXT: %[[RS:.*]] = llmc.reshape %[[X]] : tensor<2x4x24xf32> -> tensor<2x4x3x8xf32>
// CHECK-NEXT: %[[TR:.*]] = llmc.transpose %[[RS]], [0, 2, 1, 3] : tensor<2x4x3x8xf32>
// CHECK-NEXT: %[[SL:.*]] = llmc.slice %[[X]] offsets [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xf32>
// CHECK-NEXT: %[[CAT:.*]] = llmc.concat %[[A]], %[[B]], %[[C]] dim 1 : tensor<4x2xf16>, tensor<4x3xf16>, tensor<4x5xf16>
// CHECK-NEXT: %[[BC:.*]] = llmc.broadcast %[[BIAS]] : tensor<8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[RS]], %[[TR]], %[[SL]], %[[CAT]], %[[BC]] : tensor<2x4x3x8xf32>, tensor<2x3x4x8xf32>, tensor<2x4x8xf32>, tensor<4x10xf16>, tensor<2x4x8xf32>
func.func @shapes(%x: tensor<2x4x24xf32>, %a: tensor<4x2xf16>, %b: tensor<4x3xf16>, %c: tensor<4x5xf16>, %bias: tensor<8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4x8xf32>, tensor<2x4x8xf32>, tensor<4x10xf16>, tensor<2x4x8xf32>) {
  %0 = llmc.reshape %x : tensor<2x4x24xf32> -> tensor<2x4x3x8xf32>
  %1 = llmc.transpose %0, [0, 2, 1, 3] : tensor<2x4x3x8xf32>
  %2 = llmc.slice %x offsets [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xf32>
  %3 = llmc.concat %a, %b, %c dim 1 : tensor<4x2xf16>, tensor<4x3xf16>, tensor<4x5xf16>
  %4 = llmc.broadcast %bias : tensor<8xf32> -> tensor<2x4x8xf32>
  return %0, %1, %2, %3, %4 : tensor<2x4x3x8xf32>, tensor<2x3x4x8xf32>, tensor<2x4x8xf32>, tensor<4x10xf16>, tensor<2x4x8xf32>
}

// Tests the reductions with and without keep_dims, over one and two dims.
// CHECK-LABEL: func.func @reductions(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[H:[a-z0-9]+]]: tensor<2x4x8xf16>
// CHECK-NEXT: %[[S0:.*]] = llmc.reduce_sum %[[X]] dims [2] : tensor<2x4x8xf32>
// CHECK-NEXT: %[[S1:.*]] = llmc.reduce_sum %[[X]] dims [1, 2] keep_dims : tensor<2x4x8xf32>
// CHECK-NEXT: %[[M0:.*]] = llmc.reduce_mean %[[H]] dims [0, 2] : tensor<2x4x8xf16>
// CHECK-NEXT: %[[M1:.*]] = llmc.reduce_mean %[[H]] dims [0, 2] keep_dims : tensor<2x4x8xf16>
// CHECK-NEXT: %[[X0:.*]] = llmc.reduce_max %[[X]] dims [1] : tensor<2x4x8xf32>
// CHECK-NEXT: %[[X1:.*]] = llmc.reduce_max %[[X]] dims [2] keep_dims : tensor<2x4x8xf32>
// CHECK-NEXT: return %[[S0]], %[[S1]], %[[M0]], %[[M1]], %[[X0]], %[[X1]] : tensor<2x4xf32>, tensor<2x1x1xf32>, tensor<4xf16>, tensor<1x4x1xf16>, tensor<2x8xf32>, tensor<2x4x1xf32>
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
// CHECK-LABEL: func.func @activation_grads(
// CHECK-SAME: %[[DY:[a-z0-9]+]]: tensor<4x8xf32>, %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[DH:[a-z0-9]+]]: tensor<4x8xbf16>, %[[H:[a-z0-9]+]]: tensor<4x8xbf16>
// CHECK-NEXT: %[[RELU:.*]] = llmc.relu_grad %[[DY]], %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: %[[SILU:.*]] = llmc.silu_grad %[[DH]], %[[H]] : tensor<4x8xbf16>
// CHECK-NEXT: %[[GT:.*]] = llmc.gelu_grad %[[DY]], %[[X]] approximate = tanh : tensor<4x8xf32>
// CHECK-NEXT: %[[GN:.*]] = llmc.gelu_grad %[[DY]], %[[X]] approximate = none : tensor<4x8xf32>
// CHECK-NEXT: %[[SM:.*]] = llmc.softmax_grad %[[DY]], %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[RELU]], %[[SILU]], %[[GT]], %[[GN]], %[[SM]] : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
func.func @activation_grads(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %dh: tensor<4x8xbf16>, %h: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = llmc.relu_grad %dy, %x : tensor<4x8xf32>
  %1 = llmc.silu_grad %dh, %h : tensor<4x8xbf16>
  %2 = llmc.gelu_grad %dy, %x approximate = tanh : tensor<4x8xf32>
  %3 = llmc.gelu_grad %dy, %x approximate = none : tensor<4x8xf32>
  %4 = llmc.softmax_grad %dy, %x : tensor<4x8xf32>
  return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// Tests the norm gradients: input-typed dx, weight-typed dw (and db).
// CHECK-LABEL: func.func @norm_grads(
// CHECK-SAME: %[[DY:[a-z0-9]+]]: tensor<2x4x8xf16>, %[[X:[a-z0-9]+]]: tensor<2x4x8xf16>, %[[W:[a-z0-9]+]]: tensor<8xf16>, %[[MEAN:[a-z0-9]+]]: tensor<2x4xf32>, %[[RSTD:[a-z0-9]+]]: tensor<2x4xf32>
// CHECK-NEXT: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = llmc.layer_norm_grad %[[DY]], %[[X]], %[[W]], %[[MEAN]], %[[RSTD]] : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<8xf16>, tensor<2x4xf32>, tensor<2x4xf32>
// CHECK-NEXT: %[[RDX:.*]], %[[RDW:.*]] = llmc.rms_norm_grad %[[DY]], %[[X]], %[[W]], %[[RSTD]] : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<8xf16>, tensor<2x4xf32>
// CHECK-NEXT: return %[[DX]], %[[DW]], %[[DB]], %[[RDX]], %[[RDW]] : tensor<2x4x8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<2x4x8xf16>, tensor<8xf16>
func.func @norm_grads(%dy: tensor<2x4x8xf16>, %x: tensor<2x4x8xf16>, %w: tensor<8xf16>, %mean: tensor<2x4xf32>, %rstd: tensor<2x4xf32>) -> (tensor<2x4x8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<2x4x8xf16>, tensor<8xf16>) {
  %0:3 = llmc.layer_norm_grad %dy, %x, %w, %mean, %rstd : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<8xf16>, tensor<2x4xf32>, tensor<2x4xf32>
  %1:2 = llmc.rms_norm_grad %dy, %x, %w, %rstd : tensor<2x4x8xf16>, tensor<2x4x8xf16>, tensor<8xf16>, tensor<2x4xf32>
  return %0#0, %0#1, %0#2, %1#0, %1#1 : tensor<2x4x8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<2x4x8xf16>, tensor<8xf16>
}

// Tests attention_grad of a causal Tq < Tk attention: dq, dk, dv have the
// types of q, k, v.
// CHECK-LABEL: func.func @attention_grad(
// CHECK-SAME: %[[DO:[a-z0-9]+]]: tensor<2x3x4x16xf32>, %[[Q:[a-z0-9]+]]: tensor<2x3x4x8xf32>, %[[K:[a-z0-9]+]]: tensor<2x3x6x8xf32>, %[[V:[a-z0-9]+]]: tensor<2x3x6x16xf32>, %[[O:[a-z0-9]+]]: tensor<2x3x4x16xf32>, %[[LSE:[a-z0-9]+]]: tensor<2x3x4xf32>
// CHECK-NEXT: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = llmc.attention_grad %[[DO]], %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]] {causal, scale = 5.000000e-01 : f32} : tensor<2x3x4x16xf32>, tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>
// CHECK-NEXT: return %[[DQ]], %[[DK]], %[[DV]] : tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>
func.func @attention_grad(%do: tensor<2x3x4x16xf32>, %q: tensor<2x3x4x8xf32>, %k: tensor<2x3x6x8xf32>, %v: tensor<2x3x6x16xf32>, %o: tensor<2x3x4x16xf32>, %lse: tensor<2x3x4xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>) {
  %0:3 = llmc.attention_grad %do, %q, %k, %v, %o, %lse {causal, scale = 0.5 : f32} : tensor<2x3x4x16xf32>, tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4xf32>
  return %0#0, %0#1, %0#2 : tensor<2x3x4x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x16xf32>
}

// Tests cross_entropy_grad: the result has the logits' type.
// CHECK-LABEL: func.func @cross_entropy_grad(
// CHECK-SAME: %[[DLOSS:[a-z0-9]+]]: tensor<f32>, %[[LOGITS:[a-z0-9]+]]: tensor<2x8x50xbf16>, %[[TARGETS:[a-z0-9]+]]: tensor<2x8xi32>, %[[LSE:[a-z0-9]+]]: tensor<2x8xf32>
// CHECK-NEXT: %[[DL:.*]] = llmc.cross_entropy_grad %[[DLOSS]], %[[LOGITS]], %[[TARGETS]], %[[LSE]] : tensor<f32>, tensor<2x8x50xbf16>, tensor<2x8xi32>, tensor<2x8xf32>
// CHECK-NEXT: return %[[DL]] : tensor<2x8x50xbf16>
func.func @cross_entropy_grad(%dloss: tensor<f32>, %logits: tensor<2x8x50xbf16>, %targets: tensor<2x8xi32>, %lse: tensor<2x8xf32>) -> tensor<2x8x50xbf16> {
  %0 = llmc.cross_entropy_grad %dloss, %logits, %targets, %lse : tensor<f32>, tensor<2x8x50xbf16>, tensor<2x8xi32>, tensor<2x8xf32>
  return %0 : tensor<2x8x50xbf16>
}

// Tests a tensor-parallel rank's block of the vocabulary: the masked
// lookup and its gradient (vocab_start, vocab_size), and the four ops of
// the vocabulary-parallel cross-entropy: row statistics of the block's
// logits (f32, the targets' shape), its gradient (the logits' type), and
// the combined loss and lse.
// CHECK-LABEL: func.func @vocab_parallel(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<25x16xf32>, %[[TOK:[a-z0-9]+]]: tensor<2x8xi32>, %[[L:[a-z0-9]+]]: tensor<2x8x25xbf16>, %[[D:[a-z0-9]+]]: tensor<2x8x16xf32>
// CHECK-NEXT: %[[X:.*]] = llmc.embedding %[[WTE]], %[[TOK]] vocab_start 25 vocab_size 49 : tensor<25x16xf32>, tensor<2x8xi32>
// CHECK-NEXT: %[[DW:.*]] = llmc.embedding_grad %[[D]], %[[TOK]] vocab_start 25 vocab_size 49 : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<25x16xf32>
// CHECK-NEXT: %[[M:.*]] = llmc.vocab_shard_max %[[L]] vocab_start 25 vocab_size 49 : tensor<2x8x25xbf16>
// CHECK-NEXT: %[[S:.*]], %[[T:.*]] = llmc.vocab_shard_cross_entropy %[[L]], %[[TOK]], %[[M]] vocab_start 25 vocab_size 49 : tensor<2x8x25xbf16>, tensor<2x8xi32>, tensor<2x8xf32>
// CHECK-NEXT: %[[LOSS:.*]], %[[LSE:.*]] = llmc.cross_entropy_combine %[[M]], %[[S]], %[[T]] : tensor<2x8xf32>
// CHECK-NEXT: %[[DL:.*]] = llmc.vocab_shard_cross_entropy_grad %[[S]], %[[T]], %[[L]], %[[TOK]], %[[M]] vocab_start 25 vocab_size 49 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8x25xbf16>, tensor<2x8xi32>, tensor<2x8xf32>
// CHECK-NEXT: return %[[X]], %[[DW]], %[[LOSS]], %[[LSE]], %[[DL]] : tensor<2x8x16xf32>, tensor<25x16xf32>, tensor<f32>, tensor<2x8xf32>, tensor<2x8x25xbf16>
func.func @vocab_parallel(%wte: tensor<25x16xf32>, %tokens: tensor<2x8xi32>, %logits: tensor<2x8x25xbf16>, %dx: tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<25x16xf32>, tensor<f32>, tensor<2x8xf32>, tensor<2x8x25xbf16>) {
  %x = llmc.embedding %wte, %tokens vocab_start 25 vocab_size 49 : tensor<25x16xf32>, tensor<2x8xi32>
  %dwte = llmc.embedding_grad %dx, %tokens vocab_start 25 vocab_size 49 : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<25x16xf32>
  %m = llmc.vocab_shard_max %logits vocab_start 25 vocab_size 49 : tensor<2x8x25xbf16>
  %s, %t = llmc.vocab_shard_cross_entropy %logits, %tokens, %m vocab_start 25 vocab_size 49 : tensor<2x8x25xbf16>, tensor<2x8xi32>, tensor<2x8xf32>
  %loss, %lse = llmc.cross_entropy_combine %m, %s, %t : tensor<2x8xf32>
  %dl = llmc.vocab_shard_cross_entropy_grad %s, %t, %logits, %tokens, %m vocab_start 25 vocab_size 49 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8x25xbf16>, tensor<2x8xi32>, tensor<2x8xf32>
  return %x, %dwte, %loss, %lse, %dl : tensor<2x8x16xf32>, tensor<25x16xf32>, tensor<f32>, tensor<2x8xf32>, tensor<2x8x25xbf16>
}

// Tests the collectives: all_reduce keeps the type, reduce_scatter divides
// and all_gather multiplies dimension `dim` by the axis size.
// CHECK-LABEL: func.func @collectives(
// CHECK-SAME: %[[G:[a-z0-9]+]]: tensor<8x6xf32>, %[[S:[a-z0-9]+]]: tensor<2x6xbf16>, %[[IDS:[a-z0-9]+]]: tensor<3xi32>
// CHECK-NEXT: %[[SUM:.*]] = llmc.all_reduce %[[G]] sum on "dp" size 4 : tensor<8x6xf32>
// CHECK-NEXT: %[[AVG:.*]] = llmc.all_reduce %[[G]] avg on "tp" size 2 : tensor<8x6xf32>
// CHECK-NEXT: %[[MAX:.*]] = llmc.all_reduce %[[G]] max on "pp" size 1 : tensor<8x6xf32>
// CHECK-NEXT: %[[RS:.*]] = llmc.reduce_scatter %[[G]] avg dim 0 on "dp" size 4 : tensor<8x6xf32>
// CHECK-NEXT: %[[RS1:.*]] = llmc.reduce_scatter %[[G]] sum dim 1 on "dp" size 3 : tensor<8x6xf32>
// CHECK-NEXT: %[[AG:.*]] = llmc.all_gather %[[S]] dim 0 on "dp" size 4 : tensor<2x6xbf16>
// CHECK-NEXT: %[[BC:.*]] = llmc.broadcast_from %[[IDS]] root 1 on "dp" size 2 : tensor<3xi32>
// CHECK-NEXT: return %[[SUM]], %[[AVG]], %[[MAX]], %[[RS]], %[[RS1]], %[[AG]], %[[BC]] : tensor<8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<2x6xf32>, tensor<8x2xf32>, tensor<8x6xbf16>, tensor<3xi32>
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

// Tests Megatron's f and g: copy_to_axis keeps the type, an all_reduce
// may be marked replicated.
// CHECK-LABEL: func.func @tensor_parallel_conjugates(
// CHECK-NEXT: %[[F:.*]] = llmc.copy_to_axis %{{.*}} on "tp" size 2 : tensor<2x8x16xf32>
// CHECK-NEXT: %[[G:.*]] = llmc.all_reduce %[[F]] sum on "tp" size 2 replicated : tensor<2x8x16xf32>
// CHECK-NEXT: return %[[G]]
func.func @tensor_parallel_conjugates(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %f = llmc.copy_to_axis %x on "tp" size 2 : tensor<2x8x16xf32>
  %g = llmc.all_reduce %f sum on "tp" size 2 replicated : tensor<2x8x16xf32>
  return %g : tensor<2x8x16xf32>
}

// Tests the pipeline transfers: a send's placeholder loss, the backward's
// transfers marked gradient.
// CHECK-LABEL: func.func @pipeline_transfers(
// CHECK-NEXT: %[[H:.*]] = llmc.pipeline_recv from stage 0 of 3 : tensor<2x8x16xf32>
// CHECK-NEXT: %[[Z:.*]] = llmc.pipeline_send %[[H]] to stage 2 of 3 : tensor<2x8x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[G:.*]] = llmc.pipeline_recv from stage 2 of 3 gradient : tensor<2x8x16xf32>
// CHECK-NEXT: llmc.pipeline_send %[[G]] to stage 0 of 3 gradient : tensor<2x8x16xf32> -> tensor<f32>
// CHECK-NEXT: return %[[Z]]
func.func @pipeline_transfers() -> tensor<f32> {
  %h = llmc.pipeline_recv from stage 0 of 3 : tensor<2x8x16xf32>
  %z = llmc.pipeline_send %h to stage 2 of 3 : tensor<2x8x16xf32> -> tensor<f32>
  %g = llmc.pipeline_recv from stage 2 of 3 gradient : tensor<2x8x16xf32>
  %d = llmc.pipeline_send %g to stage 0 of 3 gradient : tensor<2x8x16xf32> -> tensor<f32>
  return %z : tensor<f32>
}

// Tests that identical collectives are not merged (they are not Pure: every
// rank must issue each one).
// CHECK-LABEL: func.func @collectives_not_merged(
// CHECK: llmc.all_gather
// CHECK: llmc.all_gather
func.func @collectives_not_merged(%s: tensor<2xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = llmc.all_gather %s dim 0 on "dp" size 2 : tensor<2xf32>
  %b = llmc.all_gather %s dim 0 on "dp" size 2 : tensor<2xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
