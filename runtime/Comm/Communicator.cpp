// The communicator interface's shared parts, the launcher check, the
// environment options and the single-process world.
#include "runtime/Comm/Communicator.h"

#include "runtime/Comm/MpiCommunicator.h"

#include "llvm/ADT/StringExtras.h"

#include <cstdlib>
#include <cstring>
#include <string>

using namespace llmc;
using namespace llmc::runtime::comm;

const char *llmc::runtime::comm::reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Avg: return "avg";
  case ReduceOp::Max: return "max";
  }
  return "?";
}

Communicator::~Communicator() = default;

Traffic &Traffic::operator+=(const Traffic &other) {
  collectives += other.collectives;
  collectiveBytes += other.collectiveBytes;
  sends += other.sends;
  sendBytes += other.sendBytes;
  recvs += other.recvs;
  recvBytes += other.recvBytes;
  return *this;
}

Traffic &Traffic::operator-=(const Traffic &other) {
  collectives -= other.collectives;
  collectiveBytes -= other.collectiveBytes;
  sends -= other.sends;
  sendBytes -= other.sendBytes;
  recvs -= other.recvs;
  recvBytes -= other.recvBytes;
  return *this;
}

void Communicator::countTraffic(Transfer kind, int64_t count,
                                kir::DType dtype) {
  const int64_t n = size(), bytes = count * kir::dtypeBytes(dtype);
  switch (kind) {
  case Transfer::Send:
    ++counted.sends;
    counted.sendBytes += bytes;
    return;
  case Transfer::Recv:
    ++counted.recvs;
    counted.recvBytes += bytes;
    return;
  case Transfer::AllReduce: // reduce-scatter, then all-gather
    counted.collectiveBytes += 2 * (n - 1) * bytes / n;
    break;
  case Transfer::ReduceScatter: // of n * count elements
  case Transfer::AllGather:
    counted.collectiveBytes += (n - 1) * bytes;
    break;
  case Transfer::Broadcast:
    counted.collectiveBytes += (n - 1) * bytes / n;
    break;
  }
  ++counted.collectives;
}

llvm::Error Communicator::waitAll() {
  llvm::Error first = llvm::Error::success();
  bool failed = false;
  Ticket last = started();
  for (Ticket ticket = waitedAll + 1; ticket <= last; ++ticket) {
    llvm::Error error = wait(ticket);
    if (!error)
      continue;
    if (failed) {
      llvm::consumeError(std::move(error));
      continue;
    }
    failed = true;
    llvm::consumeError(std::move(first));
    first = std::move(error);
  }
  waitedAll = last;
  return first;
}

