// RUN: llmc-opt %s --split-input-file '--llmc-tensor-parallel=tp=3 rank=2' -verify-diagnostics | FileCheck %s
// RUN: llmc emit-model %llmc_src/test/dist/Inputs/tiny-v257.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2 rank=1' | FileCheck %s --check-prefix=V257
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt '--llmc-tensor-parallel=tp=2 rank=2' 2>&1 | FileCheck %s --check-prefix=RANK

// The vocabulary-parallel embedding and cross-entropy when tp does not
// divide V: 5 ids over 3 ranks are 3 blocks of 2 rows, the last padded
// with one zero row (pad = 1); rank 2 holds ids [4, 6), of which only 4 is
// real. Its lookup selects id 4, its statistics count column 0 only, and
// the logits @forward returns are gathered [6] and cut back to [5].
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:.*]]: tensor<2x4xf32> {llmc.param = "wte", llmc.tp_shard = {dim = 0 : i64, groups = 1 : i64, pad = 1 : i64, size = 3 : i64}}
// CHECK-SAME: -> (tensor<f32>, tensor<2x3x5xf32>)
// CHECK: %[[E:.*]] = llmc.embedding %[[WTE]], %{{.*}} vocab_start 4 vocab_size 5 : tensor<2x4xf32>, tensor<2x3xi32>
// CHECK-NEXT: %[[X:.*]] = llmc.all_reduce %[[E]] sum on "tp" size 3 replicated : tensor<2x3x4xf32>
// CHECK-NEXT: %[[XF:.*]] = llmc.copy_to_axis %[[X]] on "tp" size 3
// CHECK-NEXT: %[[L:.*]] = llmc.matmul %[[XF]], %[[WTE]] {transpose_b} : tensor<2x3x4xf32>, tensor<2x4xf32>
// CHECK-NEXT: llmc.vocab_shard_max %[[L]] vocab_start 4 vocab_size 5 : tensor<2x3x2xf32>
// CHECK-NEXT: llmc.all_reduce %{{.*}} max on "tp" size 3 replicated : tensor<2x3xf32>
// CHECK-NEXT: llmc.vocab_shard_cross_entropy %[[L]], %{{.*}}, %{{.*}} vocab_start 4 vocab_size 5
// CHECK: llmc.cross_entropy_combine
// CHECK: %[[ALL:.*]] = llmc.all_gather %{{.*}} dim 0 on "tp" size 3 : tensor<2x2x3xf32>
// CHECK-NEXT: %[[BACK:.*]] = llmc.transpose %[[ALL]], [1, 2, 0] : tensor<6x2x3xf32>
// CHECK-NEXT: %[[CUT:.*]] = llmc.slice %[[BACK]] offsets [0, 0, 0] sizes [2, 3, 5] : tensor<2x3x6xf32>
// CHECK-NEXT: return %{{.*}}, %[[CUT]] : tensor<f32>, tensor<2x3x5xf32>
func.func @forward(%wte: tensor<5x4xf32> {llmc.param = "wte"},
                   %tokens: tensor<2x3xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x3xi32> {llmc.input = "targets"})
    -> (tensor<f32>, tensor<2x3x5xf32>) {
  %x = llmc.embedding %wte, %tokens : tensor<5x4xf32>, tensor<2x3xi32>
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<2x3x4xf32>, tensor<5x4xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x3x5xf32>, tensor<2x3xi32>
  return %loss, %logits : tensor<f32>, tensor<2x3x5xf32>
}

// -----

// 4 ids over 3 ranks: blocks of 2 rows would leave the last rank none.
// expected-error @+1 {{the vocabulary of 4 ids is too small for tp=3: the last rank's block of 2 rows would hold no id}}
func.func @forward(%wte: tensor<4x4xf32> {llmc.param = "wte"},
                   %tokens: tensor<2x3xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x3xi32> {llmc.input = "targets"})
    -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<4x4xf32>, tensor<2x3xi32>
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<2x3x4xf32>, tensor<4x4xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x3x4xf32>, tensor<2x3xi32>
  return %loss : tensor<f32>
}

// -----

// Split logits with no vocabulary-parallel rule for their reader.
func.func @forward(%wte: tensor<6x4xf32> {llmc.param = "wte"},
                   %tokens: tensor<2x3xi32> {llmc.input = "tokens"})
    -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<6x4xf32>, tensor<2x3xi32>
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<2x3x4xf32>, tensor<6x4xf32>
  // expected-error @+1 {{llmc-tensor-parallel cannot split this op: no tensor-parallel rule for it}}
  %p = llmc.softmax %logits : tensor<2x3x6xf32>
  %s = llmc.reduce_sum %p dims [0, 1, 2] : tensor<2x3x6xf32>
  return %s : tensor<f32>
}

// The tiny GPT with V=257 on rank 1 of 2: ids [129, 258), the last one
// padding.
// V257-LABEL: func.func @forward(
// V257-SAME: tensor<129x64xf32> {llmc.param = "wte", llmc.tp_shard = {dim = 0 : i64, groups = 1 : i64, pad = 1 : i64, size = 2 : i64}}
// V257: llmc.embedding %arg0, %{{.*}} vocab_start 129 vocab_size 257 : tensor<129x64xf32>
// V257: llmc.vocab_shard_max %{{.*}} vocab_start 129 vocab_size 257 : tensor<1x8x129xf32>
// V257: llmc.slice %{{.*}} offsets [0, 0, 0] sizes [1, 8, 257] : tensor<1x8x258xf32>
// V257: return %{{.*}} : tensor<f32>, tensor<1x8x257xf32>

// RANK: llmc-tensor-parallel: rank must lie in [0, tp), got 2 for tp=2
