// Static memory planning: live ranges of arena buffers over the schedule,
// and one offset per buffer so that buffers alive at the same time never
// overlap.
#ifndef LLMC_IR_KERNEL_MEMORYPLAN_H
#define LLMC_IR_KERNEL_MEMORYPLAN_H

#include "ir/kernel/Program.h"

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

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

/// The persistent memory of one rank of a training run, by what it holds:
/// parameters (ZeRO-3: their blocks `shard.<p>`; mixed precision: also
/// the 16-bit copies `cast.<p>` the steps read), the fp32 partition of
/// them the optimizer steps beside full parameters (ZeRO-1/2's
/// `shard.<p>`), gradients (`grad.*`: full buffers and ZeRO's blocks),
/// optimizer state (moments, and ZeRO's `shard.<state>.<p>` blocks) and the
/// rest (the loss scale). The names are llmc-optimizer's, llmc-shard's
/// and llmc-persistent-casts'.
struct PersistentBytes {
  int64_t parameters = 0, master = 0, gradients = 0, optimizer = 0,
          other = 0;
  int64_t total() const {
    return parameters + master + gradients + optimizer + other;
  }
};

/// One named persistent tensor and its size.
struct PersistentTensor {
  std::string name;
  bool parameter = false;
  int64_t bytes = 0;
};

/// What one persistent tensor holds (PersistentBytes's fields).
enum class PersistentKind { Parameters, Master, Gradients, Optimizer, Other };
llvm::StringRef persistentKindName(PersistentKind kind);

/// The kind of each of `tensors`, in their order (the parameters among
/// them tell a ZeRO-1/2 master block `shard.<p>` from a ZeRO-3 weight
/// block).
std::vector<PersistentKind>
persistentKinds(const std::vector<PersistentTensor> &tensors);

/// Sums `tensors` by kind (each name counts once).
PersistentBytes classifyPersistent(const std::vector<PersistentTensor> &tensors);

/// The Param and State buffers of `programs` (one run's), each name once.
std::vector<PersistentTensor>
persistentTensors(const std::vector<const Program *> &programs);

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_MEMORYPLAN_H
