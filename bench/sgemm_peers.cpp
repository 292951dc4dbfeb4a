// sgemm-peers: single-precision GEMM of OpenBLAS, BLIS and oneDNN side by
// side on the shapes llmc runs on the CPU (GPT-2 124M at batch 4 x seq 64,
// generation at M = 1, two squares for the peak). Each case reports the best
// of several runs, and every library's result is checked against a
// double-precision reference before it is timed. See bench/README.md.
//
// OpenBLAS and BLIS both export the BLAS and CBLAS names (cblas_sgemm,
// sgemm_, ...): in one binary, whichever comes first in the search order
// serves every caller. So BLIS is called through its own API (bli_sgemm),
// OpenBLAS's cblas_sgemm is looked up in OpenBLAS's own handle, and the
// program prints the file each entry point it calls lives in.

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#ifdef LLMC_HAVE_BLIS
#include <blis.h>
#endif
#ifdef LLMC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

// One library. gemm computes C[m,n] = A[m,k] * op(B), all row-major and
// dense; transB: B is stored [n,k] and read transposed (PyTorch's weight
// layout, llmc's x * W^T), else B is stored [k,n].
struct Peer {
  const char *name;
  void (*gemm)(bool transB, int64_t m, int64_t n, int64_t k, const float *a,
               const float *b, float *c);
  void (*setThreads)(int count);
  // setThreads sets the calling thread's count only (OpenMP's
  // omp_set_num_threads); otherwise it sets the library-wide count.
  bool perCallerThreads;
  int maxThreads;      // 1 where the build cannot run more
  bool onlyM1 = false; // measured on the m = 1 shapes only
};

std::vector<Peer> peers;

template <typename Fn> const void *addressOf(Fn *fn) {
  return reinterpret_cast<const void *>(fn);
}

// The file of the loaded object that holds `address`, symlinks resolved.
std::string fileOf(const void *address) {
  Dl_info info;
  if (!address || !dladdr(address, &info) || !info.dli_fname)
    return "(unknown)";
  char resolved[PATH_MAX];
  if (realpath(info.dli_fname, resolved))
    return resolved;
  return info.dli_fname;
}

// The handle of the already loaded object holding `address`; loads nothing.
[[maybe_unused]] void *handleOf(const void *address) {
  Dl_info info;
  if (!address || !dladdr(address, &info) || !info.dli_fname)
    return nullptr;
  return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

const char *envOrUnset(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "(unset)";
}

// ---------------------------------------------------------------------------
// OpenBLAS

#ifdef LLMC_HAVE_OPENBLAS
} // namespace

// OpenBLAS's own entry points. Its cblas.h is not included: blis.h carries a
// copy of the CBLAS declarations, and the two clash in one file.
extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
int openblas_get_parallel(void);
char *openblas_get_config(void);
char *openblas_get_corename(void);
}

