// The on-disk layouts of token files: header checks (llm.c, llmc, Megatron
// .idx against its .bin), reads at an offset, the lazy read-only map.
#include "training/Data/TokenFileLayout.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace llmc::data;
using namespace llmc::data::layout;
using llvm::formatv;
namespace endian = llvm::support::endian;

llvm::Error llmc::data::layout::fileError(llvm::StringRef path,
                                          const llvm::Twine &what) {
  return llvm::createStringError(path + ": " + what);
}

static std::string errnoMessage(int error) {
  return std::error_code(error, std::generic_category()).message();
}

//===----------------------------------------------------------------------===//
// RawFile and LazyMap
//===----------------------------------------------------------------------===//

llvm::Expected<RawFile> RawFile::open(llvm::StringRef path) {
  RawFile file;
  file.name = path.str();
  file.fd = ::open(file.name.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0)
    return fileError(path, "cannot open: " + errnoMessage(errno));
  struct stat info;
  if (::fstat(file.fd, &info) != 0 || !S_ISREG(info.st_mode))
    return fileError(path, "not a regular file");
  file.bytes = info.st_size;
  return file;
}

RawFile::RawFile(RawFile &&other) noexcept
    : name(std::move(other.name)), fd(other.fd), bytes(other.bytes) {
  other.fd = -1;
}

RawFile::~RawFile() {
  if (fd >= 0)
    ::close(fd);
}

llvm::Error RawFile::readAt(int64_t offset, int64_t count, void *out) const {
  char *dest = static_cast<char *>(out);
  while (count > 0) {
    ssize_t got = ::pread(fd, dest, count, offset);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return fileError(name, formatv("cannot read {0} bytes at offset {1}{2}",
                                     count, offset,
                                     got < 0 ? ": " + errnoMessage(errno)
                                             : std::string()));
    dest += got, offset += got, count -= got;
  }
  return llvm::Error::success();
}

static int64_t pageSize() {
  static const int64_t size = ::sysconf(_SC_PAGESIZE);
  return size;
}

LazyMap::LazyMap(std::string path, int64_t fileBytes, int64_t from)
    : path(std::move(path)), expectedBytes(fileBytes),
      mapStart(std::min(from, fileBytes) / pageSize() * pageSize()) {}

LazyMap::~LazyMap() {
  if (base)
    ::munmap(const_cast<uint8_t *>(base), bytes());
}

llvm::Expected<const uint8_t *> LazyMap::data() const {
  std::call_once(once, [&] { mapNow(); });
  if (!failure.empty())
    return llvm::createStringError(failure);
  // Callers add file offsets: shift the base back by where the map starts.
  return reinterpret_cast<const uint8_t *>(
      reinterpret_cast<uintptr_t>(base) - static_cast<uintptr_t>(mapStart));
}

void LazyMap::drop(int64_t offset, int64_t count) const {
  if (!base || count <= 0)
    return;
  int64_t first = std::max(offset / pageSize() * pageSize(), mapStart);
  int64_t end = std::min(expectedBytes, offset + count);
  if (end <= first)
    return;
  // Pages shared with a neighbouring range another thread is reading are
  // safe to drop: the map is read-only and shared, so a later touch reads
  // the same bytes back from the page cache.
  ::madvise(const_cast<uint8_t *>(base) + (first - mapStart), end - first,
            MADV_DONTNEED);
}

