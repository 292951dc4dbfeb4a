// Which parameters tensor parallelism splits, and how: one rule that
// llmc-tensor-parallel applies and `llmc plan` counts, so the planned
// per-device parameters are those a tp rank holds.
#ifndef LLMC_IR_TENSORPARALLELSPLIT_H
#define LLMC_IR_TENSORPARALLELSPLIT_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace mlir::llmc {

/// Dimension `dim` of the parameter seen as `groups` x tp blocks of rows,
/// tp rank r holding block r of every group (the fused Q, K, V weight:
/// groups 3; SwiGLU's fused gate and up: groups 2). `vocab`: the rows are
/// the vocabulary (the token embedding, an untied classifier), which need
/// not divide by tp: it is padded with zero rows to a multiple of tp
/// (vocabRowsPerRank), rank r holding rows [r * Vr, (r + 1) * Vr).
struct TensorParallelSplit {
  int64_t dim = 0;
  int64_t groups = 1;
  bool vocab = false;
};

/// The split of the parameter `name` (GPT-2 names: h.<i>.attn.c_attn,
/// h.<i>.mlp.c_fc column-parallel with their biases; the weights of
/// h.<i>.attn.c_proj and h.<i>.mlp.c_proj row-parallel; wte and
/// lm_head.weight by vocabulary rows, Megatron's VocabParallelEmbedding);
/// none for a parameter every tp rank holds whole (norms, row-parallel
/// biases, the position embedding wpe).
std::optional<TensorParallelSplit> tensorParallelSplit(llvm::StringRef name,
                                                       bool swiglu);

/// The vocabulary rows each of `tp` ranks holds: ceil(vocab / tp). The
/// last rank's block ends with vocabRowsPerRank * tp - vocab zero rows of
/// padding that no token selects and no loss counts.
int64_t vocabRowsPerRank(int64_t vocab, int64_t tp);

} // namespace mlir::llmc

#endif // LLMC_IR_TENSORPARALLELSPLIT_H
