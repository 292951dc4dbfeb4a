// Reading token files: format detection, header and index checks, the lazy
// memory map and reads that drop their pages, in-memory tokens, the scan of
// `llmc data info`.
#include "training/Data/TokenFile.h"

#include "training/Data/TokenFileLayout.h"

#include "frontend/Tokenizer.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <cstring>
#include <limits>

using namespace llmc;
using namespace llmc::data;
using llvm::formatv;
namespace endian = llvm::support::endian;

using layout::fileError;
using layout::LazyMap;
using layout::RawFile;

llvm::StringRef llmc::data::formatName(TokenFormat format) {
  switch (format) {
  case TokenFormat::LlmcShard:
    return "llm.c shard";
  case TokenFormat::Llmc:
    return "llmc";
  case TokenFormat::Megatron:
    return "megatron";
  case TokenFormat::Text:
    return "text";
  }
  return "?";
}

llvm::StringRef llmc::data::typeName(TokenType type) {
  switch (type) {
  case TokenType::U8:
    return "uint8";
  case TokenType::I8:
    return "int8";
  case TokenType::I16:
    return "int16";
  case TokenType::U16:
    return "uint16";
  case TokenType::I32:
    return "int32";
  case TokenType::U32:
    return "uint32";
  case TokenType::I64:
    return "int64";
  }
  return "?";
}

int64_t llmc::data::typeBytes(TokenType type) {
  switch (type) {
  case TokenType::U8:
  case TokenType::I8:
    return 1;
  case TokenType::I16:
  case TokenType::U16:
    return 2;
  case TokenType::I32:
  case TokenType::U32:
    return 4;
  case TokenType::I64:
    return 8;
  }
  return 1;
}

TokenFile::~TokenFile() = default;

namespace {
//===----------------------------------------------------------------------===//
// Converting stored ids to int32
//===----------------------------------------------------------------------===//

template <typename T> int64_t loadId(const uint8_t *p) {
  return static_cast<int64_t>(
      endian::read<T, llvm::endianness::little>(p));
}

/// Copies `count` ids of type T from `src` to `out`. Returns the position
/// of the first id that is negative, beyond int32 or (vocabLimit > 0) not
/// below vocabLimit, else -1.
template <typename T>
int64_t convertIds(const uint8_t *src, int64_t count, int32_t *out,
                   int64_t limit) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t id = loadId<T>(src + i * sizeof(T));
    if (id < 0 || id >= limit)
      return i;
    out[i] = static_cast<int32_t>(id);
  }
  return -1;
}

int64_t convert(TokenType type, const uint8_t *src, int64_t count,
                int32_t *out, int64_t limit) {
  switch (type) {
  case TokenType::U8:
    return convertIds<uint8_t>(src, count, out, limit);
  case TokenType::I8:
    return convertIds<int8_t>(src, count, out, limit);
  case TokenType::I16:
    return convertIds<int16_t>(src, count, out, limit);
  case TokenType::U16:
    return convertIds<uint16_t>(src, count, out, limit);
  case TokenType::I32:
    return convertIds<int32_t>(src, count, out, limit);
  case TokenType::U32:
    return convertIds<uint32_t>(src, count, out, limit);
  case TokenType::I64:
    return convertIds<int64_t>(src, count, out, limit);
  }
  return 0;
}

int64_t loadAny(TokenType type, const uint8_t *p) {
  switch (type) {
  case TokenType::U8:
    return loadId<uint8_t>(p);
  case TokenType::I8:
    return loadId<int8_t>(p);
  case TokenType::I16:
    return loadId<int16_t>(p);
  case TokenType::U16:
    return loadId<uint16_t>(p);
  case TokenType::I32:
    return loadId<int32_t>(p);
  case TokenType::U32:
    return loadId<uint32_t>(p);
  case TokenType::I64:
    return loadId<int64_t>(p);
  }
  return 0;
}

llvm::Error badId(llvm::StringRef path, int64_t id, int64_t index,
                  int32_t vocabLimit) {
  if (id < 0)
    return fileError(path, formatv("token {0} at index {1} is negative", id,
                                   index));
  if (id > std::numeric_limits<int32_t>::max())
    return fileError(path, formatv("token {0} at index {1} does not fit an "
                                   "int32 token id",
                                   id, index));
  return fileError(path, formatv("token {0} at index {1} is out of range for "
                                 "the vocabulary size {2}",
                                 id, index, vocabLimit));
}

