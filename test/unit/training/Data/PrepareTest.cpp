// Tests of training/Data/Prepare (llmc data prepare's engine): the tokens
// against the tokenizer run on the whole text, the shard-boundary rule,
// output independent of the thread count, resume, refusals and bad input.
#include "training/Data/Prepare.h"
#include "training/Data/PrepareInput.h"

#include "frontend/Tokenizer.h"
#include "training/Data/TokenFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <random>

using namespace llmc::data;
using ::testing::HasSubstr;

namespace {

std::string errorText(llvm::Error error) {
  return llvm::toString(std::move(error));
}

/// Text with what GPT-2's pre-tokenizer treats specially: contractions,
/// digits, punctuation, runs of spaces and newlines, tabs, non-ASCII
/// letters and spaces, and literal end-of-text markers.
std::string mixedText(size_t bytes, uint32_t seed) {
  static const char *const pieces[] = {
      "the",  "cat's", " ",  "  ",      "\n",  "\n\n", "2026", ",",
      ".",    "don't", "\t", "héllo",   "日本", "\xc2\xa0", "ok!", "we'll",
      "--",   "A",     "zz", "<|endoftext|>", " x", "(", ")", "1.5"};
  std::mt19937 rng(seed);
  std::string text;
  while (text.size() < bytes) {
    text += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
    if (rng() % 2)
      text += ' ';
  }
  return text;
}

class PrepareTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-prepare-test", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string file(llvm::StringRef name) const {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    return path.str().str();
  }
  std::string write(llvm::StringRef name, llvm::StringRef bytes) const {
    std::error_code error;
    llvm::raw_fd_ostream os(file(name), error);
    EXPECT_FALSE(error);
    os << bytes;
    return file(name);
  }
  /// A BPE vocabulary of `size` tokens learned from `text`, written to DIR.
  std::string bpe(llvm::StringRef name, llvm::StringRef text, int32_t size) {
    auto learned = trainBpe(text, size);
    EXPECT_TRUE(static_cast<bool>(learned));
    EXPECT_FALSE(writeBpeFiles(*learned, file(name)));
    return file(name);
  }
  PrepareOptions options(std::vector<std::string> inputs,
                         llvm::StringRef out) const {
    PrepareOptions o;
    o.inputs = std::move(inputs);
    o.outputDir = file(out);
    o.progress = ProgressStyle::Quiet;
    o.threads = 2;
    return o;
  }
  static PrepareResult run(const PrepareOptions &o) {
    std::string progress;
    llvm::raw_string_ostream os(progress);
    auto result = prepareData(o, os);
    if (!result) {
      ADD_FAILURE() << errorText(result.takeError());
      return {};
    }
    return *result;
  }
  static std::string runError(const PrepareOptions &o) {
    std::string progress;
    llvm::raw_string_ostream os(progress);
    auto result = prepareData(o, os);
    return result ? "no error" : errorText(result.takeError());
  }
  static std::string bytes(llvm::StringRef path) {
    auto buffer = llvm::MemoryBuffer::getFile(path);
    return buffer ? (*buffer)->getBuffer().str() : "<missing " + path.str() + ">";
  }
  /// Every token of every shard of a result, in order.
  static std::vector<int32_t> allTokens(const PrepareResult &result) {
    std::vector<int32_t> tokens;
    for (const PreparedShard &shard : result.shards) {
      auto opened = TokenFile::open(shard.path, nullptr);
      EXPECT_TRUE(static_cast<bool>(opened)) << shard.path;
      if (!opened) {
        llvm::consumeError(opened.takeError());
        continue;
      }
      std::vector<int32_t> part((*opened)->numTokens());
      EXPECT_FALSE((*opened)->read(0, part.size(), part.data()));
      tokens.insert(tokens.end(), part.begin(), part.end());
    }
    return tokens;
  }
  /// Documents of `count` lines each made of words, as lines text.
  static std::string linesCorpus(int64_t lines, uint32_t seed) {
    std::mt19937 rng(seed);
    static const char *const words[] = {"alpha", "beta", "gamma", "delta",
                                        "don't", "2026", "x,", "héllo"};
    std::string text;
    for (int64_t i = 0; i < lines; ++i) {
      int64_t n = 1 + rng() % 40;
      for (int64_t w = 0; w < n; ++w)
        text += std::string(w ? " " : "") + words[rng() % 8];
      text += i % 97 == 5 ? "\n\n" : "\n"; // some blank lines
    }
    return text;
  }

  llvm::SmallString<128> dir;
};

