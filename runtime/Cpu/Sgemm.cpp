// The CPU executor's f32 GEMM (Sgemm.h): OpenBLAS linked, oneDNN loaded.
#include "runtime/Cpu/Sgemm.h"
#include "runtime/Cpu/CpuIsa.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/ErrorHandling.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

using namespace llmc;

namespace {

// The part of oneDNN's C API used here (oneapi/dnnl/dnnl.h, stable since
// 1.0): not included, so building llmc needs no oneDNN headers.
using DnnlSgemmFn = int (*)(char transa, char transb, int64_t m, int64_t n,
                            int64_t k, float alpha, const float *a, int64_t lda,
                            const float *b, int64_t ldb, float beta, float *c,
                            int64_t ldc);
struct DnnlVersion {
  int major, minor, patch;
  const char *hash;
  unsigned cpuRuntime, gpuRuntime;
};
using DnnlVersionFn = const DnnlVersion *(*)();
constexpr unsigned kDnnlRuntimeSeq = 1, kDnnlRuntimeOmp = 2;
using OmpSetNumThreadsFn = void (*)(int);

struct OneDnn {
  DnnlSgemmFn sgemm = nullptr;
  OmpSetNumThreadsFn ompSetNumThreads = nullptr; // null: sequential build
  std::string description;                       // or why it is not loaded
};

/// Loads oneDNN once: its dnnl_sgemm, and the OpenMP runtime it uses.
const OneDnn &oneDnn() {
  static const OneDnn loaded = [] {
    OneDnn d;
    void *handle = nullptr;
    const char *file = nullptr;
    for (const char *name : {"libdnnl.so.3", "libdnnl.so.2"})
      if ((handle = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
        file = name;
        break;
      }
    if (!handle) {
      d.description = "no oneDNN (libdnnl.so.3 or .so.2 not found)";
      return d;
    }
    auto sgemm = reinterpret_cast<DnnlSgemmFn>(dlsym(handle, "dnnl_sgemm"));
    auto version =
        reinterpret_cast<DnnlVersionFn>(dlsym(handle, "dnnl_version"));
    if (!sgemm || !version) {
      d.description = std::string("no oneDNN (") + file +
                      " lacks dnnl_sgemm or dnnl_version)";
      return d;
    }
    const DnnlVersion *v = version();
    std::string name = "oneDNN " + std::to_string(v->major) + "." +
                       std::to_string(v->minor) + "." +
                       std::to_string(v->patch) + " (" + file;
    if (v->cpuRuntime == kDnnlRuntimeOmp) {
      // The OpenMP library libdnnl links, found through its handle.
      d.ompSetNumThreads = reinterpret_cast<OmpSetNumThreadsFn>(
          dlsym(handle, "omp_set_num_threads"));
      if (!d.ompSetNumThreads) {
        d.description = name + ") not used: omp_set_num_threads not found";
        return d;
      }
      name += ", OpenMP)";
    } else if (v->cpuRuntime == kDnnlRuntimeSeq) {
      name += ", sequential)";
    } else {
      // TBB or a threadpool: its threads cannot be limited per caller.
      d.description = name + ") not used: CPU runtime " +
                      std::to_string(v->cpuRuntime) +
                      " is neither OpenMP nor sequential";
      return d;
    }
    d.sgemm = sgemm;
    d.description = name;
    return d;
  }();
  return loaded;
}

/// Sets this thread's oneDNN (OpenMP) team size once, to one.
void oneDnnOnOneThread(const OneDnn &d) {
  thread_local bool set = false;
  if (!set && d.ompSetNumThreads) {
    d.ompSetNumThreads(1);
    set = true;
  }
}

} // namespace

const char *cpu::sgemmLibraryName(SgemmLibrary library) {
  return library == SgemmLibrary::OneDnn ? "oneDNN" : "OpenBLAS";
}

cpu::SgemmLibrary cpu::defaultSgemmLibrary(bool oneDnnLoaded, bool avx512) {
  return oneDnnLoaded && avx512 ? SgemmLibrary::OneDnn : SgemmLibrary::OpenBlas;
}

llvm::Expected<const cpu::SgemmSetup &> cpu::sgemmSetup() {
  // The setup, or the error that LLMC_CPU_SGEMM makes.
  static const std::pair<SgemmSetup, std::string> setup = [] {
    SgemmSetup s;
    const OneDnn &d = oneDnn();
    s.oneDnnLoaded = d.sgemm != nullptr;
    s.oneDnn = d.description;
    s.avx512 = cpuRuns(CpuIsa::Avx512);
    s.library = defaultSgemmLibrary(s.oneDnnLoaded, s.avx512);
    const char *env = std::getenv("LLMC_CPU_SGEMM");
    std::string mode = env ? env : "";
    if (mode.empty())
      return std::pair(s, std::string());
    s.fromEnvironment = true;
    if (mode == "openblas")
      s.library = SgemmLibrary::OpenBlas;
    else if (mode == "onednn")
      s.library = SgemmLibrary::OneDnn;
    else
      return std::pair(s, "LLMC_CPU_SGEMM=" + mode +
                              ": expected openblas or onednn (unset: oneDNN "
                              "on CPUs with AVX-512, else OpenBLAS)");
    if (s.library == SgemmLibrary::OneDnn && !s.oneDnnLoaded)
      return std::pair(s, "LLMC_CPU_SGEMM=onednn: " + s.oneDnn);
    return std::pair(s, std::string());
  }();
  if (!setup.second.empty())
    return llvm::createStringError(setup.second);
  return setup.first;
}

std::string cpu::describeSgemm(const SgemmSetup &setup) {
  if (setup.fromEnvironment)
    return (setup.library == SgemmLibrary::OneDnn ? setup.oneDnn
                                                  : std::string("OpenBLAS")) +
           " (LLMC_CPU_SGEMM=" +
           (setup.library == SgemmLibrary::OneDnn ? "onednn" : "openblas") +
           ")";
  if (setup.library == SgemmLibrary::OneDnn)
    return setup.oneDnn + " (on AVX-512; LLMC_CPU_SGEMM=openblas for OpenBLAS)";
  if (!setup.oneDnnLoaded)
    return "OpenBLAS (" + setup.oneDnn + ")";
  return "OpenBLAS (no AVX-512; LLMC_CPU_SGEMM=onednn for " + setup.oneDnn +
         ")";
}

void cpu::sgemm(SgemmLibrary library, bool transA, bool transB, int64_t m,
                int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                const float *b, int64_t ldb, float beta, float *c,
                int64_t ldc) {
  if (library == SgemmLibrary::OneDnn) {
    const OneDnn &d = oneDnn();
    oneDnnOnOneThread(d);
    // dnnl_sgemm fails only on bad arguments, which the executor's
    // verified views rule out.
    d.sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, a, lda, b,
            ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
