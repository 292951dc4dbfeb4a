// One-time parallel work outside an executor's thread pool: short-lived
// threads that take chunks from one shared counter.
#ifndef LLMC_RUNTIME_PARALLELCHUNKS_H
#define LLMC_RUNTIME_PARALLELCHUNKS_H

#include <cstdint>
#include <functional>

namespace llmc::runtime {

/// Runs fn(begin, end) over [0, n) cut into contiguous, nearly equal
/// chunks of at least minPerThread items, a few per thread, on threads
/// started for the call (as many as the process may use,
/// runtime/Exec/CpuBudget.h) and the calling thread; in one call when
/// n < 2 * minPerThread. The chunks are taken from a shared counter, so a
/// thread that the OS does not schedule (a busy machine) leaves its share
/// to the others, and the call returns once every chunk is done, without
/// waiting for a thread that took none (such threads are detached and end
/// on their own). For one-time work outside an executor's pool: the seeded
/// initialization, zeroing new persistent tensors (their first touch),
/// checksums.
void parallelChunks(int64_t n, int64_t minPerThread,
                    const std::function<void(int64_t, int64_t)> &fn);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_PARALLELCHUNKS_H
