// What text generation prints (GenerateOutput.h).
#include "tools/common/GenerateOutput.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace llmc;

namespace cl = llvm::cl;

GenerationFlags::GenerationFlags(cl::SubCommand &sub,
                                 cl::OptionCategory &category)
    : prompt("prompt", cl::desc("Text to continue"), cl::init(""), cl::sub(sub),
             cl::cat(category)),
      maxTokens("max-tokens", cl::desc("Tokens to sample (default 256)"),
                cl::init(256), cl::sub(sub), cl::cat(category)),
      temperature("temperature",
                  cl::desc("Softmax temperature; 0 is greedy (default 1)"),
                  cl::init(1.0), cl::sub(sub), cl::cat(category)),
      topK("top-k",
           cl::desc("Sample among the k likeliest tokens (default 0: all)"),
           cl::init(0), cl::sub(sub), cl::cat(category)),
      printLogits(
          "print-logits",
          cl::desc("Print the logits after the whole prompt (line 'last'), "
                   "then after each of its tokens (line per position: the "
                   "greedy next token and every logit), instead of "
                   "generating; the KV-cache programs feed the prompt "
                   "through @prefill, then token by token through @decode "
                   "(tests compare them with llmc generate --recompute)"),
          cl::sub(sub), cl::cat(category)) {}

llvm::Error GenerationFlags::check() const {
  if (maxTokens < 0)
    return llvm::createStringError("--max-tokens: expected a count >= 0, got " +
                                   llvm::Twine(maxTokens));
  if (topK < 0)
    return llvm::createStringError(
        "--top-k: expected a count >= 0 (0: all), got " + llvm::Twine(topK));
  if (!(temperature >= 0) || std::isinf(temperature))
    return llvm::createStringError(
        llvm::formatv("--temperature: expected a finite value >= 0 "
                      "(0: greedy), got {0}",
                      temperature.getValue())
            .str());
  return llvm::Error::success();
}

runtime::SamplingOptions GenerationFlags::sampling(uint64_t seed) const {
  runtime::SamplingOptions options;
  options.temperature = temperature;
  options.topK = topK;
  options.seed = seed;
  return options;
}

void llmc::printLogitsLine(const llvm::Twine &position,
                           llvm::ArrayRef<float> logits) {
  int64_t best =
      std::max_element(logits.begin(), logits.end()) - logits.begin();
  llvm::outs() << "logits " << position << " argmax " << best << ":";
  for (float value : logits)
    llvm::outs() << llvm::format(" %.8e", value);
  llvm::outs() << "\n";
}

llvm::Error llmc::printCachedLogits(runtime::CachedGenerator &generator,
                                    llvm::ArrayRef<int32_t> tokens) {
  if (int64_t(tokens.size()) > generator.maxContext())
    return llvm::createStringError(
        "--print-logits: the prompt is longer than the context");
  int64_t batch = generator.batch(), vocab = generator.vocab();
  // The whole prompt through @prefill (in chunks, the last one padded).
  auto whole =
      generator.prefill(std::vector<std::vector<int32_t>>(batch, tokens.vec()));
  if (!whole)
    return whole.takeError();
  printLogitsLine("last", llvm::ArrayRef<float>(*whole).take_front(vocab));
  auto logits = generator.prefill(std::vector<std::vector<int32_t>>(
      batch, std::vector<int32_t>{tokens[0]}));
  if (!logits)
    return logits.takeError();
  printLogitsLine("0", llvm::ArrayRef<float>(*logits).take_front(vocab));
  for (size_t p = 1; p < tokens.size(); ++p) {
    logits = generator.decode(std::vector<int32_t>(batch, tokens[p]),
                              std::vector<int32_t>(batch, int32_t(p)));
    if (!logits)
      return logits.takeError();
    printLogitsLine(llvm::Twine(p),
                    llvm::ArrayRef<float>(*logits).take_front(vocab));
  }
  return llvm::Error::success();
}

GeneratedText::GeneratedText(const data::Tokenizer &tok, llvm::StringRef prompt,
                             int64_t maxTokens)
    : tok(tok), maxTokens(maxTokens), terminal(llvm::outs().is_displayed()) {
  llvm::outs() << prompt;
  llvm::outs().flush();
  start = std::chrono::steady_clock::now();
}

void GeneratedText::token(int64_t id) {
  std::string bytes = tok.decodeToken(int32_t(id));
  llvm::outs() << (terminal ? shown.feed(bytes) : bytes);
  llvm::outs().flush();
}

llvm::Error GeneratedText::finish(llvm::Error error) {
  if (terminal)
    llvm::outs() << shown.finish();
  llvm::outs() << "\n";
  llvm::outs().flush();
  if (error)
    return error;
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  llvm::errs() << llvm::format("llmc: %lld tokens in %.2f s (%.1f tokens/s)\n",
                               (long long)maxTokens, seconds,
                               maxTokens / seconds);
  return llvm::Error::success();
}

static double decodeSeconds(const runtime::GenerationStats &stats) {
  double total = 0;
  for (double seconds : stats.decodeSeconds)
    total += seconds;
  return total;
}

double llmc::prefillTokensPerSecond(const runtime::GenerationStats &stats) {
  return stats.promptTokens / std::max(stats.prefillSeconds, 1e-9);
}

double llmc::decodeTokensPerSecond(const runtime::GenerationStats &stats) {
  return stats.decodeSeconds.size() / std::max(decodeSeconds(stats), 1e-9);
}

void llmc::printGenerationStats(const runtime::GenerationStats &stats,
                                const runtime::CachedGenerator &generator,
                                const runtime::Executor &prefill,
                                const runtime::Executor &decode) {
  llvm::errs() << llvm::format(
      "llmc: prefill %lld tokens in %.3f s (%.1f tokens/s, chunks of %lld); "
      "decode %zu tokens in %.3f s (%.1f tokens/s)\n",
      (long long)stats.promptTokens, stats.prefillSeconds,
      prefillTokensPerSecond(stats), (long long)generator.prefillChunk(),
      stats.decodeSeconds.size(), decodeSeconds(stats),
      decodeTokensPerSecond(stats));
  // Decode time by position, in up to 4 ranges: flat but for attention's
  // linear read of the cache.
  size_t n = stats.decodeSeconds.size();
  if (n >= 4) {
    llvm::errs() << "llmc: decode ms/token by position:";
    for (size_t part = 0; part < 4; ++part) {
      size_t begin = part * n / 4, end = (part + 1) * n / 4;
      double sum = 0;
      for (size_t i = begin; i < end; ++i)
        sum += stats.decodeSeconds[i];
      llvm::errs() << llvm::format(" [%lld, %lld] %.3f",
                                   (long long)stats.decodePositions[begin],
                                   (long long)stats.decodePositions[end - 1],
                                   1e3 * sum / double(end - begin));
    }
    llvm::errs() << "\n";
  }
  if (stats.contextShifts)
    llvm::errs() << "llmc: the context filled " << stats.contextShifts
                 << " time(s); its last half was fed again each time\n";
  for (auto [name, executor] :
       {std::pair{"prefill", &prefill}, std::pair{"decode", &decode}}) {
    std::string sparse = executor->sparseSummary();
    if (!sparse.empty())
      llvm::errs() << "llmc: @" << name << ": " << sparse << "\n";
  }
}
