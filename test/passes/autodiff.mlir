// RUN: llmc-opt %s --split-input-file --verify-diagnostics --llmc-autodiff | FileCheck %s

// Tests the signature of @grad_step, the copy of the forward body, the
// seed %dloss, and the gradient of a matmul with the nn.Linear weight layout
// and batch dimensions: d x = g w, d w = g^T x with the batch folded into
// the rows. @forward stays as it was.
// CHECK-LABEL: func.func @forward(
// CHECK: llmc.matmul
// CHECK-NOT: llmc.reshape
// CHECK: return
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3x4xf32> {llmc.param = "x"}, %[[W:[a-z0-9]+]]: tensor<5x4xf32> {llmc.param = "w"}, %[[TOK:[a-z0-9]+]]: tensor<2x3xi32> {llmc.input = "tokens"}, %[[TGT:[a-z0-9]+]]: tensor<2x3xi32> {llmc.input = "targets"}, %[[DLOSS:[a-z0-9]+]]: tensor<f32> {llmc.input = "dloss"})
// CHECK-SAME: -> (tensor<f32> {llmc.output = "loss"}, tensor<2x3x4xf32> {llmc.output = "grad.x"}, tensor<5x4xf32> {llmc.output = "grad.w"})
// CHECK-SAME: attributes {llmc.note = "kept"}
// CHECK-NEXT: %[[Y:.*]] = llmc.matmul %[[X]], %[[W]] {transpose_b}
// CHECK-NEXT: %[[LOSS:.*]] = llmc.reduce_sum %[[Y]] dims [0, 1, 2]
// CHECK-NEXT: %[[S:.*]] = llmc.reshape %[[DLOSS]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[G:.*]] = llmc.broadcast %[[S]] : tensor<1x1x1xf32> -> tensor<2x3x5xf32>
// CHECK-NEXT: %[[DX:.*]] = llmc.matmul %[[G]], %[[W]] : tensor<2x3x5xf32>, tensor<5x4xf32>
// CHECK-NEXT: %[[X2:.*]] = llmc.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK-NEXT: %[[G2:.*]] = llmc.reshape %[[G]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK-NEXT: %[[DW:.*]] = llmc.matmul %[[G2]], %[[X2]] {transpose_a} : tensor<6x5xf32>, tensor<6x4xf32>
// CHECK-NEXT: return %[[LOSS]], %[[DX]], %[[DW]]
func.func @forward(%x: tensor<2x3x4xf32> {llmc.param = "x"}, %w: tensor<5x4xf32> {llmc.param = "w"},
                   %tokens: tensor<2x3xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x3xi32> {llmc.input = "targets"}) -> tensor<f32>
    attributes {llmc.note = "kept"} {
  %y = llmc.matmul %x, %w {transpose_b} : tensor<2x3x4xf32>, tensor<5x4xf32>
  %loss = llmc.reduce_sum %y dims [0, 1, 2] : tensor<2x3x5xf32>
  return %loss : tensor<f32>
}

// -----

// Tests matmul with transpose_a on a rank-2 and a batched left operand, and
// the accumulation of the two gradients of the shared weight.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<4x3xf32> {llmc.param = "a"}, %[[AB:[a-z0-9]+]]: tensor<2x4x3xf32> {llmc.param = "ab"}, %[[W:[a-z0-9]+]]: tensor<4x5xf32> {llmc.param = "w"}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x3x5xf32>
// CHECK: %[[GA:.*]] = llmc.reduce_sum %[[G]] dims [0] : tensor<2x3x5xf32>
// CHECK: %[[T:.*]] = llmc.matmul %[[G]], %[[W]] {transpose_b} : tensor<2x3x5xf32>, tensor<4x5xf32>
// CHECK: %[[DAB:.*]] = llmc.transpose %[[T]], [0, 2, 1] : tensor<2x3x4xf32>
// CHECK: %[[ABT:.*]] = llmc.transpose %[[AB]], [0, 2, 1] : tensor<2x4x3xf32>
// CHECK: %[[ABF:.*]] = llmc.reshape %[[ABT]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK: %[[GF:.*]] = llmc.reshape %[[G]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK: %[[DW1:.*]] = llmc.matmul %[[ABF]], %[[GF]] {transpose_a} : tensor<6x4xf32>, tensor<6x5xf32>
// CHECK: %[[T2:.*]] = llmc.matmul %[[GA]], %[[W]] {transpose_b} : tensor<3x5xf32>, tensor<4x5xf32>
// CHECK: %[[DA:.*]] = llmc.transpose %[[T2]], [1, 0] : tensor<3x4xf32>
// CHECK: %[[DW2:.*]] = llmc.matmul %[[A]], %[[GA]] : tensor<4x3xf32>, tensor<3x5xf32>
// CHECK: %[[DW:.*]] = llmc.add %[[DW1]], %[[DW2]] : tensor<4x5xf32>, tensor<4x5xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DAB]], %[[DW]]
func.func @forward(%a: tensor<4x3xf32> {llmc.param = "a"}, %ab: tensor<2x4x3xf32> {llmc.param = "ab"}, %w: tensor<4x5xf32> {llmc.param = "w"}) -> tensor<f32> {
  %y = llmc.matmul %a, %w {transpose_a} : tensor<4x3xf32>, tensor<4x5xf32>
  %yb = llmc.matmul %ab, %w {transpose_a} : tensor<2x4x3xf32>, tensor<4x5xf32>
  %s = llmc.add %yb, %y : tensor<2x3x5xf32>, tensor<3x5xf32>
  %loss = llmc.reduce_sum %s dims [0, 1, 2] : tensor<2x3x5xf32>
  return %loss : tensor<f32>
}

