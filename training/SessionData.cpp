// Loading a session's token data, binding it to the trainer, tracing it.
#include "training/SessionData.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <set>

using namespace llmc;
using namespace llmc::training;

namespace {
std::string jsonText(const llvm::json::Value &value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value;
  return text;
}
} // namespace

/// The loader's options from the config (the vocabulary limit is the
/// caller's: the tokenizer's).
static data::LoaderOptions loaderOptionsOf(const TrainingConfig &config) {
  data::LoaderOptions options;
  options.batch = config.microBatchSize;
  options.seqLen = config.seqLen;
  options.seed = config.seed;
  options.shuffleWindows = config.data.shuffleWindows;
  return options;
}

int64_t TrainingData::trainTokens() const {
  int64_t total = 0;
  for (const data::Source &source : train->sources())
    total += source.tokens();
  return total;
}

data::DataSpec training::dataSpecOf(const TrainingConfig &config) {
  data::DataSpec spec;
  if (config.data.blend.empty()) {
    data::SourceSpec source;
    source.name = config.data.train.empty() ? "" : config.data.train.front();
    source.patterns = config.data.train;
    spec.train.push_back(std::move(source));
  }
  for (const mlir::llmc::TrainSourceConfig &blended : config.data.blend)
    spec.train.push_back({blended.name, blended.paths, blended.weight});
  spec.val = config.data.val;
  spec.valFraction = config.data.valFraction;
  return spec;
}

llvm::Expected<TrainingData>
training::loadTrainingData(const TrainingConfig &config) {
  llvm::Expected<std::unique_ptr<data::Tokenizer>> tokenizer =
      data::loadTokenizer(config.data.tokenizer);
  if (!tokenizer)
    return tokenizer.takeError();
  if (config.modelMlirPath.empty() &&
      (*tokenizer)->vocabSize() > config.model.vocabSize)
    return llvm::createStringError(
        llvm::formatv("the tokenizer ({0}) has {1} tokens, more than "
                      "the model's vocab_size ({2})",
                      (*tokenizer)->describe(), (*tokenizer)->vocabSize(),
                      config.model.vocabSize)
            .str());
  llvm::Expected<data::OpenedSources> opened =
      data::openSources(dataSpecOf(config), tokenizer->get());
  if (!opened)
    return opened.takeError();
  // Ids are checked against the tokenizer's vocabulary (at most the
  // model's) as each window is read: a scan at open would read it all.
  data::LoaderOptions options = loaderOptionsOf(config);
  options.vocabLimit = (*tokenizer)->vocabSize();
  TrainingData result;
  result.valTokens = opened->valTokens();
  std::vector<data::Segment> valSegments = std::move(opened->val);
  llvm::Expected<std::unique_ptr<data::Loader>> loader =
      data::Loader::create(std::move(opened->train), options);
  if (!loader)
    return loader.takeError();
  result.train = std::move(*loader);
  auto val = std::make_shared<data::ValidationBatches>(
      std::move(valSegments), config.microBatchSize, config.seqLen,
      options.vocabLimit);
  if (val->batches() > 0) {
    result.val = std::move(val);
  } else if (config.evalSteps > 0) {
    llvm::errs() << "llmc run: warning: "
                 << (result.valTokens == 0
                         ? "no validation data (set data.val or "
                           "data.val_fraction)"
                         : "too little validation data for one batch")
                 << "; no validation loss\n";
  }
  result.tokenizer = std::move(*tokenizer);
  return result;
}

int64_t training::windowsOfRun(const TrainingConfig &config) {
  ::llmc::BatchSchedule schedule = config.batchSchedule();
  int64_t samples = 0;
  for (int64_t step = 0; step < config.maxSteps; ++step)
    samples += schedule.at(step, samples).globalBatch;
  return samples;
}

std::vector<SourceSummary>
training::summarizeSources(const data::Loader &loader, int64_t runWindows) {
  std::vector<SourceSummary> result;
  for (size_t s = 0; s < loader.sources().size(); ++s) {
    const data::Source &source = loader.sources()[s];
    SourceSummary summary;
    summary.name = source.name;
    summary.files = int64_t(source.files.size());
    summary.tokens = source.tokens();
    summary.windows = loader.windowsPerEpoch(int(s));
    summary.windowTokens = loader.options().seqLen + 1;
    summary.weight = source.weight;
    summary.share = loader.shares()[s];
    summary.runWindows = runWindows;
    summary.epochs =
        double(runWindows) * summary.share / double(summary.windows);
    result.push_back(std::move(summary));
  }
  return result;
}

llvm::Expected<std::vector<SourceSummary>>
training::summarizeDataOf(const TrainingConfig &config) {
  llvm::Expected<std::unique_ptr<data::Tokenizer>> tokenizer =
      data::loadTokenizer(config.data.tokenizer);
  if (!tokenizer)
    return tokenizer.takeError();
  llvm::Expected<data::OpenedSources> opened =
      data::openSources(dataSpecOf(config), tokenizer->get());
  if (!opened)
    return opened.takeError();
  data::LoaderOptions options = loaderOptionsOf(config);
  llvm::Expected<std::unique_ptr<data::Loader>> loader =
      data::Loader::create(std::move(opened->train), options);
  if (!loader)
    return loader.takeError();
  return summarizeSources(**loader, windowsOfRun(config));
}

