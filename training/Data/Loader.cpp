// The loader: the global window order, blends, positions, validation batches.
#include "training/Data/Loader.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

using namespace llmc;
using namespace llmc::data;

//===----------------------------------------------------------------------===//
// SplitMix64
//===----------------------------------------------------------------------===//

static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
// The epoch's term of the group generator's seed (the loader before this one
// had it for the whole epoch's permutation).
static constexpr uint64_t kEpochMix = 0xD1B54A32D192ED03ull;

uint64_t SplitMix64::next() {
  uint64_t z = (state += kGamma);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t bound) {
  uint64_t limit = std::numeric_limits<uint64_t>::max() -
                   std::numeric_limits<uint64_t>::max() % bound;
  uint64_t value;
  do
    value = next();
  while (value >= limit);
  return value % bound;
}

static void fisherYates(std::vector<uint32_t> &order, SplitMix64 &rng) {
  for (int64_t i = int64_t(order.size()) - 1; i > 0; --i)
    std::swap(order[i], order[rng.below(uint64_t(i) + 1)]);
}

static std::vector<uint32_t> identity(int64_t size) {
  std::vector<uint32_t> order(size);
  for (int64_t i = 0; i < size; ++i)
    order[i] = uint32_t(i);
  return order;
}

//===----------------------------------------------------------------------===//
// SourceOrder
//===----------------------------------------------------------------------===//

SourceOrder::SourceOrder(const Source &source, int sourceIndex, int64_t seqLen,
                         uint64_t seed, int64_t shuffleWindows)
    : source(&source), index(sourceIndex), seqLen(seqLen), seed(seed),
      epochWindows(source.windows(seqLen)) {
  groupWindows = shuffleWindows > 0 ? shuffleWindows
                                    : std::max<int64_t>(1, epochWindows);
}

std::vector<uint32_t> SourceOrder::segmentOrder(uint64_t epoch) const {
  std::vector<uint32_t> order = identity(int64_t(source->segments.size()));
  if (order.size() < 2)
    return order;
  SplitMix64 seeder(seed ^ 0x5851F42D4C957F2Dull);
  SplitMix64 rng(seeder.next() ^ (epoch * kEpochMix) ^
                 ((uint64_t(index) + 1) * 0x94D049BB133111EBull));
  fisherYates(order, rng);
  return order;
}

std::vector<uint32_t> SourceOrder::groupOrder(uint64_t epoch, uint64_t group,
                                              int64_t size) const {
  std::vector<uint32_t> order = identity(size);
  // Group 0 of source 0 has exactly the generator of the loader before
  // this one, so that its orders (and checkpoints) carry over.
  SplitMix64 seeder(seed);
  uint64_t key = seeder.next() ^ (epoch * kEpochMix);
  if (group != 0 || index != 0)
    key ^= SplitMix64(group * 0xA0761D6478BD642Full +
                      uint64_t(index) * 0xE7037ED1A0B428DBull)
               .next();
  SplitMix64 rng(key);
  fisherYates(order, rng);
  return order;
}

void SourceOrder::enterEpoch(uint64_t epoch) {
  segments = segmentOrder(epoch);
  firstWindow.assign(1, 0);
  for (uint32_t s : segments)
    firstWindow.push_back(firstWindow.back() +
                          source->segments[s].windows(seqLen));
  cachedEpoch = int64_t(epoch);
  cachedGroup = -1;
}

WindowPlace SourceOrder::window(int64_t j) {
  uint64_t epoch = uint64_t(j / epochWindows);
  int64_t i = j % epochWindows;
  if (cachedEpoch != int64_t(epoch))
    enterEpoch(epoch);
  int64_t g = i / groupWindows;
  if (cachedGroup != g) {
    int64_t size = std::min(groupWindows, epochWindows - g * groupWindows);
    group = groupOrder(epoch, uint64_t(g), size);
    cachedGroup = g;
  }
  int64_t q = g * groupWindows + group[i - g * groupWindows];
  // The segment holding the epoch's q-th window.
  size_t p = size_t(std::upper_bound(firstWindow.begin(), firstWindow.end(),
                                     q) -
                    firstWindow.begin()) -
             1;
  const Segment &segment = source->segments[segments[p]];
  return {index, segment.file.get(),
          segment.start + (q - firstWindow[p]) * seqLen};
}

