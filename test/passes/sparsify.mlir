// RUN: llmc-opt %s --split-input-file --llmc-autodiff --llmc-optimizer --llmc-sparsify | FileCheck %s
// RUN: llmc-opt %s --split-input-file --llmc-amp=precision=fp16 --llmc-autodiff --llmc-optimizer="optimizer=sgd nesterov=true" --llmc-loss-scaling --llmc-sparsify --llmc-remat=policy=full | FileCheck %s --check-prefix=FP16
// RUN: llmc-opt %s --split-input-file --llmc-autodiff --llmc-optimizer --llmc-sparsify="params=h.*.mlp.*" | FileCheck %s --check-prefix=PICK

// A one-block GPT-2 (`llmc emit-model`: n_embd 8, 4 heads of the 8x8
// projections, a 32-wide MLP, wte tied to the classifier).

// Tests the default selection (the four matmul weights of block 0, not wte
// though the classifier reads it, nor the norms and biases), the masks as
// states starting at 1, and that every read of a weight in @forward and in
// @grad_step (the forward matmul with transpose_b, the backward's without)
// is the one masked product.
// CHECK: llmc.sparsity = {params = ["h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight", "h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight"], pattern = "2:4"}
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[FW:arg4]]: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}
// CHECK-SAME: %[[FM:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "sparsity_mask.h.0.attn.c_attn.weight", llmc.state_init = 1.000000e+00 : f64}
// CHECK-SAME: {llmc.state = "sparsity_mask.h.0.attn.c_proj.weight", llmc.state_init = 1.000000e+00 : f64}
// CHECK-SAME: {llmc.state = "sparsity_mask.h.0.mlp.c_fc.weight", llmc.state_init = 1.000000e+00 : f64}
// CHECK-SAME: {llmc.state = "sparsity_mask.h.0.mlp.c_proj.weight", llmc.state_init = 1.000000e+00 : f64}
// CHECK-SAME: {llmc.input = "tokens"}
// CHECK-NEXT: %[[FMW:.*]] = llmc.mul %[[FW]], %[[FM]] : tensor<24x8xf32>, tensor<24x8xf32>
// CHECK-NOT: %[[FW]]{{[^0-9]}}
// CHECK: llmc.matmul %{{.*}}, %[[FMW]] {transpose_b}
// CHECK: llmc.matmul %{{.*}}, %arg0 {transpose_b}
// CHECK: return
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[W:arg4]]: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "sparsity_mask.h.0.attn.c_attn.weight", llmc.state_init = 1.000000e+00 : f64}
// CHECK-NEXT: %[[MW:.*]] = llmc.mul %[[W]], %[[M]]
// CHECK-NOT: %[[W]]{{[^0-9]}}
// CHECK: llmc.matmul %{{.*}}, %[[MW]] {transpose_b}
// CHECK: llmc.matmul %{{.*}}, %[[MW]] : tensor<4x4x24xf32>, tensor<24x8xf32>
// CHECK: return

// Tests the update: the gradient (both reads of g*g share one product),
// the moments and the new weight are masked, so a pruned weight stays 0:
// 0 * decay - lr * 0 / (sqrt(0) + eps). The bias is not touched.
// CHECK-LABEL: func.func @update_step(
// CHECK-SAME: %[[UW:arg4]]: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}
// CHECK-SAME: %[[UG:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "grad.h.0.attn.c_attn.weight"}
// CHECK-SAME: %[[UM:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "adam_m.h.0.attn.c_attn.weight"}
// CHECK-SAME: %[[UV:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "adam_v.h.0.attn.c_attn.weight"}
// CHECK-SAME: %[[UK:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "sparsity_mask.h.0.attn.c_attn.weight"
// CHECK: %[[G1:.*]] = llmc.mul %[[UG]], %[[UK]]
// CHECK-NEXT: llmc.mul %[[G1]], %[[G1]]
// CHECK: %[[G2:.*]] = llmc.mul %[[UG]], %[[UK]]
// CHECK-NEXT: %[[G:.*]] = llmc.mul %[[G2]], %{{.*}} : tensor<24x8xf32>, tensor<f32>
// CHECK: %[[MM:.*]] = llmc.mul %[[UM]], %[[UK]]
// CHECK: %[[VM:.*]] = llmc.mul %[[UV]], %[[UK]]
// CHECK: %[[NEW:.*]] = llmc.sub
// CHECK: %[[OUT:.*]] = llmc.mul %[[NEW]], %[[UK]] : tensor<24x8xf32>, tensor<24x8xf32>
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[OUT]],

