// Tokenizers: byte-level, GPT-2 byte-level BPE (loading, encoding, training).
#include "frontend/Tokenizer.h"

#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>

using namespace llmc;
using namespace llmc::data;

Tokenizer::~Tokenizer() = default;

std::string Tokenizer::decode(llvm::ArrayRef<int32_t> ids) const {
  std::string text;
  for (int32_t id : ids)
    text += decodeToken(id);
  return text;
}

static std::string unknownToken(int32_t id) {
  return llvm::formatv("<|{0}|>", id).str();
}

//===----------------------------------------------------------------------===//
// ByteTokenizer
//===----------------------------------------------------------------------===//

std::vector<int32_t> ByteTokenizer::encode(llvm::StringRef text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

std::string ByteTokenizer::decodeToken(int32_t id) const {
  if (id < 0 || id > 255)
    return unknownToken(id);
  return std::string(1, static_cast<char>(id));
}

//===----------------------------------------------------------------------===//
// GPT-2's pre-tokenizer
//===----------------------------------------------------------------------===//

namespace {
enum class CharClass { Letter, Digit, Space, Other };

/// A decoded code point and its length in bytes.
struct CodePoint {
  uint32_t value;
  unsigned length;
  bool valid;
};
} // namespace

/// The code point at `text[i]`; an invalid UTF-8 byte is one invalid symbol.
static CodePoint decodeUtf8(llvm::StringRef text, size_t i) {
  uint8_t lead = text[i];
  if (lead < 0x80)
    return {lead, 1, true};
  unsigned length;
  uint32_t value, minimum;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, minimum = 0x10000;
  } else {
    return {lead, 1, false};
  }
  if (i + length > text.size())
    return {lead, 1, false};
  for (unsigned k = 1; k < length; ++k) {
    uint8_t next = text[i + k];
    if ((next & 0xC0) != 0x80)
      return {lead, 1, false};
    value = (value << 6) | (next & 0x3F);
  }
  if (value < minimum || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF))
    return {lead, 1, false};
  return {value, length, true};
}

/// \p{L}, \p{N}, \s or neither; exact for ASCII, approximate beyond (see
/// splitGpt2Words in the header).
static CharClass classify(CodePoint cp) {
  if (!cp.valid)
    return CharClass::Other;
  uint32_t c = cp.value;
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      return CharClass::Letter;
    if (c >= '0' && c <= '9')
      return CharClass::Digit;
    if (c == ' ' || (c >= '\t' && c <= '\r'))
      return CharClass::Space;
    return CharClass::Other;
  }
  if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
      c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000)
    return CharClass::Space;
  if (c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE))
    return CharClass::Digit;
  if (c < 0xA0)
    return CharClass::Other; // C1 controls
  if (c >= 0xA1 && c <= 0xBF && c != 0xAA && c != 0xB5 && c != 0xBA)
    return CharClass::Other;
  if (c == 0xD7 || c == 0xF7 || (c >= 0x2010 && c <= 0x2027) ||
      (c >= 0x2030 && c <= 0x205E))
    return CharClass::Other;
  return CharClass::Letter;
}

/// The length of GPT-2's contraction ('s 't 're 've 'm 'll 'd) at `text[i]`,
/// or 0.
static size_t contractionLength(llvm::StringRef text, size_t i) {
  if (text[i] != '\'')
    return 0;
  llvm::StringRef rest = text.substr(i + 1);
  for (llvm::StringRef suffix : {"re", "ve", "ll"})
    if (rest.starts_with(suffix))
      return 3;
  if (!rest.empty() && llvm::StringRef("stmd").contains(rest[0]))
    return 2;
  return 0;
}

