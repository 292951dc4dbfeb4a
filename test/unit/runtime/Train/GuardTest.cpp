// The training guard: spike detection, its actions' bookkeeping, its state
// in checkpoints, and how metrics.jsonl and the loss plot show its events.
#include "runtime/Train/Trainer.h"
#include "runtime/Train/TrainingGuard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace llmc::runtime;
using ::testing::HasSubstr;

namespace {
GuardOptions windowOf(int64_t window) {
  GuardOptions options;
  options.action = GuardAction::Rollback;
  options.window = window;
  return options;
}

/// A guard whose window holds `losses` (grad norm 1 each).
TrainingGuard filled(GuardOptions options, std::vector<double> losses) {
  TrainingGuard guard(options);
  int64_t step = 0;
  for (double loss : losses)
    guard.recordClean(step++, loss, 1.0, false);
  return guard;
}
} // namespace

TEST(GuardTest, ZscoreNeedsAFullWindow) {
  GuardOptions options = windowOf(4);
  TrainingGuard guard = filled(options, {3.0, 3.1, 2.9});
  EXPECT_FALSE(guard.check(30.0, 1.0, false)); // 3 of 4 steps: no judgement
  guard.recordClean(3, 3.0, 1.0, false);
  std::optional<GuardEvent> event = guard.check(30.0, 1.0, false);
  ASSERT_TRUE(event);
  EXPECT_EQ(event->kind, GuardEvent::Kind::LossSpike);
  EXPECT_EQ(event->reason, "loss 30.0000 > mean 3.0000 + 6 sd (0.0707) of "
                           "the last 4 steps");
  // mean + 6 sd = 3.4243: just under is no spike, just over is.
  EXPECT_FALSE(guard.check(3.42, 1.0, false));
  EXPECT_TRUE(guard.check(3.43, 1.0, false));
  // A falling loss is never a spike.
  EXPECT_FALSE(guard.check(0.1, 1.0, false));
}

TEST(GuardTest, AFlatWindowIsNotNoise) {
  // sd 0: deviations under 0.1% of the mean are not spikes.
  TrainingGuard guard = filled(windowOf(3), {2.0, 2.0, 2.0});
  EXPECT_FALSE(guard.check(2.001, 1.0, false));
  EXPECT_TRUE(guard.check(2.02, 1.0, false));
}

TEST(GuardTest, RatioAndGradNormMedian) {
  GuardOptions options = windowOf(4);
  options.zscore = 0;
  options.ratio = 1.5;
  options.maxGradNormRatio = 10;
  TrainingGuard guard(options);
  for (double norm : {1.0, 2.0, 100.0, 3.0})
    guard.recordClean(0, 3.0, norm, false);
  EXPECT_FALSE(guard.check(4.4, 2.0, false));
  std::optional<GuardEvent> ratio = guard.check(4.6, 2.0, false);
  ASSERT_TRUE(ratio);
  EXPECT_EQ(ratio->reason, "loss 4.6000 > 1.5 x mean 3.0000 of the last 4 "
                           "steps");
  // The median (2.5) ignores the one outlier in the window.
  EXPECT_FALSE(guard.check(3.0, 24.0, false));
  std::optional<GuardEvent> grad = guard.check(3.0, 26.0, false);
  ASSERT_TRUE(grad);
  EXPECT_EQ(grad->kind, GuardEvent::Kind::GradSpike);
  EXPECT_THAT(grad->reason, HasSubstr("> 10 x median 2.5000"));
  // An overflow skipped by the loss scaler is not a gradient spike.
  EXPECT_FALSE(guard.check(3.0, 26.0, true));
}

TEST(GuardTest, NonFiniteValuesAreAlwaysEvents) {
  GuardOptions options = windowOf(50);
  options.action = GuardAction::Off; // even with spikes off
  TrainingGuard guard(options);
  std::optional<GuardEvent> loss = guard.check(NAN, 1.0, false);
  ASSERT_TRUE(loss);
  EXPECT_EQ(loss->kind, GuardEvent::Kind::NonFinite);
  EXPECT_EQ(loss->reason, "loss nan");
  std::optional<GuardEvent> norm = guard.check(2.5, INFINITY, false);
  ASSERT_TRUE(norm);
  EXPECT_EQ(norm->reason, "gradient norm inf (loss 2.5000)");
  // The inf norm of an overflow the loss scaler skipped is its business.
  EXPECT_FALSE(guard.check(2.5, INFINITY, true));
  EXPECT_FALSE(guard.check(1e30, 1.0, false)); // finite, window empty
}

