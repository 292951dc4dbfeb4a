// RUN: llmc emit-model %llmc_src/test/dist/Inputs/tiny-dropout.yaml --batch 2 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2 rank=1 sp=true' | FileCheck %s
// RUN: llmc emit-model %llmc_src/test/dist/Inputs/tiny-dropout.yaml --batch 2 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2 rank=1 sp=true' --llmc-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: llmc emit-model %llmc_src/test/dist/Inputs/tiny-dropout.yaml --batch 2 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2 rank=1 sp=true' --llmc-autodiff | awk '/func.func @grad_step/,0' | grep -o 'llmc.all_gather\|llmc.reduce_scatter\|llmc.all_reduce %%[a-z_0-9]* [a-z]* on "tp" size 2 replicated : tensor<[0-9x]*f32>' | sed 's/%%[a-z_0-9]* //' | sort | uniq -c | FileCheck %s --check-prefix=COUNT
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2 sp=true' | FileCheck %s --check-prefix=B1
// RUN: llmc emit-model %llmc_src/test/dist/Inputs/llama-tiny.yaml --batch 2 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2 sp=true' | FileCheck %s --check-prefix=LLAMA
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=1 sp=true' | FileCheck %s --check-prefix=ONE
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 6 | not llmc-opt '--llmc-tensor-parallel=tp=4 sp=true' 2>&1 | FileCheck %s --check-prefix=SEQ
// RUN: llmc-opt %s --split-input-file --verify-diagnostics '--llmc-tensor-parallel=tp=2 sp=true'

