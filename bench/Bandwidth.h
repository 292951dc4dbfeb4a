// The memory-bandwidth yardstick of the decode benchmarks (bench-sparse,
// bench-export through bench-bandwidth): a STREAM-like read of a buffer far
// larger than the caches, summed on a thread pool.
// Memory-bound decoding reads every weight once a step, so
// weight bytes / this bandwidth is its time limit.
#ifndef LLMC_BENCH_BANDWIDTH_H
#define LLMC_BENCH_BANDWIDTH_H

#include "bench/Machine.h"
#include "runtime/Cpu/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace llmc::bench {

/// Read bandwidth in bytes/s: the best of 5 sums over `count` floats, split
/// over the pool's threads (each with 16 independent sums, so vectorized
/// and not bound by the add latency).
inline double readBandwidth(runtime::ThreadPool &pool, int64_t count) {
  std::vector<float> data(count, 1.0f);
  std::vector<double> sums(pool.size());
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = std::chrono::steady_clock::now();
    pool.parallelFor(count, [&](int64_t begin, int64_t end, int thread) {
      float s[16] = {};
      int64_t i = begin;
      for (; i + 16 <= end; i += 16)
        for (int j = 0; j < 16; ++j)
          s[j] += data[i + j];
      for (; i < end; ++i)
        s[0] += data[i];
      double total = 0;
      for (float v : s)
        total += v;
      sums[thread] += total;
    });
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  // The sums are used, so the loads cannot be dropped.
  volatile double sink = 0;
  for (double s : sums)
    sink = sink + s;
  return double(count) * sizeof(float) / best;
}

/// In-place update bandwidth in bytes/s: the best of 5 passes of
/// a[i] += b[i] over two arrays of `count` floats each (two reads and one
/// write to a line just read, 12 bytes an element), split over the pool's
/// threads. The optimizer's pattern (AdamW reads four tensors and writes
/// three of them back): on machines whose cores have few misses in flight
/// it moves more bytes a second than a pure read does (two streams in and
/// one out), so it is the yardstick of steps that both read and write.
inline double updateBandwidth(runtime::ThreadPool &pool, int64_t count) {
  std::vector<float> a(count, 1.0f), b(count, 0.5f);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = std::chrono::steady_clock::now();
    pool.parallelFor(count, [&](int64_t begin, int64_t end, int) {
      float *x = a.data();
      const float *y = b.data();
      for (int64_t i = begin; i < end; ++i)
        x[i] += y[i];
    });
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  volatile float sink = a[count / 2]; // the stores are used
  (void)sink;
  return double(count) * 3 * sizeof(float) / best;
}

} // namespace llmc::bench

#endif // LLMC_BENCH_BANDWIDTH_H