// -----

// Tests matmul with both transpose flags on rank-2 operands.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<4x3xf32> {llmc.param = "a"}, %[[W:[a-z0-9]+]]: tensor<5x4xf32> {llmc.param = "w"}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<3x5xf32>
// CHECK: %[[T:.*]] = llmc.matmul %[[G]], %[[W]] : tensor<3x5xf32>, tensor<5x4xf32>
// CHECK: %[[DA:.*]] = llmc.transpose %[[T]], [1, 0] : tensor<3x4xf32>
// CHECK: %[[DW:.*]] = llmc.matmul %[[G]], %[[A]] {transpose_a, transpose_b} : tensor<3x5xf32>, tensor<4x3xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DW]]
func.func @forward(%a: tensor<4x3xf32> {llmc.param = "a"}, %w: tensor<5x4xf32> {llmc.param = "w"}) -> tensor<f32> {
  %y = llmc.matmul %a, %w {transpose_a, transpose_b} : tensor<4x3xf32>, tensor<5x4xf32>
  %loss = llmc.reduce_sum %y dims [0, 1] : tensor<3x5xf32>
  return %loss : tensor<f32>
}

// -----

// Tests batch_matmul: without flags, and with transpose_b as attention
// scores use it.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x3x4xf32> {llmc.param = "q"}, %[[K:[a-z0-9]+]]: tensor<2x5x4xf32> {llmc.param = "k"}, %[[V:[a-z0-9]+]]: tensor<2x5x6xf32> {llmc.param = "v"}
// CHECK: %[[S:.*]] = llmc.batch_matmul %[[Q]], %[[K]] {transpose_b}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x3x6xf32>
// CHECK: %[[DS:.*]] = llmc.batch_matmul %[[G]], %[[V]] {transpose_b} : tensor<2x3x6xf32>, tensor<2x5x6xf32>
// CHECK: %[[DV:.*]] = llmc.batch_matmul %[[S]], %[[G]] {transpose_a} : tensor<2x3x5xf32>, tensor<2x3x6xf32>
// CHECK: %[[DQ:.*]] = llmc.batch_matmul %[[DS]], %[[K]] : tensor<2x3x5xf32>, tensor<2x5x4xf32>
// CHECK: %[[DK:.*]] = llmc.batch_matmul %[[DS]], %[[Q]] {transpose_a} : tensor<2x3x5xf32>, tensor<2x3x4xf32>
// CHECK: return %{{.*}}, %[[DQ]], %[[DK]], %[[DV]]
func.func @forward(%q: tensor<2x3x4xf32> {llmc.param = "q"}, %k: tensor<2x5x4xf32> {llmc.param = "k"}, %v: tensor<2x5x6xf32> {llmc.param = "v"}) -> tensor<f32> {
  %s = llmc.batch_matmul %q, %k {transpose_b} : tensor<2x3x4xf32>, tensor<2x5x4xf32>
  %o = llmc.batch_matmul %s, %v : tensor<2x3x5xf32>, tensor<2x5x6xf32>
  %loss = llmc.reduce_sum %o dims [0, 1, 2] : tensor<2x3x6xf32>
  return %loss : tensor<f32>
}

// -----

// Tests batch_matmul with transpose_a.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<2x4x3xf32> {llmc.param = "a"}, %[[B:[a-z0-9]+]]: tensor<2x4x5xf32> {llmc.param = "b"}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x3x5xf32>
// CHECK: %[[DA:.*]] = llmc.batch_matmul %[[B]], %[[G]] {transpose_b} : tensor<2x4x5xf32>, tensor<2x3x5xf32>
// CHECK: %[[DB:.*]] = llmc.batch_matmul %[[A]], %[[G]] : tensor<2x4x3xf32>, tensor<2x3x5xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @forward(%a: tensor<2x4x3xf32> {llmc.param = "a"}, %b: tensor<2x4x5xf32> {llmc.param = "b"}) -> tensor<f32> {
  %s = llmc.batch_matmul %a, %b {transpose_a} : tensor<2x4x3xf32>, tensor<2x4x5xf32>
  %loss = llmc.reduce_sum %s dims [0, 1, 2] : tensor<2x3x5xf32>
  return %loss : tensor<f32>
}

// -----

