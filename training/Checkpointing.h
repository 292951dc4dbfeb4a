// A session's checkpoints around the trainer: which checkpoint a resume
// starts from (checked against the config before anything is compiled)
// and the output directory made ready once everything is checked.
#ifndef LLMC_TRAINING_CHECKPOINTING_H
#define LLMC_TRAINING_CHECKPOINTING_H

#include "frontend/TrainConfig.h"
#include "runtime/Weights/Checkpoint.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llmc::training {

using mlir::llmc::TrainingConfig;

/// What a run resumes from.
struct ResumePoint {
  /// The checkpoint file; empty for a fresh run.
  std::string path;
  std::optional<runtime::Checkpoint> checkpoint;
  /// Newer checkpoints found damaged (--resume): set aside when OUT is
  /// made ready.
  std::vector<runtime::DamagedCheckpoint> damaged;
  /// The config sections a checkpoint must match (resumeSections).
  std::map<std::string, std::string> sections;
};

/// How a run starts: fresh, from a checkpoint file, or from the latest
/// good checkpoint in OUT.
struct ResumeRequest {
  std::string path;    // a checkpoint file
  bool latest = false; // the newest good one in OUT/checkpoints
};

/// OUT/checkpoints.
std::string checkpointDirectory(const TrainingConfig &config);

/// Finds and reads the checkpoint to resume from and checks that its config
/// matches; a fresh run into an OUT that holds checkpoints is an error.
/// `warn`: say which damaged checkpoints are skipped (rank 0).
llvm::Expected<ResumePoint> findResumePoint(const TrainingConfig &config,
                                            const ResumeRequest &request,
                                            bool warn);

/// Makes OUT ready (rank 0): creates it, removes what an interrupted write
/// left, sets damaged checkpoints aside and writes OUT/config.yaml.
llvm::Error prepareOutputDirectory(const TrainingConfig &config,
                                   const ResumePoint &resume,
                                   llvm::raw_ostream &out);

} // namespace llmc::training

#endif // LLMC_TRAINING_CHECKPOINTING_H
