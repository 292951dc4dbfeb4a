// Text generation with a KV cache: the prompt through @prefill in chunks,
// then one @decode step per new token (codegen/Inference.h), so a token
// costs the same whatever its position but for attention's linear read of
// the cache.
#ifndef LLMC_RUNTIME_CACHEDGENERATE_H
#define LLMC_RUNTIME_CACHEDGENERATE_H

#include "runtime/Serve/Generate.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace llmc::runtime {

/// Time spent, for `llmc generate` and the exported binary's --bench.
struct GenerationStats {
  int64_t promptTokens = 0;
  double prefillSeconds = 0;
  /// Seconds of each decode step, in order, and the position it fed.
  std::vector<double> decodeSeconds;
  std::vector<int64_t> decodePositions;
  /// Times the cache filled and the last half of the context was fed again
  /// from position 0.
  int64_t contextShifts = 0;
};

/// The two programs of one model, sharing their parameters and caches by
/// name (executors over one PersistentStore).
class CachedGenerator {
public:
  /// Checks the programs' interface: tokens and positions [B, P] / [B, 1]
  /// i32 inputs, logits [B, V], one batch size and one cache length.
  static llvm::Expected<CachedGenerator> create(Executor &prefill,
                                                Executor &decode);

  int64_t batch() const { return batchSize; }
  int64_t maxContext() const { return slots; }
  int64_t prefillChunk() const { return chunk; }
  int64_t vocab() const { return vocabSize; }

  /// Feeds `tokens` (one list per sequence, batch() of them, each at least
  /// one token) from position 0 of each sequence, `chunk` tokens a step;
  /// returns each sequence's logits after its last token [B, V]. A shorter
  /// sequence repeats its last token at its last position (rewriting that
  /// cache slot with the same values).
  llvm::Expected<std::vector<float>>
  prefill(const std::vector<std::vector<int32_t>> &tokens);
  /// Feeds one token per sequence at `positions` (each below maxContext(),
  /// after the positions fed before it); returns the logits [B, V].
  llvm::Expected<std::vector<float>>
  decode(llvm::ArrayRef<int32_t> tokens, llvm::ArrayRef<int32_t> positions);
  /// One @prefill step over `tokens` and `positions` [B, prefillChunk()]
  /// (row-major) as given: prefill() is a loop of these. For a caller that
  /// places each row itself (runtime/Serve prefills new sequences while
  /// others wait mid-decode). Returns the logits after each row's last
  /// column [B, V].
  llvm::Expected<std::vector<float>>
  prefillStep(llvm::ArrayRef<int32_t> tokens,
              llvm::ArrayRef<int32_t> positions);

private:
  /// Checks `tokens` and `positions` [B, length] against the vocabulary and
  /// the context, then runs `executor` on them.
  llvm::Expected<std::vector<float>> step(Executor &executor, int64_t length,
                                          llvm::ArrayRef<int32_t> tokens,
                                          llvm::ArrayRef<int32_t> positions);

  Executor *prefillExec = nullptr, *decodeExec = nullptr;
  int64_t batchSize = 0, chunk = 0, slots = 0, vocabSize = 0;
};

/// Appends `maxTokens` tokens sampled with `options` to `context` (sequence
/// 0 of the batch; the other sequences, if any, follow the same tokens),
/// calling `emit` with each as it is drawn. When the cache is full, the
/// last half of the context is fed again from position 0 (a model with
/// learned positions sees them at new places, as a sliding window would).
llvm::Error generateCached(CachedGenerator &generator,
                           std::vector<int32_t> &context, int64_t maxTokens,
                           const SamplingOptions &options,
                           const std::function<void(int64_t)> &emit,
                           GenerationStats *stats = nullptr);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CACHEDGENERATE_H