namespace {
namespace openblas {

// cblas_sgemm and cblas_sgemv by the CBLAS ABI (its enums are ints,
// blasint is int).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int order, int transA, int transB, int m, int n,
                         int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c,
                         int ldc);
using SgemvFn = void (*)(int order, int trans, int m, int n, float alpha,
                         const float *a, int lda, const float *x, int incx,
                         float beta, float *y, int incy);
SgemmFn sgemm;
SgemvFn sgemv;

void gemm(bool transB, int64_t m, int64_t n, int64_t k, const float *a,
          const float *b, float *c) {
  sgemm(kRowMajor, kNoTrans, transB ? kTrans : kNoTrans, int(m), int(n),
        int(k), 1.0f, a, int(k), b, int(transB ? k : n), 0.0f, c, int(n));
}

// The "openblas-gemv" peer: at m = 1 the product is a matrix-vector one,
// which this peer hands to cblas_sgemv (y = B x, or B^T x for B [k,n]);
// it tells whether a caller should route m = 1 there itself.
void gemv(bool transB, int64_t m, int64_t n, int64_t k, const float *a,
          const float *b, float *c) {
  if (m != 1)
    return gemm(transB, m, n, k, a, b, c);
  if (transB)
    sgemv(kRowMajor, kNoTrans, int(n), int(k), 1.0f, b, int(k), a, 1, 0.0f, c,
          1);
  else
    sgemv(kRowMajor, kTrans, int(k), int(n), 1.0f, b, int(n), a, 1, 0.0f, c,
          1);
}

void setThreads(int count) { openblas_set_num_threads(count); }

void init() {
  std::string file = fileOf(addressOf(&openblas_get_config));
  void *self = handleOf(addressOf(&openblas_get_config));
  sgemm = self ? reinterpret_cast<SgemmFn>(dlsym(self, "cblas_sgemm"))
               : nullptr;
  sgemv = self ? reinterpret_cast<SgemvFn>(dlsym(self, "cblas_sgemv"))
               : nullptr;
  std::string sgemmFile = fileOf(reinterpret_cast<const void *>(sgemm));
  std::string sgemvFile = fileOf(reinterpret_cast<const void *>(sgemv));
  static const char *const parallel[] = {"sequential", "pthreads", "OpenMP"};
  int mode = openblas_get_parallel();
  std::printf("openblas: %s\n", openblas_get_config());
  std::printf("  core (kernels) %s, threading %s, max threads %d\n",
              openblas_get_corename(),
              mode >= 0 && mode <= 2 ? parallel[mode] : "?",
              openblas_get_num_threads());
  std::printf("  OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s "
              "OPENBLAS_NUM_THREADS=%s\n",
              envOrUnset("OPENBLAS_CORETYPE"), envOrUnset("OPENBLAS_L2_SIZE"),
              envOrUnset("OPENBLAS_NUM_THREADS"));
  std::printf("  cblas_sgemm, cblas_sgemv called from %s, %s\n",
              sgemmFile.c_str(), sgemvFile.c_str());
  if (!sgemm || !sgemv || sgemmFile != file || sgemvFile != file) {
    std::printf("  SKIPPED: cblas_sgemm or cblas_sgemv is not OpenBLAS's own "
                "(%s)\n",
                file.c_str());
    return;
  }
  int maxThreads = mode == 0 ? 1 : INT_MAX;
  peers.push_back({"openblas", gemm, setThreads, false, maxThreads});
  peers.push_back({"openblas-gemv", gemv, setThreads, false, maxThreads,
                   /*onlyM1=*/true});
}

} // namespace openblas
#endif

// ---------------------------------------------------------------------------
// BLIS, through its typed API: general strides, so row-major needs no
// flags, and no name it calls is shared with OpenBLAS.

#ifdef LLMC_HAVE_BLIS
namespace blis {

void gemm(bool transB, int64_t m, int64_t n, int64_t k, const float *a,
          const float *b, float *c) {
  float one = 1.0f, zero = 0.0f;
  // Strides are (row, column) in elements; B as stored is [n,k] when read
  // transposed, [k,n] otherwise.
  bli_sgemm(BLIS_NO_TRANSPOSE, transB ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m,
            n, k, &one, const_cast<float *>(a), k, 1, const_cast<float *>(b),
            transB ? k : n, 1, &zero, c, n, 1);
}

void setThreads(int count) { bli_thread_set_num_threads(count); }

void init() {
  cntx_t *cntx = bli_gks_query_cntx();
  bool threaded =
      bli_info_get_enable_pthreads() || bli_info_get_enable_openmp();
  std::printf("blis: %s, arch (kernel set) %s, threading %s\n",
              bli_info_get_version_str(),
              bli_arch_string(bli_arch_query_id()),
              bli_info_get_enable_pthreads()  ? "pthreads"
              : bli_info_get_enable_openmp() ? "OpenMP"
                                             : "none");
  std::printf("  sgemm microkernel %s, MRxNR %" PRId64 "x%" PRId64
              ", MC %" PRId64 " KC %" PRId64 " NC %" PRId64 "\n",
              bli_info_get_gemm_ukr_impl_string(BLIS_NAT, BLIS_FLOAT),
              int64_t(bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, cntx)),
              int64_t(bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, cntx)),
              int64_t(bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, cntx)),
              int64_t(bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cntx)),
              int64_t(bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NC, cntx)));
  std::printf("  small/unpacked (sup) path when m < %" PRId64 " or n < %" PRId64
              " or k < %" PRId64 "; BLIS_NUM_THREADS=%s\n",
              int64_t(bli_cntx_get_l3_sup_thresh_dt(BLIS_FLOAT, BLIS_MT, cntx)),
              int64_t(bli_cntx_get_l3_sup_thresh_dt(BLIS_FLOAT, BLIS_NT, cntx)),
              int64_t(bli_cntx_get_l3_sup_thresh_dt(BLIS_FLOAT, BLIS_KT, cntx)),
              envOrUnset("BLIS_NUM_THREADS"));
  std::printf("  bli_sgemm called from %s\n",
              fileOf(addressOf(&bli_sgemm)).c_str());
  peers.push_back({"blis", gemm, setThreads, false, threaded ? INT_MAX : 1});
}

} // namespace blis
#endif