// With fp16, SGD and full remat: the mask product comes before AMP's cast,
// and the block recomputed before its backward recomputes the product and
// the cast from the weight and the mask (remat clones read what the
// originals read), which the forward and backward matmuls then read.
// FP16-LABEL: func.func @grad_step(
// FP16-SAME: %[[W:arg4]]: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}
// FP16-SAME: %[[M:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "sparsity_mask.h.0.attn.c_attn.weight"
// FP16-NEXT: %[[MW:.*]] = llmc.mul %[[W]], %[[M]]
// FP16-NOT: %[[W]]{{[^0-9]}}
// FP16: %[[C:.*]] = llmc.cast %[[MW]] : tensor<24x8xf32> -> tensor<24x8xf16>
// FP16: llmc.matmul %{{.*}}, %[[C]] {transpose_b}
// FP16: llmc.cross_entropy_grad
// FP16: %[[RMW:.*]] = llmc.mul %[[W]], %[[M]]
// FP16-NEXT: %[[RC:.*]] = llmc.cast %[[RMW]] : tensor<24x8xf32> -> tensor<24x8xf16>
// FP16-NEXT: llmc.matmul %{{.*}}, %[[RC]] {transpose_b}
// FP16: llmc.matmul %{{.*}}, %[[RC]] : tensor<4x4x24xf16>, tensor<24x8xf16>
// FP16-LABEL: func.func @update_step(
// FP16-SAME: %[[UW:arg4]]: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}
// FP16-SAME: {llmc.state = "momentum.h.0.attn.c_attn.weight"}
// FP16-SAME: %[[UK:[a-z0-9]+]]: tensor<24x8xf32> {llmc.state = "sparsity_mask.h.0.attn.c_attn.weight"
// FP16: %[[KEEP:.*]] = llmc.select %{{.*}}, %{{.*}}, %[[UW]] : tensor<i1>, tensor<24x8xf32>
// FP16: llmc.mul %[[KEEP]], %[[UK]] : tensor<24x8xf32>, tensor<24x8xf32>

// Patterns pick by name among the matmul weights: the MLP of every block,
// nothing else.
// PICK: llmc.sparsity = {params = ["h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight"], pattern = "2:4"}
// PICK-LABEL: func.func @forward(
// PICK-NOT: sparsity_mask.h.0.attn
// PICK: {llmc.state = "sparsity_mask.h.0.mlp.c_fc.weight"