int64_t SourceOrder::heapBytes() const {
  return int64_t(group.capacity() * sizeof(uint32_t) +
                 segments.capacity() * sizeof(uint32_t) +
                 firstWindow.capacity() * sizeof(int64_t));
}

void SourceOrder::describeMemory(
    const std::function<void(const void *, int64_t)> &visit) const {
  visit(group.data(), int64_t(group.capacity() * sizeof(uint32_t)));
  visit(segments.data(), int64_t(segments.capacity() * sizeof(uint32_t)));
  visit(firstWindow.data(), int64_t(firstWindow.capacity() * sizeof(int64_t)));
}

//===----------------------------------------------------------------------===//
// Loader
//===----------------------------------------------------------------------===//

llvm::Error llmc::data::readWindow(const WindowPlace &place, int64_t seqLen,
                                   int32_t vocabLimit,
                                   std::vector<int32_t> &out) {
  out.resize(size_t(seqLen + 1));
  return place.file->read(place.start, seqLen + 1, out.data(), vocabLimit);
}

llvm::Expected<std::unique_ptr<Loader>>
Loader::create(std::vector<Source> sources, const LoaderOptions &options) {
  if (options.batch <= 0 || options.seqLen <= 0)
    return llvm::createStringError(llvm::formatv(
        "batch ({0}) and sequence length ({1}) must be positive",
        options.batch, options.seqLen));
  if (sources.empty())
    return llvm::createStringError("no training source");
  std::unique_ptr<Loader> loader(new Loader());
  loader->sourceList = std::move(sources);
  loader->opts = options;
  double total = 0;
  for (size_t s = 0; s < loader->sourceList.size(); ++s) {
    const Source &source = loader->sourceList[s];
    if (source.windows(options.seqLen) == 0)
      return llvm::createStringError(llvm::formatv(
          "training source '{0}' ({1}) is empty: its {2} tokens hold no "
          "window of {3} tokens (seq_len + 1) within one file",
          source.name, llvm::join(source.files, ", "), source.tokens(),
          options.seqLen + 1));
    if (!(source.weight > 0) || !std::isfinite(source.weight))
      return llvm::createStringError(llvm::formatv(
          "training source '{0}': weight {1} is not a positive number",
          source.name, source.weight));
    total += source.weight;
  }
  // The orders point into sourceList, which no longer moves.
  for (size_t s = 0; s < loader->sourceList.size(); ++s)
    loader->orders.emplace_back(loader->sourceList[s], int(s), options.seqLen,
                                options.seed, options.shuffleWindows);
  double running = 0;
  for (const Source &source : loader->sourceList) {
    loader->normalised.push_back(source.weight / total);
    running += source.weight / total;
    loader->cumulative.push_back(running);
  }
  loader->cumulative.back() = 1.0;
  loader->counters.assign(loader->sourceList.size(), 0);
  loader->blendKey = SplitMix64(options.seed ^ 0x243F6A8885A308D3ull).next();
  return loader;
}

int Loader::drawSource(int64_t k) const {
  if (cumulative.size() == 1)
    return 0;
  // The k-th output of a SplitMix64 stream: a function of (seed, k) only.
  uint64_t bits = SplitMix64(blendKey + uint64_t(k) * kGamma).next();
  double u = double(bits >> 11) * 0x1.0p-53;
  for (size_t s = 0; s + 1 < cumulative.size(); ++s)
    if (u < cumulative[s])
      return int(s);
  return int(cumulative.size()) - 1;
}

WindowPlace Loader::take() {
  int s = drawSource(taken);
  WindowPlace place = orders[s].window(counters[s]);
  ++counters[s];
  ++taken;
  return place;
}

void Loader::skip(int64_t windows) {
  for (int64_t i = 0; i < windows; ++i) {
    ++counters[drawSource(taken)];
    ++taken;
  }
}

