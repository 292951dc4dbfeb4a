// Host buffers that asynchronous copies of a training step use in turn,
// each guarded by a device fence, so that the host never waits inside a
// step: the inputs of step N+1 are written while step N runs, and step
// N's loss and grad norm are read after step N+1 is enqueued. Host logic
// only (no CUDA types): the executor passes CUDA events as the fences, the
// unit tests a fake device (test/unit/runtime/Cuda/StepSlotsTest.cpp).
#ifndef LLMC_RUNTIME_CUDA_STEPSLOTS_H
#define LLMC_RUNTIME_CUDA_STEPSLOTS_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace llmc::runtime {

/// A fence per slot: record(slot) marks the work enqueued so far on the
/// stream as the slot's; wait(slot) blocks until the last recorded one has
/// passed (at once if none was recorded).
struct SlotFences {
  std::function<llvm::Error(int)> record;
  std::function<llvm::Error(int)> wait;
};

/// `depth` slots used by generations 0, 1, 2, ... in turn (generation g
/// in slot g % depth) for host-to-device copies: the host may write a
/// slot once the fence of the generation that used it before has passed.
class StagingSlots {
public:
  StagingSlots(int depth, SlotFences fences)
      : depth(depth), fences(std::move(fences)), fenced(depth, false) {}

  /// The slot of `generation`, once the host may write it: waits for the
  /// fence of generation - depth (which has normally long passed).
  llvm::Expected<int> acquire(int64_t generation);
  /// The copies out of `generation`'s slot are enqueued: fences them.
  llvm::Error release(int64_t generation);
  int slots() const { return depth; }

private:
  int depth;
  SlotFences fences;
  std::vector<bool> fenced; // per slot: a fence was recorded
};

/// Step results copied device-to-host in turn: push(step) after enqueueing
/// the step's copies into slotFor(step), pop() the oldest once they landed.
/// At most `depth` steps are in flight; a slot is reused only after pop()
/// read it, so a value is never overwritten before the host has it.
class ReadbackSlots {
public:
  ReadbackSlots(int depth, SlotFences fences)
      : depth(depth), fences(std::move(fences)) {}

  /// The slot step `step`'s copies go to; fails when `depth` steps are
  /// already in flight (pop() one first) or `step` is not after the last
  /// pushed one.
  llvm::Expected<int> slotFor(int64_t step) const;
  /// The copies of `step` into slotFor(step) are enqueued: fences them.
  llvm::Error push(int64_t step);

  struct Landed {
    int64_t step;
    int slot; // its bytes may be read until the next push into it
  };
  /// The oldest step in flight, after its fence has passed; an error when
  /// none is in flight.
  llvm::Expected<Landed> pop();
  size_t inFlight() const { return pending.size(); }

private:
  int depth;
  SlotFences fences;
  std::deque<int64_t> pending; // pushed steps not popped, oldest first
  int64_t nextSlot = 0;        // slots are taken in turn
  std::deque<int> pendingSlots;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CUDA_STEPSLOTS_H
