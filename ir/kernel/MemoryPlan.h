// Static memory planning: live ranges of arena buffers over the schedule,
// and one offset per buffer so that buffers alive at the same time never
// overlap.
#ifndef LLMC_IR_KERNEL_MEMORYPLAN_H
#define LLMC_IR_KERNEL_MEMORYPLAN_H

#include "ir/kernel/Program.h"

namespace llmc::kir {

struct MemoryPlanStats {
  int64_t peakBytes = 0;       // the arena size: max offset + bytes
  int64_t liveLowerBound = 0;  // max over steps of the bytes alive then
  int64_t totalBytes = 0;      // the sum of all arena buffers (no reuse)
};

/// Computes every arena buffer's live range (from the first step that
/// touches it to the last, program outputs to the end) and assigns
/// offsets greedily, largest buffer first, at the lowest aligned offset
/// free for its whole range. Sets Program::arenaBytes to the peak.
void planMemory(Program &program);

/// The figures of a planned program (its live ranges and offsets, as
/// planMemory left them or an artifact stores them).
MemoryPlanStats memoryPlanStats(const Program &program);

/// The buffers a step reads or writes (its kernel's operands, library
/// views and its epilogue's operands).
std::vector<int32_t> buffersOfStep(const Program &program, const Step &step);

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_MEMORYPLAN_H
