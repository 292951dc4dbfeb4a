#include "runtime/Exec/HostMemory.h"

#include "ir/kernel/Program.h"

#include <algorithm>
#include <cstdlib>

#include <sys/mman.h>
#include <sys/sysinfo.h>

using namespace llmc;

int64_t runtime::hostMemoryLimit() {
  struct sysinfo info;
  if (sysinfo(&info) != 0)
    return INT64_MAX;
  long double total = (static_cast<long double>(info.totalram) +
                       static_cast<long double>(info.totalswap)) *
                      info.mem_unit;
  return total >= static_cast<long double>(INT64_MAX) ? INT64_MAX
                                                       : int64_t(total);
}

char *runtime::allocateHostMemory(int64_t bytes) {
  if (bytes < 0 || bytes > hostMemoryLimit())
    return nullptr;
  int64_t size = (std::max<int64_t>(bytes, 1) + kir::kArenaAlignment - 1) /
                 kir::kArenaAlignment * kir::kArenaAlignment;
  if (size < kHugePageBytes)
    return static_cast<char *>(std::aligned_alloc(kir::kArenaAlignment, size));
  // posix_memalign: aligned_alloc may refuse a size that is not a
  // multiple of the alignment.
  void *data = nullptr;
  if (posix_memalign(&data, kHugePageBytes, size) != 0)
    return nullptr;
  // Advice only (refused where THP is off); the tail short of a whole
  // huge page stays in small pages.
  (void)madvise(data, size / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return static_cast<char *>(data);
}
