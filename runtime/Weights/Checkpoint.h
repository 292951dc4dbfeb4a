// Training checkpoints: parameters, optimizer state and everything else a
// run needs to continue exactly where it stopped (step, consumed samples,
// the data loader's position), plus the parts of the config that must
// match to resume.
//
// File layout (little-endian):
//   0   "LLMCCKPT"                     magic, 8 bytes
//   8   u32 version (1), u32 0
//   16  u64 header bytes H, u64 XXH3-64 of the header
//   32  header: JSON (state, config sections, and per tensor its name,
//       dtype, shape, offset, bytes and XXH3-64), padded with spaces to 64
//   ... tensor data, each tensor 64-byte aligned, zero padding between
// The header records the file's exact size, so every byte is checked on
// load: the fixed prefix by value, the header and each tensor by checksum,
// the padding for zeros. A truncated, corrupted or foreign file is refused
// with an error naming it; nothing of it is used.
#ifndef LLMC_RUNTIME_CHECKPOINT_H
#define LLMC_RUNTIME_CHECKPOINT_H

#include "runtime/Weights/Weights.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace llmc::runtime {

struct Checkpoint {
  /// Optimizer steps done: a resumed run continues with update `step`.
  int64_t step = 0;
  /// Sequences and tokens trained on so far (the batch ramp-up reads the
  /// first).
  int64_t consumedSamples = 0;
  int64_t consumedTokens = 0;
  uint64_t seed = 0;
  /// The learning rate of the last update (for people; the schedule is a
  /// function of the step).
  double lr = 0;
  /// The training data loader's position, as JSON text.
  std::string loaderPosition;
  /// The training guard's state (runtime/Train/TrainingGuard.h) as JSON text;
  /// empty while it has none.
  std::string guard;
  /// Config sections that must match to resume ("model", "optimizer",
  /// "data"), as canonical `key: value` lines; and their hash.
  std::map<std::string, std::string> config;
  /// Parameters and optimizer state (every persistent tensor but the
  /// gradients, which are zero between steps), by name.
  TensorMap tensors;
  /// A ZeRO run's checkpoint: its blocks are in one file per rank next to
  /// this one (`tensors` has the rest), and this JSON says which (see
  /// ShardManifest). Empty for a checkpoint of one file.
  std::string manifest;
};

/// The per-rank files of a ZeRO checkpoint, as its main file records them:
/// the world size, each rank's file (name, bytes, XXH3-64 of the whole
/// file) and, per block tensor (`shard.<name>`), the full tensor it is a
/// block of (PyTorch FSDP's flat padded layout: rank r holds elements
/// [r*s, (r+1)*s) of the flattened tensor padded to ranks*s).
struct ShardManifest {
  struct File {
    int rank = 0;
    std::string name; // in the main file's directory
    int64_t bytes = 0;
    uint64_t xxh3 = 0;
  };
  struct Block {
    std::string full;           // the full tensor's name
    std::vector<int64_t> shape; // and shape
  };
  int worldSize = 1;
  std::vector<File> files;
  std::map<std::string, Block> blocks; // by block name (shard.<full>)

  std::string toJson() const;
  static llvm::Expected<ShardManifest> fromJson(llvm::StringRef text);
};

/// "step-000100.rank-3-of-8.ckpt".
std::string checkpointShardFileName(int64_t step, int rank, int worldSize);

/// The full tensors of a ZeRO checkpoint's blocks: reads every rank's file
/// the manifest of `main` (read from `mainPath`) lists, checks its size
/// and checksum, and joins each tensor's blocks in rank order. A missing,
/// truncated or corrupt rank file is an error naming it and its rank.
llvm::Expected<TensorMap> readShardedTensors(const Checkpoint &main,
                                             llvm::StringRef mainPath);

/// Replaces a ZeRO checkpoint's blocks by the full tensors
/// (readShardedTensors) and clears its manifest, so that `checkpoint`
/// holds every parameter and optimizer state whole, whatever world size
/// and stage it was saved with. A checkpoint of one file is left as it is.
/// Resume, the weights loader and `llmc convert` all read through this.
llvm::Error joinShardedTensors(Checkpoint &checkpoint, llvm::StringRef path);

/// readCheckpoint, then joinShardedTensors.
llvm::Expected<Checkpoint> readFullCheckpoint(llvm::StringRef path);

/// Size and XXH3-64 of a whole file, for the manifest.
llvm::Expected<std::pair<int64_t, uint64_t>> fileDigest(llvm::StringRef path);

