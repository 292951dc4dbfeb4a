// This machine's sgemm peak, measured.
#include "runtime/SgemmPeak.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

std::string llmc::runtime::describeBlas() {
  const char *coretype = std::getenv("OPENBLAS_CORETYPE");
  const char *l2 = std::getenv("OPENBLAS_L2_SIZE");
  return std::string(openblas_get_config()) + ", core " +
         openblas_get_corename() +
         " (OPENBLAS_CORETYPE=" + (coretype ? coretype : "unset") +
         ", OPENBLAS_L2_SIZE=" + (l2 ? l2 : "unset") + ")";
}

double llmc::runtime::measureSgemmPeak(int n, int threads, int reps) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f),
      c(size_t(n) * n);
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f,
                a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  openblas_set_num_threads(1);
  return 2.0 * n * n * n / best / 1e9;
}