// ---------------------------------------------------------------------------
// oneDNN, through its C API (dnnl.h; dnnl.hpp needs exceptions). dnnl_sgemm
// is row-major. With the OpenMP runtime the thread count is the calling
// thread's omp_set_num_threads (or OMP_NUM_THREADS); the function is taken
// from the OpenMP library libdnnl itself links, whatever this binary links.

#ifdef LLMC_HAVE_DNNL
namespace onednn {

void gemm(bool transB, int64_t m, int64_t n, int64_t k, const float *a,
          const float *b, float *c) {
  dnnl_status_t status = dnnl_sgemm('N', transB ? 'T' : 'N', m, n, k, 1.0f, a,
                                    k, b, transB ? k : n, 0.0f, c, n);
  if (status != dnnl_success) {
    std::fprintf(stderr, "sgemm-peers: dnnl_sgemm failed (status %d)\n",
                 int(status));
    std::abort();
  }
}

using OmpSetFn = void (*)(int);
using OmpGetFn = int (*)();
OmpSetFn ompSetNumThreads;

void setThreads(int count) {
  if (ompSetNumThreads)
    ompSetNumThreads(count);
}

const char *isaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_all: return "all (no limit)";
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
  case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "(other)";
  }
}

const char *runtimeName(unsigned runtime) {
  switch (runtime) {
  case DNNL_RUNTIME_SEQ: return "sequential";
  case DNNL_RUNTIME_OMP: return "OpenMP";
  case DNNL_RUNTIME_TBB: return "TBB";
  case DNNL_RUNTIME_THREADPOOL: return "threadpool";
  default: return "(other)";
  }
}

void init() {
  const dnnl_version_t *version = dnnl_version();
  void *self = handleOf(addressOf(&dnnl_sgemm));
  int maxThreads = 1;
  std::string ompFile = "-";
  if (version->cpu_runtime == DNNL_RUNTIME_OMP && self) {
    ompSetNumThreads =
        reinterpret_cast<OmpSetFn>(dlsym(self, "omp_set_num_threads"));
    auto ompGetMaxThreads =
        reinterpret_cast<OmpGetFn>(dlsym(self, "omp_get_max_threads"));
    if (ompSetNumThreads)
      maxThreads = INT_MAX;
    ompFile = fileOf(reinterpret_cast<const void *>(ompSetNumThreads));
    if (ompGetMaxThreads)
      ompFile += ", omp_get_max_threads() = " +
                 std::to_string(ompGetMaxThreads());
  }
  std::printf("onednn: %d.%d.%d (%s), CPU runtime %s, effective ISA %s\n",
              version->major, version->minor, version->patch, version->hash,
              runtimeName(version->cpu_runtime),
              isaName(dnnl_get_effective_cpu_isa()));
  std::printf("  OMP_NUM_THREADS=%s ONEDNN_MAX_CPU_ISA=%s DNNL_MAX_CPU_ISA=%s; "
              "omp_set_num_threads from %s\n",
              envOrUnset("OMP_NUM_THREADS"), envOrUnset("ONEDNN_MAX_CPU_ISA"),
              envOrUnset("DNNL_MAX_CPU_ISA"), ompFile.c_str());
  std::printf("  dnnl_sgemm called from %s\n",
              fileOf(addressOf(&dnnl_sgemm)).c_str());
  if (version->cpu_runtime != DNNL_RUNTIME_OMP &&
      version->cpu_runtime != DNNL_RUNTIME_SEQ)
    std::printf("  (its thread count is not set here: measured in the 1 "
                "thread rows only, with the runtime's default)\n");
  peers.push_back({"onednn", gemm, setThreads, true, maxThreads});
}

} // namespace onednn
#endif

