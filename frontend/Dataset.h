// Training data: token sources (text files, llm.c token shards), the
// train/validation split, and a batch loader with a resumable position.
//
// Usage (library LlmcData; no MLIR, only LLVM Support):
//
//   llmc::data::DataOptions options;
//   options.trainFiles = {"examples/corpus/corpus.txt"}; // text or *.bin shards;
//                                                       // globs like "dir/train_*.bin"
//   options.valFiles = {};       // empty: the last valFraction of the tokens
//   options.valFraction = 0.1;
//   llvm::Expected<llmc::data::TokenSplits> splits =
//       llmc::data::loadTokenSplits(options, tokenizer);   // llmc::data::Tokenizer
//   if (!splits) return splits.takeError();
//
//   llvm::Expected<llmc::data::BatchLoader> train = llmc::data::BatchLoader::create(
//       splits->train, /*batch=*/B, /*seqLen=*/T, /*seed=*/1337, /*shuffle=*/true);
//   llmc::data::Batch batch;
//   train->next(batch);            // batch.tokens, batch.targets: int32 [B, T]
//   // Checkpoint: store train->position() (epoch, index; toJson/fromJson);
//   // on resume: create the loader the same way, then setPosition(saved).
//
//   // Evaluation: an unshuffled loader over splits->val, batchesPerEpoch()
//   // batches from position {0, 0}.
//
// Windows: the tokens are cut into windows of T+1 tokens starting at 0, T,
// 2T, ...; a window gives one row: tokens = window[0:T], targets =
// window[1:T+1]. An epoch visits every window once, in an order that is a
// pure function of (seed, epoch). Batches take B windows in that order and
// run on into the next epoch, so no window is skipped.
#ifndef LLMC_FRONTEND_DATASET_H
#define LLMC_FRONTEND_DATASET_H

#include "frontend/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc::data {

//===----------------------------------------------------------------------===//
// llm.c token shards
//===----------------------------------------------------------------------===//

/// An llm.c token shard: a header of 256 little-endian int32 (magic
/// 20240520, version 1, token count), then the tokens as uint16.
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;

/// Reads a shard, checking magic, version, that the file holds exactly the
/// tokens the header counts, and (when vocabSize > 0) that every id is below
/// vocabSize. Errors read "<path>: <what is wrong>".
llvm::Expected<std::vector<int32_t>> readShard(llvm::StringRef path,
                                               int32_t vocabSize = 0);
/// The same from a shard's bytes in memory; `name` starts every error.
llvm::Expected<std::vector<int32_t>>
parseShard(llvm::StringRef bytes, llvm::StringRef name, int32_t vocabSize = 0);

/// Writes `tokens` as a shard at `path`, atomically. Every token must fit
/// in uint16.
llvm::Error writeShard(llvm::StringRef path, llvm::ArrayRef<int32_t> tokens);

/// Whether `path` names a shard: its name ends in ".bin".
bool isShardPath(llvm::StringRef path);

/// The files a pattern names: itself if it has no glob characters (* ? [),
/// else the files of its directory whose names match its last component,
/// sorted. An error if a pattern matches nothing.
llvm::Expected<std::vector<std::string>>
expandFilePatterns(llvm::ArrayRef<std::string> patterns);

//===----------------------------------------------------------------------===//
// Token sources and the split
//===----------------------------------------------------------------------===//

/// The tokens of `paths` (already expanded), concatenated: shards as stored
/// (ids checked against the tokenizer's vocabulary), text files encoded with
/// `tokenizer`. When the tokenizer has an end-of-text token, each text file
/// is preceded by it (as llm.c's data scripts do with each document).
llvm::Expected<std::vector<int32_t>>
loadTokens(llvm::ArrayRef<std::string> paths, const Tokenizer &tokenizer);

/// The text of a document list, encoded as loadTokens does for text files.
std::vector<int32_t> encodeDocuments(llvm::ArrayRef<llvm::StringRef> texts,
                                     const Tokenizer &tokenizer);

struct DataOptions {
  /// Text files or llm.c shards (*.bin), or glob patterns of them.
  std::vector<std::string> trainFiles;
  /// Validation files. When empty, the last valFraction of the training
  /// tokens is held out instead.
  std::vector<std::string> valFiles;
  /// In [0, 1): the held-out fraction when there are no valFiles.
  double valFraction = 0.1;
};

/// Token streams for training and validation; they share no token. `val` is
/// empty when there are no valFiles and valFraction is 0.
struct TokenSplits {
  std::vector<int32_t> train;
  std::vector<int32_t> val;
};

/// Loads and splits as `options` says.
llvm::Expected<TokenSplits> loadTokenSplits(const DataOptions &options,
                                            const Tokenizer &tokenizer);

/// The last `fraction` of `tokens` (rounded down) as val, the rest as train.
TokenSplits splitTokens(std::vector<int32_t> tokens, double fraction);

//===----------------------------------------------------------------------===//
// Batches
//===----------------------------------------------------------------------===//

/// One batch, row-major [batch, seqLen]: targets[b][t] = the token after
/// tokens[b][t] in the stream.
struct Batch {
  int64_t batch = 0;
  int64_t seqLen = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

/// Where a loader is: the next window is the index-th of epoch `epoch`'s
/// order. Saving it and restoring it with setPosition continues exactly.
struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t index = 0;

  bool operator==(const LoaderPosition &other) const {
    return epoch == other.epoch && index == other.index;
  }
  /// {"epoch": E, "index": I}
  llvm::json::Value toJson() const;
  static llvm::Expected<LoaderPosition> fromJson(const llvm::json::Value &value);
};

/// Batches of windows over a token stream (see the file comment).
class BatchLoader {
public:
  /// Shares `tokens` (no copy). An error when the stream has fewer than
  /// batch windows, i.e. fewer than batch * seqLen + 1 tokens.
  static llvm::Expected<BatchLoader>
  create(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t batch,
         int64_t seqLen, uint64_t seed, bool shuffle);
  /// Copies `tokens`.
  static llvm::Expected<BatchLoader> create(llvm::ArrayRef<int32_t> tokens,
                                            int64_t batch, int64_t seqLen,
                                            uint64_t seed, bool shuffle);

  /// Fills `out` with the next batch and advances.
  void next(Batch &out);

  LoaderPosition position() const { return current; }
  /// An error if index is not below windowsPerEpoch().
  llvm::Error setPosition(LoaderPosition position);

  int64_t windowsPerEpoch() const { return numWindows; }
  /// Whole batches in one epoch (windowsPerEpoch() / batch, at least 1).
  int64_t batchesPerEpoch() const { return numWindows / batchSize; }
  int64_t batch() const { return batchSize; }
  int64_t seqLen() const { return sequenceLength; }
  int64_t numTokens() const { return static_cast<int64_t>(stream->size()); }

  /// Epoch `epoch`'s order of windows: a permutation of 0..windows-1 that
  /// depends only on (seed, epoch) (the identity when not shuffling).
  std::vector<uint32_t> epochOrder(uint64_t epoch) const;

private:
  BatchLoader() = default;
  void startEpoch(uint64_t epoch);

  std::shared_ptr<const std::vector<int32_t>> stream;
  int64_t batchSize = 0;
  int64_t sequenceLength = 0;
  int64_t numWindows = 0;
  uint64_t seed = 0;
  bool shuffle = false;
  LoaderPosition current;
  std::vector<uint32_t> order; // epochOrder(current.epoch)
};

} // namespace llmc::data

#endif // LLMC_FRONTEND_DATASET_H
