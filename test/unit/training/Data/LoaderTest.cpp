// Tests of training/Data/Sources and Loader: the order of windows (the
// loader before it, bit for bit, for one file; every window once an epoch;
// files and groups), skipping, positions and resumes, blends in proportion,
// the validation cut and batches, and bad input.
#include "training/Data/Loader.h"

#include "frontend/Tokenizer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

using namespace llmc::data;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

std::string errorText(llvm::Error error) {
  return llvm::toString(std::move(error));
}

std::vector<int32_t> iota(int32_t count, int32_t first = 0) {
  std::vector<int32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

/// A source of in-memory files with the given token counts; file f's tokens
/// are f * 1,000,000 + 0, 1, 2, ... so that a token names its file and index.
Source memorySource(std::string name, llvm::ArrayRef<int32_t> sizes,
                    double weight = 1) {
  Source source;
  source.name = std::move(name);
  source.weight = weight;
  for (size_t f = 0; f < sizes.size(); ++f) {
    std::string file = source.name + "/" + std::to_string(f);
    auto tokens = TokenFile::fromTokens(
        file, iota(sizes[f], int32_t(f) * 1000000));
    source.files.push_back(file);
    source.segments.push_back({tokens, 0, sizes[f]});
  }
  return source;
}

LoaderOptions options(int64_t batch, int64_t seqLen, uint64_t seed,
                      int64_t shuffleWindows = 0) {
  LoaderOptions o;
  o.batch = batch;
  o.seqLen = seqLen;
  o.seed = seed;
  o.shuffleWindows = shuffleWindows;
  return o;
}

std::unique_ptr<Loader> makeLoader(std::vector<Source> sources,
                                   const LoaderOptions &o) {
  auto loader = Loader::create(std::move(sources), o);
  EXPECT_TRUE(bool(loader)) << errorText(loader.takeError());
  return loader ? std::move(*loader) : nullptr;
}

//===----------------------------------------------------------------------===//
// The loader before this one (frontend/Dataset.cpp's BatchLoader, whose
// order checkpoints written before hold), copied here as it was: one token
// stream, windows at 0, T, 2T..., epoch e a Fisher-Yates permutation of all
// windows with SplitMix64 seeded by seed and e.
//===----------------------------------------------------------------------===//

class TodaySplitMix64 {
public:
  explicit TodaySplitMix64(uint64_t state) : state(state) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t bound) {
    uint64_t limit = std::numeric_limits<uint64_t>::max() -
                     std::numeric_limits<uint64_t>::max() % bound;
    uint64_t value;
    do
      value = next();
    while (value >= limit);
    return value % bound;
  }

private:
  uint64_t state;
};

std::vector<uint32_t> todayEpochOrder(int64_t numWindows, uint64_t seed,
                                      uint64_t epoch) {
  std::vector<uint32_t> result(numWindows);
  for (int64_t i = 0; i < numWindows; ++i)
    result[i] = static_cast<uint32_t>(i);
  TodaySplitMix64 seeder(seed);
  TodaySplitMix64 rng(seeder.next() ^ (epoch * 0xD1B54A32D192ED03ull));
  for (int64_t i = numWindows - 1; i > 0; --i)
    std::swap(result[i], result[rng.below(static_cast<uint64_t>(i) + 1)]);
  return result;
}

/// The first token of each of the first `count` windows today's loader
/// took (epochs in turn).
std::vector<int64_t> todayWindowStarts(int64_t tokens, int64_t seqLen,
                                       uint64_t seed, int64_t count) {
  int64_t windows = (tokens - 1) / seqLen;
  std::vector<int64_t> starts;
  for (uint64_t epoch = 0; int64_t(starts.size()) < count; ++epoch)
    for (uint32_t w : todayEpochOrder(windows, seed, epoch))
      if (int64_t(starts.size()) < count)
        starts.push_back(int64_t(w) * seqLen);
  return starts;
}

