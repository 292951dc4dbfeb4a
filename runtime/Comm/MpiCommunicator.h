// The MPI world (MpiCommunicator.cpp); createWorld() picks it when a
// launcher started the process.
#ifndef LLMC_RUNTIME_COMM_MPICOMMUNICATOR_H
#define LLMC_RUNTIME_COMM_MPICOMMUNICATOR_H

#include "runtime/Comm/Communicator.h"

namespace llmc::runtime::comm {

/// All-reduces of at least this many bytes (f32, i32, i64) use llmc's ring
/// (MpiRing.h), smaller ones MPI_Iallreduce; the environment variable
/// LLMC_COMM_RING_BYTES overrides it (-1: never the ring). Chosen with
/// bench-allreduce (bench/README.md).
constexpr int64_t kDefaultRingBytes = 256 << 10;

/// Starts the communication thread, which calls MPI_Init_thread, and returns
/// the world once MPI is up. Call once per process.
llvm::Expected<std::unique_ptr<Communicator>>
createMpiWorld(const CommOptions &options);

} // namespace llmc::runtime::comm

#endif // LLMC_RUNTIME_COMM_MPICOMMUNICATOR_H
