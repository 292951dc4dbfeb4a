// Generation with a KV cache over the @prefill and @decode programs.
#include "runtime/Serve/CachedGenerate.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>

using namespace llmc;
using namespace llmc::runtime;

namespace {
const kir::Buffer *findBinding(const kir::Program &program,
                               const std::vector<kir::Binding> &list,
                               llvm::StringRef name) {
  for (const kir::Binding &binding : list)
    if (binding.name == name)
      return &program.buffers[binding.buffer];
  return nullptr;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}
} // namespace

llvm::Expected<CachedGenerator> CachedGenerator::create(Executor &prefill,
                                                        Executor &decode) {
  CachedGenerator generator;
  generator.prefillExec = &prefill;
  generator.decodeExec = &decode;
  int64_t batches[2], lengths[2], vocabs[2];
  Executor *executors[] = {&prefill, &decode};
  for (auto [index, executor] : llvm::enumerate(executors)) {
    const kir::Program &program = executor->program();
    const kir::Buffer *tokens =
        findBinding(program, program.inputs, "tokens");
    const kir::Buffer *positions =
        findBinding(program, program.inputs, "positions");
    const kir::Buffer *logits =
        findBinding(program, program.outputs, "logits");
    if (!tokens || !positions || !logits ||
        tokens->dtype != kir::DType::I32 || tokens->shape.size() != 2 ||
        positions->shape != tokens->shape || logits->shape.size() != 2 ||
        logits->shape[0] != tokens->shape[0])
      return llvm::createStringError(
          "@" + program.function +
          " is not an inference program: it needs i32 tokens and positions "
          "[B, T] and returns logits [B, V] (build it with "
          "buildInferenceModule)");
    batches[index] = tokens->shape[0];
    lengths[index] = tokens->shape[1];
    vocabs[index] = logits->shape[1];
  }
  if (batches[0] != batches[1] || vocabs[0] != vocabs[1] || lengths[1] != 1)
    return llvm::createStringError(
        "@prefill and @decode disagree: batch, vocabulary or decode length");
  generator.batchSize = batches[0];
  generator.chunk = lengths[0];
  generator.vocabSize = vocabs[0];
  // The cache length: a state's third dim ([B, H, S, D]).
  for (const kir::Binding &state : decode.program().states) {
    const kir::Buffer &buffer = decode.program().buffers[state.buffer];
    if (llvm::StringRef(state.name).starts_with("cache.") &&
        buffer.shape.size() == 4)
      generator.slots = buffer.shape[2];
  }
  if (generator.slots == 0)
    return llvm::createStringError("@decode has no KV cache state");
  return generator;
}

llvm::Expected<std::vector<float>>
CachedGenerator::step(Executor &executor, int64_t length,
                      llvm::ArrayRef<int32_t> tokens,
                      llvm::ArrayRef<int32_t> positions) {
  llvm::StringRef name = executor.program().function;
  if (int64_t(tokens.size()) != batchSize * length ||
      int64_t(positions.size()) != batchSize * length)
    return llvm::createStringError(llvm::formatv(
        "{0}: {1} tokens and {2} positions for [{3}, {4}]", name,
        tokens.size(), positions.size(), batchSize, length));
  HostTensor ids = HostTensor::zeros(kir::DType::I32, {batchSize, length});
  HostTensor at = HostTensor::zeros(kir::DType::I32, {batchSize, length});
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (positions[i] < 0 || positions[i] >= slots)
      return llvm::createStringError(llvm::formatv(
          "{0}: position {1} is outside the context [0, {2})", name,
          positions[i], slots));
    if (tokens[i] < 0 || tokens[i] >= vocabSize)
      return llvm::createStringError(llvm::formatv(
          "{0}: token {1} is outside the vocabulary [0, {2})", name,
          tokens[i], vocabSize));
    ids.i32()[i] = tokens[i];
    at.i32()[i] = positions[i];
  }
  if (llvm::Error error = executor.setTensor("tokens", ids))
    return error;
  if (llvm::Error error = executor.setTensor("positions", at))
    return error;
  if (llvm::Error error = executor.run())
    return error;
  llvm::Expected<HostTensor> logits = executor.output("logits");
  if (!logits)
    return logits.takeError();
  llvm::ArrayRef<float> values = logits->f32();
  return std::vector<float>(values.begin(), values.end());
}

llvm::Expected<std::vector<float>>
CachedGenerator::prefillStep(llvm::ArrayRef<int32_t> tokens,
                             llvm::ArrayRef<int32_t> positions) {
  return step(*prefillExec, chunk, tokens, positions);
}