// Tests add and sub with broadcasting: the gradient of a broadcast operand
// is summed over the stretched dimensions (a missing leading one, a size-1
// one) and reshaped to the operand.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3xf32> {llmc.param = "x"}, %[[B:[a-z0-9]+]]: tensor<3xf32> {llmc.param = "b"}, %[[C:[a-z0-9]+]]: tensor<2x1xf32> {llmc.param = "c"}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x3xf32>
// CHECK: %[[NG:.*]] = llmc.neg %[[G]] : tensor<2x3xf32>
// CHECK: %[[DC0:.*]] = llmc.reduce_sum %[[NG]] dims [1] : tensor<2x3xf32>
// CHECK: %[[DC:.*]] = llmc.reshape %[[DC0]] : tensor<2xf32> -> tensor<2x1xf32>
// CHECK: %[[DB:.*]] = llmc.reduce_sum %[[G]] dims [0] : tensor<2x3xf32>
// CHECK-NOT: llmc.reshape
// CHECK: return %{{.*}}, %[[G]], %[[DB]], %[[DC]]
func.func @forward(%x: tensor<2x3xf32> {llmc.param = "x"}, %b: tensor<3xf32> {llmc.param = "b"}, %c: tensor<2x1xf32> {llmc.param = "c"}) -> tensor<f32> {
  %y = llmc.add %x, %b : tensor<2x3xf32>, tensor<3xf32>
  %z = llmc.sub %y, %c : tensor<2x3xf32>, tensor<2x1xf32>
  %loss = llmc.reduce_sum %z dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}

// -----

// Tests mul and div, both operands differentiated, and the broadcast rhs
// of div reduced back to its shape.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3xf32> {llmc.param = "x"}, %[[Y:[a-z0-9]+]]: tensor<2x3xf32> {llmc.param = "y"}, %[[D:[a-z0-9]+]]: tensor<3xf32> {llmc.param = "d"}
// CHECK: %[[P:.*]] = llmc.mul %[[X]], %[[Y]]
// CHECK: %[[Q:.*]] = llmc.div %[[P]], %[[D]]
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x3xf32>
// CHECK: %[[DP:.*]] = llmc.div %[[G]], %[[D]] : tensor<2x3xf32>, tensor<3xf32>
// CHECK: %[[GQ:.*]] = llmc.mul %[[G]], %[[Q]] : tensor<2x3xf32>, tensor<2x3xf32>
// CHECK: %[[GQD:.*]] = llmc.div %[[GQ]], %[[D]] : tensor<2x3xf32>, tensor<3xf32>
// CHECK: %[[NEG:.*]] = llmc.neg %[[GQD]] : tensor<2x3xf32>
// CHECK: %[[DD:.*]] = llmc.reduce_sum %[[NEG]] dims [0] : tensor<2x3xf32>
// CHECK: %[[DX:.*]] = llmc.mul %[[DP]], %[[Y]] : tensor<2x3xf32>, tensor<2x3xf32>
// CHECK: %[[DY:.*]] = llmc.mul %[[DP]], %[[X]] : tensor<2x3xf32>, tensor<2x3xf32>
// CHECK: return %{{.*}}, %[[DX]], %[[DY]], %[[DD]]
func.func @forward(%x: tensor<2x3xf32> {llmc.param = "x"}, %y: tensor<2x3xf32> {llmc.param = "y"}, %d: tensor<3xf32> {llmc.param = "d"}) -> tensor<f32> {
  %p = llmc.mul %x, %y : tensor<2x3xf32>, tensor<2x3xf32>
  %q = llmc.div %p, %d : tensor<2x3xf32>, tensor<3xf32>
  %loss = llmc.reduce_sum %q dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}

// -----

// Tests max: relu_grad of lhs - rhs selects where lhs wins, the rest goes
// to rhs (ties too), and rhs, broadcast, is reduced.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3xf32> {llmc.param = "x"}, %[[T:[a-z0-9]+]]: tensor<3xf32> {llmc.param = "t"}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x3xf32>
// CHECK: %[[DIFF:.*]] = llmc.sub %[[X]], %[[T]] : tensor<2x3xf32>, tensor<3xf32>
// CHECK: %[[DX:.*]] = llmc.relu_grad %[[G]], %[[DIFF]] : tensor<2x3xf32>
// CHECK: %[[REST:.*]] = llmc.sub %[[G]], %[[DX]] : tensor<2x3xf32>, tensor<2x3xf32>
// CHECK: %[[DT:.*]] = llmc.reduce_sum %[[REST]] dims [0] : tensor<2x3xf32>
// CHECK: return %{{.*}}, %[[DX]], %[[DT]]
func.func @forward(%x: tensor<2x3xf32> {llmc.param = "x"}, %t: tensor<3xf32> {llmc.param = "t"}) -> tensor<f32> {
  %m = llmc.max %x, %t : tensor<2x3xf32>, tensor<3xf32>
  %loss = llmc.reduce_sum %m dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}

// -----

