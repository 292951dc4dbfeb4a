// Vectorized exp for the attention softmax (VectorExp.h).
#include "runtime/Cpu/VectorExp.h"

// GCC 12's AVX-512 intrinsics pass an undefined register to their masked
// builtins and warn about it when inlined into a target("avx512f")
// function (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

using namespace llmc;

namespace {

// exp(x) = 2^k e^r, k = round(x log2 e), r = x - k ln 2 with ln 2 split in
// two (0.693359375 has 9 significant bits, so k * it is exact) and e^r by
// its Taylor polynomial of degree 7 on |r| <= ln 2 / 2 (truncation under
// 6e-9 relative). Inputs are clamped to [kLow, kHigh] so that 2^k is a
// normal float; below kLow the result is 0. NaN stays NaN.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kLow = -87.3365447505531f; // about ln FLT_MIN
constexpr float kHigh = 88.3762626647949f; // k stays <= 127
constexpr float kC[8] = {1.0f,      1.0f,       1.0f / 2,   1.0f / 6,
                         1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};

float expScalar(float x) {
  if (std::isnan(x))
    return x;
  if (x < kLow)
    return 0.0f;
  float xc = x > kHigh ? kHigh : x;
  float k = std::nearbyint(xc * kLog2e); // ties to even (default mode)
  float r = std::fma(k, -kLn2Hi, xc);
  r = std::fma(k, -kLn2Lo, r);
  float p = kC[7];
  for (int i = 6; i >= 0; --i)
    p = std::fma(p, r, kC[i]);
  int32_t bits = (int32_t(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#if defined(__x86_64__)
#define LLMC_AVX512 __attribute__((target("avx512f")))
#define LLMC_AVX2 __attribute__((target("avx2,fma")))

LLMC_AVX512 __m512 max512(__m512 x, __m512 y) { return _mm512_max_ps(x, y); }
LLMC_AVX512 __m512 swapHalves(__m512 v) {
  return _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2));
}
LLMC_AVX512 __m512 swapQuarters(__m512 v) {
  return _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1));
}

LLMC_AVX512 __m512 exp512(__m512 x) {
  // max(low, x) and min(high, .) return x when it is NaN (the second
  // operand), so NaN reaches the polynomial and stays NaN.
  __m512 xc =
      _mm512_min_ps(_mm512_set1_ps(kHigh), max512(_mm512_set1_ps(kLow), x));
  __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-kLn2Hi), xc);
  r = _mm512_fmadd_ps(k, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kC[7]);
  for (int i = 6; i >= 0; --i)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC[i]));
  __m512i bits = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(e, below, _mm512_setzero_ps());
}

// Horizontal sum and max of 16 lanes (GCC 12's _mm512_reduce_* warn of
// uninitialized registers in their own headers).
LLMC_AVX512 __m128 lowQuarterSum(__m512 v) {
  v = _mm512_add_ps(v, swapHalves(v));
  v = _mm512_add_ps(v, swapQuarters(v));
  return _mm512_castps512_ps128(v);
}

LLMC_AVX512 __m128 lowQuarterMax(__m512 v) {
  v = max512(v, swapHalves(v));
  v = max512(v, swapQuarters(v));
  return _mm512_castps512_ps128(v);
}

LLMC_AVX512 float hsum512(__m512 v) {
  __m128 s = lowQuarterSum(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

LLMC_AVX512 float hmax512(__m512 v) {
  __m128 m = lowQuarterMax(v);
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

LLMC_AVX512 float expShiftSum512(float *row, int64_t n, float shift) {
  __m512 s = _mm512_set1_ps(shift), sum = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(row + i), s));
    _mm512_storeu_ps(row + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (i < n) {
    __mmask16 tail = __mmask16((1u << (n - i)) - 1);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + i), s));
    _mm512_mask_storeu_ps(row + i, tail, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
  }
  return hsum512(sum);
}

LLMC_AVX512 float rowMax512(const float *row, int64_t n) {
  __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    best = max512(_mm512_loadu_ps(row + i), best);
  if (i < n) {
    __mmask16 tail = __mmask16((1u << (n - i)) - 1);
    best = _mm512_mask_max_ps(best, tail, _mm512_maskz_loadu_ps(tail, row + i),
                              best);
  }
  return hmax512(best);
}

LLMC_AVX2 __m256 exp256(__m256 x) {
  __m256 xc = _mm256_min_ps(_mm256_set1_ps(kHigh),
                            _mm256_max_ps(_mm256_set1_ps(kLow), x));
  __m256 k = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-kLn2Hi), xc);
  r = _mm256_fmadd_ps(k, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kC[7]);
  for (int i = 6; i >= 0; --i)
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC[i]));
  __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  __m256 below = _mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_LT_OQ);
  return _mm256_andnot_ps(below, e);
}

LLMC_AVX2 float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

LLMC_AVX2 float expShiftSum256(float *row, int64_t n, float shift) {
  __m256 s = _mm256_set1_ps(shift), sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(row + i), s));
    _mm256_storeu_ps(row + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = hsum256(sum);
  for (; i < n; ++i) {
    row[i] = expScalar(row[i] - shift);
    total += row[i];
  }
  return total;
}

LLMC_AVX2 float rowMax256(const float *row, int64_t n) {
  __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    best = _mm256_max_ps(_mm256_loadu_ps(row + i), best);
  __m128 m =
      _mm_max_ps(_mm256_castps256_ps128(best), _mm256_extractf128_ps(best, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  float result = _mm_cvtss_f32(m);
  for (; i < n; ++i)
    result = std::max(result, row[i]);
  return result;
}
#endif

float expShiftSumScalar(float *row, int64_t n, float shift) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    row[i] = expScalar(row[i] - shift);
    sum += row[i];
  }
  return sum;
}

float rowMaxScalar(const float *row, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i)
    best = std::max(best, row[i]);
  return best;
}

} // namespace

float cpu::expShiftSumOn(CpuIsa path, float *row, int64_t n, float shift) {
  switch (path) {
#if defined(__x86_64__)
  case CpuIsa::Avx512:
    return expShiftSum512(row, n, shift);
  case CpuIsa::Avx2:
    return expShiftSum256(row, n, shift);
#endif
  default:
    return expShiftSumScalar(row, n, shift);
  }
}

float cpu::rowMaxOn(CpuIsa path, const float *row, int64_t n) {
  switch (path) {
#if defined(__x86_64__)
  case CpuIsa::Avx512:
    return rowMax512(row, n);
  case CpuIsa::Avx2:
    return rowMax256(row, n);
#endif
  default:
    return rowMaxScalar(row, n);
  }
}

float cpu::expShiftSum(float *row, int64_t n, float shift) {
  return expShiftSumOn(bestCpuIsa(), row, n, shift);
}

float cpu::rowMax(const float *row, int64_t n) {
  return rowMaxOn(bestCpuIsa(), row, n);
}

const char *cpu::vectorExpPath() { return cpuIsaName(bestCpuIsa()); }
