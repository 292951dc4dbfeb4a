// The MPI world: one communication thread per process makes every MPI call,
// issues nonblocking collectives in order, drives them to completion and
// answers the status requests that hang detection sends.
//
// Why a thread of its own: Open MPI progresses a nonblocking collective only
// while the process is inside an MPI call. A thread that polls MPI_Test
// lets a collective run while the caller computes (overlap), keeps answering
// peers while the caller is busy or blocked, and confines MPI to one thread
// (MPI_THREAD_FUNNELED, with that thread as MPI's main thread).
//
// Hang detection. Every communicator has a control communicator (a
// duplicate) that carries status requests and replies. When the caller has
// been blocked in wait() for timeoutSeconds on a collective that is not
// done, this rank sends a request to every other rank of the communicator
// and waits graceSeconds for the replies: each peer's comm thread answers
// with the last collective its caller has started there and what its caller
// waits on. A peer that does not answer is hung (stopped, in a deadlock
// that holds its comm thread) or dead; a peer whose last collective is
// older is alive but has not reached this one. A rank that receives a
// request about a collective it is itself stuck on starts its own check at
// once, so every healthy rank reports within milliseconds of the first.
//
// Summation order. All-reduces of at least kDefaultRingBytes go around
// llmc's ring (MpiRing.h), smaller ones and reduce-scatter to Open MPI
// (libnbc). On 2 ranks either computes x0 + x1 = x1 + x0 on both, bitwise
// the sequential sum. On 4 ranks neither is the sequential ((x0 + x1) + x2)
// + x3 (about 10% of random f32 sums differ in the last bits), but every
// rank gets the same bits: the ring's all-gather copies, and libnbc's
// all-reduce gives every rank the same bits too (not promised by MPI;
// test/comm/collectives.test checks both on 4 ranks).
#include "runtime/Comm/MpiCommunicator.h"

#include "runtime/Comm/MpiRing.h"

#include <mpi.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace llmc;
using namespace llmc::runtime::comm;

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// "30 s", "2.5 s".
std::string formatSeconds(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g s", seconds);
  return buffer;
}

enum class Kind : uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Barrier,
  Split,
  Send,
  Recv
};

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::AllReduce: return "all_reduce";
  case Kind::ReduceScatter: return "reduce_scatter";
  case Kind::AllGather: return "all_gather";
  case Kind::Broadcast: return "broadcast";
  case Kind::Barrier: return "barrier";
  case Kind::Split: return "split";
  case Kind::Send: return "send";
  case Kind::Recv: return "recv";
  }
  return "?";
}

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

constexpr int kTagRequest = 1;
constexpr int kTagReply = 2;

/// A status request: the collective the asker is stuck on, and a number
/// that matches the reply to the request.
struct StatusRequest {
  int64_t ticket;
  int64_t nonce;
};

/// What a rank answers about one communicator.
struct StatusReply {
  int64_t nonce;
  int64_t started;   // the last ticket its caller started on the communicator
  int64_t waitingOn; // the ticket its caller waits for, 0 if none
  char waitingAxis[32]; // ... on this axis
};

/// One collective from start to completion.
struct Collective {
  Kind kind = Kind::AllReduce;
  Ticket ticket = 0;
  const void *send = nullptr;
  void *recv = nullptr;
  int64_t count = 0;
  kir::DType dtype = kir::DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  bool inPlace = false;
  std::string error; // invalid at start: completes at once with this error
  MPI_Request request = MPI_REQUEST_NULL;
  int splitSend[2] = {0, 0};  // split: color and key
  std::vector<int> splitInfo; // split: every rank's color and key
  std::unique_ptr<RingAllReduce> ring; // a large all-reduce: llmc's ring
  std::unique_ptr<char[]> scratch;     // ... and its scratch, from a pool
  std::vector<char> payload; // a send's copy of its data
};

/// A check in progress: status requests sent, replies awaited.
struct Check {
  Ticket ticket = 0;
  Kind kind = Kind::AllReduce;
  Clock::time_point start;
  StatusRequest request{};
  std::vector<MPI_Request> sends, recvs; // by rank; NULL for this rank
  std::vector<StatusReply> replies;
  std::vector<char> answered;
};

struct Engine;

/// One communicator: the parts its caller and the comm thread share (under
/// Engine::mutex) and the parts only the comm thread touches.
struct CommState {
  // Fixed once created.
  std::string axis;
  int rank = 0, size = 1;
  std::vector<int> worldRanks; // world rank of each rank
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;

  // Shared, under Engine::mutex.
  std::atomic<Ticket> started{0};
  std::set<Ticket> pending;             // started, not done
  std::map<Ticket, std::string> errors; // done with an error, not waited
  std::string broken; // set once: every pending and later wait fails
  Ticket waitingOn = 0;
  Clock::time_point waitSince;
  std::map<Ticket, std::shared_ptr<CommState>> splits; // done splits

