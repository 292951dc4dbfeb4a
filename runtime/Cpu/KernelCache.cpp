// The kernel object cache: content-addressed files with a checked header.
//
// An entry is `<directory>/cpu-<key>.o.llmc`:
//   8 bytes   magic "LLMCOBJ1"
//   8 bytes   payload size, little-endian
//   32 bytes  SHA-256 of the payload
//   payload   the ELF object
// It is written to a temporary file and renamed into place, so readers see
// a whole entry or none; a truncated or altered one fails the checks and is
// recompiled.
#include "runtime/Cpu/KernelCache.h"

#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <chrono>
#include <cstring>

using namespace llmc;
using namespace llmc::cpu;

namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'C', 'O', 'B', 'J', '1'};
constexpr size_t kHeaderBytes = 8 + 8 + 32;

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

std::array<uint8_t, 32> sha256(llvm::ArrayRef<char> bytes) {
  return llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
}

/// The payload of a well-formed entry, or nothing (and in `why`, what is
/// wrong).
std::optional<llvm::ArrayRef<char>> checkEntry(llvm::StringRef file,
                                               std::string &why) {
  if (file.size() < kHeaderBytes) {
    why = std::to_string(file.size()) + " bytes, shorter than its header";
    return std::nullopt;
  }
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    why = "bad magic";
    return std::nullopt;
  }
  uint64_t size = llvm::support::endian::read64le(file.data() + 8);
  if (size != file.size() - kHeaderBytes) {
    why = "its header records " + std::to_string(size) +
          " bytes of object code, the file holds " +
          std::to_string(file.size() - kHeaderBytes);
    return std::nullopt;
  }
  llvm::ArrayRef<char> payload(file.data() + kHeaderBytes, size);
  std::array<uint8_t, 32> digest = sha256(payload);
  if (std::memcmp(digest.data(), file.data() + 16, digest.size()) != 0) {
    why = "SHA-256 mismatch";
    return std::nullopt;
  }
  return payload;
}

/// Writes an entry atomically, creating the cache directory first.
llvm::Error writeEntry(llvm::StringRef path, llvm::ArrayRef<char> payload) {
  llvm::SmallString<256> directory(path);
  llvm::sys::path::remove_filename(directory);
  if (std::error_code error = llvm::sys::fs::create_directories(directory))
    return llvm::createStringError(error, "cannot create the cache directory " +
                                              directory + ": " +
                                              error.message());
  return kir::writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    char size[8];
    llvm::support::endian::write64le(size, payload.size());
    std::array<uint8_t, 32> digest = sha256(payload);
    os.write(kMagic, sizeof(kMagic));
    os.write(size, sizeof(size));
    os.write(reinterpret_cast<const char *>(digest.data()), digest.size());
    os.write(payload.data(), payload.size());
    return llvm::Error::success();
  });
}

} // namespace

std::string llmc::cpu::cpuKernelCacheKey(llvm::ArrayRef<kir::Kernel> kernels,
                                         llvm::StringRef salt) {
  llvm::SHA256 hasher;
  // Each part ends in a newline: no two key lists hash the same text.
  auto add = [&](llvm::StringRef part) {
    hasher.update(part);
    hasher.update("\n");
  };
  add("llmc cpu kernels v" + std::to_string(kCpuCodegenVersion));
  add("llvm " LLVM_VERSION_STRING);
  add(llvm::sys::getHostCPUName());
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> names;
  for (const auto &feature : features)
    names.push_back((feature.second ? "+" : "-") + feature.first().str());
  llvm::sort(names);
  add(llvm::join(names, ","));
  add(salt);
  for (const kir::Kernel &kernel : kernels) {
    std::string text;
    llvm::raw_string_ostream os(text);
    kir::printKernel(os, kernel);
    // The printer rounds constants to 10 digits; the code uses their bits.
    for (const kir::Instr &instr : kernel.body)
      if (instr.op == kir::Op::Const)
        os << llvm::format_hex(llvm::bit_cast<uint64_t>(instr.imm), 18)
           << " ";
    add(text);
  }
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

llvm::Expected<std::unique_ptr<CpuKernels>>
llmc::cpu::loadCpuKernels(llvm::ArrayRef<kir::Kernel> kernels,
                          CompileObjectFn compile, CacheStats *stats,
                          const KernelCacheOptions &options) {
  CacheStats local;
  CacheStats &s = stats ? *stats : local;
  s = CacheStats();

  std::string directory = options.directory.empty()
                              ? kir::defaultCacheDirectory()
                              : options.directory;
  if (options.enabled && !directory.empty()) {
    llvm::SmallString<256> path(directory);
    llvm::sys::path::append(
        path, "cpu-" + cpuKernelCacheKey(kernels, options.keySalt) + ".o.llmc");
    s.path = std::string(path);
  }

  if (!s.path.empty()) {
    auto start = std::chrono::steady_clock::now();
    auto file = llvm::MemoryBuffer::getFile(s.path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
    if (file) {
      std::string why;
      if (std::optional<llvm::ArrayRef<char>> payload =
              checkEntry((*file)->getBuffer(), why)) {
        auto loaded = CpuKernels::load(*payload, s.path);
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
    if (llvm::Error error = writeEntry(s.path, *object))
      s.warning += (s.warning.empty() ? "" : "; ") +
                   ("kernel cache not written: " +
                    llvm::toString(std::move(error)));
  start = std::chrono::steady_clock::now();
  auto loaded = CpuKernels::load(*object, "compiled kernels");
  s.loadSeconds = secondsSince(start);
  return loaded;
}