void LazyMap::mapNow() const {
  if (bytes() == 0)
    return; // nothing to map: no read reaches it
  llvm::Expected<RawFile> file = RawFile::open(path);
  if (!file) {
    failure = llvm::toString(file.takeError());
    return;
  }
  if (file->size() != expectedBytes) {
    failure = formatv("{0}: changed since it was opened ({1} bytes then, {2} "
                      "now)",
                      path, expectedBytes, file->size());
    return;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void *address =
      fd < 0 ? MAP_FAILED
             : ::mmap(nullptr, bytes(), PROT_READ, MAP_SHARED, fd, mapStart);
  int error = errno;
  if (fd >= 0)
    ::close(fd);
  if (address == MAP_FAILED) {
    failure = formatv("{0}: cannot map it: {1}", path, errnoMessage(error));
    return;
  }
  base = static_cast<const uint8_t *>(address);
}

//===----------------------------------------------------------------------===//
// llm.c shards
//===----------------------------------------------------------------------===//

// The checks and messages of the llm.c reader llmc always had, so that
// existing runs fail the same way.
/// For a .bin that is no llm.c shard: the .bin of a Megatron pair whose
/// .idx is missing, maybe. Empty for other names.
static std::string megatronHint(llvm::StringRef path, llvm::StringRef lead,
                                llvm::StringRef trail = "") {
  if (llvm::sys::path::extension(path) != ".bin")
    return "";
  llvm::SmallString<256> idx = path;
  llvm::sys::path::replace_extension(idx, ".idx");
  return formatv("{0}a Megatron dataset's .bin needs its {1} beside it{2}",
                 lead, llvm::sys::path::filename(idx), trail);
}

llvm::Expected<Header> llmc::data::layout::readShardHeader(llvm::StringRef path) {
  llvm::Expected<RawFile> file = RawFile::open(path);
  if (!file)
    return file.takeError();
  if (file->size() < kShardHeaderBytes)
    return fileError(path, formatv("truncated header: the file has {0} "
                                   "bytes, an llm.c shard header has {1}{2}",
                                   file->size(), kShardHeaderBytes,
                                   megatronHint(path, " (", ")")));
  uint8_t head[12];
  if (llvm::Error error = file->readAt(0, sizeof(head), head))
    return error;
  int32_t magic = endian::read32le(head), version = endian::read32le(head + 4),
          count = endian::read32le(head + 8);
  if (magic != kShardMagic)
    return fileError(path, formatv("bad magic number {0} (an llm.c token "
                                   "shard starts with {1}{2})",
                                   magic, kShardMagic, megatronHint(path, "; ")));
  if (version != kShardVersion)
    return fileError(path, formatv("unsupported version {0} (expected {1}: "
                                   "uint16 tokens)",
                                   version, kShardVersion));
  if (count < 0)
    return fileError(path, formatv("negative token count {0}", count));
  int64_t payload = file->size() - kShardHeaderBytes;
  int64_t expected = 2 * static_cast<int64_t>(count);
  if (payload < expected)
    return fileError(path, formatv("truncated: the header counts {0} tokens "
                                   "({1} bytes) but the file holds {2} bytes "
                                   "of tokens",
                                   count, expected, payload));
  if (payload > expected)
    return fileError(path, formatv("token count mismatch: the header counts "
                                   "{0} tokens ({1} bytes) but the file holds "
                                   "{2} bytes of tokens",
                                   count, expected, payload));
  Header header;
  header.format = TokenFormat::LlmcShard;
  header.type = TokenType::U16;
  header.tokens = count;
  header.dataPath = path.str();
  header.dataBytes = file->size();
  header.dataOffset = kShardHeaderBytes;
  return header;
}

//===----------------------------------------------------------------------===//
// llmc token files
//===----------------------------------------------------------------------===//

llvm::Expected<Header> llmc::data::layout::readLlmcHeader(llvm::StringRef path) {
  llvm::Expected<RawFile> file = RawFile::open(path);
  if (!file)
    return file.takeError();
  if (file->size() < kLlmcHeaderBytes)
    return fileError(path, formatv("truncated header: the file has {0} "
                                   "bytes, an llmc token file header has {1}",
                                   file->size(), kLlmcHeaderBytes));
  uint8_t head[kLlmcHeaderBytes];
  if (llvm::Error error = file->readAt(0, sizeof(head), head))
    return error;
  if (std::memcmp(head, kLlmcMagic, 8) != 0)
    return fileError(path, "bad magic (an llmc token file starts with "
                           "\"LLMCTOK\\0\")");
  uint32_t version = endian::read32le(head + 8);
  uint32_t tokenBytes = endian::read32le(head + 12);
  uint64_t tokens = endian::read64le(head + 16);
  uint64_t documents = endian::read64le(head + 24);
  if (version != kLlmcVersion)
    return fileError(path, formatv("unsupported version {0} (expected {1})",
                                   version, kLlmcVersion));
  if (tokenBytes != 2 && tokenBytes != 4)
    return fileError(path, formatv("unsupported dtype: {0} bytes per token "
                                   "(expected 2: uint16, or 4: uint32)",
                                   tokenBytes));
  if (std::any_of(head + 40, head + 64, [](uint8_t b) { return b != 0; }))
    return fileError(path, "header bytes 40-63 are not zero (reserved)");
  // Bounds that keep the size arithmetic below from overflowing.
  constexpr uint64_t kMax = uint64_t(1) << 58;
  if (tokens > kMax || documents > kMax)
    return fileError(path, formatv("the header counts {0} tokens and {1} "
                                   "documents: more than a file can hold",
                                   tokens, documents));
  int64_t tokenArea = paddedTo8(int64_t(tokens) * tokenBytes);
  int64_t expected =
      kLlmcHeaderBytes + tokenArea + 8 * (int64_t(documents) + 1);
  if (file->size() != expected)
    return fileError(path, formatv("{0}: the header counts {1} tokens and {2} "
                                   "documents ({3} bytes in all) but the file "
                                   "has {4} bytes",
                                   file->size() < expected ? "truncated"
                                                           : "size mismatch",
                                   tokens, documents, expected, file->size()));
  Header header;
  header.format = TokenFormat::Llmc;
  header.type = tokenBytes == 2 ? TokenType::U16 : TokenType::U32;
  header.tokens = int64_t(tokens);
  header.documents = int64_t(documents);
  header.dataPath = path.str();
  header.dataBytes = file->size();
  header.dataOffset = kLlmcHeaderBytes;
  header.indexOffset = kLlmcHeaderBytes + tokenArea;
  header.checksum = endian::read64le(head + 32);
  return header;
}

//===----------------------------------------------------------------------===//
// Megatron indexed datasets
//===----------------------------------------------------------------------===//

/// Megatron's dtype codes; floating-point ones are named to be refused.
static llvm::Expected<TokenType> megatronType(llvm::StringRef path,
                                              uint8_t code) {
  switch (code) {
  case 1:
    return TokenType::U8;
  case 2:
    return TokenType::I8;
  case 3:
    return TokenType::I16;
  case 4:
    return TokenType::I32;
  case 5:
    return TokenType::I64;
  case 8:
    return TokenType::U16;
  case 6:
  case 7:
    return fileError(path, formatv("unsupported dtype {0} (code {1}): token "
                                   "ids are integers",
                                   code == 6 ? "float64" : "float32", code));
  }
  return fileError(path, formatv("unsupported dtype code {0} (Megatron's "
                                 "are 1-8)",
                                 code));
}

/// Reads `count` little-endian integers of `width` bytes at `offset` in
/// blocks, calling `visit(i, value)` for each; stops at its first error.
static llvm::Error
forEachInteger(const RawFile &file, int64_t offset, int64_t count, int width,
               llvm::function_ref<llvm::Error(int64_t, int64_t)> visit) {
  constexpr int64_t kBlock = 1 << 16;
  std::vector<uint8_t> buffer(kBlock * width);
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    if (llvm::Error error =
            file.readAt(offset + start * width, n * width, buffer.data()))
      return error;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t *p = buffer.data() + i * width;
      int64_t value = width == 4 ? int64_t(int32_t(endian::read32le(p)))
                                 : int64_t(endian::read64le(p));
      if (llvm::Error error = visit(start + i, value))
        return error;
    }
  }
  return llvm::Error::success();
}

