// Training data: llm.c token shards, text files, the split, the batch loader.
#include "frontend/Dataset.h"

#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace llmc;
using namespace llmc::data;

static llvm::Error fileError(llvm::StringRef path, const llvm::Twine &what) {
  return llvm::createStringError(path + ": " + what);
}

static llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return llvm::createStringError(buffer.getError(),
                                   "cannot read '" + path +
                                       "': " + buffer.getError().message());
  return std::move(*buffer);
}

//===----------------------------------------------------------------------===//
// Shards
//===----------------------------------------------------------------------===//

llvm::Expected<std::vector<int32_t>> llmc::data::readShard(llvm::StringRef path,
                                                           int32_t vocabSize) {
  auto buffer = readFile(path);
  if (!buffer)
    return buffer.takeError();
  return parseShard((*buffer)->getBuffer(), path, vocabSize);
}

llvm::Expected<std::vector<int32_t>>
llmc::data::parseShard(llvm::StringRef bytes, llvm::StringRef path,
                       int32_t vocabSize) {
  if (static_cast<int64_t>(bytes.size()) < kShardHeaderBytes)
    return fileError(path, llvm::formatv("truncated header: the file has {0} "
                                         "bytes, an llm.c shard header has {1}",
                                         bytes.size(), kShardHeaderBytes));
  auto headerInt = [&](int index) {
    return llvm::support::endian::read32le(bytes.data() + 4 * index);
  };
  int32_t magic = headerInt(0), version = headerInt(1), count = headerInt(2);
  if (magic != kShardMagic)
    return fileError(path, llvm::formatv("bad magic number {0} (an llm.c token "
                                         "shard starts with {1})",
                                         magic, kShardMagic));
  if (version != kShardVersion)
    return fileError(path, llvm::formatv("unsupported version {0} (expected "
                                         "{1}: uint16 tokens)",
                                         version, kShardVersion));
  if (count < 0)
    return fileError(path, llvm::formatv("negative token count {0}", count));
  int64_t payload = static_cast<int64_t>(bytes.size()) - kShardHeaderBytes;
  int64_t expected = 2 * static_cast<int64_t>(count);
  if (payload < expected)
    return fileError(path, llvm::formatv("truncated: the header counts {0} "
                                         "tokens ({1} bytes) but the file holds "
                                         "{2} bytes of tokens",
                                         count, expected, payload));
  if (payload > expected)
    return fileError(path, llvm::formatv("token count mismatch: the header "
                                         "counts {0} tokens ({1} bytes) but the "
                                         "file holds {2} bytes of tokens",
                                         count, expected, payload));
  std::vector<int32_t> tokens(count);
  const char *data = bytes.data() + kShardHeaderBytes;
  for (int32_t i = 0; i < count; ++i) {
    tokens[i] = llvm::support::endian::read16le(data + 2 * i);
    if (vocabSize > 0 && tokens[i] >= vocabSize)
      return fileError(path, llvm::formatv("token {0} at index {1} is out of "
                                           "range for the vocabulary size {2}",
                                           tokens[i], i, vocabSize));
  }
  return tokens;
}

llvm::Error llmc::data::writeShard(llvm::StringRef path,
                                   llvm::ArrayRef<int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return fileError(path, llvm::formatv("{0} tokens do not fit in one shard",
                                         tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] > 0xFFFF)
      return fileError(path, llvm::formatv("token {0} at index {1} does not "
                                           "fit in an llm.c shard's uint16",
                                           tokens[i], i));
  std::vector<uint8_t> bytes(kShardHeaderBytes + 2 * tokens.size(), 0);
  using llvm::support::endian::write16le;
  using llvm::support::endian::write32le;
  write32le(bytes.data(), kShardMagic);
  write32le(bytes.data() + 4, kShardVersion);
  write32le(bytes.data() + 8, static_cast<uint32_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i)
    write16le(bytes.data() + kShardHeaderBytes + 2 * i,
              static_cast<uint16_t>(tokens[i]));
  return kir::writeFileAtomically(path, bytes);
}

bool llmc::data::isShardPath(llvm::StringRef path) {
  return path.ends_with(".bin");
}