std::vector<llvm::StringRef> llmc::data::splitGpt2Words(llvm::StringRef text) {
  std::vector<llvm::StringRef> words;
  size_t size = text.size();
  // The end of the run of class `cls` starting at `i`.
  auto runEnd = [&](size_t i, CharClass cls) {
    while (i < size) {
      CodePoint cp = decodeUtf8(text, i);
      if (classify(cp) != cls)
        break;
      i += cp.length;
    }
    return i;
  };
  size_t i = 0;
  while (i < size) {
    if (size_t length = contractionLength(text, i)) {
      words.push_back(text.substr(i, length));
      i += length;
      continue;
    }
    CodePoint cp = decodeUtf8(text, i);
    CharClass cls = classify(cp);
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional space.
    size_t start = i;
    if (text[i] == ' ' && i + 1 < size) {
      CharClass next = classify(decodeUtf8(text, i + 1));
      if (next != CharClass::Space) {
        size_t end = runEnd(i + 1, next);
        words.push_back(text.slice(start, end));
        i = end;
        continue;
      }
    }
    if (cls != CharClass::Space) {
      size_t end = runEnd(i, cls);
      words.push_back(text.slice(start, end));
      i = end;
      continue;
    }
    // "\s+(?!\S)|\s+": a run of whitespace, less its last character when
    // something follows it and the run is longer than one character (that
    // character then starts the next word).
    size_t end = i, lastStart = i;
    unsigned count = 0;
    while (end < size) {
      CodePoint next = decodeUtf8(text, end);
      if (classify(next) != CharClass::Space)
        break;
      lastStart = end;
      end += next.length;
      ++count;
    }
    if (end < size && count > 1)
      end = lastStart;
    words.push_back(text.slice(start, end));
    i = end;
  }
  return words;
}

//===----------------------------------------------------------------------===//
// GPT-2's bytes-to-unicode mapping
//===----------------------------------------------------------------------===//

/// Printable bytes ('!'-'~', '¡'-'¬', '®'-'ÿ') spell themselves; the other 68
/// bytes, in byte order, spell U+0100 onwards.
static bool spellsItself(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
         (b >= 0xAE && b <= 0xFF);
}

uint32_t llmc::data::gpt2ByteToCodePoint(uint8_t b) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> result{};
    uint32_t next = 256;
    for (unsigned b = 0; b < 256; ++b)
      result[b] = spellsItself(b) ? b : next++;
    return result;
  }();
  return table[b];
}

std::string llmc::data::gpt2SpellBytes(llvm::StringRef bytes) {
  std::string spelled;
  for (char c : bytes) {
    uint32_t cp = gpt2ByteToCodePoint(static_cast<uint8_t>(c));
    char buffer[4];
    char *end = buffer;
    llvm::ConvertCodePointToUTF8(cp, end);
    spelled.append(buffer, end);
  }
  return spelled;
}

/// The bytes a GPT-2-spelled token stands for, or std::nullopt if a
/// character is not in the mapping.
static std::optional<std::string> unspellGpt2(llvm::StringRef spelled) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> result;
    result.fill(-1);
    for (unsigned b = 0; b < 256; ++b)
      result[gpt2ByteToCodePoint(b)] = b;
    return result;
  }();
  std::string bytes;
  for (size_t i = 0; i < spelled.size();) {
    CodePoint cp = decodeUtf8(spelled, i);
    if (!cp.valid || cp.value >= inverse.size() || inverse[cp.value] < 0)
      return std::nullopt;
    bytes.push_back(static_cast<char>(inverse[cp.value]));
    i += cp.length;
  }
  return bytes;
}

//===----------------------------------------------------------------------===//
// BpeTokenizer
//===----------------------------------------------------------------------===//

static uint64_t pairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
         static_cast<uint32_t>(right);
}

namespace llmc::data {
/// The tables behind a BpeTokenizer.
class BpeTokenizerImpl {
public:
  BpeVocabulary vocabulary;
  std::string name;
  std::array<int32_t, 256> byteIds;
  /// (left, right) -> (rank, merged id).
  llvm::DenseMap<uint64_t, std::pair<int32_t, int32_t>> merges;