llvm::Error checkRange(const TokenFile &file, int64_t start, int64_t count) {
  if (start < 0 || count < 0 || start > file.numTokens() - count)
    return fileError(file.path(),
                     formatv("tokens [{0}, {1}) are outside its {2} tokens",
                             start, start + count, file.numTokens()));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Mapped files (llm.c shards, llmc files, Megatron pairs)
//===----------------------------------------------------------------------===//

/// Where a mapped file's document starts are: none (llm.c), an ascending
/// u64 array of token offsets (llmc), or Megatron's document -> sequence
/// index and sequence byte pointers.
struct DocumentIndex {
  enum Kind { None, TokenOffsets, MegatronSequences } kind = None;
  int64_t documents = 0;
  /// The map holding the index: the .tok itself, or the .idx.
  std::unique_ptr<LazyMap> map;
  /// TokenOffsets: byte offset of the array in `map`. Megatron: byte
  /// offsets of pointers[] and doc_idx[] in the .idx.
  int64_t offsetsAt = 0, pointersAt = 0, documentsAt = 0;
  int64_t tokenBytes = 1;
  int64_t sequences = 0;
};

class MappedTokenFile final : public TokenFile {
public:
  MappedTokenFile(const layout::Header &header, std::string path)
      : tokens(header.dataPath, header.dataBytes), dataOffset(header.dataOffset) {
    filePath = std::move(path);
    fileFormat = header.format;
    tokenType = header.type;
    tokenCount = header.tokens;
  }

  DocumentIndex index;

  std::optional<int64_t> numDocuments() const override {
    if (index.kind == DocumentIndex::None)
      return std::nullopt;
    return index.documents;
  }

  int64_t documentStart(int64_t d) const override {
    // The index map was made and checked at open: data() cannot fail.
    const uint8_t *base = llvm::cantFail(index.map->data());
    if (index.kind == DocumentIndex::TokenOffsets)
      return endian::read64le(base + index.offsetsAt + 8 * d);
    int64_t sequence = endian::read64le(base + index.documentsAt + 8 * d);
    if (sequence == index.sequences) // empty documents at the end
      return tokenCount;
    int64_t pointer = endian::read64le(base + index.pointersAt + 8 * sequence);
    return pointer / index.tokenBytes;
  }

  llvm::Error read(int64_t start, int64_t count, int32_t *out,
                   int32_t vocabLimit) const override {
    if (llvm::Error error = checkRange(*this, start, count))
      return error;
    if (count == 0)
      return llvm::Error::success();
    llvm::Expected<const uint8_t *> base = tokens.data();
    if (!base)
      return base.takeError();
    int64_t bytes = typeBytes(tokenType);
    int64_t offset = dataOffset + start * bytes;
    int64_t limit = vocabLimit > 0 ? vocabLimit
                                   : int64_t(std::numeric_limits<int32_t>::max()) + 1;
    int64_t bad = convert(tokenType, *base + offset, count, out, limit);
    tokens.drop(offset, count * bytes);
    if (bad >= 0)
      return badId(filePath, loadAny(tokenType, *base + offset + bad * bytes),
                   start + bad, vocabLimit);
    return llvm::Error::success();
  }

  int64_t mappedBytes() const override {
    int64_t total = tokens.mapped() ? tokens.bytes() : 0;
    if (index.map && index.map->mapped())
      total += index.map->bytes();
    return total;
  }
  int64_t heapBytes() const override { return 0; }

  const LazyMap &tokenMap() const { return tokens; }
  int64_t tokenOffset() const { return dataOffset; }

private:
  LazyMap tokens;
  int64_t dataOffset;
};

/// Tokens in memory: encoded text and fromTokens.
class MemoryTokenFile final : public TokenFile {
public:
  MemoryTokenFile(std::string name, std::vector<int32_t> ids,
                  std::vector<int64_t> starts)
      : ids(std::move(ids)), starts(std::move(starts)) {
    filePath = std::move(name);
    fileFormat = TokenFormat::Text;
    tokenType = TokenType::I32;
    tokenCount = static_cast<int64_t>(this->ids.size());
  }
  std::optional<int64_t> numDocuments() const override {
    if (starts.empty())
      return std::nullopt;
    return static_cast<int64_t>(starts.size());
  }
  int64_t documentStart(int64_t d) const override { return starts[d]; }
  llvm::Error read(int64_t start, int64_t count, int32_t *out,
                   int32_t vocabLimit) const override {
    if (llvm::Error error = checkRange(*this, start, count))
      return error;
    for (int64_t i = 0; i < count; ++i) {
      int32_t id = ids[start + i];
      if (id < 0 || (vocabLimit > 0 && id >= vocabLimit))
        return badId(filePath, id, start + i, vocabLimit);
      out[i] = id;
    }
    return llvm::Error::success();
  }
  int64_t mappedBytes() const override { return 0; }
  int64_t heapBytes() const override {
    return static_cast<int64_t>(ids.capacity() * sizeof(int32_t) +
                                starts.capacity() * sizeof(int64_t));
  }
  std::pair<const void *, int64_t> tokenBlock() const override {
    return {ids.data(), static_cast<int64_t>(ids.size() * sizeof(int32_t))};
  }
  const std::vector<int32_t> &tokenIds() const { return ids; }

private:
  std::vector<int32_t> ids;
  std::vector<int64_t> starts;
};
} // namespace

