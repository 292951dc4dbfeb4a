// A bf16 x bf16 -> f32 GEMM on AVX-512 BF16's vdpbf16ps: the CPU
// executor's path for GEMM steps whose A and B are both bf16 (AMP
// training, `precision: bf16`) where the CPU has the instruction, in place
// of widening both operands to f32 for OpenBLAS (runNarrowGemm,
// runtime/Cpu/CpuExecutor.cpp).
//
// Layout: B is packed per block of 256 k x 256 columns into panels of 32
// columns, [k pair][column] as 32-bit words holding (B(2p, j), B(2p+1, j));
// A per block of 256 rows x 256 k into panels of 8 rows, [k pair][row],
// (A(i, 2p), A(i, 2p+1)); an odd k is padded with a zero. The micro-kernel
// keeps 8 rows x 32 columns of C in 16 zmm accumulators and per k pair
// broadcasts one A word and issues vdpbf16ps against two B vectors.
//
// Numerics: each bf16 product is exact in f32; vdpbf16ps adds the odd
// pair's product, then the even one's, into the f32 accumulator, so the
// sum over k is in f32 like OpenBLAS's sgemm of the widened operands, but
// in a different order (pairs, per 256-k block, accumulated in C), and as
// the instruction defines (Intel SDM): denormal inputs read as zero,
// denormal results flushed to zero, round to nearest even whatever MXCSR
// says. bf16Gemm's Emulated path does exactly that in scalar C++, so the
// packing and indexing are tested on any CPU (test/unit/runtime/
// Bf16GemmTest.cpp), and against the instruction where it exists.
#ifndef LLMC_RUNTIME_CPU_BF16GEMM_H
#define LLMC_RUNTIME_CPU_BF16GEMM_H

#include "runtime/Cpu/CpuIsa.h" // cpuHasAvx512Bf16

#include <cstdint>
#include <optional>

namespace llmc::cpu {

/// A bf16 matrix in memory: element (r, c) at data[r * rowStride + c *
/// colStride] (raw bf16 bits).
struct Bf16View {
  const uint16_t *data;
  int64_t rowStride, colStride;
};

/// How the pair products are computed: vdpbf16ps, or a scalar emulation
/// of its semantics (tests; any CPU).
enum class Bf16DotPath : uint8_t { Emulated, Avx512Bf16 };

const char *bf16DotPathName(Bf16DotPath path);

/// The path the executor uses for bf16 GEMMs: Avx512Bf16 where the CPU
/// has it, unless the environment variable LLMC_CPU_BF16_DOT is "off"
/// (benchmarks and tests force the staged f32 path that way); nullopt:
/// widen to f32 and use sgemm. Read once.
std::optional<Bf16DotPath> executorBf16Dot();

/// c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0) + sum_p a(i, p) *
/// b(p, j) for i < m, j < n, in f32 (see above for the order). `path`
/// must be one this CPU runs. Packing space is per thread, kept between
/// calls.
void bf16Gemm(Bf16DotPath path, int64_t m, int64_t n, int64_t k, Bf16View a,
              Bf16View b, float *c, int64_t ldc, bool accumulate);

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_BF16GEMM_H
