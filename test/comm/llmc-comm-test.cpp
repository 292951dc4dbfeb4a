// llmc-comm-test: the collectives of runtime/Comm checked on every rank of
// a job against references computed locally, and faults injected on one
// rank for the hang detection to report. Run under mpirun (the lit tests in
// test/comm/ use scripts/mpirun.sh), or alone for the single-process world.
//
//   llmc-comm-test [--large=N] [--sync-dir=DIR]
//       every collective, dtype and op; exact values. Rank 0 prints
//       "llmc-comm-test: N checks passed on M ranks (mpi)"; exit 1 if any
//       rank saw a wrong value.
//   llmc-comm-test --fault=stop|sleep|kill|exit [--fault-rank=1]
//                  [--fault-at=3] [--fault-axis=world|dp] [--fault-count=N]
//       rank --fault-rank stops (SIGSTOP), sleeps forever, is killed
//       (SIGKILL) or exits with status 3 just before collective #fault-at;
//       every other rank prints what wait() reports and calls abort(1).
//       With --fault-axis=dp the collectives run on a split by rank % 2;
//       they all-reduce --fault-count floats (1; from 65536 llmc's ring).
//   llmc-comm-test --nccl-id
//       an NCCL unique id made on rank 0 reaches every rank (no GPU needed).
//   llmc-comm-test --nccl [--device=N]
//       an NCCL communicator over the world on device N (default: the
//       local rank): collectives on device buffers checked like the MPI
//       ones. Without a GPU every rank prints why it cannot create one.
#include "runtime/Comm/Communicator.h"
#include "runtime/Comm/Mesh.h"
#ifdef LLMC_HAVE_NCCL
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/NcclCommunicator.h"
#endif

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace cl = llvm::cl;
using namespace llmc;
using namespace llmc::runtime::comm;
using kir::DType;

static cl::opt<int64_t> largeCount("large",
                                   cl::desc("elements of the large case"),
                                   cl::init(1 << 20));
static cl::opt<std::string>
    syncDir("sync-dir",
            cl::desc("a directory shared by the ranks, for the overlap check "
                     "(skipped without it)"));
static cl::opt<std::string>
    fault("fault", cl::desc("stop | sleep | kill | exit: inject a fault"));
static cl::opt<int> faultRank("fault-rank", cl::desc("the faulty rank"),
                              cl::init(1));
static cl::opt<int> faultAt("fault-at",
                            cl::desc("the collective the fault comes before"),
                            cl::init(3));
static cl::opt<std::string>
    faultAxis("fault-axis", cl::desc("world | dp (split by rank % 2)"),
              cl::init("world"));
static cl::opt<int64_t> faultCount(
    "fault-count", cl::desc("floats in each all-reduce of a fault run"),
    cl::init(1));
static cl::opt<bool> ncclId("nccl-id",
                            cl::desc("share an NCCL unique id from rank 0"));
static cl::opt<bool> ncclRun("nccl",
                             cl::desc("collectives on an NCCL communicator"));
static cl::opt<int> ncclDevice(
    "device", cl::desc("the CUDA device of --nccl (default: the local rank)"),
    cl::init(-1));

namespace {

/// Counts checks and reports wrong values, at most a few per check.
struct Checker {
  int rank = 0;
  int64_t checks = 0, failures = 0;

  void fail(const std::string &what) {
    ++failures;
    // One write per line: mpirun forwards each write of every rank apart.
    llvm::errs() << "rank " + std::to_string(rank) + ": FAIL " + what + "\n";
  }

  /// Waits for the ticket; a failed wait is a failed check.
  bool wait(Communicator &comm, Ticket ticket, const std::string &what) {
    if (llvm::Error error = comm.wait(ticket)) {
      fail(what + ": " + llvm::toString(std::move(error)));
      return false;
    }
    return true;
  }

  template <typename T>
  void expectEqual(const std::vector<T> &got, const std::vector<T> &want,
                   const std::string &what) {
    ++checks;
    if (got.size() != want.size()) {
      fail(what + ": size " + std::to_string(got.size()) + ", want " +
           std::to_string(want.size()));
      return;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0)
        continue;
      std::string message;
      llvm::raw_string_ostream os(message);
      os << what << ": element " << i << " is " << +got[i] << ", want "
         << +want[i];
      fail(message);
      return;
    }
  }
};

