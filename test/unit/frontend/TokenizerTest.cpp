// Tests of frontend/Tokenizer: the byte tokenizer, GPT-2's pre-tokenizer and
// byte-level BPE (loading, encoding, errors) and BPE training.
#include "frontend/Tokenizer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <string>
#include <vector>

using namespace llmc::data;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

std::string errorText(llvm::Error error) { return llvm::toString(std::move(error)); }

std::string readCorpus() {
  auto buffer = llvm::MemoryBuffer::getFile(LLMC_SOURCE_DIR
                                            "/examples/corpus/corpus.txt");
  EXPECT_TRUE(bool(buffer)) << "the bundled corpus is missing";
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

/// A temporary directory, removed with its files at the end of the test.
class TempDir {
public:
  TempDir() {
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-data-test", path));
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<256> result(path);
    llvm::sys::path::append(result, name);
    return result.str().str();
  }
  void write(llvm::StringRef name, llvm::StringRef contents) const {
    std::error_code error;
    llvm::raw_fd_ostream os(file(name), error);
    ASSERT_FALSE(error);
    os << contents;
  }
  llvm::SmallString<256> path;
};

//===----------------------------------------------------------------------===//
// Byte tokenizer
//===----------------------------------------------------------------------===//

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string text;
  for (int b = 0; b < 256; ++b)
    text.push_back(static_cast<char>(b));
  text += "Hello, world!\n";
  ByteTokenizer tokenizer;
  std::vector<int32_t> ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(ids[b], b);
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(tokenizer.vocabSize(), 256);
  EXPECT_FALSE(tokenizer.endOfTextId());
  EXPECT_EQ(tokenizer.decodeToken(300), "<|300|>");
}

TEST(ByteTokenizer, LoadedByName) {
  auto tokenizer = loadTokenizer("byte");
  ASSERT_TRUE(bool(tokenizer)) << errorText(tokenizer.takeError());
  EXPECT_EQ((*tokenizer)->vocabSize(), 256);
  auto missing = loadTokenizer("/does/not/exist");
  ASSERT_FALSE(bool(missing));
  EXPECT_THAT(errorText(missing.takeError()),
              HasSubstr("expected 'byte' or a directory"));
}

//===----------------------------------------------------------------------===//
// GPT-2's pre-tokenizer
//===----------------------------------------------------------------------===//

// Expected words from GPT-2's own pattern run by Python's `regex` module
// (regex.findall(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""", text)), pasted here.
TEST(Gpt2PreTokenizer, MatchesGpt2Pattern) {
  struct Case {
    const char *text;
    std::vector<std::string> words;
  };
  std::vector<Case> cases = {
      {"Hello world",
       {"Hello", " world"}},
      {"I'm sure they'll say we've done what she'd do; it's you're",
       {"I", "'m", " sure", " they", "'ll", " say", " we", "'ve", " done", " what", " she", "'d", " do", ";", " it", "'s", " you", "'re"}},
      {"DON'T stop",
       {"DON", "'", "T", " stop"}},
      {"abc123 456 7.5",
       {"abc", "123", " 456", " 7", ".", "5"}},
      {"Hi!!! ...ok? (yes)",
       {"Hi", "!!!", " ...", "ok", "?", " (", "yes", ")"}},
      {"a  b",
       {"a", " ", " b"}},
      {"a   \n\nb",
       {"a", "   \n", "\n", "b"}},
      {"hi  ",
       {"hi", "  "}},
      {"  leading",
       {" ", " leading"}},
      {"\n\nHello\n",
       {"\n", "\n", "Hello", "\n"}},
      {"tab\there",
       {"tab", "\t", "here"}},
      {" 's 't",
       {" '", "s", " '", "t"}},
      {"?'s",
       {"?'", "s"}},
      {"h\xc3""\xa9""llo w\xc3""\xb6""rld",
       {"h\xc3""\xa9""llo", " w\xc3""\xb6""rld"}},
      {"\xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e"" \xe3""\x83""\x86""\xe3""\x82""\xb9""\xe3""\x83""\x88""",
       {"\xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e""", " \xe3""\x83""\x86""\xe3""\x82""\xb9""\xe3""\x83""\x88"""}},
      {"a\xe2""\x80""\x94""b \xe2""\x80""\x9c""quoted\xe2""\x80""\x9d""",
       {"a", "\xe2""\x80""\x94""", "b", " \xe2""\x80""\x9c""", "quoted", "\xe2""\x80""\x9d"""}},
      {"x\xc2""\xa0""y",
       {"x", "\xc2""\xa0""", "y"}},
      {"x \xc2""\xa0""y",
       {"x", " ", "\xc2""\xa0""", "y"}},
      {"price: $5,000.00!",
       {"price", ":", " $", "5", ",", "000", ".", "00", "!"}},
      {"e-mail@host.com",
       {"e", "-", "mail", "@", "host", ".", "com"}},
      {"'''",
       {"'''"}},
      {"it''s",
       {"it", "''", "s"}},
      {" \n Hi",
       {" \n", " Hi"}},
      {"a\r\nb",
       {"a", "\r", "\n", "b"}},
  };
  for (const Case &c : cases) {
    std::vector<std::string> words;
    for (llvm::StringRef word : splitGpt2Words(c.text))
      words.push_back(word.str());
    EXPECT_EQ(words, c.words) << "text: '" << c.text << "'";
  }
}