// Sequence parallelism on the tiny GPT with dropout 0.1, rank 1 of 2, B=2,
// T=8: between the blocks the residual stream is [2, 4, 64], positions
// [4, 8) of the sequence. The parameters are tensor parallelism's.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: tensor<128x64xf32> {llmc.param = "wte", llmc.tp_shard = {dim = 0 : i64, groups = 1 : i64, size = 2 : i64}}
// CHECK-SAME: tensor<64x64xf32> {llmc.param = "wpe"}
// CHECK-SAME: tensor<96x64xf32> {llmc.param = "h.0.attn.c_attn.weight", llmc.tp_shard = {dim = 0 : i64, groups = 3 : i64, size = 2 : i64}}
// CHECK-SAME: -> (tensor<f32>, tensor<2x8x256xf32>)
// The vocabulary-parallel lookup's g is a reduce-scatter over the
// sequence, which the transposes put in front (B > 1).
// CHECK: %[[E:.*]] = llmc.embedding %arg0, %{{.*}} vocab_start 128 vocab_size 256 : tensor<128x64xf32>, tensor<2x8xi32>
// CHECK-NEXT: %[[ET:.*]] = llmc.transpose %[[E]], [1, 0, 2] : tensor<2x8x64xf32>
// CHECK-NEXT: %[[ES:.*]] = llmc.reduce_scatter %[[ET]] sum dim 0 on "tp" size 2 : tensor<8x2x64xf32>
// CHECK-NEXT: %[[X0:.*]] = llmc.transpose %[[ES]], [1, 0, 2] : tensor<4x2x64xf32>
// wpe's rows: the rank's positions 4..7, its gradient summed over tp.
// CHECK-NEXT: %[[P:.*]] = llmc.slice %arg1 offsets [0, 0] sizes [8, 64] : tensor<64x64xf32>
// CHECK-NEXT: %[[PC:.*]] = llmc.copy_to_axis %[[P]] on "tp" size 2 : tensor<8x64xf32>
// CHECK-NEXT: %[[PR:.*]] = llmc.slice %[[PC]] offsets [4, 0] sizes [4, 64] : tensor<8x64xf32>
// CHECK-NEXT: %[[X1:.*]] = llmc.add %[[X0]], %[[PR]] : tensor<2x4x64xf32>, tensor<4x64xf32>
// Dropout on the slice draws the whole [2, 8, 64] tensor's masks at
// offsets [0, 4, 0].
// CHECK-NEXT: %[[X:.*]] = llmc.dropout %[[X1]] {offsets = array<i64: 0, 4, 0>, rate = 1.000000e-01 : f32, stream = 0 : i64, whole_shape = array<i64: 2, 8, 64>} : tensor<2x4x64xf32>
// ln_1 on the slice; its weight and bias pass through copy_to_axis.
// CHECK-NEXT: %[[W:.*]] = llmc.copy_to_axis %arg2 on "tp" size 2 : tensor<64xf32>
// CHECK-NEXT: %[[B:.*]] = llmc.copy_to_axis %arg3 on "tp" size 2 : tensor<64xf32>
// CHECK-NEXT: %[[N:.*]], %{{.*}}, %{{.*}} = llmc.layer_norm %[[X]], %[[W]], %[[B]] {{.*}} : tensor<2x4x64xf32>, tensor<64xf32>, tensor<64xf32>
// g-bar: the all-gather before the column-parallel QKV projection.
// CHECK-NEXT: %[[NT:.*]] = llmc.transpose %[[N]], [1, 0, 2] : tensor<2x4x64xf32>
// CHECK-NEXT: %[[G:.*]] = llmc.all_gather %[[NT]] dim 0 on "tp" size 2 : tensor<4x2x64xf32>
// CHECK-NEXT: %[[GT:.*]] = llmc.transpose %[[G]], [1, 0, 2] : tensor<8x2x64xf32>
// CHECK-NEXT: llmc.matmul %[[GT]], %{{.*}} {transpose_b} : tensor<2x8x64xf32>, tensor<96x64xf32>
// CHECK: llmc.attention %{{.*}} : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
// The row-parallel projection's partial sums are reduce-scattered; bias,
// dropout and the residual add run on the slice.
// CHECK: %[[PP:.*]] = llmc.matmul %{{.*}}, %{{.*}} {transpose_b} : tensor<2x8x32xf32>, tensor<64x32xf32>
// CHECK-NEXT: %[[PT:.*]] = llmc.transpose %[[PP]], [1, 0, 2] : tensor<2x8x64xf32>
// CHECK-NEXT: %[[PS:.*]] = llmc.reduce_scatter %[[PT]] sum dim 0 on "tp" size 2 : tensor<8x2x64xf32>
// CHECK-NEXT: %[[A:.*]] = llmc.transpose %[[PS]], [1, 0, 2] : tensor<4x2x64xf32>
// CHECK-NEXT: %[[AB:.*]] = llmc.copy_to_axis %arg7 on "tp" size 2 : tensor<64xf32>
// CHECK-NEXT: %[[A1:.*]] = llmc.add %[[A]], %[[AB]] : tensor<2x4x64xf32>, tensor<64xf32>
// CHECK-NEXT: %[[A2:.*]] = llmc.dropout %[[A1]] {offsets = array<i64: 0, 4, 0>, rate = 1.000000e-01 : f32, stream = 1 : i64, whole_shape = array<i64: 2, 8, 64>} : tensor<2x4x64xf32>
// CHECK-NEXT: llmc.add %[[X]], %[[A2]] : tensor<2x4x64xf32>, tensor<2x4x64xf32>
// The MLP: gather, the rank's 128 hidden units, reduce-scatter.
// CHECK: llmc.layer_norm %{{.*}} : tensor<2x4x64xf32>
// CHECK: llmc.all_gather %{{.*}} dim 0 on "tp" size 2 : tensor<4x2x64xf32>
// CHECK: llmc.gelu %{{.*}} : tensor<2x8x128xf32>
// CHECK: llmc.reduce_scatter %{{.*}} sum dim 0 on "tp" size 2 : tensor<8x2x64xf32>
// The final norm on the slice, the whole sequence gathered for the
// vocabulary-parallel classifier and loss.
// CHECK: llmc.copy_to_axis %arg27 on "tp" size 2 : tensor<64xf32>
// CHECK-NEXT: %[[F:.*]], %{{.*}}, %{{.*}} = llmc.layer_norm %{{.*}} : tensor<2x4x64xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK-NEXT: %[[FT:.*]] = llmc.transpose %[[F]], [1, 0, 2] : tensor<2x4x64xf32>
// CHECK-NEXT: %[[FG:.*]] = llmc.all_gather %[[FT]] dim 0 on "tp" size 2 : tensor<4x2x64xf32>
// CHECK-NEXT: %[[FW:.*]] = llmc.transpose %[[FG]], [1, 0, 2] : tensor<8x2x64xf32>
// CHECK-NEXT: %[[L:.*]] = llmc.matmul %[[FW]], %arg0 {transpose_b} : tensor<2x8x64xf32>, tensor<128x64xf32>
// CHECK-NEXT: llmc.vocab_shard_max %[[L]] vocab_start 128 vocab_size 256 : tensor<2x8x128xf32>
// CHECK-NOT: copy_to_axis
// CHECK: return

// The backward: the all-gathers' VJPs are reduce-scatters and the
// reduce-scatters' all-gathers (over the sequence), and every whole
// parameter used on the slice gets its gradient all-reduced over tp (the
// VJP of copy_to_axis): ln_f's weight and bias, then the last block's
// MLP bias, ln_2, ..., and wpe's rows last.
// GRAD-LABEL: func.func @grad_step(
// GRAD: %{{.*}}, %[[DW:.*]], %[[DB:.*]] = llmc.layer_norm_grad %{{.*}} : tensor<2x4x64xf32>
// GRAD-NEXT: llmc.all_reduce %[[DB]] sum on "tp" size 2 replicated : tensor<64xf32>
// GRAD-NEXT: llmc.all_reduce %[[DW]] sum on "tp" size 2 replicated : tensor<64xf32>
// GRAD: llmc.dropout %{{.*}} {offsets = array<i64: 0, 4, 0>, rate = 1.000000e-01 : f32, stream = 4 : i64, whole_shape = array<i64: 2, 8, 64>} : tensor<2x4x64xf32>
// GRAD: llmc.all_gather %{{.*}} dim 0 on "tp" size 2 : tensor<4x2x64xf32>
// GRAD: llmc.matmul
// GRAD: llmc.reduce_scatter %{{.*}} sum dim 0 on "tp" size 2 : tensor<8x2x64xf32>
// GRAD: llmc.all_reduce %{{.*}} sum on "tp" size 2 replicated : tensor<8x64xf32>
// GRAD: return