  // Comm thread only.
  std::vector<std::unique_ptr<Collective>> active; // issued, not done
  std::unique_ptr<Check> check;
  std::vector<std::unique_ptr<Check>> finishedChecks; // their sends may live on
  Ticket lastChecked = 0;   // the collective the last check was about
  int fruitlessChecks = 0;  // checks in a row that found every rank in it
  Clock::time_point lastCheckEnd;
  int64_t nextNonce = 1;
  bool freeRequested = false;

  int worldRank() const { return worldRanks[rank]; }
};

struct OutgoingReply {
  StatusReply reply{};
  MPI_Request request = MPI_REQUEST_NULL;
};

/// The process's MPI state and its communication thread.
struct Engine {
  Engine(const CommOptions &options, int64_t ringBytes)
      : options(options), ringBytes(ringBytes) {}
  ~Engine();

  /// Runs on the comm thread: MPI_Init_thread, the loop, MPI_Finalize.
  void run();
  void loop();
  bool takeTasks();
  void issue(CommState &comm, std::unique_ptr<Collective> collective);
  bool testActive(CommState &comm);
  void complete(CommState &comm, Collective &collective, std::string error);
  void finishSplit(CommState &comm, Collective &collective);
  void serveRequests(CommState &comm);
  void startCheck(CommState &comm, Ticket ticket, Kind kind);
  void pollCheck(CommState &comm);
  void checkTimeouts(CommState &comm);
  void breakComm(CommState &comm, const std::string &message);
  std::shared_ptr<CommState> makeComm(MPI_Comm data, std::string axis,
                                      std::string &error);
  void freeComm(CommState &comm);

  CommOptions options;
  int64_t ringBytes; // all-reduces of at least this many bytes use the ring
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wakeThread; // new work, a waiter, stop
  std::condition_variable wakeCallers; // something completed or broke

  // Under mutex.
  struct Task {
    std::shared_ptr<CommState> comm;
    std::unique_ptr<Collective> collective; // null: free the communicator
  };
  std::deque<Task> tasks;
  bool ready = false, stopping = false;
  int abortCode = -1; // >= 0: MPI_Abort with it
  std::string initError;
  int waiters = 0;          // callers blocked in wait()
  int64_t waitsStarted = 0; // calls of wait() that blocked, ever
  std::shared_ptr<CommState> world;

  // Comm thread only.
  std::vector<std::shared_ptr<CommState>> comms;
  std::deque<OutgoingReply> replies;
  bool anyBroken = false;
  int tagLimit = 32767; // MPI_TAG_UB
  std::vector<std::unique_ptr<char[]>> scratchPool;
};

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wakeThread.notify_all();
  if (thread.joinable())
    thread.join();
}

std::shared_ptr<CommState> Engine::makeComm(MPI_Comm data, std::string axis,
                                            std::string &error) {
  auto comm = std::make_shared<CommState>();
  comm->axis = std::move(axis);
  comm->data = data;
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  MPI_Comm_rank(data, &comm->rank);
  MPI_Comm_size(data, &comm->size);
  if (int code = MPI_Comm_dup(data, &comm->control)) {
    error = "MPI_Comm_dup failed: " + mpiErrorString(code);
    return nullptr;
  }
  MPI_Comm_set_errhandler(comm->control, MPI_ERRORS_RETURN);
  // World ranks, for messages.
  MPI_Group group, worldGroup;
  MPI_Comm_group(data, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &worldGroup);
  std::vector<int> ranks(comm->size);
  for (int i = 0; i < comm->size; ++i)
    ranks[i] = i;
  comm->worldRanks.resize(comm->size);
  MPI_Group_translate_ranks(group, comm->size, ranks.data(), worldGroup,
                            comm->worldRanks.data());
  MPI_Group_free(&group);
  MPI_Group_free(&worldGroup);
  comm->lastCheckEnd = Clock::now();
  comms.push_back(comm);
  return comm;
}

void Engine::run() {
  int provided = 0;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  std::string error;
  std::shared_ptr<CommState> worldComm;
  if (code != MPI_SUCCESS) {
    error = "MPI_Init_thread failed: " + mpiErrorString(code);
  } else if (provided < MPI_THREAD_FUNNELED) {
    error = "this MPI provides no thread support (MPI_THREAD_FUNNELED "
            "needed, got level " +
            std::to_string(provided) + ")";
  } else {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int *tagUpperBound = nullptr, found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUpperBound, &found);
    if (found && tagUpperBound)
      tagLimit = *tagUpperBound;
    MPI_Comm data;
    if (int dup = MPI_Comm_dup(MPI_COMM_WORLD, &data))
      error = "MPI_Comm_dup failed: " + mpiErrorString(dup);
    else
      worldComm = makeComm(data, "world", error);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    ready = true;
    initError = error;
    world = worldComm;
  }
  wakeCallers.notify_all();
  if (!error.empty())
    return;
  loop();
  // Every communicator is destroyed. After a fatal error MPI_Finalize would
  // wait for ranks that will never come: end the job instead.
  if (anyBroken)
    MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

