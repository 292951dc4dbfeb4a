// RUN: llmc-opt %s --llmc-autodiff --llmc-remat=policy=none | FileCheck %s --check-prefix=NONE
// RUN: llmc-opt %s --llmc-autodiff --llmc-remat=policy=full | FileCheck %s --check-prefix=FULL
// RUN: llmc-opt %s --llmc-autodiff --llmc-remat=policy=selective | FileCheck %s --check-prefix=SEL
// RUN: llmc-opt %s --llmc-autodiff --llmc-remat="policy=budget budget-bytes=1000000" | FileCheck %s --check-prefix=LOOSE
// RUN: llmc-opt %s --llmc-autodiff --llmc-remat=policy=full --llmc-fusion | FileCheck %s --check-prefix=FUSED

// Tests llmc-remat on a two-block model (block N: layer_norm, matmul, bias,
// GELU, dropout, projection, residual add; parameters h.N.*), between an
// embedding and the logits, which use wte and belong to no block.

// Policy none stores everything: the backward reads the forward values and
// nothing is cloned.
// NONE-LABEL: func.func @grad_step(
// NONE-SAME: attributes {llmc.remat = {cloned_ops = 0 : i64, extra_flops = 0 : i64, policy = "none", recomputed_values = 0 : i64, stored_bytes = 2976 : i64}}
// NONE: %[[A1:.*]] = llmc.add %{{.*}}, %arg7
// NONE: llmc.cross_entropy_grad
// NONE-NOT: llmc.layer_norm
// NONE-NOT: llmc.gelu approximate
// NONE: llmc.gelu_grad %{{.*}}, %[[A1]]

// Policy full stores each block's input (the embedding %x0 for block 0,
// the residual %x1 for block 1) and recomputes the whole block right
// before its backward: block 1 first, then block 0. Dropout is recomputed
// with its stream, so its mask is the forward's.
// FULL-LABEL: func.func @grad_step(
// FULL-SAME: attributes {llmc.remat = {cloned_ops = 10 : i64, extra_flops = 3072 : i64, policy = "full", recomputed_values = 10 : i64, stored_bytes = 1312 : i64}}
// FULL: %[[X0:.*]] = llmc.embedding
// FULL: %[[X1:.*]] = llmc.add %[[X0]], %{{.*}} : tensor<2x4x8xf32>, tensor<2x4x8xf32>
// FULL: llmc.cross_entropy_grad
// FULL: %[[N1:.*]], %[[MEAN1:.*]], %[[RSTD1:.*]] = llmc.layer_norm %[[X1]], %arg5
// FULL-NEXT: %[[M1:.*]] = llmc.matmul %[[N1]], %arg6 {transpose_b}
// FULL-NEXT: %[[A1:.*]] = llmc.add %[[M1]], %arg7
// FULL-NEXT: %[[G1:.*]] = llmc.gelu %[[A1]]
// FULL-NEXT: %[[D1:.*]] = llmc.dropout %[[G1]] {rate = 1.000000e-01 : f32, stream = 1 : i64}
// FULL-NEXT: llmc.reshape %[[D1]]
// FULL: llmc.gelu_grad %{{.*}}, %[[A1]]
// FULL: llmc.layer_norm_grad %{{.*}}, %[[X1]], %arg5, %[[MEAN1]], %[[RSTD1]]
// FULL: %[[N0:.*]], %{{.*}}, %{{.*}} = llmc.layer_norm %[[X0]], %arg1
// FULL-NEXT: llmc.matmul %[[N0]], %arg2 {transpose_b}
// FULL: llmc.dropout %{{.*}} {rate = 1.000000e-01 : f32, stream = 0 : i64}
// FULL: llmc.layer_norm_grad %{{.*}}, %[[X0]], %arg1
// FULL-NOT: llmc.layer_norm %