TEST(Gpt2PreTokenizer, CoversInvalidUtf8) {
  // Invalid bytes are single symbols of the "other" class; nothing is lost.
  std::string text = "ab\xff\xfe cd\xc3";
  std::vector<llvm::StringRef> words = splitGpt2Words(text);
  std::string joined;
  for (llvm::StringRef word : words)
    joined += word.str();
  EXPECT_EQ(joined, text);
  EXPECT_EQ(words.size(), 4u);
  EXPECT_EQ(words[1], "\xff\xfe");
}

//===----------------------------------------------------------------------===//
// GPT-2 BPE files
//===----------------------------------------------------------------------===//

TEST(Gpt2Bytes, MappingMatchesGpt2) {
  // GPT-2 spells a space as U+0120 'Ġ' and a newline as U+010A 'Ċ'; printable
  // bytes spell themselves.
  EXPECT_EQ(gpt2ByteToCodePoint(' '), 0x120u);
  EXPECT_EQ(gpt2ByteToCodePoint('\n'), 0x10Au);
  EXPECT_EQ(gpt2ByteToCodePoint(0), 0x100u);
  EXPECT_EQ(gpt2ByteToCodePoint(127), 0x121u);
  EXPECT_EQ(gpt2ByteToCodePoint(173), 0x143u);
  EXPECT_EQ(gpt2ByteToCodePoint('a'), uint32_t('a'));
  EXPECT_EQ(gpt2SpellBytes(" the"), "\xc4\xa0the");
}

/// vocab.json and merges.txt with GPT-2's first 256 ids (its byte order:
/// the bytes that spell themselves, then the rest), its first twelve merges
/// with their real ids 256-267, and <|endoftext|> at 268.
struct MiniGpt2 {
  std::string vocab, merges;
  MiniGpt2() {
    std::vector<int> byteOrder;
    for (int pass = 0; pass < 2; ++pass)
      for (int b = 0; b < 256; ++b) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                    (b >= 0xAE && b <= 0xFF);
        if (self == (pass == 0))
          byteOrder.push_back(b);
      }
    vocab = "{";
    int id = 0;
    auto add = [&](const std::string &spelled) {
      std::string escaped;
      for (char c : spelled) {
        if (c == '"' || c == '\\')
          escaped += '\\';
        escaped += c;
      }
      vocab += (id ? ", \"" : "\"") + escaped + "\": " + std::to_string(id);
      ++id;
    };
    for (int b : byteOrder)
      add(gpt2SpellBytes(std::string(1, static_cast<char>(b))));
    const char *mergeLines[] = {"Ġ t", "Ġ a", "h e", "i n", "r e", "o n",
                                "Ġt he", "e r", "Ġ s", "a t", "Ġ w", "Ġ o"};
    merges = "#version: 0.2\n";
    for (llvm::StringRef line : mergeLines) {
      merges += line.str() + "\n";
      auto [left, right] = line.split(' ');
      add((left + right).str());
    }
    add("<|endoftext|>");
    vocab += "}";
  }
};

TEST(BpeTokenizer, MiniGpt2Ids) {
  MiniGpt2 files;
  auto tokenizer = BpeTokenizer::fromContents(files.vocab, files.merges);
  ASSERT_TRUE(bool(tokenizer)) << errorText(tokenizer.takeError());
  BpeTokenizer &bpe = **tokenizer;
  EXPECT_EQ(bpe.vocabSize(), 269);
  EXPECT_EQ(bpe.endOfTextId(), 268);
  // Ids GPT-2 gives these: '!' 0, 'a' 64, ' ' 220, '\n' 198, ' the' 262,
  // 'he' 258, 'in' 259, 'at' 265, ' w' 266.
  EXPECT_THAT(bpe.encode("!"), ElementsAre(0));
  EXPECT_THAT(bpe.encode("a"), ElementsAre(64));
  EXPECT_THAT(bpe.encode("\n"), ElementsAre(198));
  EXPECT_THAT(bpe.encode(" "), ElementsAre(220));
  EXPECT_THAT(bpe.encode(" the"), ElementsAre(262));
  EXPECT_THAT(bpe.encode("in the"), ElementsAre(259, 262));
  // " there": Ġt+he first (ranks 0 and 2), then Ġthe (rank 6), then r, e
  // merge (rank 4): [Ġthe, re].
  EXPECT_THAT(bpe.encode(" there"), ElementsAre(262, 260));
  // " what": 'a t' (rank 9) merges before 'Ġ w' (rank 10): [Ġw, h, at].
  EXPECT_THAT(bpe.encode(" what"), ElementsAre(266, 71, 265));
  EXPECT_THAT(bpe.encode("Hello"), ElementsAre(39, 68, 75, 75, 78));
  EXPECT_THAT(bpe.encode("a<|endoftext|>b"), ElementsAre(64, 268, 65));
  std::string text = "in the sea, at the weather\n\n<|endoftext|>Once";
  EXPECT_EQ(bpe.decode(bpe.encode(text)), text);
  EXPECT_EQ(bpe.decodeToken(262), " the");
  EXPECT_EQ(bpe.decodeToken(268), "<|endoftext|>");
  EXPECT_EQ(bpe.decodeToken(269), "<|269|>");
}