// ---------------------------------------------------------------------------
// Shapes, data, reference

struct Shape {
  const char *name;
  const char *group; // "gpt2", "gen" or "peak"
  int64_t m, k, n;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

// GPT-2 124M (n_embd 768, vocab 50257), batch 4 x seq 64 = 256 rows.
const Shape kShapes[] = {
    {"attn.qkv", "gpt2", 256, 768, 2304},  {"attn.proj", "gpt2", 256, 768, 768},
    {"mlp.fc", "gpt2", 256, 768, 3072},    {"mlp.proj", "gpt2", 256, 3072, 768},
    {"lm_head", "gpt2", 256, 768, 50257},  {"gen.qkv", "gen", 1, 768, 2304},
    {"gen.lm_head", "gen", 1, 768, 50257}, {"square1024", "peak", 1024, 1024, 1024},
    {"square2048", "peak", 2048, 2048, 2048},
};

struct Rng {
  uint64_t state;
  uint64_t next() { // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { // [-1, 1)
    return float(int64_t(next() >> 40) - (int64_t(1) << 23)) * 0x1p-23f;
  }
  int64_t below(int64_t bound) { return int64_t(next() % uint64_t(bound)); }
};

float *allocFloats(int64_t count) {
  size_t bytes = (size_t(count) * sizeof(float) + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, bytes);
  if (!p) {
    std::fprintf(stderr, "sgemm-peers: out of memory (%zu bytes)\n", bytes);
    std::exit(1);
  }
  return static_cast<float *>(p);
}

struct Data {
  int64_t m, k, n;
  float *a;  // [m,k]
  float *bt; // [n,k]: the weight as llmc and PyTorch store it
  float *b;  // [k,n]: the same matrix transposed, for C = A * B
  float *c[2];
  // Reference entries of C (double precision) at sampled positions, and
  // sum |a_ik * b_kj| for each, the scale of the rounding error.
  struct Entry {
    int64_t i, j;
    double value, scale;
  };
  std::vector<Entry> entries;

  explicit Data(const Shape &s) : m(s.m), k(s.k), n(s.n) {
    a = allocFloats(m * k);
    bt = allocFloats(n * k);
    b = allocFloats(k * n);
    c[0] = allocFloats(m * n);
    c[1] = allocFloats(m * n);
    Rng rng{uint64_t(m * 1000003 + k * 1009 + n)};
    for (int64_t i = 0; i < m * k; ++i)
      a[i] = rng.uniform();
    for (int64_t i = 0; i < n * k; ++i)
      bt[i] = rng.uniform();
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        b[p * n + j] = bt[j * k + p];
    for (float *buffer : c)
      std::memset(buffer, 0, size_t(m * n) * sizeof(float));

    // The first and last rows and columns (edge tiles), random ones, and
    // random single entries.
    std::vector<int64_t> rows, cols;
    for (int64_t i = 0; i < std::min<int64_t>(m, 4); ++i)
      rows.insert(rows.end(), {i, m - 1 - i});
    for (int64_t j = 0; j < std::min<int64_t>(n, 8); ++j)
      cols.insert(cols.end(), {j, n - 1 - j});
    for (int r = 0; r < 4; ++r)
      rows.push_back(rng.below(m));
    for (int r = 0; r < 32; ++r)
      cols.push_back(rng.below(n));
    for (int64_t i : rows)
      for (int64_t j : cols)
        addEntry(i, j);
    for (int r = 0; r < 2048; ++r)
      addEntry(rng.below(m), rng.below(n));
  }
  ~Data() {
    for (float *p : {a, bt, b, c[0], c[1]})
      std::free(p);
  }
  Data(const Data &) = delete;
  Data &operator=(const Data &) = delete;

