// StagingSlots and ReadbackSlots: which host slot an asynchronous copy
// uses and when the host may touch it.
#include "runtime/Cuda/StepSlots.h"

#include "llvm/Support/FormatVariadic.h"

using namespace llmc::runtime;

llvm::Expected<int> StagingSlots::acquire(int64_t generation) {
  if (generation < 0)
    return llvm::createStringError("staging: negative generation");
  int slot = int(generation % depth);
  if (fenced[slot])
    if (llvm::Error error = fences.wait(slot))
      return error;
  return slot;
}

llvm::Error StagingSlots::release(int64_t generation) {
  int slot = int(generation % depth);
  if (llvm::Error error = fences.record(slot))
    return error;
  fenced[slot] = true;
  return llvm::Error::success();
}

llvm::Expected<int> ReadbackSlots::slotFor(int64_t step) const {
  if (int64_t(pending.size()) >= depth)
    return llvm::createStringError(llvm::formatv(
        "read-back of step {0}: {1} steps in flight (from step {2}); read "
        "one back first",
        step, pending.size(), pending.front()));
  if (!pending.empty() && step <= pending.back())
    return llvm::createStringError(llvm::formatv(
        "read-back of step {0} after step {1}", step, pending.back()));
  return int(nextSlot % depth);
}

llvm::Error ReadbackSlots::push(int64_t step) {
  llvm::Expected<int> slot = slotFor(step);
  if (!slot)
    return slot.takeError();
  if (llvm::Error error = fences.record(*slot))
    return error;
  pending.push_back(step);
  pendingSlots.push_back(*slot);
  ++nextSlot;
  return llvm::Error::success();
}

llvm::Expected<ReadbackSlots::Landed> ReadbackSlots::pop() {
  if (pending.empty())
    return llvm::createStringError("read-back: no step in flight");
  Landed landed{pending.front(), pendingSlots.front()};
  if (llvm::Error error = fences.wait(landed.slot))
    return error;
  pending.pop_front();
  pendingSlots.pop_front();
  return landed;
}