  std::vector<int32_t> encodeWord(llvm::StringRef word) const;

private:
  std::vector<int32_t> mergeWord(llvm::StringRef word) const;
  /// Words seen before; bounded by clearing it when it grows past a limit.
  mutable llvm::StringMap<std::vector<int32_t>> cache;
  mutable std::mutex cacheMutex;
};
} // namespace llmc::data

std::vector<int32_t> BpeTokenizerImpl::mergeWord(llvm::StringRef word) const {
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  for (char c : word)
    symbols.push_back(byteIds[static_cast<uint8_t>(c)]);
  // GPT-2's loop: merge every occurrence (left to right) of the adjacent pair
  // with the lowest rank, until no adjacent pair has a merge.
  while (symbols.size() > 1) {
    int32_t bestRank = std::numeric_limits<int32_t>::max();
    uint64_t bestPair = 0;
    int32_t bestId = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merges.find(pairKey(symbols[i], symbols[i + 1]));
      if (it != merges.end() && it->second.first < bestRank) {
        bestRank = it->second.first;
        bestPair = it->first;
        bestId = it->second.second;
      }
    }
    if (bestId < 0)
      break;
    size_t out = 0;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() &&
          pairKey(symbols[i], symbols[i + 1]) == bestPair) {
        symbols[out++] = bestId;
        ++i;
      } else {
        symbols[out++] = symbols[i];
      }
    }
    symbols.resize(out);
  }
  return symbols;
}

