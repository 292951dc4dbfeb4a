// Token files (training/Data/TokenFile.h): every format's round trip, the
// document index, dtype conversion, the vocabulary check, every bad input,
// the writer's atomicity and a resident set that stays flat over a large
// file.
#include "training/Data/TokenFile.h"

#include "frontend/Tokenizer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace llmc;
using namespace llmc::data;
using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace endian = llvm::support::endian;

namespace {

class TokenFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    llvm::SmallString<128> made;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-tokenfile", made));
    dir = std::string(made);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const { return dir + "/" + name.str(); }

  std::string write(llvm::StringRef name, const std::string &bytes) const {
    std::string file = path(name);
    std::ofstream(file, std::ios::binary) << bytes;
    return file;
  }
  std::string contents(const std::string &file) const {
    auto buffer = llvm::MemoryBuffer::getFile(file);
    return buffer ? (*buffer)->getBuffer().str() : std::string();
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
         it.increment(ec))
      names.push_back(llvm::sys::path::filename(it->path()).str());
    std::sort(names.begin(), names.end());
    return names;
  }

  /// An llmc file of `documents` written through the writer.
  std::string writeLlmc(llvm::StringRef name,
                        const std::vector<std::vector<int32_t>> &documents,
                        TokenType type = TokenType::U16) {
    std::string file = path(name);
    auto writer = TokenFileWriter::create(file, TokenFormat::Llmc, type);
    EXPECT_TRUE(bool(writer)) << llvm::toString(writer.takeError());
    for (const auto &document : documents)
      EXPECT_FALSE(bool((*writer)->appendDocument(document)));
    EXPECT_FALSE(bool((*writer)->commit()));
    return file;
  }

  std::string dir;
};

std::string openError(const std::string &file,
                      const Tokenizer *tokenizer = nullptr) {
  auto opened = TokenFile::open(file, tokenizer);
  if (opened)
    return "(opened)";
  return llvm::toString(opened.takeError());
}

std::vector<int32_t> readAll(const TokenFile &file, int32_t vocab = 0) {
  std::vector<int32_t> ids(file.numTokens());
  llvm::Error error = file.read(0, file.numTokens(), ids.data(), vocab);
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
  return ids;
}

std::string readError(const TokenFile &file, int64_t start, int64_t count,
                      int32_t vocab = 0) {
  std::vector<int32_t> ids(std::max<int64_t>(count, 0));
  llvm::Error error = file.read(start, count, ids.data(), vocab);
  return error ? llvm::toString(std::move(error)) : "(read)";
}

/// An llm.c shard header: magic, version, count, then 253 zero int32.
std::string shardHeader(int32_t magic, int32_t version, int32_t count) {
  std::string bytes(1024, '\0');
  endian::write32le(&bytes[0], magic);
  endian::write32le(&bytes[4], version);
  endian::write32le(&bytes[8], count);
  return bytes;
}

void put64(std::string &bytes, uint64_t value) {
  char raw[8];
  endian::write64le(raw, value);
  bytes.append(raw, 8);
}
void put32(std::string &bytes, uint32_t value) {
  char raw[4];
  endian::write32le(raw, value);
  bytes.append(raw, 4);
}

/// A Megatron pair written here from the published layout (the lit tests
/// use scripts/make_megatron_dataset.py: two writers, one reader).
struct MegatronPair {
  uint8_t code = 8;
  int width = 2;
  std::vector<std::vector<int64_t>> sequences;
  std::vector<int64_t> documents; // doc_idx; empty: one per sequence
  std::string idxBytes() const {
    std::string idx("MMIDIDX\0\0", 9);
    put64(idx, 1);
    idx.push_back(char(code));
    std::vector<int64_t> docIdx = documents;
    if (docIdx.empty())
      for (size_t s = 0; s <= sequences.size(); ++s)
        docIdx.push_back(int64_t(s));
    put64(idx, sequences.size());
    put64(idx, docIdx.size());
    for (const auto &sequence : sequences)
      put32(idx, uint32_t(sequence.size()));
    int64_t offset = 0;
    for (const auto &sequence : sequences) {
      put64(idx, offset);
      offset += int64_t(sequence.size()) * width;
    }
    for (int64_t d : docIdx)
      put64(idx, d);
    return idx;
  }
  std::string binBytes() const {
    std::string bin;
    for (const auto &sequence : sequences)
      for (int64_t id : sequence) {
        char raw[8];
        endian::write64le(raw, uint64_t(id));
        bin.append(raw, width); // little-endian: the low bytes first
      }
    return bin;
  }
};

