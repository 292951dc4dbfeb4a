// Collective communication between the ranks of a training job: the
// interface the runtime calls (all-reduce, reduce-scatter, all-gather,
// broadcast, barrier, split), and the worlds it runs in: one process, MPI
// (ranks started by mpirun or srun, host buffers) and NCCL (device buffers,
// runtime/Cuda/NcclCommunicator.h).
//
// Collectives are asynchronous: a call starts one and returns a ticket at
// once; wait(ticket) blocks until it is done. In between the caller computes
// while the backend moves data (MPI: on a communication thread of its own).
// A collective that makes no progress ends in an error that names the ranks
// that did not reach it, never in a silent hang.
#ifndef LLMC_RUNTIME_COMM_COMMUNICATOR_H
#define LLMC_RUNTIME_COMM_COMMUNICATOR_H

#include "ir/kernel/KernelIR.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>

namespace llmc::runtime::comm {

enum class ReduceOp : uint8_t { Sum, Avg, Max };

/// "sum", "avg", "max".
const char *reduceOpName(ReduceOp op);

/// One started collective of one communicator. Tickets count the collectives
/// started on a communicator: 1, 2, 3, ... (barrier and split count too), so
/// a ticket is also the collective's number in error messages ("#12").
using Ticket = int64_t;

/// What one rank has moved on a communicator since it was made, counted from
/// the calls started on it (the buffers' sizes, not the wire: MPI may pick
/// another algorithm). Collectives are valued at what this rank sends by a
/// ring over the communicator's n ranks, the volume `llmc plan` prices: 2(n -
/// 1)/n of an all-reduce's buffer, (n - 1)/n of a reduce-scatter's input, of
/// an all-gather's output and of a broadcast's buffer (a pipelined ring
/// broadcast, averaged over the ranks). Point-to-point transfers count their
/// bytes as sent and received. Barriers and splits move nothing here, nor
/// does a world of one process.
struct Traffic {
  int64_t collectives = 0, collectiveBytes = 0;
  int64_t sends = 0, sendBytes = 0;
  int64_t recvs = 0, recvBytes = 0;

  Traffic &operator+=(const Traffic &other);
  Traffic &operator-=(const Traffic &other);
};

struct CommOptions {
  /// How long wait() or barrier() may block on one collective before the
  /// ranks that did not reach it are asked for their state. createWorld
  /// takes it from the environment variable LLMC_COMM_TIMEOUT_S when set.
  double timeoutSeconds = 30;
  /// How long the asking rank waits for the answers; a rank that does not
  /// answer is reported as hung or dead. Env: LLMC_COMM_GRACE_S.
  double graceSeconds = 5;
};

/// A group of ranks that run collectives together. One thread at a time
/// calls a given communicator (different communicators may be called from
/// different threads). Ranks in messages are ranks of the world, so that
/// "rank 3" means the same process on every axis.
class Communicator {
public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// This process's rank in the world, the one messages name.
  virtual int worldRank() const = 0;
  /// "single", "mpi" or "nccl".
  virtual const char *backend() const = 0;
  /// The mesh axis this communicator spans: "world" for the world, the name
  /// given to split() otherwise.
  virtual llvm::StringRef axis() const = 0;
  /// The number of collectives started so far: the last ticket handed out.
  virtual Ticket started() const = 0;
  /// What this rank has moved on this communicator so far (see Traffic).
  Traffic traffic() const { return counted; }

  // Each starts a collective and returns at once; the buffers must not be
  // touched until wait(ticket) returns. Every rank starts the collectives of
  // a communicator in the same order. An invalid call (a dtype or op the
  // backend cannot reduce, a count out of range) still returns a ticket,
  // and wait() returns the error.
  //
  // Supported: F32 for every op; I32 and I64 with Sum and Max; any dtype in
  // allGather and broadcast (they move bytes). F16 and BF16 reductions are
  // an error on MPI (NCCL reduces them natively).