std::vector<int32_t> BpeTokenizerImpl::encodeWord(llvm::StringRef word) const {
  // Long words are rare and would bloat the cache.
  constexpr size_t kMaxCachedWord = 64;
  constexpr size_t kMaxCacheEntries = 1 << 18;
  if (word.size() > kMaxCachedWord)
    return mergeWord(word);
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto it = cache.find(word);
    if (it != cache.end())
      return it->second;
  }
  std::vector<int32_t> ids = mergeWord(word);
  std::lock_guard<std::mutex> lock(cacheMutex);
  if (cache.size() >= kMaxCacheEntries)
    cache.clear();
  cache.try_emplace(word, ids);
  return ids;
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<BpeTokenizerImpl> impl)
    : impl(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;

std::vector<int32_t> BpeTokenizer::encode(llvm::StringRef text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  auto encodePlain = [&](llvm::StringRef part) {
    for (llvm::StringRef word : splitGpt2Words(part)) {
      std::vector<int32_t> wordIds = impl->encodeWord(word);
      ids.insert(ids.end(), wordIds.begin(), wordIds.end());
    }
  };
  std::optional<int32_t> eot = impl->vocabulary.endOfTextId;
  while (eot) {
    size_t at = text.find(kEndOfText);
    if (at == llvm::StringRef::npos)
      break;
    encodePlain(text.take_front(at));
    ids.push_back(*eot);
    text = text.drop_front(at + kEndOfText.size());
  }
  encodePlain(text);
  return ids;
}

std::string BpeTokenizer::decodeToken(int32_t id) const {
  if (id < 0 || id >= vocabSize())
    return unknownToken(id);
  return impl->vocabulary.tokens[id];
}

int32_t BpeTokenizer::vocabSize() const {
  return static_cast<int32_t>(impl->vocabulary.tokens.size());
}

std::optional<int32_t> BpeTokenizer::endOfTextId() const {
  return impl->vocabulary.endOfTextId;
}

std::string BpeTokenizer::describe() const {
  std::string text = llvm::formatv("bpe ({0} tokens", vocabSize()).str();
  if (!impl->name.empty())
    text += ", " + impl->name;
  return text + ")";
}

const BpeVocabulary &BpeTokenizer::vocabulary() const {
  return impl->vocabulary;
}

/// Builds the merge table and byte ids of `impl->vocabulary`. `mergeLines`
/// gives each merge's line for errors (empty: merges came from memory).
static llvm::Error buildTables(BpeTokenizerImpl &impl,
                               llvm::StringRef mergesName,
                               llvm::ArrayRef<int64_t> mergeLines) {
  const BpeVocabulary &vocabulary = impl.vocabulary;
  int64_t size = static_cast<int64_t>(vocabulary.tokens.size());
  llvm::StringMap<int32_t> ids;
  for (int32_t id = 0; id < size; ++id) {
    auto [it, inserted] = ids.try_emplace(vocabulary.tokens[id], id);
    if (!inserted)
      return llvm::createStringError(llvm::formatv(
          "tokens {0} and {1} are the same bytes '{2}'", it->second, id,
          gpt2SpellBytes(vocabulary.tokens[id])));
  }
  for (unsigned b = 0; b < 256; ++b) {
    auto it = ids.find(llvm::StringRef(std::string(1, static_cast<char>(b))));
    if (it == ids.end())
      return llvm::createStringError(llvm::formatv(
          "the vocabulary has no token for byte {0} ('{1}')", b,
          gpt2SpellBytes(std::string(1, static_cast<char>(b)))));
    impl.byteIds[b] = it->second;
  }
  for (size_t rank = 0; rank < vocabulary.merges.size(); ++rank) {
    auto [left, right] = vocabulary.merges[rank];
    auto where = [&]() -> std::string {
      if (mergeLines.empty())
        return llvm::formatv("merge {0}", rank).str();
      return llvm::formatv("{0}:{1}", mergesName, mergeLines[rank]).str();
    };
    if (left < 0 || left >= size || right < 0 || right >= size)
      return llvm::createStringError(
          llvm::formatv("{0}: token id out of range", where()));
    std::string merged = vocabulary.tokens[left] + vocabulary.tokens[right];
    auto it = ids.find(merged);
    if (it == ids.end())
      return llvm::createStringError(
          llvm::formatv("{0}: the merged token '{1}' is not in the vocabulary",
                        where(), gpt2SpellBytes(merged)));
    // A repeated merge keeps its first (lowest) rank.
    impl.merges.try_emplace(pairKey(left, right),
                            static_cast<int32_t>(rank), it->second);
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<BpeTokenizer>>
BpeTokenizer::fromVocabulary(const BpeVocabulary &vocabulary,
                             llvm::StringRef name) {
  auto impl = std::make_unique<BpeTokenizerImpl>();
  impl->vocabulary = vocabulary;
  impl->name = name.str();
  if (llvm::Error error = buildTables(*impl, "", {}))
    return error;
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(impl)));
}

/// Why a tokenizer file's `text` cannot be read as text: binary data (a
/// control character; vocab.json and merges.txt escape theirs), or JSON
/// brackets nested deeper than any vocabulary's, which llvm::json::parse
/// would recurse into until the stack overflows. nullopt when neither.
static std::optional<std::string> notTextOrTooDeep(llvm::StringRef text) {
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = text[i];
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      return llvm::formatv("not a text file: byte {0} is the control "
                           "character 0x{1:x-2}; tokenizer files are text",
                           i, unsigned(c))
          .str();
  }
  constexpr int kMaxDepth = 1000;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth)
        return llvm::formatv("brackets nest deeper than {0} levels at byte "
                             "{1}; llmc refuses such input rather than "
                             "overflow the JSON parser's stack",
                             kMaxDepth, i)
            .str();
    } else if (c == ']' || c == '}') {
      depth = std::max(depth - 1, 0);
    }
  }
  return std::nullopt;
}