/// Checks that the sequences lie back to back from byte 0 and fill the .bin
/// exactly; returns the token count.
static llvm::Expected<int64_t>
checkMegatronSequences(const RawFile &idx, llvm::StringRef idxPath,
                       llvm::StringRef binPath, int64_t binBytes,
                       int64_t sequences, int64_t tokenBytes) {
  std::vector<int64_t> sizes;
  int64_t end = 0; // where the previous sequence ends, in bytes
  constexpr int64_t kBlock = 1 << 16;
  for (int64_t start = 0; start < sequences; start += kBlock) {
    int64_t n = std::min(kBlock, sequences - start);
    sizes.clear();
    if (llvm::Error error = forEachInteger(
            idx, kMegatronHeaderBytes + 4 * start, n, 4,
            [&](int64_t i, int64_t size) -> llvm::Error {
              if (size < 0)
                return fileError(idxPath, formatv("sequence {0} has negative "
                                                  "size {1}",
                                                  start + i, size));
              sizes.push_back(size);
              return llvm::Error::success();
            }))
      return error;
    int64_t pointersAt = kMegatronHeaderBytes + 4 * sequences + 8 * start;
    if (llvm::Error error = forEachInteger(
            idx, pointersAt, n, 8, [&](int64_t i, int64_t pointer) -> llvm::Error {
              if (pointer != end)
                return fileError(
                    idxPath,
                    formatv("does not match {0}: sequence {1} starts at byte "
                            "{2}, not at byte {3} where the sequence before it "
                            "ends",
                            binPath, start + i, pointer, end));
              end += sizes[i] * tokenBytes;
              return llvm::Error::success();
            }))
      return error;
  }
  if (end != binBytes)
    return fileError(idxPath, formatv("does not match {0}: its sequences "
                                      "hold {1} bytes of tokens but the .bin "
                                      "has {2} bytes",
                                      binPath, end, binBytes));
  return end / tokenBytes;
}