TEST(BpeTokenizer, LoadsFromDirectory) {
  MiniGpt2 files;
  TempDir dir;
  dir.write("vocab.json", files.vocab);
  dir.write("merges.txt", files.merges);
  auto tokenizer = loadTokenizer(dir.path);
  ASSERT_TRUE(bool(tokenizer)) << errorText(tokenizer.takeError());
  EXPECT_EQ((*tokenizer)->vocabSize(), 269);
  EXPECT_THAT((*tokenizer)->encode(" the"), ElementsAre(262));
  EXPECT_THAT((*tokenizer)->describe(), HasSubstr("bpe (269 tokens"));
}

TEST(BpeTokenizer, Errors) {
  MiniGpt2 files;
  auto errorOf = [](llvm::StringRef vocab, llvm::StringRef merges) {
    auto tokenizer = BpeTokenizer::fromContents(vocab, merges);
    return tokenizer ? std::string("no error") : errorText(tokenizer.takeError());
  };
  EXPECT_THAT(errorOf("{\"a\": 0,", files.merges),
              HasSubstr("vocab.json: invalid JSON"));
  EXPECT_THAT(errorOf("[1, 2]", files.merges),
              HasSubstr("vocab.json: expected a JSON object"));
  EXPECT_THAT(errorOf("{\"a\": 0, \"b\": 0}", ""),
              HasSubstr("vocab.json: id 0 is given to two tokens"));
  EXPECT_THAT(errorOf("{\"a\": 5}", ""),
              HasSubstr("token 'a': id must be an integer in [0, 1)"));
  EXPECT_THAT(errorOf("{\"\xe2\x82\xac\": 0}", ""),
              HasSubstr("outside GPT-2's bytes-to-unicode mapping"));
  EXPECT_THAT(errorOf("{\"a\": 0}", ""),
              HasSubstr("vocab.json: the vocabulary has no token for byte 0"));
  EXPECT_THAT(errorOf(files.vocab, "#version: 0.2\nĠ t\nz q\n"),
              HasSubstr("merges.txt:3: the merged token 'zq' is not in the "
                        "vocabulary"));
  EXPECT_THAT(errorOf(files.vocab, "#version: 0.2\nĠ t\nĠtx he\n"),
              HasSubstr("merges.txt:3: token 'Ġtx' is not in vocab.json"));
  EXPECT_THAT(errorOf(files.vocab, "#version: 0.2\nĠ t he\n"),
              HasSubstr("merges.txt:2: expected two tokens separated by one "
                        "space"));
  auto missing = BpeTokenizer::loadFiles("/no/such/vocab.json", "/no/merges.txt");
  ASSERT_FALSE(bool(missing));
  EXPECT_THAT(errorText(missing.takeError()),
              HasSubstr("cannot read '/no/such/vocab.json'"));
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

TEST(TrainBpe, TiesGoToTheSmallerPair) {
  // (a, b) and (c, d) both occur twice: (a, b) has the smaller ids.
  auto learned = trainBpe("ab\ncd\nab\ncd", 300);
  ASSERT_TRUE(bool(learned)) << errorText(learned.takeError());
  ASSERT_EQ(learned->merges.size(), 2u);
  EXPECT_EQ(learned->merges[0], std::make_pair(int32_t('a'), int32_t('b')));
  EXPECT_EQ(learned->merges[1], std::make_pair(int32_t('c'), int32_t('d')));
  // No pair is left that occurs twice: 256 + 2 + <|endoftext|>.
  EXPECT_EQ(learned->tokens.size(), 259u);
  EXPECT_EQ(learned->endOfTextId, 258);
  EXPECT_EQ(learned->tokens[256], "ab");
}

TEST(TrainBpe, RejectsTooSmallVocabulary) {
  auto learned = trainBpe("abc", 256);
  ASSERT_FALSE(bool(learned));
  EXPECT_THAT(errorText(learned.takeError()),
              HasSubstr("vocabulary size 256 is too small"));
}

TEST(TrainBpe, EndOfTextSeparatesWords) {
  // Never learns a pair across the marker ("y<", "|x", ...).
  auto learned = trainBpe("xy<|endoftext|>xy<|endoftext|>", 1000);
  ASSERT_TRUE(bool(learned)) << errorText(learned.takeError());
  ASSERT_EQ(learned->merges.size(), 1u);
  EXPECT_EQ(learned->tokens[256], "xy");
}

TEST(TrainBpe, CorpusRoundTrip) {
  std::string corpus = readCorpus();
  ASSERT_FALSE(corpus.empty());
  auto learned = trainBpe(corpus, 512);
  ASSERT_TRUE(bool(learned)) << errorText(learned.takeError());
  EXPECT_EQ(learned->tokens.size(), 512u);
  EXPECT_EQ(learned->merges.size(), 255u);
  EXPECT_EQ(learned->endOfTextId, 511);
  EXPECT_EQ(learned->tokens[511], "<|endoftext|>");

  TempDir dir;
  std::string out = dir.file("tok");
  ASSERT_FALSE(bool(writeBpeFiles(*learned, out)));
  auto loaded = loadTokenizer(out);
  ASSERT_TRUE(bool(loaded)) << errorText(loaded.takeError());
  EXPECT_EQ((*loaded)->vocabSize(), 512);
  EXPECT_EQ((*loaded)->endOfTextId(), 511);

  std::vector<int32_t> ids = (*loaded)->encode(corpus);
  for (int32_t id : ids)
    ASSERT_TRUE(id >= 0 && id < 512);
  EXPECT_EQ((*loaded)->decode(ids), corpus);
  // The small vocabulary of the corpus compresses well.
  EXPECT_GT(double(corpus.size()) / ids.size(), 2.5);

  // The tokenizer built in memory encodes the same.
  auto inMemory = BpeTokenizer::fromVocabulary(*learned);
  ASSERT_TRUE(bool(inMemory));
  std::string slice = corpus.substr(0, 20000);
  EXPECT_EQ((*inMemory)->encode(slice), (*loaded)->encode(slice));

  // Text outside the corpus still round-trips (bytes are always tokens).
  std::string other = "Zebras \xe2\x80\x94 42 \xf0\x9f\x98\x80 t\xc3\xa9l\xc3\xa9! \x01\xff";
  EXPECT_EQ((*loaded)->decode((*loaded)->encode(other)), other);
}

TEST(TrainBpe, StopsWhenEveryWordIsOneToken) {
  // The corpus has a few hundred distinct words: asking for more tokens than
  // it can fill stops when no pair occurs twice, with every frequent word a
  // single token.
  std::string corpus = readCorpus();
  auto learned = trainBpe(corpus, 4000);
  ASSERT_TRUE(bool(learned)) << errorText(learned.takeError());
  EXPECT_LT(learned->tokens.size(), 4000u);
  EXPECT_EQ(learned->tokens.back(), "<|endoftext|>");
  auto tokenizer = BpeTokenizer::fromVocabulary(*learned);
  ASSERT_TRUE(bool(tokenizer));
  EXPECT_THAT((*tokenizer)->encode(" upon"), testing::SizeIs(1));
  EXPECT_THAT((*tokenizer)->encode(" Grandma"), testing::SizeIs(1));
}

TEST(TrainBpe, Deterministic) {
  std::string corpus = readCorpus().substr(0, 50000);
  auto first = trainBpe(corpus, 400);
  auto second = trainBpe(corpus, 400);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->merges, second->merges);
  EXPECT_EQ(first->tokens, second->tokens);
}

} // namespace

// Each document is preceded by the end-of-text token (moved here from the
// tests of frontend/Dataset, which training/Data replaced).
TEST(EncodeDocuments, DocumentsStartWithEndOfText) {
  BpeVocabulary vocabulary;
  for (int b = 0; b < 256; ++b)
    vocabulary.tokens.push_back(std::string(1, static_cast<char>(b)));
  vocabulary.tokens.push_back("<|endoftext|>");
  vocabulary.endOfTextId = 256;
  auto tokenizer = BpeTokenizer::fromVocabulary(vocabulary);
  ASSERT_TRUE(bool(tokenizer)) << llvm::toString(tokenizer.takeError());
  EXPECT_THAT(encodeDocuments({"a", "bc"}, **tokenizer),
              ElementsAre(256, 'a', 256, 'b', 'c'));
  ByteTokenizer bytes;
  EXPECT_THAT(encodeDocuments({"a", "bc"}, bytes), ElementsAre('a', 'b', 'c'));
}