// The collectives of @grad_step: 5 all-gathers in the forward (before
// 2 x 2 column-parallel projections and the classifier) and their 5
// reduce-scatters in the backward; 5 reduce-scatters in the forward (the
// lookup, 2 x 2 row-parallel projections) and their 5 all-gathers; the
// loss's 3 all-reduces; and 15 all-reduces of the gradients of the whole
// parameters used on the slice: 5 norms' weights and biases and 4 biases
// ([64]) and wpe's 8 rows ([8, 64]). No other all-reduce: tensor
// parallelism's 5 backward all-reduces of f are the reduce-scatters now.
// COUNT: 10 llmc.all_gather
// COUNT-NEXT: 1 llmc.all_reduce max on "tp" size 2 replicated : tensor<2x8xf32>
// COUNT-NEXT: 2 llmc.all_reduce sum on "tp" size 2 replicated : tensor<2x8xf32>
// COUNT-NEXT: 14 llmc.all_reduce sum on "tp" size 2 replicated : tensor<64xf32>
// COUNT-NEXT: 1 llmc.all_reduce sum on "tp" size 2 replicated : tensor<8x64xf32>
// COUNT-NEXT: 10 llmc.reduce_scatter
// COUNT-EMPTY:

// With B = 1 a rank's positions are contiguous: no transposes.
// B1: %[[E:.*]] = llmc.embedding
// B1-NEXT: llmc.reduce_scatter %[[E]] sum dim 1 on "tp" size 2 : tensor<1x8x64xf32>
// B1: %[[N:.*]], %{{.*}}, %{{.*}} = llmc.layer_norm %{{.*}} : tensor<1x4x64xf32>
// B1-NEXT: %[[G:.*]] = llmc.all_gather %[[N]] dim 1 on "tp" size 2 : tensor<1x4x64xf32>
// B1-NEXT: llmc.matmul %[[G]], %{{.*}} {transpose_b} : tensor<1x8x64xf32>, tensor<96x64xf32>

// The Llama-style model: RMSNorm on the slice, one gather feeds the fused
// gate and up projection of SwiGLU.
// LLAMA: llmc.rms_norm %{{.*}} : tensor<2x4x48xf32>, tensor<48xf32>
// LLAMA: llmc.rms_norm %{{.*}} : tensor<2x4x48xf32>, tensor<48xf32>
// LLAMA-NEXT: llmc.transpose
// LLAMA-NEXT: llmc.all_gather %{{.*}} dim 0 on "tp" size 2 : tensor<4x2x48xf32>
// LLAMA-NEXT: %[[U:.*]] = llmc.transpose
// LLAMA-NEXT: llmc.matmul %[[U]], %{{.*}} {transpose_b} : tensor<2x8x48xf32>, tensor<128x48xf32>

// tp=1: nothing to split.
// ONE-NOT: reduce_scatter
// ONE-NOT: all_gather

// SEQ: llmc-tensor-parallel: sequence parallelism splits the sequence of 6 positions over tp=4 ranks; the sequence length must be a multiple of tp

// Tests that a rank's slice reaching an op without a sequence-parallel
// rule (a reduction over the sequence) is an error naming the op.
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "h.0.mlp.c_fc.weight"},
                   %p: tensor<4x8xf32> {llmc.param = "h.0.mlp.c_proj.weight"},
                   %x: tensor<2x4x4xf32> {llmc.input = "tokens"}) -> tensor<2x4xf32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4x4xf32>, tensor<8x4xf32>
  %y = llmc.matmul %h, %p {transpose_b} : tensor<2x4x8xf32>, tensor<4x8xf32>
  // expected-error @+1 {{'llmc.reduce_sum' op llmc-tensor-parallel (sp) cannot run this op on a slice of the sequence: no sequence-parallel rule for it}}
  %s = llmc.reduce_sum %y dims [1] : tensor<2x4x4xf32>
  return %s : tensor<2x4xf32>
}

// -----

// Tests that @forward may not return a rank's slice of the sequence.
// expected-error @+1 {{llmc-tensor-parallel: with sp, a result of @forward is a rank's slice of the sequence, not the whole}}
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "h.0.mlp.c_fc.weight"},
                   %p: tensor<4x8xf32> {llmc.param = "h.0.mlp.c_proj.weight"},
                   %x: tensor<2x4x4xf32> {llmc.input = "tokens"}) -> tensor<2x4x4xf32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4x4xf32>, tensor<8x4xf32>
  %y = llmc.matmul %h, %p {transpose_b} : tensor<2x4x8xf32>, tensor<4x8xf32>
  return %y : tensor<2x4x4xf32>
}
