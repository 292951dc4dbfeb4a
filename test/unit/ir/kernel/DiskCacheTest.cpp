// Tests of ir/kernel/DiskCache: the one on-disk cache of compiled code
// (CPU kernel objects, NVRTC binaries): keys, hits, misses, damaged entries
// refused, and concurrent writers of one key.
#include "ir/kernel/DiskCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <thread>
#include <vector>

using namespace llmc::kir;
using ::testing::HasSubstr;

namespace {

class DiskCacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(
        llvm::sys::fs::createUniqueDirectory("llmc-disk-cache-test", root));
    // A directory that does not exist yet: write creates it.
    directory = root;
    llvm::sys::path::append(directory, "nested", "cache");
  }
  void TearDown() override { llvm::sys::fs::remove_directories(root); }

  DiskCache cache() const {
    return DiskCache(directory, true, "LLMCTST1", "test-", ".bin.llmc");
  }

  void overwrite(const std::string &path, llvm::StringRef bytes) {
    std::error_code error;
    llvm::raw_fd_ostream os(path, error);
    ASSERT_FALSE(error) << error.message();
    os << bytes;
  }

  llvm::SmallString<128> root, directory;
};

TEST(CacheKeyTest, PartsAreDelimited) {
  std::string ab = CacheKey().add("a").add("b").hex();
  EXPECT_EQ(ab.size(), 64u);
  EXPECT_EQ(ab, CacheKey().add("a").add("b").hex());
  EXPECT_NE(ab, CacheKey().add("ab").hex());
  EXPECT_NE(ab, CacheKey().add("a").add("").add("b").hex());
  EXPECT_NE(ab, CacheKey().add("b").add("a").hex());
}

TEST_F(DiskCacheTest, MissThenHit) {
  DiskCache c = cache();
  ASSERT_TRUE(c.enabled());
  std::string path = c.entryPath("0123abcd");
  EXPECT_EQ(llvm::sys::path::filename(path), "test-0123abcd.bin.llmc");
  EXPECT_EQ(c.read(path).state, CacheEntry::State::Missing);

  std::string payload("object\0bytes", 12);
  ASSERT_FALSE(bool(c.write(path, payload)));
  CacheEntry entry = c.read(path);
  ASSERT_EQ(entry.state, CacheEntry::State::Valid) << entry.damage;
  EXPECT_EQ(entry.payload, payload);
  // The header is 48 bytes: magic, size, SHA-256.
  uint64_t size = 0;
  ASSERT_FALSE(llvm::sys::fs::file_size(path, size));
  EXPECT_EQ(size, 48u + payload.size());

  // An empty payload is an entry too.
  std::string empty = c.entryPath("empty");
  ASSERT_FALSE(bool(c.write(empty, "")));
  EXPECT_EQ(c.read(empty).state, CacheEntry::State::Valid);
}

TEST_F(DiskCacheTest, OffOrWithoutDirectory) {
  DiskCache off(directory, false, "LLMCTST1", "test-", ".bin.llmc");
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.entryPath("key"), "");
}

// Every kind of damage is refused, with what is wrong; another kind of
// entry (another magic) is refused as well.
TEST_F(DiskCacheTest, DamagedEntriesAreRefused) {
  DiskCache c = cache();
  std::string path = c.entryPath("key");
  ASSERT_FALSE(bool(c.write(path, std::string(300, 'x'))));
  auto original = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(original));
  std::string bytes = (*original)->getBuffer().str();

  std::string flipped = bytes;
  flipped[flipped.size() - 100] ^= 0x40;
  struct Damage {
    const char *what;
    std::string content, why;
  };
  std::vector<Damage> damages = {
      {"empty", "", "0 bytes, shorter than its header"},
      {"truncated header", bytes.substr(0, 20),
       "20 bytes, shorter than its header"},
      {"truncated payload", bytes.substr(0, bytes.size() / 2),
       "its header records 300 bytes of payload, the file holds"},
      {"flipped payload byte", flipped, "SHA-256 mismatch"},
      {"bad magic", "XXXXXXXX" + bytes.substr(8), "bad magic"},
      {"appended garbage", bytes + "garbage", "its header records"},
  };
  for (const Damage &damage : damages) {
    overwrite(path, damage.content);
    CacheEntry entry = c.read(path);
    EXPECT_EQ(entry.state, CacheEntry::State::Damaged) << damage.what;
    EXPECT_THAT(entry.damage, HasSubstr(damage.why)) << damage.what;
    EXPECT_TRUE(entry.payload.empty()) << damage.what;
  }

  overwrite(path, bytes);
  EXPECT_EQ(c.read(path).state, CacheEntry::State::Valid);
  DiskCache other(directory, true, "LLMCOTH1", "test-", ".bin.llmc");
  EXPECT_EQ(other.read(path).state, CacheEntry::State::Damaged);
  EXPECT_EQ(other.read(path).damage, "bad magic");
}

// Writers racing on one key each leave a whole entry: a reader at any time
// finds none, or a whole one of some writer, never a mix.
TEST_F(DiskCacheTest, ConcurrentWritersLeaveAWholeEntry) {
  DiskCache c = cache();
  std::string path = c.entryPath("shared");
  constexpr int kWriters = 8, kRounds = 20;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kWriters);
  for (int w = 0; w < kWriters; ++w)
    threads.emplace_back([&, w] {
      // Each writer's payload is its own letter, 64 KiB of it.
      std::string payload(1 << 16, char('a' + w));
      for (int round = 0; round < kRounds; ++round)
        if (llvm::Error error = c.write(path, payload))
          errors[w] = llvm::toString(std::move(error));
    });
  int reads = 0;
  for (; reads < 50; ++reads) {
    CacheEntry entry = c.read(path);
    if (entry.state == CacheEntry::State::Missing)
      continue;
    ASSERT_EQ(entry.state, CacheEntry::State::Valid) << entry.damage;
    ASSERT_EQ(entry.payload.size(), size_t(1) << 16);
    EXPECT_EQ(entry.payload.find_first_not_of(entry.payload[0]),
              llvm::StringRef::npos);
  }
  for (std::thread &thread : threads)
    thread.join();
  for (const std::string &error : errors)
    EXPECT_EQ(error, "");
  CacheEntry last = c.read(path);
  ASSERT_EQ(last.state, CacheEntry::State::Valid) << last.damage;
  EXPECT_GE(last.payload[0], 'a');
  EXPECT_LT(last.payload[0], 'a' + kWriters);
  // No temporary file is left behind.
  std::error_code error;
  int files = 0;
  for (llvm::sys::fs::directory_iterator it(directory, error), end;
       it != end && !error; it.increment(error))
    ++files;
  EXPECT_EQ(files, 1);
}

// A directory that cannot be made is an error of write, naming it.
TEST_F(DiskCacheTest, UnwritableDirectoryIsAnError) {
  llvm::SmallString<128> file(root);
  llvm::sys::path::append(file, "not-a-directory");
  overwrite(std::string(file), "");
  llvm::SmallString<128> below(file);
  llvm::sys::path::append(below, "cache");
  DiskCache c(below, true, "LLMCTST1", "test-", ".bin.llmc");
  llvm::Error error = c.write(c.entryPath("key"), "payload");
  ASSERT_TRUE(bool(error));
  EXPECT_THAT(llvm::toString(std::move(error)),
              HasSubstr("cannot create the cache directory"));
}

} // namespace
