// The exponentials of the CPU executor's attention softmax, vectorized:
// AVX-512F or AVX2 + FMA where the CPU has them (checked at run time),
// else scalar. Every path computes each element with the same operations
// (clamp, round to nearest even, Cody-Waite reduction by ln 2 in two FMAs,
// a degree-7 polynomial by FMAs, scaling by 2^k through the exponent
// bits), so an element does not depend on the path: within 2 ulp of exp
// for results above FLT_MIN, and 0 below exp(-87.34).
#ifndef LLMC_RUNTIME_CPU_VECTOREXP_H
#define LLMC_RUNTIME_CPU_VECTOREXP_H

#include "runtime/Cpu/CpuIsa.h"

#include <cstdint>

namespace llmc::cpu {

/// row[i] = exp(row[i] - shift) for i in [0, n); returns their sum (f32
/// partial sums per vector lane, added at the end).
float expShiftSum(float *row, int64_t n, float shift);

/// The largest of row[0, n); -infinity when n is 0.
float rowMax(const float *row, int64_t n);

/// The path expShiftSum and rowMax take here: "avx512", "avx2" or "scalar".
const char *vectorExpPath();

/// Each path, for the unit tests: the CPU must run it (cpuRuns).
float expShiftSumOn(CpuIsa path, float *row, int64_t n, float shift);
float rowMaxOn(CpuIsa path, const float *row, int64_t n);

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_VECTOREXP_H
