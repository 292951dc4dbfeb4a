// The token data of a session: the tokenizer, the training and validation
// splits, their batch loaders, and the callbacks the trainer reads them by.
#ifndef LLMC_TRAINING_DATA_H
#define LLMC_TRAINING_DATA_H

#include "frontend/Dataset.h"
#include "frontend/Tokenizer.h"
#include "frontend/TrainConfig.h"
#include "runtime/Train/Trainer.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace llmc::training {

using mlir::llmc::TrainingConfig;

struct TrainingData {
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::shared_ptr<const std::vector<int32_t>> trainTokens, valTokens;
  std::shared_ptr<data::BatchLoader> train;
  /// Null when there is too little validation data for one batch.
  std::shared_ptr<data::BatchLoader> val;
};

/// Reads the tokenizer and the data of `config` and makes the loaders; a
/// warning when evaluation is asked for but there is no validation batch.
llvm::Expected<TrainingData> loadTrainingData(const TrainingConfig &config);

/// The trainer's view of `data` (which must outlive it): the next batch at
/// a sequence length (whole windows of `fullSeqLen` cut to their start),
/// the loader's position for checkpoints, validation batches, the sample
/// prompt and the token decoder.
runtime::TrainerData bindTrainerData(const TrainingData &data,
                                     int64_t fullSeqLen);

} // namespace llmc::training

#endif // LLMC_TRAINING_DATA_H
