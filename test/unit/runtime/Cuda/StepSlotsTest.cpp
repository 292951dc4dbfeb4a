// The host side of a training step without host waits
// (runtime/Cuda/StepSlots.h): which pinned slot each asynchronous copy
// uses and when the host may touch it, against a fake stream that runs its
// operations only when the host waits for a fence (as a GPU that is far
// behind would). A slot reused too early shows as a wrong value.
#include "runtime/Cuda/StepSlots.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

using namespace llmc::runtime;

namespace {

/// A stream: operations in order, run lazily up to the fence waited for.
struct FakeStream {
  std::vector<std::function<void()>> ops;
  size_t done = 0;
  std::vector<size_t> fenceAt; // per slot: ops before the fence
  int waits = 0;

  explicit FakeStream(int slots) : fenceAt(slots, 0) {}
  void enqueue(std::function<void()> op) { ops.push_back(std::move(op)); }
  void runUntil(size_t n) {
    while (done < n)
      ops[done++]();
  }
  SlotFences fences() {
    SlotFences f;
    f.record = [this](int slot) {
      fenceAt[slot] = ops.size();
      return llvm::Error::success();
    };
    f.wait = [this](int slot) {
      ++waits;
      runUntil(fenceAt[slot]);
      return llvm::Error::success();
    };
    return f;
  }
};

// A training loop: step s computes a loss (10 + s) on the device, copies it
// into its read-back slot, and the host reads it one step later (after
// step s + 1 is enqueued), so the device has never run past the step read.
TEST(StepSlotsTest, ReadbackOneStepLateGivesEveryStepItsValue) {
  FakeStream stream(2);
  ReadbackSlots readback(2, stream.fences());
  float deviceLoss = 0;
  float host[2] = {-1, -1};
  std::vector<std::pair<int64_t, float>> read;
  auto readOne = [&] {
    llvm::Expected<ReadbackSlots::Landed> landed = readback.pop();
    ASSERT_TRUE(bool(landed)) << llvm::toString(landed.takeError());
    read.push_back({landed->step, host[landed->slot]});
  };
  for (int64_t step = 0; step < 7; ++step) {
    stream.enqueue([&, step] { deviceLoss = 10.0f + step; });
    llvm::Expected<int> slot = readback.slotFor(step);
    ASSERT_TRUE(bool(slot)) << llvm::toString(slot.takeError());
    stream.enqueue([&, s = *slot] { host[s] = deviceLoss; });
    ASSERT_FALSE(bool(readback.push(step)));
    if (readback.inFlight() == 2) {
      readOne();
      // Step `step` was enqueued and not waited for: its work is pending.
      EXPECT_LT(stream.done, stream.ops.size()) << "step " << step;
    }
  }
  while (readback.inFlight())
    readOne();
  ASSERT_EQ(read.size(), 7u);
  for (int64_t step = 0; step < 7; ++step) {
    EXPECT_EQ(read[step].first, step);
    EXPECT_EQ(read[step].second, 10.0f + step) << "step " << step;
  }
  EXPECT_EQ(stream.done, stream.ops.size());
}

TEST(StepSlotsTest, ReadbackRefusesAThirdStepInFlightAndBadOrder) {
  FakeStream stream(2);
  ReadbackSlots readback(2, stream.fences());
  llvm::Expected<ReadbackSlots::Landed> none = readback.pop();
  ASSERT_FALSE(bool(none));
  EXPECT_EQ(llvm::toString(none.takeError()), "read-back: no step in flight");
  ASSERT_FALSE(bool(readback.push(0)));
  llvm::Error again = readback.push(0);
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(llvm::toString(std::move(again)),
            "read-back of step 0 after step 0");
  ASSERT_FALSE(bool(readback.push(1)));
  llvm::Error third = readback.push(2);
  ASSERT_TRUE(bool(third));
  EXPECT_EQ(llvm::toString(std::move(third)),
            "read-back of step 2: 2 steps in flight (from step 0); read one "
            "back first");
  llvm::Expected<ReadbackSlots::Landed> first = readback.pop();
  ASSERT_TRUE(bool(first));
  EXPECT_EQ(first->step, 0);
  EXPECT_FALSE(bool(readback.push(2)));
}

// Inputs staged for generation g (tokens of step g) while earlier
// generations' copies are still queued: the host writes slot g % 2 only
// after generation g - 2's copy out of it has run, so every generation's
// work sees its own input.
TEST(StepSlotsTest, StagingNeverOverwritesAQueuedCopy) {
  FakeStream stream(2);
  StagingSlots staging(2, stream.fences());
  int host[2] = {-1, -1};
  int deviceInput = -1;
  std::vector<int> seen;
  for (int64_t generation = 0; generation < 9; ++generation) {
    llvm::Expected<int> slot = staging.acquire(generation);
    ASSERT_TRUE(bool(slot)) << llvm::toString(slot.takeError());
    EXPECT_EQ(*slot, generation % 2);
    host[*slot] = int(100 + generation);
    stream.enqueue([&, s = *slot] { deviceInput = host[s]; });
    stream.enqueue([&] { seen.push_back(deviceInput); });
    ASSERT_FALSE(bool(staging.release(generation)));
  }
  // Only the waits for generation g - 2 ran anything before the end.
  EXPECT_EQ(stream.waits, 7);
  EXPECT_LT(stream.done, stream.ops.size());
  stream.runUntil(stream.ops.size());
  ASSERT_EQ(seen.size(), 9u);
  for (int generation = 0; generation < 9; ++generation)
    EXPECT_EQ(seen[generation], 100 + generation);
}

// Without the fences (a ring that never waits) the same loop reads a
// later generation's input: the check above can fail.
TEST(StepSlotsTest, StagingWithoutWaitingWouldRace) {
  FakeStream stream(2);
  SlotFences noWait = stream.fences();
  noWait.wait = [](int) { return llvm::Error::success(); };
  StagingSlots staging(2, noWait);
  int host[2] = {-1, -1};
  int deviceInput = -1;
  std::vector<int> seen;
  for (int64_t generation = 0; generation < 4; ++generation) {
    llvm::Expected<int> slot = staging.acquire(generation);
    ASSERT_TRUE(bool(slot));
    host[*slot] = int(100 + generation);
    stream.enqueue([&, s = *slot] { deviceInput = host[s]; });
    stream.enqueue([&] { seen.push_back(deviceInput); });
    ASSERT_FALSE(bool(staging.release(generation)));
  }
  stream.runUntil(stream.ops.size());
  EXPECT_NE(seen, (std::vector<int>{100, 101, 102, 103}));
}

} // namespace
