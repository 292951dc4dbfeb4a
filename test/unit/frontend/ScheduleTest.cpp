// Learning-rate schedules, batch-size ramp-up and sequence-length warmup.
#include "frontend/Schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

using namespace llmc;

namespace {
LrSchedule schedule(LrSchedule::Kind kind) {
  LrSchedule s;
  s.kind = kind;
  s.lr = 1.0;
  s.minLr = 0.1;
  s.warmupSteps = 10;
  s.decaySteps = 110;
  return s;
}
} // namespace

TEST(LrScheduleTest, WarmupIsLinearFromTheFirstStep) {
  for (LrSchedule::Kind kind : {LrSchedule::Kind::Constant,
                                LrSchedule::Kind::Cosine,
                                LrSchedule::Kind::Linear}) {
    LrSchedule s = schedule(kind);
    EXPECT_DOUBLE_EQ(s.at(0), 0.1);
    EXPECT_DOUBLE_EQ(s.at(4), 0.5);
    EXPECT_DOUBLE_EQ(s.at(9), 1.0); // the end of warmup reaches the peak
    EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  }
}

TEST(LrScheduleTest, Cosine) {
  LrSchedule s = schedule(LrSchedule::Kind::Cosine);
  EXPECT_DOUBLE_EQ(s.at(60), 0.55); // midpoint: halfway between lr and min
  EXPECT_NEAR(s.at(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1); // the end of the decay
  EXPECT_DOUBLE_EQ(s.at(1000), 0.1); // floored at min_lr afterwards
  for (int64_t step = 10; step < 110; ++step)
    EXPECT_GE(s.at(step), s.at(step + 1));
}

TEST(LrScheduleTest, Linear) {
  LrSchedule s = schedule(LrSchedule::Kind::Linear);
  EXPECT_DOUBLE_EQ(s.at(35), 0.775);
  EXPECT_DOUBLE_EQ(s.at(60), 0.55);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(111), 0.1);
}

TEST(LrScheduleTest, Constant) {
  LrSchedule s = schedule(LrSchedule::Kind::Constant);
  EXPECT_DOUBLE_EQ(s.at(60), 1.0);
  EXPECT_DOUBLE_EQ(s.at(100000), 1.0);
  s.warmupSteps = 0;
  EXPECT_DOUBLE_EQ(s.at(0), 1.0);
}

TEST(LrScheduleTest, OneCycleRisesFromMinLrToThePeakAndBack) {
  LrSchedule s = schedule(LrSchedule::Kind::OneCycle);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(5), 0.55);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0); // the peak
  EXPECT_DOUBLE_EQ(s.at(60), 0.55);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(200), 0.1);
}

TEST(LrScheduleTest, NamesRoundTrip) {
  for (unsigned i = 0; i < kNumLrScheduleKinds; ++i) {
    auto kind = LrSchedule::Kind(i);
    EXPECT_EQ(parseLrScheduleKind(stringifyLrScheduleKind(kind)), kind);
  }
  EXPECT_FALSE(parseLrScheduleKind("cosine_with_restarts"));
}

TEST(BatchRampupTest, MegatronIncrements) {
  // --rampup-batch-size 8 8 300 with global 32: three increments of 8, one
  // per 100 samples.
  BatchRampup r{8, 8, 300};
  EXPECT_EQ(r.globalBatchAt(0, 32, 4), 8);
  EXPECT_EQ(r.globalBatchAt(99, 32, 4), 8);
  EXPECT_EQ(r.globalBatchAt(100, 32, 4), 16);
  EXPECT_EQ(r.globalBatchAt(250, 32, 4), 24);
  EXPECT_EQ(r.globalBatchAt(300, 32, 4), 32);
  EXPECT_EQ(r.globalBatchAt(100000, 32, 4), 32);
  // Rounded down to whole micro-batches, never below one.
  EXPECT_EQ(r.globalBatchAt(0, 32, 16), 16);
  EXPECT_EQ(BatchRampup().globalBatchAt(0, 32, 4), 32); // off
}

TEST(BatchRampupTest, StepSequence) {
  BatchSchedule s;
  s.globalBatch = 32;
  s.microBatch = 8;
  s.seqLen = 16;
  s.rampup = {8, 8, 48};
  std::vector<int64_t> sizes, microBatches;
  int64_t consumed = 0;
  for (int64_t step = 0; step < 10; ++step) {
    StepShape shape = s.at(step, consumed);
    sizes.push_back(shape.globalBatch);
    microBatches.push_back(shape.microBatches);
    consumed += shape.globalBatch;
  }
  // 16 samples per increment: 8, 8 (16 consumed) -> 16 (32) -> 24 (56) ->
  // 32 from 48 on.
  EXPECT_EQ(sizes, (std::vector<int64_t>{8, 8, 16, 24, 32, 32, 32, 32, 32, 32}));
  EXPECT_EQ(microBatches, (std::vector<int64_t>{1, 1, 2, 3, 4, 4, 4, 4, 4, 4}));
}

TEST(SeqLenWarmupTest, GrowsInStepsOfEight) {
  SeqLenWarmup w{16, 100};
  EXPECT_EQ(w.seqLenAt(0, 64), 16);
  EXPECT_EQ(w.seqLenAt(20, 64), 24);  // 16 + 48*20/100 = 25.6 -> 24
  EXPECT_EQ(w.seqLenAt(50, 64), 40);
  EXPECT_EQ(w.seqLenAt(99, 64), 56);
  EXPECT_EQ(w.seqLenAt(100, 64), 64);
  EXPECT_EQ(w.seqLenAt(5000, 64), 64);
  std::set<int64_t> lengths;
  int64_t previous = 0;
  for (int64_t step = 0; step <= 120; ++step) {
    int64_t length = w.seqLenAt(step, 64);
    EXPECT_GE(length, previous);
    EXPECT_EQ((length - 16) % 8 == 0 || length == 64, true) << length;
    previous = length;
    lengths.insert(length);
  }
  // Each length is compiled once: seven of them.
  EXPECT_EQ(lengths, (std::set<int64_t>{16, 24, 32, 40, 48, 56, 64}));
  EXPECT_EQ(SeqLenWarmup().seqLenAt(0, 64), 64); // off
}

TEST(BatchScheduleTest, StepsForTokens) {
  BatchSchedule s;
  s.globalBatch = 8;
  s.microBatch = 4;
  s.seqLen = 64;
  EXPECT_EQ(s.stepsForTokens(8 * 64 * 10), 10);
  EXPECT_EQ(s.stepsForTokens(8 * 64 * 10 + 1), 11);
  EXPECT_EQ(s.stepsForTokens(1), 1);
  // A ramp-up makes the early steps smaller, so more of them are needed.
  s.rampup = {4, 4, 40};
  EXPECT_GT(s.stepsForTokens(8 * 64 * 10), 10);
}