// A Text document cut at findTextCut's points encodes, piece by piece, to
// the tokens of the whole (so large files encode on several threads).
TEST_F(PrepareTest, TextCutsDoNotChangeTokens) {
  std::string text = mixedText(200000, 7);
  auto tokenizer = BpeTokenizer::fromVocabulary(*trainBpe(text, 400));
  ASSERT_TRUE(static_cast<bool>(tokenizer));
  std::vector<int32_t> whole = (*tokenizer)->encode(text);
  for (size_t step : {1, 7, 300, 5000}) {
    std::vector<int32_t> pieces;
    size_t start = 0, cuts = 0;
    while (start < text.size()) {
      size_t cut = findTextCut(llvm::StringRef(text).drop_front(start), step);
      size_t end = cut == llvm::StringRef::npos ? text.size() : start + cut;
      std::vector<int32_t> ids =
          (*tokenizer)->encode(llvm::StringRef(text).slice(start, end));
      pieces.insert(pieces.end(), ids.begin(), ids.end());
      start = end;
      ++cuts;
    }
    EXPECT_GT(cuts, 10u) << step;
    EXPECT_EQ(pieces, whole) << "cut every " << step << " bytes";
  }
}

// The tokens of a text file are what `llmc run` gets from the same file:
// the end-of-text token, then the tokenizer's encoding of the whole text
// (encodeDocuments, frontend/Tokenizer.h), however the file was cut.
TEST_F(PrepareTest, TextFileTokensEqualWholeEncoding) {
  std::string text = mixedText(3 << 20, 11); // three batches and more
  std::string vocab = bpe("bpe", llvm::StringRef(text).take_front(200000), 300);
  std::string path = write("corpus.txt", text);
  PrepareOptions o = options({path}, "out");
  o.tokenizerSpec = vocab;
  PrepareResult result = run(o);
  ASSERT_EQ(result.shards.size(), 1u);
  EXPECT_EQ(result.documents, 1);
  auto tokenizer = loadTokenizer(vocab);
  ASSERT_TRUE(static_cast<bool>(tokenizer));
  std::vector<int32_t> expected{*(*tokenizer)->endOfTextId()};
  std::vector<int32_t> ids = (*tokenizer)->encode(text);
  expected.insert(expected.end(), ids.begin(), ids.end());
  EXPECT_EQ(allTokens(result), expected);
  // TokenFile's own text path (what `llmc run` reads text through) agrees.
  auto asText = TokenFile::open(path, tokenizer->get());
  ASSERT_TRUE(static_cast<bool>(asText)) << errorText(asText.takeError());
  std::vector<int32_t> viaText((*asText)->numTokens());
  ASSERT_FALSE((*asText)->read(0, viaText.size(), viaText.data()));
  EXPECT_EQ(viaText, expected);
}

