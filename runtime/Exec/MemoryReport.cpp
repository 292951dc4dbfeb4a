// The memory report: resident pages by category from smaps and mincore.
//
// The split is exact by construction: every mapping's resident pages
// (smaps "Rss") go to one line. File mappings are the binary and its
// libraries or other mapped files; the main thread's [stack] is a thread
// stack; in anonymous mappings (the malloc heap, large malloc chunks, JIT
// segments, thread stacks) the pages a ledger range covers go to its
// category (mincore says which are resident) and the rest is the untracked
// heap. Only that rest is estimated: mallinfo2 says how much of it malloc
// has handed out and how much it holds free; what neither explains is
// "unaccounted".
#include "runtime/Exec/MemoryReport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cstring>
#include <map>

#ifdef __linux__
#include <malloc.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#endif

using namespace llmc;
using namespace llmc::runtime;

namespace {

/// The text of a /proc file (they report size 0: read until the end).
std::string readProcFile(const char *path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFileAsStream(path);
  return file ? (*file)->getBuffer().str() : std::string();
}

/// "VmRSS:   1234 kB" -> bytes.
int64_t kilobytesField(llvm::StringRef line) {
  llvm::StringRef value = line.split(':').second.trim();
  int64_t kb = 0;
  if (value.consume_back("kB"))
    value.trim().getAsInteger(10, kb);
  return kb * 1024;
}

struct Mapping {
  uintptr_t begin = 0, end = 0;
  bool readable = false;
  std::string path; // empty: anonymous
  int64_t rss = 0;
  int64_t claimed = 0; // resident bytes ledger ranges took
};

std::vector<Mapping> readMappings() {
  std::vector<Mapping> mappings;
  std::string text = readProcFile("/proc/self/smaps");
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    if (line.starts_with("Rss:")) {
      if (!mappings.empty())
        mappings.back().rss = kilobytesField(line);
      continue;
    }
    // A mapping's header: "begin-end perms offset dev inode [path]"; the
    // field lines ("Size:", "VmFlags:") start with a capital letter.
    llvm::StringRef range = line.split(' ').first;
    auto [first, last] = range.split('-');
    uint64_t begin = 0, end = 0;
    if (last.empty() || first.getAsInteger(16, begin) ||
        last.getAsInteger(16, end))
      continue;
    Mapping m;
    m.begin = uintptr_t(begin);
    m.end = uintptr_t(end);
    m.readable = line.split(' ').second.starts_with("r");
    llvm::StringRef rest = line;
    for (int field = 0; field < 5; ++field)
      rest = rest.ltrim().split(' ').second;
    m.path = rest.trim().str();
    mappings.push_back(std::move(m));
  }
  return mappings;
}

bool isAnonymous(const Mapping &m) {
  return m.path.empty() || m.path == "[heap]" ||
         llvm::StringRef(m.path).starts_with("[anon");
}

#ifdef __linux__
/// Whether malloc made anonymous mapping `m`: the main heap, a thread
/// arena's heap (glibc aligns them to their maximum size, 64 MiB), or one
/// large chunk (its header, at the start, holds the mapping's size with
/// the IS_MMAPPED bit). Others are made by libraries themselves (OpenBLAS's
/// work buffers) or by the JIT and threads.
bool mallocMapping(const Mapping &m) {
  constexpr uintptr_t kArenaHeap = uintptr_t(64) << 20;
  if (m.path == "[heap]")
    return true;
  if (m.begin % kArenaHeap == 0 && m.end - m.begin <= kArenaHeap)
    return true;
  if (!m.readable || m.rss == 0 || m.end - m.begin < 16)
    return false;
  // Read through the kernel rather than dereference: another thread may
  // have unmapped the range since smaps listed it (a large free, a
  // thread's exit), and under AddressSanitizer (-DLLMC_SANITIZE=ON) a plain
  // read of ASan's own shadow mappings faults in its shadow check.
  size_t size = 0;
  struct iovec local = {&size, sizeof(size)};
  struct iovec remote = {reinterpret_cast<void *>(m.begin + 8), sizeof(size)};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) !=
      ssize_t(sizeof(size)))
    return false;
  return (size & 2) && (size & ~size_t(7)) == m.end - m.begin;
}

/// Resident bytes of the page-aligned range [begin, end).
int64_t residentBytes(uintptr_t begin, uintptr_t end, int64_t page) {
  if (end <= begin)
    return 0;
  std::vector<unsigned char> present((end - begin) / page);
  if (mincore(reinterpret_cast<void *>(begin), end - begin, present.data()))
    return 0;
  int64_t pages = 0;
  for (unsigned char p : present)
    pages += p & 1;
  return pages * page;
}
#endif

} // namespace

ProcessMemory llmc::runtime::readProcessMemory() {
  ProcessMemory memory;
  std::string text = readProcFile("/proc/self/status");
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    if (line.starts_with("VmRSS:"))
      memory.resident = kilobytesField(line);
    else if (line.starts_with("VmHWM:"))
      memory.peak = kilobytesField(line);
  }
  return memory;
}

