// The kernel object cache: entries `<directory>/cpu-<key>.o.llmc` of the
// shared on-disk cache (ir/kernel/DiskCache.h, magic "LLMCOBJ1") whose
// payload is the ELF object; a damaged one is recompiled and replaced.
#include "runtime/Cpu/KernelCache.h"

#include "ir/kernel/DiskCache.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <chrono>

using namespace llmc;
using namespace llmc::cpu;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

} // namespace

std::string llmc::cpu::cpuKernelCacheKey(llvm::ArrayRef<kir::Kernel> kernels,
                                         llvm::StringRef salt) {
  kir::CacheKey key;
  key.add("llmc cpu kernels v" + std::to_string(kCpuCodegenVersion));
  key.add("llvm " LLVM_VERSION_STRING);
  key.add(llvm::sys::getHostCPUName());
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> names;
  for (const auto &feature : features)
    names.push_back((feature.second ? "+" : "-") + feature.first().str());
  llvm::sort(names);
  key.add(llvm::join(names, ","));
  key.add(salt);
  for (const kir::Kernel &kernel : kernels) {
    std::string text;
    llvm::raw_string_ostream os(text);
    kir::printKernel(os, kernel);
    // The printer rounds constants to 10 digits; the code uses their bits.
    for (const kir::Instr &instr : kernel.body)
      if (instr.op == kir::Op::Const)
        os << llvm::format_hex(llvm::bit_cast<uint64_t>(instr.imm), 18)
           << " ";
    key.add(text);
  }
  return key.hex();
}

llvm::Expected<std::unique_ptr<CpuKernels>>
llmc::cpu::loadCpuKernels(llvm::ArrayRef<kir::Kernel> kernels,
                          CompileObjectFn compile, CacheStats *stats,
                          const KernelCacheOptions &options) {
  CacheStats local;
  CacheStats &s = stats ? *stats : local;
  s = CacheStats();

  kir::DiskCache cache(options.directory, options.enabled, "LLMCOBJ1", "cpu-",
                       ".o.llmc");
  s.path = cache.entryPath(cpuKernelCacheKey(kernels, options.keySalt));

  if (!s.path.empty()) {
    auto start = std::chrono::steady_clock::now();
    kir::CacheEntry entry = cache.read(s.path);
    if (entry.state != kir::CacheEntry::State::Missing) {
      std::string why = entry.damage;
      if (entry.state == kir::CacheEntry::State::Valid) {
        auto loaded = CpuKernels::load(
            llvm::ArrayRef<char>(entry.payload.data(), entry.payload.size()),
            s.path);
        if (loaded) {
          s.hit = true;
          s.loadSeconds = secondsSince(start);
          return loaded;
        }
        // Checked but unloadable (e.g. another LLVM wrote it): recompile.
        why = "cannot be loaded: " + llvm::toString(loaded.takeError());
      }
      s.corruptEntry = true;
      // Said once: the rebuilt entry replaces it.
      s.warning = "kernel cache entry " + s.path + " is damaged (" + why +
                  "); compiling the kernels again and replacing it";
    }
  }

  auto start = std::chrono::steady_clock::now();
  llvm::Expected<llvm::SmallVector<char, 0>> object = compile();
  s.compileSeconds = secondsSince(start);
  if (!object)
    return object.takeError();
  if (!s.path.empty())
    if (llvm::Error error = cache.write(
            s.path, llvm::StringRef(object->data(), object->size())))
      s.warning += (s.warning.empty() ? "" : "; ") +
                   ("kernel cache not written: " +
                    llvm::toString(std::move(error)));
  start = std::chrono::steady_clock::now();
  auto loaded = CpuKernels::load(*object, "compiled kernels");
  s.loadSeconds = secondsSince(start);
  return loaded;
}