  void addEntry(int64_t i, int64_t j) {
    double value = 0, scale = 0;
    for (int64_t p = 0; p < k; ++p) {
      double term = double(a[i * k + p]) * double(bt[j * k + p]);
      value += term;
      scale += std::fabs(term);
    }
    entries.push_back({i, j, value, scale});
  }

  void poison(float *out) const {
    std::fill(out, out + m * n, std::nanf(""));
  }

  // Largest |c - reference| / sum |a*b| over the sampled entries; infinite
  // when any entry of C is not finite (C is poisoned with NaN before the
  // checked call, so an entry left unwritten shows).
  double maxError(const float *out) const {
    for (int64_t i = 0; i < m * n; ++i)
      if (!std::isfinite(out[i]))
        return INFINITY;
    double worst = 0;
    for (const Entry &e : entries) {
      double error = std::fabs(double(out[e.i * n + e.j]) - e.value) /
                     std::max(e.scale, 1e-30);
      worst = std::max(worst, error);
    }
    return worst;
  }
};

// Above this the result is wrong, not rounded: fp32 accumulation over
// k <= 3072 stays near 1e-6 of sum |a*b|; bf16 or tf32 inputs would not.
constexpr double kMaxError = 1e-4;

// ---------------------------------------------------------------------------
// Measurement

struct Options {
  int passes = 3;
  int minReps = 3;
  double minSeconds = 0.2;
  int maxReps = 1000;
  int settleMs = 100;
  bool concurrent = true;
  std::vector<std::string> libs, shapes;
};

enum Mode { kOneThread, kTwoThreads, kTwoCallers, kNumModes };
const char *const kModeNames[] = {"1", "2", "2x1"};

// One measured case; its runs accumulate over the passes.
struct Result {
  size_t shape;
  bool transB;
  Mode mode;
  size_t peer;
  std::vector<double> times; // seconds per GEMM (2x1: per pair of GEMMs)
  double error = 0;          // worst over the checked calls
  double best = 0, median = 0, gflops = 0;
  bool ok = true;
};

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename Run>
void repeat(const Options &options, std::vector<double> &times, Run run) {
  Clock::time_point begin = Clock::now();
  for (int reps = 0; reps < options.maxReps &&
                     (reps < options.minReps ||
                      secondsSince(begin) < options.minSeconds);
       ++reps)
    times.push_back(run());
}

// One pass of a case: a checked warm-up call, then timed runs.
void measure(const Options &options, const Peer &peer, const Shape &shape,
             Data &data, Result &result) {
  bool transB = result.transB;
  const float *b = transB ? data.bt : data.b;
  auto call = [&](float *c) {
    peer.gemm(transB, shape.m, shape.n, shape.k, data.a, b, c);
  };
  double error;
  if (result.mode != kTwoCallers) {
    peer.setThreads(result.mode == kOneThread ? 1 : 2);
    data.poison(data.c[0]);
    call(data.c[0]);
    error = data.maxError(data.c[0]);
    repeat(options, result.times, [&] {
      Clock::time_point start = Clock::now();
      call(data.c[0]);
      return secondsSince(start);
    });
  } else {
    // Two threads of ours, each running its own GEMM with one library
    // thread: a round runs `calls` GEMMs on each and is timed whole.
    peer.setThreads(1);
    auto round = [&](int calls) {
      Clock::time_point start = Clock::now();
      std::thread workers[2];
      for (int w = 0; w < 2; ++w)
        workers[w] = std::thread([&, w] {
          if (peer.perCallerThreads)
            peer.setThreads(1);
          for (int i = 0; i < calls; ++i)
            call(data.c[w]);
        });
      for (std::thread &worker : workers)
        worker.join();
      return secondsSince(start) / calls;
    };
    data.poison(data.c[0]);
    data.poison(data.c[1]);
    double estimate = round(1);
    error = std::max(data.maxError(data.c[0]), data.maxError(data.c[1]));
    int calls = std::max(1, int(0.05 / std::max(estimate, 1e-9)));
    repeat(options, result.times, [&] { return round(calls); });
  }
  result.error = std::max(result.error, error);
  result.ok = result.ok && error <= kMaxError;
}

void summarize(Result &result) {
  std::vector<double> times = result.times;
  std::sort(times.begin(), times.end());
  result.best = times.front();
  result.median = times[times.size() / 2];
  result.gflops = kShapes[result.shape].flops() *
                  (result.mode == kTwoCallers ? 2 : 1) / result.best * 1e-9;
}

// ---------------------------------------------------------------------------
// Reporting

bool selected(const std::vector<std::string> &only, const char *name) {
  return only.empty() ||
         std::find(only.begin(), only.end(), name) != only.end();
}

std::string dims(const Shape &s) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
         std::to_string(s.n);
}

