// What every CPU benchmark prints first: the CPU it ran on and the
// instruction set the JIT-compiled kernels were built for (the host CPU's
// name and its vector features, as llmc's kernel compiler targets them).
#ifndef LLMC_BENCH_MACHINE_H
#define LLMC_BENCH_MACHINE_H

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/TargetParser/Host.h"

#include <string>

namespace llmc::bench {

/// The model name /proc/cpuinfo gives, or "unknown CPU".
inline std::string cpuModel() {
  auto cpuinfo = llvm::MemoryBuffer::getFileAsStream("/proc/cpuinfo");
  if (!cpuinfo)
    return "unknown CPU";
  llvm::StringRef text = (*cpuinfo)->getBuffer();
  size_t at = text.find("model name");
  if (at == llvm::StringRef::npos)
    return "unknown CPU";
  return text.substr(at).split('\n').first.split(':').second.trim().str();
}

/// "LLVM JIT for the host CPU NAME, W-wide f32 vectors (avx2 yes, fma yes,
/// avx512f no)": the target of the kernels compiled in this process.
inline std::string kernelTarget() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  auto has = [&](llvm::StringRef name) { return features.lookup(name); };
  int width = has("avx512f") ? 16 : has("avx") ? 8 : 4;
  std::string isa;
  for (const char *name : {"avx2", "fma", "avx512f", "avx512bf16"})
    isa += std::string(isa.empty() ? "" : ", ") + name +
           (has(name) ? " yes" : " no");
  return "LLVM JIT for the host CPU " + llvm::sys::getHostCPUName().str() +
         ", " + std::to_string(width) + "-wide f32 vectors (" + isa + ")";
}

} // namespace llmc::bench

#endif // LLMC_BENCH_MACHINE_H