module attributes {llmc.model = {activation = "gelu", batch = 4 : i64, bias = true, dropout = 0.000000e+00 : f64, ffn_hidden = 32 : i64, n_embd = 8 : i64, n_head = 1 : i64, n_layer = 1 : i64, name = "g", norm = "layernorm", norm_eps = 1.000000e-05 : f64, position = "learned", rope_theta = 1.000000e+04 : f64, seq_len = 4 : i64, tie_embeddings = true, vocab_size = 16 : i64}} {
  func.func @forward(%arg0: tensor<16x8xf32> {llmc.param = "wte"}, %arg1: tensor<4x8xf32> {llmc.param = "wpe"}, %arg2: tensor<8xf32> {llmc.param = "h.0.ln_1.weight"}, %arg3: tensor<8xf32> {llmc.param = "h.0.ln_1.bias"}, %arg4: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}, %arg5: tensor<24xf32> {llmc.param = "h.0.attn.c_attn.bias"}, %arg6: tensor<8x8xf32> {llmc.param = "h.0.attn.c_proj.weight"}, %arg7: tensor<8xf32> {llmc.param = "h.0.attn.c_proj.bias"}, %arg8: tensor<8xf32> {llmc.param = "h.0.ln_2.weight"}, %arg9: tensor<8xf32> {llmc.param = "h.0.ln_2.bias"}, %arg10: tensor<32x8xf32> {llmc.param = "h.0.mlp.c_fc.weight"}, %arg11: tensor<32xf32> {llmc.param = "h.0.mlp.c_fc.bias"}, %arg12: tensor<8x32xf32> {llmc.param = "h.0.mlp.c_proj.weight"}, %arg13: tensor<8xf32> {llmc.param = "h.0.mlp.c_proj.bias"}, %arg14: tensor<8xf32> {llmc.param = "ln_f.weight"}, %arg15: tensor<8xf32> {llmc.param = "ln_f.bias"}, %arg16: tensor<4x4xi32> {llmc.input = "tokens"}, %arg17: tensor<4x4xi32> {llmc.input = "targets"}) -> (tensor<f32>, tensor<4x4x16xf32>) {
    %0 = llmc.embedding %arg0, %arg16 : tensor<16x8xf32>, tensor<4x4xi32>
    %1 = llmc.slice %arg1 offsets [0, 0] sizes [4, 8] : tensor<4x8xf32>
    %2 = llmc.add %0, %1 : tensor<4x4x8xf32>, tensor<4x8xf32>
    %result, %mean, %rstd = llmc.layer_norm %2, %arg2, %arg3 {epsilon = 9.99999974E-6 : f32} : tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %3 = llmc.matmul %result, %arg4 {transpose_b} : tensor<4x4x8xf32>, tensor<24x8xf32>
    %4 = llmc.add %3, %arg5 : tensor<4x4x24xf32>, tensor<24xf32>
    %5 = llmc.slice %4 offsets [0, 0, 0] sizes [4, 4, 8] : tensor<4x4x24xf32>
    %6 = llmc.reshape %5 : tensor<4x4x8xf32> -> tensor<4x4x1x8xf32>
    %7 = llmc.transpose %6, [0, 2, 1, 3] : tensor<4x4x1x8xf32>
    %8 = llmc.slice %4 offsets [0, 0, 8] sizes [4, 4, 8] : tensor<4x4x24xf32>
    %9 = llmc.reshape %8 : tensor<4x4x8xf32> -> tensor<4x4x1x8xf32>
    %10 = llmc.transpose %9, [0, 2, 1, 3] : tensor<4x4x1x8xf32>
    %11 = llmc.slice %4 offsets [0, 0, 16] sizes [4, 4, 8] : tensor<4x4x24xf32>
    %12 = llmc.reshape %11 : tensor<4x4x8xf32> -> tensor<4x4x1x8xf32>
    %13 = llmc.transpose %12, [0, 2, 1, 3] : tensor<4x4x1x8xf32>
    %result_0, %lse = llmc.attention %7, %10, %13 {causal, scale = 0.353553385 : f32} : tensor<4x1x4x8xf32>, tensor<4x1x4x8xf32>, tensor<4x1x4x8xf32>
    %14 = llmc.transpose %result_0, [0, 2, 1, 3] : tensor<4x1x4x8xf32>
    %15 = llmc.reshape %14 : tensor<4x4x1x8xf32> -> tensor<4x4x8xf32>
    %16 = llmc.matmul %15, %arg6 {transpose_b} : tensor<4x4x8xf32>, tensor<8x8xf32>
    %17 = llmc.add %16, %arg7 : tensor<4x4x8xf32>, tensor<8xf32>
    %18 = llmc.add %2, %17 : tensor<4x4x8xf32>, tensor<4x4x8xf32>
    %result_1, %mean_2, %rstd_3 = llmc.layer_norm %18, %arg8, %arg9 {epsilon = 9.99999974E-6 : f32} : tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %19 = llmc.matmul %result_1, %arg10 {transpose_b} : tensor<4x4x8xf32>, tensor<32x8xf32>
    %20 = llmc.add %19, %arg11 : tensor<4x4x32xf32>, tensor<32xf32>
    %21 = llmc.gelu %20 approximate = tanh : tensor<4x4x32xf32>
    %22 = llmc.matmul %21, %arg12 {transpose_b} : tensor<4x4x32xf32>, tensor<8x32xf32>
    %23 = llmc.add %22, %arg13 : tensor<4x4x8xf32>, tensor<8xf32>
    %24 = llmc.add %18, %23 : tensor<4x4x8xf32>, tensor<4x4x8xf32>
    %result_4, %mean_5, %rstd_6 = llmc.layer_norm %24, %arg14, %arg15 {epsilon = 9.99999974E-6 : f32} : tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %25 = llmc.matmul %result_4, %arg0 {transpose_b} : tensor<4x4x8xf32>, tensor<16x8xf32>
    %loss, %lse_7 = llmc.cross_entropy %25, %arg17 : tensor<4x4x16xf32>, tensor<4x4xi32>
    return %loss, %25 : tensor<f32>, tensor<4x4x16xf32>
  }
}

// -----

