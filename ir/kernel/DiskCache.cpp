// The on-disk cache of compiled code: keys, entry checks and atomic writes.
#include "ir/kernel/DiskCache.h"

#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cassert>
#include <cstring>

using namespace llmc;
using namespace llmc::kir;

namespace {

constexpr size_t kMagicBytes = 8;
constexpr size_t kHeaderBytes = kMagicBytes + 8 + 32;

std::array<uint8_t, 32> sha256(llvm::StringRef bytes) {
  return llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes));
}

} // namespace

CacheKey &CacheKey::add(llvm::StringRef part) {
  hasher.update(part);
  hasher.update("\n");
  return *this;
}

std::string CacheKey::hex() {
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

DiskCache::DiskCache(llvm::StringRef directory, bool enabled,
                     llvm::StringRef magic, llvm::StringRef prefix,
                     llvm::StringRef suffix)
    : magic(magic.str()), prefix(prefix.str()), suffix(suffix.str()) {
  assert(magic.size() == kMagicBytes && "a cache entry's magic is 8 bytes");
  if (enabled)
    this->directory =
        directory.empty() ? defaultCacheDirectory() : directory.str();
}

std::string DiskCache::entryPath(llvm::StringRef key) const {
  if (directory.empty())
    return "";
  llvm::SmallString<256> path(directory);
  llvm::sys::path::append(path, prefix + key + suffix);
  return std::string(path);
}

CacheEntry DiskCache::read(llvm::StringRef path) const {
  CacheEntry entry;
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false);
  if (!file)
    return entry; // Missing (or unreadable: rewritten like a miss)
  entry.state = CacheEntry::State::Damaged;
  llvm::StringRef bytes = (*file)->getBuffer();
  if (bytes.size() < kHeaderBytes) {
    entry.damage =
        std::to_string(bytes.size()) + " bytes, shorter than its header";
    return entry;
  }
  if (!bytes.starts_with(magic)) {
    entry.damage = "bad magic";
    return entry;
  }
  uint64_t size = llvm::support::endian::read64le(bytes.data() + kMagicBytes);
  if (size != bytes.size() - kHeaderBytes) {
    entry.damage = "its header records " + std::to_string(size) +
                   " bytes of payload, the file holds " +
                   std::to_string(bytes.size() - kHeaderBytes);
    return entry;
  }
  llvm::StringRef payload = bytes.drop_front(kHeaderBytes);
  std::array<uint8_t, 32> digest = sha256(payload);
  if (std::memcmp(digest.data(), bytes.data() + kMagicBytes + 8,
                  digest.size()) != 0) {
    entry.damage = "SHA-256 mismatch";
    return entry;
  }
  entry.state = CacheEntry::State::Valid;
  entry.payload = payload;
  entry.file = std::move(*file);
  return entry;
}

llvm::Error DiskCache::write(llvm::StringRef path,
                             llvm::StringRef payload) const {
  llvm::SmallString<256> parent(path);
  llvm::sys::path::remove_filename(parent);
  if (std::error_code error = llvm::sys::fs::create_directories(parent))
    return llvm::createStringError(error, "cannot create the cache directory " +
                                              parent + ": " + error.message());
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    char size[8];
    llvm::support::endian::write64le(size, payload.size());
    std::array<uint8_t, 32> digest = sha256(payload);
    os << magic;
    os.write(size, sizeof(size));
    os.write(reinterpret_cast<const char *>(digest.data()), digest.size());
    os << payload;
    return llvm::Error::success();
  });
}
