// NCCL communicators for device buffers: libnccl.so.2 loaded at run time
// with dlopen (like the CUDA driver in runtime/Cuda/CudaApi.h; nccl.h gives
// the types only), a unique id made on rank 0 and broadcast over an MPI (or
// single-process) communicator, collectives on a CUDA stream.
#ifndef LLMC_RUNTIME_COMM_NCCLCOMMUNICATOR_H
#define LLMC_RUNTIME_COMM_NCCLCOMMUNICATOR_H

#include "runtime/Comm/Communicator.h"

#include <cuda.h>
#include <nccl.h>

#include <string>

namespace llmc::runtime::comm {

/// The NCCL functions llmc uses; each member has the type of the function
/// it is named after.
struct NcclApi {
  decltype(&::ncclGetVersion) getVersion;
  decltype(&::ncclGetUniqueId) getUniqueId;
  decltype(&::ncclCommInitRank) commInitRank;
  decltype(&::ncclCommDestroy) commDestroy;
  decltype(&::ncclCommAbort) commAbort;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError;
  decltype(&::ncclAllReduce) allReduce;
  decltype(&::ncclReduceScatter) reduceScatter;
  decltype(&::ncclAllGather) allGather;
  decltype(&::ncclBroadcast) broadcast;
  decltype(&::ncclGroupStart) groupStart;
  decltype(&::ncclGroupEnd) groupEnd;
  decltype(&::ncclGetErrorString) getErrorString;
  int version = 0; // ncclGetVersion's code, e.g. 22809
};

/// Loads libnccl.so.2 once per process: from the loader's search path, then
/// the toolkit's library directory this llmc was built with, then
/// /usr/local/cuda/lib64 and /usr/local/cuda/lib. The error lists where it
/// looked. Needs no GPU.
llvm::Expected<const NcclApi *> loadNccl();

/// "2.28.9" for ncclGetVersion's 22809.
std::string ncclVersionString(int code);

/// A unique id made by rank 0 of `bootstrap` and broadcast to every rank.
/// Collective over `bootstrap`; needs no GPU.
llvm::Expected<ncclUniqueId> shareUniqueId(Communicator &bootstrap,
                                           const NcclApi &nccl);

/// An NCCL communicator over the ranks of `bootstrap` (which stays in use:
/// it must outlive the result), on CUDA device `device` (its primary
/// context). Collective over `bootstrap`: every rank first learns whether
/// all of them can create one (libnccl, the driver, the device), so a rank
/// without a GPU ends the call everywhere with an error instead of leaving
/// the others waiting.
///
/// Buffers are device pointers (CUdeviceptr cast to void *). Collectives run
/// in order on a stream the communicator owns; with a `computeStream` each
/// one first waits (on the device) for the work queued there before it was
/// started, so gradients computed there are complete, while later kernels
/// run beside it. wait() blocks the host until the collective is done; when
/// it makes no progress for timeoutSeconds the communicator is aborted
/// (ncclCommAbort) and a barrier on `bootstrap` names the ranks that did not
/// reach it (its own timeout applies on top). F16 and BF16 reduce natively;
/// avg is ncclAvg (f32, f16, bf16).
llvm::Expected<std::unique_ptr<Communicator>>
createNccl(Communicator &bootstrap, int device, const CommOptions &options = {},
           CUstream computeStream = nullptr);

} // namespace llmc::runtime::comm

#endif // LLMC_RUNTIME_COMM_NCCLCOMMUNICATOR_H
