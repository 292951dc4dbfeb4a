// Text generation from a compiled model: weights in, sampled tokens out.
#ifndef LLMC_RUNTIME_GENERATE_H
#define LLMC_RUNTIME_GENERATE_H

#include "runtime/Cpu/CpuExecutor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llmc::runtime {

struct SamplingOptions {
  double temperature = 1.0; // 0: greedy (argmax)
  int64_t topK = 0;         // 0: the whole vocabulary
  uint64_t seed = 1337;
};

/// Draws a token id from `logits` (one position's row).
int64_t sampleToken(llvm::ArrayRef<float> logits,
                    const SamplingOptions &options, uint64_t step);

/// Appends `maxTokens` sampled tokens to `context` (a sequence of ids; a
/// window of the last T ids is fed at each step), calling `emit` with each
/// new token as it is drawn. The program must return logits [B, T, V].
llvm::Error generate(Executor &executor, std::vector<int32_t> &context,
                     int64_t maxTokens, const SamplingOptions &options,
                     const std::function<void(int64_t)> &emit);

/// Generated text made safe for a terminal, fed as it streams: valid UTF-8
/// passes unchanged; bytes that are not valid UTF-8, control characters
/// (C0 but newline and tab, DEL, C1: an untrained model emits escape
/// sequences) and bidirectional-override characters come out as \xNN per
/// byte. A multi-byte sequence split across two feeds is held back until it
/// completes (a byte-level tokenizer emits one byte per token).
class TerminalText {
public:
  /// The displayable form of the bytes fed so far that are complete.
  std::string feed(llvm::StringRef bytes);
  /// The displayable form of whatever is still held back (escaped).
  std::string finish();

  /// feed + finish of a whole text.
  static std::string escape(llvm::StringRef text);

private:
  std::string pending;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_GENERATE_H
