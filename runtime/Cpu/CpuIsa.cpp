// The CPU's instruction sets (CpuIsa.h).
#include "runtime/Cpu/CpuIsa.h"

#include <initializer_list>

using namespace llmc::cpu;

const char *llmc::cpu::cpuIsaName(CpuIsa isa) {
  switch (isa) {
  case CpuIsa::Scalar:
    return "scalar";
  case CpuIsa::Avx2:
    return "avx2";
  case CpuIsa::Avx512:
    return "avx512";
  }
  return "?";
}

bool llmc::cpu::cpuRuns(CpuIsa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init(); // safe before the constructors that would run it
  switch (isa) {
  case CpuIsa::Scalar:
    return true;
  case CpuIsa::Avx2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case CpuIsa::Avx512:
    return __builtin_cpu_supports("avx512f");
  }
#endif
  return isa == CpuIsa::Scalar;
}

std::vector<CpuIsa> llmc::cpu::cpuIsasThisCpuRuns() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512})
    if (cpuRuns(isa))
      isas.push_back(isa);
  return isas;
}

CpuIsa llmc::cpu::bestCpuIsa() {
  static const CpuIsa best = cpuIsasThisCpuRuns().back();
  return best;
}

bool llmc::cpu::cpuHasF16c() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  static const bool have =
      __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return have;
#else
  return false;
#endif
}

bool llmc::cpu::cpuHasAvx512Bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return have;
#else
  return false;
#endif
}