TEST(LoaderOrder, OneFileIsTodaysOrderBitForBit) {
  for (uint64_t seed : {1ull, 7ull, 1337ull}) {
    for (int32_t tokens : {65, 1000, 10001}) {
      const int64_t seqLen = 16, batch = 4;
      int64_t windows = (tokens - 1) / seqLen;
      // A buffer larger than the epoch, equal to it, and the default.
      for (int64_t buffer : {windows + 5, windows, int64_t(1) << 20}) {
        auto loader = makeLoader({memorySource("one", {tokens})},
                                 options(batch, seqLen, seed, buffer));
        ASSERT_TRUE(loader);
        int64_t count = 3 * windows + 7; // past two epoch boundaries
        std::vector<int64_t> expected =
            todayWindowStarts(tokens, seqLen, seed, count);
        std::vector<int32_t> x, y;
        for (int64_t k = 0; k < count; k += batch) {
          ASSERT_FALSE(bool(loader->next(seqLen, x, y)));
          for (int64_t b = 0; b < batch && k + b < count; ++b) {
            ASSERT_EQ(x[b * seqLen], expected[k + b])
                << "seed " << seed << " tokens " << tokens << " window "
                << k + b;
            EXPECT_EQ(y[b * seqLen + seqLen - 1], expected[k + b] + seqLen);
          }
        }
      }
    }
  }
}

TEST(LoaderOrder, TargetsAreTheNextTokens) {
  auto loader = makeLoader({memorySource("a", {1000, 777})},
                           options(4, 16, 1, 10));
  ASSERT_TRUE(loader);
  std::vector<int32_t> x, y;
  for (int step = 0; step < 30; ++step) {
    ASSERT_FALSE(bool(loader->next(16, x, y)));
    for (int64_t b = 0; b < 4; ++b) {
      EXPECT_EQ(x[b * 16] % 1000000 % 16, 0); // starts at a multiple of T
      for (int64_t t = 0; t < 16; ++t) {
        EXPECT_EQ(y[b * 16 + t], x[b * 16 + t] + 1);
        if (t > 0)
          EXPECT_EQ(x[b * 16 + t], x[b * 16 + t - 1] + 1); // one file
      }
    }
  }
  // Sequence-length warmup: the start of the same windows.
  auto full = makeLoader({memorySource("a", {1000, 777})},
                         options(4, 16, 1, 10));
  auto cut = makeLoader({memorySource("a", {1000, 777})},
                        options(4, 16, 1, 10));
  std::vector<int32_t> fx, fy, cx, cy;
  ASSERT_FALSE(bool(full->next(16, fx, fy)));
  ASSERT_FALSE(bool(cut->next(8, cx, cy)));
  ASSERT_EQ(cx.size(), 32u);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(cx[b * 8 + t], fx[b * 16 + t]);
      EXPECT_EQ(cy[b * 8 + t], fy[b * 16 + t]);
    }
}

/// Every window of every file exactly once an epoch, for buffers smaller
/// than an epoch and several files; windows never cross a file.
TEST(LoaderOrder, EpochVisitsEveryWindowOnce) {
  std::vector<int32_t> sizes = {161, 40, 333, 17, 250}; // 10+2+20+1+15 windows
  for (int64_t buffer : {1, 4, 7, 48, 1000}) {
    auto loader = makeLoader({memorySource("s", sizes)},
                             options(1, 16, 42, buffer));
    ASSERT_TRUE(loader);
    int64_t windows = loader->windowsPerEpoch(0);
    ASSERT_EQ(windows, 48);
    std::vector<std::vector<int64_t>> epochs;
    for (int e = 0; e < 3; ++e) {
      std::set<int32_t> starts;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < windows; ++i) {
        WindowPlace place = loader->take();
        std::vector<int32_t> window;
        ASSERT_FALSE(bool(readWindow(place, 16, 0, window)));
        // One file: the last token is in the same file as the first.
        EXPECT_EQ(window.back() / 1000000, window.front() / 1000000);
        starts.insert(window.front());
        order.push_back(window.front());
      }
      EXPECT_EQ(starts.size(), size_t(windows)) << "buffer " << buffer;
      epochs.push_back(order);
    }
    if (buffer > 1)
      EXPECT_NE(epochs[0], epochs[1]) << "buffer " << buffer;
  }
}

