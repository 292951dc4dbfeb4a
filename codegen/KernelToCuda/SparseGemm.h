// The 2:4 sparse GEMM of the CUDA backend on the sparse tensor cores:
// CUDA C++ source of y = x · Wᵀ with W [n, k] 2:4 along k (the weight, the
// sparse A operand of mma.sp.sync.aligned.m16n8k32, in runtime/Weights/Sparsity.h's
// TensorCoreTwoOfFour order) and x [m, k] bf16 or f16 (the dense B operand),
// f32 accumulation and f32 y; its launch shape. Like FlashAttention.h it
// needs neither MLIR nor the CUDA toolkit; NVRTC compiles the source for
// sm_80 and sm_90 (codegen/KernelToCuda/Nvrtc.h), and the same source
// compiles on the host against the emulation of the instruction in
// test/unit/codegen/KernelToCuda/CudaEmulation.h.
//
// Kernel ABI: one argument, the contract's SparseGemmArgs by value
// (ir/kernel/CudaModule.h; llmc_sparse_gemm_args in the source):
//   extern "C" __global__ void llmc_sparse_gemm_bf16(llmc_sparse_gemm_args);
//   extern "C" __global__ void llmc_sparse_gemm_f16(llmc_sparse_gemm_args);
#ifndef LLMC_CODEGEN_KERNELTOCUDA_SPARSEGEMM_H
#define LLMC_CODEGEN_KERNELTOCUDA_SPARSEGEMM_H

#include "ir/kernel/CudaModule.h"

#include <cstdint>
#include <string>

namespace llmc::cuda {

/// Bump with any change to the emitted source (cache keys).
constexpr int kSparseGemmVersion = 1;

/// W rows a warp computes (the instruction's M) and warps a block has.
constexpr int64_t kSparseGemmRowsPerWarp = 16;
constexpr int64_t kSparseGemmWarps = 4;
/// x rows (tokens) a block computes: 4 tiles of the instruction's N = 8.
constexpr int64_t kSparseGemmTokensPerBlock = 32;

/// "llmc_sparse_gemm_bf16" or "llmc_sparse_gemm_f16".
std::string sparseGemmName(bool f16);

/// One translation unit with the argument struct, the instruction wrapper
/// and both kernels; self-contained (no CUDA headers).
std::string emitSparseGemmModule();

/// The argument block of y[m, n] = x[m, k] · W[n, k]ᵀ with W packed by
/// runtime::packForTensorCores (`values`, `meta`; its tile counts follow
/// from n and k), x at row stride ldx (even) and y at ldy: device
/// addresses on a GPU, host ones under emulation.
SparseGemmArgs sparseGemmArgs(int64_t m, int64_t n, int64_t k,
                              const void *values, const void *meta,
                              const void *x, int64_t ldx, float *y,
                              int64_t ldy);

/// The launch of a product with `n` W rows and `m` x rows: blocks of
/// kSparseGemmWarps warps over W's 16-row tiles (x) and x's 32-row tiles
/// (y), no shared memory.
CudaLaunch sparseGemmLaunch(int64_t n, int64_t m);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_KERNELTOCUDA_SPARSEGEMM_H
