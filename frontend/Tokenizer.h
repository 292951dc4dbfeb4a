// Tokenizers: text to token ids and back (byte-level and GPT-2 byte-level BPE),
// and learning a BPE vocabulary from text.
//
// Usage (library LlmcData; no MLIR, only LLVM Support):
//
//   // "byte" (256 ids, one per byte) or a directory holding vocab.json and
//   // merges.txt (GPT-2's own files or ones written by trainBpe).
//   llvm::Expected<std::unique_ptr<llmc::data::Tokenizer>> tokenizer =
//       llmc::data::loadTokenizer(spec);
//   if (!tokenizer) return tokenizer.takeError();
//   std::vector<int32_t> ids = (*tokenizer)->encode("Hello world");
//   std::string text = (*tokenizer)->decode(ids);        // == "Hello world"
//   int32_t vocab = (*tokenizer)->vocabSize();           // 256, 50257, ...
//   std::optional<int32_t> eot = (*tokenizer)->endOfTextId();
//
//   // Learning a vocabulary: 256 byte tokens, then merges, then <|endoftext|>.
//   llvm::Expected<llmc::data::BpeVocabulary> learned =
//       llmc::data::trainBpe(text, /*vocabSize=*/1024);
//   llvm::Error written = llmc::data::writeBpeFiles(*learned, dir);
//
// encode() is thread-safe (BPE's word cache is locked); tokenizers are
// immutable after loading.
#ifndef LLMC_FRONTEND_TOKENIZER_H
#define LLMC_FRONTEND_TOKENIZER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llmc::data {

/// GPT-2's end-of-text token.
inline constexpr llvm::StringLiteral kEndOfText = "<|endoftext|>";

/// Text to token ids and back.
class Tokenizer {
public:
  virtual ~Tokenizer();

  /// The ids of `text`. Every id is in [0, vocabSize()). A tokenizer with an
  /// end-of-text token encodes each literal "<|endoftext|>" in `text` as that
  /// token.
  virtual std::vector<int32_t> encode(llvm::StringRef text) const = 0;

  /// The bytes of one token; ids outside the vocabulary read "<|N|>".
  virtual std::string decodeToken(int32_t id) const = 0;

  /// The text of `ids`: their bytes concatenated, so that
  /// decode(encode(text)) == text for every byte string `text`.
  std::string decode(llvm::ArrayRef<int32_t> ids) const;

  /// The number of ids: every id is below it.
  virtual int32_t vocabSize() const = 0;

  /// The end-of-text token, if the vocabulary has one.
  virtual std::optional<int32_t> endOfTextId() const = 0;

  /// What the tokenizer is, for messages: "byte", "bpe (1024 tokens, DIR)".
  virtual std::string describe() const = 0;
};

/// One id per byte: id = byte value, 256 ids, no end-of-text token.
class ByteTokenizer final : public Tokenizer {
public:
  std::vector<int32_t> encode(llvm::StringRef text) const override;
  std::string decodeToken(int32_t id) const override;
  int32_t vocabSize() const override { return 256; }
  std::optional<int32_t> endOfTextId() const override { return std::nullopt; }
  std::string describe() const override { return "byte"; }
};

/// A learned BPE vocabulary as raw bytes: token i's bytes, and the merges in
/// rank order (each a pair of token ids whose concatenation is a token).
struct BpeVocabulary {
  std::vector<std::string> tokens;                   // id -> bytes
  std::vector<std::pair<int32_t, int32_t>> merges;   // rank -> (left, right)
  std::optional<int32_t> endOfTextId;
};

class BpeTokenizerImpl;

