// Token files on disk, read through a memory map: llm.c shards, llmc's own
// token files (with a document index), Megatron-LM indexed datasets, and
// text files (encoded into memory when opened). The interface the loader
// reads windows through and `llmc data prepare` writes through.
//
// Formats (all little-endian):
//
//   llm.c shard (*.bin): 256 int32 of header (magic 20240520, version 1,
//     token count), then the tokens as uint16. No document index.
//
//   llmc token file (*.tok): a 64-byte header
//        0  8 bytes  magic "LLMCTOK\0"
//        8  u32      version (1)
//       12  u32      bytes per token: 2 (uint16) or 4 (uint32)
//       16  u64      token count N
//       24  u64      document count D
//       32  u64      XXH3-64 of the token bytes (checked by `llmc data info`)
//       40  24 bytes zero
//     then the N tokens, zero-padded to a multiple of 8 bytes, then the
//     document index: D + 1 u64 token offsets (first 0, last N; document d
//     is tokens [index[d], index[d+1])). The file size is exactly that.
//
//   Megatron-LM / Megatron-DeepSpeed indexed dataset (PREFIX.bin +
//     PREFIX.idx, "MMIDIDX" version 1): the .idx holds the dtype code,
//     the sequence sizes (int32), their byte offsets into the .bin (int64)
//     and the document index (int64 sequence numbers); the .bin holds the
//     tokens of the sequences back to back. Either file's path opens it.
//
//   Text: any other file, encoded with the tokenizer at open (the whole
//     file, into memory: meant for small corpora; `llmc data prepare`
//     turns large text into token files).
//
// Which format a path is: PREFIX.idx, or PREFIX.bin with a PREFIX.idx
// beside it, is Megatron (checked first: a Megatron .bin has no header, and
// its first two tokens may spell llm.c's magic); else by its magic number
// (llm.c, llmc); else by its extension (.bin and .tok must be one of the
// binary formats: a truncated or damaged one is an error, never read as
// text); anything else is text, and text holding NUL bytes is refused as
// binary.
#ifndef LLMC_TRAINING_DATA_TOKENFILE_H
#define LLMC_TRAINING_DATA_TOKENFILE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llmc::data {

class Tokenizer;

enum class TokenFormat { LlmcShard, Llmc, Megatron, Text };
/// "llm.c shard", "llmc", "megatron", "text".
llvm::StringRef formatName(TokenFormat format);

/// How tokens are stored. Megatron files may use any of its integer codes;
/// floating-point codes are refused.
enum class TokenType { U8, I8, I16, U16, I32, U32, I64 };
/// "uint16" etc.
llvm::StringRef typeName(TokenType type);
int64_t typeBytes(TokenType type);

/// A token file opened for reading. open() reads and checks the header
/// (and the .idx) only; the tokens are mapped on first read and never
/// copied whole. Reads copy ranges out and let the kernel drop the pages
/// they touched from this process's resident set, so the resident memory
/// of a loader stays flat however large the files are (the page cache
/// keeps what the machine has room for). Thread-compatible: reads from
/// several threads are safe, open/close are not concurrent with them.
class TokenFile {
public:
  /// Opens `path` (see the file comment for how its format is chosen);
  /// `tokenizer` encodes text files and may be null when no text is
  /// expected (a text file is then an error). Every error starts with the
  /// path and says what is wrong: truncated, bad magic, unsupported
  /// version or dtype, a size that does not match the header, an .idx
  /// that does not match its .bin.
  static llvm::Expected<std::shared_ptr<TokenFile>>
  open(llvm::StringRef path, const Tokenizer *tokenizer);

  /// Tokens already in memory (tests, encoded text), one document per
  /// entry of `documentStarts` (ascending, first 0; empty: no index).
  static std::shared_ptr<TokenFile>
  fromTokens(std::string name, std::vector<int32_t> tokens,
             std::vector<int64_t> documentStarts = {});

  virtual ~TokenFile();

  const std::string &path() const { return filePath; }
  TokenFormat format() const { return fileFormat; }
  TokenType type() const { return tokenType; }
  int64_t numTokens() const { return tokenCount; }

