// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2' | FileCheck %s
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2' --llmc-autodiff --llmc-optimizer | FileCheck %s --check-prefix=GRAD
// RUN: llmc emit-model %llmc_src/test/dist/Inputs/llama-tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2' | FileCheck %s --check-prefix=LLAMA
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=1' | FileCheck %s --check-prefix=ONE
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt '--llmc-tensor-parallel=tp=3' 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-autodiff '--llmc-tensor-parallel=tp=2' 2>&1 | FileCheck %s --check-prefix=ORDER

// The tiny GPT (C=64, 4 heads of 16, MLP 256, V=256) on 2 tp ranks. Each
// rank's parameters: wte [V/2, C] (its block of the vocabulary), c_attn
// [3C/2, C] (its 2 heads of Q, K and V), c_fc [128, C], both c_proj
// [C, C/2] and [C, 128]; norms, c_proj biases and wpe whole.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: tensor<128x64xf32> {llmc.param = "wte", llmc.tp_shard = {dim = 0 : i64, groups = 1 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64x64xf32> {llmc.param = "wpe"}
// CHECK-SAME: tensor<64xf32> {llmc.param = "h.0.ln_1.weight"}
// CHECK-SAME: tensor<96x64xf32> {llmc.param = "h.0.attn.c_attn.weight", llmc.tp_shard = {dim = 0 : i64, groups = 3 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<96xf32> {llmc.param = "h.0.attn.c_attn.bias", llmc.tp_shard = {dim = 0 : i64, groups = 3 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64x32xf32> {llmc.param = "h.0.attn.c_proj.weight", llmc.tp_shard = {dim = 1 : i64, groups = 1 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64xf32> {llmc.param = "h.0.attn.c_proj.bias"}
// CHECK-SAME: tensor<128x64xf32> {llmc.param = "h.0.mlp.c_fc.weight", llmc.tp_shard = {dim = 0 : i64, groups = 1 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64x128xf32> {llmc.param = "h.0.mlp.c_proj.weight", llmc.tp_shard = {dim = 1 : i64, groups = 1 : i64, size = 2 : i64}}
// CHECK-SAME: -> (tensor<f32>, tensor<1x8x256xf32>)
// The vocabulary-parallel lookup: rank 0's ids [0, 128) select rows, the
// others zeros; g sums the ranks' rows.
// CHECK: %[[E:.*]] = llmc.embedding %arg0, %{{.*}} vocab_start 0 vocab_size 256 : tensor<128x64xf32>, tensor<1x8xi32>
// CHECK-NEXT: llmc.all_reduce %[[E]] sum on "tp" size 2 replicated : tensor<1x8x64xf32>
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
// The tied classifier is column-parallel (f, the rank's 128 logits), and
// the loss is assembled from row statistics all-reduced in between: the
// max, then the sum of exponentials and the target's logit. The logits
// are gathered only for @forward's logits result (sampling), the
// vocabulary moved to the front for the gather and back.
// CHECK: %[[LN:.*]], %{{.*}}, %{{.*}} = llmc.layer_norm %{{.*}}, %arg26, %arg27
// CHECK-NEXT: %[[XF:.*]] = llmc.copy_to_axis %[[LN]] on "tp" size 2 : tensor<1x8x64xf32>
// CHECK-NEXT: %[[L:.*]] = llmc.matmul %[[XF]], %arg0 {transpose_b} : tensor<1x8x64xf32>, tensor<128x64xf32>
// CHECK-NOT: llmc.all_gather
// CHECK-NEXT: %[[M:.*]] = llmc.vocab_shard_max %[[L]] vocab_start 0 vocab_size 256 : tensor<1x8x128xf32>
// CHECK-NEXT: %[[GM:.*]] = llmc.all_reduce %[[M]] max on "tp" size 2 replicated : tensor<1x8xf32>
// CHECK-NEXT: %[[S:.*]], %[[T:.*]] = llmc.vocab_shard_cross_entropy %[[L]], %{{.*}}, %[[GM]] vocab_start 0 vocab_size 256
// CHECK-NEXT: %[[GS:.*]] = llmc.all_reduce %[[S]] sum on "tp" size 2 replicated : tensor<1x8xf32>
// CHECK-NEXT: %[[GT:.*]] = llmc.all_reduce %[[T]] sum on "tp" size 2 replicated : tensor<1x8xf32>
// CHECK-NEXT: %[[LOSS:.*]], %{{.*}} = llmc.cross_entropy_combine %[[GM]], %[[GS]], %[[GT]] : tensor<1x8xf32>
// CHECK-NOT: llmc.cross_entropy %
// CHECK-NEXT: %[[FRONT:.*]] = llmc.transpose %[[L]], [2, 0, 1] : tensor<1x8x128xf32>
// CHECK-NEXT: %[[ALL:.*]] = llmc.all_gather %[[FRONT]] dim 0 on "tp" size 2 : tensor<128x1x8xf32>
// CHECK-NEXT: %[[BACK:.*]] = llmc.transpose %[[ALL]], [1, 2, 0] : tensor<256x1x8xf32>
// CHECK-NEXT: return %[[LOSS]], %[[BACK]] : tensor<f32>, tensor<1x8x256xf32>

// The backward's collectives come from the VJPs: each f becomes a
// replicated all-reduce of its input's gradient; g passes its gradient
// through (no collective for it). Forward: the lookup's g, 2 layers x
// (attention + MLP) g's, the loss's max and two sums; backward: the
// classifier's f and the 4 layers' f's. The loss's gradient is the
// rank's softmax - onehot from the all-reduced max and sum: no gather of
// the logits anywhere in the step (the gather of @forward's logits result
// is left out: the loss does not read it). The update sums the split
// gradients' squares over tp for the global norm, once.
// GRAD-LABEL: func.func @grad_step(
// GRAD-NOT: llmc.all_gather
// GRAD: llmc.embedding %{{.*}} vocab_start 0 vocab_size 256
// GRAD-COUNT-5: llmc.all_reduce %{{.*}} sum on "tp" size 2 replicated
// GRAD-NOT: llmc.all_gather
// GRAD: llmc.all_reduce %{{.*}} max on "tp" size 2 replicated
// GRAD-COUNT-2: llmc.all_reduce %{{.*}} sum on "tp" size 2 replicated
// GRAD: llmc.cross_entropy_combine
// GRAD-NOT: llmc.all_reduce
// GRAD: llmc.vocab_shard_cross_entropy_grad %{{.*}} vocab_start 0 vocab_size 256 : tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8x128xf32>
// GRAD-NOT: llmc.all_gather
// GRAD-COUNT-5: llmc.all_reduce %{{.*}} sum on "tp" size 2 replicated
// GRAD-NOT: llmc.all_gather
// GRAD: llmc.embedding_grad %{{.*}} vocab_start 0 vocab_size 256 : tensor<1x8x64xf32>, tensor<1x8xi32> -> tensor<128x64xf32>
// GRAD-NOT: llmc.all_reduce
// GRAD-NOT: llmc.all_gather
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