// Tests the unary rules, last op first: neg, exp (times the result), log
// (over the input), tanh (g - g y y), sqrt (g / 2 / y), rsqrt
// (-g / 2 * y^3).
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4xf32> {llmc.param = "x"}
// CHECK: %[[A:.*]] = llmc.rsqrt %[[X]]
// CHECK: %[[B:.*]] = llmc.sqrt %[[A]]
// CHECK: %[[C:.*]] = llmc.tanh %[[B]]
// CHECK: %[[D:.*]] = llmc.log %[[C]]
// CHECK: %[[E:.*]] = llmc.exp %[[D]]
// CHECK: %[[F:.*]] = llmc.neg %[[E]]
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<4xf32>
// CHECK: %[[GE:.*]] = llmc.neg %[[G]]
// CHECK: %[[GD:.*]] = llmc.mul %[[GE]], %[[E]]
// CHECK: %[[GC:.*]] = llmc.div %[[GD]], %[[C]]
// CHECK: %[[T1:.*]] = llmc.mul %[[GC]], %[[C]]
// CHECK: %[[T2:.*]] = llmc.mul %[[T1]], %[[C]]
// CHECK: %[[GB:.*]] = llmc.sub %[[GC]], %[[T2]]
// CHECK: %[[HALF:.*]] = llmc.fill 5.000000e-01 : tensor<f32>
// CHECK: %[[S1:.*]] = llmc.mul %[[GB]], %[[HALF]] : tensor<4xf32>, tensor<f32>
// CHECK: %[[GA:.*]] = llmc.div %[[S1]], %[[B]]
// CHECK: %[[MHALF:.*]] = llmc.fill -5.000000e-01 : tensor<f32>
// CHECK: %[[Y2:.*]] = llmc.mul %[[A]], %[[A]]
// CHECK: %[[Y3:.*]] = llmc.mul %[[Y2]], %[[A]]
// CHECK: %[[R1:.*]] = llmc.mul %[[GA]], %[[MHALF]]
// CHECK: %[[GX:.*]] = llmc.mul %[[R1]], %[[Y3]]
// CHECK: return %{{.*}}, %[[GX]]
func.func @forward(%x: tensor<4xf32> {llmc.param = "x"}) -> tensor<f32> {
  %a = llmc.rsqrt %x : tensor<4xf32>
  %b = llmc.sqrt %a : tensor<4xf32>
  %c = llmc.tanh %b : tensor<4xf32>
  %d = llmc.log %c : tensor<4xf32>
  %e = llmc.exp %d : tensor<4xf32>
  %f = llmc.neg %e : tensor<4xf32>
  %loss = llmc.reduce_sum %f dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests the activations: relu_grad, silu_grad and gelu_grad with the
// forward op's approximation, each on the op's input.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4xf32> {llmc.param = "x"}
// CHECK: %[[A:.*]] = llmc.relu %[[X]]
// CHECK: %[[B:.*]] = llmc.silu %[[A]]
// CHECK: %[[C:.*]] = llmc.gelu %[[B]] approximate = tanh
// CHECK: %[[D:.*]] = llmc.gelu %[[C]] approximate = none
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<4xf32>
// CHECK: %[[GC:.*]] = llmc.gelu_grad %[[G]], %[[C]] approximate = none
// CHECK: %[[GB:.*]] = llmc.gelu_grad %[[GC]], %[[B]] approximate = tanh
// CHECK: %[[GA:.*]] = llmc.silu_grad %[[GB]], %[[A]]
// CHECK: %[[GX:.*]] = llmc.relu_grad %[[GA]], %[[X]]
// CHECK: return %{{.*}}, %[[GX]]
func.func @forward(%x: tensor<4xf32> {llmc.param = "x"}) -> tensor<f32> {
  %a = llmc.relu %x : tensor<4xf32>
  %b = llmc.silu %a : tensor<4xf32>
  %c = llmc.gelu %b approximate = tanh : tensor<4xf32>
  %d = llmc.gelu %c approximate = none : tensor<4xf32>
  %loss = llmc.reduce_sum %d dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests cast (the gradient casts back) and dropout (the same rate and
// stream on the gradient, so the same mask).
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32> {llmc.param = "x"}
// CHECK: %[[H:.*]] = llmc.cast %[[X]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[D:.*]] = llmc.dropout %[[H]] {rate = 1.000000e-01 : f32, stream = 7 : i64} : tensor<4x8xbf16>
// CHECK: %[[F:.*]] = llmc.cast %[[D]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<4x8xf32>
// CHECK: %[[GD:.*]] = llmc.cast %[[G]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[GH:.*]] = llmc.dropout %[[GD]] {rate = 1.000000e-01 : f32, stream = 7 : i64} : tensor<4x8xbf16>
// CHECK: %[[GX:.*]] = llmc.cast %[[GH]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: return %{{.*}}, %[[GX]]
func.func @forward(%x: tensor<4x8xf32> {llmc.param = "x"}) -> tensor<f32> {
  %h = llmc.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %d = llmc.dropout %h {rate = 0.1 : f32, stream = 7 : i64} : tensor<4x8xbf16>
  %f = llmc.cast %d : tensor<4x8xbf16> -> tensor<4x8xf32>
  %loss = llmc.reduce_sum %f dims [0, 1] : tensor<4x8xf32>
  return %loss : tensor<f32>
}

// -----

// Tests layer_norm with and without bias: layer_norm_grad reuses the saved
// mean and rstd; without a bias its bias gradient is dropped.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x8xf32> {llmc.param = "x"}, %[[W:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "w"}, %[[B:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "b"}
// CHECK: %[[Y:.*]], %[[M:.*]], %[[R:.*]] = llmc.layer_norm %[[X]], %[[W]], %[[B]]
// CHECK: %[[Z:.*]], %[[M2:.*]], %[[R2:.*]] = llmc.layer_norm %[[Y]], %[[W]] {
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x8xf32>
// CHECK: %[[DY:.*]], %[[DW2:.*]], %{{.*}} = llmc.layer_norm_grad %[[G]], %[[Y]], %[[W]], %[[M2]], %[[R2]]
// CHECK: %[[DX:.*]], %[[DW1:.*]], %[[DB:.*]] = llmc.layer_norm_grad %[[DY]], %[[X]], %[[W]], %[[M]], %[[R]]
// CHECK: %[[DW:.*]] = llmc.add %[[DW2]], %[[DW1]]
// CHECK: return %{{.*}}, %[[DX]], %[[DW]], %[[DB]]
func.func @forward(%x: tensor<2x8xf32> {llmc.param = "x"}, %w: tensor<8xf32> {llmc.param = "w"}, %b: tensor<8xf32> {llmc.param = "b"}) -> tensor<f32> {
  %y, %mean, %rstd = llmc.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32} : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>
  %z, %mean2, %rstd2 = llmc.layer_norm %y, %w {epsilon = 1.0e-5 : f32} : tensor<2x8xf32>, tensor<8xf32>
  %loss = llmc.reduce_sum %z dims [0, 1] : tensor<2x8xf32>
  return %loss : tensor<f32>
}

// -----

// Tests rms_norm and softmax: rms_norm_grad with the saved rstd,
// softmax_grad from the softmax output.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x8xf32> {llmc.param = "x"}, %[[W:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "w"}
// CHECK: %[[Y:.*]], %[[R:.*]] = llmc.rms_norm %[[X]], %[[W]]
// CHECK: %[[P:.*]] = llmc.softmax %[[Y]]
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x8xf32>
// CHECK: %[[DY:.*]] = llmc.softmax_grad %[[G]], %[[P]] : tensor<2x8xf32>
// CHECK: %[[DX:.*]], %[[DW:.*]] = llmc.rms_norm_grad %[[DY]], %[[X]], %[[W]], %[[R]]
// CHECK: return %{{.*}}, %[[DX]], %[[DW]]
func.func @forward(%x: tensor<2x8xf32> {llmc.param = "x"}, %w: tensor<8xf32> {llmc.param = "w"}) -> tensor<f32> {
  %y, %rstd = llmc.rms_norm %x, %w {epsilon = 1.0e-6 : f32} : tensor<2x8xf32>, tensor<8xf32>
  %p = llmc.softmax %y : tensor<2x8xf32>
  %loss = llmc.reduce_sum %p dims [0, 1] : tensor<2x8xf32>
  return %loss : tensor<f32>
}

// -----

// Tests attention (attention_grad with the saved output and lse, the
// forward's scale and causal flag) and rotary (the inverse rotation).
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x5x4xf32> {llmc.param = "q"}, %[[K:[a-z0-9]+]]: tensor<2x5x4xf32> {llmc.param = "k"}, %[[V:[a-z0-9]+]]: tensor<2x5x6xf32> {llmc.param = "v"}
// CHECK: %[[QR:.*]] = llmc.rotary %[[Q]] {theta = 1.000000e+04 : f32}
// CHECK: %[[O:.*]], %[[LSE:.*]] = llmc.attention %[[QR]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f32}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x5x6xf32>
// CHECK: %[[DQR:.*]], %[[DK:.*]], %[[DV:.*]] = llmc.attention_grad %[[G]], %[[QR]], %[[K]], %[[V]], %[[O]], %[[LSE]] {causal, scale = 5.000000e-01 : f32}
// CHECK: %[[DQ:.*]] = llmc.rotary %[[DQR]] {inverse, theta = 1.000000e+04 : f32}
// CHECK: return %{{.*}}, %[[DQ]], %[[DK]], %[[DV]]
func.func @forward(%q: tensor<2x5x4xf32> {llmc.param = "q"}, %k: tensor<2x5x4xf32> {llmc.param = "k"}, %v: tensor<2x5x6xf32> {llmc.param = "v"}) -> tensor<f32> {
  %qr = llmc.rotary %q {theta = 1.0e4 : f32} : tensor<2x5x4xf32>
  %o, %lse = llmc.attention %qr, %k, %v {causal, scale = 0.5 : f32} : tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x6xf32>
  %loss = llmc.reduce_sum %o dims [0, 1, 2] : tensor<2x5x6xf32>
  return %loss : tensor<f32>
}

// -----

// Tests a tiny language model: embedding_grad scatters into the table,
// cross_entropy_grad starts from %dloss with the saved lse, the tied table
// accumulates both of its gradients, the ids get none, the logits result
// of @forward is not returned, and the unused parameter gets zeros.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xf32> {llmc.param = "wte"}, %[[UNUSED:[a-z0-9]+]]: tensor<3x8xf32> {llmc.param = "unused"}, %[[TOK:[a-z0-9]+]]: tensor<2x4xi32> {llmc.input = "tokens"}, %[[TGT:[a-z0-9]+]]: tensor<2x4xi32> {llmc.input = "targets"}, %[[DLOSS:[a-z0-9]+]]: tensor<f32> {llmc.input = "dloss"})
// CHECK-SAME: -> (tensor<f32> {llmc.output = "loss"}, tensor<16x8xf32> {llmc.output = "grad.wte"}, tensor<3x8xf32> {llmc.output = "grad.unused"})
// CHECK: %[[X:.*]] = llmc.embedding %[[WTE]], %[[TOK]]
// CHECK: %[[L:.*]] = llmc.matmul %[[X]], %[[WTE]] {transpose_b}
// CHECK: %[[LOSS:.*]], %[[LSE:.*]] = llmc.cross_entropy %[[L]], %[[TGT]]
// CHECK: %[[DL:.*]] = llmc.cross_entropy_grad %[[DLOSS]], %[[L]], %[[TGT]], %[[LSE]]
// CHECK: %[[DX:.*]] = llmc.matmul %[[DL]], %[[WTE]] : tensor<2x4x16xf32>, tensor<16x8xf32>
// CHECK: %[[DW1:.*]] = llmc.matmul %{{.*}}, %{{.*}} {transpose_a} : tensor<8x16xf32>, tensor<8x8xf32>
// CHECK: %[[DW2:.*]] = llmc.embedding_grad %[[DX]], %[[TOK]] : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
// CHECK: %[[DW:.*]] = llmc.add %[[DW1]], %[[DW2]]
// CHECK: %[[ZERO:.*]] = llmc.fill 0.000000e+00 : tensor<3x8xf32>
// CHECK: return %[[LOSS]], %[[DW]], %[[ZERO]] : tensor<f32>, tensor<16x8xf32>, tensor<3x8xf32>
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"}, %unused: tensor<3x8xf32> {llmc.param = "unused"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"}) -> (tensor<f32>, tensor<2x4x16xf32>) {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss, %logits : tensor<f32>, tensor<2x4x16xf32>
}