// Policy selective stores the matmul outputs and recomputes the cheap ops
// after them (bias add, GELU, dropout) and the layer_norm from the stored
// block input; no matmul of the forward is recomputed.
// SEL-LABEL: func.func @grad_step(
// SEL-SAME: policy = "selective"
// SEL: %[[M1:.*]] = llmc.matmul %{{.*}}, %arg6 {transpose_b}
// SEL: llmc.cross_entropy_grad
// SEL-NOT: {transpose_b}
// SEL: %[[A1:.*]] = llmc.add %[[M1]], %arg7
// SEL-NEXT: %[[G1:.*]] = llmc.gelu %[[A1]]
// SEL-NEXT: llmc.dropout %[[G1]] {rate = 1.000000e-01 : f32, stream = 1 : i64}
// SEL-NOT: {transpose_b}
// SEL: llmc.gelu_grad %{{.*}}, %[[A1]]
// SEL-NOT: {transpose_b}
// SEL: llmc.layer_norm %
// SEL-NOT: {transpose_b}
// SEL: return

// A budget the step fits without remat recomputes nothing; the planned
// peak comes from the lowered step.
// LOOSE-LABEL: func.func @grad_step(
// LOOSE-SAME: attributes {llmc.remat = {budget_bytes = 1000000 : i64, cloned_ops = 0 : i64, extra_flops = 0 : i64, planned_peak = {{[0-9]+}} : i64, policy = "budget"

// Recomputed ops fuse like the forward ones: block 1's recomputation
// becomes a layer_norm kernel, a GEMM with the bias add as its epilogue
// (the sum is read again by gelu_grad) and a GELU and dropout kernel.
// FUSED-LABEL: func.func @grad_step(
// FUSED: llmc.fusion "matmul_add_gelu_dropout" gemm
// FUSED: llmc.fusion "cross_entropy_grad" row
// FUSED: llmc.fusion "layer_norm" row
// FUSED: llmc.fusion "matmul_add" gemm
// FUSED: llmc.fusion "gelu_dropout" pointwise
// FUSED: llmc.fusion "layer_norm_grad_add" row

module {
  func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                     %ln0: tensor<8xf32> {llmc.param = "h.0.ln.weight"},
                     %w0: tensor<8x8xf32> {llmc.param = "h.0.fc.weight"},
                     %b0: tensor<8xf32> {llmc.param = "h.0.fc.bias"},
                     %p0: tensor<8x8xf32> {llmc.param = "h.0.proj.weight"},
                     %ln1: tensor<8xf32> {llmc.param = "h.1.ln.weight"},
                     %w1: tensor<8x8xf32> {llmc.param = "h.1.fc.weight"},
                     %b1: tensor<8xf32> {llmc.param = "h.1.fc.bias"},
                     %p1: tensor<8x8xf32> {llmc.param = "h.1.proj.weight"},
                     %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                     %targets: tensor<2x4xi32> {llmc.input = "targets"}) -> tensor<f32> {
    %x0 = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
    %n0, %mean0, %rstd0 = llmc.layer_norm %x0, %ln0 {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
    %m0 = llmc.matmul %n0, %w0 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
    %a0 = llmc.add %m0, %b0 : tensor<2x4x8xf32>, tensor<8xf32>
    %g0 = llmc.gelu %a0 approximate = tanh : tensor<2x4x8xf32>
    %d0 = llmc.dropout %g0 {rate = 1.0e-1 : f32, stream = 0 : i64} : tensor<2x4x8xf32>
    %o0 = llmc.matmul %d0, %p0 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
    %x1 = llmc.add %x0, %o0 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %n1, %mean1, %rstd1 = llmc.layer_norm %x1, %ln1 {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
    %m1 = llmc.matmul %n1, %w1 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
    %a1 = llmc.add %m1, %b1 : tensor<2x4x8xf32>, tensor<8xf32>
    %g1 = llmc.gelu %a1 approximate = tanh : tensor<2x4x8xf32>
    %d1 = llmc.dropout %g1 {rate = 1.0e-1 : f32, stream = 1 : i64} : tensor<2x4x8xf32>
    %o1 = llmc.matmul %d1, %p1 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
    %x2 = llmc.add %x1, %o1 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %logits = llmc.matmul %x2, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
    %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}
