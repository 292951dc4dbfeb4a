// Attention's products on register tiles (TileGemm.h): AVX-512F 8 x 32 and
// AVX2+FMA 6 x 16 tiles of C, a scalar loop elsewhere.
//
// A tile keeps R rows x 2 vectors of C in R * 2 accumulators (16 zmm, or
// 12 ymm of AVX2's 16 registers); each k step loads B's row segment (two
// vectors, masked past column n: masked-out lanes are not read) and
// broadcasts one element of A per row, so a step is 2R FMAs for 2 loads and
// R broadcasts from L1. Tiles run row block by row block, each walking all
// of the columns: A's R rows (a query block's rows of Q, P or dS, at most
// a few KiB) stay in L1 while B streams from L2. One kernel per row count
// (1 to R) and A layout (rows contiguous, or columns: A^T read in place),
// picked from a table.

// GCC 12's AVX-512 intrinsics pass an undefined register to their masked
// builtins and warn about it when inlined into a target("avx512f")
// function (GCC bug 105593, fixed in GCC 13), as in VectorExp.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "runtime/Cpu/TileGemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

using namespace llmc::cpu;

namespace {

/// One tile: C[rows x cols] for up to the kernel's R rows and its vector
/// columns, A's element (r, p) at a[r * lda + p] (RowA) or a[p * lda + r].
using TileKernel = void (*)(int64_t k, const float *a, int64_t lda,
                            const float *b, int64_t ldb, float *c, int64_t ldc,
                            int64_t cols, float alpha, bool accumulate);

template <bool RowA>
inline float elementA(const float *a, int64_t lda, int64_t r, int64_t p) {
  return RowA ? a[r * lda + p] : a[p * lda + r];
}

#define LLMC_AVX512 __attribute__((target("avx512f")))
#define LLMC_AVX2 __attribute__((target("avx2,fma")))

/// The k loop of an AVX-512 tile: acc += A's R rows x B's 32 columns.
template <int R, bool RowA, bool Full>
LLMC_AVX512 inline __attribute__((always_inline)) void
loopAvx512(__m512 (&acc)[R][2], int64_t k, const float *a, int64_t lda,
           const float *b, int64_t ldb, __mmask16 m0, __mmask16 m1) {
  for (int64_t p = 0; p < k; ++p) {
    const float *row = b + p * ldb;
    __m512 b0 = Full ? _mm512_loadu_ps(row) : _mm512_maskz_loadu_ps(m0, row);
    __m512 b1 =
        Full ? _mm512_loadu_ps(row + 16) : _mm512_maskz_loadu_ps(m1, row + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 x = _mm512_set1_ps(elementA<RowA>(a, lda, r, p));
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
}

template <int R, bool RowA>
LLMC_AVX512 void tileAvx512(int64_t k, const float *a, int64_t lda,
                            const float *b, int64_t ldb, float *c, int64_t ldc,
                            int64_t cols, float alpha, bool accumulate) {
  __mmask16 m0 = cols >= 16 ? 0xffff : __mmask16((1u << cols) - 1);
  __mmask16 m1 = cols >= 32  ? 0xffff
                 : cols > 16 ? __mmask16((1u << (cols - 16)) - 1)
                             : 0;
  __m512 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  // Whole tiles load B unmasked: the masks would not stay in k registers
  // across the loop.
  if (cols == 32)
    loopAvx512<R, RowA, true>(acc, k, a, lda, b, ldb, m0, m1);
  else
    loopAvx512<R, RowA, false>(acc, k, a, lda, b, ldb, m0, m1);
  __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float *out = c + r * ldc;
    if (accumulate) {
      acc[r][0] =
          _mm512_fmadd_ps(scale, acc[r][0], _mm512_maskz_loadu_ps(m0, out));
      acc[r][1] = _mm512_fmadd_ps(scale, acc[r][1],
                                  _mm512_maskz_loadu_ps(m1, out + 16));
    } else {
      acc[r][0] = _mm512_mul_ps(scale, acc[r][0]);
      acc[r][1] = _mm512_mul_ps(scale, acc[r][1]);
    }
    _mm512_mask_storeu_ps(out, m0, acc[r][0]);
    _mm512_mask_storeu_ps(out + 16, m1, acc[r][1]);
  }
}

/// AVX2 lane masks for the first `count` of 8 lanes (any count).
LLMC_AVX2 inline __m256i firstLanes(int64_t count) {
  __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int32_t n = int32_t(std::clamp<int64_t>(count, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
}

/// The k loop of an AVX2 tile: acc += A's R rows x B's 16 columns.
template <int R, bool RowA, bool Full>
LLMC_AVX2 inline __attribute__((always_inline)) void
loopAvx2(__m256 (&acc)[R][2], int64_t k, const float *a, int64_t lda,
         const float *b, int64_t ldb, __m256i m0, __m256i m1) {
  for (int64_t p = 0; p < k; ++p) {
    const float *row = b + p * ldb;
    __m256 b0 = Full ? _mm256_loadu_ps(row) : _mm256_maskload_ps(row, m0);
    __m256 b1 =
        Full ? _mm256_loadu_ps(row + 8) : _mm256_maskload_ps(row + 8, m1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 x = _mm256_set1_ps(elementA<RowA>(a, lda, r, p));
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
}

template <int R, bool RowA>
LLMC_AVX2 void tileAvx2(int64_t k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int64_t cols,
                        float alpha, bool accumulate) {
  __m256i m0 = firstLanes(cols), m1 = firstLanes(cols - 8);
  __m256 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  if (cols == 16)
    loopAvx2<R, RowA, true>(acc, k, a, lda, b, ldb, m0, m1);
  else
    loopAvx2<R, RowA, false>(acc, k, a, lda, b, ldb, m0, m1);
  __m256 scale = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float *out = c + r * ldc;
    if (accumulate) {
      acc[r][0] =
          _mm256_fmadd_ps(scale, acc[r][0], _mm256_maskload_ps(out, m0));
      acc[r][1] =
          _mm256_fmadd_ps(scale, acc[r][1], _mm256_maskload_ps(out + 8, m1));
    } else {
      acc[r][0] = _mm256_mul_ps(scale, acc[r][0]);
      acc[r][1] = _mm256_mul_ps(scale, acc[r][1]);
    }
    _mm256_maskstore_ps(out, m0, acc[r][0]);
    _mm256_maskstore_ps(out + 8, m1, acc[r][1]);
  }
}

/// The tile shape of an ISA and its kernels, [A layout][rows - 1].
template <int Rows, int Cols> struct TileSet {
  static constexpr int64_t kRows = Rows, kCols = Cols;
  std::array<std::array<TileKernel, Rows>, 2> kernels;
};

template <template <int, bool> class Kernel, int Rows, size_t... I>
constexpr auto kernelTable(std::index_sequence<I...>) {
  return std::array<std::array<TileKernel, Rows>, 2>{
      {{Kernel<int(I) + 1, false>::run...},
       {Kernel<int(I) + 1, true>::run...}}};
}

template <int R, bool RowA> struct Avx512Kernel {
  static constexpr TileKernel run = tileAvx512<R, RowA>;
};
template <int R, bool RowA> struct Avx2Kernel {
  static constexpr TileKernel run = tileAvx2<R, RowA>;
};

constexpr TileSet<8, 32> kAvx512{
    kernelTable<Avx512Kernel, 8>(std::make_index_sequence<8>())};
constexpr TileSet<6, 16> kAvx2{
    kernelTable<Avx2Kernel, 6>(std::make_index_sequence<6>())};

template <class Set>
void runTiles(const Set &set, int64_t m, int64_t n, int64_t k, TileMatrix a,
              TilePanels b, float *c, int64_t ldc, float alpha,
              bool accumulate) {
  bool rowA = a.colStride == 1;
  int64_t lda = rowA ? a.rowStride : a.colStride;
  static_assert(kTilePanel % Set::kCols == 0, "a tile within one panel");
  for (int64_t i0 = 0; i0 < m; i0 += Set::kRows) {
    int64_t rows = std::min<int64_t>(Set::kRows, m - i0);
    TileKernel kernel = set.kernels[rowA][rows - 1];
    const float *aBlock = a.data + (rowA ? i0 * lda : i0);
    for (int64_t j0 = 0; j0 < n; j0 += Set::kCols)
      kernel(k, aBlock, lda,
             b.data + j0 / kTilePanel * b.panelStride + j0 % kTilePanel,
             b.rowStride, c + i0 * ldc + j0, ldc,
             std::min<int64_t>(Set::kCols, n - j0), alpha, accumulate);
  }
}

void runScalar(int64_t m, int64_t n, int64_t k, TileMatrix a, TilePanels b,
               float *c, int64_t ldc, float alpha, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float *column =
          b.data + j / kTilePanel * b.panelStride + j % kTilePanel;
      float sum = 0.0f;
      for (int64_t p = 0; p < k; ++p)
        sum +=
            a.data[i * a.rowStride + p * a.colStride] * column[p * b.rowStride];
      float &out = c[i * ldc + j];
      out = alpha * sum + (accumulate ? out : 0.0f);
    }
}

LLMC_AVX2 void transpose8x8(const float *in, int64_t ldIn, float *out,
                            int64_t ldOut) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_ps(in + i * ldIn);
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ldOut,
                     _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ldOut,
                     _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
  }
}

} // namespace

void llmc::cpu::tileGemm(CpuIsa isa, int64_t m, int64_t n, int64_t k,
                         TileMatrix a, TilePanels b, float *c, int64_t ldc,
                         float alpha, bool accumulate) {
  if (m <= 0 || n <= 0)
    return;
  switch (isa) {
  case CpuIsa::Avx512:
    return runTiles(kAvx512, m, n, k, a, b, c, ldc, alpha, accumulate);
  case CpuIsa::Avx2:
    return runTiles(kAvx2, m, n, k, a, b, c, ldc, alpha, accumulate);
  case CpuIsa::Scalar:
    return runScalar(m, n, k, a, b, c, ldc, alpha, accumulate);
  }
}

void llmc::cpu::packTilePanels(CpuIsa isa, TileMatrix b, int64_t k, int64_t n,
                               float *out) {
  int64_t panels = (n + kTilePanel - 1) / kTilePanel;
  for (int64_t q = 0; q < panels; ++q) {
    float *panel = out + q * k * kTilePanel;
    int64_t j0 = q * kTilePanel, width = std::min(kTilePanel, n - j0);
    const float *src = b.data + j0 * b.colStride;
    if (b.colStride == 1) { // B's rows: copy their segments
      for (int64_t p = 0; p < k; ++p) {
        std::copy_n(src + p * b.rowStride, width, panel + p * kTilePanel);
        std::fill(panel + p * kTilePanel + width, panel + (p + 1) * kTilePanel,
                  0.0f);
      }
      continue;
    }
    // B's columns are contiguous (B = X^T): transpose 8 x 8 blocks of X.
    int64_t p0 = 0;
    if (isa != CpuIsa::Scalar && width == kTilePanel)
      for (; p0 + 8 <= k; p0 += 8)
        for (int64_t j = 0; j < kTilePanel; j += 8)
          transpose8x8(src + j * b.colStride + p0, b.colStride,
                       panel + p0 * kTilePanel + j, kTilePanel);
    for (int64_t p = p0; p < k; ++p)
      for (int64_t j = 0; j < kTilePanel; ++j)
        panel[p * kTilePanel + j] =
            j < width ? src[j * b.colStride + p * b.rowStride] : 0.0f;
  }
}