const char *opName(bool transB) { return transB ? "NT" : "NN"; }

// "name" alone, or "name +x% over runner" for the best of `values` (indexed
// by peer; 0 or less means no valid figure).
std::string winner(const std::vector<double> &values) {
  int best = -1, second = -1;
  for (int p = 0; p < int(values.size()); ++p) {
    if (values[p] <= 0)
      continue;
    if (best < 0 || values[p] > values[best]) {
      second = best;
      best = p;
    } else if (second < 0 || values[p] > values[second]) {
      second = p;
    }
  }
  if (best < 0)
    return "-";
  std::string text = peers[best].name;
  if (second >= 0) {
    char margin[64];
    std::snprintf(margin, sizeof margin, " +%.1f%% over %s",
                  (values[best] / values[second] - 1) * 100,
                  peers[second].name);
    text += margin;
  }
  return text;
}

void printPivotHeader(const char *first) {
  std::printf("%-24s %-3s %-4s", first, "op", "thr");
  for (const Peer &peer : peers)
    std::printf(" %13s", peer.name);
  std::printf("  winner\n");
}

void printPivotRow(const std::string &label, bool transB, Mode mode,
                   const std::vector<double> &values) {
  std::printf("%-24s %-3s %-4s", label.c_str(), opName(transB),
              kModeNames[mode]);
  for (double value : values) {
    if (value > 0)
      std::printf(" %13.1f", value);
    else
      std::printf(" %13s", "-");
  }
  std::printf("  %s\n", winner(values).c_str());
}

// Geometric mean of GFLOP/s over a group of shapes, per op, mode and peer;
// a peer missing a shape or failing its check gets no mean.
void printGeomeans(const std::vector<Result> &results,
                   const std::vector<size_t> &shapes, const char *title) {
  if (shapes.empty())
    return;
  std::printf("\n== Geometric mean GFLOP/s over %s:", title);
  for (size_t s : shapes)
    std::printf(" %s", kShapes[s].name);
  std::printf("\n");
  printPivotHeader("");
  for (bool transB : {true, false}) {
    for (int mode = 0; mode < kNumModes; ++mode) {
      std::vector<double> means(peers.size(), 0);
      bool any = false;
      for (size_t p = 0; p < peers.size(); ++p) {
        double logSum = 0;
        size_t count = 0;
        for (const Result &r : results)
          if (r.peer == p && r.transB == transB && r.mode == mode && r.ok &&
              std::find(shapes.begin(), shapes.end(), r.shape) != shapes.end()) {
            logSum += std::log(r.gflops);
            ++count;
          }
        if (count == shapes.size()) {
          means[p] = std::exp(logSum / double(count));
          any = true;
        }
      }
      if (any)
        printPivotRow("", transB, Mode(mode), means);
    }
  }
}

