// The CPU executor's f32 GEMM: oneDNN on CPUs with AVX-512, OpenBLAS
// elsewhere, behind one call.
//
// oneDNN is loaded at run time (dlopen of libdnnl.so.3 or .so.2, its
// dnnl_sgemm, row-major), never linked: a binary runs the same without it.
// Each caller runs its product on its own thread (the executor's pool
// splits the work, as it does for OpenBLAS with openblas_set_num_threads(1)):
// oneDNN's OpenMP team is set to one thread on each calling thread.
//
// Which library: a rule on the CPU, not a timing taken at start-up, so a
// run's numbers do not depend on how busy the machine was (a resumed run
// multiplies with the library of the run it resumes). oneDNN where it loads
// and the CPU has AVX-512F: on an AVX-512 Zen 4 GPT-2's training GEMMs ran
// faster on it than on OpenBLAS in most sittings, and so did the whole
// step (bench-train --gemm-shapes, bench/README.md). By shape, x W^T (NT)
// was faster on oneDNN and the weight gradients dY^T X (TN) slower, but
// sending TN products to OpenBLAS did not make the step faster, so one
// library it is for the GEMM steps. (The executor's small products,
// attention's per head, run on OpenBLAS everywhere: its per-call cost is
// lower; runtime/Cpu/CpuExecutor.cpp.) OpenBLAS on AVX2 CPUs, where it was ahead
// of oneDNN (bench/sgemm-peers on a Zen 3), and wherever libdnnl is missing.
// LLMC_CPU_SGEMM=openblas|onednn overrides the rule. A thread inside
// dnnl_sgemm must not take an asynchronous signal (runtime/Cpu/SignalMask.h:
// the heap corruption that once kept oneDNN an opt-in).
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
  bool fromEnvironment = false; // LLMC_CPU_SGEMM chose it, not the rule
  bool oneDnnLoaded = false;
  bool avx512 = false; // the CPU has AVX-512F
  std::string oneDnn;  // "oneDNN 2.6.3 (libdnnl.so.2, OpenMP)", or why not
};

/// The rule when LLMC_CPU_SGEMM does not choose: oneDNN where it loaded
/// and the CPU has AVX-512F, else OpenBLAS.
SgemmLibrary defaultSgemmLibrary(bool oneDnnLoaded, bool avx512);

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

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_SGEMM_H
