// The CPU executor's f32 GEMM: OpenBLAS, or oneDNN when asked for, behind
// one call.
//
// oneDNN is loaded at run time (dlopen of libdnnl.so.3 or .so.2, its
// dnnl_sgemm, row-major), never linked: a binary runs the same without it.
// Each caller runs its product on its own thread (the executor's pool
// splits the work, as it does for OpenBLAS with openblas_set_num_threads(1)):
// oneDNN's OpenMP team is set to one thread on each calling thread.
//
// Which library: OpenBLAS unless LLMC_CPU_SGEMM=onednn asks for oneDNN.
// oneDNN ran GPT-2's products 5-14% faster on an AVX-512 Zen 4
// (bench-train --gemm-shapes) and behind OpenBLAS by 3% on an AVX2 Zen 3,
// but with it as the default two of four full test runs ended in a heap
// corruption that glibc detected inside dnnl_sgemm's free (both in
// run-stop.test's SIGTERM run; not reproduced in 60 runs alone, cause not
// found), so it stays an opt-in until that is understood. The choice is
// the environment's, never a timing taken at start-up: a run's numbers do
// not depend on how busy the machine was (a resumed run multiplies with
// the library of the run it resumes).
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
/// process.
struct SgemmSetup {
  SgemmLibrary library = SgemmLibrary::OpenBlas; // every f32 GEMM's
  bool oneDnnLoaded = false;
  std::string oneDnn; // "oneDNN 2.6.3 (libdnnl.so.2, OpenMP)", or why not
};

/// The process's setup; an error names LLMC_CPU_SGEMM when its value is not
/// openblas or onednn, or when it asks for oneDNN and none loads.
llvm::Expected<const SgemmSetup &> sgemmSetup();

/// One line for logs and benchmarks: which library runs the f32 GEMMs.
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
