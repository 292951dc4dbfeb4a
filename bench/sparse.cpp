// bench-sparse: the matmuls of a transformer block's weights, dense (the
// BLAS the CPU executor calls, threaded as it threads them) against 2:4
// (runtime/Cpu/SparseMatmul.h) with f32 kept values, for decoding (batch 1: a
// GEMV per weight, memory-bound; also 2:4 with bf16 kept values) and
// prefill (M = 128..512 rows), over GPT-2 124M's
// block shapes and a ~350M model's (d = 1024, 24 layers), next to the
// memory-bandwidth limit measured in the same run; and the crossover in M
// that the executor's choice of path is set from.
//
//   bench-sparse [--short] [--bench-threads N]
//
// Decode streams every layer's weights once per token (the weights of all
// layers are allocated, far more than the caches hold), so its time is the
// time of one token's block matmuls; the limit is the bytes read per token
// (dense: 4 bytes a weight; 2:4: the packed values, f32 or bf16, and
// metadata) over the read bandwidth measured here. x, y and the sums are
// f32 in every variant.
#include "bench/Bandwidth.h"
#include "bench/Options.h"
#include "runtime/Cpu/SgemmPeak.h"
#include "runtime/Cpu/SparseMatmul.h"
#include "runtime/Cpu/ThreadPool.h"
#include "runtime/Weights/Sparsity.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

using namespace llmc;
using llmc::cpu::CpuIsa;
using llmc::cpu::PackedTwoOfFour;

namespace {

llvm::cl::opt<bool> shortMode("short",
                              llvm::cl::cat(llmc::bench::benchOptions()),
                              llvm::cl::desc("Seconds, not minutes: 2 layers "
                                             "per model, M = 128 only, 1 rep"));
llvm::cl::opt<int> numThreads("bench-threads",
                              llvm::cl::cat(llmc::bench::benchOptions()),
                              llvm::cl::desc("Threads (default: all)"),
                              llvm::cl::init(0));

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The best of `reps` timings of fn().
template <typename Fn> double bestOf(int reps, Fn &&fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double start = now();
    fn();
    best = std::min(best, now() - start);
  }
  return best;
}

/// STREAM-like read bandwidth over 1 GiB (256 MiB in --short), bytes/s.
double readBandwidth(runtime::ThreadPool &pool) {
  return bench::readBandwidth(pool, int64_t(shortMode ? 64 : 256) << 20);
}

/// One weight shape of a block: W [n, k] (y = x W^T).
struct Shape {
  const char *name;
  int64_t n, k;
};

struct Model {
  const char *name;
  int64_t layers, d;
  std::vector<Shape> shapes() const {
    return {{"attn.c_attn", 3 * d, d},
            {"attn.c_proj", d, d},
            {"mlp.c_fc", 4 * d, d},
            {"mlp.c_proj", d, 4 * d}};
  }
};

/// A random 2:4 [n, k] weight (magnitude-pruned normal values) and its
/// packed forms (f32 and bf16 kept values).
struct Weight {
  std::vector<float> dense;
  PackedTwoOfFour packed, packedBf16;
};
Weight makeWeight(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  Weight w;
  w.dense.resize(n * k);
  for (float &v : w.dense)
    v = normal(rng);
  std::vector<float> mask(n * k);
  runtime::maskTwoOfFour(w.dense, k, mask);
  for (size_t i = 0; i < mask.size(); ++i)
    w.dense[i] *= mask[i];
  w.packed =
      cpu::packForCpu(cantFail(runtime::compressTwoOfFour("w", w.dense, n, k)));
  w.packedBf16 = cpu::toBf16Values(w.packed);
  return w;
}

/// The executor's dense product (runtime/Cpu/CpuExecutor.cpp's runGemm): one BLAS
/// thread per pool thread; rows of x split when there are many, W's rows
/// (columns of y) otherwise; a single row is a GEMV.
void denseMatmul(runtime::ThreadPool &pool, const float *x, int64_t m,
                 const Weight &w, int64_t n, int64_t k, float *y) {
  if (m >= 64 * pool.size()) {
    pool.parallelFor(m, [&](int64_t begin, int64_t end, int) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, end - begin, n, k,
                  1.0f, x + begin * k, k, w.dense.data(), k, 0.0f,
                  y + begin * n, n);
    });
    return;
  }
  pool.parallelFor(n, [&](int64_t begin, int64_t end, int) {
    if (m == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, end - begin, k, 1.0f,
                  w.dense.data() + begin * k, k, x, 1, 0.0f, y + begin, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, end - begin, k,
                  1.0f, x, k, w.dense.data() + begin * k, k, 0.0f, y + begin,
                  n);
  });
}