// Values every rank can compute for every rank: small integers in f32, so
// that sums are exact in any order; wide values in i64.
template <typename T> T value(int rank, int64_t i);
template <> float value<float>(int rank, int64_t i) {
  return static_cast<float>((rank * 31 + i * 7) % 23 - 11);
}
template <> int32_t value<int32_t>(int rank, int64_t i) {
  return (rank + 1) * 100003 + static_cast<int32_t>(i % 1009) * 7 - 5000;
}
template <> int64_t value<int64_t>(int rank, int64_t i) {
  return (int64_t(rank + 1) << 35) + i * 3 - 17;
}
template <> uint16_t value<uint16_t>(int rank, int64_t i) {
  return static_cast<uint16_t>(rank * 4099 + i * 13);
}
template <> uint8_t value<uint8_t>(int rank, int64_t i) {
  return static_cast<uint8_t>(rank * 37 + i);
}

template <typename T> std::vector<T> values(int rank, int64_t offset,
                                            int64_t count) {
  std::vector<T> result(count);
  for (int64_t i = 0; i < count; ++i)
    result[i] = value<T>(rank, offset + i);
  return result;
}

/// op over every rank of value(rank, offset + i).
template <typename T>
std::vector<T> reduced(int size, ReduceOp op, int64_t offset, int64_t count) {
  std::vector<T> result(count);
  for (int64_t i = 0; i < count; ++i) {
    T acc = value<T>(0, offset + i);
    for (int r = 1; r < size; ++r) {
      T v = value<T>(r, offset + i);
      acc = op == ReduceOp::Max ? std::max(acc, v) : T(acc + v);
    }
    if (op == ReduceOp::Avg)
      acc = acc / static_cast<T>(size);
    result[i] = acc;
  }
  return result;
}

std::string describe(const char *kind, DType dtype, ReduceOp op,
                     int64_t count, bool inPlace) {
  return std::string(kind) + " " + kir::dtypeName(dtype) + " " +
         reduceOpName(op) + " count " + std::to_string(count) +
         (inPlace ? " in place" : "");
}

template <typename T>
void checkAllReduce(Communicator &comm, Checker &check, DType dtype,
                    ReduceOp op, int64_t count, bool inPlace) {
  std::vector<T> send = values<T>(comm.rank(), 0, count);
  std::vector<T> recv(count, T(-1));
  std::vector<T> &out = inPlace ? send : recv;
  std::string what = describe("all_reduce", dtype, op, count, inPlace);
  Ticket ticket = comm.allReduce(send.data(), out.data(), count, dtype, op);
  if (check.wait(comm, ticket, what))
    check.expectEqual(out, reduced<T>(comm.size(), op, 0, count), what);
}

template <typename T>
void checkReduceScatter(Communicator &comm, Checker &check, DType dtype,
                        ReduceOp op, int64_t count, bool inPlace) {
  int rank = comm.rank(), size = comm.size();
  std::vector<T> send = values<T>(rank, 0, count * size);
  std::vector<T> recv(count, T(-1));
  T *out = inPlace ? send.data() + rank * count : recv.data();
  std::string what = describe("reduce_scatter", dtype, op, count, inPlace);
  Ticket ticket = comm.reduceScatter(send.data(), out, count, dtype, op);
  if (!check.wait(comm, ticket, what))
    return;
  check.expectEqual(std::vector<T>(out, out + count),
                    reduced<T>(size, op, rank * count, count), what);
}

template <typename T>
void checkAllGather(Communicator &comm, Checker &check, DType dtype,
                    int64_t count, bool inPlace) {
  int rank = comm.rank(), size = comm.size();
  std::vector<T> send = values<T>(rank, 0, count);
  std::vector<T> recv(count * size, T(1));
  if (inPlace)
    std::copy(send.begin(), send.end(), recv.begin() + rank * count);
  const T *in = inPlace ? recv.data() + rank * count : send.data();
  std::string what =
      describe("all_gather", dtype, ReduceOp::Sum, count, inPlace);
  Ticket ticket = comm.allGather(in, recv.data(), count, dtype);
  if (!check.wait(comm, ticket, what))
    return;
  std::vector<T> want;
  for (int r = 0; r < size; ++r) {
    std::vector<T> part = values<T>(r, 0, count);
    want.insert(want.end(), part.begin(), part.end());
  }
  check.expectEqual(recv, want, what);
}

