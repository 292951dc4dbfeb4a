// RUN: sed 's/xFT>/xf16>/g' %s > %t.f16.mlir
// RUN: llmc compile %t.f16.mlir --compile-to=kernels | FileCheck %s --check-prefix=FWD -D'$T=f16'
// RUN: llmc compile %t.f16.mlir --function grad_step --compile-to=kernels | FileCheck %s --check-prefix=GRAD -D'$T=f16'
// RUN: llmc compile %t.f16.mlir --compile-to=cuda | FileCheck %s --check-prefix=CUDA -D'$T=f16' -D'$CT=__half'
// RUN: sed 's/xFT>/xbf16>/g' %s > %t.bf16.mlir
// RUN: llmc compile %t.bf16.mlir --compile-to=kernels | FileCheck %s --check-prefix=FWD -D'$T=bf16'
// RUN: llmc compile %t.bf16.mlir --function grad_step --compile-to=kernels | FileCheck %s --check-prefix=GRAD -D'$T=bf16'
// RUN: llmc compile %t.bf16.mlir --compile-to=cuda | FileCheck %s --check-prefix=CUDA -D'$T=bf16' -D'$CT=__nv_bfloat16'

// Tests the lowering of a model in mixed precision, as llmc-amp leaves it
// (parameters cast to T = f16 or bf16 once, products and attention in T,
// the loss in f32 from logits cast back up), to kernels and library steps:
// - T tensors are T buffers: GEMM products (C), attention outputs (lse
//   stays f32), the casts' results; the bias add and GELU run in place on
//   the T product as the GEMM's epilogue;
// - a T value that another op of the same kernel reads is rounded to T
//   where it is computed (round_T: the bias add before the GELU), as if
//   stored and loaded again, so a fused kernel computes the unfused ops'
//   bits; a T value (or cast) that is only stored rounds by its store (no
//   round op: the GELU, the embedding's cast); the logits' product, cast up to f32 for the loss, gets an f32 C that its
//   epilogue rounds to T in place (round_T), so no T buffer of logits;
// - the training step: attention_grad on T tensors, the weight gradients
//   dW = dY^T X of T operands summed by the GEMM into the f32 gradient
//   state (accumulate, no cast or add kernel), the bias gradient (a T sum)
//   cast and added by a kernel;
// - the CUDA module stores T through __half / __nv_bfloat16 and calls
//   llmc_round_T.

// FWD: program @forward
// FWD: 5: arena [[$T]][16, 8] {{.*}} cast
// FWD: 8: arena [[$T]][2, 4, 8] {{.*}} embedding_cast
// FWD: 9: arena [[$T]][2, 4, 24] {{.*}} matmul_add_gelu
// FWD: 10: arena [[$T]][2, 4, 2, 4] {{.*}} attention#0
// FWD: 11: arena f32[2, 2, 4] {{.*}} attention#1
// FWD: 12: arena f32[2, 4, 16] {{.*}} matmul_cast
// FWD-LABEL: schedule:
// FWD: gemm batch 1 m 8 n 24 k 8 transB A=buffer 8+0 [0, 8, 1] B=buffer 6+0 [0, 8, 1] C=buffer 9+0 [192, 24, 1] epilogue @k4_matmul_add_gelu
// FWD-NEXT: attention batch 2 heads 2 seq 4 head_dim 4 {{.*}} q=buffer 9+0 {{.*}} out=buffer 10+0 {{.*}} lse=buffer 11+0
// FWD-NEXT: gemm batch 1 m 8 n 16 k 8 transB A=buffer 10+0 [0, 8, 1] B=buffer 5+0 [0, 8, 1] C=buffer 12+0 [128, 16, 1] epilogue @k5_matmul_cast
// FWD-LABEL: kernel @k3_embedding_cast domain
// FWD-NOT: round_
// FWD: store %{{[0-9]+}} to operand 2
// FWD-LABEL: kernel @k4_matmul_add_gelu domain
// FWD-NEXT: operand 0: buffer 9 [[$T]] offset 0 strides [96, 24, 1]
// FWD-NEXT: operand 1: buffer 7 [[$T]] offset 0 strides [0, 0, 1]
// FWD-NEXT: %0 = load operand 0 : f32
// FWD-NEXT: %1 = load operand 1 : f32
// FWD-NEXT: %2 = add %0, %1 : f32
// FWD-NEXT: %3 = round_[[$T]] %2 : f32
// FWD-NOT: round_
// FWD: store %{{[0-9]+}} to operand 0
// FWD-LABEL: kernel @k5_matmul_cast domain
// FWD-NEXT: operand 0: buffer 12 f32 offset 0 strides [64, 16, 1]
// FWD-NEXT: %0 = load operand 0 : f32
// FWD-NEXT: %1 = round_[[$T]] %0 : f32
// FWD-NEXT: store %1 to operand 0