// A shard closes at the first document boundary at or after shardTokens;
// the output is byte for byte the same with 1 and 2 threads.
TEST_F(PrepareTest, ShardBoundariesAndThreadIndependence) {
  std::string path = write("docs.txt", linesCorpus(60000, 3));
  PrepareOptions one = options({path}, "one");
  one.inputKind = InputKind::Lines;
  one.shardTokens = 500000;
  one.threads = 1;
  PrepareOptions two = one;
  two.outputDir = file("two");
  two.threads = 2;
  PrepareResult a = run(one), b = run(two);
  ASSERT_GT(a.shards.size(), 3u);
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i)
    EXPECT_EQ(bytes(a.shards[i].path), bytes(b.shards[i].path)) << i;
  int64_t documents = 0;
  for (size_t i = 0; i < a.shards.size(); ++i) {
    auto shard = TokenFile::open(a.shards[i].path, nullptr);
    ASSERT_TRUE(static_cast<bool>(shard));
    int64_t n = (*shard)->numTokens();
    int64_t docs = *(*shard)->numDocuments();
    documents += docs;
    if (i + 1 < a.shards.size()) {
      EXPECT_GE(n, one.shardTokens) << i;
    }
    // Without its last document the shard is below the limit.
    EXPECT_LT((*shard)->documentStart(docs - 1), one.shardTokens) << i;
  }
  EXPECT_EQ(documents, a.documents);
  EXPECT_EQ(a.emptyDocuments, 60000 / 97 + 1);
  EXPECT_EQ(a.documents, 60000);
  // The bytes tokenizer has no end-of-text token: the tokens are the bytes.
  std::string text = bytes(path);
  EXPECT_EQ(a.tokens, static_cast<int64_t>(text.size()) - 60000 -
                          a.emptyDocuments);
}

// Progress as lines (not a terminal): documents, tokens, tokens/s, MB/s,
// the share of the input done and the ETA; nothing with Quiet.
TEST_F(PrepareTest, ProgressLines) {
  std::string path = write("docs.txt", linesCorpus(20000, 9));
  PrepareOptions o = options({path}, "out");
  o.inputKind = InputKind::Lines;
  o.progress = ProgressStyle::Lines;
  o.progressIntervalSeconds = 0; // every batch
  std::string progress;
  llvm::raw_string_ostream os(progress);
  auto result = prepareData(o, os);
  ASSERT_TRUE(static_cast<bool>(result)) << errorText(result.takeError());
  EXPECT_THAT(progress, ::testing::ContainsRegex(
                            "prepare: [0-9.k]+ documents, [0-9.kM]+ tokens, "
                            "[0-9.kM]+ tokens/s, [0-9.]+ MB/s, [0-9]+% of "
                            "[0-9.]+ MB, ETA [0-9a-z-]+\n"));
  EXPECT_EQ(progress.find('\r'), std::string::npos);
  std::string summary;
  llvm::raw_string_ostream summaryStream(summary);
  printPrepareSummary(*result, summaryStream);
  EXPECT_THAT(summary, HasSubstr("data_000000.tok: " +
                                 std::to_string(result->tokens) + " tokens, "
                                 "20000 documents\n"));
  EXPECT_THAT(summary, HasSubstr("total: " + std::to_string(result->tokens) +
                                 " tokens, 20000 documents in 1 file(s) of "
                                 "uint16 tokens"));
}

// JSONL: the field of each line; blank lines skipped; an empty field is an
// empty (skipped) document; other fields ignored.
TEST_F(PrepareTest, JsonlField) {
  std::string path = write(
      "in.jsonl",
      "{\"id\": 1, \"text\": \"hello\"}\n\n{\"text\": \"\\u00e9\\n\", \"x\": [1]}\n"
      "{\"content\": \"no\", \"text\": \"\"}\r\n{\"text\": \"b\"}");
  PrepareOptions o = options({path}, "out");
  PrepareResult result = run(o);
  EXPECT_EQ(result.documents, 3);
  EXPECT_EQ(result.emptyDocuments, 1);
  std::vector<int32_t> expected;
  for (unsigned char c : std::string("hello\xc3\xa9\nb"))
    expected.push_back(c);
  EXPECT_EQ(allTokens(result), expected);
}