/// GPT-2's byte-level BPE: text is split into words by GPT-2's pre-tokenizer
/// (splitGpt2Words), each word's bytes start as one token each, and the
/// adjacent pair with the lowest merge rank is merged until none is left.
class BpeTokenizer final : public Tokenizer {
public:
  /// Loads GPT-2-format files: vocab.json (token string -> id, bytes spelled
  /// with GPT-2's bytes-to-unicode mapping) and merges.txt ("#version" line,
  /// then "left right" per line, in rank order). Errors name the file (and
  /// line) and what is wrong.
  static llvm::Expected<std::unique_ptr<BpeTokenizer>>
  loadFiles(llvm::StringRef vocabJsonPath, llvm::StringRef mergesPath);
  /// loadFiles(dir/vocab.json, dir/merges.txt).
  static llvm::Expected<std::unique_ptr<BpeTokenizer>>
  loadDirectory(llvm::StringRef dir);
  /// From file contents; `vocabName` and `mergesName` are used in errors.
  static llvm::Expected<std::unique_ptr<BpeTokenizer>>
  fromContents(llvm::StringRef vocabJson, llvm::StringRef merges,
               llvm::StringRef vocabName = "vocab.json",
               llvm::StringRef mergesName = "merges.txt");
  /// From a vocabulary in memory (as trainBpe returns it).
  static llvm::Expected<std::unique_ptr<BpeTokenizer>>
  fromVocabulary(const BpeVocabulary &vocabulary, llvm::StringRef name = "");

  ~BpeTokenizer() override;
  std::vector<int32_t> encode(llvm::StringRef text) const override;
  std::string decodeToken(int32_t id) const override;
  int32_t vocabSize() const override;
  std::optional<int32_t> endOfTextId() const override;
  std::string describe() const override;
  /// The vocabulary (tokens as bytes, merges by rank).
  const BpeVocabulary &vocabulary() const;

private:
  explicit BpeTokenizer(std::unique_ptr<BpeTokenizerImpl> impl);
  std::unique_ptr<BpeTokenizerImpl> impl;
};

/// "byte" -> ByteTokenizer; anything else is a directory with vocab.json and
/// merges.txt -> BpeTokenizer.
llvm::Expected<std::unique_ptr<Tokenizer>> loadTokenizer(llvm::StringRef spec);

/// The ids of `texts`, each a document preceded by the end-of-text token
/// when the tokenizer has one (as llm.c's data scripts do): what a text
/// file becomes for training, and `llmc tokenizer encode`.
std::vector<int32_t> encodeDocuments(llvm::ArrayRef<llvm::StringRef> texts,
                                     const Tokenizer &tokenizer);

/// GPT-2's pre-tokenizer, by hand: the words of
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// as slices of `text`, which they cover exactly. Text is read as UTF-8 (an
/// invalid byte counts as one symbol). ASCII is classified exactly. Beyond
/// ASCII this is an approximation of Unicode's classes: Unicode whitespace
/// (U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
/// U+3000) is whitespace; Latin-1 and General Punctuation symbols
/// (U+00A1-U+00BF except ª µ º ¹ ² ³ ¼ ½ ¾, U+00D7, U+00F7, U+2010-U+2027,
/// U+2030-U+205E) are "other"; ¹ ² ³ ¼ ½ ¾ are digits; every other non-ASCII
/// code point is a letter (so CJK, accented letters, emoji and non-Latin
/// scripts' own digits and punctuation all count as letters).
std::vector<llvm::StringRef> splitGpt2Words(llvm::StringRef text);

/// GPT-2's bytes-to-unicode mapping: the code point that spells byte `b` in
/// vocab.json and merges.txt.
uint32_t gpt2ByteToCodePoint(uint8_t b);
/// `bytes` spelled with GPT-2's mapping (UTF-8).
std::string gpt2SpellBytes(llvm::StringRef bytes);

/// Progress of trainBpe: merges done so far, merges wanted.
using BpeProgress = llvm::function_ref<void(int64_t done, int64_t total)>;

/// Learns a byte-level BPE vocabulary of `vocabSize` tokens from `text`:
/// ids 0-255 are the bytes (id = byte value), then one token per merge, then
/// <|endoftext|> last. Pairs are counted within the words of splitGpt2Words
/// (literal "<|endoftext|>" in `text` separates, it is not learned); each step
/// merges the most frequent pair, ties going to the smaller (left id, right
/// id). Stops early, with a smaller vocabulary, when no pair occurs twice.
/// Requires vocabSize >= 257.
llvm::Expected<BpeVocabulary>
trainBpe(llvm::StringRef text, int32_t vocabSize,
         BpeProgress progress = [](int64_t, int64_t) {});

/// Writes `vocabulary` as dir/vocab.json and dir/merges.txt (GPT-2's format,
/// each file atomically). The directory is created if needed.
llvm::Error writeBpeFiles(const BpeVocabulary &vocabulary, llvm::StringRef dir);

} // namespace llmc::data

#endif // LLMC_FRONTEND_TOKENIZER_H