// A one-block Llama-style model (RMSNorm, SwiGLU, RoPE, untied lm_head).
// CHECK: llmc.sparsity = {params = ["h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight", "h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight"], pattern = "2:4"}
module attributes {llmc.model = {activation = "swiglu", batch = 4 : i64, bias = false, dropout = 0.000000e+00 : f64, ffn_hidden = 12 : i64, n_embd = 8 : i64, n_head = 1 : i64, n_layer = 1 : i64, name = "l", norm = "rmsnorm", norm_eps = 1.000000e-05 : f64, position = "rope", rope_theta = 1.000000e+04 : f64, seq_len = 4 : i64, tie_embeddings = false, vocab_size = 16 : i64}} {
  func.func @forward(%arg0: tensor<16x8xf32> {llmc.param = "wte"}, %arg1: tensor<8xf32> {llmc.param = "h.0.ln_1.weight"}, %arg2: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}, %arg3: tensor<8x8xf32> {llmc.param = "h.0.attn.c_proj.weight"}, %arg4: tensor<8xf32> {llmc.param = "h.0.ln_2.weight"}, %arg5: tensor<24x8xf32> {llmc.param = "h.0.mlp.c_fc.weight"}, %arg6: tensor<8x12xf32> {llmc.param = "h.0.mlp.c_proj.weight"}, %arg7: tensor<8xf32> {llmc.param = "ln_f.weight"}, %arg8: tensor<16x8xf32> {llmc.param = "lm_head.weight"}, %arg9: tensor<4x4xi32> {llmc.input = "tokens"}, %arg10: tensor<4x4xi32> {llmc.input = "targets"}) -> (tensor<f32>, tensor<4x4x16xf32>) {
    %0 = llmc.embedding %arg0, %arg9 : tensor<16x8xf32>, tensor<4x4xi32>
    %result, %rstd = llmc.rms_norm %0, %arg1 {epsilon = 9.99999974E-6 : f32} : tensor<4x4x8xf32>, tensor<8xf32>
    %1 = llmc.matmul %result, %arg2 {transpose_b} : tensor<4x4x8xf32>, tensor<24x8xf32>
    %2 = llmc.slice %1 offsets [0, 0, 0] sizes [4, 4, 8] : tensor<4x4x24xf32>
    %3 = llmc.reshape %2 : tensor<4x4x8xf32> -> tensor<4x4x1x8xf32>
    %4 = llmc.transpose %3, [0, 2, 1, 3] : tensor<4x4x1x8xf32>
    %5 = llmc.slice %1 offsets [0, 0, 8] sizes [4, 4, 8] : tensor<4x4x24xf32>
    %6 = llmc.reshape %5 : tensor<4x4x8xf32> -> tensor<4x4x1x8xf32>
    %7 = llmc.transpose %6, [0, 2, 1, 3] : tensor<4x4x1x8xf32>
    %8 = llmc.slice %1 offsets [0, 0, 16] sizes [4, 4, 8] : tensor<4x4x24xf32>
    %9 = llmc.reshape %8 : tensor<4x4x8xf32> -> tensor<4x4x1x8xf32>
    %10 = llmc.transpose %9, [0, 2, 1, 3] : tensor<4x4x1x8xf32>
    %11 = llmc.rotary %4 {theta = 1.000000e+04 : f32} : tensor<4x1x4x8xf32>
    %12 = llmc.rotary %7 {theta = 1.000000e+04 : f32} : tensor<4x1x4x8xf32>
    %result_0, %lse = llmc.attention %11, %12, %10 {causal, scale = 0.353553385 : f32} : tensor<4x1x4x8xf32>, tensor<4x1x4x8xf32>, tensor<4x1x4x8xf32>
    %13 = llmc.transpose %result_0, [0, 2, 1, 3] : tensor<4x1x4x8xf32>
    %14 = llmc.reshape %13 : tensor<4x4x1x8xf32> -> tensor<4x4x8xf32>
    %15 = llmc.matmul %14, %arg3 {transpose_b} : tensor<4x4x8xf32>, tensor<8x8xf32>
    %16 = llmc.add %0, %15 : tensor<4x4x8xf32>, tensor<4x4x8xf32>
    %result_1, %rstd_2 = llmc.rms_norm %16, %arg4 {epsilon = 9.99999974E-6 : f32} : tensor<4x4x8xf32>, tensor<8xf32>
    %17 = llmc.matmul %result_1, %arg5 {transpose_b} : tensor<4x4x8xf32>, tensor<24x8xf32>
    %18 = llmc.slice %17 offsets [0, 0, 0] sizes [4, 4, 12] : tensor<4x4x24xf32>
    %19 = llmc.slice %17 offsets [0, 0, 12] sizes [4, 4, 12] : tensor<4x4x24xf32>
    %20 = llmc.silu %18 : tensor<4x4x12xf32>
    %21 = llmc.mul %20, %19 : tensor<4x4x12xf32>, tensor<4x4x12xf32>
    %22 = llmc.matmul %21, %arg6 {transpose_b} : tensor<4x4x12xf32>, tensor<8x12xf32>
    %23 = llmc.add %16, %22 : tensor<4x4x8xf32>, tensor<4x4x8xf32>
    %result_3, %rstd_4 = llmc.rms_norm %23, %arg7 {epsilon = 9.99999974E-6 : f32} : tensor<4x4x8xf32>, tensor<8xf32>
    %24 = llmc.matmul %result_3, %arg8 {transpose_b} : tensor<4x4x8xf32>, tensor<16x8xf32>
    %loss, %lse_5 = llmc.cross_entropy %24, %arg10 : tensor<4x4x16xf32>, tensor<4x4xi32>
    return %loss, %24 : tensor<f32>, tensor<4x4x16xf32>
  }
}

