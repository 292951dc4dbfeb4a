// RUN: llmc compile %s --compile-to=cuda | FileCheck %s

// Tests the CUDA C++ emitted for representative kernels of a small model:
// - the embedding gather is a pointwise kernel with 128-bit accesses, the
//   table row chosen by the loaded id;
// - bias + GELU is the GEMM's epilogue, run in place on C: a vectorized
//   pointwise kernel over C's rows, math through tanhf (no fast math);
// - cross-entropy over 3000 logits is a block-per-row kernel (block
//   reductions through shared memory); the mean over 8 rows is a
//   warp-per-row kernel (shuffles only);
// - the prelude defines Philox and the round-to-nearest-even stores.

// CHECK-LABEL: // llmc CUDA prelude
// CHECK: #include <cuda_fp16.h>
// CHECK: LLMC_DEVICE void llmc_store(__half *p, float x) { *p = __float2half_rn(x); }
// CHECK: x += __shfl_xor_sync(0xffffffffu, x, offset);
// CHECK: LLMC_DEVICE float llmc_random(

// CHECK-LABEL: // k0_embedding: embedding
// CHECK-NEXT: // domain [2, 4, 64]: 8 rows of 64; pointwise, 4-wide accesses; grid 1, block 256
// CHECK: extern "C" __global__ void __launch_bounds__(256)
// CHECK-NEXT: k0_embedding(
// CHECK-NEXT: const int *__restrict__ op0,
// CHECK-NEXT: const float *__restrict__ op1,
// CHECK-NEXT: float *__restrict__ op2) {
// CHECK: item < 128LL; item += (long long)gridDim.x * blockDim.x)
// CHECK: const long long [[ID:v[0-9]+]] = llmc_load(op0 + (4LL * i0 + i1));
// CHECK: llmc_load_vec<4>(op1 + (64LL * [[ID]] + c0), [[ROW:v[0-9]+]]);
// CHECK: llmc_store_vec<4>(op2 + (256LL * i0 + 64LL * i1 + c0), s{{[0-9]+}});
// CHECK-NOT: llmc_store(

// The epilogue reads and writes C (operand 0) through one pointer.
// CHECK-LABEL: // k1_matmul_add_gelu: matmul_add_gelu
// CHECK-NEXT: // domain [2, 4, 192]: 8 rows of 192; pointwise, 4-wide accesses; grid 2, block 256
// CHECK: k1_matmul_add_gelu(
// CHECK-NEXT: float *__restrict__ op0,
// CHECK-NEXT: const float *__restrict__ op1) {
// CHECK: llmc_load_vec<4>(op0 + (768LL * i0 + 192LL * i1 + c0), [[C:v[0-9]+]]);
// CHECK: tanhf(
// CHECK: llmc_store_vec<4>(op0 + (768LL * i0 + 192LL * i1 + c0), s{{[0-9]+}});

// CHECK-LABEL: // k2_cross_entropy: cross_entropy
// CHECK-NEXT: // domain [2, 4, 3000]: 8 rows of 3000; block-per-row; grid 8, block 512
// CHECK: extern "C" __global__ void __launch_bounds__(512)
// CHECK: __shared__ float llmc_scratch[32];
// CHECK-NEXT: for (long long row = blockIdx.x; row < 8LL; row += gridDim.x) {
// CHECK: // reduction phase 1
// CHECK-NEXT: float [[MAXACC:acc[0-9]+]] = __int_as_float(0xff800000);
// CHECK-NEXT: for (long long c = (long long)threadIdx.x; c < 3000LL; c += 512LL) {
// CHECK: llmc_block_max([[MAXACC]], llmc_scratch);
// CHECK: // reduction phase 2
// CHECK: expf(
// CHECK: llmc_block_sum(acc{{[0-9]+}}, llmc_scratch);
// CHECK: logf(
// CHECK: if (threadIdx.x == 0) {
// CHECK-NEXT: llmc_store(op2 + (4LL * i0 + i1), v{{[0-9]+}});

// CHECK-LABEL: // k3_cross_entropy_mean: cross_entropy mean
// CHECK-NEXT: // domain [1, 8]: 1 row of 8; warp-per-row, 4-wide accesses; grid 1, block 256
// CHECK: const int lane = threadIdx.x & 31;
// CHECK-NEXT: for (long long row = (long long)blockIdx.x * 8 + (threadIdx.x >> 5); row < 1LL; row += (long long)gridDim.x * 8) {
// CHECK-NOT: __syncthreads
// CHECK: llmc_warp_sum(
// CHECK: if (lane == 0) {
// CHECK-NEXT: llmc_store(op1, v{{[0-9]+}});

func.func @forward(%wte: tensor<3000x64xf32> {llmc.param = "wte"},
                   %w: tensor<192x64xf32> {llmc.param = "w"},
                   %b: tensor<192xf32> {llmc.param = "b"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"}) -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<3000x64xf32>, tensor<2x4xi32>
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4x64xf32>, tensor<192x64xf32>
  %hb = llmc.add %h, %b : tensor<2x4x192xf32>, tensor<192xf32>
  %g = llmc.gelu %hb approximate = tanh : tensor<2x4x192xf32>
  %q = llmc.slice %g offsets [0, 0, 0] sizes [2, 4, 64] : tensor<2x4x192xf32>
  %k = llmc.slice %g offsets [0, 0, 64] sizes [2, 4, 64] : tensor<2x4x192xf32>
  %v = llmc.slice %g offsets [0, 0, 128] sizes [2, 4, 64] : tensor<2x4x192xf32>
  %q4 = llmc.reshape %q : tensor<2x4x64xf32> -> tensor<2x4x2x32xf32>
  %k4 = llmc.reshape %k : tensor<2x4x64xf32> -> tensor<2x4x2x32xf32>
  %v4 = llmc.reshape %v : tensor<2x4x64xf32> -> tensor<2x4x2x32xf32>
  %qh = llmc.transpose %q4, [0, 2, 1, 3] : tensor<2x4x2x32xf32>
  %kh = llmc.transpose %k4, [0, 2, 1, 3] : tensor<2x4x2x32xf32>
  %vh = llmc.transpose %v4, [0, 2, 1, 3] : tensor<2x4x2x32xf32>
  %o, %lse = llmc.attention %qh, %kh, %vh {causal, scale = 1.250000e-01 : f32} : tensor<2x2x4x32xf32>, tensor<2x2x4x32xf32>, tensor<2x2x4x32xf32>
  %ot = llmc.transpose %o, [0, 2, 1, 3] : tensor<2x2x4x32xf32>
  %om = llmc.reshape %ot : tensor<2x4x2x32xf32> -> tensor<2x4x64xf32>
  %logits = llmc.matmul %om, %wte {transpose_b} : tensor<2x4x64xf32>, tensor<3000x64xf32>
  %loss, %l = llmc.cross_entropy %logits, %targets : tensor<2x4x3000xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