template <typename T>
void checkBroadcast(Communicator &comm, Checker &check, DType dtype,
                    int64_t count, int root) {
  std::vector<T> buffer = values<T>(comm.rank(), 0, count);
  std::string what = describe("broadcast", dtype, ReduceOp::Sum, count,
                              false) +
                     " root " + std::to_string(root);
  Ticket ticket = comm.broadcast(buffer.data(), count, dtype, root);
  if (check.wait(comm, ticket, what))
    check.expectEqual(buffer, values<T>(root, 0, count), what);
}

/// The call must fail in wait() with a message containing `expected`.
void expectError(Communicator &comm, Checker &check, Ticket ticket,
                 const std::string &what, llvm::StringRef expected) {
  ++check.checks;
  llvm::Error error = comm.wait(ticket);
  if (!error) {
    check.fail(what + ": no error, want one containing '" + expected.str() +
               "'");
    return;
  }
  std::string message = llvm::toString(std::move(error));
  if (!llvm::StringRef(message).contains(expected))
    check.fail(what + ": error '" + message + "', want one containing '" +
               expected.str() + "'");
}

void checkEveryCollective(Communicator &comm, Checker &check,
                          llvm::ArrayRef<int64_t> counts) {
  const ReduceOp floatOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};
  const ReduceOp intOps[] = {ReduceOp::Sum, ReduceOp::Max};
  for (int64_t count : counts) {
    for (bool inPlace : {false, true}) {
      for (ReduceOp op : floatOps) {
        checkAllReduce<float>(comm, check, DType::F32, op, count, inPlace);
        checkReduceScatter<float>(comm, check, DType::F32, op, count,
                                  inPlace);
      }
      for (ReduceOp op : intOps) {
        checkAllReduce<int32_t>(comm, check, DType::I32, op, count, inPlace);
        checkAllReduce<int64_t>(comm, check, DType::I64, op, count, inPlace);
        checkReduceScatter<int32_t>(comm, check, DType::I32, op, count,
                                    inPlace);
        checkReduceScatter<int64_t>(comm, check, DType::I64, op, count,
                                    inPlace);
      }
      checkAllGather<float>(comm, check, DType::F32, count, inPlace);
      checkAllGather<int64_t>(comm, check, DType::I64, count, inPlace);
      checkAllGather<uint16_t>(comm, check, DType::BF16, count, inPlace);
      checkAllGather<uint8_t>(comm, check, DType::I1, count, inPlace);
    }
    for (int root = 0; root < comm.size(); ++root)
      checkBroadcast<float>(comm, check, DType::F32, count, root);
    checkBroadcast<uint16_t>(comm, check, DType::F16, count,
                             comm.size() - 1);
    checkBroadcast<int32_t>(comm, check, DType::I32, count, 0);
  }
}

/// Many collectives of every kind in flight before the first wait.
void checkInFlight(Communicator &comm, Checker &check) {
  int rank = comm.rank(), size = comm.size();
  const int n = 24;
  std::vector<std::vector<float>> sums(n), gathered(n), scattered(n);
  std::vector<std::vector<float>> sends(n);
  std::vector<Ticket> tickets;
  for (int k = 0; k < n; ++k) {
    int64_t count = 1 + k * 997;
    sends[k] = values<float>(rank, k, count * size);
    sums[k].assign(count, 0);
    gathered[k].assign(count * size, 0);
    scattered[k].assign(count, 0);
    tickets.push_back(comm.allReduce(sends[k].data(), sums[k].data(), count,
                                     DType::F32, ReduceOp::Sum));
    tickets.push_back(comm.allGather(sends[k].data(), gathered[k].data(),
                                     count, DType::F32));
    tickets.push_back(comm.reduceScatter(sends[k].data(), scattered[k].data(),
                                         count, DType::F32, ReduceOp::Max));
  }
  ++check.checks;
  if (tickets.back() != comm.started() ||
      tickets.back() - tickets.front() != 3 * n - 1)
    check.fail("tickets are not consecutive up to started()");
  // Waited in reverse order, then waitAll for nothing left.
  for (size_t i = tickets.size(); i-- > 0;)
    check.wait(comm, tickets[i], "in flight #" + std::to_string(i));
  if (llvm::Error error = comm.waitAll())
    check.fail("waitAll: " + llvm::toString(std::move(error)));
  for (int k = 0; k < n; ++k) {
    int64_t count = 1 + k * 997;
    std::string what = "in flight " + std::to_string(k);
    check.expectEqual(sums[k], reduced<float>(size, ReduceOp::Sum, k, count),
                      what + " all_reduce");
    std::vector<float> want;
    for (int r = 0; r < size; ++r) {
      std::vector<float> part = values<float>(r, k, count);
      want.insert(want.end(), part.begin(), part.end());
    }
    check.expectEqual(gathered[k], want, what + " all_gather");
    check.expectEqual(scattered[k],
                      reduced<float>(size, ReduceOp::Max, k + rank * count,
                                     count),
                      what + " reduce_scatter");
  }
}

