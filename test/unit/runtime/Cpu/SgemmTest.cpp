// The f32 GEMM libraries behind the CPU executor (runtime/Cpu/Sgemm.h):
// OpenBLAS, and oneDNN where it loads, every transpose, padded leading
// dimensions, alpha and beta, against the product in double; and the rule
// that picks one.
#include "runtime/Cpu/Sgemm.h"

#include "gtest/gtest.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <thread>
#include <vector>

using namespace llmc::cpu;

namespace {

/// C = alpha op(A) op(B) + beta C with A, B, C stored row-major with a
/// leading dimension past their columns (the padding is NaN: a library that
/// reads it makes the result NaN); every element within 1e-5 of sum |terms|.
void checkProduct(SgemmLibrary library, bool transA, bool transB, int64_t m,
                  int64_t n, int64_t k, float alpha, float beta) {
  SCOPED_TRACE(testing::Message()
               << sgemmLibraryName(library) << (transA ? " T" : " N")
               << (transB ? "T" : "N") << " m=" << m << " n=" << n << " k=" << k
               << " alpha=" << alpha << " beta=" << beta);
  std::mt19937 rng(uint32_t(m * 131 + n * 17 + k));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Stored shapes: A [m,k] or [k,m]; B [k,n] or [n,k].
  int64_t aRows = transA ? k : m, aCols = transA ? m : k;
  int64_t bRows = transB ? n : k, bCols = transB ? k : n;
  int64_t lda = aCols + 3, ldb = bCols + 5, ldc = n + 2;
  std::vector<float> a(aRows * lda, nan), b(bRows * ldb, nan), c(m * ldc, nan);
  for (int64_t r = 0; r < aRows; ++r)
    for (int64_t col = 0; col < aCols; ++col)
      a[r * lda + col] = normal(rng);
  for (int64_t r = 0; r < bRows; ++r)
    for (int64_t col = 0; col < bCols; ++col)
      b[r * ldb + col] = normal(rng);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = normal(rng);
  std::vector<float> c0 = c;
  auto opA = [&](int64_t i, int64_t p) {
    return double(transA ? a[p * lda + i] : a[i * lda + p]);
  };
  auto opB = [&](int64_t p, int64_t j) {
    return double(transB ? b[j * ldb + p] : b[p * ldb + j]);
  };
  sgemm(library, transA, transB, m, n, k, alpha, a.data(), lda, b.data(), ldb,
        beta, c.data(), ldc);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, scale = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += opA(i, p) * opB(p, j);
        scale += std::fabs(opA(i, p) * opB(p, j));
      }
      double expected = alpha * sum + (beta != 0 ? beta * c0[i * ldc + j] : 0);
      double tolerance = 1e-5 * (std::fabs(alpha) * scale +
                                 std::fabs(beta * c0[i * ldc + j])) +
                         1e-30;
      ASSERT_NEAR(c[i * ldc + j], expected, tolerance)
          << "at (" << i << ", " << j << ")";
    }
    // The padding of C is not written.
    for (int64_t j = n; j < ldc; ++j)
      ASSERT_TRUE(std::isnan(c[i * ldc + j]));
  }
}

std::vector<SgemmLibrary> librariesHere() {
  std::vector<SgemmLibrary> libraries = {SgemmLibrary::OpenBlas};
  llvm::Expected<const SgemmSetup &> setup = sgemmSetup();
  EXPECT_TRUE(bool(setup)) << llvm::toString(setup.takeError());
  if (setup && setup->oneDnnLoaded)
    libraries.push_back(SgemmLibrary::OneDnn);
  else if (setup)
    std::cout << "oneDNN not tested: " << setup->oneDnn << "\n";
  return libraries;
}

TEST(Sgemm, EveryLibraryAndTransposeMatchesDouble) {
  for (SgemmLibrary library : librariesHere())
    for (bool transA : {false, true})
      for (bool transB : {false, true}) {
        // A ragged product (no dimension a multiple of a vector or a
        // micro-tile), one with k = 1, and a larger one past the L1.
        checkProduct(library, transA, transB, 13, 37, 29, 1.0f, 0.0f);
        checkProduct(library, transA, transB, 7, 5, 1, 0.5f, 1.0f);
        checkProduct(library, transA, transB, 96, 130, 257, -2.0f, 0.25f);
      }
}

TEST(Sgemm, OneDnnRunsOnTheCallingThreadOnly) {
  // The executor's pool splits the work: a oneDNN call must not start a
  // team of its own. Two threads multiplying at once stay correct.
  for (SgemmLibrary library : librariesHere()) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([library] {
        checkProduct(library, false, true, 64, 200, 300, 1.0f, 0.0f);
      });
    for (std::thread &thread : threads)
      thread.join();
  }
}

TEST(Sgemm, OneDnnOnAvx512ElseOpenBlas) {
  EXPECT_EQ(defaultSgemmLibrary(/*oneDnnLoaded=*/true, /*avx512=*/true),
            SgemmLibrary::OneDnn);
  EXPECT_EQ(defaultSgemmLibrary(true, false), SgemmLibrary::OpenBlas);
  EXPECT_EQ(defaultSgemmLibrary(false, true), SgemmLibrary::OpenBlas);
  EXPECT_EQ(defaultSgemmLibrary(false, false), SgemmLibrary::OpenBlas);
  // This process has no LLMC_CPU_SGEMM (the lit config passes none): the
  // rule chose, and the line says which and how to ask for the other.
  llvm::Expected<const SgemmSetup &> setup = sgemmSetup();
  ASSERT_TRUE(bool(setup)) << llvm::toString(setup.takeError());
  EXPECT_FALSE(setup->fromEnvironment);
  EXPECT_EQ(setup->library,
            defaultSgemmLibrary(setup->oneDnnLoaded, setup->avx512));
  std::string line = describeSgemm(*setup);
  if (setup->library == SgemmLibrary::OneDnn) {
    EXPECT_EQ(line.rfind("oneDNN ", 0), 0u) << line;
    EXPECT_NE(line.find("(on AVX-512; LLMC_CPU_SGEMM=openblas for OpenBLAS)"),
              std::string::npos)
        << line;
  } else {
    EXPECT_EQ(line.rfind("OpenBLAS (", 0), 0u) << line;
  }
  SgemmSetup asked = *setup;
  asked.fromEnvironment = true;
  asked.library = SgemmLibrary::OneDnn;
  EXPECT_NE(describeSgemm(asked).find("(LLMC_CPU_SGEMM=onednn)"),
            std::string::npos);
  asked.library = SgemmLibrary::OpenBlas;
  EXPECT_EQ(describeSgemm(asked), "OpenBLAS (LLMC_CPU_SGEMM=openblas)");
}

} // namespace
