// Where a process's resident memory goes: the planned tensors (parameters,
// gradients, optimizer state, each program's arena) against the resident
// set the kernel reports, every byte above the plan in a measured category
// (JIT code, data loader, thread stacks, the binary, the heap), and the
// phase of the run that reached the peak. Linux: /proc/self/status, smaps
// and mincore(2); elsewhere the figures are zero and say so.
#ifndef LLMC_RUNTIME_MEMORYREPORT_H
#define LLMC_RUNTIME_MEMORYREPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::runtime {

/// The resident set now and its high-water mark (VmRSS, VmHWM).
struct ProcessMemory {
  int64_t resident = 0;
  int64_t peak = 0;
};
ProcessMemory readProcessMemory();

/// Host memory the report attributes: address ranges by category. A range
/// counts the resident pages it touches (mincore), each page once, the
/// first range that claims it winning.
class MemoryLedger {
public:
  /// How a category's memory came to be: planned by the compiler (its
  /// bytes are the plan's), allocated with malloc outside the plan, or
  /// mapped outside malloc (JIT code, thread stacks).
  enum class Source { Planned, Malloc, Mapped };

  /// Adds [data, data + bytes) to `category` (created on first use, in
  /// that order).
  void add(llvm::StringRef category, Source source, const void *data,
           int64_t bytes);
  /// Adds `bytes` to a category's planned figure without a host range:
  /// a planned tensor that lives elsewhere (on a GPU).
  void addPlannedElsewhere(llvm::StringRef category, int64_t bytes);

  struct Range {
    int category;
    uintptr_t begin;
    int64_t bytes;
  };
  struct Category {
    std::string name;
    Source source;
    int64_t bytes = 0; // the ranges' sizes (planned: the plan's bytes)
    int64_t ranges = 0;
  };
  const std::vector<Range> &ranges() const { return rangeList; }
  const std::vector<Category> &categories() const { return categoryList; }

private:
  int categoryIndex(llvm::StringRef name, Source source);
  std::vector<Range> rangeList;
  std::vector<Category> categoryList;
};

/// Marks the end of phases of a run (compile, kernels, first step,
/// checkpoint...) and remembers the one in which the high-water mark of
/// the resident set rose last, and the resident set after each.
class MemoryPhases {
public:
  struct Mark {
    std::string phase;
    int64_t resident, peak;
  };
  /// Ends `phase`: reads VmRSS and VmHWM. A repeated phase (every step)
  /// keeps one mark: the largest resident set seen at its ends.
  void end(llvm::StringRef phase);
  /// The phase that ended when the high-water mark was last seen to rise
  /// (empty before any).
  const std::string &peakPhase() const { return peak; }
  const std::vector<Mark> &marks() const { return list; }

private:
  std::vector<Mark> list;
  std::string peak;
  int64_t lastPeak = 0;
};

/// One line of the breakdown.
struct MemoryLine {
  std::string category;
  int64_t planned = -1; // -1: not planned
  int64_t resident = 0;
  /// How the figure was taken ("mincore", "smaps", "mallinfo2 estimate").
  std::string how;
};

/// The resident set now, split by category so that the lines sum to it
/// exactly, and the peak: resident now plus what was freed before now.
struct MemoryBreakdown {
  bool available = false; // false: not Linux, nothing measured
  int64_t peak = 0;       // VmHWM
  int64_t resident = 0;   // the sum of `planned` and `above`
  std::string peakPhase;
  std::vector<MemoryLine> planned; // planned categories, in ledger order
  std::vector<MemoryLine> above;   // the rest; "unaccounted" last
  int64_t plannedBytes() const;
  int64_t transient() const { return peak - resident; }
};

/// Measures now. Pool threads must be idle (nothing allocates meanwhile).
MemoryBreakdown measureMemory(const MemoryLedger &ledger,
                              const MemoryPhases *phases = nullptr);

/// The breakdown as aligned text lines (MiB): the summary line, then
/// (`table`) a row per category planned and above the plan.
void printMemoryBreakdown(llvm::raw_ostream &os, const MemoryBreakdown &b,
                          bool table = true);
/// The breakdown as one JSON object (bytes).
std::string memoryBreakdownJson(const MemoryBreakdown &b,
                                const MemoryPhases *phases = nullptr);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_MEMORYREPORT_H