/// The executor's 2:4 product: W's rows split over the threads.
void sparseMatmul(runtime::ThreadPool &pool, CpuIsa isa, const float *x,
                  int64_t m, const Weight &w, int64_t n, float *y,
                  bool bf16 = false) {
  const PackedTwoOfFour &packed = bf16 ? w.packedBf16 : w.packed;
  pool.parallelFor(n, [&](int64_t begin, int64_t end, int) {
    cpu::sparseMatmulF32(isa, packed, x, m, packed.k, y, n, begin, end);
  });
}

void benchModel(const Model &model, runtime::ThreadPool &pool, CpuIsa isa,
                double bandwidth) {
  int64_t layers = shortMode ? 2 : model.layers;
  std::vector<Shape> shapes = model.shapes();
  // Every layer's weights, so that decode streams them from memory.
  std::vector<std::vector<Weight>> weights(layers);
  int64_t denseBytes = 0, sparseBytes = 0, bf16Bytes = 0, params = 0;
  for (int64_t l = 0; l < layers; ++l)
    for (const Shape &s : shapes) {
      weights[l].push_back(makeWeight(s.n, s.k, uint32_t(l * 10 + s.n + s.k)));
      denseBytes += s.n * s.k * 4;
      sparseBytes += weights[l].back().packed.bytes();
      bf16Bytes += weights[l].back().packedBf16.bytes();
      params += s.n * s.k;
    }
  int64_t maxN = 4 * model.d, maxM = 512;
  std::vector<float> x(maxM * 4 * model.d), y(maxM * maxN);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float &v : x)
    v = normal(rng);

  llvm::outs() << llvm::format(
      "\n%s: %lld layers measured of %lld, d=%lld, block weights %.1f M "
      "(%.0f MiB f32, %.0f MiB 2:4 packed: %.1f%%, %.0f MiB with bf16 "
      "values: %.1f%%)\n",
      model.name, (long long)layers, (long long)model.layers,
      (long long)model.d, params / 1e6, denseBytes / 1048576.0,
      sparseBytes / 1048576.0, 100.0 * sparseBytes / denseBytes,
      bf16Bytes / 1048576.0, 100.0 * bf16Bytes / denseBytes);

  // Decode: one token through every layer's four GEMVs.
  int reps = shortMode ? 2 : 5;
  // 0: dense, 1: 2:4 f32 values, 2: 2:4 bf16 values.
  auto token = [&](int variant) {
    for (int64_t l = 0; l < layers; ++l)
      for (size_t i = 0; i < shapes.size(); ++i) {
        if (variant > 0)
          sparseMatmul(pool, isa, x.data(), 1, weights[l][i], shapes[i].n,
                       y.data(), variant == 2);
        else
          denseMatmul(pool, x.data(), 1, weights[l][i], shapes[i].n,
                      shapes[i].k, y.data());
      }
  };
  token(0);
  token(1);
  token(2);
  double denseSec = bestOf(reps, [&] { token(0); });
  double sparseSec = bestOf(reps, [&] { token(1); });
  double bf16Sec = bestOf(reps, [&] { token(2); });
  double scale = double(model.layers) / layers; // per token of the model
  llvm::outs() << "decode (batch 1, block GEMVs of one token; limit: bytes "
                  "read / read bandwidth):\n";
  llvm::outs() << llvm::format("  %-9s %9s %10s %9s %8s %12s\n", "", "ms/tok",
                               "tokens/s", "limit", "of limit", "GB/s read");
  auto decodeRow = [&](const char *label, double sec, int64_t bytes) {
    double limit = bytes / bandwidth;
    llvm::outs() << llvm::format("  %-9s %9.2f %10.1f %9.1f %7.0f%% %12.1f\n",
                                 label, sec * scale * 1e3, 1.0 / (sec * scale),
                                 1.0 / (limit * scale), 100.0 * limit / sec,
                                 bytes / sec / 1e9);
  };
  decodeRow("dense", denseSec, denseBytes);
  decodeRow("2:4 f32", sparseSec, sparseBytes);
  decodeRow("2:4 bf16", bf16Sec, bf16Bytes);
  llvm::outs() << llvm::format(
      "  2:4 vs dense: %.2fx the tokens/s (%+.0f%%); "
      "with bf16 values %.2fx (%+.0f%%)\n",
      denseSec / sparseSec, 100.0 * (denseSec / sparseSec - 1),
      denseSec / bf16Sec, 100.0 * (denseSec / bf16Sec - 1));

  // Prefill: M rows through one layer's products (compute-bound; the
  // other layers are the same shapes), times the layers.
  std::vector<int64_t> ms = shortMode ? std::vector<int64_t>{128}
                                      : std::vector<int64_t>{128, 256, 512};
  llvm::outs() << "prefill (M rows through the block matmuls, f32 GFLOP/s "
                  "of the dense product's 2*M*N*K):\n";
  llvm::outs() << llvm::format("  %-5s %-12s %10s %10s %8s\n", "M", "", "dense",
                               "2:4", "2:4/dense");
  for (int64_t m : ms) {
    double denseTotal = 0, sparseTotal = 0, flops = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Shape &s = shapes[i];
      const Weight &w = weights[0][i];
      double f = 2.0 * m * s.n * s.k;
      double d = bestOf(shortMode ? 1 : 3, [&] {
        denseMatmul(pool, x.data(), m, w, s.n, s.k, y.data());
      });
      double sp = bestOf(shortMode ? 1 : 3, [&] {
        sparseMatmul(pool, isa, x.data(), m, w, s.n, y.data());
      });
      llvm::outs() << llvm::format("  %-5lld %-12s %10.1f %10.1f %8.2fx\n",
                                   (long long)m, s.name, f / d / 1e9,
                                   f / sp / 1e9, d / sp);
      denseTotal += d;
      sparseTotal += sp;
      flops += f;
    }
    llvm::outs() << llvm::format(
        "  %-5lld %-12s %10.1f %10.1f %8.2fx  (%.0f vs %.0f tokens/s)\n",
        (long long)m, "block", flops / denseTotal / 1e9,
        flops / sparseTotal / 1e9, denseTotal / sparseTotal,
        m / (denseTotal * model.layers), m / (sparseTotal * model.layers));
  }
}

