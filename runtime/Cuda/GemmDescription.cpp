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
  // one cuBLASLt computes (kir::GemmStep::epilogueKind: f32 C, bias and
  // aux only) and its vectors are placed as cuBLASLt wants: 16-byte
  // aligned, the aux leading dimension a multiple of 8 elements.
  kir::EpilogueKind kind = g.epilogue >= 0 && fuseEpilogues
                               ? g.epilogueKind
                               : kir::EpilogueKind::None;
  bool hasBias =
      kind == kir::EpilogueKind::Bias || kind == kir::EpilogueKind::GeluBias;
  bool hasAux = kind == kir::EpilogueKind::DGelu;
  auto f32Address = [&](const kir::View &view) {
    return bases[view.buffer] + view.offset * 4;
  };
  if (hasBias) {
    d.bias = f32Address(g.epilogueBias);
    if (alignmentOf(d.bias) < 16)
      kind = kir::EpilogueKind::None;
  }
  if (hasAux) {
    d.aux = f32Address(g.epilogueAux);
    d.auxLd = g.epilogueAux.strides[0];
    if (alignmentOf(d.aux) < 16 || d.auxLd % 8 != 0)
      kind = kir::EpilogueKind::None;
  }
  // Epilogue kinds are matched on f32 tensors (GemmEpilogue.cpp); a
  // narrow C keeps its epilogue kernel.
  if (d.typeC != CUDA_R_32F)
    kind = kir::EpilogueKind::None;
  d.fused = kind;
  if (kind == kir::EpilogueKind::None)
    d.bias = d.aux = 0, d.auxLd = 0;
  return d;
}