//===----------------------------------------------------------------------===//
// Round trips
//===----------------------------------------------------------------------===//

TEST_F(TokenFileTest, ShardRoundTrip) {
  std::vector<int32_t> ids = {0, 1, 65535, 50256, 7};
  ASSERT_FALSE(bool(writeShard(path("a.bin"), ids)));
  auto file = TokenFile::open(path("a.bin"), nullptr);
  ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
  EXPECT_EQ((*file)->format(), TokenFormat::LlmcShard);
  EXPECT_EQ(formatName((*file)->format()), "llm.c shard");
  EXPECT_EQ((*file)->type(), TokenType::U16);
  EXPECT_EQ((*file)->numTokens(), 5);
  EXPECT_FALSE((*file)->numDocuments());
  EXPECT_EQ((*file)->mappedBytes(), 0); // nothing mapped before a read
  EXPECT_EQ(readAll(**file), ids);
  EXPECT_GT((*file)->mappedBytes(), 0);
  std::vector<int32_t> middle(2);
  ASSERT_FALSE(bool((*file)->read(2, 2, middle.data())));
  EXPECT_EQ(middle, (std::vector<int32_t>{65535, 50256}));
  // The same bytes llm.c writes: magic, version, count, uint16 ids.
  std::string bytes = contents(path("a.bin"));
  ASSERT_EQ(bytes.size(), 1024u + 10u);
  EXPECT_EQ(endian::read32le(bytes.data()), 20240520u);
  EXPECT_EQ(endian::read32le(bytes.data() + 8), 5u);
  EXPECT_EQ(endian::read16le(bytes.data() + 1024 + 4), 65535u);
}

TEST_F(TokenFileTest, LlmcRoundTripWithDocuments) {
  for (TokenType type : {TokenType::U16, TokenType::U32}) {
    int32_t big = type == TokenType::U16 ? 65535 : 100000000;
    std::vector<std::vector<int32_t>> documents = {
        {5, 6, 7}, {}, {big}, {1, 2}};
    std::string file = writeLlmc("a.tok", documents, type);
    auto opened = TokenFile::open(file, nullptr);
    ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
    const TokenFile &tokens = **opened;
    EXPECT_EQ(tokens.format(), TokenFormat::Llmc);
    EXPECT_EQ(tokens.type(), type);
    EXPECT_EQ(tokens.numTokens(), 6);
    ASSERT_EQ(tokens.numDocuments(), std::optional<int64_t>(4));
    EXPECT_EQ(tokens.documentStart(0), 0);
    EXPECT_EQ(tokens.documentStart(1), 3);
    EXPECT_EQ(tokens.documentStart(2), 3);
    EXPECT_EQ(tokens.documentStart(3), 4);
    EXPECT_EQ(readAll(tokens), (std::vector<int32_t>{5, 6, 7, big, 1, 2}));
    // Header, tokens padded to 8 bytes, 5 index entries.
    int64_t tokenBytes = 6 * typeBytes(type);
    EXPECT_EQ(int64_t(contents(file).size()),
              64 + (tokenBytes + 7) / 8 * 8 + 8 * 5);
    auto info = scanTokenFile(file, nullptr);
    ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
    EXPECT_EQ(info->checksumMatches, std::optional<bool>(true));
    EXPECT_EQ(info->minId, 1);
    EXPECT_EQ(info->maxId, big);
    EXPECT_EQ(info->documents, std::optional<int64_t>(4));
    std::string bytes = contents(file);
    EXPECT_EQ(info->checksum, endian::read64le(bytes.data() + 32));
  }
}

TEST_F(TokenFileTest, LlmcChecksumDetectsDamage) {
  std::string file = writeLlmc("a.tok", {{1, 2, 3, 4}});
  std::string bytes = contents(file);
  bytes[64] ^= 1; // the first token
  write("a.tok", bytes);
  auto info = scanTokenFile(file, nullptr);
  ASSERT_TRUE(bool(info));
  EXPECT_EQ(info->checksumMatches, std::optional<bool>(false));
}