namespace {

bool envSet(const char *name) {
  const char *value = std::getenv(name);
  return value && *value;
}

int64_t envInt(const char *name) {
  const char *value = std::getenv(name);
  int64_t result = 0;
  if (!value || llvm::StringRef(value).trim().getAsInteger(10, result))
    return 0;
  return result;
}

/// Parses a positive number of seconds from `name` into `seconds`.
llvm::Error envSeconds(const char *name, double &seconds) {
  const char *value = std::getenv(name);
  if (!value || !*value)
    return llvm::Error::success();
  double parsed = 0;
  if (llvm::StringRef(value).trim().getAsDouble(parsed) || !(parsed > 0))
    return llvm::createStringError(
        std::string(name) + "='" + value +
        "' is not a number of seconds > 0 (e.g. " + name + "=10)");
  seconds = parsed;
  return llvm::Error::success();
}

/// The world of one process.
class SingleCommunicator final : public Communicator {
public:
  explicit SingleCommunicator(std::string axisName)
      : axisName(std::move(axisName)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int worldRank() const override { return 0; }
  const char *backend() const override { return "single"; }
  llvm::StringRef axis() const override { return axisName; }
  Ticket started() const override { return lastTicket; }

  Ticket allReduce(const void *send, void *recv, int64_t count,
                   kir::DType dtype, ReduceOp op) override {
    return start(send, recv, count, dtype, op);
  }
  Ticket reduceScatter(const void *send, void *recv, int64_t recvCount,
                       kir::DType dtype, ReduceOp op) override {
    return start(send, recv, recvCount, dtype, op);
  }
  Ticket allGather(const void *send, void *recv, int64_t sendCount,
                   kir::DType dtype) override {
    return start(send, recv, sendCount, dtype, ReduceOp::Sum);
  }
  Ticket broadcast(void *buffer, int64_t count, kir::DType dtype,
                   int root) override {
    Ticket ticket = start(buffer, buffer, count, dtype, ReduceOp::Sum);
    if (root != 0 && errorTicket == 0)
      fail(ticket, "broadcast #" + std::to_string(ticket) + " on '" +
                       axisName + "': root " + std::to_string(root) +
                       " is not a rank of a world of 1");
    return ticket;
  }

  Ticket send(const void *data, int64_t count, kir::DType dtype,
              int peer) override {
    return pointToPoint("send", count, dtype, peer);
  }
  Ticket recv(void *data, int64_t count, kir::DType dtype,
              int peer) override {
    return pointToPoint("recv", count, dtype, peer);
  }

  llvm::Error wait(Ticket ticket) override {
    if (ticket <= 0 || ticket > lastTicket)
      return llvm::createStringError(
          "rank 0: wait on ticket " + std::to_string(ticket) + " of '" +
          axisName + "', which was never started (last started: " +
          std::to_string(lastTicket) + ")");
    if (ticket != errorTicket)
      return llvm::Error::success();
    errorTicket = 0;
    return llvm::createStringError(error);
  }

  /// A rank alone has no peer to send to or receive from.
  Ticket pointToPoint(const char *what, int64_t count, kir::DType dtype,
                      int peer) {
    Ticket ticket = start(nullptr, nullptr, 0, dtype, ReduceOp::Sum);
    if (errorTicket == 0)
      fail(ticket, std::string(what) + " #" + std::to_string(ticket) +
                       " on '" + axisName + "' of " + std::to_string(count) +
                       " elements: peer " + std::to_string(peer) +
                       " is not another rank of a world of 1");
    return ticket;
  }

  llvm::Error barrier() override {
    ++lastTicket;
    return llvm::Error::success();
  }

  llvm::Expected<std::unique_ptr<Communicator>>
  split(int color, int key, llvm::StringRef axis) override {
    ++lastTicket;
    return std::make_unique<SingleCommunicator>(axis.str());
  }

  [[noreturn]] void abort(int code) override { std::exit(code); }

private:
  /// A collective of one rank: recv = send (Avg divides by 1, a copy).
  Ticket start(const void *send, void *recv, int64_t count, kir::DType dtype,
               ReduceOp op) {
    Ticket ticket = ++lastTicket;
    if (count < 0) {
      fail(ticket, "rank 0: collective #" + std::to_string(ticket) +
                       " on '" + axisName + "': negative count " +
                       std::to_string(count));
      return ticket;
    }
    if (send != recv && count > 0)
      std::memmove(recv, send, count * kir::dtypeBytes(dtype));
    return ticket;
  }

  /// Keeps the first error until its ticket is waited for.
  void fail(Ticket ticket, std::string message) {
    if (errorTicket != 0)
      return;
    errorTicket = ticket;
    error = std::move(message);
  }

  std::string axisName;
  Ticket lastTicket = 0;
  Ticket errorTicket = 0;
  std::string error;
};

} // namespace

bool llmc::runtime::comm::launchedByLauncher() {
  // Open MPI's mpirun, any PMIx launcher, MPICH's hydra (PMI_*), and srun
  // inside a job step of more than one task.
  return envSet("OMPI_COMM_WORLD_SIZE") || envSet("PMIX_RANK") ||
         envSet("PMI_SIZE") || envSet("PMI_RANK") ||
         envInt("SLURM_STEP_NUM_TASKS") > 1;
}

llvm::Expected<CommOptions>
llmc::runtime::comm::optionsFromEnvironment(CommOptions options) {
  if (llvm::Error error =
          envSeconds("LLMC_COMM_TIMEOUT_S", options.timeoutSeconds))
    return error;
  if (llvm::Error error = envSeconds("LLMC_COMM_GRACE_S", options.graceSeconds))
    return error;
  return options;
}

llvm::Expected<std::unique_ptr<Communicator>>
llmc::runtime::comm::createWorld(const CommOptions &options) {
  llvm::Expected<CommOptions> resolved = optionsFromEnvironment(options);
  if (!resolved)
    return resolved.takeError();
  if (!launchedByLauncher())
    return createSingleProcess();
  return createMpiWorld(*resolved);
}

std::unique_ptr<Communicator> llmc::runtime::comm::createSingleProcess() {
  return std::make_unique<SingleCommunicator>("world");
}