llvm::Expected<std::vector<std::string>>
llmc::data::expandFilePatterns(llvm::ArrayRef<std::string> patterns) {
  std::vector<std::string> files;
  for (const std::string &pattern : patterns) {
    llvm::StringRef name = llvm::sys::path::filename(pattern);
    if (name.find_first_of("*?[") == llvm::StringRef::npos) {
      files.push_back(pattern);
      continue;
    }
    llvm::Expected<llvm::GlobPattern> glob = llvm::GlobPattern::create(name);
    if (!glob)
      return llvm::createStringError("bad file pattern '" + pattern +
                                     "': " + llvm::toString(glob.takeError()));
    llvm::StringRef dir = llvm::sys::path::parent_path(pattern);
    std::vector<std::string> matches;
    std::error_code error;
    for (llvm::sys::fs::directory_iterator it(dir.empty() ? "." : dir, error),
         end;
         it != end && !error; it.increment(error)) {
      llvm::StringRef entry = llvm::sys::path::filename(it->path());
      if (glob->match(entry))
        matches.push_back(dir.empty() ? entry.str() : it->path());
    }
    if (error)
      return llvm::createStringError(error, "cannot list '" + dir + "' for '" +
                                                pattern +
                                                "': " + error.message());
    if (matches.empty())
      return llvm::createStringError("no files match '" + pattern + "'");
    std::sort(matches.begin(), matches.end());
    files.insert(files.end(), matches.begin(), matches.end());
  }
  return files;
}

//===----------------------------------------------------------------------===//
// Token sources
//===----------------------------------------------------------------------===//

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