llvm::Expected<std::vector<float>>
CachedGenerator::prefill(const std::vector<std::vector<int32_t>> &tokens) {
  if (int64_t(tokens.size()) != batchSize)
    return llvm::createStringError(llvm::formatv(
        "prefill: {0} sequences for a batch of {1}", tokens.size(), batchSize));
  int64_t longest = 0;
  for (const std::vector<int32_t> &sequence : tokens) {
    if (sequence.empty())
      return llvm::createStringError("prefill: an empty sequence");
    if (int64_t(sequence.size()) > slots)
      return llvm::createStringError(llvm::formatv(
          "prefill: a prompt of {0} tokens does not fit the context of {1}",
          sequence.size(), slots));
    for (int32_t id : sequence)
      if (id < 0 || id >= vocabSize)
        return llvm::createStringError(llvm::formatv(
            "prompt token {0} is outside the vocabulary [0, {1})", id,
            vocabSize));
    longest = std::max<int64_t>(longest, sequence.size());
  }
  std::vector<int32_t> ids(batchSize * chunk), positions(batchSize * chunk);
  std::vector<float> logits;
  for (int64_t start = 0; start < longest; start += chunk) {
    for (int64_t b = 0; b < batchSize; ++b) {
      const std::vector<int32_t> &sequence = tokens[b];
      int64_t last = int64_t(sequence.size()) - 1;
      for (int64_t t = 0; t < chunk; ++t) {
        // Past its end a sequence repeats its last token at its place.
        int64_t at = std::min(start + t, last);
        ids[b * chunk + t] = sequence[at];
        positions[b * chunk + t] = int32_t(at);
      }
    }
    llvm::Expected<std::vector<float>> out = prefillStep(ids, positions);
    if (!out)
      return out.takeError();
    logits = std::move(*out);
  }
  return logits;
}

llvm::Expected<std::vector<float>>
CachedGenerator::decode(llvm::ArrayRef<int32_t> tokens,
                        llvm::ArrayRef<int32_t> positions) {
  if (int64_t(tokens.size()) != batchSize ||
      int64_t(positions.size()) != batchSize)
    return llvm::createStringError("decode: one token and position per "
                                   "sequence");
  return step(*decodeExec, 1, tokens, positions);
}

llvm::Error llmc::runtime::generateCached(
    CachedGenerator &generator, std::vector<int32_t> &context,
    int64_t maxTokens, const SamplingOptions &options,
    const std::function<void(int64_t)> &emit, GenerationStats *stats) {
  GenerationStats local;
  GenerationStats &s = stats ? *stats : local;
  int64_t slots = generator.maxContext(), vocab = generator.vocab();
  int64_t batch = generator.batch();
  if (context.empty())
    context.push_back('\n');
  // Feeds the window of the last `keep` tokens of the context from
  // position 0; returns the logits after it.
  auto refill = [&](int64_t keep) -> llvm::Expected<std::vector<float>> {
    std::vector<int32_t> window(context.end() - keep, context.end());
    auto start = std::chrono::steady_clock::now();
    llvm::Expected<std::vector<float>> logits = generator.prefill(
        std::vector<std::vector<int32_t>>(batch, window));
    s.prefillSeconds += secondsSince(start);
    s.promptTokens += keep;
    return logits;
  };
  int64_t length = std::min<int64_t>(context.size(), slots);
  llvm::Expected<std::vector<float>> logits = refill(length);
  if (!logits)
    return logits.takeError();
  for (int64_t step = 0; step < maxTokens; ++step) {
    int64_t id = sampleToken(llvm::ArrayRef<float>(*logits).take_front(vocab),
                             options, step);
    context.push_back(int32_t(id));
    emit(id);
    if (step + 1 == maxTokens)
      break;
    if (length == slots) {
      // The cache is full: start again from the last half of the context.
      length = std::max<int64_t>(slots / 2, 1);
      ++s.contextShifts;
      logits = refill(length);
      if (!logits)
        return logits.takeError();
      continue;
    }
    auto start = std::chrono::steady_clock::now();
    std::vector<int32_t> tokens(batch, int32_t(id));
    std::vector<int32_t> positions(batch, int32_t(length));
    logits = generator.decode(tokens, positions);
    if (!logits)
      return logits.takeError();
    s.decodeSeconds.push_back(secondsSince(start));
    s.decodePositions.push_back(length);
    ++length;
  }
  return llvm::Error::success();
}