void printLoad(const char *when) {
  char line[128] = "?";
  if (FILE *file = std::fopen("/proc/loadavg", "r")) {
    if (!std::fgets(line, sizeof line, file))
      std::strcpy(line, "?\n");
    std::fclose(file);
  }
  std::printf("load average %s: %s", when, line);
}

int usage(int code) {
  std::printf(
      "usage: sgemm-peers [options]\n"
      "  --passes N        measure every case in N passes, keep the best "
      "(default 3)\n"
      "  --reps N          per pass, at least N timed runs per case "
      "(default 3)\n"
      "  --min-time S      and at least S seconds per case (default 0.2)\n"
      "  --lib NAME        only this library: openblas, blis, onednn "
      "(repeatable)\n"
      "  --shape NAME      only this shape, e.g. lm_head (repeatable)\n"
      "  --no-concurrent   skip the 2x1 mode (two callers, one thread each)\n"
      "  --settle-ms N     pause before each case (default 100)\n");
  return code;
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool hasValue = i + 1 < argc;
    if (arg == "--passes" && hasValue)
      options.passes = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--reps" && hasValue)
      options.minReps = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--min-time" && hasValue)
      options.minSeconds = std::atof(argv[++i]);
    else if (arg == "--lib" && hasValue)
      options.libs.push_back(argv[++i]);
    else if (arg == "--shape" && hasValue)
      options.shapes.push_back(argv[++i]);
    else if (arg == "--settle-ms" && hasValue)
      options.settleMs = std::max(0, std::atoi(argv[++i]));
    else if (arg == "--no-concurrent")
      options.concurrent = false;
    else if (arg == "--help" || arg == "-h")
      return usage(0);
    else {
      std::fprintf(stderr, "sgemm-peers: unknown or incomplete option %s\n",
                   arg.c_str());
      return usage(2);
    }
  }

  std::printf("sgemm-peers: C[M,N] = A[M,K] * B^T (NT, B stored [N,K]: "
              "llmc's x * W^T) and A * B (NN), fp32, row-major\n");
  std::printf("thr: 1, 2 = one call with that many library threads; 2x1 = "
              "two of our threads, each its own call with 1 library thread "
              "(GFLOP/s of both)\n");
  std::printf("OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s, %u hardware "
              "threads\n",
              envOrUnset("OPENBLAS_CORETYPE"), envOrUnset("OPENBLAS_L2_SIZE"),
              std::thread::hardware_concurrency());
  printLoad("at start");
  std::printf("\n== Libraries (kernels)\n");
#ifdef LLMC_HAVE_OPENBLAS
  if (selected(options.libs, "openblas"))
    openblas::init();
#else
  std::printf("openblas: not found at configure time\n");
#endif
#ifdef LLMC_HAVE_BLIS
  if (selected(options.libs, "blis"))
    blis::init();
#else
  std::printf("blis: not found at configure time\n");
#endif
#ifdef LLMC_HAVE_DNNL
  if (selected(options.libs, "onednn"))
    onednn::init();
#else
  std::printf("onednn: not found at configure time\n");