/// Moves new tasks onto the comm thread and issues them; returns whether it
/// should stop.
bool Engine::takeTasks() {
  std::deque<Task> taken;
  int abort = -1;
  bool stop = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    taken.swap(tasks);
    abort = abortCode;
    stop = stopping;
  }
  if (abort >= 0)
    MPI_Abort(MPI_COMM_WORLD, abort);
  for (Task &task : taken) {
    if (task.collective)
      issue(*task.comm, std::move(task.collective));
    else
      task.comm->freeRequested = true;
  }
  return stop;
}

void Engine::loop() {
  // Polling. While a caller is blocked in wait() the thread spins (with
  // sched_yield, for oversubscribed ranks), as latency is all that matters
  // then, but only for kSpin after the last progress (a completion, a new
  // collective or a new wait): a rank that waits on a hung peer must not
  // burn a core for the whole timeout. Otherwise, and while collectives
  // run under the caller's compute, it sleeps between tests, 20 us doubling
  // up to 1 ms; idle, it wakes every 10 ms to answer status requests.
  using std::chrono::microseconds;
  const auto kSpin = std::chrono::milliseconds(50);
  auto backoff = microseconds(20);
  Clock::time_point lastProgress = Clock::now();
  int64_t seenWaits = 0;
  while (true) {
    bool stop = takeTasks();
    bool progressed = false, active = false;
    for (size_t i = 0; i < comms.size(); ++i) {
      CommState &comm = *comms[i];
      progressed |= testActive(comm);
      serveRequests(comm);
      if (comm.check)
        pollCheck(comm);
      checkTimeouts(comm);
      active |= !comm.active.empty() || comm.check != nullptr;
    }
    // Completed replies leave the queue in order.
    while (!replies.empty()) {
      int done = 0;
      MPI_Test(&replies.front().request, &done, MPI_STATUS_IGNORE);
      if (!done)
        break;
      replies.pop_front();
    }
    for (size_t i = 0; i < comms.size();) {
      CommState &comm = *comms[i];
      // A broken communicator's collectives never finish: it goes as it is.
      bool idle = comm.active.empty() || !comm.broken.empty();
      if (comm.freeRequested && idle && !comm.check) {
        freeComm(comm);
        comms.erase(comms.begin() + i);
        continue;
      }
      ++i;
    }
    if (stop && comms.empty()) {
      // Replies to peers that never took them.
      for (OutgoingReply &reply : replies)
        MPI_Request_free(&reply.request);
      return;
    }

    std::unique_lock<std::mutex> lock(mutex);
    if (progressed || waitsStarted != seenWaits || !tasks.empty()) {
      seenWaits = waitsStarted;
      lastProgress = Clock::now();
      backoff = microseconds(20);
    }
    if (!tasks.empty() || abortCode >= 0)
      continue;
    if (active && waiters > 0 && Clock::now() - lastProgress < kSpin) {
      lock.unlock();
      sched_yield();
      continue;
    }
    auto sleep = active ? backoff : microseconds(10000);
    wakeThread.wait_for(lock, sleep, [&] {
      return !tasks.empty() || abortCode >= 0 || waitsStarted != seenWaits ||
             (stopping && !active);
    });
    if (active)
      backoff = std::min(backoff * 2, microseconds(1000));
  }
}

void Engine::freeComm(CommState &comm) {
  // A broken communicator keeps collectives MPI cannot cancel: leave it.
  if (!comm.broken.empty())
    return;
  MPI_Comm_free(&comm.control);
  MPI_Comm_free(&comm.data);
}

/// The MPI type of `count` elements that only move.
MPI_Datatype bytesType(kir::DType dtype) {
  switch (kir::dtypeBytes(dtype)) {
  case 1: return MPI_UINT8_T;
  case 2: return MPI_UINT16_T;
  case 4: return MPI_UINT32_T;
  default: return MPI_UINT64_T;
  }
}

/// The MPI type and op of a reduction, or an error.
std::string reductionType(kir::DType dtype, ReduceOp op, MPI_Datatype &type,
                          MPI_Op &mpiOp) {
  mpiOp = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  switch (dtype) {
  case kir::DType::F32:
    type = MPI_FLOAT;
    return "";
  case kir::DType::I32:
  case kir::DType::I64:
    type = dtype == kir::DType::I32 ? MPI_INT32_T : MPI_INT64_T;
    if (op == ReduceOp::Avg)
      return std::string("avg of ") + kir::dtypeName(dtype) +
             " is not supported (integer division); use sum";
    return "";
  default:
    return std::string(reduceOpName(op)) + " of " + kir::dtypeName(dtype) +
           " is not supported by the MPI backend (f32, i32, i64 only); "
           "reduce in f32";
  }
}