/// The time of 2:4 over dense by M on GPT-2's mlp.c_fc (3072 x 768): the
/// largest M where 2:4 is faster is the crossover.
void crossover(runtime::ThreadPool &pool, CpuIsa isa) {
  const int64_t n = 3072, k = 768;
  Weight w = makeWeight(n, k, 5);
  std::vector<float> x(512 * k, 0.5f), y(512 * n);
  std::vector<int64_t> ms =
      shortMode
          ? std::vector<int64_t>{1, 16}
          : std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256, 512};
  llvm::outs() << "\ncrossover (mlp.c_fc 3072 x 768; weights in cache after "
                  "the first rep):\n";
  llvm::outs() << llvm::format("  %-5s %10s %10s %9s\n", "M", "dense us",
                               "2:4 us", "2:4/dense");
  int64_t last = 0;
  for (int64_t m : ms) {
    double d = bestOf(shortMode ? 2 : 7, [&] {
      denseMatmul(pool, x.data(), m, w, n, k, y.data());
    });
    double s = bestOf(shortMode ? 2 : 7, [&] {
      sparseMatmul(pool, isa, x.data(), m, w, n, y.data());
    });
    if (s < d)
      last = m;
    llvm::outs() << llvm::format("  %-5lld %10.1f %10.1f %8.2fx\n",
                                 (long long)m, d * 1e6, s * 1e6, d / s);
  }
  llvm::outs() << "  2:4 faster up to M = " << last << "\n";
}

} // namespace

int main(int argc, char **argv) {
  llmc::bench::parseOptions(
      argc, argv,
      "bench-sparse: dense vs 2:4 (f32 and bf16 kept values) block "
      "matmuls, decode and prefill\n");
  runtime::ThreadPool pool(numThreads);
  openblas_set_num_threads(1); // the pool's threads call BLAS
  CpuIsa isa = cpu::bestCpuIsa();
  llvm::outs() << "bench-sparse" << (shortMode ? " (--short)" : "") << "\n";
  llvm::outs() << "cpu: " << bench::cpuModel() << ", "
               << std::thread::hardware_concurrency() << " logical CPUs, "
               << pool.size() << " threads\n";
  llvm::outs() << "2:4 path: " << cpu::cpuIsaName(isa) << "\n";
  llvm::outs() << "dense BLAS: " << runtime::describeBlas() << "\n";
  double bandwidth = readBandwidth(pool);
  llvm::outs() << llvm::format("read bandwidth (STREAM-like sum, %d threads): "
                               "%.1f GB/s\n",
                               pool.size(), bandwidth / 1e9);
  for (const Model &model :
       {Model{"gpt2 124M", 12, 768}, Model{"gpt-350M (d=1024)", 24, 1024}})
    benchModel(model, pool, isa, bandwidth);
  crossover(pool, isa);
  return 0;
}