llvm::Expected<std::unique_ptr<BpeTokenizer>>
BpeTokenizer::fromContents(llvm::StringRef vocabJson, llvm::StringRef merges,
                           llvm::StringRef vocabName,
                           llvm::StringRef mergesName) {
  auto fail = [](llvm::StringRef file, const llvm::Twine &what) {
    return llvm::createStringError(file + ": " + what);
  };
  for (auto [text, file] : {std::pair{vocabJson, vocabName}, {merges, mergesName}})
    if (std::optional<std::string> problem = notTextOrTooDeep(text))
      return fail(file, *problem);
  auto impl = std::make_unique<BpeTokenizerImpl>();
  impl->name = llvm::sys::path::parent_path(vocabName).str();
  BpeVocabulary &vocabulary = impl->vocabulary;

  // vocab.json: {"token": id, ...} with ids 0..N-1 each once.
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(vocabJson);
  if (!json)
    return fail(vocabName, "invalid JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *object = json->getAsObject();
  if (!object)
    return fail(vocabName, "expected a JSON object of token -> id");
  std::vector<std::optional<std::string>> byId(object->size());
  for (const auto &[key, value] : *object) {
    std::optional<int64_t> id = value.getAsInteger();
    if (!id || *id < 0 || *id >= static_cast<int64_t>(byId.size()))
      return fail(vocabName,
                  llvm::formatv("token '{0}': id must be an integer in [0, "
                                "{1}) (one per token)",
                                key.str(), byId.size()));
    std::optional<std::string> bytes = unspellGpt2(key);
    if (!bytes)
      return fail(vocabName,
                  llvm::formatv("token '{0}' has a character outside GPT-2's "
                                "bytes-to-unicode mapping",
                                key.str()));
    if (byId[*id])
      return fail(vocabName, llvm::formatv("id {0} is given to two tokens", *id));
    byId[*id] = std::move(*bytes);
  }
  for (std::optional<std::string> &bytes : byId)
    vocabulary.tokens.push_back(std::move(*bytes));
  if (auto eot = object->get(kEndOfText))
    vocabulary.endOfTextId = static_cast<int32_t>(*eot->getAsInteger());

  // merges.txt: "#version: ..." then "left right" per line.
  std::vector<int64_t> lines;
  llvm::StringMap<int32_t> idOf;
  for (const auto &[key, value] : *object)
    idOf[key] = static_cast<int32_t>(*value.getAsInteger());
  int64_t lineNumber = 0;
  for (llvm::StringRef rest = merges; !rest.empty();) {
    auto [line, next] = rest.split('\n');
    rest = next;
    ++lineNumber;
    line = line.rtrim('\r');
    if (line.empty() || (lineNumber == 1 && line.starts_with("#version")))
      continue;
    auto [left, right] = line.split(' ');
    if (left.empty() || right.empty() || right.contains(' '))
      return llvm::createStringError(
          llvm::formatv("{0}:{1}: expected two tokens separated by one "
                        "space, got '{2}'",
                        mergesName, lineNumber, line));
    auto leftId = idOf.find(left), rightId = idOf.find(right);
    for (auto [token, it] : {std::pair{left, leftId}, {right, rightId}})
      if (it == idOf.end())
        return llvm::createStringError(
            llvm::formatv("{0}:{1}: token '{2}' is not in {3}", mergesName,
                          lineNumber, token, vocabName));
    vocabulary.merges.emplace_back(leftId->second, rightId->second);
    lines.push_back(lineNumber);
  }
  if (llvm::Error error = buildTables(*impl, mergesName, lines)) {
    // Errors without a location concern the vocabulary.
    std::string message = llvm::toString(std::move(error));
    if (llvm::StringRef(message).starts_with(mergesName))
      return llvm::createStringError(message);
    return fail(vocabName, message);
  }
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(impl)));
}