  /// recv[i] = op over ranks of send[i], count elements; send == recv is
  /// allowed (in place). Avg is the sum divided by size().
  virtual Ticket allReduce(const void *send, void *recv, int64_t count,
                           kir::DType dtype, ReduceOp op) = 0;
  /// send holds size() * recvCount elements; rank r receives the reduction
  /// of chunk r (MPI_Reduce_scatter_block). In place (as in NCCL) when recv
  /// is send + rank() * recvCount: the rest of send is then undefined
  /// afterwards. Other overlaps are not allowed.
  virtual Ticket reduceScatter(const void *send, void *recv, int64_t recvCount,
                               kir::DType dtype, ReduceOp op) = 0;
  /// recv gets size() * sendCount elements, rank r's at offset
  /// r * sendCount. In place (as in NCCL) when send is
  /// recv + rank() * sendCount; other overlaps are not allowed.
  virtual Ticket allGather(const void *send, void *recv, int64_t sendCount,
                           kir::DType dtype) = 0;
  /// Every rank's buffer gets root's count elements.
  virtual Ticket broadcast(void *buffer, int64_t count, kir::DType dtype,
                           int root) = 0;

  /// Point-to-point, between two ranks of the communicator (pipeline
  /// stages): send() copies its count elements at once, so its ticket is
  /// done when it returns and a send never waits for the receiver (a 1F1B
  /// schedule, where both neighbours may send before they receive, cannot
  /// deadlock); recv() fills `recv` with the elements of the next send
  /// from `peer` to this rank. Sends from one rank to another arrive in
  /// the order they were made. Both take a ticket like a collective.
  virtual Ticket send(const void *data, int64_t count, kir::DType dtype,
                      int peer) = 0;
  virtual Ticket recv(void *data, int64_t count, kir::DType dtype,
                      int peer) = 0;

  /// Blocks until the collective is done. Waiting again on a ticket that is
  /// done returns success. When it makes no progress for timeoutSeconds,
  /// the error names the rank(s) that did not reach it, e.g.
  ///   rank 0: all_reduce #12 on 'dp' timed out after 30 s: rank 1 did not
  ///   respond (hung or dead)
  ///   rank 0: all_reduce #12 on 'dp' timed out after 30 s: rank 1 is still
  ///   at collective #11 (its process is alive but has not reached this one)
  /// After such an error the communicator is broken: print the error and
  /// call abort().
  virtual llvm::Error wait(Ticket ticket) = 0;
  /// Waits for every ticket started and not yet waited for; returns the
  /// first error.
  llvm::Error waitAll();
  /// Starts a barrier and waits for it, with the same timeout.
  virtual llvm::Error barrier() = 0;

  /// The sub-communicator of the ranks that pass the same `color`, ordered
  /// by `key` (then by rank), for the mesh axis named `axis` ("dp", "tp",
  /// "pp"). A collective of this communicator (it takes a ticket) that
  /// blocks until every rank has reached it, with the same timeout;
  /// collectives started before it stay in flight.
  virtual llvm::Expected<std::unique_ptr<Communicator>>
  split(int color, int key, llvm::StringRef axis) = 0;

  /// Ends the whole job after a fatal error on this rank: MPI_Abort on MPI
  /// (after a pause of a second, so that the other ranks that saw the same
  /// fault can print their message), std::exit(code) on a single process.
  [[noreturn]] virtual void abort(int code) = 0;

protected:
  /// The calls Traffic counts.
  enum class Transfer : uint8_t {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast,
    Send,
    Recv
  };
  /// Adds a started call to traffic(): `count` is the call's count argument
  /// (recvCount of a reduce-scatter, sendCount of an all-gather).
  void countTraffic(Transfer kind, int64_t count, kir::DType dtype);

  /// Tickets up to this one have been waited for by waitAll().
  Ticket waitedAll = 0;

private:
  Traffic counted;
};

/// Whether a launcher started this process as one rank of a job: mpirun or
/// mpiexec (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, PMI_RANK) or srun
/// (SLURM_STEP_NUM_TASKS > 1; a batch script alone does not count).
bool launchedByLauncher();

/// The world: MPI when launchedByLauncher(), else a single-process world of
/// size 1 without MPI_Init, so that `llmc run` needs no mpirun. The
/// environment overrides `options`: LLMC_COMM_TIMEOUT_S, LLMC_COMM_GRACE_S
/// (seconds, > 0). The MPI world finalizes MPI when it and every
/// communicator split from it are destroyed.
llvm::Expected<std::unique_ptr<Communicator>>
createWorld(const CommOptions &options = {});

/// A world of one rank: every collective copies send to recv (or does
/// nothing in place).
std::unique_ptr<Communicator> createSingleProcess();

/// The options after the environment (LLMC_COMM_TIMEOUT_S,
/// LLMC_COMM_GRACE_S); an error names a malformed variable.
llvm::Expected<CommOptions> optionsFromEnvironment(CommOptions options);

} // namespace llmc::runtime::comm

#endif // LLMC_RUNTIME_COMM_COMMUNICATOR_H