TEST(LoaderOrder, FilesInSeededOrderGroupsBounded) {
  Source source = memorySource("s", {1601, 1601, 1601, 1601}); // 100 each
  SourceOrder order(source, 0, 16, 5, /*shuffleWindows=*/10);
  // The files' order differs between epochs and is a permutation.
  std::set<std::vector<uint32_t>> orders;
  for (uint64_t e = 0; e < 8; ++e) {
    std::vector<uint32_t> files = order.segmentOrder(e);
    std::vector<uint32_t> sorted = files;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_THAT(sorted, ElementsAre(0u, 1u, 2u, 3u));
    orders.insert(files);
  }
  EXPECT_GT(orders.size(), 1u);
  // A group of 10 windows holds 10 consecutive windows of the epoch's file
  // sequence: within the first 10 windows taken there is one file.
  std::vector<uint32_t> files = order.segmentOrder(0);
  std::set<const TokenFile *> seen;
  for (int64_t j = 0; j < 10; ++j)
    seen.insert(order.window(j).file);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(*seen.begin(), source.segments[files[0]].file.get());
  // One file: the identity.
  Source single = memorySource("one", {1601});
  EXPECT_THAT(SourceOrder(single, 3, 16, 5, 10).segmentOrder(9),
              ElementsAre(0u));
}

TEST(LoaderOrder, DependsOnlyOnSeed) {
  auto a = makeLoader({memorySource("s", {5000})}, options(4, 8, 7));
  auto b = makeLoader({memorySource("s", {5000})}, options(4, 8, 7));
  auto c = makeLoader({memorySource("s", {5000})}, options(4, 8, 8));
  std::vector<int32_t> xa, ya, xb, yb, xc, yc;
  bool differs = false;
  for (int step = 0; step < 10; ++step) {
    ASSERT_FALSE(bool(a->next(8, xa, ya)));
    ASSERT_FALSE(bool(b->next(8, xb, yb)));
    ASSERT_FALSE(bool(c->next(8, xc, yc)));
    EXPECT_EQ(xa, xb);
    differs |= xa != xc;
  }
  EXPECT_TRUE(differs);
}

//===----------------------------------------------------------------------===//
// Skipping and positions
//===----------------------------------------------------------------------===//

/// A rank that skips the others' micro-batches reads exactly the windows
/// one process reads at the same counts, blends included.
TEST(LoaderSkip, SkippingReadsTheSameWindows) {
  auto sources = [] {
    return std::vector<Source>{memorySource("web", {3001, 999}, 0.7),
                               memorySource("code", {2001}, 0.3)};
  };
  auto one = makeLoader(sources(), options(2, 10, 3, 16));
  std::vector<std::vector<int32_t>> all;
  std::vector<int32_t> x, y;
  for (int m = 0; m < 40; ++m) {
    ASSERT_FALSE(bool(one->next(10, x, y)));
    all.push_back(x);
  }
  for (int ranks : {2, 4}) {
    for (int rank = 0; rank < ranks; ++rank) {
      auto mine = makeLoader(sources(), options(2, 10, 3, 16));
      for (int m = 0; m < 40; ++m) {
        if (m % ranks != rank) {
          mine->skip(2);
          continue;
        }
        ASSERT_FALSE(bool(mine->next(10, x, y)));
        EXPECT_EQ(x, all[m]) << ranks << " ranks, rank " << rank;
      }
      EXPECT_EQ(mine->windowsTaken(), one->windowsTaken());
      EXPECT_EQ(mine->consumed(0), one->consumed(0));
    }
  }
}

std::string text(const llvm::json::Value &value) {
  std::string s;
  llvm::raw_string_ostream(s) << value;
  return s;
}

TEST(LoaderPosition, ResumesExactly) {
  auto sources = [] {
    return std::vector<Source>{memorySource("a", {301, 155}, 2),
                               memorySource("b", {201}, 1)};
  };
  for (int stop : {5, 40}) {
    auto first = makeLoader(sources(), options(3, 10, 99, 7));
    std::vector<int32_t> x, y, rx, ry;
    for (int step = 0; step < stop; ++step)
      ASSERT_FALSE(bool(first->next(10, x, y)));
    auto parsed = llvm::json::parse(text(first->position()));
    ASSERT_TRUE(bool(parsed));
    auto resumed = makeLoader(sources(), options(3, 10, 99, 7));
    ASSERT_FALSE(bool(resumed->setPosition(*parsed)));
    EXPECT_EQ(text(resumed->position()), text(first->position()));
    for (int step = 0; step < 50; ++step) {
      ASSERT_FALSE(bool(first->next(10, x, y)));
      ASSERT_FALSE(bool(resumed->next(10, rx, ry)));
      ASSERT_EQ(x, rx) << "step " << step;
      ASSERT_EQ(y, ry);
    }
  }
}

