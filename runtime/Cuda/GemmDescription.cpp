// describeGemm: a GEMM step as cuBLASLt's operands, types and epilogue.
#include "runtime/Cuda/GemmDescription.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <optional>

using namespace llmc;
using namespace llmc::runtime;

namespace {

cudaDataType_t cudaType(kir::DType dtype) {
  switch (dtype) {
  case kir::DType::F16:
    return CUDA_R_16F;
  case kir::DType::BF16:
    return CUDA_R_16BF;
  default:
    return CUDA_R_32F;
  }
}

/// The column-major operand whose op() is the `r` x `c` matrix with
/// element (i, j) at i * rowStride + j * colStride (one stride is 1).
std::optional<LtOperand> columnMajor(int64_t r, int64_t c, int64_t rowStride,
                                     int64_t colStride) {
  if (rowStride == 1 || c == 1) // stored column-major r x c
    return LtOperand{CUBLAS_OP_N, uint64_t(r), uint64_t(c),
                     std::max<int64_t>({colStride, r, 1})};
  if (colStride == 1 || r == 1) // stored column-major c x r, transposed
    return LtOperand{CUBLAS_OP_T, uint64_t(c), uint64_t(r),
                     std::max<int64_t>({rowStride, c, 1})};
  return std::nullopt;
}

} // namespace

bool llmc::runtime::cublasLtTakes(cublasComputeType_t compute,
                                  cudaDataType_t scale, cudaDataType_t a,
                                  cudaDataType_t b, cudaDataType_t c) {
  if (scale != CUDA_R_32F || a != b)
    return false;
  if (compute == CUBLAS_COMPUTE_32F_FAST_TF32)
    return a == CUDA_R_32F && c == CUDA_R_32F;
  if (compute != CUBLAS_COMPUTE_32F)
    return false;
  if (a == CUDA_R_32F)
    return c == CUDA_R_32F;
  if (a == CUDA_R_16BF)
    return c == CUDA_R_16BF || c == CUDA_R_32F;
  if (a == CUDA_R_16F)
    return c == CUDA_R_16F || c == CUDA_R_32F;
  return false;
}

llvm::Expected<GemmDescription>
llmc::runtime::describeGemm(const kir::Program &program, const kir::Step &step,
                            const std::vector<uint64_t> &bases,
                            bool allowTf32, bool fuseEpilogues) {
  const kir::GemmStep &g = step.gemm;
  GemmDescription d;
  const kir::Buffer &bufA = program.buffers[g.a.buffer];
  const kir::Buffer &bufB = program.buffers[g.b.buffer];
  const kir::Buffer &bufC = program.buffers[g.c.buffer];
  d.name = llvm::formatv("gemm {0}x{1}x{2}{3}", g.m, g.n, g.k,
                         g.batch > 1 ? llvm::formatv(" b{0}", g.batch).str()
                                     : std::string())
               .str();
  int64_t aM = g.transA ? g.a.strides[2] : g.a.strides[1];
  int64_t aK = g.transA ? g.a.strides[1] : g.a.strides[2];
  int64_t bK = g.transB ? g.b.strides[2] : g.b.strides[1];
  int64_t bN = g.transB ? g.b.strides[1] : g.b.strides[2];
  std::optional<LtOperand> ltA = columnMajor(g.n, g.k, bN, bK);
  std::optional<LtOperand> ltB = columnMajor(g.k, g.m, aK, aM);
  if (!ltA || !ltB || (g.c.strides[2] != 1 && g.n != 1))
    return llvm::createStringError(
        "GEMM step '" + step.origin +
        "': an operand has no unit stride, which cuBLASLt needs");
  d.a = *ltA;
  d.b = *ltB;
  d.c = LtOperand{CUBLAS_OP_N, uint64_t(g.n), uint64_t(g.m),
                  std::max<int64_t>({g.c.strides[1], g.n, 1})};
  d.typeA = cudaType(bufB.dtype);
  d.typeB = cudaType(bufA.dtype);
  d.typeC = cudaType(bufC.dtype);
  d.biasType = d.typeC;
  bool f32 = bufA.dtype == kir::DType::F32 && bufB.dtype == kir::DType::F32;
  d.compute = f32 && allowTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                               : CUBLAS_COMPUTE_32F;
  if (!cublasLtTakes(d.compute, d.scaleType, d.typeA, d.typeB, d.typeC))
    return llvm::createStringError(llvm::formatv(
        "GEMM step '{0}': cuBLASLt has no GEMM of A {1} x B {2} -> C {3} "
        "(with f32 accumulation it takes bf16 x bf16 or f16 x f16 into the "
        "same type or f32, and f32 x f32 into f32)",
        step.origin, kir::dtypeName(bufA.dtype), kir::dtypeName(bufB.dtype),
        kir::dtypeName(bufC.dtype)));
  d.batch = g.batch;
  d.m = g.m;
  d.n = g.n;
  d.k = g.k;
  d.batchStrideA = g.b.strides[0];
  d.batchStrideB = g.a.strides[0];
  d.batchStrideC = g.c.strides[0];
  d.addressA = bases[g.b.buffer] + g.b.offset * kir::dtypeBytes(bufB.dtype);
  d.addressB = bases[g.a.buffer] + g.a.offset * kir::dtypeBytes(bufA.dtype);
  d.addressC = bases[g.c.buffer] + g.c.offset * kir::dtypeBytes(bufC.dtype);

  // The epilogue kernel runs inside cuBLASLt when codegen classified it as
  // one cuBLASLt computes (kir::GemmStep::epilogueKind, GemmEpilogue.cpp:
  // f32 C, or the bf16/f16 C of llmc-amp, with bias and aux of C's type)
  // and its vectors are placed and typed as cuBLASLt wants: 16-byte
  // aligned, the aux leading dimension a multiple of 8 elements
  // (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), bias and aux of D's type (the
  // bias type is D's but for int8 and fp8 GEMMs; the aux type's default is
  // D's). Anything else keeps its epilogue kernel, launched after the GEMM.
  kir::EpilogueKind kind = g.epilogue >= 0 && fuseEpilogues
                               ? g.epilogueKind
                               : kir::EpilogueKind::None;
  bool hasBias =
      kind == kir::EpilogueKind::Bias || kind == kir::EpilogueKind::GeluBias;
  bool hasAux = kind == kir::EpilogueKind::DGelu;
  auto address = [&](const kir::View &view) {
    return bases[view.buffer] +
           view.offset * kir::dtypeBytes(program.buffers[view.buffer].dtype);
  };
  if (hasBias) {
    d.bias = address(g.epilogueBias);
    d.biasType = cudaType(program.buffers[g.epilogueBias.buffer].dtype);
    if (alignmentOf(d.bias) < 16 || d.biasType != d.typeC)
      kind = kir::EpilogueKind::None;
  }
  if (hasAux) {
    d.aux = address(g.epilogueAux);
    d.auxLd = g.epilogueAux.strides[0];
    if (alignmentOf(d.aux) < 16 || d.auxLd % 8 != 0 ||
        cudaType(program.buffers[g.epilogueAux.buffer].dtype) != d.typeC)
      kind = kir::EpilogueKind::None;
  }
  d.fused = kind;
  if (kind == kir::EpilogueKind::None)
    d.bias = d.aux = 0, d.auxLd = 0, d.biasType = d.typeC;
  return d;
}
