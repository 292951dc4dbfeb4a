// Writing token files (llmc files with their document index, llm.c shards):
// streamed to a temporary file beside the target, renamed into place whole.
#include "training/Data/TokenFile.h"

#include "training/Data/TokenFileLayout.h"

#include "ir/kernel/AtomicFile.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"

#include <cstring>
#include <limits>

using namespace llmc;
using namespace llmc::data;
using layout::fileError;
using llvm::formatv;
namespace endian = llvm::support::endian;

TokenFileWriter::~TokenFileWriter() = default;

namespace {
class StreamingTokenFileWriter final : public TokenFileWriter {
public:
  StreamingTokenFileWriter(std::unique_ptr<kir::AtomicFileStream> file,
                           TokenFormat format, TokenType type)
      : file(std::move(file)), format(format), type(type) {
    // The header's place, filled in by commit().
    int64_t headerBytes = format == TokenFormat::Llmc
                              ? layout::kLlmcHeaderBytes
                              : layout::kShardHeaderBytes;
    std::string zeros(headerBytes, '\0');
    this->file->stream() << zeros;
  }

  llvm::Error appendDocument(llvm::ArrayRef<int32_t> tokens) override {
    if (!file)
      return fileError(path, "the writer was already committed");
    int64_t maxId = type == TokenType::U16 ? 0xFFFF
                                           : std::numeric_limits<int32_t>::max();
    buffer.resize(tokens.size() * typeBytes(type));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || tokens[i] > maxId)
        return fileError(path, formatv("token {0} (document {1}, token {2}) "
                                       "does not fit {3}",
                                       tokens[i], documentStarts.size(), i,
                                       typeName(type)));
      if (type == TokenType::U16)
        endian::write16le(buffer.data() + 2 * i, uint16_t(tokens[i]));
      else
        endian::write32le(buffer.data() + 4 * i, uint32_t(tokens[i]));
    }
    if (format == TokenFormat::LlmcShard &&
        tokenCount + int64_t(tokens.size()) >
            std::numeric_limits<int32_t>::max())
      return fileError(path, "more tokens than an llm.c shard's int32 count "
                             "holds (write llmc files, *.tok)");
    documentStarts.push_back(tokenCount);
    tokenCount += int64_t(tokens.size());
    llvm::raw_fd_ostream &os = file->stream();
    os.write(reinterpret_cast<const char *>(buffer.data()), buffer.size());
    // Fail at the document that hit a full disk, not at commit.
    if (os.has_error())
      return fileError(path, "cannot write '" + file->temporaryPath() +
                                 "': " + os.error().message());
    return llvm::Error::success();
  }

  int64_t numTokens() const override { return tokenCount; }
  int64_t numDocuments() const override {
    return int64_t(documentStarts.size());
  }

  llvm::Error commit() override {
    if (!file)
      return fileError(path, "the writer was already committed");
    std::unique_ptr<kir::AtomicFileStream> done = std::move(file);
    llvm::raw_fd_ostream &os = done->stream();
    std::vector<uint8_t> header;
    if (format == TokenFormat::Llmc) {
      llvm::Expected<std::vector<uint8_t>> made = finishLlmc(*done);
      if (!made)
        return made.takeError();
      header = std::move(*made);
    } else {
      header.assign(layout::kShardHeaderBytes, 0);
      endian::write32le(header.data(), layout::kShardMagic);
      endian::write32le(header.data() + 4, layout::kShardVersion);
      endian::write32le(header.data() + 8, uint32_t(tokenCount));
    }
    os.seek(0);
    os.write(reinterpret_cast<const char *>(header.data()), header.size());
    return done->commit();
  }

  std::string path;

private:
  /// Appends the padding and the document index; returns the header, whose
  /// checksum covers the token bytes as written.
  llvm::Expected<std::vector<uint8_t>>
  finishLlmc(kir::AtomicFileStream &out) {
    llvm::raw_fd_ostream &os = out.stream();
    int64_t tokenBytes = tokenCount * typeBytes(type);
    int64_t padding = layout::paddedTo8(tokenBytes) - tokenBytes;
    os.write("\0\0\0\0\0\0\0", padding);
    std::vector<uint8_t> index(8 * (documentStarts.size() + 1));
    for (size_t d = 0; d < documentStarts.size(); ++d)
      endian::write64le(index.data() + 8 * d, documentStarts[d]);
    endian::write64le(index.data() + 8 * documentStarts.size(), tokenCount);
    os.write(reinterpret_cast<const char *>(index.data()), index.size());
    os.flush();
    if (os.has_error())
      return fileError(path, "cannot write '" + out.temporaryPath() +
                                 "': " + os.error().message());
    // XXH3 has no streaming form in LLVM: hash the tokens back through a
    // map of the temporary file (hot in the page cache), then drop it.
    int64_t fileBytes = layout::kLlmcHeaderBytes + layout::paddedTo8(tokenBytes) +
                        int64_t(index.size());
    layout::LazyMap map(out.temporaryPath(), fileBytes);
    llvm::Expected<const uint8_t *> base = map.data();
    if (!base)
      return base.takeError();
    uint64_t checksum = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
        *base + layout::kLlmcHeaderBytes, size_t(tokenBytes)));
    std::vector<uint8_t> header(layout::kLlmcHeaderBytes, 0);
    std::memcpy(header.data(), layout::kLlmcMagic, 8);
    endian::write32le(header.data() + 8, layout::kLlmcVersion);
    endian::write32le(header.data() + 12, uint32_t(typeBytes(type)));
    endian::write64le(header.data() + 16, uint64_t(tokenCount));
    endian::write64le(header.data() + 24, uint64_t(documentStarts.size()));
    endian::write64le(header.data() + 32, checksum);
    return header;
  }

  std::unique_ptr<kir::AtomicFileStream> file;
  TokenFormat format;
  TokenType type;
  int64_t tokenCount = 0;
  std::vector<int64_t> documentStarts;
  std::vector<uint8_t> buffer;
};
} // namespace

llvm::Expected<std::unique_ptr<TokenFileWriter>>
TokenFileWriter::create(llvm::StringRef path, TokenFormat format,
                        TokenType type) {
  if (format != TokenFormat::Llmc && format != TokenFormat::LlmcShard)
    return fileError(path, "token files are written as llmc files or llm.c "
                           "shards only");
  if (type != TokenType::U16 &&
      !(type == TokenType::U32 && format == TokenFormat::Llmc))
    return fileError(path, formatv("{0} tokens cannot be written as {1} (llmc "
                                   "files: uint16 or uint32; llm.c shards: "
                                   "uint16)",
                                   typeName(type), formatName(format)));
  llvm::Expected<std::unique_ptr<kir::AtomicFileStream>> file =
      kir::AtomicFileStream::create(path);
  if (!file)
    return file.takeError();
  auto writer = std::make_unique<StreamingTokenFileWriter>(std::move(*file),
                                                           format, type);
  writer->path = path.str();
  return std::unique_ptr<TokenFileWriter>(std::move(writer));
}

/// An llm.c shard in one call (tests and small tools).
llvm::Error llmc::data::writeShard(llvm::StringRef path,
                                   llvm::ArrayRef<int32_t> tokens) {
  llvm::Expected<std::unique_ptr<TokenFileWriter>> writer =
      TokenFileWriter::create(path, TokenFormat::LlmcShard, TokenType::U16);
  if (!writer)
    return writer.takeError();
  if (llvm::Error error = (*writer)->appendDocument(tokens))
    return error;
  return (*writer)->commit();
}
