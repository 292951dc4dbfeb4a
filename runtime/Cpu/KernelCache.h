// The on-disk cache of compiled CPU kernel objects, so that a program's
// kernels are compiled once per machine, compiler and kernel IR.
#ifndef LLMC_RUNTIME_CPU_KERNELCACHE_H
#define LLMC_RUNTIME_CPU_KERNELCACHE_H

#include "ir/kernel/KernelIR.h"
#include "runtime/Cpu/CpuKernels.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace llmc::cpu {

/// The version of the code codegen/KernelToCpu emits: part of every cache
/// key, bumped whenever the emitted code changes for the same kernel IR.
constexpr int kCpuCodegenVersion = 3;

struct KernelCacheOptions {
  /// Where objects live; empty: kir::defaultCacheDirectory().
  std::string directory;
  /// Anything else the object depends on, e.g. non-default compile options.
  std::string keySalt;
  /// Off: always compile, read and write no files.
  bool enabled = true;
};

/// What loadCpuKernels did, for logs and benchmarks.
struct CacheStats {
  bool hit = false;          // loaded from the cache, `compile` not called
  bool corruptEntry = false; // an entry failed its checks and was replaced
  double compileSeconds = 0; // in `compile`
  double loadSeconds = 0;    // reading and linking the object
  std::string path;          // the cache entry (empty when disabled)
  std::string warning;       // a damaged entry that was replaced (its path
                             // and what was wrong), or why the entry could
                             // not be written
};

/// SHA-256 (hex) of the printed kernels, the host CPU name and features, the
/// LLVM version, kCpuCodegenVersion and `salt`.
std::string cpuKernelCacheKey(llvm::ArrayRef<kir::Kernel> kernels,
                              llvm::StringRef salt = {});

using CompileObjectFn =
    llvm::function_ref<llvm::Expected<llvm::SmallVector<char, 0>>()>;

/// Loads the kernels' object from the cache, or calls `compile` on a miss
/// (or a corrupt entry) and stores its result atomically. Cache I/O problems
/// never fail the load: they fall back to compiling (see stats->warning).
/// The runtime stays free of MLIR: the tool passes a `compile` that calls
/// codegen's compileKernelsToObject.
llvm::Expected<std::unique_ptr<CpuKernels>>
loadCpuKernels(llvm::ArrayRef<kir::Kernel> kernels, CompileObjectFn compile,
               CacheStats *stats = nullptr,
               const KernelCacheOptions &options = {});

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_KERNELCACHE_H
