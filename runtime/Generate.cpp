// Sampling text from a compiled model.
#include "runtime/Generate.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace llmc;
using namespace llmc::runtime;

int64_t llmc::runtime::sampleToken(llvm::ArrayRef<float> logits,
                                   const SamplingOptions &options,
                                   uint64_t step) {
  int64_t v = logits.size();
  if (options.temperature <= 0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> ids(v);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t k = options.topK > 0 ? std::min(options.topK, v) : v;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  ids.resize(k);
  float max = logits[ids[0]];
  std::vector<double> weights(k);
  double total = 0;
  for (int64_t i = 0; i < k; ++i)
    total += weights[i] = std::exp((logits[ids[i]] - max) / options.temperature);
  // A uniform draw from Philox keyed by the seed and counted by the step:
  // the same seed gives the same text on every machine.
  std::array<uint32_t, 4> bits = philox4x32(
      {uint32_t(step), uint32_t(step >> 32), 0, 0},
      {uint32_t(options.seed), uint32_t(options.seed >> 32)});
  double u = double((uint64_t(bits[0]) << 21) ^ bits[1]) / double(1ull << 53);
  double target = u * total;
  for (int64_t i = 0; i < k; ++i) {
    target -= weights[i];
    if (target < 0)
      return ids[i];
  }
  return ids[k - 1];
}

llvm::Error llmc::runtime::generate(Executor &executor,
                                    std::vector<int32_t> &context,
                                    int64_t maxTokens,
                                    const SamplingOptions &options,
                                    const std::function<void(int64_t)> &emit) {
  const kir::Program &program = executor.program();
  auto logitsBinding = std::find_if(
      program.outputs.begin(), program.outputs.end(),
      [](const kir::Binding &b) { return b.name == "logits"; });
  auto tokensBinding = std::find_if(
      program.inputs.begin(), program.inputs.end(),
      [](const kir::Binding &b) { return b.name == "tokens"; });
  if (logitsBinding == program.outputs.end() ||
      tokensBinding == program.inputs.end())
    return llvm::createStringError(
        "generation needs a model with a 'tokens' input that returns logits");
  const kir::Buffer &tokens = program.buffers[tokensBinding->buffer];
  const kir::Buffer &logits = program.buffers[logitsBinding->buffer];
  if (tokens.shape.size() != 2 || tokens.dtype != kir::DType::I32)
    return llvm::createStringError("generation needs i32 tokens [B, T]");
  int64_t batch = tokens.shape[0], seq = tokens.shape[1];
  int64_t vocab = logits.shape.back();
  if (context.empty())
    context.push_back('\n');
  for (int32_t id : context)
    if (id < 0 || id >= vocab)
      return llvm::createStringError(llvm::formatv(
          "prompt token {0} is outside the vocabulary [0, {1})", id, vocab));
  HostTensor input = HostTensor::zeros(kir::DType::I32, {batch, seq});
  for (int64_t step = 0; step < maxTokens; ++step) {
    int64_t length = std::min<int64_t>(context.size(), seq);
    llvm::MutableArrayRef<int32_t> row = input.i32().take_front(seq);
    std::fill(row.begin(), row.end(), 0);
    std::copy(context.end() - length, context.end(), row.begin());
    if (llvm::Error error = executor.setTensor("tokens", input))
      return error;
    if (llvm::Error error = executor.run())
      return error;
    llvm::Expected<HostTensor> out = executor.output("logits");
    if (!out)
      return out.takeError();
    llvm::ArrayRef<float> last =
        out->f32().slice((length - 1) * vocab, vocab);
    int64_t id = sampleToken(last, options, step);
    context.push_back(int32_t(id));
    emit(id);
  }
  return llvm::Error::success();
}