//===----------------------------------------------------------------------===//
// Opening
//===----------------------------------------------------------------------===//

/// Checks an llmc file's document index (ascending, 0 to N) through its
/// map, then drops the pages read.
static llvm::Error checkTokenOffsets(llvm::StringRef path,
                                     const DocumentIndex &index,
                                     int64_t tokens) {
  llvm::Expected<const uint8_t *> base = index.map->data();
  if (!base)
    return base.takeError();
  const uint8_t *offsets = *base + index.offsetsAt;
  int64_t previous = 0;
  for (int64_t d = 0; d <= index.documents; ++d) {
    uint64_t value = endian::read64le(offsets + 8 * d);
    if (d == 0 && value != 0)
      return fileError(path, formatv("document index: the first document "
                                     "starts at token {0}, not 0",
                                     value));
    if (value < static_cast<uint64_t>(previous) ||
        value > static_cast<uint64_t>(tokens))
      return fileError(path, formatv("document index: document {0} starts at "
                                     "token {1}, outside [{2}, {3}]",
                                     d, value, previous, tokens));
    previous = static_cast<int64_t>(value);
  }
  if (previous != tokens)
    return fileError(path, formatv("document index: the last entry is {0}, "
                                   "not the token count {1}",
                                   previous, tokens));
  index.map->drop(index.offsetsAt, 8 * (index.documents + 1));
  return llvm::Error::success();
}

static llvm::Expected<std::shared_ptr<TokenFile>>
openMapped(llvm::StringRef path, const layout::Header &header) {
  auto file = std::make_shared<MappedTokenFile>(header, path.str());
  DocumentIndex &index = file->index;
  if (header.format == TokenFormat::Llmc) {
    index.kind = DocumentIndex::TokenOffsets;
    index.documents = header.documents;
    // A map of the index's pages only: the tokens are mapped on first read.
    index.map = std::make_unique<LazyMap>(header.dataPath, header.dataBytes,
                                          header.indexOffset);
    index.offsetsAt = header.indexOffset;
    if (llvm::Error error = checkTokenOffsets(path, index, header.tokens))
      return error;
  } else if (header.format == TokenFormat::Megatron) {
    index.kind = DocumentIndex::MegatronSequences;
    index.documents = header.documents;
    index.map = std::make_unique<LazyMap>(header.indexPath, header.indexBytes);
    index.pointersAt = header.pointersOffset;
    index.documentsAt = header.documentsOffset;
    index.tokenBytes = typeBytes(header.type);
    index.sequences = header.sequences;
    // Checked by readMegatronHeader; mapping it now keeps documentStart
    // free of errors (the map is not resident until documents are read).
    llvm::Expected<const uint8_t *> base = index.map->data();
    if (!base)
      return base.takeError();
  }
  return std::static_pointer_cast<TokenFile>(file);
}

static llvm::Expected<std::shared_ptr<TokenFile>>
openText(llvm::StringRef path, const Tokenizer *tokenizer) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return fileError(path, "cannot read: " + buffer.getError().message());
  llvm::StringRef text = (*buffer)->getBuffer();
  size_t nul = text.find('\0');
  if (nul != llvm::StringRef::npos)
    return fileError(path, formatv("binary, not text: byte {0} is NUL (token "
                                   "files are llm.c shards *.bin, llmc files "
                                   "*.tok or Megatron PREFIX.bin + "
                                   "PREFIX.idx)",
                                   nul));
  if (!tokenizer)
    return fileError(path, "a text file, and no tokenizer was given to "
                           "encode it");
  // One document, encoded as every text source is (encodeDocuments: the
  // end-of-text token first when the tokenizer has one).
  std::vector<int32_t> ids = encodeDocuments({text}, *tokenizer);
  ids.shrink_to_fit();
  auto file = std::make_shared<MemoryTokenFile>(path.str(), std::move(ids),
                                                std::vector<int64_t>{0});
  return std::static_pointer_cast<TokenFile>(file);
}

