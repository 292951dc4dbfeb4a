// What changes from step to step of a training run: the learning rate
// (warmup, then constant, cosine, linear or one-cycle decay), the global
// batch size (Megatron's batch-size ramp-up) and the sequence length
// (sequence-length warmup). Pure functions of the step, so a resumed run
// needs nothing but the step to continue exactly.
#ifndef LLMC_RUNTIME_SCHEDULE_H
#define LLMC_RUNTIME_SCHEDULE_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace llmc {

/// The learning rate of update `step` (0-based). Megatron's --lr, --min-lr,
/// --lr-warmup-iters and --lr-decay-iters:
///   warmup (constant, cosine, linear): lr * (step + 1) / warmupSteps for
///     step < warmupSteps (llm.c's form: the first update is not wasted);
///   then constant: lr;
///     cosine: minLr + (lr - minLr) * (1 + cos(pi * p)) / 2,
///     linear: lr - (lr - minLr) * p,
///     with p = (step - warmupSteps) / (decaySteps - warmupSteps) in [0, 1]:
///     minLr from decaySteps on;
///   one_cycle (triangular): minLr + (lr - minLr) * step / warmupSteps up to
///     the peak at step == warmupSteps, then linearly back down to minLr at
///     decaySteps.
struct LrSchedule {
  enum class Kind { Constant, Cosine, Linear, OneCycle };
  Kind kind = Kind::Cosine;
  double lr = 3e-4;
  double minLr = 0.0;
  int64_t warmupSteps = 0;
  int64_t decaySteps = 0; // the run resolves 0 to its number of steps

  double at(int64_t step) const;
};

constexpr unsigned kNumLrScheduleKinds = 4;
/// "constant", "cosine", "linear", "one_cycle".
llvm::StringRef stringifyLrScheduleKind(LrSchedule::Kind kind);
std::optional<LrSchedule::Kind> parseLrScheduleKind(llvm::StringRef name);

/// Megatron's --rampup-batch-size START INCREMENT SAMPLES: the global batch
/// starts at `start` sequences and grows by `increment` each time another
/// samples / ((global - start) / increment) samples have been consumed,
/// reaching the full global batch after `samples` samples. start == 0: off.
struct BatchRampup {
  int64_t start = 0;
  int64_t increment = 0;
  int64_t samples = 0;

  bool enabled() const { return start > 0; }
  /// The global batch size of the step that starts after `consumedSamples`
  /// sequences: a multiple of `microBatch` (rounded down, as Megatron does),
  /// at least one micro-batch, at most `globalBatch`.
  int64_t globalBatchAt(int64_t consumedSamples, int64_t globalBatch,
                        int64_t microBatch) const;
};

/// Sequence-length warmup (Li et al. 2022, DeepSpeed's curriculum
/// "seqlen"): step 0 trains on `start` tokens per sequence, growing
/// linearly to the full length at `steps`, rounded down to a multiple of 8
/// above start so that only a few lengths are ever compiled. steps == 0: off.
struct SeqLenWarmup {
  int64_t start = 0;
  int64_t steps = 0;

  bool enabled() const { return steps > 0; }
  int64_t seqLenAt(int64_t step, int64_t fullSeqLen) const;
};

/// The batch shape of one step.
struct StepShape {
  int64_t globalBatch = 0; // sequences
  int64_t microBatches = 0;
  int64_t seqLen = 0;
  int64_t tokens() const { return globalBatch * seqLen; }
};

/// The shape of every step, from the ramp-up and warmup. Consumed samples
/// before `step` are needed for the ramp-up: the caller keeps the count.
struct BatchSchedule {
  int64_t globalBatch = 1, microBatch = 1, seqLen = 1;
  BatchRampup rampup;
  SeqLenWarmup seqLenWarmup;

  StepShape at(int64_t step, int64_t consumedSamples) const;
  /// Steps needed to consume `tokens` tokens, at least 1.
  int64_t stepsForTokens(int64_t tokens) const;
};

} // namespace llmc

#endif // LLMC_FRONTEND_SCHEDULE_H
