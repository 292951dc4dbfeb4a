// The ring all-reduce's steps, windows of segments and reductions.
#include "runtime/Comm/MpiRing.h"

#include <algorithm>
#include <cstring>

using namespace llmc;
using namespace llmc::runtime::comm;

namespace {

/// Sends in flight per step, beyond which posting waits (each is a
/// rendezvous the receiver has to match; testing hundreds is slow).
constexpr int kSendWindow = 2 * RingAllReduce::kInFlight;

template <typename T>
void reduceTyped(T *out, const T *a, const T *b, int64_t count, bool max) {
  if (max) {
    for (int64_t i = 0; i < count; ++i)
      out[i] = a[i] < b[i] ? b[i] : a[i];
  } else {
    for (int64_t i = 0; i < count; ++i)
      out[i] = a[i] + b[i];
  }
}

std::string errorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

} // namespace

bool RingAllReduce::supports(kir::DType dtype, ReduceOp op) {
  switch (dtype) {
  case kir::DType::F32:
    return true;
  case kir::DType::I32:
  case kir::DType::I64:
    return op != ReduceOp::Avg;
  default:
    return false;
  }
}

RingAllReduce::RingAllReduce(MPI_Comm comm, int rank, int size,
                             const void *send, void *recv, int64_t count,
                             kir::DType dtype, ReduceOp op, int tag,
                             char *scratch)
    : comm(comm), rank(rank), size(size), tag(tag),
      send(static_cast<const char *>(send)), recv(static_cast<char *>(recv)),
      count(count), dtype(dtype), op(op),
      elementBytes(kir::dtypeBytes(dtype)), scratch(scratch) {
  for (int slot = 0; slot < kInFlight; ++slot)
    freeSlots.push_back(slot);
  startStep();
}

int64_t RingAllReduce::chunkBegin(int chunk) const {
  return chunk * count / size;
}

void RingAllReduce::reduceInto(char *out, const char *a, const char *b,
                               int64_t n) const {
  bool max = op == ReduceOp::Max;
  switch (dtype) {
  case kir::DType::F32:
    reduceTyped(reinterpret_cast<float *>(out),
                reinterpret_cast<const float *>(a),
                reinterpret_cast<const float *>(b), n, max);
    break;
  case kir::DType::I32:
    reduceTyped(reinterpret_cast<int32_t *>(out),
                reinterpret_cast<const int32_t *>(a),
                reinterpret_cast<const int32_t *>(b), n, max);
    break;
  default:
    reduceTyped(reinterpret_cast<int64_t *>(out),
                reinterpret_cast<const int64_t *>(a),
                reinterpret_cast<const int64_t *>(b), n, max);
    break;
  }
}

void RingAllReduce::startStep() {
  // Reduce-scatter step s: send chunk r - s, receive chunk r - s - 1 and
  // add this rank's part; after size - 1 steps rank r holds the whole sum
  // of chunk r + 1. All-gather step t passes the summed chunks on:
  // send chunk r + 1 - t, receive chunk r - t.
  int n = size;
  bool reduceScatter = step < n - 1;
  int t = reduceScatter ? step : step - (n - 1);
  int first = reduceScatter ? rank : rank + 1;
  int sendChunk = ((first - t) % n + n) % n;
  int recvChunk = ((first - t - 1) % n + n) % n;
  int64_t segment = std::max<int64_t>(1, kSegmentBytes / elementBytes);
  auto split = [&](int chunk, std::vector<Segment> &out) {
    out.clear();
    int64_t end = chunkBegin(chunk + 1);
    for (int64_t offset = chunkBegin(chunk); offset < end;
         offset += segment) {
      Segment s;
      s.offset = offset;
      s.count = std::min(segment, end - offset);
      out.push_back(s);
    }
  };
  split(sendChunk, sends);
  split(recvChunk, recvs);
  nextRecv = 0;
  nextSend = 0;
}

bool RingAllReduce::test(std::string &error) {
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int steps = 2 * (size - 1);
  while (step < steps) {
    bool reduceScatter = step < size - 1;
    const char *source = step == 0 ? send : recv;
    bool busy = false;
    // Receives: reduce-scatter ones land in scratch and are added in as
    // they arrive; all-gather ones land in place.
    for (size_t i = 0; i < nextRecv; ++i) {
      Segment &s = recvs[i];
      if (s.request == MPI_REQUEST_NULL)
        continue;
      int done = 0;
      if (int code = MPI_Test(&s.request, &done, MPI_STATUS_IGNORE)) {
        error = "ring receive failed: " + errorText(code);
        return true;
      }
      if (!done) {
        busy = true;
        continue;
      }
      if (reduceScatter) {
        int64_t offset = s.offset * elementBytes;
        reduceInto(recv + offset, send + offset,
                   scratch + s.slot * kSegmentBytes, s.count);
        freeSlots.push_back(s.slot);
      }
    }
    while (nextRecv < recvs.size() &&
           (!reduceScatter || !freeSlots.empty())) {
      Segment &s = recvs[nextRecv++];
      char *into = recv + s.offset * elementBytes;
      if (reduceScatter) {
        s.slot = freeSlots.back();
        freeSlots.pop_back();
        into = scratch + s.slot * kSegmentBytes;
      }
      if (int code = MPI_Irecv(into, static_cast<int>(s.count * elementBytes),
                               MPI_BYTE, left, tag, comm, &s.request)) {
        error = "ring receive failed to start: " + errorText(code);
        return true;
      }
      busy = true;
    }
    // Sends, at most kSendWindow in flight.
    int inFlight = 0;
    for (size_t i = 0; i < nextSend; ++i) {
      Segment &s = sends[i];
      if (s.request == MPI_REQUEST_NULL)
        continue;
      int done = 0;
      if (int code = MPI_Test(&s.request, &done, MPI_STATUS_IGNORE)) {
        error = "ring send failed: " + errorText(code);
        return true;
      }
      if (!done) {
        busy = true;
        ++inFlight;
      }
    }
    while (nextSend < sends.size() && inFlight < kSendWindow) {
      Segment &s = sends[nextSend++];
      if (int code =
              MPI_Isend(source + s.offset * elementBytes,
                        static_cast<int>(s.count * elementBytes), MPI_BYTE,
                        right, tag, comm, &s.request)) {
        error = "ring send failed to start: " + errorText(code);
        return true;
      }
      ++inFlight;
      busy = true;
    }
    if (busy)
      return false;
    ++step;
    if (step < steps)
      startStep();
  }
  return true;
}
