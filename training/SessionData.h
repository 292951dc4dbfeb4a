// The token data of a session: the tokenizer, the training loader and the
// validation batches made from the config, the callbacks the trainer reads
// them by, and the per-rank trace of the windows read (--data-trace).
#ifndef LLMC_TRAINING_SESSIONDATA_H
#define LLMC_TRAINING_SESSIONDATA_H

#include "frontend/Tokenizer.h"
#include "frontend/TrainConfig.h"
#include "runtime/Train/Trainer.h"
#include "training/Data/Loader.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc::training {

using mlir::llmc::TrainingConfig;

struct TrainingData {
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::shared_ptr<data::Loader> train;
  /// Null when there is too little validation data for one batch.
  std::shared_ptr<data::ValidationBatches> val;
  int64_t valTokens = 0;
  int64_t trainTokens() const;
};

/// The data spec a config describes: its sources (one, or the blend), the
/// validation files or fraction.
data::DataSpec dataSpecOf(const TrainingConfig &config);

/// Reads the tokenizer, opens the data of `config` (headers only) and makes
/// the loader; a warning when evaluation is asked for but there is no
/// validation batch.
llvm::Expected<TrainingData> loadTrainingData(const TrainingConfig &config);

/// The training windows a run of `config` takes from step 0 to max_steps
/// (the batch ramp-up counted).
int64_t windowsOfRun(const TrainingConfig &config);

/// What the run's start and `llmc plan` report of a training source.
struct SourceSummary {
  std::string name;
  int64_t files = 0, tokens = 0;
  int64_t windows = 0, windowTokens = 0; // per epoch; seq_len + 1
  double weight = 1, share = 1;          // as given; normalised
  int64_t runWindows = 0;                // the run's, all sources
  double epochs = 0; // of this source in the run's windows
};
std::vector<SourceSummary> summarizeSources(const data::Loader &loader,
                                            int64_t runWindows);
/// The same for a config's data, opening only the files' headers (text
/// files are encoded): what `llmc plan` shows.
llvm::Expected<std::vector<SourceSummary>>
summarizeDataOf(const TrainingConfig &config);

/// One line per training source: files, tokens, windows, weight and the
/// epochs of it the run sees ("  source 'web': ...").
void describeSources(llvm::ArrayRef<SourceSummary> sources,
                     llvm::raw_ostream &os);

/// `--data-trace DIR`: DIR/rank-R.tsv gets a line per training window this
/// rank reads: step, micro-batch, row, window (k), source, file, token
/// offset (tab separated).
class DataTrace {
public:
  static llvm::Expected<std::shared_ptr<DataTrace>> open(llvm::StringRef dir,
                                                         int rank);
  void write(int64_t step, int64_t microBatch, const data::Loader &loader,
             llvm::ArrayRef<data::WindowRecord> records);

private:
  std::unique_ptr<llvm::raw_fd_ostream> file;
};

/// The trainer's view of `data` (which must outlive it): the next batch at
/// a sequence length (whole windows cut to their start),
/// other ranks' batches skipped unread, the loader's position for
/// checkpoints, validation batches, the sample prompt and the token
/// decoder; `trace` (may be null) records the windows read.
runtime::TrainerData bindTrainerData(const TrainingData &data,
                                     std::shared_ptr<DataTrace> trace);

} // namespace llmc::training

#endif // LLMC_TRAINING_SESSIONDATA_H
