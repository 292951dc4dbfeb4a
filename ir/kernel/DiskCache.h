// llmc's on-disk cache of compiled code: content-addressed entries with a
// checked header, written atomically. The CPU kernel cache
// (runtime/Cpu/KernelCache.h) and the NVRTC cache
// (codegen/KernelToCuda/Nvrtc.h) are both this, with their own magic, key
// and payload; it lives in the contract layer so that both may include it.
//
// An entry is `<directory>/<prefix><key><suffix>`:
//   8 bytes   magic (one per kind of entry, e.g. "LLMCOBJ1")
//   8 bytes   payload size, little-endian
//   32 bytes  SHA-256 of the payload
//   payload
// written to a temporary file and renamed into place (AtomicFile.h), so a
// reader sees a whole entry or none, and concurrent writers of one key
// leave one whole entry; a truncated or altered one fails the checks.
#ifndef LLMC_IR_KERNEL_DISKCACHE_H
#define LLMC_IR_KERNEL_DISKCACHE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"

#include <memory>
#include <string>

namespace llmc::kir {

/// A cache key: SHA-256 over parts, each followed by a newline, so that no
/// two lists of parts hash the same text.
class CacheKey {
public:
  CacheKey &add(llvm::StringRef part);
  /// The key as 64 lower-case hex digits; ends the hashing (call once).
  std::string hex();

private:
  llvm::SHA256 hasher;
};

/// What DiskCache::read found at an entry's path.
struct CacheEntry {
  enum class State { Missing, Damaged, Valid };
  State state = State::Missing;
  std::string damage;                       // Damaged: what is wrong
  std::unique_ptr<llvm::MemoryBuffer> file; // Valid: holds the payload
  llvm::StringRef payload;                  // Valid: the bytes written
};

/// One kind of entry in one cache directory.
class DiskCache {
public:
  /// `magic` is 8 bytes. An empty `directory` means defaultCacheDirectory()
  /// (AtomicFile.h); the cache is off when `enabled` is false or there is
  /// no directory at all.
  DiskCache(llvm::StringRef directory, bool enabled, llvm::StringRef magic,
            llvm::StringRef prefix, llvm::StringRef suffix);

  bool enabled() const { return !directory.empty(); }
  /// The entry of `key`; empty when the cache is off.
  std::string entryPath(llvm::StringRef key) const;

  /// Reads and checks the entry at `path`.
  CacheEntry read(llvm::StringRef path) const;
  /// Writes `payload` as the entry at `path`, creating the directory first.
  llvm::Error write(llvm::StringRef path, llvm::StringRef payload) const;

private:
  std::string directory, magic, prefix, suffix;
};

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_DISKCACHE_H