llvm::Expected<std::unique_ptr<BpeTokenizer>>
BpeTokenizer::loadFiles(llvm::StringRef vocabJsonPath,
                        llvm::StringRef mergesPath) {
  std::unique_ptr<llvm::MemoryBuffer> buffers[2];
  llvm::StringRef paths[2] = {vocabJsonPath, mergesPath};
  for (int i = 0; i < 2; ++i) {
    auto buffer = llvm::MemoryBuffer::getFile(paths[i], /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return llvm::createStringError(buffer.getError(),
                                     "cannot read '" + paths[i] + "': " +
                                         buffer.getError().message());
    buffers[i] = std::move(*buffer);
  }
  return fromContents(buffers[0]->getBuffer(), buffers[1]->getBuffer(),
                      vocabJsonPath, mergesPath);
}

llvm::Expected<std::unique_ptr<BpeTokenizer>>
BpeTokenizer::loadDirectory(llvm::StringRef dir) {
  llvm::SmallString<256> vocab(dir), merges(dir);
  llvm::sys::path::append(vocab, "vocab.json");
  llvm::sys::path::append(merges, "merges.txt");
  return loadFiles(vocab, merges);
}

llvm::Expected<std::unique_ptr<Tokenizer>>
llmc::data::loadTokenizer(llvm::StringRef spec) {
  if (spec == "byte")
    return std::make_unique<ByteTokenizer>();
  if (!llvm::sys::fs::is_directory(spec))
    return llvm::createStringError(
        "tokenizer '" + spec +
        "': expected 'byte' or a directory with vocab.json and merges.txt");
  auto bpe = BpeTokenizer::loadDirectory(spec);
  if (!bpe)
    return bpe.takeError();
  return std::unique_ptr<Tokenizer>(std::move(*bpe));
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

llvm::Expected<BpeVocabulary> llmc::data::trainBpe(llvm::StringRef text,
                                                   int32_t vocabSize,
                                                   BpeProgress progress) {
  if (vocabSize < 257)
    return llvm::createStringError(llvm::formatv(
        "vocabulary size {0} is too small: 256 byte tokens and <|endoftext|> "
        "need at least 257",
        vocabSize));

  // Distinct words and how often each occurs.
  llvm::StringMap<int64_t> wordCounts;
  for (llvm::StringRef rest = text;;) {
    size_t at = rest.find(kEndOfText);
    for (llvm::StringRef word : splitGpt2Words(rest.take_front(at)))
      ++wordCounts[word];
    if (at == llvm::StringRef::npos)
      break;
    rest = rest.drop_front(at + kEndOfText.size());
  }
  struct Word {
    std::vector<int32_t> symbols;
    int64_t count;
    int64_t lastVisit = -1;
  };
  std::vector<Word> words;
  words.reserve(wordCounts.size());
  for (const auto &entry : wordCounts) {
    Word word{{}, entry.second};
    for (char c : entry.first())
      word.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(word));
  }
  // Deterministic regardless of the hash map's order.
  std::sort(words.begin(), words.end(), [](const Word &a, const Word &b) {
    return a.symbols < b.symbols;
  });

  // Occurrences of each adjacent pair, and the words that may hold it (a
  // superset: entries go stale when a word's pair is merged away).
  llvm::DenseMap<uint64_t, int64_t> pairCounts;
  llvm::DenseMap<uint64_t, std::vector<int32_t>> pairWords;
  auto countPairs = [&](int32_t w, int64_t sign, int32_t indexOnly) {
    const std::vector<int32_t> &symbols = words[w].symbols;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      uint64_t key = pairKey(symbols[i], symbols[i + 1]);
      int64_t &count = pairCounts[key];
      count += sign * words[w].count;
      if (count == 0)
        pairCounts.erase(key);
      if (sign > 0 && (indexOnly < 0 || symbols[i] == indexOnly ||
                       symbols[i + 1] == indexOnly))
        pairWords[key].push_back(w);
    }
  };
  for (int32_t w = 0; w < static_cast<int32_t>(words.size()); ++w)
    countPairs(w, +1, -1);

  BpeVocabulary vocabulary;
  llvm::StringMap<int32_t> idOf;
  for (unsigned b = 0; b < 256; ++b) {
    vocabulary.tokens.push_back(std::string(1, static_cast<char>(b)));
    idOf[vocabulary.tokens.back()] = b;
  }
  int64_t wanted = vocabSize - 257;
  while (static_cast<int64_t>(vocabulary.tokens.size()) < vocabSize - 1) {
    // The most frequent pair; ties to the smaller (left, right).
    uint64_t best = 0;
    int64_t bestCount = 0;
    for (const auto &[key, count] : pairCounts)
      if (count > bestCount || (count == bestCount && key < best))
        best = key, bestCount = count;
    if (bestCount < 2)
      break;
    int32_t left = static_cast<int32_t>(best >> 32);
    int32_t right = static_cast<int32_t>(best & 0xFFFFFFFF);
    std::string merged = vocabulary.tokens[left] + vocabulary.tokens[right];
    // Two different pairs can spell the same bytes; they share one token.
    auto [it, isNew] = idOf.try_emplace(
        merged, static_cast<int32_t>(vocabulary.tokens.size()));
    int32_t mergedId = it->second;
    if (isNew)
      vocabulary.tokens.push_back(std::move(merged));
    int64_t mergeIndex = static_cast<int64_t>(vocabulary.merges.size());
    vocabulary.merges.emplace_back(left, right);

    std::vector<int32_t> candidates = std::move(pairWords[best]);
    pairWords.erase(best);
    for (int32_t w : candidates) {
      Word &word = words[w];
      if (word.lastVisit == mergeIndex)
        continue;
      word.lastVisit = mergeIndex;
      std::vector<int32_t> &symbols = word.symbols;
      bool holds = false;
      for (size_t i = 0; i + 1 < symbols.size() && !holds; ++i)
        holds = symbols[i] == left && symbols[i + 1] == right;
      if (!holds)
        continue;
      countPairs(w, -1, -1);
      size_t out = 0;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left &&
            symbols[i + 1] == right) {
          symbols[out++] = mergedId;
          ++i;
        } else {
          symbols[out++] = symbols[i];
        }
      }
      symbols.resize(out);
      countPairs(w, +1, mergedId);
    }
    progress(static_cast<int64_t>(vocabulary.tokens.size()) - 256, wanted);
  }
  vocabulary.endOfTextId = static_cast<int32_t>(vocabulary.tokens.size());
  vocabulary.tokens.push_back(kEndOfText.str());
  return vocabulary;
}

