// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2' | FileCheck %s
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2' --llmc-autodiff --llmc-optimizer | FileCheck %s --check-prefix=GRAD
// RUN: llmc emit-model %llmc_src/test/dist/Inputs/llama-tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2' | FileCheck %s --check-prefix=LLAMA
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=1' | FileCheck %s --check-prefix=ONE
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt '--llmc-tensor-parallel=tp=3' 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-autodiff '--llmc-tensor-parallel=tp=2' 2>&1 | FileCheck %s --check-prefix=ORDER

// The tiny GPT (C=64, 4 heads of 16, MLP 256) on 2 tp ranks. Each rank's
// parameters: c_attn [3C/2, C] (its 2 heads of Q, K and V), c_fc [128, C],
// both c_proj [C, C/2] and [C, 128]; norms, c_proj biases, wte and wpe
// whole.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: tensor<256x64xf32> {llmc.param = "wte"}
// CHECK-SAME: tensor<64xf32> {llmc.param = "h.0.ln_1.weight"}
// CHECK-SAME: tensor<96x64xf32> {llmc.param = "h.0.attn.c_attn.weight", llmc.tp_shard = {dim = 0 : i64, groups = 3 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<96xf32> {llmc.param = "h.0.attn.c_attn.bias", llmc.tp_shard = {dim = 0 : i64, groups = 3 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64x32xf32> {llmc.param = "h.0.attn.c_proj.weight", llmc.tp_shard = {dim = 1 : i64, groups = 1 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64xf32> {llmc.param = "h.0.attn.c_proj.bias"}
// CHECK-SAME: tensor<128x64xf32> {llmc.param = "h.0.mlp.c_fc.weight", llmc.tp_shard = {dim = 0 : i64, groups = 1 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64x128xf32> {llmc.param = "h.0.mlp.c_proj.weight", llmc.tp_shard = {dim = 1 : i64, groups = 1 : i64, size = 2 : i64}}
// Attention: f before the QKV projection, the rank's 2 heads, g after the
// output projection and before its bias.
// CHECK: %[[X:.*]] = llmc.copy_to_axis %{{.*}} on "tp" size 2 : tensor<1x8x64xf32>
// CHECK-NEXT: %[[QKV:.*]] = llmc.matmul %[[X]], %{{.*}} {transpose_b} : tensor<1x8x64xf32>, tensor<96x64xf32>
// CHECK: llmc.slice %{{.*}} offsets [0, 0, 32] sizes [1, 8, 32] : tensor<1x8x96xf32>
// CHECK: llmc.reshape %{{.*}} : tensor<1x8x32xf32> -> tensor<1x8x2x16xf32>
// CHECK: llmc.attention %{{.*}} : tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>
// CHECK: %[[P:.*]] = llmc.matmul %{{.*}}, %{{.*}} {transpose_b} : tensor<1x8x32xf32>, tensor<64x32xf32>
// CHECK-NEXT: %[[G:.*]] = llmc.all_reduce %[[P]] sum on "tp" size 2 replicated : tensor<1x8x64xf32>
// CHECK-NEXT: llmc.add %[[G]], %{{.*}} : tensor<1x8x64xf32>, tensor<64xf32>
// MLP: f, the rank's 128 hidden units, g.
// CHECK: llmc.copy_to_axis
// CHECK: llmc.gelu %{{.*}} approximate = tanh : tensor<1x8x128xf32>
// CHECK: llmc.all_reduce %{{.*}} sum on "tp" size 2 replicated
// The classifier and the loss are whole on every rank.
// CHECK: llmc.cross_entropy %{{.*}} : tensor<1x8x256xf32>

// The backward's collectives come from the VJPs: each f becomes a
// replicated all-reduce of its input's gradient; g passes its gradient
// through (no collective for it). 2 layers x (attention + MLP) = 4 in the
// backward, 4 g's in the forward. The update sums the split gradients'
// squares over tp for the global norm, once.
// GRAD-LABEL: func.func @grad_step(
// GRAD-COUNT-8: llmc.all_reduce %{{.*}} sum on "tp" size 2 replicated
// GRAD-NOT: llmc.all_reduce
// GRAD-LABEL: func.func @update_step(
// GRAD: llmc.all_reduce %{{.*}} sum on "tp" size 2 : tensor<f32>
// GRAD-NOT: llmc.all_reduce

// Llama-style: Q, K, V split by heads before RoPE; SwiGLU's gate and up
// each split (c_fc [2F/2, C], groups 2).
// LLAMA-LABEL: func.func @forward(
// LLAMA-SAME: tensor<72x48xf32> {llmc.param = "h.0.attn.c_attn.weight", llmc.tp_shard = {dim = 0 : i64, groups = 3 : i64, size = 2 : i64}}
// LLAMA-SAME: tensor<128x48xf32> {llmc.param = "h.0.mlp.c_fc.weight", llmc.tp_shard = {dim = 0 : i64, groups = 2 : i64, size = 2 : i64}}
// LLAMA-SAME: tensor<48x64xf32> {llmc.param = "h.0.mlp.c_proj.weight", llmc.tp_shard = {dim = 1 : i64, groups = 1 : i64, size = 2 : i64}}
// LLAMA: llmc.slice %{{.*}} offsets [0, 0, 24] sizes [1, 8, 24] : tensor<1x8x72xf32>
// LLAMA: llmc.rotary %{{.*}} : tensor<1x2x8x12xf32>
// LLAMA: llmc.slice %{{.*}} offsets [0, 0, 64] sizes [1, 8, 64] : tensor<1x8x128xf32>
// LLAMA: llmc.silu %{{.*}} : tensor<1x8x64xf32>

// tp=1 changes nothing.
// ONE-NOT: llmc.copy_to_axis
// ONE-NOT: llmc.tp_shard

// HEADS: the model's n_head (4) does not split over tp=3 ranks; choose a tp that divides it
// ORDER: llmc-tensor-parallel runs before llmc-autodiff
