// Whether the programs of a run fit in memory, checked before their kernels
// are compiled, so a model too large fails in a second with both figures
// instead of after minutes of JIT compilation.
#ifndef LLMC_RUNTIME_MEMORYBUDGET_H
#define LLMC_RUNTIME_MEMORYBUDGET_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace llmc::kir {
struct Program;
} // namespace llmc::kir

namespace llmc::runtime {

/// What running some programs together allocates: persistent tensors once
/// each (programs share them by name through the store), and per program
/// its arena and its input buffers (executors own those).
struct MemoryNeed {
  int64_t persistentBytes = 0, arenaBytes = 0, inputBytes = 0;
  int64_t total() const { return persistentBytes + arenaBytes + inputBytes; }
};
MemoryNeed memoryNeed(llvm::ArrayRef<const kir::Program *> programs);

/// Memory this process can still allocate on the host, and where the figure
/// comes from: MemAvailable of /proc/meminfo, or the cgroup's limit less its
/// usage when lower (cgroup v2 memory.max, v1 memory.limit_in_bytes).
/// nullopt where neither can be read.
struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;
};
std::optional<AvailableMemory> availableHostMemory();

/// An error when `need` exceeds `available`, naming both, the breakdown and
/// what would shrink it (for a training run or, else, a forward); `what`
/// says which run ("the training step").
llvm::Error checkMemoryFits(const MemoryNeed &need,
                            const AvailableMemory &available,
                            llvm::StringRef what, bool training);

/// "1.50 GiB": bytes as people read them.
std::string formatBytes(int64_t bytes);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_MEMORYBUDGET_H