uint64_t fnv1a(const void *data, size_t bytes) {
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i)
    hash = (hash ^ static_cast<const uint8_t *>(data)[i]) * 1099511628211ull;
  return hash;
}

/// Random floats: the sum against the sequential sum in rank order, and
/// every rank's result against every other's, bit for bit.
void checkRandomSum(Communicator &comm, Checker &check, int64_t count) {
  int rank = comm.rank(), size = comm.size();
  auto randoms = [&](int r) {
    std::mt19937 rng(1234 + r);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> v(count);
    for (float &x : v)
      x = dist(rng);
    return v;
  };
  std::vector<float> mine = randoms(rank), sum(count);
  Ticket ticket = comm.allReduce(mine.data(), sum.data(), count, DType::F32,
                                 ReduceOp::Sum);
  if (!check.wait(comm, ticket, "random all_reduce"))
    return;
  std::vector<float> sequential = randoms(0);
  for (int r = 1; r < size; ++r) {
    std::vector<float> other = randoms(r);
    for (int64_t i = 0; i < count; ++i)
      sequential[i] += other[i];
  }
  int64_t differ = 0;
  ++check.checks;
  for (int64_t i = 0; i < count; ++i) {
    if (sum[i] == sequential[i])
      continue;
    ++differ;
    if (std::abs(sum[i] - sequential[i]) > 1e-5f * size)
      check.fail("random all_reduce element " + std::to_string(i) +
                 " is off by more than rounding");
  }
  // a + b == b + a: two ranks agree with the sequential sum bit for bit.
  if (size <= 2)
    check.expectEqual(sum, sequential, "random all_reduce on 2 ranks");
  uint64_t hash = fnv1a(sum.data(), sum.size() * sizeof(float));
  std::vector<uint64_t> hashes(size);
  ticket = comm.allGather(&hash, hashes.data(), 1, DType::I64);
  if (!check.wait(comm, ticket, "hash all_gather"))
    return;
  check.expectEqual(hashes, std::vector<uint64_t>(size, hash),
                    "random all_reduce identical on every rank");
  if (rank == 0)
    llvm::outs() << "random f32 sum of " << count << " on " << size
                 << " ranks: " << differ
                 << " elements differ from the sequential sum in rank "
                    "order; every rank has the same bits\n";
}

/// Invalid calls: an error from wait() on every rank, nothing hangs.
void checkErrors(Communicator &comm, Checker &check) {
  float x[4] = {};
  uint16_t h[4] = {};
  if (llvm::StringRef(comm.backend()) == "mpi") {
    expectError(comm, check,
                comm.allReduce(h, h, 4, DType::F16, ReduceOp::Sum),
                "f16 all_reduce", "not supported by the MPI backend");
    expectError(comm, check,
                comm.allReduce(x, x, 4, DType::I32, ReduceOp::Avg),
                "i32 avg", "avg of i32 is not supported");
    expectError(comm, check,
                comm.allReduce(x, x, -1, DType::F32, ReduceOp::Sum),
                "negative count", "negative count -1");
  }
  expectError(comm, check, comm.broadcast(x, 4, DType::F32, comm.size()),
              "broadcast root", "root " + std::to_string(comm.size()));
  expectError(comm, check, comm.started() + 1, "unknown ticket",
              "never started");
  // The communicator works after invalid calls.
  checkAllReduce<float>(comm, check, DType::F32, ReduceOp::Sum, 5, false);
}

