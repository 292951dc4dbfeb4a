// Host memory for tensors: the persistent store's tensors and the
// executors' arenas and inputs.
#ifndef LLMC_RUNTIME_HOSTMEMORY_H
#define LLMC_RUNTIME_HOSTMEMORY_H

#include <cstdint>

namespace llmc::runtime {

/// Transparent huge pages on x86-64 Linux.
constexpr int64_t kHugePageBytes = int64_t(1) << 21;

/// At least `bytes` (one when 0) of uninitialized memory, 64-byte aligned
/// (kir::kArenaAlignment), released with std::free; nullptr when the
/// allocation fails. Allocations of a huge page or more start on a huge
/// page, and their whole huge pages are advised as such
/// (madvise(MADV_HUGEPAGE); the tail stays in small pages, so nothing is
/// rounded up): where transparent huge pages are in "madvise"
/// mode (Debian's default) they are otherwise 4 KiB pages. GPT-2 124M's
/// 2 GB of parameters, gradients and moments then fault in ~1000 times at
/// start, not ~500,000, and the streaming kernels (AdamW reads four
/// tensors and writes three) and the GEMMs' operand packing cross a page
/// boundary, where the hardware prefetchers stop, every 2 MiB instead of
/// every 4 KiB. Where the kernel refuses (mode "never"), the memory is the
/// same, in small pages. A size beyond the machine's RAM and swap together
/// (or negative) is refused without asking the allocator: it could never
/// be backed, and sanitizer allocators abort on such requests instead of
/// returning null.
char *allocateHostMemory(int64_t bytes);

/// RAM plus swap of this machine (sysinfo(2)); INT64_MAX where unknown.
int64_t hostMemoryLimit();

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_HOSTMEMORY_H