/// Checks doc_idx: it starts at 0, ascends and ends at the sequence count.
static llvm::Error checkMegatronDocuments(const RawFile &idx,
                                          llvm::StringRef idxPath,
                                          int64_t offset, int64_t entries,
                                          int64_t sequences) {
  int64_t previous = 0;
  if (llvm::Error error = forEachInteger(
          idx, offset, entries, 8, [&](int64_t d, int64_t value) -> llvm::Error {
            if ((d == 0 && value != 0) || value < previous ||
                value > sequences)
              return fileError(idxPath,
                               formatv("document index entry {0} is {1}: "
                                       "entries go from 0 up to the {2} "
                                       "sequences",
                                       d, value, sequences));
            previous = value;
            return llvm::Error::success();
          }))
    return error;
  if (previous != sequences)
    return fileError(idxPath, formatv("document index ends at {0}, not at the "
                                      "{1} sequences",
                                      previous, sequences));
  return llvm::Error::success();
}

llvm::Expected<Header>
llmc::data::layout::readMegatronHeader(llvm::StringRef path) {
  llvm::SmallString<256> idxPath = path, binPath = path;
  llvm::sys::path::replace_extension(idxPath, ".idx");
  llvm::sys::path::replace_extension(binPath, ".bin");
  llvm::Expected<RawFile> idx = RawFile::open(idxPath);
  if (!idx)
    return idx.takeError();
  llvm::Expected<RawFile> bin = RawFile::open(binPath);
  if (!bin)
    return fileError(binPath, formatv("the tokens of the Megatron dataset "
                                      "{0}: {1}",
                                      idxPath, llvm::toString(bin.takeError())));
  if (idx->size() < kMegatronHeaderBytes)
    return fileError(idxPath, formatv("truncated header: the file has {0} "
                                      "bytes, a Megatron index header has {1}",
                                      idx->size(), kMegatronHeaderBytes));
  uint8_t head[kMegatronHeaderBytes];
  if (llvm::Error error = idx->readAt(0, sizeof(head), head))
    return error;
  if (std::memcmp(head, kMegatronMagic, 9) != 0)
    return fileError(idxPath, "bad magic (a Megatron index starts with "
                              "\"MMIDIDX\\0\\0\")");
  uint64_t version = endian::read64le(head + 9);
  if (version != kMegatronVersion)
    return fileError(idxPath, formatv("unsupported version {0} (expected {1})",
                                      version, kMegatronVersion));
  llvm::Expected<TokenType> type = megatronType(idxPath, head[17]);
  if (!type)
    return type.takeError();
  uint64_t sequences = endian::read64le(head + 18);
  uint64_t entries = endian::read64le(head + 26);
  constexpr uint64_t kMax = uint64_t(1) << 56;
  if (sequences > kMax || entries > kMax || entries == 0)
    return fileError(idxPath, formatv("the header counts {0} sequences and "
                                      "{1} document index entries (at least "
                                      "1)",
                                      sequences, entries));
  int64_t expected = kMegatronHeaderBytes + 12 * int64_t(sequences) +
                     8 * int64_t(entries);
  // Multimodal datasets add one int8 mode per sequence after doc_idx.
  if (idx->size() != expected && idx->size() != expected + int64_t(sequences))
    return fileError(idxPath, formatv("{0}: the header counts {1} sequences "
                                      "and {2} document index entries ({3} "
                                      "bytes) but the file has {4} bytes",
                                      idx->size() < expected ? "truncated"
                                                             : "size mismatch",
                                      sequences, entries, expected,
                                      idx->size()));
  int64_t tokenBytes = typeBytes(*type);
  llvm::Expected<int64_t> tokens = checkMegatronSequences(
      *idx, idxPath, binPath, bin->size(), int64_t(sequences), tokenBytes);
  if (!tokens)
    return tokens.takeError();
  int64_t documentsAt = kMegatronHeaderBytes + 12 * int64_t(sequences);
  if (llvm::Error error = checkMegatronDocuments(
          *idx, idxPath, documentsAt, int64_t(entries), int64_t(sequences)))
    return error;
  Header header;
  header.format = TokenFormat::Megatron;
  header.type = *type;
  header.tokens = *tokens;
  header.documents = int64_t(entries) - 1;
  header.dataPath = std::string(binPath);
  header.dataBytes = bin->size();
  header.dataOffset = 0;
  header.indexPath = std::string(idxPath);
  header.indexBytes = idx->size();
  header.sequences = int64_t(sequences);
  header.pointersOffset = kMegatronHeaderBytes + 4 * int64_t(sequences);
  header.documentsOffset = documentsAt;
  return header;
}
