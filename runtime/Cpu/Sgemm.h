// The CPU executor's f32 GEMM: OpenBLAS or oneDNN, whichever runs llmc's
// shapes faster on this CPU, behind one call.
//
// oneDNN is loaded at run time (dlopen of libdnnl.so.3 or .so.2, its
// dnnl_sgemm, row-major), never linked: a binary runs the same without it.
// Each caller runs its product on its own thread (the executor's pool
// splits the work, as it does for OpenBLAS with openblas_set_num_threads(1)):
// oneDNN's OpenMP team is set to one thread on each calling thread.
//
// Which library, per product: measured by bench/sgemm-peers and bench-train
// --gemm-shapes on the CPUs this was developed on, a rule on the CPU and the
// shape (chooseSgemm), not a timing taken at run time, so that a run's
// numbers do not depend on how busy the machine was when it started (a
// resumed run multiplies with the same library as the run it resumes).
// LLMC_CPU_SGEMM=openblas|onednn|auto (default auto) overrides it.
#ifndef LLMC_RUNTIME_CPU_SGEMM_H
#define LLMC_RUNTIME_CPU_SGEMM_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace llmc::cpu {

enum class SgemmLibrary : uint8_t { OpenBlas, OneDnn };

/// "OpenBLAS" or "oneDNN".
const char *sgemmLibraryName(SgemmLibrary library);

/// What LLMC_CPU_SGEMM asks for and what this machine has, decided once per
/// process: the libraries available, the preference, and why.
struct SgemmSetup {
  enum class Mode : uint8_t { Auto, OpenBlas, OneDnn } mode = Mode::Auto;
  bool oneDnnLoaded = false;
  std::string oneDnn;  // "oneDNN 2.6.3 (libdnnl.so.2, OpenMP)", or why not
  bool avx512 = false; // the CPU has AVX-512F (oneDNN's avx512_core kernels)
};

/// The process's setup; an error names LLMC_CPU_SGEMM when its value is not
/// openblas, onednn or auto, or when it asks for oneDNN and none loads.
llvm::Expected<const SgemmSetup &> sgemmSetup();

/// The library for C[m x n] = op(A)[m x k] op(B)[k x n] (the whole
/// product, before the executor splits it over threads). Auto: oneDNN on
/// CPUs with AVX-512 (there it measured 5-10% ahead of OpenBLAS on GPT-2's
/// shapes, forward and backward), OpenBLAS on AVX2 (ahead by 3%) or
/// without oneDNN. One-row products are the executor's GEMV, not this.
SgemmLibrary chooseSgemm(const SgemmSetup &setup, bool transA, bool transB,
                         int64_t m, int64_t n, int64_t k);

/// One line for logs and benchmarks: which library runs which products.
std::string describeSgemm(const SgemmSetup &setup);

/// C = alpha op(A) op(B) + beta C, row-major, leading dimensions lda, ldb,
/// ldc, on the calling thread only.
void sgemm(SgemmLibrary library, bool transA, bool transB, int64_t m, int64_t n,
           int64_t k, float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc);

/// The 2048^3-style peak of one library: the best GFLOP/s of `reps`
/// n x n x n products C = A B^T on `threads` threads (the library's own
/// threading), back to one thread after.
double measureLibraryPeak(SgemmLibrary library, int n, int threads, int reps);

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_SGEMM_H