llvm::Error llmc::data::writeBpeFiles(const BpeVocabulary &vocabulary,
                                      llvm::StringRef dir) {
  if (std::error_code error = llvm::sys::fs::create_directories(dir))
    return llvm::createStringError(error, "cannot create directory '" + dir +
                                              "': " + error.message());
  llvm::SmallString<256> vocabPath(dir), mergesPath(dir);
  llvm::sys::path::append(vocabPath, "vocab.json");
  llvm::sys::path::append(mergesPath, "merges.txt");
  // Check before writing anything, so that a bad vocabulary leaves no file.
  if (auto checked = BpeTokenizer::fromVocabulary(vocabulary); !checked)
    return checked.takeError();
  if (llvm::Error error = kir::writeFileAtomically(
          vocabPath, [&](llvm::raw_ostream &os) {
            llvm::json::OStream json(os, /*IndentSize=*/0);
            json.object([&] {
              for (size_t id = 0; id < vocabulary.tokens.size(); ++id)
                json.attribute(gpt2SpellBytes(vocabulary.tokens[id]),
                               static_cast<int64_t>(id));
            });
            os << "\n";
            return llvm::Error::success();
          }))
    return error;
  llvm::Error error =
      kir::writeFileAtomically(mergesPath, [&](llvm::raw_ostream &os) {
        os << "#version: 0.2\n";
        for (auto [left, right] : vocabulary.merges)
          os << gpt2SpellBytes(vocabulary.tokens[left]) << ' '
             << gpt2SpellBytes(vocabulary.tokens[right]) << '\n';
        return llvm::Error::success();
      });
  // A vocab.json without its merges.txt is no tokenizer.
  if (error)
    llvm::sys::fs::remove(vocabPath);
  return error;
}

std::vector<int32_t>
llmc::data::encodeDocuments(llvm::ArrayRef<llvm::StringRef> texts,
                            const Tokenizer &tokenizer) {
  std::vector<int32_t> tokens;
  std::optional<int32_t> eot = tokenizer.endOfTextId();
  for (llvm::StringRef text : texts) {
    if (eot)
      tokens.push_back(*eot);
    std::vector<int32_t> ids = tokenizer.encode(text);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  return tokens;
}