  /// Documents the file records (llmc, Megatron, encoded text); nullopt
  /// for llm.c shards, which keep no index.
  virtual std::optional<int64_t> numDocuments() const = 0;
  /// The first token of document `index` (< *numDocuments()); the index
  /// was checked at open (ascending, within the tokens).
  virtual int64_t documentStart(int64_t index) const = 0;

  /// Copies tokens [start, start + count) into `out` as int32. With
  /// vocabLimit > 0 every id must be below it: an error names the file,
  /// the token index and the id (ids are checked as windows are read, not
  /// by a scan at open, which would read the whole dataset). A negative id,
  /// or one beyond int32 (Megatron's int64, llmc's uint32), is always an
  /// error. The pages the read touched leave this process's resident set.
  virtual llvm::Error read(int64_t start, int64_t count, int32_t *out,
                           int32_t vocabLimit = 0) const = 0;

  /// Bytes of address space this file maps right now: the document index
  /// or Megatron .idx from open, the tokens from the first read (0 for
  /// in-memory tokens: see heapBytes). Resident memory is far less: reads
  /// drop the pages they touched.
  virtual int64_t mappedBytes() const = 0;
  /// Bytes of heap this file holds (in-memory tokens, encoded text).
  virtual int64_t heapBytes() const = 0;
  /// The heap block of its tokens (null and 0: none), so that the memory
  /// report at the end of a run can measure its resident pages.
  virtual std::pair<const void *, int64_t> tokenBlock() const {
    return {nullptr, 0};
  }

protected:
  TokenFile() = default;
  std::string filePath;
  TokenFormat fileFormat = TokenFormat::Text;
  TokenType tokenType = TokenType::I32;
  int64_t tokenCount = 0;
};

/// Writes a token file of format Llmc or LlmcShard: documents are appended
/// one by one and streamed to a temporary file beside `path`; commit()
/// writes the header (and the document index), syncs and renames it into
/// place, so that `path` is either absent or whole. Destroying a writer
/// that was not committed removes the temporary.
class TokenFileWriter {
public:
  /// `type` is U16 or U32 (U16 only for LlmcShard).
  static llvm::Expected<std::unique_ptr<TokenFileWriter>>
  create(llvm::StringRef path, TokenFormat format, TokenType type);
  virtual ~TokenFileWriter();

  /// Appends one document; every id must fit the token type (an error
  /// names the id and the file).
  virtual llvm::Error appendDocument(llvm::ArrayRef<int32_t> tokens) = 0;
  virtual int64_t numTokens() const = 0;
  virtual int64_t numDocuments() const = 0;
  virtual llvm::Error commit() = 0;
};

/// Writes `tokens` as an llm.c shard at `path`, atomically (every token
/// must fit in uint16): tests and small tools. (It lives with the writer in
/// TokenFileWriter.cpp.)
llvm::Error writeShard(llvm::StringRef path, llvm::ArrayRef<int32_t> tokens);

/// What `llmc data info` prints for a file: the header's facts plus a full
/// scan (minimum and maximum id, XXH3-64 of the token bytes as stored --
/// the .bin of a Megatron pair, int32 for text -- and for llmc files
/// whether it equals the header's).
struct TokenFileInfo {
  std::string path;
  TokenFormat format = TokenFormat::Text;
  TokenType type = TokenType::I32;
  int64_t tokens = 0;
  std::optional<int64_t> documents;
  /// Ids as stored (a Megatron int64 file may hold any): 0 when empty.
  int64_t minId = 0, maxId = 0;
  uint64_t checksum = 0;
  /// llmc files: whether the checksum matches the header.
  std::optional<bool> checksumMatches;
  /// With a vocabLimit: the ids outside [0, vocabLimit) and the index of
  /// the first.
  int64_t idsOutOfRange = 0;
  std::optional<int64_t> firstOutOfRange;
};
/// Opens `path` as TokenFile::open does and scans every token. LLVM has no
/// streaming XXH3, so the hash runs over the whole map at once: the file's
/// pages are resident (page cache, not heap) until the id scan after it
/// drops them. A tool's cost, never the loader's.
llvm::Expected<TokenFileInfo> scanTokenFile(llvm::StringRef path,
                                            const Tokenizer *tokenizer,
                                            int64_t vocabLimit = 0);

} // namespace llmc::data

#endif // LLMC_TRAINING_DATA_TOKENFILE_H