// -----

// Tests reshape and transpose (the inverse permutation), slice (the block
// padded with zero fills, one concat per cut dimension, when the slices of
// a value cut different dimensions) and concat (slices of the gradient),
// and fan-out: the two slices of %x add up.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x6xf32> {llmc.param = "x"}
// CHECK: %[[S1:.*]] = llmc.slice %[[X]] offsets [1, 0] sizes [2, 6]
// CHECK: %[[S2:.*]] = llmc.slice %[[X]] offsets [0, 2] sizes [4, 3]
// CHECK: %[[R:.*]] = llmc.reshape %[[S1]] : tensor<2x6xf32> -> tensor<3x4xf32>
// CHECK: %[[T:.*]] = llmc.transpose %[[R]], [1, 0] : tensor<3x4xf32>
// CHECK: %[[C:.*]] = llmc.concat %[[T]], %[[S2]] dim 1 : tensor<4x3xf32>, tensor<4x3xf32>
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<4x6xf32>
// CHECK: %[[GT:.*]] = llmc.slice %[[G]] offsets [0, 0] sizes [4, 3]
// CHECK: %[[GS2:.*]] = llmc.slice %[[G]] offsets [0, 3] sizes [4, 3]
// CHECK: %[[GR:.*]] = llmc.transpose %[[GT]], [1, 0] : tensor<4x3xf32>
// CHECK: %[[GS1:.*]] = llmc.reshape %[[GR]] : tensor<3x4xf32> -> tensor<2x6xf32>
// CHECK: %[[Z0:.*]] = llmc.fill 0.000000e+00 : tensor<4x2xf32>
// CHECK: %[[Z1:.*]] = llmc.fill 0.000000e+00 : tensor<4x1xf32>
// CHECK: %[[P2:.*]] = llmc.concat %[[Z0]], %[[GS2]], %[[Z1]] dim 1 : tensor<4x2xf32>, tensor<4x3xf32>, tensor<4x1xf32>
// CHECK: %[[Z2:.*]] = llmc.fill 0.000000e+00 : tensor<1x6xf32>
// CHECK: %[[Z3:.*]] = llmc.fill 0.000000e+00 : tensor<1x6xf32>
// CHECK: %[[P1:.*]] = llmc.concat %[[Z2]], %[[GS1]], %[[Z3]] dim 0 : tensor<1x6xf32>, tensor<2x6xf32>, tensor<1x6xf32>
// CHECK: %[[GX:.*]] = llmc.add %[[P2]], %[[P1]] : tensor<4x6xf32>, tensor<4x6xf32>
// CHECK: return %{{.*}}, %[[GX]]
func.func @forward(%x: tensor<4x6xf32> {llmc.param = "x"}) -> tensor<f32> {
  %s1 = llmc.slice %x offsets [1, 0] sizes [2, 6] : tensor<4x6xf32>
  %s2 = llmc.slice %x offsets [0, 2] sizes [4, 3] : tensor<4x6xf32>
  %r = llmc.reshape %s1 : tensor<2x6xf32> -> tensor<3x4xf32>
  %t = llmc.transpose %r, [1, 0] : tensor<3x4xf32>
  %c = llmc.concat %t, %s2 dim 1 : tensor<4x3xf32>, tensor<4x3xf32>
  %loss = llmc.reduce_sum %c dims [0, 1] : tensor<4x6xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that slices cutting one dimension into disjoint blocks (a q/k/v
// split, here with a gap and out of order) get one concat for their
// gradients, with a zero fill in the gap, and no adds.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x9xf32> {llmc.param = "x"}
// CHECK: %[[GB:.*]] = llmc.broadcast %{{.*}} -> tensor<2x4xf32>
// CHECK: %[[GA:.*]] = llmc.broadcast %{{.*}} -> tensor<2x3xf32>
// CHECK: %[[Z:.*]] = llmc.fill 0.000000e+00 : tensor<2x2xf32>
// CHECK-NEXT: %[[GX:.*]] = llmc.concat %[[GA]], %[[Z]], %[[GB]] dim 1 : tensor<2x3xf32>, tensor<2x2xf32>, tensor<2x4xf32>
// CHECK-NOT: llmc.add
// CHECK: return %{{.*}}, %[[GX]]
func.func @forward(%x: tensor<2x9xf32> {llmc.param = "x"}) -> tensor<f32> {
  %b = llmc.slice %x offsets [0, 5] sizes [2, 4] : tensor<2x9xf32>
  %a = llmc.slice %x offsets [0, 0] sizes [2, 3] : tensor<2x9xf32>
  %sa = llmc.reduce_sum %a dims [0, 1] : tensor<2x3xf32>
  %sb = llmc.reduce_sum %b dims [0, 1] : tensor<2x4xf32>
  %loss = llmc.add %sa, %sb : tensor<f32>, tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests broadcast (reduced back) and the reductions: reduce_sum and
// reduce_mean broadcast the gradient back (mean scaled by 1/count);
// reduce_max sends it to the maxima, split between ties.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<3x4xf32> {llmc.param = "x"}
// CHECK: %[[B:.*]] = llmc.broadcast %[[X]] : tensor<3x4xf32> -> tensor<2x3x4xf32>
// CHECK: %[[M:.*]] = llmc.reduce_max %[[B]] dims [2] : tensor<2x3x4xf32>
// CHECK: %[[A:.*]] = llmc.reduce_mean %[[M]] dims [1] keep_dims : tensor<2x3xf32>
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<2x1xf32>
// CHECK: %[[SCALE:.*]] = llmc.fill 0.33333333333333331 : tensor<f32>
// CHECK: %[[GS:.*]] = llmc.mul %[[G]], %[[SCALE]] : tensor<2x1xf32>, tensor<f32>
// CHECK: %[[GM:.*]] = llmc.broadcast %[[GS]] : tensor<2x1xf32> -> tensor<2x3xf32>
// CHECK: %[[GK:.*]] = llmc.reshape %[[GM]] : tensor<2x3xf32> -> tensor<2x3x1xf32>
// CHECK: %[[MK:.*]] = llmc.reshape %[[M]] : tensor<2x3xf32> -> tensor<2x3x1xf32>
// CHECK: %[[ONES:.*]] = llmc.fill 1.000000e+00 : tensor<2x3x4xf32>
// CHECK: %[[D:.*]] = llmc.sub %[[MK]], %[[B]] : tensor<2x3x1xf32>, tensor<2x3x4xf32>
// CHECK: %[[BELOW:.*]] = llmc.relu_grad %[[ONES]], %[[D]] : tensor<2x3x4xf32>
// CHECK: %[[IS:.*]] = llmc.sub %[[ONES]], %[[BELOW]]
// CHECK: %[[N:.*]] = llmc.reduce_sum %[[IS]] dims [2] keep_dims : tensor<2x3x4xf32>
// CHECK: %[[SH:.*]] = llmc.div %[[GK]], %[[N]] : tensor<2x3x1xf32>, tensor<2x3x1xf32>
// CHECK: %[[GB:.*]] = llmc.mul %[[IS]], %[[SH]] : tensor<2x3x4xf32>, tensor<2x3x1xf32>
// CHECK: %[[GX:.*]] = llmc.reduce_sum %[[GB]] dims [0] : tensor<2x3x4xf32>
// CHECK: return %{{.*}}, %[[GX]]
func.func @forward(%x: tensor<3x4xf32> {llmc.param = "x"}) -> tensor<f32> {
  %b = llmc.broadcast %x : tensor<3x4xf32> -> tensor<2x3x4xf32>
  %m = llmc.reduce_max %b dims [2] : tensor<2x3x4xf32>
  %a = llmc.reduce_mean %m dims [1] keep_dims : tensor<2x3xf32>
  %loss = llmc.reduce_sum %a dims [0, 1] : tensor<2x1xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that values that depend on no parameter get no gradient: the
// constant's and the fill's branches build nothing.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4xf32> {llmc.param = "x"}
// CHECK: %[[G:.*]] = llmc.broadcast %{{.*}} -> tensor<4xf32>
// CHECK-NEXT: %[[GX:.*]] = llmc.mul %[[G]], %{{.*}} : tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT: return %{{.*}}, %[[GX]]
func.func @forward(%x: tensor<4xf32> {llmc.param = "x"}) -> tensor<f32> {
  %c = llmc.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %f = llmc.fill 2.0 : tensor<4xf32>
  %e = llmc.exp %c : tensor<4xf32>
  %s = llmc.add %e, %f : tensor<4xf32>, tensor<4xf32>
  %y = llmc.mul %x, %s : tensor<4xf32>, tensor<4xf32>
  %loss = llmc.reduce_sum %y dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that a module without @forward is rejected.
// expected-error @+1 {{module has no @forward function with a body to differentiate}}
module {
  func.func @model(%x: tensor<4xf32>) -> tensor<f32> {
    %loss = llmc.reduce_sum %x dims [0] : tensor<4xf32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that an op without a VJP rule on the gradient path is rejected.
func.func @forward(%x: tensor<4xf32> {llmc.param = "x"}, %g: tensor<4xf32>) -> tensor<f32> {
  // expected-error @+1 {{'llmc.relu_grad' op has no VJP rule, so llmc-autodiff cannot differentiate @forward through it}}
  %y = llmc.relu_grad %g, %x : tensor<4xf32>
  %loss = llmc.reduce_sum %y dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that a gradient flowing into a saved statistic is rejected.
func.func @forward(%x: tensor<2x8xf32> {llmc.param = "x"}, %w: tensor<8xf32> {llmc.param = "w"}) -> tensor<f32> {
  // expected-error @+1 {{'llmc.rms_norm' op cannot be differentiated through result #1, a statistic saved for the backward pass}}
  %y, %rstd = llmc.rms_norm %x, %w {epsilon = 1.0e-6 : f32} : tensor<2x8xf32>, tensor<8xf32>
  %loss = llmc.reduce_sum %rstd dims [0] : tensor<2xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that @forward must return the loss first.
// expected-error @+1 {{@forward must return the loss as its first result, a tensor<f32>; got 'tensor<4xf32>'}}
func.func @forward(%x: tensor<4xf32> {llmc.param = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Tests that a module that already has @grad_step is rejected.
func.func @forward(%x: tensor<4xf32> {llmc.param = "x"}) -> tensor<f32> {
  %loss = llmc.reduce_sum %x dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}
// expected-error @+1 {{module already has a @grad_step; llmc-autodiff adds it}}
func.func @grad_step(%x: tensor<4xf32>) -> tensor<f32> {
  %loss = llmc.reduce_sum %x dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that a parameter must be a float tensor.
// expected-error @+1 {{parameter 'ids' must be a float tensor to have a gradient, got 'tensor<4xi32>'}}
func.func @forward(%x: tensor<4xf32> {llmc.param = "x"}, %ids: tensor<4xi32> {llmc.param = "ids"}) -> tensor<f32> {
  %loss = llmc.reduce_sum %x dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests the collectives' rules (SPMD: the objective sums every rank's
// loss): all_gather's gradient is a reduce_scatter (sum) of the gathered
// gradient, reduce_scatter (avg)'s an all_gather scaled by 1/size, and
// all_reduce (sum)'s an all_reduce (sum).
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[P:[a-z0-9]+]]: tensor<2x3xf32> {llmc.param = "p"}
// CHECK: %[[G:.*]] = llmc.all_gather %[[P]] dim 0 on "dp" size 4 : tensor<2x3xf32>
// CHECK: %[[R:.*]] = llmc.all_reduce %[[G]] sum on "dp" size 4 : tensor<8x3xf32>
// CHECK: %[[S:.*]] = llmc.reduce_scatter %[[R]] avg dim 1 on "dp" size 3 : tensor<8x3xf32>
// CHECK: %[[DS:.*]] = llmc.broadcast
// CHECK: %[[DSG:.*]] = llmc.all_gather %[[DS]] dim 1 on "dp" size 3 : tensor<8x1xf32>
// CHECK: %[[DR:.*]] = llmc.mul %[[DSG]], %{{.*}} : tensor<8x3xf32>, tensor<f32>
// CHECK: %[[DG:.*]] = llmc.all_reduce %[[DR]] sum on "dp" size 4 : tensor<8x3xf32>
// CHECK: %[[DP:.*]] = llmc.reduce_scatter %[[DG]] sum dim 0 on "dp" size 4 : tensor<8x3xf32>
// CHECK: return %{{.*}}, %[[DP]]
func.func @forward(%p: tensor<2x3xf32> {llmc.param = "p"},
                   %tokens: tensor<2x3xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x3xi32> {llmc.input = "targets"}) -> tensor<f32> {
  %g = llmc.all_gather %p dim 0 on "dp" size 4 : tensor<2x3xf32>
  %r = llmc.all_reduce %g sum on "dp" size 4 : tensor<8x3xf32>
  %s = llmc.reduce_scatter %r avg dim 1 on "dp" size 3 : tensor<8x3xf32>
  %loss = llmc.reduce_sum %s dims [0, 1] : tensor<8x1xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that an all_reduce max has no gradient.
func.func @forward(%p: tensor<2x3xf32> {llmc.param = "p"},
                   %tokens: tensor<2x3xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x3xi32> {llmc.input = "targets"}) -> tensor<f32> {
  // expected-error @+1 {{'llmc.all_reduce' op has no gradient rule for a maximum}}
  %r = llmc.all_reduce %p max on "dp" size 4 : tensor<2x3xf32>
  %loss = llmc.reduce_sum %r dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}