TEST_F(TokenFileTest, EmptyLlmcFile) {
  std::string file = writeLlmc("empty.tok", {});
  auto opened = TokenFile::open(file, nullptr);
  ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
  EXPECT_EQ((*opened)->numTokens(), 0);
  EXPECT_EQ((*opened)->numDocuments(), std::optional<int64_t>(0));
  EXPECT_TRUE(readAll(**opened).empty());
}

TEST_F(TokenFileTest, MegatronEveryIntegerDtype) {
  struct Case {
    uint8_t code;
    int width;
    TokenType type;
    int64_t largest;
  };
  for (Case c : {Case{1, 1, TokenType::U8, 255}, Case{2, 1, TokenType::I8, 127},
                 Case{3, 2, TokenType::I16, 32767},
                 Case{4, 4, TokenType::I32, 2147483647},
                 Case{5, 8, TokenType::I64, 2147483647},
                 Case{8, 2, TokenType::U16, 65535}}) {
    MegatronPair pair;
    pair.code = c.code;
    pair.width = c.width;
    pair.sequences = {{1, 2, c.largest}, {3}, {4, 5}};
    pair.documents = {0, 2, 3}; // two documents: sequences [0,2) and [2,3)
    write("m.bin", pair.binBytes());
    write("m.idx", pair.idxBytes());
    for (const char *name : {"m.bin", "m.idx"}) {
      auto opened = TokenFile::open(path(name), nullptr);
      ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
      EXPECT_EQ((*opened)->format(), TokenFormat::Megatron);
      EXPECT_EQ((*opened)->type(), c.type) << typeName(c.type).str();
      EXPECT_EQ((*opened)->numTokens(), 6);
      ASSERT_EQ((*opened)->numDocuments(), std::optional<int64_t>(2));
      EXPECT_EQ((*opened)->documentStart(0), 0);
      EXPECT_EQ((*opened)->documentStart(1), 4);
      EXPECT_EQ(readAll(**opened),
                (std::vector<int32_t>{1, 2, int32_t(c.largest), 3, 4, 5}));
    }
  }
}