void Engine::issue(CommState &comm, std::unique_ptr<Collective> c) {
  if (!comm.broken.empty()) {
    complete(comm, *c, comm.broken);
    return;
  }
  if (!c->error.empty()) {
    complete(comm, *c, c->error);
    return;
  }
  int count = static_cast<int>(c->count);
  int code = MPI_SUCCESS;
  MPI_Datatype type = bytesType(c->dtype);
  MPI_Op mpiOp = MPI_SUM;
  if (c->kind == Kind::AllReduce || c->kind == Kind::ReduceScatter) {
    std::string error = reductionType(c->dtype, c->op, type, mpiOp);
    if (!error.empty()) {
      complete(comm, *c, "rank " + std::to_string(comm.worldRank()) + ": " +
                             kindName(c->kind) + " #" +
                             std::to_string(c->ticket) + " on '" +
                             comm.axis + "': " + error);
      return;
    }
  }
  int64_t bytes = c->count * kir::dtypeBytes(c->dtype);
  if (c->kind == Kind::AllReduce && comm.size > 1 && ringBytes >= 0 &&
      bytes >= ringBytes && RingAllReduce::supports(c->dtype, c->op)) {
    if (scratchPool.empty())
      scratchPool.push_back(std::make_unique<char[]>(
          RingAllReduce::kInFlight * RingAllReduce::kSegmentBytes));
    c->scratch = std::move(scratchPool.back());
    scratchPool.pop_back();
    // Its messages carry the ticket as tag: collectives in flight on one
    // communicator never share one.
    int tag = static_cast<int>(c->ticket % tagLimit);
    c->ring = std::make_unique<RingAllReduce>(
        comm.data, comm.rank, comm.size, c->send, c->recv, c->count,
        c->dtype, c->op, tag, c->scratch.get());
    comm.active.push_back(std::move(c));
    return;
  }
  switch (c->kind) {
  case Kind::AllReduce:
    code = MPI_Iallreduce(c->inPlace ? MPI_IN_PLACE : c->send, c->recv, count,
                          type, mpiOp, comm.data, &c->request);
    break;
  case Kind::ReduceScatter:
    // In place: MPI reads size * count elements from recvbuf (= send) and
    // leaves the result at its start; complete() moves it to chunk `rank`.
    code = MPI_Ireduce_scatter_block(
        c->inPlace ? MPI_IN_PLACE : c->send,
        c->inPlace ? const_cast<void *>(c->send) : c->recv, count, type,
        mpiOp, comm.data, &c->request);
    break;
  case Kind::AllGather:
    code = MPI_Iallgather(c->inPlace ? MPI_IN_PLACE : c->send, count, type,
                          c->recv, count, type, comm.data, &c->request);
    break;
  case Kind::Broadcast:
    code = MPI_Ibcast(c->recv, count, type, c->root, comm.data, &c->request);
    break;
  case Kind::Barrier:
    code = MPI_Ibarrier(comm.data, &c->request);
    break;
  // Point-to-point on the data communicator, tag 0: MPI keeps the order of
  // the messages from one rank to another.
  case Kind::Send:
    code = MPI_Isend(c->payload.data(), count, type, c->root, 0, comm.data,
                     &c->request);
    break;
  case Kind::Recv:
    code = MPI_Irecv(c->recv, count, type, c->root, 0, comm.data,
                     &c->request);
    break;
  case Kind::Split:
    c->splitInfo.resize(2 * comm.size);
    code = MPI_Iallgather(c->splitSend, 2, MPI_INT, c->splitInfo.data(), 2,
                          MPI_INT, comm.data, &c->request);
    break;
  }
  if (code != MPI_SUCCESS) {
    complete(comm, *c, "rank " + std::to_string(comm.worldRank()) + ": " +
                           kindName(c->kind) + " #" +
                           std::to_string(c->ticket) + " on '" + comm.axis +
                           "' failed to start: " + mpiErrorString(code));
    return;
  }
  comm.active.push_back(std::move(c));
}

bool Engine::testActive(CommState &comm) {
  bool progressed = false;
  for (size_t i = 0; i < comm.active.size();) {
    Collective &c = *comm.active[i];
    int done = 0;
    std::string error;
    if (c.ring) {
      done = c.ring->test(error);
    } else if (int code = MPI_Test(&c.request, &done, MPI_STATUS_IGNORE)) {
      error = mpiErrorString(code);
    }
    if (!error.empty()) {
      breakComm(comm, "rank " + std::to_string(comm.worldRank()) + ": " +
                          kindName(c.kind) + " #" + std::to_string(c.ticket) +
                          " on '" + comm.axis + "' failed: " + error);
      return true;
    }
    if (done && c.scratch)
      scratchPool.push_back(std::move(c.scratch));
    if (!done) {
      ++i;
      continue;
    }
    progressed = true;
    comm.fruitlessChecks = 0;
    if (c.kind == Kind::Split)
      finishSplit(comm, c);
    else
      complete(comm, c, "");
    comm.active.erase(comm.active.begin() + i);
  }
  return progressed;
}