/// Splits by rank % 2, keyed in reverse rank order, and runs collectives on
/// the world and the split interleaved.
void checkSplit(Communicator &world, Checker &check) {
  int rank = world.rank(), size = world.size();
  llvm::Expected<std::unique_ptr<Communicator>> split =
      world.split(rank % 2, size - rank, "dp");
  ++check.checks;
  if (!split) {
    check.fail("split: " + llvm::toString(split.takeError()));
    return;
  }
  Communicator &dp = **split;
  std::vector<int64_t> members; // world ranks of this color, by key
  for (int r = size - 1; r >= 0; --r)
    if (r % 2 == rank % 2)
      members.push_back(r);
  int64_t myIndex = std::find(members.begin(), members.end(), rank) -
                    members.begin();
  if (dp.size() != static_cast<int>(members.size()) ||
      dp.rank() != myIndex || dp.axis() != "dp" || dp.started() != 0)
    check.fail("split: rank " + std::to_string(dp.rank()) + " of " +
               std::to_string(dp.size()) + " on '" + dp.axis().str() +
               "', want " + std::to_string(myIndex) + " of " +
               std::to_string(members.size()) + " on 'dp'");
  // World and split collectives in flight together, waited crosswise.
  int64_t me = rank, dpSum = 0;
  std::vector<int64_t> order(dp.size());
  std::vector<float> worldSend = values<float>(rank, 0, 1000),
                     worldSum(1000);
  Ticket t1 = dp.allReduce(&me, &dpSum, 1, DType::I64, ReduceOp::Sum);
  Ticket t2 = world.allReduce(worldSend.data(), worldSum.data(), 1000,
                              DType::F32, ReduceOp::Sum);
  Ticket t3 = dp.allGather(&me, order.data(), 1, DType::I64);
  check.wait(world, t2, "world all_reduce beside a split");
  check.wait(dp, t3, "split all_gather");
  check.wait(dp, t1, "split all_reduce");
  int64_t want = 0;
  for (int64_t member : members)
    want += member;
  check.expectEqual(std::vector<int64_t>{dpSum}, std::vector<int64_t>{want},
                    "split all_reduce of world ranks");
  check.expectEqual(order, members, "split all_gather in key order");
  check.expectEqual(worldSum, reduced<float>(size, ReduceOp::Sum, 0, 1000),
                    "world all_reduce beside a split");
  // A split of the split, destroyed before its parent.
  llvm::Expected<std::unique_ptr<Communicator>> tp = dp.split(0, 0, "tp");
  ++check.checks;
  if (!tp) {
    check.fail("split of a split: " + llvm::toString(tp.takeError()));
    return;
  }
  checkAllReduce<float>(**tp, check, DType::F32, ReduceOp::Avg, 33, true);
  if (llvm::Error error = (*tp)->barrier())
    check.fail("split barrier: " + llvm::toString(std::move(error)));
}

/// On an even world: the mesh dp = size/2 x tp = 2. Each axis holds the
/// world ranks that agree on the other axis, in the order of its own
/// (tp-fastest: tp pairs are neighbours).
void checkMesh(Communicator &world, Checker &check) {
  int rank = world.rank(), size = world.size();
  if (size % 2)
    return;
  MeshShape shape{/*dp=*/size / 2, /*tp=*/2, /*pp=*/1};
  llvm::Expected<MeshAxes> axes = splitMesh(world, shape);
  ++check.checks;
  if (!axes) {
    check.fail("mesh: " + llvm::toString(axes.takeError()));
    return;
  }
  MeshCoord me = meshCoord(shape, rank);
  auto members = [&](Communicator *axis, bool tpAxis) {
    int64_t mine = rank;
    std::vector<int64_t> got(axis->size());
    Ticket t = axis->allGather(&mine, got.data(), 1, DType::I64);
    check.wait(*axis, t, "mesh all_gather");
    std::vector<int64_t> want;
    for (int i = 0; i < (tpAxis ? shape.tp : shape.dp); ++i) {
      MeshCoord c = me;
      (tpAxis ? c.tp : c.dp) = i;
      want.push_back(meshRank(shape, c));
    }
    check.expectEqual(got, want, tpAxis ? "mesh tp axis members"
                                        : "mesh dp axis members");
  };
  if (!axes->tp || (shape.dp > 1) != bool(axes->dp) || axes->pp) {
    check.fail("mesh: wrong axes present");
    return;
  }
  members(axes->tp.get(), true);
  if (axes->dp)
    members(axes->dp.get(), false);
}

