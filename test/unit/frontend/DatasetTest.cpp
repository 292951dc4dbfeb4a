// Tests of frontend/Dataset: llm.c shards, token sources and the split, and
// the batch loader (targets, shuffling, resuming).
#include "frontend/Dataset.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <numeric>
#include <set>

using namespace llmc::data;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

std::string errorText(llvm::Error error) { return llvm::toString(std::move(error)); }

class DatasetTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-dataset-test", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string file(llvm::StringRef name) const {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    return path.str().str();
  }
  void writeBytes(llvm::StringRef name, llvm::StringRef bytes) const {
    std::error_code error;
    llvm::raw_fd_ostream os(file(name), error);
    ASSERT_FALSE(error);
    os << bytes;
  }
  /// A shard's bytes with header fields as given and `tokens` as uint16.
  static std::string shardBytes(int32_t magic, int32_t version, int32_t count,
                                llvm::ArrayRef<uint16_t> tokens) {
    std::string bytes(kShardHeaderBytes + 2 * tokens.size(), '\0');
    llvm::support::endian::write32le(&bytes[0], magic);
    llvm::support::endian::write32le(&bytes[4], version);
    llvm::support::endian::write32le(&bytes[8], count);
    for (size_t i = 0; i < tokens.size(); ++i)
      llvm::support::endian::write16le(&bytes[kShardHeaderBytes + 2 * i],
                                       tokens[i]);
    return bytes;
  }
  std::string shardError(llvm::StringRef name, llvm::StringRef bytes,
                         int32_t vocabSize = 0) {
    writeBytes(name, bytes);
    auto tokens = readShard(file(name), vocabSize);
    return tokens ? std::string("no error") : errorText(tokens.takeError());
  }

  llvm::SmallString<256> dir;
};

std::vector<int32_t> iota(int32_t n) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

//===----------------------------------------------------------------------===//
// Shards
//===----------------------------------------------------------------------===//

TEST_F(DatasetTest, ShardRoundTrip) {
  std::vector<int32_t> tokens = {0, 1, 50256, 65535, 7, 7};
  ASSERT_FALSE(bool(writeShard(file("a.bin"), tokens)));
  uint64_t size = 0;
  ASSERT_FALSE(llvm::sys::fs::file_size(file("a.bin"), size));
  EXPECT_EQ(size, 1024u + 2 * tokens.size());
  auto read = readShard(file("a.bin"));
  ASSERT_TRUE(bool(read)) << errorText(read.takeError());
  EXPECT_EQ(*read, tokens);
  // An empty shard is valid.
  ASSERT_FALSE(bool(writeShard(file("empty.bin"), {})));
  auto empty = readShard(file("empty.bin"));
  ASSERT_TRUE(bool(empty));
  EXPECT_TRUE(empty->empty());
}

// parseShard reads the same bytes in memory, its errors starting with the
// name it is given.
TEST_F(DatasetTest, ParseShardFromMemory) {
  std::vector<int32_t> tokens = {3, 1, 4, 1, 5};
  ASSERT_FALSE(bool(writeShard(file("p.bin"), tokens)));
  auto buffer = llvm::MemoryBuffer::getFile(file("p.bin"));
  ASSERT_TRUE(bool(buffer));
  llvm::StringRef bytes = (*buffer)->getBuffer();
  auto parsed = parseShard(bytes, "<memory>");
  ASSERT_TRUE(bool(parsed)) << errorText(parsed.takeError());
  EXPECT_EQ(*parsed, tokens);
  EXPECT_EQ(errorText(parseShard(bytes, "<memory>", 5).takeError()),
            "<memory>: token 5 at index 4 is out of range for the "
            "vocabulary size 5");
  EXPECT_EQ(errorText(parseShard(bytes.drop_back(), "<memory>").takeError()),
            "<memory>: truncated: the header counts 5 tokens (10 bytes) but "
            "the file holds 9 bytes of tokens");
}

TEST_F(DatasetTest, ShardWriteRejectsWideTokens) {
  std::vector<int32_t> tokens = {1, 70000};
  llvm::Error error = writeShard(file("wide.bin"), tokens);
  ASSERT_TRUE(bool(error));
  EXPECT_THAT(errorText(std::move(error)),
              HasSubstr("token 70000 at index 1 does not fit"));
  EXPECT_FALSE(llvm::sys::fs::exists(file("wide.bin")));
}