/// Marks the collective done: the post-processing that MPI lacks, then the
/// caller is told.
void Engine::complete(CommState &comm, Collective &c, std::string error) {
  if (error.empty() && c.count > 0) {
    bool reduces = c.kind == Kind::AllReduce || c.kind == Kind::ReduceScatter;
    if (reduces && c.op == ReduceOp::Avg) {
      // MPI has no average: the sum divided by size. Division, not a
      // multiplication by 1/size, so the result is the correctly rounded
      // quotient of the sum (for power-of-two sizes both are exact).
      float *values = static_cast<float *>(
          c.kind == Kind::ReduceScatter && c.inPlace
              ? const_cast<void *>(c.send)
              : c.recv);
      float divisor = static_cast<float>(comm.size);
      for (int64_t i = 0; i < c.count; ++i)
        values[i] /= divisor;
    }
    if (c.kind == Kind::ReduceScatter && c.inPlace && c.recv != c.send)
      std::memmove(c.recv, c.send, c.count * kir::dtypeBytes(c.dtype));
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    comm.pending.erase(c.ticket);
    if (!error.empty())
      comm.errors[c.ticket] = std::move(error);
  }
  wakeCallers.notify_all();
}

void Engine::finishSplit(CommState &comm, Collective &c) {
  // Every rank has reached the split (the all-gather of colors and keys is
  // done), so the blocking MPI_Comm_split and MPI_Comm_dup below meet their
  // peers at once.
  MPI_Comm data = MPI_COMM_NULL;
  std::string error;
  std::shared_ptr<CommState> child;
  if (int code = MPI_Comm_split(comm.data, c.splitSend[0], c.splitSend[1],
                                &data))
    error = "MPI_Comm_split failed: " + mpiErrorString(code);
  else
    child = makeComm(data, static_cast<const char *>(c.recv), error);
  if (child) {
    std::lock_guard<std::mutex> lock(mutex);
    comm.splits[c.ticket] = child;
  }
  if (!error.empty())
    error = "rank " + std::to_string(comm.worldRank()) + ": split #" +
            std::to_string(c.ticket) + " of '" + comm.axis + "': " + error;
  complete(comm, c, error);
}

void Engine::serveRequests(CommState &comm) {
  while (true) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kTagRequest, comm.control, &flag,
                   &status) != MPI_SUCCESS ||
        !flag)
      return;
    StatusRequest request{};
    MPI_Recv(&request, sizeof(request), MPI_BYTE, status.MPI_SOURCE,
             kTagRequest, comm.control, MPI_STATUS_IGNORE);
    OutgoingReply &out = replies.emplace_back();
    out.reply.nonce = request.nonce;
    out.reply.started = comm.started.load();
    {
      // What this process's caller waits on, on whichever communicator.
      std::lock_guard<std::mutex> lock(mutex);
      for (const std::shared_ptr<CommState> &other : comms) {
        if (other->waitingOn == 0)
          continue;
        out.reply.waitingOn = other->waitingOn;
        std::snprintf(out.reply.waitingAxis, sizeof(out.reply.waitingAxis),
                      "%s", other->axis.c_str());
        break;
      }
    }
    MPI_Isend(&out.reply, sizeof(out.reply), MPI_BYTE, status.MPI_SOURCE,
              kTagReply, comm.control, &out.request);
    // A peer asks about a collective this rank is stuck on too: check now
    // rather than a timeout later, so that every rank reports the fault.
    bool stuckHere = false;
    for (const std::unique_ptr<Collective> &c : comm.active)
      stuckHere |= c->ticket == request.ticket;
    Ticket waitingOn;
    {
      std::lock_guard<std::mutex> lock(mutex);
      waitingOn = comm.waitingOn;
    }
    if (stuckHere && waitingOn >= request.ticket && !comm.check &&
        comm.lastChecked != request.ticket) {
      for (const std::unique_ptr<Collective> &c : comm.active)
        if (c->ticket == request.ticket) {
          startCheck(comm, c->ticket, c->kind);
          break;
        }
    }
  }
}

void Engine::checkTimeouts(CommState &comm) {
  if (comm.check || comm.active.empty() || !comm.broken.empty())
    return;
  Ticket waitingOn;
  Clock::time_point since;
  {
    std::lock_guard<std::mutex> lock(mutex);
    waitingOn = comm.waitingOn;
    since = comm.waitSince;
  }
  if (waitingOn == 0)
    return;
  const Collective *oldest = nullptr;
  for (const std::unique_ptr<Collective> &c : comm.active)
    if (!oldest || c->ticket < oldest->ticket)
      oldest = c.get();
  if (oldest->ticket > waitingOn)
    return;
  // The clock runs while the caller is blocked, from the later of the start
  // of its wait and the end of the last check.
  Clock::time_point clock = std::max(since, comm.lastCheckEnd);
  if (secondsSince(clock) >= options.timeoutSeconds)
    startCheck(comm, oldest->ticket, oldest->kind);
}