/// traffic() on a fresh split of the world (nothing counted yet): the
/// calls' buffers valued at a ring's per-rank volume over n ranks, by hand:
/// an all-reduce of 1000 f32 sends 2(n-1)/n x 4000 B, a reduce-scatter to
/// 10 f32 and an all-gather of 10 i64 (n - 1) x 40 and (n - 1) x 80 B, a
/// broadcast of 100 f32 (n-1)/n x 400 B; a send of 6 i32 from each rank to
/// the next and the matching receive 24 B each; a barrier nothing. A world
/// of one process counts nothing.
void checkTraffic(Communicator &world, Checker &check) {
  int size = world.size(), rank = world.rank();
  llvm::Expected<std::unique_ptr<Communicator>> split =
      world.split(0, rank, "pp");
  ++check.checks;
  if (!split) {
    check.fail("traffic split: " + llvm::toString(split.takeError()));
    return;
  }
  Communicator &comm = **split;
  std::vector<float> big = values<float>(rank, 0, 1000), sum(1000);
  std::vector<float> scatter = values<float>(rank, 0, 10 * size), mine(10);
  std::vector<int64_t> part(10, rank), gathered(10 * size);
  std::vector<float> root = values<float>(0, 0, 100);
  check.wait(comm, comm.allReduce(big.data(), sum.data(), 1000, DType::F32,
                                  ReduceOp::Sum),
             "traffic all_reduce");
  check.wait(comm, comm.reduceScatter(scatter.data(), mine.data(), 10,
                                      DType::F32, ReduceOp::Sum),
             "traffic reduce_scatter");
  check.wait(comm, comm.allGather(part.data(), gathered.data(), 10,
                                  DType::I64),
             "traffic all_gather");
  check.wait(comm, comm.broadcast(root.data(), 100, DType::F32, 0),
             "traffic broadcast");
  std::vector<int32_t> out(6, rank), in(6);
  int64_t points = 0;
  if (size > 1) {
    points = 1;
    check.wait(comm, comm.send(out.data(), 6, DType::I32, (rank + 1) % size),
               "traffic send");
    check.wait(comm,
               comm.recv(in.data(), 6, DType::I32, (rank + size - 1) % size),
               "traffic recv");
  }
  if (llvm::Error error = comm.barrier())
    check.fail("traffic barrier: " + llvm::toString(std::move(error)));
  Traffic got = comm.traffic();
  int64_t n = size;
  std::vector<int64_t> want = {
      n > 1 ? 4 : 0, 2 * (n - 1) * 4000 / n + (n - 1) * 40 + (n - 1) * 80 +
             (n - 1) * 400 / n,
      points, 24 * points, points, 24 * points};
  check.expectEqual(std::vector<int64_t>{got.collectives, got.collectiveBytes,
                                         got.sends, got.sendBytes, got.recvs,
                                         got.recvBytes},
                    want,
                    "traffic (collectives, their bytes, sends, bytes, "
                    "receives, bytes)");
}

/// The collective makes progress while the caller computes: rank 0 starts
/// a large all-reduce and does not wait for it until every other rank has
/// finished its own wait() (they tell it through files). Without progress
/// on rank 0's comm thread the others could not finish.
void checkOverlap(Communicator &comm, Checker &check) {
  int rank = comm.rank(), size = comm.size();
  if (syncDir.empty() || size < 2)
    return;
  int64_t count = 4 << 20;
  std::vector<float> send = values<float>(rank, 0, count), recv(count);
  Ticket ticket = comm.allReduce(send.data(), recv.data(), count, DType::F32,
                                 ReduceOp::Sum);
  auto flag = [&](int r) {
    return syncDir + "/overlap-" + std::to_string(r);
  };
  ++check.checks;
  if (rank != 0) {
    check.wait(comm, ticket, "overlap all_reduce");
    std::error_code ec;
    llvm::raw_fd_ostream(flag(rank), ec) << "done\n";
  } else {
    auto start = std::chrono::steady_clock::now();
    bool all = false;
    while (!all && std::chrono::steady_clock::now() - start <
                       std::chrono::seconds(20)) {
      all = true;
      for (int r = 1; r < size; ++r)
        all &= llvm::sys::fs::exists(flag(r));
      // The caller "computes" meanwhile.
      volatile double x = 0;
      for (int i = 0; i < 100000; ++i)
        x = x + i * 0.5;
    }
    if (!all)
      check.fail("overlap: the other ranks did not finish a collective "
                 "while rank 0 computed (no progress without wait)");
    check.wait(comm, ticket, "overlap all_reduce");
    for (int r = 1; r < size; ++r)
      llvm::sys::fs::remove(flag(r));
  }
  check.expectEqual(recv, reduced<float>(size, ReduceOp::Sum, 0, count),
                    "overlap all_reduce");
  if (rank == 0 && check.failures == 0)
    llvm::outs() << "overlap: ranks 1.." << size - 1
                 << " finished a 16 MiB all_reduce while rank 0 computed\n";
}