TEST(GuardTest, RollbacksLowerTheLrUntilTheCooldownEnds) {
  GuardOptions options = windowOf(2);
  options.lrFactor = 0.5;
  options.cooldown = 2;
  options.maxRollbacks = 2;
  TrainingGuard guard = filled(options, {3.0, 3.0});
  GuardState windows = guard.state();
  guard.recordClean(2, 3.5, 1.0, false);
  guard.recordRollback(/*eventStep=*/5, /*batches=*/6, windows);
  EXPECT_EQ(guard.state().losses, windows.losses); // the spike is gone
  EXPECT_EQ(guard.state().lrFactor, 0.5);
  EXPECT_TRUE(guard.mayRollBack());
  guard.recordRollback(5, 4, windows);
  EXPECT_EQ(guard.state().lrFactor, 0.25);
  EXPECT_EQ(guard.state().skippedBatches, 10);
  EXPECT_FALSE(guard.mayRollBack()); // 2 in a row
  // Steps before the one that spiked do not end the run of rollbacks.
  guard.recordClean(3, 3.0, 1.0, false);
  EXPECT_EQ(guard.state().rollbacksInARow, 2);
  EXPECT_EQ(guard.state().lrFactor, 0.25);
  guard.recordClean(4, 3.0, 1.0, false); // cooldown over
  EXPECT_EQ(guard.state().lrFactor, 1.0);
  guard.recordClean(5, 3.0, 1.0, false); // past the spike
  EXPECT_EQ(guard.state().rollbacksInARow, 0);
  EXPECT_TRUE(guard.mayRollBack());
  EXPECT_EQ(guard.state().rollbacks, 2);
}

TEST(GuardTest, CooldownZeroKeepsTheLowerRate) {
  GuardOptions options = windowOf(2);
  options.cooldown = 0;
  TrainingGuard guard(options);
  guard.recordRollback(3, 2, GuardState());
  for (int64_t step = 0; step < 100; ++step)
    guard.recordClean(step, 3.0, 1.0, false);
  EXPECT_EQ(guard.state().lrFactor, 0.5);
}

TEST(GuardTest, StateRoundTripsBitwise) {
  GuardState state;
  state.losses = {3.1415926535897931, 1.0 / 3.0, 2.5e-300};
  state.gradNorms = {0.1, 7.0};
  state.rollbacks = 3;
  state.rollbacksInARow = 1;
  state.lastEventStep = 41;
  state.lrFactor = 0.125;
  state.cooldownLeft = 17;
  state.skippedBatches = 24;
  state.warnings = 2;
  llvm::Expected<GuardState> back = GuardState::fromJson(state.toJson());
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->toJson(), state.toJson());
  for (size_t i = 0; i < state.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&back->losses[i], &state.losses[i], sizeof(double)),
              0);
  EXPECT_EQ(back->cooldownLeft, 17);
  EXPECT_FALSE(back->isDefault());
  EXPECT_TRUE(GuardState().isDefault());

  llvm::Expected<GuardState> bad = GuardState::fromJson("{\"rollbacks\":1}");
  ASSERT_FALSE(bool(bad));
  EXPECT_THAT(llvm::toString(bad.takeError()),
              HasSubstr("the guard state has no 'rollbacks_in_a_row'"));
}

TEST(GuardTest, ActionsHaveNames) {
  for (GuardAction action : {GuardAction::Off, GuardAction::Warn,
                             GuardAction::Stop, GuardAction::Rollback})
    EXPECT_EQ(parseGuardAction(stringifyGuardAction(action)), action);
  EXPECT_FALSE(parseGuardAction("retry"));
  EXPECT_EQ(formatGuardValue(NAN), "nan");
  EXPECT_EQ(formatGuardValue(-INFINITY), "-inf");
  EXPECT_EQ(formatGuardValue(5.7e18), "5.7000e+18");
}

TEST(GuardMetricsTest, ARollbackUndoesTheLossesOfItsSteps) {
  std::string text = R"({"step":4,"loss":3.0}
{"step":5,"loss":3.1}
{"step":6,"loss":9.5}
{"step":5,"event":"rollback","from_step":6,"to_step":5}
{"step":5,"loss":3.05}
{"step":6,"loss":3.0}
{"step":7,"event":"spike","action":"warn"}
{"step":7,"loss":4.0}
)";
  std::vector<std::string> kept;
  std::vector<MetricPoint> train, val;
  std::vector<PlotEvent> events;
  readMetricLines(text, 100, kept, train, val, &events);
  EXPECT_EQ(kept.size(), 8u);
  ASSERT_EQ(train.size(), 4u);
  EXPECT_EQ(train[1].step, 5);
  EXPECT_DOUBLE_EQ(train[1].value, 3.05);
  EXPECT_DOUBLE_EQ(train[2].value, 3.0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].step, 6); // marked where it spiked
  EXPECT_EQ(events[0].kind, "rollback");
  EXPECT_EQ(events[1].kind, "spike");

  // A resume at step 6 keeps the rollback (logged at step 5) and the
  // retried step 5.
  kept.clear();
  train.clear();
  events.clear();
  readMetricLines(text, 6, kept, train, val, &events);
  ASSERT_EQ(train.size(), 2u);
  EXPECT_DOUBLE_EQ(train[1].value, 3.05);
  EXPECT_EQ(events.size(), 1u);

  std::string svg = renderLossPlot(train, val, "run", {{6, "rollback"},
                                                       {7, "spike"}});
  EXPECT_THAT(svg, HasSubstr("class=\"guard-rollback\""));
  EXPECT_THAT(svg, HasSubstr(">rollback 6</text>"));
  EXPECT_THAT(svg, HasSubstr("class=\"guard-spike\""));
}