void Engine::startCheck(CommState &comm, Ticket ticket, Kind kind) {
  auto check = std::make_unique<Check>();
  check->ticket = ticket;
  check->kind = kind;
  check->start = Clock::now();
  check->request = {ticket, comm.nextNonce++};
  check->sends.assign(comm.size, MPI_REQUEST_NULL);
  check->recvs.assign(comm.size, MPI_REQUEST_NULL);
  check->replies.assign(comm.size, StatusReply{});
  check->answered.assign(comm.size, 0);
  for (int peer = 0; peer < comm.size; ++peer) {
    if (peer == comm.rank)
      continue;
    MPI_Irecv(&check->replies[peer], sizeof(StatusReply), MPI_BYTE, peer,
              kTagReply, comm.control, &check->recvs[peer]);
    MPI_Isend(&check->request, sizeof(StatusRequest), MPI_BYTE, peer,
              kTagRequest, comm.control, &check->sends[peer]);
  }
  comm.lastChecked = ticket;
  comm.check = std::move(check);
}

void Engine::pollCheck(CommState &comm) {
  Check &check = *comm.check;
  bool all = true;
  for (int peer = 0; peer < comm.size; ++peer) {
    if (peer == comm.rank || check.answered[peer])
      continue;
    int done = 0;
    MPI_Test(&check.recvs[peer], &done, MPI_STATUS_IGNORE);
    if (done && check.replies[peer].nonce != check.request.nonce) {
      // A late answer to an earlier check: listen again.
      MPI_Irecv(&check.replies[peer], sizeof(StatusReply), MPI_BYTE, peer,
                kTagReply, comm.control, &check.recvs[peer]);
      done = 0;
    }
    check.answered[peer] = done;
    all &= done != 0;
  }
  if (!all && secondsSince(check.start) < options.graceSeconds)
    return;

  // The verdict. Ranks named are world ranks.
  std::string faults;
  for (int peer = 0; peer < comm.size; ++peer) {
    if (peer == comm.rank)
      continue;
    std::string who = "rank " + std::to_string(comm.worldRanks[peer]);
    if (!check.answered[peer]) {
      MPI_Cancel(&check.recvs[peer]);
      MPI_Wait(&check.recvs[peer], MPI_STATUS_IGNORE);
      faults += (faults.empty() ? "" : "; ") + who +
                " did not respond (hung or dead)";
      continue;
    }
    const StatusReply &reply = check.replies[peer];
    if (reply.started >= check.ticket)
      continue;
    std::string state;
    char axis[sizeof(reply.waitingAxis) + 1] = {};
    std::memcpy(axis, reply.waitingAxis, sizeof(reply.waitingAxis));
    if (reply.waitingOn == 0)
      state = "its process is alive but has not reached this one";
    else
      state = "its process is alive and waits on collective #" +
              std::to_string(reply.waitingOn) + " on '" + axis + "'";
    faults += (faults.empty() ? "" : "; ") + who +
              " is still at collective #" + std::to_string(reply.started) +
              " (" + state + ")";
  }
  double waited = options.timeoutSeconds * (comm.fruitlessChecks + 1);
  std::string head = "rank " + std::to_string(comm.worldRank()) + ": " +
                     kindName(check.kind) + " #" +
                     std::to_string(check.ticket) + " on '" + comm.axis +
                     "' timed out after " + formatSeconds(waited) + ": ";
  // The sends to a peer that never answered may never complete; the check
  // keeps their buffer.
  for (MPI_Request &send : check.sends)
    if (send != MPI_REQUEST_NULL)
      MPI_Request_free(&send);
  comm.finishedChecks.push_back(std::move(comm.check));
  comm.lastCheckEnd = Clock::now();
  if (!faults.empty()) {
    breakComm(comm, head + faults);
    return;
  }
  // Every rank has started it: it is slow, not stuck. A second such check
  // in a row means MPI itself makes no progress.
  if (++comm.fruitlessChecks >= 2)
    breakComm(comm, head + "every rank reached it, but it made no progress");
}

void Engine::breakComm(CommState &comm, const std::string &message) {
  anyBroken = true;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (comm.broken.empty())
      comm.broken = message;
  }
  wakeCallers.notify_all();
}

/// A communicator of the MPI world.
class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(std::shared_ptr<Engine> engine,
                  std::shared_ptr<CommState> comm)
      : engine(std::move(engine)), comm(std::move(comm)) {}
  ~MpiCommunicator() override;

  int rank() const override { return comm->rank; }
  int size() const override { return comm->size; }
  int worldRank() const override { return comm->worldRank(); }
  const char *backend() const override { return "mpi"; }
  llvm::StringRef axis() const override { return comm->axis; }
  Ticket started() const override { return comm->started.load(); }

  Ticket allReduce(const void *send, void *recv, int64_t count,
                   kir::DType dtype, ReduceOp op) override;
  Ticket reduceScatter(const void *send, void *recv, int64_t recvCount,
                       kir::DType dtype, ReduceOp op) override;
  Ticket allGather(const void *send, void *recv, int64_t sendCount,
                   kir::DType dtype) override;
  Ticket broadcast(void *buffer, int64_t count, kir::DType dtype,
                   int root) override;
  Ticket send(const void *data, int64_t count, kir::DType dtype,
              int peer) override;
  Ticket recv(void *data, int64_t count, kir::DType dtype,
              int peer) override;
  llvm::Error wait(Ticket ticket) override;
  llvm::Error barrier() override;
  llvm::Expected<std::unique_ptr<Communicator>>
  split(int color, int key, llvm::StringRef axis) override;
  [[noreturn]] void abort(int code) override;