llvm::Expected<std::vector<int32_t>>
llmc::data::loadTokens(llvm::ArrayRef<std::string> paths,
                       const Tokenizer &tokenizer) {
  std::vector<int32_t> tokens;
  for (const std::string &path : paths) {
    if (isShardPath(path)) {
      auto shard = readShard(path, tokenizer.vocabSize());
      if (!shard)
        return shard.takeError();
      tokens.insert(tokens.end(), shard->begin(), shard->end());
      continue;
    }
    auto buffer = readFile(path);
    if (!buffer)
      return buffer.takeError();
    std::vector<int32_t> ids =
        encodeDocuments({(*buffer)->getBuffer()}, tokenizer);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  return tokens;
}

TokenSplits llmc::data::splitTokens(std::vector<int32_t> tokens,
                                    double fraction) {
  size_t valSize = static_cast<size_t>(std::floor(tokens.size() * fraction));
  valSize = std::min(valSize, tokens.size());
  TokenSplits splits;
  splits.val.assign(tokens.end() - valSize, tokens.end());
  tokens.resize(tokens.size() - valSize);
  splits.train = std::move(tokens);
  return splits;
}

llvm::Expected<TokenSplits>
llmc::data::loadTokenSplits(const DataOptions &options,
                            const Tokenizer &tokenizer) {
  if (options.trainFiles.empty())
    return llvm::createStringError("no training data files given");
  if (!(options.valFraction >= 0 && options.valFraction < 1))
    return llvm::createStringError(llvm::formatv(
        "validation fraction {0} is out of range; expected a value in [0, 1)",
        options.valFraction));
  auto trainPaths = expandFilePatterns(options.trainFiles);
  if (!trainPaths)
    return trainPaths.takeError();
  auto train = loadTokens(*trainPaths, tokenizer);
  if (!train)
    return train.takeError();
  if (options.valFiles.empty())
    return splitTokens(std::move(*train), options.valFraction);
  auto valPaths = expandFilePatterns(options.valFiles);
  if (!valPaths)
    return valPaths.takeError();
  for (const std::string &path : *valPaths)
    if (llvm::is_contained(*trainPaths, path))
      return llvm::createStringError("'" + path +
                                     "' is both a training and a validation "
                                     "file");
  auto val = loadTokens(*valPaths, tokenizer);
  if (!val)
    return val.takeError();
  return TokenSplits{std::move(*train), std::move(*val)};
}

//===----------------------------------------------------------------------===//
// BatchLoader
//===----------------------------------------------------------------------===//

llvm::json::Value LoaderPosition::toJson() const {
  return llvm::json::Object{{"epoch", static_cast<int64_t>(epoch)},
                            {"index", static_cast<int64_t>(index)}};
}

llvm::Expected<LoaderPosition>
LoaderPosition::fromJson(const llvm::json::Value &value) {
  const llvm::json::Object *object = value.getAsObject();
  std::optional<int64_t> epoch = object ? object->getInteger("epoch") : std::nullopt;
  std::optional<int64_t> index = object ? object->getInteger("index") : std::nullopt;
  if (!epoch || !index || *epoch < 0 || *index < 0)
    return llvm::createStringError(
        "a data loader position is {\"epoch\": E, \"index\": I} with "
        "non-negative integers");
  return LoaderPosition{static_cast<uint64_t>(*epoch),
                        static_cast<uint64_t>(*index)};
}

llvm::Expected<BatchLoader>
BatchLoader::create(std::shared_ptr<const std::vector<int32_t>> tokens,
                    int64_t batch, int64_t seqLen, uint64_t seed, bool shuffle) {
  if (batch <= 0 || seqLen <= 0)
    return llvm::createStringError(llvm::formatv(
        "batch ({0}) and sequence length ({1}) must be positive", batch,
        seqLen));
  int64_t size = static_cast<int64_t>(tokens->size());
  int64_t windows = size > 0 ? (size - 1) / seqLen : 0;
  if (windows < batch)
    return llvm::createStringError(llvm::formatv(
        "{0} tokens are too few for one batch of {1} x {2}: it needs {3} "
        "tokens ({1} windows of {2} tokens and one more target)",
        size, batch, seqLen, batch * seqLen + 1));
  if (windows > std::numeric_limits<uint32_t>::max())
    return llvm::createStringError(
        llvm::formatv("{0} windows are more than a loader handles", windows));
  BatchLoader loader;
  loader.stream = std::move(tokens);
  loader.batchSize = batch;
  loader.sequenceLength = seqLen;
  loader.numWindows = windows;
  loader.seed = seed;
  loader.shuffle = shuffle;
  loader.startEpoch(0);
  return loader;
}

llvm::Expected<BatchLoader> BatchLoader::create(llvm::ArrayRef<int32_t> tokens,
                                                int64_t batch, int64_t seqLen,
                                                uint64_t seed, bool shuffle) {
  return create(std::make_shared<const std::vector<int32_t>>(tokens.begin(),
                                                             tokens.end()),
                batch, seqLen, seed, shuffle);
}

namespace {
/// SplitMix64 (Steele, Lea, Flood 2014): a small PRNG whose output is fixed
/// by its definition, unlike std::shuffle and the standard distributions.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t state) : state(state) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound), by rejection (no modulo bias).
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
} // namespace

std::vector<uint32_t> BatchLoader::epochOrder(uint64_t epoch) const {
  std::vector<uint32_t> result(numWindows);
  for (int64_t i = 0; i < numWindows; ++i)
    result[i] = static_cast<uint32_t>(i);
  if (!shuffle)
    return result;
  // Fisher-Yates with a generator seeded by (seed, epoch).
  SplitMix64 seeder(seed);
  SplitMix64 rng(seeder.next() ^ (epoch * 0xD1B54A32D192ED03ull));
  for (int64_t i = numWindows - 1; i > 0; --i)
    std::swap(result[i], result[rng.below(static_cast<uint64_t>(i) + 1)]);
  return result;
}

void BatchLoader::startEpoch(uint64_t epoch) {
  current = {epoch, 0};
  order = epochOrder(epoch);
}

llvm::Error BatchLoader::setPosition(LoaderPosition position) {
  if (position.index >= static_cast<uint64_t>(numWindows))
    return llvm::createStringError(llvm::formatv(
        "data loader position index {0} is past the {1} windows of an epoch "
        "(was the data or the sequence length changed?)",
        position.index, numWindows));
  if (position.epoch != current.epoch)
    order = epochOrder(position.epoch);
  current = position;
  return llvm::Error::success();
}

void BatchLoader::next(Batch &out) {
  out.batch = batchSize;
  out.seqLen = sequenceLength;
  out.tokens.resize(batchSize * sequenceLength);
  out.targets.resize(batchSize * sequenceLength);
  const int32_t *data = stream->data();
  for (int64_t b = 0; b < batchSize; ++b) {
    if (current.index >= static_cast<uint64_t>(numWindows))
      startEpoch(current.epoch + 1);
    const int32_t *window =
        data + static_cast<int64_t>(order[current.index]) * sequenceLength;
    std::copy(window, window + sequenceLength,
              out.tokens.begin() + b * sequenceLength);
    std::copy(window + 1, window + 1 + sequenceLength,
              out.targets.begin() + b * sequenceLength);
    ++current.index;
  }
  if (current.index >= static_cast<uint64_t>(numWindows))
    startEpoch(current.epoch + 1);
}