#endif
  if (void *plain = dlsym(RTLD_DEFAULT, "cblas_sgemm"))
    std::printf("(a plain call to cblas_sgemm in this binary goes to %s)\n",
                fileOf(plain).c_str());
  if (peers.empty()) {
    std::printf("no library to measure\n");
    return 0;
  }

  // Every case, shapes outermost so that one shape's data lives at a time
  // within a pass; each pass starts the libraries in a rotated order.
  std::vector<Result> results;
  std::vector<size_t> gpt2Shapes, genShapes;
  for (size_t s = 0; s < std::size(kShapes); ++s) {
    if (!selected(options.shapes, kShapes[s].name))
      continue;
    if (std::strcmp(kShapes[s].group, "gpt2") == 0)
      gpt2Shapes.push_back(s);
    else if (std::strcmp(kShapes[s].group, "gen") == 0)
      genShapes.push_back(s);
    for (bool transB : {true, false})
      for (int mode = 0; mode < kNumModes; ++mode)
        for (size_t p = 0; p < peers.size(); ++p)
          if ((mode != kTwoCallers || options.concurrent) &&
              (mode != kTwoThreads || peers[p].maxThreads >= 2) &&
              (!peers[p].onlyM1 || kShapes[s].m == 1)) {
            Result result;
            result.shape = s;
            result.transB = transB;
            result.mode = Mode(mode);
            result.peer = p;
            results.push_back(result);
          }
  }

  std::printf("\n");
  for (int pass = 0; pass < options.passes; ++pass) {
    Clock::time_point passStart = Clock::now();
    for (size_t first = 0; first < results.size();) {
      size_t s = results[first].shape;
      size_t last = first;
      while (last < results.size() && results[last].shape == s)
        ++last;
      Data data(kShapes[s]);
      // Cases of one op and mode are consecutive, one per library.
      for (size_t group = first; group < last;) {
        size_t end = group;
        while (end < last && results[end].transB == results[group].transB &&
               results[end].mode == results[group].mode)
          ++end;
        for (size_t i = 0; i < end - group; ++i) {
          Result &result = results[group + (i + pass) % (end - group)];
          // Let the previous case's idle library threads go to sleep.
          std::this_thread::sleep_for(
              std::chrono::milliseconds(options.settleMs));
          measure(options, peers[result.peer], kShapes[s], data, result);
        }
        group = end;
      }
      first = last;
    }
    std::printf("pass %d/%d: %.0f s; ", pass + 1, options.passes,
                secondsSince(passStart));
    printLoad("now");
    std::fflush(stdout);
  }

  bool allOk = true;
  std::printf("\n== Runs: best and median over all passes; error = max "
              "|c - ref| / sum|a*b| over sampled entries\n");
  std::printf("%-12s %-16s %-3s %-13s %-4s %10s %10s %9s %5s %9s %s\n", "shape",
              "MxKxN", "op", "library", "thr", "best ms", "median ms",
              "GFLOP/s", "runs", "error", "check");
  for (Result &result : results) {
    summarize(result);
    allOk = allOk && result.ok;
    const Shape &shape = kShapes[result.shape];
    std::printf("%-12s %-16s %-3s %-13s %-4s %10.3f %10.3f %9.1f %5zu %9.1e "
                "%s\n",
                shape.name, dims(shape).c_str(), opName(result.transB),
                peers[result.peer].name, kModeNames[result.mode],
                result.best * 1e3, result.median * 1e3, result.gflops,
                result.times.size(), result.error,
                result.ok ? "ok" : "WRONG");
  }

  std::printf("\n== GFLOP/s per shape (best run; a wrong result counts as "
              "none); winner's margin over the runner-up\n");
  printPivotHeader("shape MxKxN");
  for (size_t s = 0; s < std::size(kShapes); ++s) {
    for (bool transB : {true, false}) {
      for (int mode = 0; mode < kNumModes; ++mode) {
        std::vector<double> values(peers.size(), 0);
        bool any = false;
        for (const Result &r : results)
          if (r.shape == s && r.transB == transB && r.mode == mode) {
            values[r.peer] = r.ok ? r.gflops : 0;
            any = true;
          }
        if (any)
          printPivotRow(std::string(kShapes[s].name) + " " + dims(kShapes[s]),
                        transB, Mode(mode), values);
      }
    }
  }
  printGeomeans(results, gpt2Shapes, "the GPT-2 shapes (M=256)");
  printGeomeans(results, genShapes, "the generation shapes (M=1)");
  std::printf("\n");
  printLoad("at end");
  if (!allOk) {
    std::printf("WRONG results above: some library computed a wrong C\n");
    return 1;
  }
  return 0;
}
