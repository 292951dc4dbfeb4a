// RUN: llmc compile %s --compile-to=kernels | FileCheck %s

// Tests the lowering of a fused model to kernels and library steps:
// - the embedding is a gather kernel (the table row chosen by the id);
// - bias + GELU run as the GEMM's epilogue, in place on the product;
// - slice, reshape and transpose are strides: attention reads q, k and v
//   from the GEMM's product (offsets 0, 8 and 16, row stride 24) and writes
//   its output in the merged-heads order the next GEMM reads;
// - cross-entropy is a row kernel (log-sum-exp and the logit at the target
//   id, no probabilities) and a mean over rows;
// - the memory plan reuses offset 0 for buffers whose lives do not overlap.

// CHECK: program @forward: 12 buffers, 4 kernels, 6 steps, arena 1088 bytes (planned peak)
// CHECK: 5: arena f32[2, 4, 8] 256 B @768 live steps 0..1  embedding
// CHECK: 6: arena f32[2, 4, 24] 768 B @0 live steps 1..2  matmul_add_gelu
// CHECK: 7: arena f32[2, 4, 2, 4] 256 B @768 live steps 2..3  attention#0
// CHECK: 9: arena f32[2, 4, 16] 512 B @0 live steps 3..4  matmul
// CHECK: 11: arena f32[] 4 B @0 live steps 5..5  cross_entropy

// CHECK-LABEL: schedule:
// CHECK-NEXT: 0: kernel @k0_embedding
// CHECK-NEXT: 1: gemm batch 1 m 8 n 24 k 8 transB A=buffer 5+0 [0, 8, 1] B=buffer 1+0 [0, 8, 1] C=buffer 6+0 [192, 24, 1] epilogue @k1_matmul_add_gelu
// CHECK-NEXT: 2: attention batch 2 heads 2 seq 4 head_dim 4 scale 5.000000e-01 causal q=buffer 6+0 [96, 4, 24, 1] k=buffer 6+8 [96, 4, 24, 1] v=buffer 6+16 [96, 4, 24, 1] out=buffer 7+0 [32, 4, 8, 1] lse=buffer 8+0 [8, 4, 1]
// CHECK-NEXT: 3: gemm batch 1 m 8 n 16 k 8 transB A=buffer 7+0 [0, 8, 1] B=buffer 0+0 [0, 8, 1] C=buffer 9+0 [128, 16, 1]
// CHECK-NEXT: 4: kernel @k2_cross_entropy
// CHECK-NEXT: 5: kernel @k3_cross_entropy_mean

// CHECK-LABEL: kernel @k0_embedding domain [2, 4, 8]
// CHECK-NEXT: operand 0: buffer 3 i32 offset 0 strides [4, 1, 0]
// CHECK-NEXT: operand 1: buffer 0 f32 offset 0 strides [8, 0, 1]
// CHECK-NEXT: operand 2: buffer 5 f32 offset 0 strides [32, 8, 1]
// CHECK-NEXT: %0 = load operand 0 : i64  // row
// CHECK-NEXT: %1 = load operand 1 at [%0, i1, i2] : f32  // column
// CHECK-NEXT: store %1 to operand 2  // column

// CHECK-LABEL: kernel @k1_matmul_add_gelu domain [2, 4, 24]
// CHECK-NEXT: operand 0: buffer 6 f32 offset 0 strides [96, 24, 1]
// CHECK-NEXT: operand 1: buffer 2 f32 offset 0 strides [0, 0, 1]
// CHECK: tanh
// CHECK: store %{{[0-9]+}} to operand 0  // column

// CHECK-LABEL: kernel @k2_cross_entropy domain [2, 4, 16]
// CHECK: %[[MAX:[0-9]+]] = reduce_max %0 : f32  // row
// CHECK: %[[SUM:[0-9]+]] = reduce_sum %{{[0-9]+}} : f32  // row
// CHECK: %[[LSE:[0-9]+]] = add %[[MAX]], %{{[0-9]+}} : f32  // row
// CHECK: %[[T:[0-9]+]] = load operand 1 : i64  // row
// CHECK: %[[PICK:[0-9]+]] = load operand 0 at [i0, i1, %[[T]]] : f32  // row
// CHECK: %[[ROW:[0-9]+]] = sub %[[LSE]], %[[PICK]] : f32  // row
// CHECK: store %[[ROW]] to operand 2  // row
// CHECK-NOT: store

// CHECK-LABEL: kernel @k3_cross_entropy_mean domain [1, 8]
// CHECK: reduce_sum
// CHECK: const 1.250000000e-01
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %w: tensor<24x8xf32> {llmc.param = "w"},
                   %b: tensor<24xf32> {llmc.param = "b"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"}) -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4x8xf32>, tensor<24x8xf32>
  %hb = llmc.add %h, %b : tensor<2x4x24xf32>, tensor<24xf32>
  %g = llmc.gelu %hb approximate = tanh : tensor<2x4x24xf32>
  %q = llmc.slice %g offsets [0, 0, 0] sizes [2, 4, 8] : tensor<2x4x24xf32>
  %k = llmc.slice %g offsets [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xf32>
  %v = llmc.slice %g offsets [0, 0, 16] sizes [2, 4, 8] : tensor<2x4x24xf32>
  %q4 = llmc.reshape %q : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k4 = llmc.reshape %k : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v4 = llmc.reshape %v : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %qh = llmc.transpose %q4, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
  %kh = llmc.transpose %k4, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
  %vh = llmc.transpose %v4, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
  %o, %lse = llmc.attention %qh, %kh, %vh {causal, scale = 5.000000e-01 : f32} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>
  %ot = llmc.transpose %o, [0, 2, 1, 3] : tensor<2x2x4x4xf32>
  %om = llmc.reshape %ot : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %logits = llmc.matmul %om, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss, %l = llmc.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