llvm::Expected<std::shared_ptr<TokenFile>>
TokenFile::open(llvm::StringRef path, const Tokenizer *tokenizer) {
  llvm::SmallString<256> sibling = path;
  llvm::StringRef extension = llvm::sys::path::extension(path);
  llvm::sys::path::replace_extension(sibling, ".idx");
  if (extension == ".idx" ||
      (extension == ".bin" && llvm::sys::fs::exists(sibling))) {
    llvm::Expected<layout::Header> header = layout::readMegatronHeader(path);
    if (!header)
      return header.takeError();
    return openMapped(path, *header);
  }
  llvm::Expected<RawFile> file = RawFile::open(path);
  if (!file)
    return file.takeError();
  char magic[8] = {};
  int64_t head = std::min<int64_t>(file->size(), 8);
  if (llvm::Error error = file->readAt(0, head, magic))
    return error;
  bool shardMagic =
      head >= 4 && endian::read32le(magic) == uint32_t(layout::kShardMagic);
  bool llmcMagic =
      head == 8 && std::memcmp(magic, layout::kLlmcMagic, 8) == 0;
  if (llmcMagic || (!shardMagic && extension == ".tok")) {
    llvm::Expected<layout::Header> header = layout::readLlmcHeader(path);
    if (!header)
      return header.takeError();
    return openMapped(path, *header);
  }
  if (shardMagic || extension == ".bin") {
    llvm::Expected<layout::Header> header = layout::readShardHeader(path);
    if (!header)
      return header.takeError();
    return openMapped(path, *header);
  }
  return openText(path, tokenizer);
}

std::shared_ptr<TokenFile>
TokenFile::fromTokens(std::string name, std::vector<int32_t> tokens,
                      std::vector<int64_t> documentStarts) {
  return std::make_shared<MemoryTokenFile>(std::move(name), std::move(tokens),
                                           std::move(documentStarts));
}

//===----------------------------------------------------------------------===//
// The scan of `llmc data info`
//===----------------------------------------------------------------------===//

llvm::Expected<TokenFileInfo>
llmc::data::scanTokenFile(llvm::StringRef path, const Tokenizer *tokenizer,
                          int64_t vocabLimit) {
  llvm::Expected<std::shared_ptr<TokenFile>> opened =
      TokenFile::open(path, tokenizer);
  if (!opened)
    return opened.takeError();
  const TokenFile &file = **opened;
  TokenFileInfo info;
  info.path = path.str();
  info.format = file.format();
  info.type = file.type();
  info.tokens = file.numTokens();
  info.documents = file.numDocuments();
  const uint8_t *data = nullptr;
  const LazyMap *map = nullptr;
  int64_t offset = 0;
  // open() gives in-memory tokens for text only.
  if (file.format() != TokenFormat::Text) {
    auto &mapped = static_cast<const MappedTokenFile &>(file);
    map = &mapped.tokenMap();
    offset = mapped.tokenOffset();
    if (info.tokens > 0) {
      llvm::Expected<const uint8_t *> base = map->data();
      if (!base)
        return base.takeError();
      data = *base + offset;
    }
  } else {
    auto &memory = static_cast<const MemoryTokenFile &>(file);
    data = reinterpret_cast<const uint8_t *>(memory.tokenIds().data());
  }
  int64_t bytes = typeBytes(info.type);
  int64_t total = info.tokens * bytes;
  info.checksum = llvm::xxh3_64bits(
      llvm::ArrayRef<uint8_t>(data, data ? static_cast<size_t>(total) : 0));
  // Ids in blocks, dropping each block's pages after it.
  constexpr int64_t kBlock = 1 << 20;
  for (int64_t start = 0; start < info.tokens; start += kBlock) {
    int64_t count = std::min(kBlock, info.tokens - start);
    for (int64_t i = 0; i < count; ++i) {
      int64_t id = loadAny(info.type, data + (start + i) * bytes);
      if (start + i == 0)
        info.minId = info.maxId = id;
      info.minId = std::min(info.minId, id);
      info.maxId = std::max(info.maxId, id);
      if (vocabLimit > 0 && (id < 0 || id >= vocabLimit)) {
        if (!info.firstOutOfRange)
          info.firstOutOfRange = start + i;
        ++info.idsOutOfRange;
      }
    }
    if (map)
      map->drop(offset + start * bytes, count * bytes);
  }
  if (info.format == TokenFormat::Llmc) {
    llvm::Expected<layout::Header> header = layout::readLlmcHeader(path);
    if (!header)
      return header.takeError();
    info.checksumMatches = header->checksum == info.checksum;
  }
  return info;
}
