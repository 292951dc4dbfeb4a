// `llmc data prepare`'s state file (DIR/PREFIX.prepare.json): what a run
// was asked to do and the shards it finished, so that a rerun continues
// after the last one or refuses when the options or inputs changed.
// Internal to training/Data/Prepare.cpp (and its tests).
#ifndef LLMC_TRAINING_DATA_PREPARESTATE_H
#define LLMC_TRAINING_DATA_PREPARESTATE_H

#include "training/Data/PrepareInput.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::data {

class Tokenizer;

/// A finished shard as the state file records it.
struct ShardRecord {
  std::string file; // the name, in the output directory
  int64_t tokens = 0;
  int64_t documents = 0;
  int64_t emptyDocuments = 0; // skipped up to its end, since the last shard
  InputPosition next;         // where the next shard's input starts
};

struct PrepareState {
  /// The options, tokenizer and inputs: equal for a run to continue.
  llvm::json::Object identity;
  std::vector<ShardRecord> shards;
  bool complete = false;
};

/// The identity of a run: the options that shape the output (not the
/// thread count), the tokenizer (spec, size, end-of-text id and a hash of
/// its tokens' bytes) and the inputs (absolute path, size, mtime).
llvm::json::Object runIdentity(const PrepareOptions &options,
                               const Tokenizer &tokenizer,
                               const std::vector<InputFile> &inputs);

/// Why `stored` (from the state file) is not `current`: the first key
/// whose value differs, both values shown; empty when they are equal.
std::string identityDifference(const llvm::json::Object &stored,
                               const llvm::json::Object &current);

llvm::json::Value stateToJson(const PrepareState &state);
/// Reads a state file; errors name `path` and the field.
llvm::Expected<PrepareState> readState(llvm::StringRef path);
/// Writes `state` to `path` atomically.
llvm::Error writeState(llvm::StringRef path, const PrepareState &state);

} // namespace llmc::data

#endif // LLMC_TRAINING_DATA_PREPARESTATE_H
