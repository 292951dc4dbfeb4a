// The loader: the global order of a run's training windows (each source's
// epochs, its files in a seeded order, windows shuffled within a bounded
// buffer, sources blended by weight), batches read from it, positions that
// resume it, and the validation batches.
//
//   auto loader = llmc::data::Loader::create(std::move(opened->train), options);
//   (*loader)->next(seqLen, tokens, targets);   // the next B windows, read
//   (*loader)->skip(B);                         // another rank's: not read
//   llvm::json::Value saved = (*loader)->position();
//   (*loader)->setPosition(saved);              // continues exactly
//
// The order is a function of (seed, k) alone, k counting every window the
// run takes (step, micro-batch, row): never of the number of ranks, so any
// layout reads the same windows and any layout resumes any other's
// position.
//
// Source s is an endless sequence of windows: its j-th window is window
// j % W of epoch j / W (W: its windows). Epoch e lists the source's files
// in an order seeded by (seed, s, e) (the identity for one file), their
// windows in that order cut into consecutive groups of shuffleWindows, each
// group permuted by Fisher-Yates seeded by (seed, e, g, s). For s = g = 0
// the generator is the one the loader before it used for a whole epoch, so
// one file with fewer windows than the buffer gives that loader's order bit
// for bit (checkpoints written before resume exactly).
//
// With several sources, window k comes from the source chosen by a uniform
// draw keyed by (seed, k) against the normalised weights; that source's
// counter j advances.
#ifndef LLMC_TRAINING_DATA_LOADER_H
#define LLMC_TRAINING_DATA_LOADER_H

#include "training/Data/Sources.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llmc::data {

/// SplitMix64 (Steele, Lea, Flood 2014): a small PRNG whose output is fixed
/// by its definition, unlike std::shuffle and the standard distributions.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t state) : state(state) {}
  uint64_t next();
  /// Uniform in [0, bound), by rejection (no modulo bias).
  uint64_t below(uint64_t bound);

private:
  uint64_t state;
};

/// Where one window lies: tokens [start, start + seqLen + 1) of `file`.
struct WindowPlace {
  int source = 0;
  const TokenFile *file = nullptr;
  int64_t start = 0;
};

/// One source's endless sequence of windows.
class SourceOrder {
public:
  SourceOrder(const Source &source, int sourceIndex, int64_t seqLen,
              uint64_t seed, int64_t shuffleWindows);

  int64_t windowsPerEpoch() const { return epochWindows; }
  /// The j-th window of the sequence.
  WindowPlace window(int64_t j);
  /// Epoch `epoch`'s order of the segments (indices).
  std::vector<uint32_t> segmentOrder(uint64_t epoch) const;
  /// The permutation of group `group` of epoch `epoch` (`size` windows).
  std::vector<uint32_t> groupOrder(uint64_t epoch, uint64_t group,
                                   int64_t size) const;
  /// Heap bytes of the cached orders.
  int64_t heapBytes() const;
  /// The cached orders' blocks.
  void describeMemory(
      const std::function<void(const void *, int64_t)> &visit) const;

private:
  void enterEpoch(uint64_t epoch);
  const Source *source;
  int index;
  int64_t seqLen;
  uint64_t seed;
  int64_t groupWindows;
  int64_t epochWindows = 0;
  // Caches: the current epoch's segment order and its windows' running
  // sums, and the current group's permutation.
  int64_t cachedEpoch = -1, cachedGroup = -1;
  std::vector<uint32_t> segments;
  std::vector<int64_t> firstWindow; // per position in `segments`, and total
  std::vector<uint32_t> group;
};

struct LoaderOptions {
  int64_t batch = 0;  // windows per next()
  int64_t seqLen = 0; // tokens per row (a window is seqLen + 1)
  uint64_t seed = 0;
  /// The shuffle buffer, in windows (data.shuffle_windows); 0: an epoch is
  /// one group.
  int64_t shuffleWindows = 0;
  /// Ids must be below this (0: unchecked); checked per window as read.
  int32_t vocabLimit = 0;
};

