// Where pipeline parallelism cuts the transformer blocks into stages: one
// rule that llmc-pipeline-parallel applies, `llmc run --pp` prints and
// `llmc plan` counts, so the planned per-device figures are a stage's.
//
// Each part of the model costs its training FLOPs per token as the planner
// counts them (PaLM's 6P + 12 L h s, Chowdhery et al. 2022 app. B): block
// i 6 P_i + 12 h s (its matmuls forward and backward and attention's two
// products), the classifier 6 V h (a matmul whether tied or not) on the
// last stage with the final norm and the loss, the embedding lookups 0 on
// the first stage. The cut is the contiguous partition of the blocks into
// pp non-empty stages whose slowest stage is the cheapest (exact, by
// dynamic programming over integers); among those, the one with the least
// sum of squared stage costs, then the first with ascending boundaries.
// For a GPT of 5 blocks (h 16, T 8: 21,216 FLOPs a token each) and a
// vocabulary of 4096 (the classifier 393,216, over 18 blocks') at pp=2,
// stage 0 holds 4 blocks and stage 1 one and the classifier:
//
//   stage 0: embedding, h.0-h.3 (4 blocks, 17.0% of the FLOPs); stage 1:
//   h.4, classifier (1 block, 83.0%)
//
// Stage recomputation (llmc-pipeline-recompute runs every stage's forward
// twice) adds a third to every stage's FLOPs alike, so it does not move
// the cut; remat is not counted (the planner prices it apart).
#ifndef LLMC_IR_PIPELINESTAGES_H
#define LLMC_IR_PIPELINESTAGES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::llmc {

/// What each part of the model costs per token, in training FLOPs.
struct PipelineCosts {
  std::vector<int64_t> blocks; // block i: 6 P_i + 12 h s
  int64_t first = 0;           // before h.0, on stage 0: the lookups, 0
  int64_t last = 0;            // after the last block: the classifier 6 V h
  /// Set when the sizes could not be read (an IR without the token
  /// embedding wte): every block costs 1 and the ends 0, equal runs.
  bool equalBlocks = false;
  int64_t total() const;
};

/// The planner's costs of a model of `blockParameters` (elements per
/// block), a vocabulary of `vocabSize`, width `nEmbd`, sequences of
/// `seqLen` tokens. Their total is `llmc plan`'s model FLOPs per token.
PipelineCosts pipelineCosts(llvm::ArrayRef<int64_t> blockParameters,
                            int64_t vocabSize, int64_t nEmbd, int64_t seqLen);

/// The same costs read from a whole model's @forward (before tensor
/// parallelism splits it): the elements of the parameters h.<i>.* per
/// block, V and h from the token embedding `wte` [V, h], T from the tokens
/// [B, T]. No blocks when no parameter is named h.<i>.*; equal blocks when
/// there is no wte.
PipelineCosts pipelineCostsOf(func::FuncOp forward);

/// Stage s holds blocks [firstBlocks[s], firstBlocks[s + 1]) (the last up
/// to numBlocks), stage 0 also the embedding, the last stage the
/// classifier.
struct PipelineCut {
  std::vector<int64_t> firstBlocks;
  std::vector<int64_t> stageCosts; // per token, the stage's FLOPs
  int64_t numBlocks = 0;
  int64_t totalCost = 0;
  bool equalBlocks = false; // see PipelineCosts

  int64_t stages() const { return static_cast<int64_t>(firstBlocks.size()); }
  int64_t blocksOf(int64_t stage) const;
  /// The stage of block `block`; -1 (before the first block) is stage 0.
  int64_t stageOfBlock(int64_t block) const;
  int64_t slowestCost() const;
  /// The slowest stage's FLOPs over an even share's, >= 1: the pace the
  /// slowest stage sets against a perfect cut.
  double imbalance() const;
};

/// The balanced cut into `pp` stages; needs 1 <= pp <= costs.blocks.size().
PipelineCut balancePipeline(const PipelineCosts &costs, int64_t pp);

/// The cut that starts the stages at `firstBlocks` (0 first, increasing,
/// below the number of blocks); an error naming the offending entry.
llvm::Expected<PipelineCut> pipelineCutAt(const PipelineCosts &costs,
                                          llvm::ArrayRef<int64_t> firstBlocks);

/// "stage 0: embedding, h.0-h.3 (4 blocks, 17.0% of the FLOPs); stage 1:
/// h.4, classifier (1 block, 83.0%)", with a note when the blocks count as
/// equal.
std::string describePipelineCut(const PipelineCut &cut);

} // namespace mlir::llmc

#endif // LLMC_IR_PIPELINESTAGES_H
