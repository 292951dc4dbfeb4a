// The on-disk layouts of token files (TokenFile.h's file comment) shared by
// the reader and the writer: constants, the checked headers, reads at an
// offset and the lazy read-only map. Internal to training/Data.
#ifndef LLMC_TRAINING_DATA_TOKENFILELAYOUT_H
#define LLMC_TRAINING_DATA_TOKENFILELAYOUT_H

#include "training/Data/TokenFile.h"

#include "llvm/ADT/Twine.h"

#include <mutex>

namespace llmc::data::layout {

/// "<path>: <what>".
llvm::Error fileError(llvm::StringRef path, const llvm::Twine &what);

/// llm.c: 256 int32 of header (magic, version, token count), uint16 tokens.
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;

/// llmc: the 64-byte header of TokenFile.h, tokens padded to 8 bytes, the
/// document index.
inline constexpr char kLlmcMagic[8] = {'L', 'L', 'M', 'C', 'T', 'O', 'K', 0};
inline constexpr uint32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 64;
inline int64_t paddedTo8(int64_t bytes) { return (bytes + 7) / 8 * 8; }

/// Megatron .idx: magic (9 bytes), u64 version, u8 dtype code, u64
/// sequence count, u64 document-index length, then int32 sizes, int64
/// pointers, int64 document index.
inline constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I',
                                           'D', 'X', 0,   0};
inline constexpr uint64_t kMegatronVersion = 1;
inline constexpr int64_t kMegatronHeaderBytes = 9 + 8 + 1 + 8 + 8;

/// What a checked header says about a file and where its parts are.
struct Header {
  TokenFormat format = TokenFormat::Text;
  TokenType type = TokenType::U16;
  int64_t tokens = 0;
  /// llmc and Megatron: the documents (Megatron: doc_idx entries - 1).
  int64_t documents = 0;
  /// The file holding the tokens (the .bin of a Megatron pair), its size
  /// and the offset of the first token.
  std::string dataPath;
  int64_t dataBytes = 0;
  int64_t dataOffset = 0;
  /// llmc: the offset of the document index and the header's checksum.
  int64_t indexOffset = 0;
  uint64_t checksum = 0;
  /// Megatron: the .idx, its size, the sequences, where pointers[] and
  /// doc_idx[] start in it.
  std::string indexPath;
  int64_t indexBytes = 0;
  int64_t sequences = 0;
  int64_t pointersOffset = 0;
  int64_t documentsOffset = 0;
};

/// Each reads and checks a header (and a Megatron .idx whole, by reads at
/// an offset); errors start with the path and say what is wrong.
llvm::Expected<Header> readShardHeader(llvm::StringRef path);
llvm::Expected<Header> readLlmcHeader(llvm::StringRef path);
/// `path` is PREFIX.bin or PREFIX.idx.
llvm::Expected<Header> readMegatronHeader(llvm::StringRef path);

/// A file open for reads at an offset: what open() reads headers and
/// indexes through, so that it maps and keeps nothing.
class RawFile {
public:
  static llvm::Expected<RawFile> open(llvm::StringRef path);
  RawFile() = default;
  RawFile(RawFile &&other) noexcept;
  RawFile &operator=(RawFile &&) = delete;
  ~RawFile();
  int64_t size() const { return bytes; }
  /// Reads exactly `count` bytes at `offset` (the caller checked the size).
  llvm::Error readAt(int64_t offset, int64_t count, void *out) const;

private:
  std::string name;
  int fd = -1;
  int64_t bytes = 0;
};

/// A read-only map of a file from byte `from` (rounded down to a page) to
/// its end, made on first use (several threads may ask at once); the file
/// must still have the size it had at open.
class LazyMap {
public:
  LazyMap(std::string path, int64_t fileBytes, int64_t from = 0);
  ~LazyMap();
  LazyMap(const LazyMap &) = delete;
  LazyMap &operator=(const LazyMap &) = delete;

  /// Where file byte 0 would be: data() + offset is file byte `offset`
  /// for offsets in the mapped part.
  llvm::Expected<const uint8_t *> data() const;
  bool mapped() const { return base != nullptr; }
  /// The bytes mapped (once mapped).
  int64_t bytes() const { return expectedBytes - mapStart; }
  /// Drops the whole pages of [offset, offset + count) from this process's
  /// resident set: the page cache keeps them, a later read faults them
  /// back in.
  void drop(int64_t offset, int64_t count) const;

private:
  void mapNow() const;

  std::string path;
  int64_t expectedBytes;
  int64_t mapStart;
  mutable std::once_flag once;
  mutable const uint8_t *base = nullptr;
  mutable std::string failure;
};

} // namespace llmc::data::layout

#endif // LLMC_TRAINING_DATA_TOKENFILELAYOUT_H