TEST(LoaderPosition, ReadsTheFormerPosition) {
  // {"epoch": E, "index": I}: one source, window E * W + I next.
  auto straight = makeLoader({memorySource("s", {1001})}, options(1, 10, 4));
  std::vector<int32_t> x, y, rx, ry;
  for (int i = 0; i < 100 + 37; ++i)
    ASSERT_FALSE(bool(straight->next(10, x, y)));
  auto resumed = makeLoader({memorySource("s", {1001})}, options(1, 10, 4));
  ASSERT_FALSE(bool(resumed->setPosition(
      llvm::json::Object{{"epoch", 1}, {"index", 37}})));
  EXPECT_EQ(resumed->windowsTaken(), 137);
  ASSERT_FALSE(bool(straight->next(10, x, y)));
  ASSERT_FALSE(bool(resumed->next(10, rx, ry)));
  EXPECT_EQ(x, rx);
  llvm::Error past = resumed->setPosition(
      llvm::json::Object{{"epoch", 0}, {"index", 100}});
  ASSERT_TRUE(bool(past));
  EXPECT_THAT(errorText(std::move(past)), HasSubstr("past the 100 windows"));
  auto two = makeLoader({memorySource("s", {1001}), memorySource("t", {1001})},
                        options(1, 10, 4));
  llvm::Error blend =
      two->setPosition(llvm::json::Object{{"epoch", 0}, {"index", 1}});
  ASSERT_TRUE(bool(blend));
  EXPECT_THAT(errorText(std::move(blend)), HasSubstr("of one source"));
}

TEST(LoaderPosition, RefusesChangedData) {
  auto before = makeLoader({memorySource("s", {1001})}, options(2, 10, 4));
  before->skip(10);
  llvm::json::Value saved = before->position();
  auto longer = makeLoader({memorySource("s", {1101})}, options(2, 10, 4));
  llvm::Error changed = longer->setPosition(saved);
  ASSERT_TRUE(bool(changed));
  EXPECT_THAT(errorText(std::move(changed)),
              HasSubstr("the data changed since the checkpoint: training "
                        "source 's' had 1001 tokens in 100 windows, it has "
                        "1101 tokens in 110 windows now"));
  // Another sequence length: the windows differ.
  auto shorter = makeLoader({memorySource("s", {1001})}, options(2, 8, 4));
  llvm::Error windows = shorter->setPosition(saved);
  ASSERT_TRUE(bool(windows));
  EXPECT_THAT(errorText(std::move(windows)), HasSubstr("in 125 windows now"));
  auto more = makeLoader({memorySource("s", {1001}), memorySource("t", {99})},
                         options(2, 10, 4));
  llvm::Error sources = more->setPosition(saved);
  ASSERT_TRUE(bool(sources));
  EXPECT_THAT(errorText(std::move(sources)), HasSubstr("1 training source"));
  auto same = makeLoader({memorySource("s", {1001})}, options(2, 10, 4));
  EXPECT_FALSE(bool(same->setPosition(saved)));
  llvm::Error bad = same->setPosition(llvm::json::Object{{"windows", -1}});
  ASSERT_TRUE(bool(bad));
  consumeError(std::move(bad));
}

//===----------------------------------------------------------------------===//
// Blends
//===----------------------------------------------------------------------===//

/// Over many windows each source's share is within 4 standard deviations
/// of its weight's (binomial), and each source's epochs are its consumed
/// windows over its windows per epoch.
TEST(LoaderBlend, ProportionsWithinBinomialNoise) {
  std::vector<Source> sources = {memorySource("web", {16001}, 0.6),
                                 memorySource("code", {3201}, 0.3),
                                 memorySource("books", {801}, 0.1)};
  auto loader = makeLoader(std::move(sources), options(8, 16, 2024));
  const int64_t n = 400000;
  loader->skip(n);
  std::vector<double> weights = {0.6, 0.3, 0.1};
  int64_t total = 0;
  for (int s = 0; s < 3; ++s) {
    double p = weights[s], count = double(loader->consumed(s));
    double sigma = std::sqrt(double(n) * p * (1 - p));
    EXPECT_LE(std::fabs(count - double(n) * p), 4 * sigma)
        << loader->sources()[s].name << ": " << count << " of " << n;
    EXPECT_NEAR(loader->shares()[s], p, 1e-12);
    EXPECT_DOUBLE_EQ(loader->epochs(s),
                     count / double(loader->windowsPerEpoch(s)));
    total += loader->consumed(s);
  }
  EXPECT_EQ(total, n);
  // web: 1000 windows an epoch, ~240000 taken: ~240 epochs.
  EXPECT_NEAR(loader->epochs(0), 240, 240 * 0.02);
  EXPECT_NEAR(loader->epochs(2), 800, 800 * 0.04);
  // Reading takes from the sources the same draws skipping does.
  std::vector<Source> again = {memorySource("web", {16001}, 0.6),
                               memorySource("code", {3201}, 0.3),
                               memorySource("books", {801}, 0.1)};
  auto reader = makeLoader(std::move(again), options(8, 16, 2024));
  std::map<int, int64_t> counts;
  for (int i = 0; i < 2000; ++i)
    ++counts[reader->take().source];
  auto skipper = makeLoader({memorySource("web", {16001}, 0.6),
                             memorySource("code", {3201}, 0.3),
                             memorySource("books", {801}, 0.1)},
                            options(8, 16, 2024));
  skipper->skip(2000);
  for (int s = 0; s < 3; ++s)
    EXPECT_EQ(counts[s], skipper->consumed(s));
}