/// A window as read, for traces.
struct WindowRecord {
  int64_t window = 0; // k
  int source = 0;
  const TokenFile *file = nullptr;
  int64_t start = 0;
};

/// One source's state in a position.
struct SourcePosition {
  std::string name;
  int64_t windowsPerEpoch = 0;
  int64_t tokens = 0;
  int64_t consumed = 0; // j
};

class Loader {
public:
  /// An error for a source without one window (naming it and its files),
  /// or a batch or sequence length that is not positive.
  static llvm::Expected<std::unique_ptr<Loader>>
  create(std::vector<Source> sources, const LoaderOptions &options);

  /// Reads the next batch windows: tokens and targets [batch, rowLen], the
  /// first rowLen tokens of each window (rowLen <= seqLen: sequence-length
  /// warmup). `records` (optional) gets what was read.
  llvm::Error next(int64_t rowLen, std::vector<int32_t> &tokens,
                   std::vector<int32_t> &targets,
                   std::vector<WindowRecord> *records = nullptr);
  /// Advances past `windows` windows without reading them.
  void skip(int64_t windows);

  /// The windows taken so far (k).
  int64_t windowsTaken() const { return taken; }
  /// Where window k (>= windowsTaken()) would come from; advances.
  WindowPlace take();

  /// {"windows": k, "sources": [{"name", "windows_per_epoch", "tokens",
  /// "consumed"}, ...]}.
  llvm::json::Value position() const;
  /// Restores a position(), or the loader's before it ({"epoch": E,
  /// "index": I}: one source). An error when the data changed since: other
  /// sources, windows or tokens.
  llvm::Error setPosition(const llvm::json::Value &value);

  const std::vector<Source> &sources() const { return sourceList; }
  int64_t windowsPerEpoch(int source) const {
    return orders[source].windowsPerEpoch();
  }
  int64_t consumed(int source) const { return counters[source]; }
  /// Epochs of source `source` taken so far (consumed / windows per epoch).
  double epochs(int source) const;
  /// The normalised weights (summing to 1).
  const std::vector<double> &shares() const { return normalised; }
  const LoaderOptions &options() const { return opts; }

  /// Token file bytes mapped now, and heap bytes (in-memory tokens, the
  /// orders).
  int64_t mappedBytes() const;
  int64_t heapBytes() const;
  /// Calls `visit` with each heap block of its own (the shuffle orders, the
  /// window buffer).
  void describeMemory(
      const std::function<void(const void *, int64_t)> &visit) const;

private:
  Loader() = default;
  int drawSource(int64_t k) const;

  std::vector<Source> sourceList;
  std::vector<SourceOrder> orders;
  std::vector<int64_t> counters;
  std::vector<double> normalised, cumulative;
  LoaderOptions opts;
  uint64_t blendKey = 0;
  int64_t taken = 0;
  std::vector<int32_t> window; // one window's tokens
};

/// The validation batches: the windows of the validation segments in file
/// order, unshuffled; batch i is windows [i * batch, (i + 1) * batch).
class ValidationBatches {
public:
  ValidationBatches(std::vector<Segment> segments, int64_t batch,
                    int64_t seqLen, int32_t vocabLimit);
  int64_t batches() const { return numWindows / batchSize; }
  int64_t windows() const { return numWindows; }
  int64_t tokens() const;
  llvm::Error read(int64_t index, std::vector<int32_t> &tokens,
                   std::vector<int32_t> &targets) const;
  const std::vector<Segment> &segments() const { return segmentList; }

private:
  std::vector<Segment> segmentList;
  std::vector<int64_t> firstWindow;
  int64_t batchSize, seqLen;
  int32_t vocabLimit;
  int64_t numWindows = 0;
};

/// Reads window `place` (seqLen + 1 tokens) into `out`; an id at or above
/// vocabLimit (> 0) is an error naming the file and the token index.
llvm::Error readWindow(const WindowPlace &place, int64_t seqLen,
                       int32_t vocabLimit, std::vector<int32_t> &out);

} // namespace llmc::data

#endif // LLMC_TRAINING_DATA_LOADER_H
