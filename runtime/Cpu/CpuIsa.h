// The x86 instruction sets the CPU runtime's hand-vectorized loops are
// written for (conversions, the softmax's exponentials, attention's tiles,
// few-row and 2:4 sparse products), one choice for all of them, and the
// CPU features some of those loops check besides (F16C, AVX-512 BF16). Each
// loop is compiled for its set with a per-function target attribute, so one
// binary runs on any x86-64 CPU, and the set is picked from the CPU at
// run time; tests run every set the CPU has.
#ifndef LLMC_RUNTIME_CPU_CPUISA_H
#define LLMC_RUNTIME_CPU_CPUISA_H

#include <cstdint>
#include <vector>

namespace llmc::cpu {

/// Scalar: portable C++ (what the compiler makes of it for baseline
/// x86-64, or another architecture). Avx2: AVX2 with FMA (Haswell, Zen and
/// later). Avx512: AVX-512F (Skylake-X, Zen 4 and later).
enum class CpuIsa : uint8_t { Scalar, Avx2, Avx512 };

/// "scalar", "avx2", "avx512".
const char *cpuIsaName(CpuIsa isa);

/// Whether this CPU and OS run `isa` (cpuid through
/// __builtin_cpu_supports, which also checks that the OS saves the wide
/// registers).
bool cpuRuns(CpuIsa isa);

/// The widest set this CPU runs.
CpuIsa bestCpuIsa();

/// Every set this CPU runs, Scalar first (the tests run each).
std::vector<CpuIsa> cpuIsasThisCpuRuns();

/// Features beside the sets, each checked by the code that needs it: F16C
/// (VCVTPH2PS/VCVTPS2PH, with AVX's ymm state), which every AVX2 CPU known
/// has but is a feature of its own; AVX-512 BF16 (vdpbf16ps,
/// vcvtneps2bf16, with AVX-512F).
bool cpuHasF16c();
bool cpuHasAvx512Bf16();

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_CPUISA_H
