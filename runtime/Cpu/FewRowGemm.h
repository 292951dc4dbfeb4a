// Products of a few rows of f32 activations with weights read in place,
// f32, bf16 or f16: the CPU executor's path for GEMM steps of few rows
// (decode; llmc generate and exported binaries). Decode reads every weight
// once a step; at one row that read is the cost, and at up to 8 rows the
// FMAs are: each weight is widened to f32 in registers, never staged in a
// buffer (bf16: zero-extend to 32 bits, shift left 16, as bf16 is f32's
// top half; f16: F16C's vcvtph2ps, exact), and up to 4 rows times 4
// columns of accumulators share every load, where OpenBLAS's f32 GEMM at
// 8 rows of GPT-2's widths reaches under half a core's FMA rate. Products
// and sums are f32 (FMA). Scalar, AVX2+FMA(+F16C) and AVX-512F paths are
// in one binary (per-function target attributes), picked with
// cpuRuns/bestCpuIsa (CpuIsa.h).
#ifndef LLMC_RUNTIME_CPU_FEWROWGEMM_H
#define LLMC_RUNTIME_CPU_FEWROWGEMM_H

#include "ir/kernel/KernelIR.h"
#include "runtime/Cpu/CpuIsa.h"

#include <cstdint>

namespace llmc::cpu {

/// The most rows of x one call takes in one pass over W (callers split
/// larger m; the executor uses the kernel up to this many rows).
constexpr int64_t kFewRowGemmMaxRows = 8;

/// c[i * ldc + j] (= or +=, `accumulate`) sum_p x[i * ldx + p] * W(p, j)
/// for i < m and n0 <= j < n1 (a thread's share of the columns), in f32,
/// the terms in a fixed order (lanes, then a tree). W holds `type` (F32,
/// BF16 or F16) elements: `wNK` true: W stored [n, k], W(p, j) =
/// w[j * ldw + p] (nn.Linear's layout, a dot product per column); false:
/// stored [k, n], W(p, j) = w[p * ldw + j]. x's rows have k valid elements
/// (nothing past them is read). `isa` must be one this CPU runs (F16 on
/// AVX2 also needs F16C; without it the scalar path runs).
void fewRowGemm(CpuIsa isa, kir::DType type, const float *x, int64_t m,
                int64_t ldx, const void *w, int64_t ldw, bool wNK, int64_t k,
                float *c, int64_t ldc, int64_t n0, int64_t n1, bool accumulate);

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_FEWROWGEMM_H
