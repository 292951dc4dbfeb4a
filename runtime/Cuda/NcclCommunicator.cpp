// Loading NCCL with dlopen, sharing the unique id, and the NCCL
// communicator: collectives on a stream, waits that poll an event with a
// timeout.
#include "runtime/Cuda/NcclCommunicator.h"

#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaDeviceStore.h"


#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

using namespace llmc;
using namespace llmc::runtime::comm;

namespace {

using Clock = std::chrono::steady_clock;

struct NcclState {
  NcclApi api{};
  std::string error; // empty when loaded
};

NcclState loadNcclOnce() {
  NcclState state;
  std::vector<std::string> names = {"libnccl.so.2"};
#ifdef LLMC_NCCL_LIBRARY_DIR
  names.push_back(std::string(LLMC_NCCL_LIBRARY_DIR) + "/libnccl.so.2");
#endif
  names.push_back("/usr/local/cuda/lib64/libnccl.so.2");
  names.push_back("/usr/local/cuda/lib/libnccl.so.2");
  std::string tried;
  void *library = cuda::openFirstLibrary(names, tried);
  if (!library) {
    state.error = "NCCL (libnccl.so.2) not found; install NCCL (the CUDA "
                  "toolkit's, or libnccl2) or add its directory to "
                  "LD_LIBRARY_PATH; tried:" +
                  tried;
    return state;
  }
  std::string missing;
  NcclApi &a = state.api;
#define LLMC_BIND(member, name) \
  cuda::bindSymbol(library, a.member, #name, missing)
  LLMC_BIND(getVersion, ncclGetVersion);
  LLMC_BIND(getUniqueId, ncclGetUniqueId);
  LLMC_BIND(commInitRank, ncclCommInitRank);
  LLMC_BIND(commDestroy, ncclCommDestroy);
  LLMC_BIND(commAbort, ncclCommAbort);
  LLMC_BIND(commGetAsyncError, ncclCommGetAsyncError);
  LLMC_BIND(allReduce, ncclAllReduce);
  LLMC_BIND(reduceScatter, ncclReduceScatter);
  LLMC_BIND(allGather, ncclAllGather);
  LLMC_BIND(broadcast, ncclBroadcast);
  LLMC_BIND(groupStart, ncclGroupStart);
  LLMC_BIND(groupEnd, ncclGroupEnd);
  LLMC_BIND(getErrorString, ncclGetErrorString);
#undef LLMC_BIND
  if (!missing.empty()) {
    state.error = "NCCL (libnccl.so.2) lacks " + missing +
                  ": it is older than llmc needs (2.18 or later)";
    return state;
  }
  if (a.getVersion(&a.version) != ncclSuccess || a.version < 21800)
    state.error = "NCCL " + ncclVersionString(a.version) +
                  " is older than llmc needs (2.18 or later, for ncclAvg "
                  "and ncclCommGetAsyncError)";
  return state;
}

llvm::Error checkNccl(const NcclApi &nccl, ncclResult_t result,
                      const std::string &what) {
  if (result == ncclSuccess)
    return llvm::Error::success();
  return llvm::createStringError(what + " failed: " +
                                 nccl.getErrorString(result));
}

ncclDataType_t ncclType(kir::DType dtype) {
  switch (dtype) {
  case kir::DType::F32: return ncclFloat32;
  case kir::DType::F16: return ncclFloat16;
  case kir::DType::BF16: return ncclBfloat16;
  case kir::DType::I32: return ncclInt32;
  case kir::DType::I64: return ncclInt64;
  case kir::DType::I1: return ncclUint8;
  }
  return ncclUint8;
}

/// The NCCL op, or an error for what llmc does not reduce.
std::string ncclOp(kir::DType dtype, ReduceOp op, ncclRedOp_t &out) {
  out = op == ReduceOp::Sum ? ncclSum : op == ReduceOp::Max ? ncclMax : ncclAvg;
  if (dtype == kir::DType::I1)
    return "reductions of i1 are not supported";
  if (op == ReduceOp::Avg && !kir::isFloat(dtype))
    return std::string("avg of ") + kir::dtypeName(dtype) +
           " is not supported (integer division); use sum";
  return "";
}

class NcclCommunicator final : public Communicator {
public:
  ~NcclCommunicator() override;

  int rank() const override { return rankIndex; }
  int size() const override { return worldSize; }
  int worldRank() const override { return bootstrap->worldRank(); }
  const char *backend() const override { return "nccl"; }
  llvm::StringRef axis() const override { return axisName; }
  Ticket started() const override { return lastTicket; }

  Ticket allReduce(const void *send, void *recv, int64_t count,
                   kir::DType dtype, ReduceOp op) override;
  Ticket reduceScatter(const void *send, void *recv, int64_t recvCount,
                       kir::DType dtype, ReduceOp op) override;
  Ticket allGather(const void *send, void *recv, int64_t sendCount,
                   kir::DType dtype) override;
  Ticket broadcast(void *buffer, int64_t count, kir::DType dtype,
                   int root) override;
  // Pipeline transfers on the GPU (ncclSend/ncclRecv with a copy, so that
  // a send never waits) are not written yet: both are an error at wait().
  Ticket send(const void *, int64_t, kir::DType, int) override {
    return start("send", "point-to-point transfers (pipeline parallelism) "
                         "are not implemented on NCCL yet; run --pp on the "
                         "CPU",
                 [] { return ncclSuccess; });
  }
  Ticket recv(void *, int64_t, kir::DType, int) override {
    return start("recv", "point-to-point transfers (pipeline parallelism) "
                         "are not implemented on NCCL yet; run --pp on the "
                         "CPU",
                 [] { return ncclSuccess; });
  }
  llvm::Error wait(Ticket ticket) override;
  llvm::Error barrier() override;
  llvm::Expected<std::unique_ptr<Communicator>>
  split(int color, int key, llvm::StringRef axis) override;
  [[noreturn]] void abort(int code) override;

  static llvm::Expected<std::unique_ptr<NcclCommunicator>>
  create(Communicator &bootstrap, int device, const CommOptions &options,
         CUstream computeStream);

private:
  NcclCommunicator() = default;

  /// Runs `enqueue` (an NCCL call on `stream`) as collective `kind` and
  /// records its completion event; `invalid` fails it without running.
  template <typename Fn>
  Ticket start(const char *kind, const std::string &invalid, Fn enqueue);
  std::string prefix(const char *kind, Ticket ticket) const;

  struct Pending {
    const char *kind = "";
    CUevent done = nullptr; // null: failed at start, see error
    std::string error;
  };

  const NcclApi *nccl = nullptr;
  const cuda::DriverApi *cu = nullptr;
  Communicator *bootstrap = nullptr;
  std::unique_ptr<Communicator> ownedBootstrap; // a split's
  CommOptions options;
  int device = 0;
  CUdevice cuDevice = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr, computeStream = nullptr;
  CUdeviceptr scratch = 0; // the barrier's all-reduce
  ncclComm_t comm = nullptr;
  int rankIndex = 0, worldSize = 1;
  std::string axisName;
  Ticket lastTicket = 0;
  std::map<Ticket, Pending> pending;
  std::vector<CUevent> freeEvents;
  std::string broken;
};

std::string NcclCommunicator::prefix(const char *kind, Ticket ticket) const {
  return "rank " + std::to_string(worldRank()) + ": " + kind + " #" +
         std::to_string(ticket) + " on '" + axisName + "' (nccl)";
}

template <typename Fn>
Ticket NcclCommunicator::start(const char *kind, const std::string &invalid,
                               Fn enqueue) {
  Ticket ticket = ++lastTicket;
  Pending &entry = pending[ticket];
  entry.kind = kind;
  if (!broken.empty()) {
    entry.error = broken;
    return ticket;
  }
  if (!invalid.empty()) {
    entry.error = prefix(kind, ticket) + ": " + invalid;
    return ticket;
  }
  cu->ctxSetCurrent(context);
  CUevent event = nullptr;
  if (!freeEvents.empty()) {
    event = freeEvents.back();
    freeEvents.pop_back();
  } else if (cu->eventCreate(&event, CU_EVENT_DISABLE_TIMING) !=
             CUDA_SUCCESS) {
    entry.error = prefix(kind, ticket) + ": cuEventCreate failed";
    return ticket;
  }
  if (computeStream) {
    // The collective starts after the work queued on the compute stream.
    cu->eventRecord(event, computeStream);
    cu->streamWaitEvent(stream, event, 0);
  }
  ncclResult_t result = enqueue();
  if (result != ncclSuccess && result != ncclInProgress) {
    entry.error = prefix(kind, ticket) + " failed: " +
                  nccl->getErrorString(result);
    freeEvents.push_back(event);
    return ticket;
  }
  cu->eventRecord(event, stream);
  entry.done = event;
  return ticket;
}

Ticket NcclCommunicator::allReduce(const void *send, void *recv, int64_t count,
                                   kir::DType dtype, ReduceOp op) {
  ncclRedOp_t ncclReduce;
  std::string invalid = ncclOp(dtype, op, ncclReduce);
  if (count < 0)
    invalid = "negative count " + std::to_string(count);
  if (invalid.empty())
    countTraffic(Transfer::AllReduce, count, dtype);
  return start("all_reduce", invalid, [&] {
    return nccl->allReduce(send, recv, count, ncclType(dtype), ncclReduce,
                           comm, stream);
  });
}

Ticket NcclCommunicator::reduceScatter(const void *send, void *recv,
                                       int64_t recvCount, kir::DType dtype,
                                       ReduceOp op) {
  ncclRedOp_t ncclReduce;
  std::string invalid = ncclOp(dtype, op, ncclReduce);
  if (recvCount < 0)
    invalid = "negative count " + std::to_string(recvCount);
  if (invalid.empty())
    countTraffic(Transfer::ReduceScatter, recvCount, dtype);
  return start("reduce_scatter", invalid, [&] {
    return nccl->reduceScatter(send, recv, recvCount, ncclType(dtype),
                               ncclReduce, comm, stream);
  });
}

Ticket NcclCommunicator::allGather(const void *send, void *recv,
                                   int64_t sendCount, kir::DType dtype) {
  std::string invalid;
  if (sendCount < 0)
    invalid = "negative count " + std::to_string(sendCount);
  if (invalid.empty())
    countTraffic(Transfer::AllGather, sendCount, dtype);
  return start("all_gather", invalid, [&] {
    return nccl->allGather(send, recv, sendCount, ncclType(dtype), comm,
                           stream);
  });
}

Ticket NcclCommunicator::broadcast(void *buffer, int64_t count,
                                   kir::DType dtype, int root) {
  std::string invalid;
  if (count < 0)
    invalid = "negative count " + std::to_string(count);
  else if (root < 0 || root >= worldSize)
    invalid = "root " + std::to_string(root) + " is not a rank of '" +
              axisName + "' (size " + std::to_string(worldSize) + ")";
  if (invalid.empty())
    countTraffic(Transfer::Broadcast, count, dtype);
  return start("broadcast", invalid, [&] {
    return nccl->broadcast(buffer, buffer, count, ncclType(dtype), root, comm,
                           stream);
  });
}

llvm::Error NcclCommunicator::wait(Ticket ticket) {
  if (ticket <= 0 || ticket > lastTicket)
    return llvm::createStringError(
        "rank " + std::to_string(worldRank()) + ": wait on ticket " +
        std::to_string(ticket) + " of '" + axisName +
        "' (nccl), which was never started (last started: " +
        std::to_string(lastTicket) + ")");
  auto found = pending.find(ticket);
  if (found == pending.end())
    return llvm::Error::success();
  Pending entry = std::move(found->second);
  pending.erase(found);
  if (!entry.done)
    return llvm::createStringError(entry.error);
  cu->ctxSetCurrent(context);
  auto begin = Clock::now();
  auto sleep = std::chrono::microseconds(10);
  std::string error;
  while (broken.empty()) {
    CUresult query = cu->eventQuery(entry.done);
    if (query == CUDA_SUCCESS)
      break;
    if (query != CUDA_ERROR_NOT_READY) {
      const char *name = nullptr;
      cu->getErrorName(query, &name);
      error = prefix(entry.kind, ticket) + " failed: cuEventQuery: " +
              (name ? name : "?");
      break;
    }
    ncclResult_t async = ncclSuccess;
    nccl->commGetAsyncError(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      error = prefix(entry.kind, ticket) + " failed: " +
              nccl->getErrorString(async);
      break;
    }
    double waited =
        std::chrono::duration<double>(Clock::now() - begin).count();
    if (waited >= options.timeoutSeconds) {
      // NCCL cannot say which rank is missing. Free the GPU of the stuck
      // kernel, then let the bootstrap's hang detection name the ranks:
      // the healthy ones all get here and meet in its barrier.
      nccl->commAbort(comm);
      comm = nullptr;
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%g s", options.timeoutSeconds);
      error = prefix(entry.kind, ticket) + " timed out after " + seconds;
      if (llvm::Error why = bootstrap->barrier())
        error += "; " + llvm::toString(std::move(why));
      else
        error += "; every rank reached a barrier on the bootstrap "
                 "communicator, so NCCL itself made no progress";
      break;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
  if (!broken.empty() && error.empty())
    error = broken;
  if (!error.empty()) {
    if (broken.empty())
      broken = error;
    return llvm::createStringError(error);
  }
  freeEvents.push_back(entry.done);
  return llvm::Error::success();
}

llvm::Error NcclCommunicator::barrier() {
  // NCCL has no barrier: an all-reduce of one word is one.
  return wait(allReduce(reinterpret_cast<void *>(scratch),
                        reinterpret_cast<void *>(scratch), 1,
                        kir::DType::I32, ReduceOp::Sum));
}

llvm::Expected<std::unique_ptr<Communicator>>
NcclCommunicator::split(int color, int key, llvm::StringRef axis) {
  // The bootstrap splits alike, and the new NCCL communicator keeps its
  // part of it. Counts as a collective here, as on the other backends.
  ++lastTicket;
  llvm::Expected<std::unique_ptr<Communicator>> part =
      bootstrap->split(color, key, axis);
  if (!part)
    return part.takeError();
  llvm::Expected<std::unique_ptr<NcclCommunicator>> made =
      create(**part, device, options, computeStream);
  if (!made)
    return made.takeError();
  (*made)->ownedBootstrap = std::move(*part);
  return std::unique_ptr<Communicator>(std::move(*made));
}

void NcclCommunicator::abort(int code) {
  if (comm)
    nccl->commAbort(comm);
  comm = nullptr;
  bootstrap->abort(code);
}

NcclCommunicator::~NcclCommunicator() {
  if (!cu)
    return;
  cu->ctxSetCurrent(context);
  if (broken.empty())
    llvm::consumeError(waitAll());
  if (comm) {
    if (broken.empty())
      nccl->commDestroy(comm);
    else
      nccl->commAbort(comm);
  }
  for (auto &entry : pending)
    if (entry.second.done)
      freeEvents.push_back(entry.second.done);
  for (CUevent event : freeEvents)
    cu->eventDestroy(event);
  if (scratch)
    cu->memFree(scratch);
  if (stream)
    cu->streamDestroy(stream);
  if (context)
    cu->devicePrimaryCtxRelease(cuDevice);
}

llvm::Expected<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(Communicator &bootstrap, int device,
                         const CommOptions &options, CUstream computeStream) {
  // What this rank can do alone: NCCL, the driver, the device.
  std::string local;
  const NcclApi *nccl = nullptr;
  const cuda::DriverApi *cu = nullptr;
  CUcontext context = nullptr;
  CUdevice cuDevice = 0;
  if (llvm::Expected<const NcclApi *> loaded = loadNccl())
    nccl = *loaded;
  else
    local = llvm::toString(loaded.takeError());
  if (local.empty()) {
    if (llvm::Expected<const cuda::DriverApi *> driver = cuda::loadDriver())
      cu = *driver;
    else
      local = llvm::toString(driver.takeError());
  }
  if (local.empty()) {
    if (llvm::Expected<CUcontext> entered =
            cuda::enterContext(*cu, device, &cuDevice))
      context = *entered;
    else
      local = llvm::toString(entered.takeError());
  }
  // Every rank learns whether all can go on, so none is left waiting for
  // a unique id that will not come.
  int32_t failed = local.empty() ? 0 : 1, anyFailed = 0;
  if (llvm::Error error = bootstrap.wait(bootstrap.allReduce(
          &failed, &anyFailed, 1, kir::DType::I32, ReduceOp::Max)))
    local = llvm::toString(std::move(error));
  std::string who = "rank " + std::to_string(bootstrap.worldRank()) + " ('" +
                    bootstrap.axis().str() + "'): ";
  auto release = [&] {
    if (context)
      cu->devicePrimaryCtxRelease(cuDevice);
  };
  if (!local.empty()) {
    release();
    return llvm::createStringError(who + "cannot create an NCCL "
                                         "communicator: " +
                                   local);
  }
  if (anyFailed) {
    release();
    return llvm::createStringError(
        who + "no NCCL communicator: another rank cannot create one (it "
              "prints why)");
  }
  llvm::Expected<ncclUniqueId> id = shareUniqueId(bootstrap, *nccl);
  if (!id) {
    release();
    return id.takeError();
  }

  std::unique_ptr<NcclCommunicator> result(new NcclCommunicator());
  NcclCommunicator &c = *result;
  c.nccl = nccl;
  c.cu = cu;
  c.bootstrap = &bootstrap;
  c.options = options;
  c.device = device;
  c.cuDevice = cuDevice;
  c.context = context;
  c.computeStream = computeStream;
  c.rankIndex = bootstrap.rank();
  c.worldSize = bootstrap.size();
  c.axisName = bootstrap.axis().str();
  if (llvm::Error error = cuda::checkDriver(
          *cu, cu->streamCreate(&c.stream, CU_STREAM_NON_BLOCKING),
          "cuStreamCreate"))
    return error;
  if (llvm::Error error = cuda::checkDriver(
          *cu, cu->memAlloc(&c.scratch, sizeof(int32_t)), "cuMemAlloc"))
    return error;
  if (llvm::Error error = checkNccl(
          *nccl,
          nccl->commInitRank(&c.comm, c.worldSize, *id, c.rankIndex),
          who + "ncclCommInitRank"))
    return error;
  return result;
}

} // namespace

std::string llmc::runtime::comm::ncclVersionString(int code) {
  // NCCL_VERSION(X, Y, Z): X * 10000 + Y * 100 + Z since 2.9, X * 1000 +
  // Y * 100 + Z before.
  int major = code >= 10000 ? code / 10000 : code / 1000;
  int rest = code >= 10000 ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." +
         std::to_string(rest % 100);
}

llvm::Expected<const NcclApi *> llmc::runtime::comm::loadNccl() {
  static const NcclState state = loadNcclOnce();
  if (!state.error.empty())
    return llvm::createStringError(state.error);
  return &state.api;
}

llvm::Expected<ncclUniqueId>
llmc::runtime::comm::shareUniqueId(Communicator &bootstrap,
                                   const NcclApi &nccl) {
  // Rank 0's status travels with the id, so that its failure reaches every
  // rank through the same broadcast.
  struct {
    int32_t status = ncclSuccess;
    ncclUniqueId id{};
  } message;
  if (bootstrap.rank() == 0)
    message.status = nccl.getUniqueId(&message.id);
  if (llvm::Error error = bootstrap.wait(bootstrap.broadcast(
          &message, sizeof(message), kir::DType::I1, 0)))
    return error;
  if (message.status != ncclSuccess)
    return llvm::createStringError(
        std::string("ncclGetUniqueId failed on rank 0 of '") +
        bootstrap.axis().str() + "': " +
        nccl.getErrorString(static_cast<ncclResult_t>(message.status)));
  return message.id;
}

llvm::Expected<std::unique_ptr<Communicator>>
llmc::runtime::comm::createNccl(Communicator &bootstrap, int device,
                                const CommOptions &options,
                                CUstream computeStream) {
  llvm::Expected<std::unique_ptr<NcclCommunicator>> made =
      NcclCommunicator::create(bootstrap, device, options, computeStream);
  if (!made)
    return made.takeError();
  return std::unique_ptr<Communicator>(std::move(*made));
}