TEST_F(DatasetTest, MalformedShards) {
  std::vector<uint16_t> three = {1, 2, 3};
  EXPECT_THAT(shardError("short.bin", "abc"),
              HasSubstr("short.bin: truncated header: the file has 3 bytes"));
  EXPECT_THAT(shardError("magic.bin", shardBytes(1234, 1, 3, three)),
              HasSubstr("magic.bin: bad magic number 1234"));
  EXPECT_THAT(shardError("version.bin", shardBytes(kShardMagic, 2, 3, three)),
              HasSubstr("version.bin: unsupported version 2"));
  EXPECT_THAT(shardError("truncated.bin", shardBytes(kShardMagic, 1, 5, three)),
              HasSubstr("truncated.bin: truncated: the header counts 5 tokens "
                        "(10 bytes) but the file holds 6 bytes"));
  EXPECT_THAT(shardError("extra.bin", shardBytes(kShardMagic, 1, 2, three)),
              HasSubstr("extra.bin: token count mismatch: the header counts 2 "
                        "tokens (4 bytes) but the file holds 6 bytes"));
  EXPECT_THAT(shardError("negative.bin", shardBytes(kShardMagic, 1, -1, three)),
              HasSubstr("negative.bin: negative token count -1"));
  EXPECT_THAT(shardError("vocab.bin", shardBytes(kShardMagic, 1, 3, three), 3),
              HasSubstr("vocab.bin: token 3 at index 2 is out of range for "
                        "the vocabulary size 3"));
  EXPECT_EQ(shardError("ok.bin", shardBytes(kShardMagic, 1, 3, three), 4),
            "no error");
  auto missing = readShard(file("missing.bin"));
  ASSERT_FALSE(bool(missing));
  EXPECT_THAT(errorText(missing.takeError()), HasSubstr("cannot read"));
}

TEST_F(DatasetTest, FilePatterns) {
  for (const char *name : {"train_001.bin", "train_000.bin", "val_000.bin"})
    ASSERT_FALSE(bool(writeShard(file(name), {1, 2})));
  auto files = expandFilePatterns({file("train_*.bin")});
  ASSERT_TRUE(bool(files)) << errorText(files.takeError());
  EXPECT_THAT(*files, ElementsAre(file("train_000.bin"), file("train_001.bin")));
  auto literal = expandFilePatterns({file("val_000.bin")});
  ASSERT_TRUE(bool(literal));
  EXPECT_THAT(*literal, ElementsAre(file("val_000.bin")));
  auto none = expandFilePatterns({file("test_*.bin")});
  ASSERT_FALSE(bool(none));
  EXPECT_THAT(errorText(none.takeError()), HasSubstr("no files match"));
}

//===----------------------------------------------------------------------===//
// Token sources and the split
//===----------------------------------------------------------------------===//

TEST_F(DatasetTest, LoadsTextAndShards) {
  writeBytes("a.txt", "hi");
  ASSERT_FALSE(bool(writeShard(file("b.bin"), {65, 66})));
  ByteTokenizer bytes;
  auto tokens = loadTokens({file("a.txt"), file("b.bin")}, bytes);
  ASSERT_TRUE(bool(tokens)) << errorText(tokens.takeError());
  EXPECT_THAT(*tokens, ElementsAre('h', 'i', 65, 66));
  // Shard ids are checked against the tokenizer's vocabulary.
  ASSERT_FALSE(bool(writeShard(file("c.bin"), {300})));
  auto wide = loadTokens({file("c.bin")}, bytes);
  ASSERT_FALSE(bool(wide));
  EXPECT_THAT(errorText(wide.takeError()),
              HasSubstr("c.bin: token 300 at index 0 is out of range"));
}

TEST_F(DatasetTest, DocumentsStartWithEndOfText) {
  BpeVocabulary vocabulary;
  for (int b = 0; b < 256; ++b)
    vocabulary.tokens.push_back(std::string(1, static_cast<char>(b)));
  vocabulary.tokens.push_back("<|endoftext|>");
  vocabulary.endOfTextId = 256;
  auto tokenizer = BpeTokenizer::fromVocabulary(vocabulary);
  ASSERT_TRUE(bool(tokenizer)) << errorText(tokenizer.takeError());
  EXPECT_THAT(encodeDocuments({"a", "bc"}, **tokenizer),
              ElementsAre(256, 'a', 256, 'b', 'c'));
}