TEST(LoaderBlend, OneSourceDrawsNothing) {
  auto loader = makeLoader({memorySource("s", {1001}, 0.25)},
                           options(1, 10, 1));
  loader->skip(1234);
  EXPECT_EQ(loader->consumed(0), 1234);
  EXPECT_DOUBLE_EQ(loader->shares()[0], 1.0);
}

//===----------------------------------------------------------------------===//
// Sources, the validation cut and batches
//===----------------------------------------------------------------------===//

TEST(Sources, HoldOutCutsTheLastTokens) {
  Source source = memorySource("s", {100, 50, 30});
  std::vector<Segment> val;
  holdOutFraction(source.segments, 0.25, val); // 45 tokens
  ASSERT_EQ(source.segments.size(), 2u);
  EXPECT_EQ(source.segments[1].count, 35);
  ASSERT_EQ(val.size(), 2u);
  EXPECT_EQ(val[0].start, 35);
  EXPECT_EQ(val[0].count, 15);
  EXPECT_EQ(val[1].count, 30);
  EXPECT_EQ(source.tokens(), 135);
}

TEST(Sources, ValidationBatchesAreDisjointFromTraining) {
  Source source = memorySource("s", {2000});
  std::vector<Segment> valSegments;
  holdOutFraction(source.segments, 0.25, valSegments);
  ValidationBatches val(valSegments, 4, 16, 0);
  EXPECT_EQ(val.windows(), 31); // (500 - 1) / 16
  EXPECT_EQ(val.batches(), 7);
  auto train = makeLoader({source}, options(4, 16, 1));
  std::set<int32_t> trainSeen, valSeen;
  std::vector<int32_t> x, y;
  for (int step = 0; step < 3 * 93 / 4; ++step) {
    ASSERT_FALSE(bool(train->next(16, x, y)));
    trainSeen.insert(x.begin(), x.end());
    trainSeen.insert(y.begin(), y.end());
  }
  for (int64_t i = 0; i < val.batches(); ++i) {
    ASSERT_FALSE(bool(val.read(i, x, y)));
    // Unshuffled: batch i is windows 4i..4i+3 of the held-out range.
    EXPECT_EQ(x[0], 1500 + i * 4 * 16);
    valSeen.insert(x.begin(), x.end());
    valSeen.insert(y.begin(), y.end());
  }
  EXPECT_FALSE(valSeen.empty());
  for (int32_t token : valSeen)
    EXPECT_EQ(trainSeen.count(token), 0u) << token;
}

class SourceFilesTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-loader-test", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    return path.str().str();
  }
  llvm::SmallString<128> dir;
};