int MemoryLedger::categoryIndex(llvm::StringRef name, Source source) {
  for (auto [index, category] : llvm::enumerate(categoryList))
    if (category.name == name)
      return int(index);
  categoryList.push_back({name.str(), source});
  return int(categoryList.size() - 1);
}

void MemoryLedger::add(llvm::StringRef category, Source source,
                       const void *data, int64_t bytes) {
  int index = categoryIndex(category, source);
  categoryList[index].bytes += bytes;
  ++categoryList[index].ranges;
  if (data && bytes > 0)
    rangeList.push_back({index, reinterpret_cast<uintptr_t>(data), bytes});
}

void MemoryLedger::addPlannedElsewhere(llvm::StringRef category,
                                       int64_t bytes) {
  int index = categoryIndex(category, Source::Planned);
  categoryList[index].bytes += bytes;
}

void MemoryPhases::end(llvm::StringRef phase) {
  ProcessMemory now = readProcessMemory();
  if (now.peak > lastPeak) {
    lastPeak = now.peak;
    peak = phase.str();
  }
  for (Mark &mark : list)
    if (mark.phase == phase) {
      mark.resident = std::max(mark.resident, now.resident);
      mark.peak = now.peak;
      return;
    }
  list.push_back({phase.str(), now.resident, now.peak});
}

int64_t MemoryBreakdown::plannedBytes() const {
  int64_t sum = 0;
  for (const MemoryLine &line : planned)
    sum += line.planned;
  return sum;
}

MemoryBreakdown llmc::runtime::measureMemory(const MemoryLedger &ledger,
                                             const MemoryPhases *phases) {
  MemoryBreakdown b;
  const auto &categories = ledger.categories();
  std::vector<int64_t> resident(categories.size(), 0);
  int64_t binary = 0, files = 0, mainStack = 0, heapRest = 0, otherAnon = 0;
#ifdef __linux__
  std::vector<Mapping> mappings = readMappings();
  b.available = !mappings.empty();
  const int64_t page = sysconf(_SC_PAGESIZE);
  // Ranges in address order, widened to whole pages; a page two ranges
  // share goes to the first.
  std::vector<MemoryLedger::Range> ranges = ledger.ranges();
  llvm::sort(ranges, [](const auto &x, const auto &y) {
    return x.begin < y.begin;
  });
  uintptr_t claimedUpTo = 0;
  for (const MemoryLedger::Range &range : ranges) {
    uintptr_t begin = range.begin / page * page;
    uintptr_t end = (range.begin + range.bytes + page - 1) / page * page;
    begin = std::max(begin, claimedUpTo);
    if (begin >= end)
      continue;
    claimedUpTo = end;
    // The anonymous mappings it overlaps (in address order).
    auto it = std::upper_bound(
        mappings.begin(), mappings.end(), begin,
        [](uintptr_t address, const Mapping &m) { return address < m.end; });
    for (; it != mappings.end() && it->begin < end; ++it) {
      if (!isAnonymous(*it))
        continue;
      int64_t bytes = residentBytes(std::max(begin, it->begin),
                                    std::min(end, it->end), page);
      // mincore counts a page mapped to the shared zero page (read, never
      // written), which smaps's Rss does not: never claim more than Rss.
      bytes = std::min(bytes, it->rss - it->claimed);
      it->claimed += bytes;
      resident[range.category] += bytes;
    }
  }
  static const std::string exe = [] {
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    return n > 0 ? std::string(path, n) : std::string();
  }();
  for (const Mapping &m : mappings) {
    llvm::StringRef path = m.path;
    if (isAnonymous(m))
      (mallocMapping(m) ? heapRest : otherAnon) += m.rss - m.claimed;
    else if (path == "[stack]")
      mainStack += m.rss;
    else if (path == exe || path.contains(".so") || path.starts_with("[v"))
      binary += m.rss; // text and data of the binary, libraries, vdso
    else
      files += m.rss;
  }
#endif

  int64_t trackedMalloc = 0;
  for (const MemoryLedger::Range &range : ledger.ranges())
    if (categories[range.category].source != MemoryLedger::Source::Mapped)
      trackedMalloc += range.bytes;
  bool stacksLine = false;
  for (auto [index, category] : llvm::enumerate(categories)) {
    MemoryLine line{category.name, -1, resident[index], "mincore"};
    if (category.source == MemoryLedger::Source::Planned) {
      line.planned = category.bytes;
      b.planned.push_back(line);
      continue;
    }
    if (category.name == "thread stacks") {
      line.resident += mainStack;
      line.how = "mincore, smaps [stack]";
      stacksLine = true;
    }
    b.above.push_back(line);
  }
  if (!stacksLine)
    b.above.push_back({"thread stacks", -1, mainStack, "smaps [stack]"});
  b.above.push_back(
      {"binary and shared libraries", -1, binary, "smaps file mappings"});
  b.above.push_back({"other mapped files", -1, files, "smaps file mappings"});
  b.above.push_back({"anonymous mappings outside malloc (OpenBLAS work "
                     "buffers, MPI)",
                     -1, otherAnon, "smaps: not malloc's heaps or chunks"});
  int64_t inUse = 0, freeHeld = 0;
#ifdef __linux__
  struct mallinfo2 info = mallinfo2();
  inUse = int64_t(info.uordblks + info.hblkhd);
  freeHeld = int64_t(info.fordblks);
#endif
  int64_t untracked = std::clamp<int64_t>(inUse - trackedMalloc, 0, heapRest);
  int64_t freeLists = std::clamp<int64_t>(freeHeld, 0, heapRest - untracked);
  b.above.push_back({"heap in use, untracked (compiler, JIT bookkeeping, "
                     "metadata)",
                     -1, untracked, "estimate: mallinfo2 in use - ledger"});
  b.above.push_back({"malloc free lists, not returned to the OS", -1,
                     freeLists, "estimate: mallinfo2 fordblks"});
  b.above.push_back({"unaccounted", -1, heapRest - untracked - freeLists,
                     "malloc's Rss left"});

  for (const MemoryLine &line : b.planned)
    b.resident += line.resident;
  for (const MemoryLine &line : b.above)
    b.resident += line.resident;
  // VmHWM is sampled by the kernel; the sum of Rss can run a page ahead.
  b.peak = std::max(readProcessMemory().peak, b.resident);
  if (phases)
    b.peakPhase = phases->peakPhase();
  return b;
}

