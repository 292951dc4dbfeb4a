// Loading a session's token data and binding it to the trainer.
#include "training/Data.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

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
  data::DataOptions dataOptions;
  dataOptions.trainFiles = config.data.train;
  dataOptions.valFiles = config.data.val;
  dataOptions.valFraction = config.data.valFraction;
  llvm::Expected<data::TokenSplits> splits =
      data::loadTokenSplits(dataOptions, **tokenizer);
  if (!splits)
    return splits.takeError();
  TrainingData result;
  result.trainTokens =
      std::make_shared<const std::vector<int32_t>>(std::move(splits->train));
  result.valTokens =
      std::make_shared<const std::vector<int32_t>>(std::move(splits->val));
  llvm::Expected<data::BatchLoader> trainLoader = data::BatchLoader::create(
      result.trainTokens, config.microBatchSize, config.seqLen, config.seed,
      /*shuffle=*/true);
  if (!trainLoader)
    return llvm::createStringError(
        "training data (" + llvm::join(config.data.train, ", ") +
        "): " + llvm::toString(trainLoader.takeError()));
  result.train = std::make_shared<data::BatchLoader>(std::move(*trainLoader));
  if (int64_t(result.valTokens->size()) >
      config.microBatchSize * config.seqLen) {
    llvm::Expected<data::BatchLoader> valLoader = data::BatchLoader::create(
        result.valTokens, config.microBatchSize, config.seqLen, config.seed,
        /*shuffle=*/false);
    if (!valLoader)
      return llvm::createStringError("validation data: " +
                                     llvm::toString(valLoader.takeError()));
    result.val = std::make_shared<data::BatchLoader>(std::move(*valLoader));
  } else if (config.evalSteps > 0) {
    llvm::errs() << "llmc run: warning: "
                 << (result.valTokens->empty()
                         ? "no validation data (set data.val or "
                           "data.val_fraction)"
                         : "too little validation data for one batch")
                 << "; no validation loss\n";
  }

  result.tokenizer = std::move(*tokenizer);
  return result;
}

runtime::TrainerData training::bindTrainerData(const TrainingData &data,
                                               int64_t fullSeqLen) {
  runtime::TrainerData trainerData;
  trainerData.next = [train = data.train,
                      fullSeqLen](int64_t seqLen, std::vector<int32_t> &tokens,
                                  std::vector<int32_t> &targets) {
    data::Batch batch;
    train->next(batch);
    tokens.clear();
    targets.clear();
    // Sequence-length warmup reads whole windows and keeps their start.
    for (int64_t b = 0; b < batch.batch; ++b) {
      auto row = [&](const std::vector<int32_t> &v) {
        return llvm::ArrayRef<int32_t>(v).slice(b * fullSeqLen, seqLen);
      };
      llvm::append_range(tokens, row(batch.tokens));
      llvm::append_range(targets, row(batch.targets));
    }
  };
  trainerData.savePosition = [train = data.train]() {
    return jsonText(train->position().toJson());
  };
  trainerData.restorePosition =
      [train = data.train](llvm::StringRef text) -> llvm::Error {
    llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
    if (!json)
      return json.takeError();
    llvm::Expected<data::LoaderPosition> position =
        data::LoaderPosition::fromJson(*json);
    if (!position)
      return position.takeError();
    return train->setPosition(*position);
  };
  if (std::shared_ptr<data::BatchLoader> val = data.val) {
    trainerData.valBatches = val->batchesPerEpoch();
    trainerData.valBatch = [val](int64_t index, std::vector<int32_t> &tokens,
                                 std::vector<int32_t> &targets) {
      llvm::consumeError(val->setPosition({0, uint64_t(index * val->batch())}));
      data::Batch batch;
      val->next(batch);
      tokens = std::move(batch.tokens);
      targets = std::move(batch.targets);
    };
  }
  const data::Tokenizer &tok = *data.tokenizer;
  if (std::optional<int32_t> eot = tok.endOfTextId())
    trainerData.samplePrompt = {*eot};
  else
    trainerData.samplePrompt = tok.encode("\n");
  trainerData.decode = [&tok](int32_t id) { return tok.decodeToken(id); };
  trainerData.describeMemory =
      [trainTokens = data.trainTokens,
       valTokens = data.valTokens](runtime::MemoryLedger &ledger) {
        for (const auto &tokens : {trainTokens, valTokens})
          ledger.add("data loader (token buffers)",
                     runtime::MemoryLedger::Source::Malloc, tokens->data(),
                     int64_t(tokens->capacity() * sizeof(int32_t)));
      };
  return trainerData;
}
