// RUN: llmc compile %s --compile-to=kernels | FileCheck %s

// Tests the lowering of the backward ops of a training step (here inside a
// @forward, so that `llmc compile` takes them; the ops feed the loss so
// that none is dead):
// - dropout draws from kir's random op, keyed by an implicit `rng` input;
// - layer_norm_grad is a row kernel for the input gradient and one kernel
//   over [C, rows] for the weight and bias gradients;
// - attention_grad and embedding_grad are library steps reading strided
//   views (the heads split by a reshape and a transpose cost nothing);
// - cross_entropy_grad is a row kernel reusing the forward's lse;
// - a sum over every dim is a row kernel and a second, small reduction.

// CHECK: input rng: buffer [[RNG:[0-9]+]]
// CHECK: [[RNG]]: input i64[2] 16 B  rng

// CHECK-LABEL: schedule:
// CHECK-NEXT: 0: kernel @k0_embedding_dropout_layer_norm
// CHECK-NEXT: 1: kernel @k1_layer_norm_grad
// CHECK-NEXT: 2: kernel @k2_layer_norm_grad_params
// CHECK-NEXT: 3: attention batch 2 heads 2 seq 4 head_dim 4 scale 5.000000e-01 causal q=buffer [[DX:[0-9]+]]+0 [32, 4, 8, 1]
// CHECK-NEXT: 4: attention_grad batch 2 heads 2 seq 4 head_dim 4 scale 5.000000e-01 causal dout=buffer [[O:[0-9]+]]+0 [32, 16, 4, 1] q=buffer [[DX]]+0 [32, 4, 8, 1] k=buffer [[DX]]+0 [32, 4, 8, 1] v=buffer [[DX]]+0 [32, 4, 8, 1] out=buffer [[O]]+0 [32, 16, 4, 1] lse=buffer {{[0-9]+}}+0 [8, 4, 1] dq=buffer [[DQ:[0-9]+]]+0 [32, 4, 8, 1]
// CHECK-NEXT: 5: embedding_grad positions 8 rows 16 channels 8 ids=buffer 3+0 [1] grad=buffer [[DQ]]+0 [8, 1] out=buffer {{[0-9]+}}+0 [8, 1]
// CHECK: kernel @{{k[0-9]+}}_cross_entropy_grad
// CHECK-NEXT: kernel @[[$ROWS:k[0-9]+]]_reduce_sum
// CHECK-NEXT: kernel @[[$TOTAL:k[0-9]+]]_reduce_sum

// CHECK-LABEL: kernel @k0_embedding_dropout_layer_norm domain
// CHECK: random %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : f32  // column

// CHECK-LABEL: kernel @k2_layer_norm_grad_params domain [8, 8]
// CHECK: reduce_sum
// CHECK: reduce_sum

// CHECK: kernel @[[$ROWS]]_reduce_sum domain [2, 4, 16]
// CHECK: kernel @[[$TOTAL]]_reduce_sum domain [1, 8]

func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %w: tensor<8xf32> {llmc.param = "ln.weight"},
                   %b: tensor<8xf32> {llmc.param = "ln.bias"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"})
    -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %xd = llmc.dropout %x {rate = 1.000000e-01 : f32, stream = 0 : i64}
      : tensor<2x4x8xf32>
  %y, %m, %r = llmc.layer_norm %xd, %w, %b {epsilon = 1.000000e-05 : f32}
      : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %dx, %dw, %db = llmc.layer_norm_grad %y, %xd, %w, %m, %r
      : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4xf32>,
        tensor<2x4xf32>
  %split = llmc.reshape %dx : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = llmc.transpose %split, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
  %o, %lse = llmc.attention %q, %q, %q {causal, scale = 5.000000e-01 : f32}
      : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>
  %dq, %dk, %dv = llmc.attention_grad %o, %q, %q, %q, %o, %lse
      {causal, scale = 5.000000e-01 : f32}
      : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>,
        tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4xf32>
  %merged = llmc.transpose %dq, [0, 2, 1, 3] : tensor<2x2x4x4xf32>
  %g = llmc.reshape %merged : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %dwte = llmc.embedding_grad %g, %tokens
      : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
  %logits = llmc.matmul %g, %dwte {transpose_b}
      : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss, %lse2 = llmc.cross_entropy %logits, %targets
      : tensor<2x4x16xf32>, tensor<2x4xi32>
  %dl = llmc.cross_entropy_grad %loss, %logits, %targets, %lse2
      : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32>, tensor<2x4xf32>
  %s = llmc.reduce_sum %dl dims [0, 1, 2] : tensor<2x4x16xf32>
  %wsum = llmc.add %dw, %db : tensor<8xf32>, tensor<8xf32>
  %ws = llmc.reduce_sum %wsum dims [0] : tensor<8xf32>
  %t1 = llmc.add %loss, %s : tensor<f32>, tensor<f32>
  %t2 = llmc.add %t1, %ws : tensor<f32>, tensor<f32>
  return %t2 : tensor<f32>
}