namespace {
std::string mib(int64_t bytes) {
  return llvm::formatv("{0:f1} MiB", double(bytes) / (1 << 20)).str();
}
} // namespace

void llmc::runtime::printMemoryBreakdown(llvm::raw_ostream &os,
                                         const MemoryBreakdown &b,
                                         bool table) {
  if (!b.available) {
    os << "memory: resident memory is not measured on this system (no "
          "/proc/self/smaps)\n";
    return;
  }
  int64_t plannedResident = 0, above = 0;
  for (const MemoryLine &line : b.planned)
    plannedResident += line.resident;
  for (const MemoryLine &line : b.above)
    above += line.resident;
  os << "memory: peak resident " << mib(b.peak) << " (VmHWM"
     << (b.peakPhase.empty() ? "" : ", reached in: " + b.peakPhase)
     << "); planned " << mib(b.plannedBytes()) << ", of it resident "
     << mib(plannedResident) << "; above the plan " << mib(above)
     << " resident at the end + " << mib(b.transient())
     << " transient\n";
  if (!table)
    return;
  auto row = [&](llvm::StringRef name, llvm::StringRef planned,
                 int64_t resident, llvm::StringRef how) {
    os << llvm::format("  %-66s %12s %12s", name.str().c_str(),
                       planned.str().c_str(), mib(resident).c_str());
    if (!how.empty())
      os << "  " << how;
    os << "\n";
  };
  os << llvm::format("  %-66s %12s %12s\n", "planned", "plan",
                     "resident");
  for (const MemoryLine &line : b.planned)
    row("  " + line.category, mib(line.planned), line.resident, line.how);
  os << "  above the plan\n";
  for (const MemoryLine &line : b.above)
    row("  " + line.category, "", line.resident, line.how);
  row("transient (peak - resident at the end)", "", b.transient(),
      "VmHWM - sum of Rss");
  row("peak resident", "", b.peak, "VmHWM");
}

std::string llmc::runtime::memoryBreakdownJson(const MemoryBreakdown &b,
                                               const MemoryPhases *phases) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream j(os);
  j.object([&] {
    j.attributeObject("memory", [&] {
      j.attribute("measured", b.available);
      j.attribute("peak_bytes", b.peak);
      j.attribute("peak_phase", b.peakPhase);
      j.attribute("resident_bytes", b.resident);
      j.attribute("transient_bytes", b.transient());
      j.attribute("planned_bytes", b.plannedBytes());
      j.attributeArray("planned", [&] {
        for (const MemoryLine &line : b.planned)
          j.object([&] {
            j.attribute("category", line.category);
            j.attribute("planned_bytes", line.planned);
            j.attribute("resident_bytes", line.resident);
          });
      });
      j.attributeArray("above_plan", [&] {
        for (const MemoryLine &line : b.above)
          j.object([&] {
            j.attribute("category", line.category);
            j.attribute("resident_bytes", line.resident);
            j.attribute("how", line.how);
          });
      });
      if (phases)
        j.attributeArray("phases", [&] {
          for (const MemoryPhases::Mark &mark : phases->marks())
            j.object([&] {
              j.attribute("phase", mark.phase);
              j.attribute("resident_bytes", mark.resident);
              j.attribute("peak_bytes", mark.peak);
            });
        });
    });
  });
  return text;
}