/// XXH3-64 of the config sections, in name order.
uint64_t hashConfigSections(const std::map<std::string, std::string> &config);

/// Empty when `current` matches `saved`, else what differs, one line per
/// differing key: "optimizer.lr: 0.001 in the checkpoint, 0.0003 now".
std::string describeConfigDifference(
    const std::map<std::string, std::string> &saved,
    const std::map<std::string, std::string> &current);

/// A tensor a checkpoint writes from where it lives, without a copy of the
/// whole state: `read` calls its argument with the tensor's dtype, shape
/// and bytes (valid during the call). The writer reads each tensor twice:
/// to checksum it for the header, then to write it.
struct StreamedTensor {
  using Consumer = llvm::function_ref<llvm::Error(
      kir::DType, llvm::ArrayRef<int64_t>, llvm::ArrayRef<char>)>;
  std::string name;
  std::function<llvm::Error(Consumer)> read;
};

/// Writes atomically (temporary file, fsync, rename): the checkpoint's
/// tensors and `streamed` (names must not repeat), in name order.
llvm::Error writeCheckpoint(llvm::StringRef path, const Checkpoint &checkpoint,
                            llvm::ArrayRef<StreamedTensor> streamed = {});

/// Whether `head` (a file's first bytes, 33 or more for a yes) has the
/// fixed prefix of an llmc checkpoint past its magic: version, zero and a
/// JSON header at byte 32. A file that does but lacks the magic is a
/// damaged checkpoint, not another format.
bool hasCheckpointLayout(llvm::StringRef head);

/// "'LLMCCKPT'" or, where bytes are not printable, their hex: how an error
/// shows a file's first bytes.
std::string describeMagic(llvm::StringRef head);

/// Reads and verifies a whole checkpoint. Errors start with the path.
llvm::Expected<Checkpoint> readCheckpoint(llvm::StringRef path);
/// The same from a file's bytes in memory; `name` starts every error.
llvm::Expected<Checkpoint> parseCheckpoint(llvm::StringRef bytes,
                                           llvm::StringRef name);

/// "step-000100.ckpt".
std::string checkpointFileName(int64_t step);

/// The checkpoints in `dir`, oldest (lowest step) first, as paths. A
/// missing directory has none.
std::vector<std::string> listCheckpoints(llvm::StringRef dir);

/// Removes all but the last `keep` checkpoints of `dir` (keep 0: none),
/// with their per-rank files.
llvm::Error pruneCheckpoints(llvm::StringRef dir, int64_t keep);

/// Whether `name` is a temporary file of writeCheckpoint's (through
/// kir::writeFileAtomically): a checkpoint or per-rank file name followed
/// by ".tmp-" and 8 characters ("step-000100.ckpt.tmp-1a2b3c4d").
bool isCheckpointTemporary(llvm::StringRef name);

/// Removes what a checkpoint write that never finished (SIGKILL, a node
/// lost, a disk full) left in `dir`: its temporary files, and ZeRO rank
/// files without their main file (rank 0 writes it last); returns their
/// paths. Call it before the run writes there: another writer's files in
/// progress look the same.
llvm::Expected<std::vector<std::string>>
removeInterruptedCheckpointFiles(llvm::StringRef dir);

/// Checks that the per-rank files a ZeRO checkpoint's manifest lists exist
/// with the sizes and XXH3-64 it records (nothing for a checkpoint of one
/// file). The error names the file, its rank and what is wrong.
llvm::Error verifyShardFiles(const Checkpoint &main, llvm::StringRef mainPath);

/// A checkpoint of `dir` that --resume skipped, and why.
struct DamagedCheckpoint {
  std::string path;
  std::string reason;
};

/// The newest checkpoint of `dir` that reads and verifies completely (its
/// per-rank files too), and its path; the newer ones that do not go to
/// `damaged`, newest first. An error when `dir` has no checkpoint or
/// none is good (naming each and why).
llvm::Expected<std::pair<std::string, Checkpoint>>
readLatestGoodCheckpoint(llvm::StringRef dir,
                         std::vector<DamagedCheckpoint> &damaged);

/// Renames a damaged checkpoint and its per-rank files to "<name>.damaged"
/// (kept for inspection, out of listCheckpoints and pruning), so a run
/// resumed from an older one neither prunes its own new checkpoints in
/// favour of it nor resumes from it again.
llvm::Error setAsideCheckpoint(llvm::StringRef path);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CHECKPOINT_H
