// Learning-rate, batch-size and sequence-length schedules.
#include "frontend/Schedule.h"

#include <algorithm>
#include <cmath>

using namespace llmc;

double LrSchedule::at(int64_t step) const {
  int64_t decay = std::max(decaySteps, warmupSteps);
  if (kind == Kind::OneCycle) {
    if (step <= warmupSteps && warmupSteps > 0)
      return minLr + (lr - minLr) * double(step) / double(warmupSteps);
    if (step >= decay)
      return minLr;
    double p = double(step - warmupSteps) / double(decay - warmupSteps);
    return lr - (lr - minLr) * p;
  }
  if (step < warmupSteps)
    return lr * double(step + 1) / double(warmupSteps);
  if (kind == Kind::Constant)
    return lr;
  if (step >= decay)
    return minLr;
  double p = double(step - warmupSteps) / double(decay - warmupSteps);
  if (kind == Kind::Cosine)
    return minLr + (lr - minLr) * 0.5 * (1.0 + std::cos(M_PI * p));
  return lr - (lr - minLr) * p;
}

llvm::StringRef llmc::stringifyLrScheduleKind(LrSchedule::Kind kind) {
  switch (kind) {
  case LrSchedule::Kind::Constant:
    return "constant";
  case LrSchedule::Kind::Cosine:
    return "cosine";
  case LrSchedule::Kind::Linear:
    return "linear";
  case LrSchedule::Kind::OneCycle:
    return "one_cycle";
  }
  return "?";
}

std::optional<LrSchedule::Kind>
llmc::parseLrScheduleKind(llvm::StringRef name) {
  for (unsigned i = 0; i < kNumLrScheduleKinds; ++i)
    if (stringifyLrScheduleKind(LrSchedule::Kind(i)) == name)
      return LrSchedule::Kind(i);
  return std::nullopt;
}

int64_t BatchRampup::globalBatchAt(int64_t consumedSamples,
                                   int64_t globalBatch,
                                   int64_t microBatch) const {
  int64_t batch = globalBatch;
  if (enabled() && increment > 0 && start < globalBatch) {
    // Megatron's RampupBatchsizeNumMicroBatches: the samples of the ramp
    // are split evenly between its increments.
    int64_t increments = (globalBatch - start) / increment;
    double samplesPerIncrement = double(samples) / double(increments);
    int64_t done = samplesPerIncrement > 0
                       ? int64_t(double(consumedSamples) / samplesPerIncrement)
                       : increments;
    batch = std::min(globalBatch, start + done * increment);
  }
  batch -= batch % microBatch;
  return std::max(batch, microBatch);
}

int64_t SeqLenWarmup::seqLenAt(int64_t step, int64_t fullSeqLen) const {
  if (!enabled() || step >= steps || start >= fullSeqLen)
    return fullSeqLen;
  int64_t grown = (fullSeqLen - start) * step / steps;
  return std::min(fullSeqLen, start + grown / 8 * 8);
}

StepShape BatchSchedule::at(int64_t step, int64_t consumedSamples) const {
  StepShape shape;
  shape.globalBatch =
      rampup.globalBatchAt(consumedSamples, globalBatch, microBatch);
  shape.microBatches = shape.globalBatch / microBatch;
  shape.seqLen = seqLenWarmup.seqLenAt(step, seqLen);
  return shape;
}

int64_t BatchSchedule::stepsForTokens(int64_t tokens) const {
  int64_t consumedSamples = 0, consumedTokens = 0, step = 0;
  while (consumedTokens < tokens) {
    StepShape shape = at(step, consumedSamples);
    consumedSamples += shape.globalBatch;
    consumedTokens += shape.tokens();
    ++step;
  }
  return std::max<int64_t>(step, 1);
}