void training::describeSources(llvm::ArrayRef<SourceSummary> sources,
                               llvm::raw_ostream &os) {
  for (const SourceSummary &s : sources)
    os << llvm::formatv("  source '{0}': {1} file{2}, {3} tokens, {4} "
                        "windows of {5} tokens, weight {6} ({7:f1}%): "
                        "{8:f2} epochs of it in the run's {9} windows\n",
                        s.name, s.files, s.files == 1 ? "" : "s", s.tokens,
                        s.windows, s.windowTokens, s.weight, 100 * s.share,
                        s.epochs, s.runWindows);
}

llvm::Expected<std::shared_ptr<DataTrace>>
DataTrace::open(llvm::StringRef dir, int rank) {
  if (std::error_code error = llvm::sys::fs::create_directories(dir))
    return llvm::createStringError(error, "--data-trace: cannot create '" +
                                              dir + "': " + error.message());
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "rank-" + std::to_string(rank) + ".tsv");
  std::error_code error;
  auto file = std::make_unique<llvm::raw_fd_ostream>(
      path, error, llvm::sys::fs::OF_Append);
  if (error)
    return llvm::createStringError(error, "--data-trace: cannot open '" +
                                              path + "': " + error.message());
  auto trace = std::make_shared<DataTrace>();
  trace->file = std::move(file);
  return trace;
}

void DataTrace::write(int64_t step, int64_t microBatch,
                      const data::Loader &loader,
                      llvm::ArrayRef<data::WindowRecord> records) {
  for (size_t row = 0; row < records.size(); ++row) {
    const data::WindowRecord &r = records[row];
    *file << step << '\t' << microBatch << '\t' << row << '\t' << r.window
          << '\t' << loader.sources()[r.source].name << '\t'
          << r.file->path() << '\t' << r.start << '\n';
  }
  // Whole micro-batches reach the file, so a run killed keeps whole lines.
  file->flush();
}

namespace {
/// The loader's memory in the end-of-run report: the tokens it holds on the
/// heap (text encoded at start), its shuffle orders and window buffer, by
/// their blocks (the report measures their resident pages); the token
/// files' mapped pages are among the report's mapped files (reads drop
/// them).
void describeLoaderMemory(const TrainingData &data,
                          runtime::MemoryLedger &ledger) {
  std::set<const data::TokenFile *> files;
  for (const data::Source &source : data.train->sources())
    for (const data::Segment &segment : source.segments)
      files.insert(segment.file.get());
  if (data.val)
    for (const data::Segment &segment : data.val->segments())
      files.insert(segment.file.get());
  for (const data::TokenFile *file : files) {
    auto [block, bytes] = file->tokenBlock();
    ledger.add("data loader (token buffers)",
               runtime::MemoryLedger::Source::Malloc, block, bytes);
  }
  data.train->describeMemory([&](const void *block, int64_t bytes) {
    ledger.add("data loader (token buffers)",
               runtime::MemoryLedger::Source::Malloc, block, bytes);
  });
}
} // namespace

runtime::TrainerData
training::bindTrainerData(const TrainingData &data,
                          std::shared_ptr<DataTrace> trace) {
  runtime::TrainerData trainerData;
  std::shared_ptr<data::Loader> train = data.train;
  trainerData.next = [train, trace](int64_t step, int64_t microBatch,
                                    int64_t seqLen,
                                    std::vector<int32_t> &tokens,
                                    std::vector<int32_t> &targets)
      -> llvm::Error {
    // Sequence-length warmup reads whole windows and keeps their start.
    std::vector<data::WindowRecord> records;
    if (llvm::Error err =
            train->next(seqLen, tokens, targets, trace ? &records : nullptr))
      return err;
    if (trace)
      trace->write(step, microBatch, *train, records);
    return llvm::Error::success();
  };
  trainerData.skip = [train](int64_t windows) { train->skip(windows); };
  trainerData.savePosition = [train]() {
    return jsonText(train->position());
  };
  trainerData.restorePosition = [train](llvm::StringRef text) -> llvm::Error {
    llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
    if (!json)
      return json.takeError();
    return train->setPosition(*json);
  };
  if (std::shared_ptr<data::ValidationBatches> val = data.val) {
    trainerData.valBatches = val->batches();
    trainerData.valBatch = [val](int64_t index, std::vector<int32_t> &tokens,
                                 std::vector<int32_t> &targets) {
      return val->read(index, tokens, targets);
    };
  }
  const data::Tokenizer &tok = *data.tokenizer;
  if (std::optional<int32_t> eot = tok.endOfTextId())
    trainerData.samplePrompt = {*eot};
  else
    trainerData.samplePrompt = tok.encode("\n");
  trainerData.decode = [&tok](int32_t id) { return tok.decodeToken(id); };
  trainerData.describeMemory = [&data](runtime::MemoryLedger &ledger) {
    describeLoaderMemory(data, ledger);
  };
  return trainerData;
}
