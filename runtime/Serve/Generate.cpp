// Sampling text from a compiled model.
#include "runtime/Serve/Generate.h"

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

//===----------------------------------------------------------------------===//
// Text for a terminal
//===----------------------------------------------------------------------===//

namespace {
/// The length of the UTF-8 sequence that starts `text` when it is valid and
/// complete; 0 when it is invalid; -1 when it is a valid prefix cut short.
int utf8SequenceLength(llvm::StringRef text) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(0);
  if (lead < 0x80)
    return 1;
  int length = lead >= 0xC2 && lead <= 0xDF   ? 2
               : lead >= 0xE0 && lead <= 0xEF ? 3
               : lead >= 0xF0 && lead <= 0xF4 ? 4
                                              : 0;
  if (length == 0)
    return 0;
  for (int i = 1; i < length; ++i) {
    if (size_t(i) >= text.size())
      return -1;
    unsigned char c = byte(i);
    // The second byte's range excludes overlong forms, surrogates and code
    // points above U+10FFFF.
    unsigned char low = 0x80, high = 0xBF;
    if (i == 1) {
      if (lead == 0xE0)
        low = 0xA0;
      else if (lead == 0xED)
        high = 0x9F;
      else if (lead == 0xF0)
        low = 0x90;
      else if (lead == 0xF4)
        high = 0x8F;
    }
    if (c < low || c > high)
      return 0;
  }
  return length;
}

uint32_t decodeUtf8(llvm::StringRef sequence) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(sequence[i]); };
  if (sequence.size() == 1)
    return byte(0);
  uint32_t cp = byte(0) & (0x7F >> sequence.size());
  for (size_t i = 1; i < sequence.size(); ++i)
    cp = cp << 6 | (byte(i) & 0x3F);
  return cp;
}

/// Characters a terminal acts on instead of showing.
bool isControl(uint32_t cp) {
  if (cp == '\n' || cp == '\t')
    return false;
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x061C ||
         cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

void appendEscaped(std::string &out, llvm::StringRef bytes) {
  for (char c : bytes)
    out += llvm::formatv("\\x{0:x-2}", static_cast<unsigned char>(c)).str();
}
} // namespace

std::string TerminalText::feed(llvm::StringRef bytes) {
  pending += bytes.str();
  std::string out;
  llvm::StringRef rest = pending;
  while (!rest.empty()) {
    int length = utf8SequenceLength(rest);
    if (length < 0)
      break; // wait for the rest of the sequence
    if (length == 0) {
      appendEscaped(out, rest.take_front(1));
      rest = rest.drop_front(1);
      continue;
    }
    llvm::StringRef sequence = rest.take_front(length);
    if (isControl(decodeUtf8(sequence)))
      appendEscaped(out, sequence);
    else
      out += sequence;
    rest = rest.drop_front(length);
  }
  pending = rest.str();
  return out;
}

std::string TerminalText::finish() {
  std::string out;
  appendEscaped(out, pending);
  pending.clear();
  return out;
}

std::string TerminalText::escape(llvm::StringRef text) {
  TerminalText terminal;
  std::string shown = terminal.feed(text);
  return shown + terminal.finish();
}