TEST_F(TokenFileTest, MegatronEmptyDocumentsAndModes) {
  MegatronPair pair;
  pair.sequences = {{1, 2}, {}, {3}};
  pair.documents = {0, 1, 3, 3}; // the last document is empty
  write("e.bin", pair.binBytes());
  write("e.idx", pair.idxBytes());
  auto opened = TokenFile::open(path("e.idx"), nullptr);
  ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
  ASSERT_EQ((*opened)->numDocuments(), std::optional<int64_t>(3));
  EXPECT_EQ((*opened)->documentStart(1), 2);
  EXPECT_EQ((*opened)->documentStart(2), 3); // at the end: no sequence left
  // Multimodal datasets append one int8 mode per sequence.
  write("e.idx", pair.idxBytes() + std::string(3, '\0'));
  auto modes = TokenFile::open(path("e.idx"), nullptr);
  ASSERT_TRUE(bool(modes)) << llvm::toString(modes.takeError());
  EXPECT_EQ(readAll(**modes), (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(TokenFileTest, MegatronIdsThatAreNoTokenIds) {
  MegatronPair pair;
  pair.code = 2; // int8
  pair.width = 1;
  pair.sequences = {{4, -3}};
  write("neg.bin", pair.binBytes());
  write("neg.idx", pair.idxBytes());
  auto negative = TokenFile::open(path("neg.bin"), nullptr);
  ASSERT_TRUE(bool(negative));
  EXPECT_EQ(readError(**negative, 0, 2),
            path("neg.bin") + ": token -3 at index 1 is negative");
  pair.code = 5; // int64
  pair.width = 8;
  pair.sequences = {{1, 2, int64_t(1) << 40}};
  write("wide.bin", pair.binBytes());
  write("wide.idx", pair.idxBytes());
  auto wide = TokenFile::open(path("wide.bin"), nullptr);
  ASSERT_TRUE(bool(wide));
  EXPECT_EQ(readError(**wide, 0, 3),
            path("wide.bin") +
                ": token 1099511627776 at index 2 does not fit an int32 token "
                "id");
  std::vector<int32_t> two(2);
  EXPECT_FALSE(bool((*wide)->read(0, 2, two.data())));
}

TEST_F(TokenFileTest, TextIsEncodedWholeWithEndOfTextFirst) {
  std::string file = write("doc.txt", "the cat sat on the mat");
  ByteTokenizer bytes;
  auto opened = TokenFile::open(file, &bytes);
  ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
  EXPECT_EQ((*opened)->format(), TokenFormat::Text);
  EXPECT_EQ(readAll(**opened), bytes.encode("the cat sat on the mat"));
  EXPECT_EQ((*opened)->numDocuments(), std::optional<int64_t>(1));
  EXPECT_GT((*opened)->heapBytes(), 0);
  EXPECT_EQ((*opened)->mappedBytes(), 0);

  auto vocabulary = trainBpe("the cat sat on the mat the cat", 270);
  ASSERT_TRUE(bool(vocabulary));
  auto bpe = BpeTokenizer::fromVocabulary(*vocabulary);
  ASSERT_TRUE(bool(bpe));
  auto encoded = TokenFile::open(file, bpe->get());
  ASSERT_TRUE(bool(encoded));
  std::vector<int32_t> ids = readAll(**encoded);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *(*bpe)->endOfTextId());
  EXPECT_EQ((*bpe)->decode(llvm::ArrayRef<int32_t>(ids).drop_front()),
            "the cat sat on the mat");
}

TEST_F(TokenFileTest, FromTokens) {
  auto file = TokenFile::fromTokens("mem", {1, 2, 3, 4}, {0, 2});
  EXPECT_EQ(file->path(), "mem");
  EXPECT_EQ(file->numDocuments(), std::optional<int64_t>(2));
  EXPECT_EQ(file->documentStart(1), 2);
  EXPECT_EQ(readAll(*file), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(readError(*file, 0, 4, 4),
            "mem: token 4 at index 3 is out of range for the vocabulary size 4");
  EXPECT_FALSE(TokenFile::fromTokens("x", {1})->numDocuments());
}

TEST_F(TokenFileTest, VocabularyCheckNamesFileIndexAndId) {
  ASSERT_FALSE(bool(writeShard(path("v.bin"), {1, 2, 300, 4})));
  auto file = TokenFile::open(path("v.bin"), nullptr);
  ASSERT_TRUE(bool(file));
  EXPECT_EQ(readError(**file, 1, 3, 256),
            path("v.bin") +
                ": token 300 at index 2 is out of range for the vocabulary "
                "size 256");
  EXPECT_EQ(readError(**file, 0, 2, 256), "(read)");
  EXPECT_EQ(readError(**file, 3, 2),
            path("v.bin") + ": tokens [3, 5) are outside its 4 tokens");
  EXPECT_EQ(readError(**file, -1, 1),
            path("v.bin") + ": tokens [-1, 0) are outside its 4 tokens");
  auto info = scanTokenFile(path("v.bin"), nullptr, 256);
  ASSERT_TRUE(bool(info));
  EXPECT_EQ(info->idsOutOfRange, 1);
  EXPECT_EQ(info->firstOutOfRange, std::optional<int64_t>(2));
  EXPECT_EQ(info->maxId, 300);
}

//===----------------------------------------------------------------------===//
// Bad input
//===----------------------------------------------------------------------===//

TEST_F(TokenFileTest, BadShards) {
  EXPECT_EQ(openError(write("short.bin", "abc")),
            path("short.bin") + ": truncated header: the file has 3 bytes, an "
                                "llm.c shard header has 1024 (a Megatron "
                                "dataset's .bin needs its short.idx beside "
                                "it)");
  EXPECT_THAT(openError(write("magic.bin", shardHeader(1234, 1, 0))),
              StartsWith(path("magic.bin") +
                         ": bad magic number 1234 (an llm.c token shard "
                         "starts with 20240520; a Megatron dataset's .bin "
                         "needs its magic.idx beside it)"));
  EXPECT_EQ(openError(write("version.bin", shardHeader(20240520, 2, 0))),
            path("version.bin") +
                ": unsupported version 2 (expected 1: uint16 tokens)");
  EXPECT_EQ(openError(write("negative.bin", shardHeader(20240520, 1, -1))),
            path("negative.bin") + ": negative token count -1");
  EXPECT_EQ(openError(write("cut.bin", shardHeader(20240520, 1, 3) + "ab")),
            path("cut.bin") + ": truncated: the header counts 3 tokens (6 "
                              "bytes) but the file holds 2 bytes of tokens");
  EXPECT_EQ(openError(write("extra.bin", shardHeader(20240520, 1, 1) + "abc")),
            path("extra.bin") +
                ": token count mismatch: the header counts 1 tokens (2 bytes) "
                "but the file holds 3 bytes of tokens");
  EXPECT_THAT(openError(path("missing.bin")),
              StartsWith(path("missing.bin") + ": cannot open: "));
  // A short file with the shard magic and another name is still a shard.
  EXPECT_THAT(openError(write("x.data", shardHeader(20240520, 1, 0).substr(0, 8))),
              HasSubstr("truncated header"));
}

TEST_F(TokenFileTest, BadLlmcFiles) {
  std::string good = contents(writeLlmc("good.tok", {{1, 2, 3}, {4}}));
  // 64 + 8 (4 tokens padded) + 3 * 8 = 96 bytes.
  ASSERT_EQ(good.size(), 96u);
  EXPECT_EQ(openError(write("short.tok", good.substr(0, 20))),
            path("short.tok") + ": truncated header: the file has 20 bytes, "
                                "an llmc token file header has 64");
  std::string bytes = good;
  bytes[0] = 'X';
  EXPECT_EQ(openError(write("magic.tok", bytes)),
            path("magic.tok") +
                ": bad magic (an llmc token file starts with \"LLMCTOK\\0\")");
  bytes = good;
  bytes[8] = 2;
  EXPECT_EQ(openError(write("version.tok", bytes)),
            path("version.tok") + ": unsupported version 2 (expected 1)");
  bytes = good;
  bytes[12] = 8;
  EXPECT_EQ(openError(write("dtype.tok", bytes)),
            path("dtype.tok") + ": unsupported dtype: 8 bytes per token "
                                "(expected 2: uint16, or 4: uint32)");
  EXPECT_EQ(openError(write("cut.tok", good.substr(0, 90))),
            path("cut.tok") + ": truncated: the header counts 4 tokens and 2 "
                              "documents (96 bytes in all) but the file has "
                              "90 bytes");
  EXPECT_EQ(openError(write("long.tok", good + "12345678")),
            path("long.tok") + ": size mismatch: the header counts 4 tokens "
                               "and 2 documents (96 bytes in all) but the "
                               "file has 104 bytes");
  bytes = good;
  bytes[72] = 1; // index entry 0
  EXPECT_EQ(openError(write("first.tok", bytes)),
            path("first.tok") + ": document index: the first document starts "
                                "at token 1, not 0");
  bytes = good;
  bytes[80] = 9; // index entry 1 beyond the 4 tokens
  EXPECT_EQ(openError(write("beyond.tok", bytes)),
            path("beyond.tok") + ": document index: document 1 starts at "
                                 "token 9, outside [0, 4]");
  bytes = good;
  bytes[88] = 3; // the last entry
  EXPECT_EQ(openError(write("last.tok", bytes)),
            path("last.tok") + ": document index: the last entry is 3, not "
                               "the token count 4");
}

TEST_F(TokenFileTest, BadMegatronPairs) {
  MegatronPair pair;
  pair.sequences = {{1, 2, 3}, {4, 5}};
  std::string idx = pair.idxBytes(), bin = pair.binBytes();
  auto pairError = [&](const std::string &idxBytes,
                       const std::string &binBytes) {
    write("m.idx", idxBytes);
    write("m.bin", binBytes);
    return openError(path("m.idx"));
  };
  ASSERT_EQ(pairError(idx, bin), "(opened)");
  std::string idxPath = path("m.idx"), binPath = path("m.bin");
  EXPECT_EQ(pairError(idx.substr(0, 20), bin),
            idxPath + ": truncated header: the file has 20 bytes, a Megatron "
                      "index header has 34");
  std::string bytes = idx;
  bytes[0] = 'X';
  EXPECT_EQ(pairError(bytes, bin),
            idxPath + ": bad magic (a Megatron index starts with "
                      "\"MMIDIDX\\0\\0\")");
  bytes = idx;
  bytes[9] = 2;
  EXPECT_EQ(pairError(bytes, bin),
            idxPath + ": unsupported version 2 (expected 1)");
  bytes = idx;
  bytes[17] = 7;
  EXPECT_EQ(pairError(bytes, bin),
            idxPath + ": unsupported dtype float32 (code 7): token ids are "
                      "integers");
  bytes[17] = 6;
  EXPECT_THAT(pairError(bytes, bin), HasSubstr("unsupported dtype float64"));
  bytes[17] = 9;
  EXPECT_EQ(pairError(bytes, bin),
            idxPath + ": unsupported dtype code 9 (Megatron's are 1-8)");
  EXPECT_EQ(pairError(idx.substr(0, idx.size() - 1), bin),
            idxPath + ": truncated: the header counts 2 sequences and 3 "
                      "document index entries (82 bytes) but the file has 81 "
                      "bytes");
  EXPECT_EQ(pairError(idx + "\x01\x01\x01", bin),
            idxPath + ": size mismatch: the header counts 2 sequences and 3 "
                      "document index entries (82 bytes) but the file has 85 "
                      "bytes");
  // pointers[1] (byte 34 + 8 + 8) moved by one token.
  bytes = idx;
  bytes[34 + 8 + 8] = 8;
  EXPECT_EQ(pairError(bytes, bin),
            idxPath + ": does not match " + binPath +
                ": sequence 1 starts at byte 8, not at byte 6 where the "
                "sequence before it ends");
  EXPECT_EQ(pairError(idx, bin + "xx"),
            idxPath + ": does not match " + binPath +
                ": its sequences hold 10 bytes of tokens but the .bin has 12 "
                "bytes");
  EXPECT_EQ(pairError(idx, bin.substr(0, 8)),
            idxPath + ": does not match " + binPath +
                ": its sequences hold 10 bytes of tokens but the .bin has 8 "
                "bytes");
  // doc_idx = {0, 1, 2}: its last entry (byte 34 + 24 + 16) set to 1.
  bytes = idx;
  bytes[34 + 24 + 16] = 1;
  EXPECT_EQ(pairError(bytes, bin),
            idxPath + ": document index ends at 1, not at the 2 sequences");
  bytes = idx;
  bytes[34 + 24 + 8] = 5;
  EXPECT_EQ(pairError(bytes, bin),
            idxPath + ": document index entry 1 is 5: entries go from 0 up to "
                      "the 2 sequences");
  // Missing halves.
  write("lone.idx", idx);
  EXPECT_THAT(openError(path("lone.idx")),
              StartsWith(path("lone.bin") + ": the tokens of the Megatron "
                                            "dataset " +
                         path("lone.idx") + ": " + path("lone.bin") +
                         ": cannot open: "));
  write("orphan.bin", bin);
  EXPECT_THAT(openError(path("orphan.bin")),
              HasSubstr("needs its orphan.idx beside it"));
  write("long-orphan.bin", std::string(2048, 'x'));
  EXPECT_THAT(openError(path("long-orphan.bin")),
              HasSubstr(": bad magic number 2021161080 (an llm.c token shard "
                        "starts with 20240520; a Megatron dataset's .bin "
                        "needs its long-orphan.idx beside it)"));
}

TEST_F(TokenFileTest, BinaryIsNotText) {
  ByteTokenizer bytes;
  std::string file = write("data.txt", std::string("ab\0cd", 5));
  EXPECT_EQ(openError(file, &bytes),
            file + ": binary, not text: byte 2 is NUL (token files are llm.c "
                   "shards *.bin, llmc files *.tok or Megatron PREFIX.bin + "
                   "PREFIX.idx)");
  std::string text = write("plain.txt", "hello");
  EXPECT_EQ(openError(text, nullptr),
            text + ": a text file, and no tokenizer was given to encode it");
  // A damaged .tok is an error, never text.
  EXPECT_THAT(openError(write("notes.tok", "just some words here"), &bytes),
              HasSubstr("truncated header"));
}

//===----------------------------------------------------------------------===//
// The writer
//===----------------------------------------------------------------------===//

TEST_F(TokenFileTest, WriterIsAtomic) {
  std::string file = path("out.tok");
  {
    auto writer = TokenFileWriter::create(file, TokenFormat::Llmc,
                                          TokenType::U16);
    ASSERT_TRUE(bool(writer));
    ASSERT_FALSE(bool((*writer)->appendDocument({1, 2, 3})));
    EXPECT_EQ((*writer)->numTokens(), 3);
    EXPECT_EQ((*writer)->numDocuments(), 1);
    // Only the temporary exists before commit.
    std::vector<std::string> names = entries();
    ASSERT_EQ(names.size(), 1u);
    EXPECT_THAT(names[0], StartsWith("out.tok.tmp-"));
    EXPECT_FALSE(llvm::sys::fs::exists(file));
  }
  // Destroyed uncommitted: nothing is left.
  EXPECT_TRUE(entries().empty());

  auto writer = TokenFileWriter::create(file, TokenFormat::Llmc,
                                        TokenType::U16);
  ASSERT_TRUE(bool(writer));
  ASSERT_FALSE(bool((*writer)->appendDocument({1, 2, 3})));
  EXPECT_EQ(llvm::toString((*writer)->appendDocument({4, 70000})),
            file + ": token 70000 (document 1, token 1) does not fit uint16");
  ASSERT_FALSE(bool((*writer)->commit()));
  EXPECT_EQ(entries(), std::vector<std::string>{"out.tok"});
  EXPECT_THAT(llvm::toString((*writer)->commit()),
              HasSubstr("already committed"));
  auto opened = TokenFile::open(file, nullptr);
  ASSERT_TRUE(bool(opened));
  EXPECT_EQ(readAll(**opened), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ((*opened)->numDocuments(), std::optional<int64_t>(1));
}

TEST_F(TokenFileTest, WriterRefusals) {
  EXPECT_THAT(llvm::toString(TokenFileWriter::create(path("a.bin"),
                                                     TokenFormat::LlmcShard,
                                                     TokenType::U32)
                                 .takeError()),
              HasSubstr("uint32 tokens cannot be written as llm.c shard"));
  EXPECT_THAT(llvm::toString(TokenFileWriter::create(path("a.bin"),
                                                     TokenFormat::Megatron,
                                                     TokenType::U16)
                                 .takeError()),
              HasSubstr("written as llmc files or llm.c shards only"));
  EXPECT_THAT(llvm::toString(TokenFileWriter::create(path("no/dir/a.tok"),
                                                     TokenFormat::Llmc,
                                                     TokenType::U16)
                                 .takeError()),
              HasSubstr("cannot create a temporary file next to it"));
  EXPECT_THAT(llvm::toString(writeShard(path("big.bin"), {1, 70000})),
              HasSubstr("token 70000 (document 0, token 1) does not fit "
                        "uint16"));
  EXPECT_TRUE(entries().empty());
}

//===----------------------------------------------------------------------===//
// Resident memory
//===----------------------------------------------------------------------===//

/// This process's resident set, in bytes (Linux: VmRSS).
int64_t residentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024;
  return -1;
}

TEST_F(TokenFileTest, ReadingALargeFileKeepsResidentMemoryFlat) {
  // 64M uint16 tokens: a 128 MiB file, read end to end in 1M-token reads.
  constexpr int64_t kTokens = int64_t(64) << 20, kChunk = int64_t(1) << 20;
  std::string file = path("large.tok");
  {
    auto writer =
        TokenFileWriter::create(file, TokenFormat::Llmc, TokenType::U16);
    ASSERT_TRUE(bool(writer));
    std::vector<int32_t> document(kChunk);
    for (int64_t start = 0; start < kTokens; start += kChunk) {
      for (int64_t i = 0; i < kChunk; ++i)
        document[i] = int32_t((start + i) % 50257);
      ASSERT_FALSE(bool((*writer)->appendDocument(document)));
    }
    ASSERT_FALSE(bool((*writer)->commit()));
  }
  auto opened = TokenFile::open(file, nullptr);
  ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
  ASSERT_EQ((*opened)->numTokens(), kTokens);
  std::vector<int32_t> window(kChunk);
  int64_t before = residentBytes(), peak = before;
  ASSERT_GT(before, 0);
  for (int64_t start = 0; start < kTokens; start += kChunk) {
    ASSERT_FALSE(bool((*opened)->read(start, kChunk, window.data(), 50257)));
    ASSERT_EQ(window[kChunk - 1], int32_t((start + kChunk - 1) % 50257));
    peak = std::max(peak, residentBytes());
  }
  EXPECT_GE((*opened)->mappedBytes(), kTokens * 2);
  // Without the drops the resident set would grow by the file's 128 MiB;
  // with them it grows by about one read's pages.
  EXPECT_LT(peak - before, int64_t(16) << 20)
      << "resident memory grew from " << before << " to " << peak;
}

} // namespace