// GRAD: state grad.wte: buffer [[$WTE:[0-9]+]]
// GRAD: state grad.w: buffer [[$W:[0-9]+]]
// GRAD-LABEL: schedule:
// GRAD: attention_grad batch 2 heads 2 seq 4 head_dim 4
// GRAD: gemm batch 1 m 24 n 8 k 8 transA {{.*}} C=buffer [[$W]]+0 [192, 8, 1] accumulate // matmul_cast_add
// GRAD: embedding_grad {{.*}} out=buffer [[$WTE]]+0 [8, 1] accumulate
// GRAD: gemm batch 1 m 16 n 8 k 8 transA {{.*}} C=buffer [[$WTE]]+0 [128, 8, 1] accumulate // matmul_cast_add_add
// GRAD: kernel @{{.*}}cast_add  // cast_add
// GRAD-NOT: update grad.w
// GRAD-LABEL: kernels:

// CUDA-LABEL: // k4_matmul_add_gelu: matmul_add_gelu
// CUDA: [[$CT]] *__restrict__ op0,
// CUDA-LABEL: // k5_matmul_cast: matmul_cast
// CUDA: float *__restrict__ op0)
// CUDA: llmc_round_[[$T]](
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %w: tensor<24x8xf32> {llmc.param = "w"},
                   %b: tensor<24xf32> {llmc.param = "b"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"}) -> tensor<f32> {
  %wte16 = llmc.cast %wte : tensor<16x8xf32> -> tensor<16x8xFT>
  %w16 = llmc.cast %w : tensor<24x8xf32> -> tensor<24x8xFT>
  %b16 = llmc.cast %b : tensor<24xf32> -> tensor<24xFT>
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %x16 = llmc.cast %x : tensor<2x4x8xf32> -> tensor<2x4x8xFT>
  %h = llmc.matmul %x16, %w16 {transpose_b} : tensor<2x4x8xFT>, tensor<24x8xFT>
  %hb = llmc.add %h, %b16 : tensor<2x4x24xFT>, tensor<24xFT>
  %g = llmc.gelu %hb approximate = tanh : tensor<2x4x24xFT>
  %q = llmc.slice %g offsets [0, 0, 0] sizes [2, 4, 8] : tensor<2x4x24xFT>
  %k = llmc.slice %g offsets [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xFT>
  %v = llmc.slice %g offsets [0, 0, 16] sizes [2, 4, 8] : tensor<2x4x24xFT>
  %q4 = llmc.reshape %q : tensor<2x4x8xFT> -> tensor<2x4x2x4xFT>
  %k4 = llmc.reshape %k : tensor<2x4x8xFT> -> tensor<2x4x2x4xFT>
  %v4 = llmc.reshape %v : tensor<2x4x8xFT> -> tensor<2x4x2x4xFT>
  %qh = llmc.transpose %q4, [0, 2, 1, 3] : tensor<2x4x2x4xFT>
  %kh = llmc.transpose %k4, [0, 2, 1, 3] : tensor<2x4x2x4xFT>
  %vh = llmc.transpose %v4, [0, 2, 1, 3] : tensor<2x4x2x4xFT>
  %o, %lse = llmc.attention %qh, %kh, %vh {causal, scale = 5.000000e-01 : f32} : tensor<2x2x4x4xFT>, tensor<2x2x4x4xFT>, tensor<2x2x4x4xFT>
  %ot = llmc.transpose %o, [0, 2, 1, 3] : tensor<2x2x4x4xFT>
  %om = llmc.reshape %ot : tensor<2x4x2x4xFT> -> tensor<2x4x8xFT>
  %logits = llmc.matmul %om, %wte16 {transpose_b} : tensor<2x4x8xFT>, tensor<16x8xFT>
  %lf = llmc.cast %logits : tensor<2x4x16xFT> -> tensor<2x4x16xf32>
  %loss, %l = llmc.cross_entropy %lf, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
