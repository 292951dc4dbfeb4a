// What the CUDA executor asks cuBLASLt for, per GEMM step: the operand
// layouts, data types, compute type and fused epilogue, derived from the
// kernel IR and the buffers' device addresses alone. No driver or cuBLASLt
// call is made here, so the planning of a whole program (f32, or the bf16
// and fp16 programs of llmc-amp) is unit-tested without a GPU
// (test/unit/runtime/Cuda/GemmPlanTest.cpp); CudaLaunch.cpp turns a
// description into cuBLASLt descriptors and asks the heuristic for one.
#ifndef LLMC_RUNTIME_CUDA_GEMMDESCRIPTION_H
#define LLMC_RUNTIME_CUDA_GEMMDESCRIPTION_H

#include "ir/kernel/Program.h"

#include <cublasLt.h>

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::runtime {

/// One operand of cuBLASLt: a column-major matrix `rows` x `cols` with
/// leading dimension `ld`, used as-is or transposed.
struct LtOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

/// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
/// cuBLASLt's A is the step's B and its B the step's A.
struct GemmDescription {
  LtOperand a, b, c;
  cudaDataType_t typeA = CUDA_R_32F, typeB = CUDA_R_32F, typeC = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scaleType = CUDA_R_32F; // alpha and beta are floats
  int64_t batch = 1, m = 0, n = 0, k = 0; // the step's
  int64_t batchStrideA = 0, batchStrideB = 0, batchStrideC = 0; // elements
  uint64_t addressA = 0, addressB = 0, addressC = 0; // first elements
  /// The epilogue kernel cuBLASLt runs (None: the kernel runs after it),
  /// with its bias or aux vector (aux in C's layout, leading dim auxLd),
  /// both of C's type: biasType is CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, the
  /// aux type is left at its default, D's.
  kir::EpilogueKind fused = kir::EpilogueKind::None;
  uint64_t bias = 0, aux = 0;
  int64_t auxLd = 0;
  cudaDataType_t biasType = CUDA_R_32F;
  std::string name; // "gemm MxNxK[ bB]"
};

/// The largest power of two (up to 256) dividing `address`: cuBLASLt's
/// heuristic must not pick kernels that assume more alignment.
inline uint32_t alignmentOf(uint64_t address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

/// Whether cuBLASLt's cublasLtMatmul takes this combination of compute,
/// scale and operand types (C and D share `c`): the rows of its table of
/// supported types that the executor can produce (CUBLAS_COMPUTE_32F with
/// f32 scale over bf16 x bf16 -> bf16 | f32, f16 x f16 -> f16 | f32,
/// f32 x f32 -> f32, and the TF32 compute type over f32 only).
bool cublasLtTakes(cublasComputeType_t compute, cudaDataType_t scale,
                   cudaDataType_t a, cudaDataType_t b, cudaDataType_t c);

/// The description of GEMM step `step` of `program`, buffers at `bases`
/// (device addresses by buffer index). f32 x f32 runs in exact f32 unless
/// `allowTf32`; f16/bf16 operands always run on the tensor cores with f32
/// accumulation (CUBLAS_COMPUTE_32F), C in its buffer's type. With
/// `fuseEpilogues`, the step's classified epilogue (bias, bias + GELU,
/// GELU, the GELU gradient) is cuBLASLt's where its vectors are aligned and
/// typed as cuBLASLt needs, for f32 and narrow C alike. Errors name the
/// step: an operand without a unit stride, or a type mix cuBLASLt has no
/// kernel for (an f32 A times a narrow-stored weight, which the CPU backend
/// widens in registers).
llvm::Expected<GemmDescription>
describeGemm(const kir::Program &program, const kir::Step &step,
             const std::vector<uint64_t> &bases, bool allowTf32,
             bool fuseEpilogues);

/// Whether the executor launches GEMM step `gemm`'s epilogue kernel after
/// the GEMM: it has one, and cuBLASLt does not run it (`fused`, the
/// description's kind, or None where no algorithm runs that epilogue).
inline bool launchesEpilogueKernel(const kir::GemmStep &gemm,
                                   kir::EpilogueKind fused) {
  return gemm.epilogue >= 0 && fused == kir::EpilogueKind::None;
}

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CUDA_GEMMDESCRIPTION_H