TEST_F(PrepareTest, JsonlErrorsNameTheLine) {
  auto error = [&](llvm::StringRef contents, llvm::StringRef field = "text") {
    PrepareOptions o = options({write("bad.jsonl", contents)}, "out");
    o.field = field.str();
    return runError(o);
  };
  EXPECT_THAT(error("{\"text\": \"a\"}\n{\"text\": \"b\"\n"),
              HasSubstr("bad.jsonl:2: not a JSON value"));
  EXPECT_THAT(error("{\"text\": \"a\"}\n\n[1, 2]\n"),
              HasSubstr("bad.jsonl:3: expected a JSON object, got an array"));
  EXPECT_THAT(error("{\"body\": \"a\"}\n"),
              HasSubstr("bad.jsonl:1: no field 'text'"));
  EXPECT_THAT(error("{\"text\": 5}\n"),
              HasSubstr("bad.jsonl:1: field 'text' is a number, not a string"));
  EXPECT_THAT(error("{\"text\": \"a\"}\n{\"body\": null}\n", "body"),
              HasSubstr("bad.jsonl:1: no field 'body'"));
  EXPECT_THAT(error("{\"text\": \"a\"}\n{\"body\": null}\n", "body"),
              HasSubstr("bad.jsonl:1: no field 'body'"));
  // Nothing half-written: no shard, no temporary.
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(file("out"), ec), end;
       !ec && it != end; it.increment(ec))
    EXPECT_THAT(it->path(), HasSubstr("data.prepare.json")) << it->path();
}

TEST_F(PrepareTest, BadInputsAndOutputs) {
  std::string good = write("good.txt", "some text");
  EXPECT_THAT(runError(options({file("missing.txt")}, "out")),
              HasSubstr("missing.txt: No such file or directory"));
  std::string binary("abc\0def", 7);
  EXPECT_THAT(runError(options({good, write("blob.txt", binary)}, "out")),
              HasSubstr("blob.txt: a NUL byte at offset 3: this is a binary "
                        "file"));
  // A NUL byte beyond the first check is found when its batch is read.
  std::string late(3 << 20, 'a');
  late[(2 << 20) + 5] = '\0';
  EXPECT_THAT(runError(options({write("late.txt", late)}, "out")),
              HasSubstr("late.txt: a NUL byte at offset 2097157"));
  EXPECT_THAT(runError(options({good}, "good.txt/sub")),
              HasSubstr("good.txt/sub: cannot create the output directory"));
  EXPECT_THAT(runError(options({file("")}, "out")),
              HasSubstr("not a regular file"));
}

// Vocabularies over 65,536 tokens: uint32 llmc files, refused as llm.c
// shards.
TEST_F(PrepareTest, LargeVocabulary) {
  BpeVocabulary vocabulary;
  for (int b = 0; b < 256; ++b)
    vocabulary.tokens.push_back(std::string(1, static_cast<char>(b)));
  for (int i = 0; vocabulary.tokens.size() < 70000; ++i)
    vocabulary.tokens.push_back("tok" + std::to_string(i));
  vocabulary.endOfTextId = static_cast<int32_t>(vocabulary.tokens.size());
  vocabulary.tokens.push_back("<|endoftext|>");
  ASSERT_FALSE(writeBpeFiles(vocabulary, file("big")));
  std::string input = write("in.txt", "hi there");
  PrepareOptions o = options({input}, "out");
  o.tokenizerSpec = file("big");
  o.format = TokenFormat::LlmcShard;
  EXPECT_THAT(runError(o), HasSubstr("--format llmc-shard stores token ids as "
                                     "uint16, but the tokenizer"));
  EXPECT_FALSE(llvm::sys::fs::exists(file("out")));
  o.format = TokenFormat::Llmc;
  PrepareResult result = run(o);
  EXPECT_EQ(result.tokenType, TokenType::U32);
  std::vector<int32_t> tokens = allTokens(result);
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens[0], 70000);
}

