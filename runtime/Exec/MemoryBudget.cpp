// The memory a run needs against the memory the host (or cgroup) has left.
#include "runtime/Exec/MemoryBudget.h"

#include "ir/kernel/Program.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace llmc;
using namespace llmc::runtime;

MemoryNeed runtime::memoryNeed(llvm::ArrayRef<const kir::Program *> programs) {
  MemoryNeed need;
  llvm::StringSet<> persistent;
  for (const kir::Program *program : programs) {
    need.arenaBytes += program->arenaBytes;
    for (const kir::Buffer &buffer : program->buffers) {
      if (kir::isPersistent(buffer.kind) &&
          persistent.insert(buffer.name).second)
        need.persistentBytes += buffer.bytes();
      if (buffer.kind == kir::BufferKind::Input)
        need.inputBytes += buffer.bytes();
    }
  }
  return need;
}

/// The first line of a small file, trimmed; empty when unreadable.
static std::string readLine(const char *path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFileAsStream(path);
  if (!file)
    return "";
  return (*file)->getBuffer().split('\n').first.trim().str();
}

std::optional<AvailableMemory> runtime::availableHostMemory() {
  std::optional<AvailableMemory> best;
  auto consider = [&](int64_t bytes, std::string source) {
    if (!best || bytes < best->bytes)
      best = AvailableMemory{std::max<int64_t>(bytes, 0), std::move(source)};
  };
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> meminfo =
      llvm::MemoryBuffer::getFileAsStream("/proc/meminfo");
  if (meminfo) {
    llvm::SmallVector<llvm::StringRef> lines;
    (*meminfo)->getBuffer().split(lines, '\n');
    for (llvm::StringRef line : lines) {
      if (!line.consume_front("MemAvailable:"))
        continue;
      int64_t kib = 0;
      if (!line.trim().split(' ').first.getAsInteger(10, kib))
        consider(kib * 1024, "MemAvailable in /proc/meminfo");
    }
  }
  // The cgroup's limit less its usage (v2, then v1; "max" or a huge v1
  // value means no limit).
  struct Files {
    const char *limit, *usage, *name;
  };
  for (Files files :
       {Files{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current",
              "the cgroup's memory.max"},
        Files{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
              "/sys/fs/cgroup/memory/memory.usage_in_bytes",
              "the cgroup's memory.limit_in_bytes"}}) {
    int64_t limit = 0, usage = 0;
    if (llvm::StringRef(readLine(files.limit)).getAsInteger(10, limit) ||
        llvm::StringRef(readLine(files.usage)).getAsInteger(10, usage))
      continue;
    if (limit < (int64_t(1) << 60))
      consider(limit - usage, files.name);
    break;
  }
  return best;
}

std::string runtime::formatBytes(int64_t bytes) {
  const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0)
    return std::to_string(bytes) + " bytes";
  return llvm::formatv("{0:f2} {1}", value, units[unit]).str();
}

llvm::Error runtime::checkMemoryFits(const MemoryNeed &need,
                                     const AvailableMemory &available,
                                     llvm::StringRef what, bool training) {
  if (need.total() <= available.bytes)
    return llvm::Error::success();
  std::string advice;
  if (training) {
    const char *activations =
        "a smaller micro-batch or sequence length, activation checkpointing "
        "(--remat selective or full) or --precision bf16 shrinks the "
        "activations";
    const char *persistent =
        "ZeRO sharding over more ranks (parallel.zero) or a smaller model "
        "shrinks the parameters, gradients and optimizer state";
    bool activationsFirst = need.arenaBytes > need.persistentBytes;
    advice = llvm::formatv("{0}; {1}", activationsFirst ? activations : persistent,
                           activationsFirst ? persistent : activations);
  } else {
    advice = "a smaller batch or sequence length (llmc compile --batch, "
             "--seq-len) shrinks the activations; a smaller model the "
             "parameters";
  }
  return llvm::createStringError(llvm::formatv(
      "{0} needs {1} of memory (parameters and state {2}, activations and "
      "temporaries {3}, inputs {4}) but {5} is available ({6}); no kernel "
      "was compiled. To fit: {7}",
      what, formatBytes(need.total()), formatBytes(need.persistentBytes),
      formatBytes(need.arenaBytes), formatBytes(need.inputBytes),
      formatBytes(available.bytes), available.source, advice));
}
