// What text generation prints, shared by `llmc generate` and exported
// binaries (tools/exported), so both stream, report and print logits alike.
#ifndef LLMC_TOOLS_COMMON_GENERATEOUTPUT_H
#define LLMC_TOOLS_COMMON_GENERATEOUTPUT_H

#include "frontend/Tokenizer.h"
#include "runtime/Serve/CachedGenerate.h"
#include "runtime/Serve/Generate.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

/// The flags of text generation, defined once for `llmc generate` (in its
/// subcommand) and for exported binaries (at their top level).
struct GenerationFlags {
  GenerationFlags(llvm::cl::SubCommand &sub,
                  llvm::cl::OptionCategory &category);
  llvm::cl::opt<std::string> prompt;
  llvm::cl::opt<int64_t> maxTokens;
  llvm::cl::opt<double> temperature;
  llvm::cl::opt<int64_t> topK;
  llvm::cl::opt<bool> printLogits;

  /// Each error names its flag (--max-tokens, --top-k, --temperature).
  llvm::Error check() const;
  runtime::SamplingOptions sampling(uint64_t seed) const;
};

/// One line per fed position for --print-logits: "logits P argmax I: ...".
void printLogitsLine(const llvm::Twine &position, llvm::ArrayRef<float> logits);

/// --print-logits over the KV-cache programs: the whole prompt through
/// @prefill (line 'last'), then position by position, the first token
/// through @prefill and each next one through @decode.
llvm::Error printCachedLogits(runtime::CachedGenerator &generator,
                              llvm::ArrayRef<int32_t> tokens);

/// The prompt, then each generated token as it comes (on a terminal,
/// control bytes and broken UTF-8 are shown escaped; into a pipe or file the
/// bytes go as generated), then on stderr how long the tokens took.
class GeneratedText {
public:
  GeneratedText(const data::Tokenizer &tok, llvm::StringRef prompt,
                int64_t maxTokens);
  void token(int64_t id);
  /// Ends the text; returns generation's error, or prints the rate.
  llvm::Error finish(llvm::Error error);

private:
  const data::Tokenizer &tok;
  int64_t maxTokens;
  bool terminal;
  runtime::TerminalText shown;
  std::chrono::steady_clock::time_point start;
};

/// Prefill and decode tokens/s of a cached generation: one line, then the
/// decode time per token over four ranges of positions, the context shifts
/// and what the 2:4 path of each program did, on stderr.
void printGenerationStats(const runtime::GenerationStats &stats,
                          const runtime::CachedGenerator &generator,
                          const runtime::Executor &prefill,
                          const runtime::Executor &decode);

/// Prefill and decode tokens/s of `stats` (0 when nothing ran).
double prefillTokensPerSecond(const runtime::GenerationStats &stats);
double decodeTokensPerSecond(const runtime::GenerationStats &stats);

} // namespace llmc

#endif // LLMC_TOOLS_COMMON_GENERATEOUTPUT_H
