// Classifies GEMM epilogue kernels: which of them compute exactly what a
// GEMM library runs itself (kir::EpilogueKind: a bias add, bias + GELU,
// GELU, the GELU gradient), recorded once at lowering in each
// kir::GemmStep so that backends read the kind as data (the CUDA executor
// picks the cuBLASLt epilogue by it) instead of matching kernels again.
// Kernel IR only: no MLIR.
#ifndef LLMC_CODEGEN_LLMCTOKERNEL_GEMMEPILOGUE_H
#define LLMC_CODEGEN_LLMCTOKERNEL_GEMMEPILOGUE_H

#include "ir/kernel/Program.h"

namespace llmc {

/// What matchGemmEpilogue found: the kind and the operands it reads.
struct FusedEpilogue {
  kir::EpilogueKind kind = kir::EpilogueKind::None;
  kir::View bias;    // Bias, GeluBias: a row of n elements of C's type,
                     // strides {1}
  kir::View aux;     // DGelu: the GELU input, of C's type, rows like C's
                     // (batch 1), strides {auxLd, 1}
  int64_t auxLd = 0; // DGelu: elements from one aux row to the next
};

/// Matches the epilogue kernel of `gemm` against the kinds, exactly: the
/// kernel's one store writes C where the product is, and its value is the
/// kind's expression over loads of C, the bias row and aux, all stored in
/// C's type (f32, or bf16/f16 under llmc-amp), computed in f32 (sums and
/// products in either operand order, constants equal in f32). gelu is the
/// tanh approximation (`llmc.gelu approximate = tanh`), which is
/// cuBLASLt's, and gelu' its derivative, as LlmcToKernel lowers them. The
/// one rounding allowed is the bias sum's to C's type before the GELU,
/// which cuBLASLt skips (why that is accepted: GemmEpilogue.cpp). Anything
/// else (casts, other roundings, residual adds, the erf GELU, index
/// overrides) gives None: the kernel runs after the GEMM.
FusedEpilogue matchGemmEpilogue(const kir::Kernel &kernel,
                                const kir::GemmStep &gemm,
                                const kir::Program &program);

/// Sets epilogueKind, epilogueBias and epilogueAux of every GEMM step of
/// `program` with an epilogue kernel.
void classifyGemmEpilogues(kir::Program &program);

} // namespace llmc

#endif // LLMC_CODEGEN_LLMCTOKERNEL_GEMMEPILOGUE_H