private:
  std::unique_ptr<Collective> make(Kind kind, const void *send, void *recv,
                                   int64_t count, kir::DType dtype);
  Ticket start(std::unique_ptr<Collective> collective);
  /// Adds a valid call to traffic().
  void countStarted(const Collective &c);

  std::shared_ptr<Engine> engine;
  std::shared_ptr<CommState> comm;
};

MpiCommunicator::~MpiCommunicator() {
  // Collectives still in flight finish first (an error here has nobody to
  // go to); then the comm thread frees the MPI communicators.
  llvm::consumeError(waitAll());
  {
    std::lock_guard<std::mutex> lock(engine->mutex);
    engine->tasks.push_back({comm, nullptr});
  }
  engine->wakeThread.notify_all();
}

std::unique_ptr<Collective> MpiCommunicator::make(Kind kind, const void *send,
                                                  void *recv, int64_t count,
                                                  kir::DType dtype) {
  auto c = std::make_unique<Collective>();
  c->kind = kind;
  c->send = send;
  c->recv = recv;
  c->count = count;
  c->dtype = dtype;
  if (count < 0)
    c->error = "negative count " + std::to_string(count);
  else if (count > INT_MAX)
    c->error = "count " + std::to_string(count) +
               " is more than MPI's int counts hold (2^31 - 1 elements); "
               "split the buffer";
  return c;
}

Ticket MpiCommunicator::start(std::unique_ptr<Collective> c) {
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(engine->mutex);
    ticket = comm->started.load() + 1;
    comm->started.store(ticket);
    c->ticket = ticket;
    if (c->error.empty())
      countStarted(*c);
    if (!c->error.empty())
      c->error = "rank " + std::to_string(comm->worldRank()) + ": " +
                 kindName(c->kind) + " #" + std::to_string(ticket) + " on '" +
                 comm->axis + "': " + c->error;
    // A send's data is copied: its caller has nothing to wait for (the
    // copy completes in the comm thread whenever the receiver takes it).
    if (c->kind != Kind::Send || !c->error.empty())
      comm->pending.insert(ticket);
    engine->tasks.push_back({comm, std::move(c)});
  }
  engine->wakeThread.notify_all();
  return ticket;
}

void MpiCommunicator::countStarted(const Collective &c) {
  switch (c.kind) {
  case Kind::AllReduce:
    return countTraffic(Transfer::AllReduce, c.count, c.dtype);
  case Kind::ReduceScatter:
    return countTraffic(Transfer::ReduceScatter, c.count, c.dtype);
  case Kind::AllGather:
    return countTraffic(Transfer::AllGather, c.count, c.dtype);
  case Kind::Broadcast:
    return countTraffic(Transfer::Broadcast, c.count, c.dtype);
  case Kind::Send:
    return countTraffic(Transfer::Send, c.count, c.dtype);
  case Kind::Recv:
    return countTraffic(Transfer::Recv, c.count, c.dtype);
  case Kind::Barrier:
  case Kind::Split:
    return;
  }
}

Ticket MpiCommunicator::allReduce(const void *send, void *recv, int64_t count,
                                  kir::DType dtype, ReduceOp op) {
  auto c = make(Kind::AllReduce, send, recv, count, dtype);
  c->op = op;
  c->inPlace = send == recv;
  return start(std::move(c));
}

Ticket MpiCommunicator::reduceScatter(const void *send, void *recv,
                                      int64_t recvCount, kir::DType dtype,
                                      ReduceOp op) {
  auto c = make(Kind::ReduceScatter, send, recv, recvCount, dtype);
  c->op = op;
  c->inPlace = recv == static_cast<const char *>(send) +
                           comm->rank * recvCount * kir::dtypeBytes(dtype);
  return start(std::move(c));
}

Ticket MpiCommunicator::allGather(const void *send, void *recv,
                                  int64_t sendCount, kir::DType dtype) {
  auto c = make(Kind::AllGather, send, recv, sendCount, dtype);
  c->inPlace = send == static_cast<const char *>(recv) +
                           comm->rank * sendCount * kir::dtypeBytes(dtype);
  return start(std::move(c));
}

Ticket MpiCommunicator::broadcast(void *buffer, int64_t count,
                                  kir::DType dtype, int root) {
  auto c = make(Kind::Broadcast, buffer, buffer, count, dtype);
  c->root = root;
  if (c->error.empty() && (root < 0 || root >= comm->size))
    c->error = "root " + std::to_string(root) + " is not a rank of '" +
               comm->axis + "' (size " + std::to_string(comm->size) + ")";
  return start(std::move(c));
}

