// llmc's own ring all-reduce over MPI point-to-point messages, for large
// buffers: reduce-scatter then all-gather around the ring, each chunk sent
// in segments that are reduced while still in cache. Open MPI's nonblocking
// MPI_Iallreduce (libnbc) allocates a temporary of the whole buffer per call
// and reaches about half the bandwidth of its blocking all-reduce on one
// machine (bench/README.md, bench-allreduce); this ring is driven by the
// communication thread like any nonblocking collective.
//
// Summation order: element i of chunk c is summed around the ring starting
// at rank c + 1: (((x[c+1] + x[c+2]) + ...) + x[c]). The all-gather only
// copies, so every rank ends with the same bits; on 2 ranks the result is
// x0 + x1 = x1 + x0, the sequential sum, and on more ranks it is not.
#ifndef LLMC_RUNTIME_COMM_MPIRING_H
#define LLMC_RUNTIME_COMM_MPIRING_H

#include "runtime/Comm/Communicator.h"

#include <mpi.h>

#include <string>
#include <vector>

namespace llmc::runtime::comm {

class RingAllReduce {
public:
  /// Bytes of one segment, and segments in flight per step (the scratch a
  /// ring needs is their product).
  static constexpr int64_t kSegmentBytes = 256 << 10;
  static constexpr int kInFlight = 4;

  /// Whether the ring can reduce this type and op (f32 sum/avg/max, i32 and
  /// i64 sum/max; avg is divided afterwards by the caller).
  static bool supports(kir::DType dtype, ReduceOp op);

  /// Posts the first step. `scratch` holds kInFlight * kSegmentBytes and
  /// stays with the ring until done; `tag` is unique among the collectives
  /// in flight on `comm`. send == recv is in place.
  RingAllReduce(MPI_Comm comm, int rank, int size, const void *send,
                void *recv, int64_t count, kir::DType dtype, ReduceOp op,
                int tag, char *scratch);
  RingAllReduce(const RingAllReduce &) = delete;
  RingAllReduce &operator=(const RingAllReduce &) = delete;

  /// Advances as far as the messages that arrived allow; true when done.
  /// An MPI error ends it with `error` set.
  bool test(std::string &error);

private:
  struct Segment {
    int64_t offset = 0, count = 0; // elements, within the buffer
    int slot = -1;                 // scratch slot of a reduce-scatter recv
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void startStep();
  int64_t chunkBegin(int chunk) const;
  void reduceInto(char *out, const char *a, const char *b,
                  int64_t count) const;

  MPI_Comm comm;
  int rank, size, tag;
  const char *send;
  char *recv;
  int64_t count;
  kir::DType dtype;
  ReduceOp op;
  int64_t elementBytes;
  char *scratch;

  int step = 0; // 0 .. 2 (size - 1) - 1: reduce-scatter, then all-gather
  std::vector<Segment> sends, recvs;
  size_t nextRecv = 0, nextSend = 0; // segments from here not yet posted
  std::vector<int> freeSlots;         // scratch slots not in use
};

} // namespace llmc::runtime::comm

#endif // LLMC_RUNTIME_COMM_MPIRING_H