// An interrupted run (its last shards and the end of the state file lost,
// a temporary left behind) continues after its last finished shard: those
// are kept untouched, the rest is rewritten to what one run writes.
TEST_F(PrepareTest, ResumeKeepsFinishedShards) {
  std::string path = write("docs.txt", linesCorpus(30000, 5));
  PrepareOptions o = options({path}, "full");
  o.inputKind = InputKind::Lines;
  o.shardTokens = 200000;
  PrepareResult full = run(o);
  ASSERT_GT(full.shards.size(), 4u);

  PrepareOptions p = o;
  p.outputDir = file("part");
  run(p);
  // What a kill after shard 2 leaves: the state as it was then, shards 0-1,
  // a temporary of shard 2.
  std::string state = bytes(statePath(p));
  auto json = llvm::json::parse(state);
  ASSERT_TRUE(static_cast<bool>(json));
  llvm::json::Object &root = *json->getAsObject();
  llvm::json::Array *shards = root.getArray("shards");
  while (shards->size() > 2)
    shards->erase(shards->end() - 1);
  root["complete"] = false;
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(statePath(p), ec);
    os << llvm::json::Value(std::move(*json));
  }
  for (size_t i = 2; i < full.shards.size(); ++i)
    llvm::sys::fs::remove(shardPath(p, i));
  write("part/data_000002.tok.tmp-AbCd1234", "half");
  llvm::sys::fs::file_status before;
  ASSERT_FALSE(llvm::sys::fs::status(shardPath(p, 1), before));

  PrepareResult resumed = run(p);
  ASSERT_EQ(resumed.shards.size(), full.shards.size());
  EXPECT_TRUE(resumed.shards[0].kept);
  EXPECT_TRUE(resumed.shards[1].kept);
  EXPECT_FALSE(resumed.shards[2].kept);
  EXPECT_EQ(resumed.tokens, full.tokens);
  EXPECT_EQ(resumed.documents, full.documents);
  for (size_t i = 0; i < full.shards.size(); ++i)
    EXPECT_EQ(bytes(resumed.shards[i].path), bytes(full.shards[i].path)) << i;
  EXPECT_FALSE(llvm::sys::fs::exists(file("part/data_000002.tok.tmp-AbCd1234")));
  llvm::sys::fs::file_status after;
  ASSERT_FALSE(llvm::sys::fs::status(shardPath(p, 1), after));
  EXPECT_EQ(before.getLastModificationTime(), after.getLastModificationTime());
  EXPECT_EQ(bytes(statePath(p)), bytes(statePath(o)));

  // Complete: a rerun does nothing.
  PrepareResult again = run(p);
  EXPECT_TRUE(again.alreadyComplete);
  EXPECT_EQ(again.tokens, full.tokens);
}

TEST_F(PrepareTest, RefusesOtherOptionsOrInputs) {
  std::string path = write("a.txt", "one two three");
  PrepareOptions o = options({path}, "out");
  run(o);
  // The JSONL field of inputs that are not JSONL changes nothing.
  PrepareOptions other = o;
  other.field = "body";
  EXPECT_TRUE(run(other).alreadyComplete);
  other = o;
  other.shardTokens = 5;
  EXPECT_THAT(runError(other),
              HasSubstr("this directory was prepared with other options or "
                        "inputs (shard_tokens was 100000000, now 5)"));
  other = o;
  other.tokenizerSpec = bpe("bpe", mixedText(20000, 1), 300);
  EXPECT_THAT(runError(other), HasSubstr("tokenizer.end_of_text was null, now 299"));
  write("a.txt", "one two three four");
  EXPECT_THAT(runError(o), HasSubstr("(inputs[0]."));
  o.overwrite = true;
  PrepareResult result = run(o);
  EXPECT_EQ(result.tokens, 18);
  // Shards without a state file are not ours to replace.
  PrepareOptions stray = options({path}, "stray");
  write("x", "");
  ASSERT_FALSE(llvm::sys::fs::create_directories(file("stray")));
  write("stray/data_000000.tok", "old");
  EXPECT_THAT(runError(stray), HasSubstr("and no state file"));
  // A state file that is not one.
  write("stray/data.prepare.json", "{");
  EXPECT_THAT(runError(stray), HasSubstr("data.prepare.json: not JSON"));
}

} // namespace
