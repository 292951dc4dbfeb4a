// One-time parallel work outside an executor's thread pool: short-lived
// threads, one per hardware thread.
#ifndef LLMC_RUNTIME_PARALLELCHUNKS_H
#define LLMC_RUNTIME_PARALLELCHUNKS_H

#include <cstdint>
#include <functional>

namespace llmc::runtime {

/// Runs fn(begin, end) on contiguous, nearly equal chunks of [0, n), one
/// per hardware thread, on threads started for the call (the calling thread
/// takes the first chunk); in one call when n < 2 * minPerThread. For
/// one-time work outside an executor's pool: the seeded initialization,
/// zeroing new persistent tensors (their first touch), checksums.
void parallelChunks(int64_t n, int64_t minPerThread,
                    const std::function<void(int64_t, int64_t)> &fn);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_PARALLELCHUNKS_H
