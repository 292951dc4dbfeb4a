#include "runtime/HostMemory.h"

#include "ir/kernel/Program.h"

#include <algorithm>
#include <cstdlib>

#include <sys/mman.h>

using namespace llmc;

char *runtime::allocateHostMemory(int64_t bytes) {
  int64_t size = (std::max<int64_t>(bytes, 1) + kir::kArenaAlignment - 1) /
                 kir::kArenaAlignment * kir::kArenaAlignment;
  if (size < kHugePageBytes)
    return static_cast<char *>(std::aligned_alloc(kir::kArenaAlignment, size));
  void *data = std::aligned_alloc(kHugePageBytes, size);
  // Advice only (refused where THP is off); the tail short of a whole
  // huge page stays in small pages.
  if (data)
    (void)madvise(data, size / kHugePageBytes * kHugePageBytes,
                  MADV_HUGEPAGE);
  return static_cast<char *>(data);
}