llvm::Error Loader::next(int64_t rowLen, std::vector<int32_t> &tokens,
                         std::vector<int32_t> &targets,
                         std::vector<WindowRecord> *records) {
  const int64_t batch = opts.batch, seqLen = opts.seqLen;
  rowLen = std::min(rowLen, seqLen);
  tokens.resize(size_t(batch * rowLen));
  targets.resize(size_t(batch * rowLen));
  for (int64_t b = 0; b < batch; ++b) {
    int64_t k = taken;
    WindowPlace place = take();
    if (llvm::Error err = readWindow(place, seqLen, opts.vocabLimit, window))
      return llvm::createStringError(
          llvm::formatv("training window {0} (source '{1}', tokens {2}.."
                        "{3}): ",
                        k, sourceList[place.source].name, place.start,
                        place.start + seqLen)
              .str() +
          llvm::toString(std::move(err)));
    std::copy(window.begin(), window.begin() + rowLen,
              tokens.begin() + b * rowLen);
    std::copy(window.begin() + 1, window.begin() + 1 + rowLen,
              targets.begin() + b * rowLen);
    if (records)
      records->push_back({k, place.source, place.file, place.start});
  }
  return llvm::Error::success();
}

double Loader::epochs(int source) const {
  return double(counters[source]) / double(orders[source].windowsPerEpoch());
}

llvm::json::Value Loader::position() const {
  llvm::json::Array sources;
  for (size_t s = 0; s < sourceList.size(); ++s)
    sources.push_back(llvm::json::Object{
        {"name", sourceList[s].name},
        {"windows_per_epoch", orders[s].windowsPerEpoch()},
        {"tokens", sourceList[s].tokens()},
        {"consumed", counters[s]}});
  return llvm::json::Object{{"windows", taken},
                            {"sources", std::move(sources)}};
}

namespace {
llvm::Error positionError(const llvm::Twine &what) {
  return llvm::createStringError(what);
}
} // namespace

llvm::Error Loader::setPosition(const llvm::json::Value &value) {
  const llvm::json::Object *object = value.getAsObject();
  if (!object)
    return positionError("a data position is a JSON object");
  if (!object->get("windows")) {
    // The loader before this one: {"epoch": E, "index": I} of one source.
    std::optional<int64_t> epoch = object->getInteger("epoch");
    std::optional<int64_t> index = object->getInteger("index");
    if (!epoch || !index || *epoch < 0 || *index < 0)
      return positionError("a data position is {\"windows\": K, \"sources\": "
                           "[...]} (or {\"epoch\": E, \"index\": I} with "
                           "non-negative integers)");
    if (sourceList.size() != 1)
      return positionError(llvm::formatv(
          "the checkpoint's data position is of one source; the config has "
          "{0}",
          sourceList.size()));
    int64_t perEpoch = orders[0].windowsPerEpoch();
    if (*index >= perEpoch)
      return positionError(llvm::formatv(
          "data loader position index {0} is past the {1} windows of an "
          "epoch (was the data or the sequence length changed?)",
          *index, perEpoch));
    counters[0] = taken = *epoch * perEpoch + *index;
    return llvm::Error::success();
  }
  std::optional<int64_t> windows = object->getInteger("windows");
  const llvm::json::Array *sources = object->getArray("sources");
  if (!windows || *windows < 0 || !sources)
    return positionError("a data position is {\"windows\": K, \"sources\": "
                         "[...]} with K a non-negative integer");
  if (sources->size() != sourceList.size())
    return positionError(llvm::formatv(
        "the data changed since the checkpoint: it has {0} training "
        "source(s), the config {1}",
        sources->size(), sourceList.size()));
  std::vector<int64_t> restored;
  int64_t sum = 0;
  for (size_t s = 0; s < sourceList.size(); ++s) {
    const llvm::json::Object *entry = (*sources)[s].getAsObject();
    std::optional<int64_t> perEpoch =
        entry ? entry->getInteger("windows_per_epoch") : std::nullopt;
    std::optional<int64_t> tokens =
        entry ? entry->getInteger("tokens") : std::nullopt;
    std::optional<int64_t> consumed =
        entry ? entry->getInteger("consumed") : std::nullopt;
    if (!perEpoch || !tokens || !consumed || *consumed < 0)
      return positionError(llvm::formatv(
          "source {0} of the data position lacks windows_per_epoch, tokens "
          "or consumed",
          s));
    int64_t nowWindows = orders[s].windowsPerEpoch();
    int64_t nowTokens = sourceList[s].tokens();
    if (*perEpoch != nowWindows || *tokens != nowTokens)
      return positionError(llvm::formatv(
          "the data changed since the checkpoint: training source '{0}' had "
          "{1} tokens in {2} windows, it has {3} tokens in {4} windows now",
          sourceList[s].name, *tokens, *perEpoch, nowTokens, nowWindows));
    restored.push_back(*consumed);
    sum += *consumed;
  }
  if (sum != *windows)
    return positionError(llvm::formatv(
        "the data position's sources consumed {0} windows in all, not its "
        "{1}",
        sum, *windows));
  counters = std::move(restored);
  taken = *windows;
  return llvm::Error::success();
}