Ticket MpiCommunicator::send(const void *data, int64_t count,
                             kir::DType dtype, int peer) {
  auto c = make(Kind::Send, nullptr, nullptr, count, dtype);
  c->root = peer;
  if (c->error.empty() && (peer < 0 || peer >= comm->size || peer == comm->rank))
    c->error = "peer " + std::to_string(peer) + " is not another rank of '" +
               comm->axis + "' (size " + std::to_string(comm->size) + ")";
  if (c->error.empty())
    c->payload.assign(static_cast<const char *>(data),
                      static_cast<const char *>(data) +
                          count * kir::dtypeBytes(dtype));
  return start(std::move(c));
}

Ticket MpiCommunicator::recv(void *data, int64_t count, kir::DType dtype,
                             int peer) {
  auto c = make(Kind::Recv, nullptr, data, count, dtype);
  c->root = peer;
  if (c->error.empty() && (peer < 0 || peer >= comm->size || peer == comm->rank))
    c->error = "peer " + std::to_string(peer) + " is not another rank of '" +
               comm->axis + "' (size " + std::to_string(comm->size) + ")";
  return start(std::move(c));
}

llvm::Error MpiCommunicator::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(engine->mutex);
  if (ticket <= 0 || ticket > comm->started.load())
    return llvm::createStringError(
        "rank " + std::to_string(comm->worldRank()) + ": wait on ticket " +
        std::to_string(ticket) + " of '" + comm->axis +
        "', which was never started (last started: " +
        std::to_string(comm->started.load()) + ")");
  if (comm->pending.count(ticket) && comm->broken.empty()) {
    comm->waitingOn = ticket;
    comm->waitSince = Clock::now();
    ++engine->waiters;
    ++engine->waitsStarted;
    engine->wakeThread.notify_all();
    engine->wakeCallers.wait(lock, [&] {
      return !comm->pending.count(ticket) || !comm->broken.empty();
    });
    --engine->waiters;
    comm->waitingOn = 0;
  }
  auto found = comm->errors.find(ticket);
  if (found != comm->errors.end()) {
    std::string message = std::move(found->second);
    comm->errors.erase(found);
    return llvm::createStringError(message);
  }
  if (comm->pending.count(ticket))
    return llvm::createStringError(comm->broken);
  return llvm::Error::success();
}

llvm::Error MpiCommunicator::barrier() {
  return wait(start(make(Kind::Barrier, nullptr, nullptr, 0,
                         kir::DType::F32)));
}

llvm::Expected<std::unique_ptr<Communicator>>
MpiCommunicator::split(int color, int key, llvm::StringRef axis) {
  // The axis name travels in the collective's recv pointer until the comm
  // thread names the new communicator with it.
  std::string name = axis.str();
  auto c = make(Kind::Split, nullptr, name.data(), 0, kir::DType::I32);
  c->splitSend[0] = color;
  c->splitSend[1] = key;
  if (color < 0)
    c->error = "negative color " + std::to_string(color);
  Ticket ticket = start(std::move(c));
  if (llvm::Error error = wait(ticket))
    return error;
  std::shared_ptr<CommState> child;
  {
    std::lock_guard<std::mutex> lock(engine->mutex);
    child = std::move(comm->splits[ticket]);
    comm->splits.erase(ticket);
  }
  return std::make_unique<MpiCommunicator>(engine, child);
}

void MpiCommunicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  // The other ranks that saw the same fault finish their check within
  // milliseconds of this one; give them a second to print before mpirun
  // kills them. The comm thread keeps answering meanwhile. Ranks abort a
  // little apart (mpirun garbles its report of aborts that coincide).
  std::this_thread::sleep_for(std::chrono::milliseconds(
      1000 + 50 * (comm->worldRank() % 20)));
  {
    std::lock_guard<std::mutex> lock(engine->mutex);
    engine->abortCode = code < 0 ? 1 : code;
  }
  engine->wakeThread.notify_all();
  // MPI_Abort does not return; should the comm thread not get to it, the
  // process ends anyway and mpirun ends the job on its non-zero status.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::_Exit(code);
}

} // namespace

llvm::Expected<std::unique_ptr<Communicator>>
llmc::runtime::comm::createMpiWorld(const CommOptions &options) {
  int64_t ringBytes = kDefaultRingBytes;
  if (const char *value = std::getenv("LLMC_COMM_RING_BYTES");
      value && *value &&
      llvm::StringRef(value).trim().getAsInteger(10, ringBytes))
    return llvm::createStringError(
        std::string("LLMC_COMM_RING_BYTES='") + value +
        "' is not a number of bytes (or -1: never use the ring)");
  auto engine = std::make_shared<Engine>(options, ringBytes);
  engine->thread = std::thread([raw = engine.get()] { raw->run(); });
  std::shared_ptr<CommState> world;
  std::string error;
  {
    std::unique_lock<std::mutex> lock(engine->mutex);
    engine->wakeCallers.wait(lock, [&] { return engine->ready; });
    world = engine->world;
    error = engine->initError;
  }
  if (!error.empty())
    return llvm::createStringError(error);
  return std::make_unique<MpiCommunicator>(engine, world);
}