int runChecks(Communicator &world) {
  Checker check;
  check.rank = world.rank();
  int64_t counts[] = {0, 1, 7, 1000, largeCount};
  checkEveryCollective(world, check, counts);
  checkInFlight(world, check);
  checkRandomSum(world, check, 100003);
  checkErrors(world, check);
  checkSplit(world, check);
  checkMesh(world, check);
  checkTraffic(world, check);
  checkOverlap(world, check);
  if (llvm::Error error = world.barrier())
    check.fail("barrier: " + llvm::toString(std::move(error)));
  // Every rank learns the total, so that all exit alike.
  int64_t failures = check.failures, total = 0, checks = check.checks;
  if (!check.wait(world, world.allReduce(&failures, &total, 1, DType::I64,
                                         ReduceOp::Sum),
                  "failure count"))
    total = failures + 1;
  if (world.rank() == 0) {
    if (total == 0)
      llvm::outs() << "llmc-comm-test: " << checks << " checks passed on "
                   << world.size() << " ranks (" << world.backend() << ")\n";
    else
      llvm::outs() << "llmc-comm-test: " << total << " failures on "
                   << world.size() << " ranks (" << world.backend() << ")\n";
  }
  llvm::outs().flush();
  return total == 0 ? 0 : 1;
}

int runFault(Communicator &world) {
  int rank = world.rank();
  std::unique_ptr<Communicator> split;
  Communicator *comm = &world;
  if (faultAxis == "dp") {
    llvm::Expected<std::unique_ptr<Communicator>> made =
        world.split(rank % 2, rank, "dp");
    if (!made) {
      llvm::errs() << llvm::toString(made.takeError()) + "\n";
      world.abort(1);
    }
    split = std::move(*made);
    comm = split.get();
  }
  std::vector<float> x(faultCount, 1.0f), y(faultCount);
  auto allReduce = [&] {
    return comm->allReduce(x.data(), y.data(), faultCount, DType::F32,
                           ReduceOp::Sum);
  };
  while (comm->started() + 1 < faultAt)
    if (llvm::Error error = comm->wait(allReduce())) {
      llvm::errs() << llvm::toString(std::move(error)) + "\n";
      world.abort(1);
    }
  if (rank == faultRank) {
    llvm::errs() << "rank " + std::to_string(rank) + ": injecting '" +
                        fault + "' before collective #" +
                        std::to_string(faultAt) + " on '" +
                        comm->axis().str() + "'\n";
    llvm::errs().flush();
    if (fault == "stop")
      raise(SIGSTOP);
    else if (fault == "kill")
      raise(SIGKILL);
    else if (fault == "exit")
      std::_Exit(3);
    while (true)
      std::this_thread::sleep_for(std::chrono::hours(1));
  }
  auto check = [&](llvm::Error error) {
    if (!error)
      return;
    llvm::errs() << llvm::toString(std::move(error)) + "\n";
    world.abort(1);
  };
  check(comm->wait(allReduce()));
  check(world.barrier());
  llvm::outs() << "rank " << rank << ": no fault detected\n";
  return 0;
}

#ifdef LLMC_HAVE_NCCL
int runNcclId(Communicator &world) {
  llvm::Expected<const NcclApi *> nccl = loadNccl();
  if (!nccl) {
    llvm::errs() << llvm::toString(nccl.takeError()) + "\n";
    return 1;
  }
  llvm::Expected<ncclUniqueId> id = shareUniqueId(world, **nccl);
  if (!id) {
    llvm::errs() << llvm::toString(id.takeError()) + "\n";
    return 1;
  }
  // Every rank holds rank 0's id: compare hashes.
  uint64_t hash = fnv1a(&*id, sizeof(ncclUniqueId));
  std::vector<uint64_t> hashes(world.size());
  Checker check;
  check.rank = world.rank();
  if (check.wait(world, world.allGather(&hash, hashes.data(), 1, DType::I64),
                 "id hashes"))
    check.expectEqual(hashes, std::vector<uint64_t>(world.size(), hash),
                      "the same NCCL unique id on every rank");
  if (world.rank() == 0 && check.failures == 0)
    llvm::outs() << "nccl " << ncclVersionString((*nccl)->version)
                 << ": the unique id of rank 0 reached all " << world.size()
                 << " ranks\n";
  return check.failures == 0 ? 0 : 1;
}