TEST_F(DatasetTest, SplitsByFractionOrFiles) {
  TokenSplits splits = splitTokens(iota(100), 0.1);
  EXPECT_EQ(splits.train, std::vector<int32_t>(iota(90)));
  ASSERT_EQ(splits.val.size(), 10u);
  EXPECT_EQ(splits.val.front(), 90);

  ASSERT_FALSE(bool(writeShard(file("train.bin"), iota(50))));
  ASSERT_FALSE(bool(writeShard(file("val.bin"), {7, 8, 9})));
  ByteTokenizer bytes;
  DataOptions options;
  options.trainFiles = {file("train.bin")};
  options.valFraction = 0.2;
  auto byFraction = loadTokenSplits(options, bytes);
  ASSERT_TRUE(bool(byFraction)) << errorText(byFraction.takeError());
  EXPECT_EQ(byFraction->train.size(), 40u);
  EXPECT_EQ(byFraction->val.size(), 10u);

  options.valFiles = {file("val.bin")};
  auto byFiles = loadTokenSplits(options, bytes);
  ASSERT_TRUE(bool(byFiles)) << errorText(byFiles.takeError());
  EXPECT_EQ(byFiles->train.size(), 50u);
  EXPECT_THAT(byFiles->val, ElementsAre(7, 8, 9));

  options.valFiles = {file("train.bin")};
  auto same = loadTokenSplits(options, bytes);
  ASSERT_FALSE(bool(same));
  EXPECT_THAT(errorText(same.takeError()),
              HasSubstr("is both a training and a validation file"));

  options.valFiles = {};
  options.valFraction = 1.5;
  auto badFraction = loadTokenSplits(options, bytes);
  ASSERT_FALSE(bool(badFraction));
  EXPECT_THAT(errorText(badFraction.takeError()), HasSubstr("out of range"));
}

//===----------------------------------------------------------------------===//
// BatchLoader
//===----------------------------------------------------------------------===//

TEST(BatchLoader, TargetsAreNextTokens) {
  auto loader = BatchLoader::create(iota(1000), 4, 16, 1, /*shuffle=*/true);
  ASSERT_TRUE(bool(loader)) << errorText(loader.takeError());
  Batch batch;
  for (int step = 0; step < 20; ++step) {
    loader->next(batch);
    ASSERT_EQ(batch.tokens.size(), 64u);
    for (int64_t b = 0; b < 4; ++b) {
      // A row is a window starting at a multiple of T.
      EXPECT_EQ(batch.tokens[b * 16] % 16, 0);
      for (int64_t t = 0; t < 16; ++t) {
        EXPECT_EQ(batch.targets[b * 16 + t], batch.tokens[b * 16 + t] + 1);
        if (t > 0) {
          EXPECT_EQ(batch.tokens[b * 16 + t], batch.tokens[b * 16 + t - 1] + 1);
        }
      }
    }
  }
}

TEST(BatchLoader, UnshuffledIsSequential) {
  auto loader = BatchLoader::create(iota(100), 2, 10, 1, /*shuffle=*/false);
  ASSERT_TRUE(bool(loader));
  EXPECT_EQ(loader->windowsPerEpoch(), 9); // (100 - 1) / 10
  EXPECT_EQ(loader->batchesPerEpoch(), 4);
  Batch batch;
  loader->next(batch);
  EXPECT_EQ(batch.tokens[0], 0);
  EXPECT_EQ(batch.tokens[10], 10);
  EXPECT_EQ(batch.targets[19], 20);
}

TEST(BatchLoader, EpochVisitsEveryWindowOnce) {
  auto loader = BatchLoader::create(iota(10001), 5, 10, 42, true);
  ASSERT_TRUE(bool(loader));
  ASSERT_EQ(loader->windowsPerEpoch(), 1000);
  std::set<int32_t> starts;
  Batch batch;
  for (int step = 0; step < 200; ++step) {
    loader->next(batch);
    for (int b = 0; b < 5; ++b)
      starts.insert(batch.tokens[b * 10]);
  }
  EXPECT_EQ(starts.size(), 1000u);
  EXPECT_EQ(loader->position(), (LoaderPosition{1, 0}));
  // The next epoch has another order.
  EXPECT_NE(loader->epochOrder(0), loader->epochOrder(1));
}

