// Bulk conversions between f32 and the 16-bit float storage types (f16,
// bf16) for the CPU executor's library steps (GEMMs, attention), which run
// in f32 on widened copies of narrow operands and round their results back.
//
// Every conversion gives the bits of runtime::floatToHalf / floatToBFloat16
// / halfToFloat / bfloat16ToFloat (runtime/Weights/Weights.h): round to nearest
// even, overflow to infinity, subnormals kept, NaN quieted with its sign and
// top payload bits (one exception: F16C widens a signaling f16 NaN to a
// quiet one, where halfToFloat keeps it signaling). Where the CPU has them,
// AVX2 or AVX-512 (widening), F16C (f16, both directions) and AVX-512 BF16
// (f32 -> bf16) do the work; the code checks the CPU at run time, so one
// binary runs everywhere.
#ifndef LLMC_RUNTIME_CPU_LOWPRECISION_H
#define LLMC_RUNTIME_CPU_LOWPRECISION_H

#include "ir/kernel/KernelIR.h"
#include "runtime/Cpu/CpuIsa.h"

#include <cstdint>

namespace llmc::cpu {

/// `count` contiguous elements of `type` (F32, F16 or BF16) at `src`,
/// widened to f32 at `dst` (exact; F32 is a copy), on bestCpuIsa().
void widenToFloat(kir::DType type, const void *src, int64_t count,
                  float *dst);

/// widenToFloat on `isa`, which the CPU must run (tests check every one
/// it runs): portable loops (Scalar), 8 lanes (Avx2: bf16 zero-extended
/// and shifted; F16C's VCVTPH2PS for f16, the portable loop on a CPU
/// without F16C) or 16 lanes (Avx512, both). The staged GEMMs widen every
/// 16-bit operand panel by panel, so the lanes show in a whole bf16 step
/// on a CPU without BF16 dot products: the portable loop compiles to
/// SSE2's 4 lanes.
void widenToFloat(CpuIsa isa, kir::DType type, const void *src, int64_t count,
                  float *dst);

/// `count` contiguous f32 values rounded to `type` (F32, F16 or BF16) at
/// `dst` (F32 is a copy).
void narrowFromFloat(kir::DType type, const float *src, int64_t count,
                     void *dst);

/// Which instructions the conversions use on this CPU, for people and
/// tests: the widening's CpuIsa and the rounding's F16C and AVX-512 BF16
/// ("widen avx512, narrow f16c+avx512bf16"), or "scalar".
const char *lowPrecisionPath();

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_LOWPRECISION_H