TEST_F(SourceFilesTest, PatternsAndBadInput) {
  for (const char *name : {"train_001.bin", "train_000.bin", "val_000.bin"})
    ASSERT_FALSE(bool(writeShard(file(name), iota(200))));
  auto files = expandFilePatterns({file("train_*.bin")});
  ASSERT_TRUE(bool(files)) << errorText(files.takeError());
  EXPECT_THAT(*files,
              ElementsAre(file("train_000.bin"), file("train_001.bin")));
  auto none = expandFilePatterns({file("test_*.bin")});
  ASSERT_FALSE(bool(none));
  EXPECT_THAT(errorText(none.takeError()), HasSubstr("no files match"));

  ByteTokenizer bytes;
  DataSpec spec;
  spec.train = {{"web", {file("train_*.bin")}, 1}};
  spec.val = {file("val_000.bin")};
  auto opened = openSources(spec, &bytes);
  ASSERT_TRUE(bool(opened)) << errorText(opened.takeError());
  EXPECT_EQ(opened->train[0].tokens(), 400);
  EXPECT_EQ(opened->valTokens(), 200);

  // Opening reads headers only: nothing is mapped until a window is read,
  // and then the loader's heap is its orders and one window.
  auto reader = Loader::create(opened->train, options(2, 16, 1));
  ASSERT_TRUE(bool(reader)) << errorText(reader.takeError());
  EXPECT_EQ((*reader)->mappedBytes(), 0);
  std::vector<int32_t> x, y;
  ASSERT_FALSE(bool((*reader)->next(16, x, y)));
  EXPECT_GT((*reader)->mappedBytes(), 0);
  EXPECT_GT((*reader)->heapBytes(), 0);
  EXPECT_LT((*reader)->heapBytes(), 4096);
  int64_t blocks = 0;
  (*reader)->describeMemory(
      [&](const void *, int64_t bytes) { blocks += bytes; });
  EXPECT_EQ(blocks, (*reader)->heapBytes());

  spec.val = {file("train_001.bin")};
  auto both = openSources(spec, &bytes);
  ASSERT_FALSE(bool(both));
  EXPECT_THAT(errorText(both.takeError()),
              HasSubstr("is both a training (source 'web') and a validation "
                        "file"));

  spec.val = {};
  spec.train = {{"web", {file("train_*.bin")}, 1},
                {"code", {file("code_*.bin")}, 1}};
  auto missing = openSources(spec, &bytes);
  ASSERT_FALSE(bool(missing));
  EXPECT_THAT(errorText(missing.takeError()),
              HasSubstr("data.train[1] (code): no files match"));

  spec.train = {{"web", {file("train_*.bin")}, 0}};
  auto zero = openSources(spec, &bytes);
  ASSERT_FALSE(bool(zero));
  EXPECT_THAT(errorText(zero.takeError()), HasSubstr("not a positive number"));

  spec.train = {{"web", {file("train_000.bin")}, 1}};
  spec.valFraction = 1.5;
  auto fraction = openSources(spec, &bytes);
  ASSERT_FALSE(bool(fraction));
  EXPECT_THAT(errorText(fraction.takeError()), HasSubstr("out of range"));
}

TEST_F(SourceFilesTest, EmptySourceAndIdsBeyondTheVocabulary) {
  ASSERT_FALSE(bool(writeShard(file("tiny.bin"), iota(16))));
  ByteTokenizer bytes;
  DataSpec spec;
  spec.train = {{"tiny", {file("tiny.bin")}, 1}};
  auto opened = openSources(spec, &bytes);
  ASSERT_TRUE(bool(opened)) << errorText(opened.takeError());
  auto loader = Loader::create(std::move(opened->train), options(1, 16, 1));
  ASSERT_FALSE(bool(loader));
  EXPECT_THAT(errorText(loader.takeError()),
              HasSubstr("training source 'tiny' (" + file("tiny.bin") +
                        ") is empty: its 16 tokens hold no window of 17"));

  // Ids are checked as windows are read: the error names the file.
  std::vector<int32_t> tokens = iota(100);
  tokens[40] = 300;
  ASSERT_FALSE(bool(writeShard(file("wide.bin"), tokens)));
  spec.train = {{"wide", {file("wide.bin")}, 1}};
  auto wide = openSources(spec, &bytes);
  ASSERT_TRUE(bool(wide)) << errorText(wide.takeError());
  LoaderOptions o = options(1, 10, 1);
  o.vocabLimit = 256;
  auto reader = Loader::create(std::move(wide->train), o);
  ASSERT_TRUE(bool(reader));
  std::vector<int32_t> x, y;
  bool failed = false;
  for (int i = 0; i < 9 && !failed; ++i)
    if (llvm::Error err = (*reader)->next(10, x, y)) {
      std::string message = errorText(std::move(err));
      EXPECT_THAT(message, HasSubstr("training window"));
      EXPECT_THAT(message, HasSubstr("wide.bin"));
      EXPECT_THAT(message, HasSubstr("300"));
      failed = true;
    }
  EXPECT_TRUE(failed);
}

} // namespace