TEST(BatchLoader, OrderDependsOnlyOnSeed) {
  std::vector<int32_t> tokens = iota(5000);
  auto a = BatchLoader::create(tokens, 4, 8, 7, true);
  auto b = BatchLoader::create(tokens, 4, 8, 7, true);
  auto c = BatchLoader::create(tokens, 4, 8, 8, true);
  ASSERT_TRUE(a && b && c);
  Batch batchA, batchB, batchC;
  bool differs = false;
  for (int step = 0; step < 10; ++step) {
    a->next(batchA);
    b->next(batchB);
    c->next(batchC);
    EXPECT_EQ(batchA.tokens, batchB.tokens);
    differs |= batchA.tokens != batchC.tokens;
  }
  EXPECT_TRUE(differs);
  // Shuffled: not the sequential order.
  std::vector<uint32_t> identity(a->windowsPerEpoch());
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_NE(a->epochOrder(0), identity);
}

TEST(BatchLoader, ResumesExactly) {
  std::vector<int32_t> tokens = iota(3001);
  auto straight = BatchLoader::create(tokens, 3, 10, 99, true);
  ASSERT_TRUE(bool(straight));
  Batch batch;
  // 100 windows, 3 per batch: stop mid-epoch, past an epoch boundary too.
  for (int stop : {5, 40}) {
    auto first = BatchLoader::create(tokens, 3, 10, 99, true);
    ASSERT_TRUE(bool(first));
    for (int step = 0; step < stop; ++step)
      first->next(batch);
    llvm::json::Value saved = first->position().toJson();
    std::string text;
    llvm::raw_string_ostream(text) << saved;
    auto parsed = llvm::json::parse(text);
    ASSERT_TRUE(bool(parsed));
    auto position = LoaderPosition::fromJson(*parsed);
    ASSERT_TRUE(bool(position)) << errorText(position.takeError());
    EXPECT_EQ(*position, first->position());

    auto resumed = BatchLoader::create(tokens, 3, 10, 99, true);
    ASSERT_TRUE(bool(resumed));
    ASSERT_FALSE(bool(resumed->setPosition(*position)));
    Batch expected, actual;
    for (int step = 0; step < 50; ++step) {
      first->next(expected);
      resumed->next(actual);
      ASSERT_EQ(expected.tokens, actual.tokens) << "step " << step;
      ASSERT_EQ(expected.targets, actual.targets);
    }
  }
}

TEST(BatchLoader, ValidationSplitIsDisjoint) {
  TokenSplits splits = splitTokens(iota(2000), 0.25);
  auto train = BatchLoader::create(splits.train, 4, 16, 1, true);
  auto val = BatchLoader::create(splits.val, 4, 16, 1, false);
  ASSERT_TRUE(train && val);
  std::set<int32_t> trainSeen, valSeen;
  Batch batch;
  for (int step = 0; step < 3 * train->batchesPerEpoch(); ++step) {
    train->next(batch);
    trainSeen.insert(batch.tokens.begin(), batch.tokens.end());
    trainSeen.insert(batch.targets.begin(), batch.targets.end());
  }
  for (int step = 0; step < val->batchesPerEpoch(); ++step) {
    val->next(batch);
    valSeen.insert(batch.tokens.begin(), batch.tokens.end());
    valSeen.insert(batch.targets.begin(), batch.targets.end());
  }
  EXPECT_FALSE(valSeen.empty());
  for (int32_t token : valSeen)
    EXPECT_EQ(trainSeen.count(token), 0u) << token;
}

TEST(BatchLoader, Errors) {
  auto tooFew = BatchLoader::create(iota(64), 4, 16, 1, true);
  ASSERT_FALSE(bool(tooFew));
  EXPECT_THAT(errorText(tooFew.takeError()),
              HasSubstr("64 tokens are too few for one batch of 4 x 16: it "
                        "needs 65 tokens"));
  auto enough = BatchLoader::create(iota(65), 4, 16, 1, true);
  ASSERT_TRUE(bool(enough));
  llvm::Error past = enough->setPosition({0, 4});
  ASSERT_TRUE(bool(past));
  EXPECT_THAT(errorText(std::move(past)), HasSubstr("past the 4 windows"));
  auto zero = BatchLoader::create(iota(65), 0, 16, 1, true);
  ASSERT_FALSE(bool(zero));
  consumeError(zero.takeError());
  auto badJson = LoaderPosition::fromJson(llvm::json::Object{{"epoch", 1}});
  ASSERT_FALSE(bool(badJson));
  consumeError(badJson.takeError());
}

} // namespace