/// Collectives on device buffers, against the same references as on MPI.
int runNccl(Communicator &world) {
  int device = ncclDevice;
  if (device < 0) {
    const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    device = local ? std::atoi(local) : 0;
  }
  llvm::Expected<std::unique_ptr<Communicator>> made =
      createNccl(world, device, {});
  if (!made) {
    llvm::errs() << llvm::toString(made.takeError()) + "\n";
    return 1;
  }
  Communicator &nccl = **made;
  const cuda::DriverApi &cu = *llvm::cantFail(cuda::loadDriver());
  int rank = nccl.rank(), size = nccl.size();
  Checker check;
  check.rank = rank;
  int64_t count = largeCount;
  // Device buffers: count * size floats in and out.
  CUdeviceptr in = 0, out = 0;
  size_t bytes = sizeof(float) * count * size;
  if (cu.memAlloc(&in, bytes) != CUDA_SUCCESS ||
      cu.memAlloc(&out, bytes) != CUDA_SUCCESS) {
    llvm::errs() << "rank " + std::to_string(rank) + ": cuMemAlloc failed\n";
    return 1;
  }
  auto upload = [&](const std::vector<float> &host) {
    cu.memcpyHtoDAsync(in, host.data(), host.size() * sizeof(float), nullptr);
    cu.ctxSynchronize();
  };
  auto download = [&](int64_t n) {
    std::vector<float> host(n);
    cu.memcpyDtoHAsync(host.data(), out, n * sizeof(float), nullptr);
    cu.ctxSynchronize();
    return host;
  };
  void *inPtr = reinterpret_cast<void *>(in);
  void *outPtr = reinterpret_cast<void *>(out);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    std::string what = describe("nccl all_reduce", DType::F32, op, count,
                                false);
    upload(values<float>(rank, 0, count));
    if (check.wait(nccl, nccl.allReduce(inPtr, outPtr, count, DType::F32, op),
                   what))
      check.expectEqual(download(count),
                        reduced<float>(size, op, 0, count), what);
    what = describe("nccl reduce_scatter", DType::F32, op, count, false);
    upload(values<float>(rank, 0, count * size));
    if (check.wait(nccl, nccl.reduceScatter(inPtr, outPtr, count, DType::F32,
                                            op),
                   what))
      check.expectEqual(download(count),
                        reduced<float>(size, op, rank * count, count), what);
  }
  upload(values<float>(rank, 0, count));
  if (check.wait(nccl, nccl.allGather(inPtr, outPtr, count, DType::F32),
                 "nccl all_gather")) {
    std::vector<float> want;
    for (int r = 0; r < size; ++r) {
      std::vector<float> part = values<float>(r, 0, count);
      want.insert(want.end(), part.begin(), part.end());
    }
    check.expectEqual(download(count * size), want, "nccl all_gather");
  }
  upload(values<float>(rank, 0, count));
  if (check.wait(nccl, nccl.broadcast(inPtr, count, DType::F32, size - 1),
                 "nccl broadcast")) {
    cu.memcpyDtoDAsync(out, in, count * sizeof(float), nullptr);
    check.expectEqual(download(count), values<float>(size - 1, 0, count),
                      "nccl broadcast");
  }
  if (llvm::Error error = nccl.barrier())
    check.fail("nccl barrier: " + llvm::toString(std::move(error)));
  cu.memFree(in);
  cu.memFree(out);
  if (rank == 0 && check.failures == 0)
    llvm::outs() << "llmc-comm-test: " << check.checks
                 << " nccl checks passed on " << size << " ranks\n";
  return check.failures == 0 ? 0 : 1;
}
#endif

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv,
                              "llmc-comm-test: checks runtime/Comm's "
                              "collectives on every rank of a job\n");
  if (!fault.empty() && fault != "stop" && fault != "sleep" &&
      fault != "kill" && fault != "exit") {
    llvm::errs() << "llmc-comm-test: --fault=" << fault
                 << " is not stop, sleep, kill or exit\n";
    return 2;
  }
  llvm::Expected<std::unique_ptr<Communicator>> world = createWorld();
  if (!world) {
    llvm::errs() << "llmc-comm-test: " << llvm::toString(world.takeError())
                 << "\n";
    return 1;
  }
  int status;
  if (ncclId || ncclRun) {
#ifdef LLMC_HAVE_NCCL
    status = ncclId ? runNcclId(**world) : runNccl(**world);
#else
    llvm::errs() << "llmc-comm-test: built without NCCL (no CUDA toolkit)\n";
    status = 2;
#endif
  } else {
    status = fault.empty() ? runChecks(**world) : runFault(**world);
  }
  world->reset();
  return status;
}