int64_t Loader::mappedBytes() const {
  std::set<const TokenFile *> files;
  for (const Source &source : sourceList)
    for (const Segment &segment : source.segments)
      files.insert(segment.file.get());
  int64_t total = 0;
  for (const TokenFile *file : files)
    total += file->mappedBytes();
  return total;
}

int64_t Loader::heapBytes() const {
  std::set<const TokenFile *> files;
  for (const Source &source : sourceList)
    for (const Segment &segment : source.segments)
      files.insert(segment.file.get());
  int64_t total = int64_t(window.capacity() * sizeof(int32_t));
  for (const TokenFile *file : files)
    total += file->heapBytes();
  for (const SourceOrder &order : orders)
    total += order.heapBytes();
  return total;
}

void Loader::describeMemory(
    const std::function<void(const void *, int64_t)> &visit) const {
  for (const SourceOrder &order : orders)
    order.describeMemory(visit);
  visit(window.data(), int64_t(window.capacity() * sizeof(int32_t)));
}

//===----------------------------------------------------------------------===//
// ValidationBatches
//===----------------------------------------------------------------------===//

ValidationBatches::ValidationBatches(std::vector<Segment> segments,
                                     int64_t batch, int64_t seqLen,
                                     int32_t vocabLimit)
    : segmentList(std::move(segments)), batchSize(batch), seqLen(seqLen),
      vocabLimit(vocabLimit) {
  firstWindow.assign(1, 0);
  for (const Segment &segment : segmentList)
    firstWindow.push_back(firstWindow.back() + segment.windows(seqLen));
  numWindows = firstWindow.back();
}

int64_t ValidationBatches::tokens() const {
  int64_t total = 0;
  for (const Segment &segment : segmentList)
    total += segment.count;
  return total;
}

llvm::Error ValidationBatches::read(int64_t index,
                                    std::vector<int32_t> &tokens,
                                    std::vector<int32_t> &targets) const {
  tokens.resize(size_t(batchSize * seqLen));
  targets.resize(size_t(batchSize * seqLen));
  std::vector<int32_t> window;
  for (int64_t b = 0; b < batchSize; ++b) {
    int64_t w = index * batchSize + b;
    size_t p = size_t(std::upper_bound(firstWindow.begin(), firstWindow.end(),
                                       w) -
                      firstWindow.begin()) -
               1;
    const Segment &segment = segmentList[p];
    WindowPlace place{0, segment.file.get(),
                      segment.start + (w - firstWindow[p]) * seqLen};
    if (llvm::Error err = readWindow(place, seqLen, vocabLimit, window))
      return llvm::createStringError(
          llvm::formatv("validation window {0}: ", w).str() +
          llvm::toString(std::move(err)));
    std::copy(window.begin(), window.begin() + seqLen,
              tokens.begin() + b * seqLen);
    std::copy(window.begin() + 1, window.end(), targets.begin() + b * seqLen);
  }
  return llvm::Error::success();
}
