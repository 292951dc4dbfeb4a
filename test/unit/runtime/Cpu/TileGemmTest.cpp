// Attention's register-tile products (runtime/Cpu/TileGemm.h) on every ISA
// this CPU runs, A by rows and by columns, B in place and packed, against
// the product in double.
#include "runtime/Cpu/TileGemm.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace llmc::cpu;

namespace {

/// C = alpha A B (+ C0) for A [m x k] stored by rows (rowA) or as A^T [k x
/// m], B [k x n] row-major (read in place, or packed first: packB), every
/// matrix with a row stride past its valid elements, which hold NaN (in C
/// a sentinel that must survive). |c - ref| <= 1e-5 * (|alpha| sum |a b| +
/// |c0|).
void checkProduct(CpuIsa isa, bool rowA, bool packB, int64_t m, int64_t n,
                  int64_t k, float alpha, bool accumulate, uint32_t seed) {
  SCOPED_TRACE(testing::Message()
               << cpuIsaName(isa) << (rowA ? " A rows" : " A^T")
               << (packB ? " B packed" : " B in place") << " m=" << m
               << " n=" << n << " k=" << k << " alpha=" << alpha
               << (accumulate ? " accumulate" : ""));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float sentinel = 12345.0f;
  int64_t aRows = rowA ? m : k, aCols = rowA ? k : m;
  int64_t lda = aCols + 3, ldb = n + 5, ldc = n + 7;
  std::vector<float> a(size_t(aRows * lda), nan), b(size_t(k * ldb), nan);
  std::vector<float> c(size_t(m * ldc), sentinel);
  for (int64_t r = 0; r < aRows; ++r)
    for (int64_t col = 0; col < aCols; ++col)
      a[r * lda + col] = normal(rng);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j)
      b[p * ldb + j] = normal(rng);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = accumulate ? normal(rng) : nan;
  std::vector<float> c0 = c;
  auto aAt = [&](int64_t i, int64_t p) {
    return rowA ? a[i * lda + p] : a[p * lda + i];
  };
  std::vector<float> packed(size_t(tilePanelFloats(k, n)), nan);
  packTilePanels(isa, {b.data(), ldb, 1}, k, n, packed.data());
  TilePanels panels = packB ? packedTilePanels(packed.data(), k)
                            : TilePanels{b.data(), ldb, kTilePanel};
  TileMatrix view =
      rowA ? TileMatrix{a.data(), lda, 1} : TileMatrix{a.data(), 1, lda};
  tileGemm(isa, m, n, k, view, panels, c.data(), ldc, alpha, accumulate);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += double(aAt(i, p)) * b[p * ldb + j];
        magnitude += std::fabs(double(aAt(i, p)) * b[p * ldb + j]);
      }
      double old = accumulate ? c0[i * ldc + j] : 0.0;
      double ref = alpha * sum + old;
      double bound =
          1e-5 * (std::fabs(alpha) * magnitude + std::fabs(old)) + 1e-30;
      ASSERT_NEAR(c[i * ldc + j], ref, bound)
          << "at (" << i << ", " << j << ")";
    }
    for (int64_t j = n; j < ldc; ++j)
      ASSERT_EQ(c[i * ldc + j], sentinel) << "wrote past column n, row " << i;
  }
}

TEST(TileGemm, MatchesDoubleOnEveryIsaAndShape) {
  // Rows around both tiles' heights (6, 8), columns around their widths
  // (16, 32) and past several panels, k from 0 up.
  uint32_t seed = 1;
  for (CpuIsa isa : cpuIsasThisCpuRuns())
    for (bool rowA : {true, false})
      for (bool packB : {false, true})
        for (int64_t m : {1, 5, 6, 7, 8, 9, 13, 64})
          for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 64, 100})
            for (int64_t k : {0, 1, 3, 64})
              checkProduct(isa, rowA, packB, m, n, k, 0.125f, (m + n) % 2 == 0,
                           seed++);
}

TEST(TileGemm, AttentionShapes) {
  for (CpuIsa isa : cpuIsasThisCpuRuns()) {
    checkProduct(isa, true, true, 64, 256, 64, 0.125f, false, 7); // Q K^T
    checkProduct(isa, true, true, 64, 64, 256, 1.0f, false, 8);   // P V
    checkProduct(isa, false, false, 256, 64, 64, 1.0f, true, 9);  // P^T dO
    checkProduct(isa, false, true, 200, 48, 37, -0.5f, true, 10); // odd
  }
}

TEST(TileGemm, PacksRowsAndColumnsIntoPanels) {
  // B [k x n] given by rows (a row-major matrix) and by columns (X^T of a
  // row-major X [n x k], as K^T is packed from K): panels of kTilePanel
  // columns, zero past n.
  for (CpuIsa isa : cpuIsasThisCpuRuns())
    for (bool byColumns : {false, true})
      for (int64_t k : {1, 7, 8, 9, 64, 67})
        for (int64_t n : {1, 8, 13, 32, 33, 64, 70}) {
          SCOPED_TRACE(testing::Message()
                       << cpuIsaName(isa) << (byColumns ? " X^T" : " B")
                       << " k=" << k << " n=" << n);
          int64_t rows = byColumns ? n : k, cols = byColumns ? k : n;
          int64_t ld = cols + 2;
          std::vector<float> x(size_t(rows * ld));
          for (size_t e = 0; e < x.size(); ++e)
            x[e] = float(e);
          TileMatrix b = byColumns ? TileMatrix{x.data(), 1, ld}
                                   : TileMatrix{x.data(), ld, 1};
          std::vector<float> out(size_t(tilePanelFloats(k, n)), -1.0f);
          packTilePanels(isa, b, k, n, out.data());
          for (int64_t p = 0; p < k; ++p)
            for (int64_t j = 0;
                 j < (n + kTilePanel - 1) / kTilePanel * kTilePanel; ++j) {
              float want = j >= n
                               ? 0.0f
                               : x[size_t(byColumns ? j * ld + p : p * ld + j)];
              ASSERT_EQ(out[j / kTilePanel * k * kTilePanel + p * kTilePanel +
                            j % kTilePanel],
                        want)
                  << "element (" << p << ", " << j << ")";
            }
        }
}

} // namespace
