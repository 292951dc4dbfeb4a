// Products of few rows of f32 x with weights read in place: f32, bf16 or
// f16 weights; scalar, AVX2+FMA(+F16C) and AVX-512F.
//
// W [n, k] (wNK): one dot product per (row of x, column), NC columns at a
// time sharing the x loads and up to 4 rows sharing the W loads: rows * NC
// vector accumulators, reduced across lanes once at the end; k's tail past
// the last full chunk in scalar. More rows run as a second group over the
// same columns, whose weights are then in L1. A chunk of 2L weights is
// widened as two vectors. bf16: one load widened in lanes (even elements:
// shift left 16; odd: mask the high half), so x's rows are first copied
// deinterleaved per chunk (m * k floats, once per call): no cross-lane
// zero-extension, which ran far below a core's read bandwidth. f16: two
// vcvtph2ps of L consecutive weights; f32: two loads (x copied as it is).
// W [k, n]: L lanes of columns (two vectors at a time), each k step
// broadcasts x[i, p] and FMAs the widened W row segment; columns past the
// last full vector in scalar. Either way every W element is read once per
// call.

// GCC 12's AVX-512 intrinsics pass an undefined register to their masked
// builtins and warn about it when inlined into a target("avx512f")
// function (GCC bug 105593, fixed in GCC 13), as in VectorExp.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "runtime/Cpu/FewRowGemm.h"
#include "runtime/Weights/Weights.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

using namespace llmc::cpu;
using llmc::kir::DType;

namespace {

inline float widenBf16(uint16_t bits) {
  uint32_t x = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// How a weight of type T is stored: f32, or 16 bits.
template <DType T>
using Elem = std::conditional_t<T == DType::F32, float, uint16_t>;

/// One weight as f32.
template <DType T> inline float widen(Elem<T> value) {
  if constexpr (T == DType::F32)
    return value;
  else if constexpr (T == DType::F16)
    return llmc::runtime::halfToFloat(value);
  else
    return widenBf16(value);
}

struct Args {
  const float *x;
  int64_t m, ldx;
  const void *w; // Elem<T> of the type the drivers are instantiated for
  int64_t ldw, k;
  float *c;
  int64_t ldc;
  bool accumulate;
};

template <DType T> inline const Elem<T> *weights(const Args &a) {
  return static_cast<const Elem<T> *>(a.w);
}

inline void put(const Args &a, int64_t i, int64_t j, float value) {
  float &out = a.c[i * a.ldc + j];
  out = a.accumulate ? out + value : value;
}

template <DType T> struct Scalar {
  static constexpr int L = 1;
  static constexpr bool kEvenOdd = false; // one lane: nothing to reorder
  using V = float;
  using E = Elem<T>;
  static V zero() { return 0.0f; }
  static V loadX(const float *p) { return *p; }
  static V loadW(const E *p) { return widen<T>(*p); }
  static void loadW2(const E *p, V &first, V &second) {
    first = widen<T>(p[0]);
    second = widen<T>(p[1]);
  }
  static V broadcast(float v) { return v; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static float sum(V v) { return v; }
  static void store(float *p, V v) { *p = v; }
};

#define LLMC_AVX2 __attribute__((target("avx2,fma,f16c")))
template <DType T> struct Avx2 {
  static constexpr int L = 8;
  /// bf16: loadW2 gives the even- and odd-indexed weights of a chunk, so
  /// x is deinterleaved to match; f16 and f32: the first and second L.
  static constexpr bool kEvenOdd = T == DType::BF16;
  using V = __m256;
  using E = Elem<T>;
  LLMC_AVX2 static V zero() { return _mm256_setzero_ps(); }
  LLMC_AVX2 static V loadX(const float *p) { return _mm256_loadu_ps(p); }
  LLMC_AVX2 static V loadW(const E *p) {
    if constexpr (T == DType::F32) {
      return _mm256_loadu_ps(p);
    } else {
      __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
      if constexpr (T == DType::F16)
        return _mm256_cvtph_ps(bits);
      else
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
    }
  }
  /// 2L weights: bf16 the even-indexed ones (a lane's low half, shifted
  /// up) and the odd (its high half, masked), no cross-lane widening; f16
  /// and f32 the first L and the next L.
  LLMC_AVX2 static void loadW2(const E *p, V &first, V &second) {
    if constexpr (T == DType::BF16) {
      __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
      first = _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
      second = _mm256_castsi256_ps(
          _mm256_and_si256(bits, _mm256_set1_epi32(int(0xffff0000u))));
    } else {
      first = loadW(p);
      second = loadW(p + L);
    }
  }
  LLMC_AVX2 static V broadcast(float v) { return _mm256_set1_ps(v); }
  LLMC_AVX2 static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  LLMC_AVX2 static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
                          _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  LLMC_AVX2 static void store(float *p, V v) { _mm256_storeu_ps(p, v); }
};

#define LLMC_AVX512 __attribute__((target("avx512f")))
template <DType T> struct Avx512 {
  static constexpr int L = 16;
  static constexpr bool kEvenOdd = T == DType::BF16;
  using V = __m512;
  using E = Elem<T>;
  LLMC_AVX512 static V zero() { return _mm512_setzero_ps(); }
  LLMC_AVX512 static V loadX(const float *p) { return _mm512_loadu_ps(p); }
  LLMC_AVX512 static V loadW(const E *p) {
    if constexpr (T == DType::F32) {
      return _mm512_loadu_ps(p);
    } else {
      __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
      if constexpr (T == DType::F16)
        return _mm512_cvtph_ps(bits);
      else
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
  }
  LLMC_AVX512 static void loadW2(const E *p, V &first, V &second) {
    if constexpr (T == DType::BF16) {
      __m512i bits = _mm512_loadu_si512(p);
      first = _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
      second = _mm512_castsi512_ps(
          _mm512_and_si512(bits, _mm512_set1_epi32(int(0xffff0000u))));
    } else {
      first = loadW(p);
      second = loadW(p + L);
    }
  }
  LLMC_AVX512 static V broadcast(float v) { return _mm512_set1_ps(v); }
  LLMC_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  LLMC_AVX512 static float sum(V v) { return _mm512_reduce_add_ps(v); }
  LLMC_AVX512 static void store(float *p, V v) { _mm512_storeu_ps(p, v); }
};

// The target attribute of each ISA's drivers (templates instantiate with
// the attribute of the function they are declared with).
#define LLMC_FEW_ROW_DRIVERS(ISA, TARGET)                                      \
  /* xd: x's rows per chunk of 2L in the order loadW2 widens W's (bf16: */  \
  /* L even elements, then L odd), `full` of them a row.                */  \
  template <DType T, int MR, int NC>                                              \
  TARGET static void dotBlock##ISA(const Args &a, const float *xd,             \
                                   int64_t full, int64_t j, int r0) {          \
    using I = ISA<T>;                                                          \
    typename I::V acc[MR][NC];                                                 \
    for (int i = 0; i < MR; ++i)                                               \
      for (int c = 0; c < NC; ++c)                                             \
        acc[i][c] = I::zero();                                                 \
    for (int64_t p = 0; p < full; p += 2 * I::L) {                             \
      typename I::V even[NC], odd[NC];                                         \
      for (int c = 0; c < NC; ++c)                                             \
        I::loadW2(weights<T>(a) + (j + c) * a.ldw + p, even[c], odd[c]);                 \
      for (int i = 0; i < MR; ++i) {                                           \
        typename I::V xe = I::loadX(xd + (r0 + i) * full + p);                 \
        typename I::V xo = I::loadX(xd + (r0 + i) * full + p + I::L);          \
        for (int c = 0; c < NC; ++c)                                           \
          acc[i][c] = I::fma(xo, odd[c], I::fma(xe, even[c], acc[i][c]));      \
      }                                                                        \
    }                                                                          \
    for (int i = 0; i < MR; ++i)                                               \
      for (int c = 0; c < NC; ++c) {                                           \
        float tail = 0.0f;                                                     \
        for (int64_t p = full; p < a.k; ++p)                                   \
          tail += a.x[(r0 + i) * a.ldx + p] *                                  \
                  widen<T>(weights<T>(a)[(j + c) * a.ldw + p]);                        \
        put(a, r0 + i, j + c, I::sum(acc[i][c]) + tail);                       \
      }                                                                        \
  }                                                                            \
  template <DType T, int MR>                                                      \
  TARGET static void dotRows##ISA(const Args &a, int64_t n0, int64_t n1) {     \
    using I = ISA<T>;                                                          \
    int64_t full = a.k / (2 * I::L) * (2 * I::L);                              \
    thread_local std::vector<float> xd;                                        \
    xd.resize(size_t(MR * full));                                              \
    for (int i = 0; i < MR; ++i)                                               \
      for (int64_t p = 0; p < full; p += 2 * I::L)                             \
        for (int l = 0; l < I::L; ++l) {                                       \
          int64_t first = I::kEvenOdd ? p + 2 * l : p + l;                     \
          int64_t second = I::kEvenOdd ? p + 2 * l + 1 : p + I::L + l;         \
          xd[i * full + p + l] = a.x[i * a.ldx + first];                       \
          xd[i * full + p + I::L + l] = a.x[i * a.ldx + second];               \
        }                                                                      \
    /* Rows in groups of at most 4 (two groups over the same W columns, */ \
    /* still in L1 for the second), 4 columns a block (8 at one row):   */ \
    /* MR * NC accumulators that fit the registers: each x load serves  */ \
    /* NC columns, where 1-column blocks would reload x for every one.  */ \
    constexpr int G1 = MR <= 4 ? MR : 4, G2 = MR - G1;                         \
    constexpr int NC = MR == 1 ? 8 : 4;                                        \
    int64_t j = n0;                                                            \
    for (; j + NC <= n1; j += NC) {                                            \
      dotBlock##ISA<T, G1, NC>(a, xd.data(), full, j, 0);                    \
      if constexpr (G2 > 0)                                                    \
        dotBlock##ISA<T, G2, NC>(a, xd.data(), full, j, G1);                 \
    }                                                                          \
    for (; j < n1; ++j) {                                                      \
      dotBlock##ISA<T, G1, 1>(a, xd.data(), full, j, 0);                     \
      if constexpr (G2 > 0)                                                    \
        dotBlock##ISA<T, G2, 1>(a, xd.data(), full, j, G1);                  \
    }                                                                          \
  }                                                                            \
  template <DType T, int MR>                                                      \
  TARGET static void axpyRows##ISA(const Args &a, int64_t n0, int64_t n1) {    \
    using I = ISA<T>;                                                          \
    constexpr int NV = MR <= 4 ? 2 : 1;                                        \
    int64_t j = n0;                                                            \
    for (; j + NV * I::L <= n1; j += NV * I::L) {                              \
      typename I::V acc[MR][NV];                                               \
      for (int i = 0; i < MR; ++i)                                             \
        for (int v = 0; v < NV; ++v)                                           \
          acc[i][v] = I::zero();                                               \
      for (int64_t p = 0; p < a.k; ++p) {                                      \
        typename I::V w[NV];                                                   \
        for (int v = 0; v < NV; ++v)                                           \
          w[v] = I::loadW(weights<T>(a) + p * a.ldw + j + v * I::L);                     \
        for (int i = 0; i < MR; ++i) {                                         \
          typename I::V x = I::broadcast(a.x[i * a.ldx + p]);                  \
          for (int v = 0; v < NV; ++v)                                         \
            acc[i][v] = I::fma(x, w[v], acc[i][v]);                            \
        }                                                                      \
      }                                                                        \
      for (int i = 0; i < MR; ++i)                                             \
        for (int v = 0; v < NV; ++v) {                                         \
          float lanes[I::L];                                                   \
          I::store(lanes, acc[i][v]);                                          \
          for (int l = 0; l < I::L; ++l)                                       \
            put(a, i, j + v * I::L + l, lanes[l]);                             \
        }                                                                      \
    }                                                                          \
    for (; j < n1; ++j)                                                        \
      for (int i = 0; i < MR; ++i) {                                           \
        float s = 0.0f;                                                        \
        for (int64_t p = 0; p < a.k; ++p)                                      \
          s += a.x[i * a.ldx + p] * widen<T>(weights<T>(a)[p * a.ldw + j]);            \
        put(a, i, j, s);                                                       \
      }                                                                        \
  }                                                                            \
  template <DType T>                                                          \
  TARGET static void run##ISA(const Args &a, bool wNK, int64_t n0,             \
                              int64_t n1) {                                    \
    switch (a.m) {                                                             \
    case 1: return wNK ? dotRows##ISA<T, 1>(a, n0, n1) : axpyRows##ISA<T, 1>(a, n0, n1); \
    case 2: return wNK ? dotRows##ISA<T, 2>(a, n0, n1) : axpyRows##ISA<T, 2>(a, n0, n1); \
    case 3: return wNK ? dotRows##ISA<T, 3>(a, n0, n1) : axpyRows##ISA<T, 3>(a, n0, n1); \
    case 4: return wNK ? dotRows##ISA<T, 4>(a, n0, n1) : axpyRows##ISA<T, 4>(a, n0, n1); \
    case 5: return wNK ? dotRows##ISA<T, 5>(a, n0, n1) : axpyRows##ISA<T, 5>(a, n0, n1); \
    case 6: return wNK ? dotRows##ISA<T, 6>(a, n0, n1) : axpyRows##ISA<T, 6>(a, n0, n1); \
    case 7: return wNK ? dotRows##ISA<T, 7>(a, n0, n1) : axpyRows##ISA<T, 7>(a, n0, n1); \
    default: return wNK ? dotRows##ISA<T, 8>(a, n0, n1) : axpyRows##ISA<T, 8>(a, n0, n1); \
    }                                                                          \
  }

LLMC_FEW_ROW_DRIVERS(Scalar, )
LLMC_FEW_ROW_DRIVERS(Avx2, LLMC_AVX2)
LLMC_FEW_ROW_DRIVERS(Avx512, LLMC_AVX512)

template <DType T>
void runOn(CpuIsa isa, const Args &a, bool wNK, int64_t n0, int64_t n1) {
  switch (isa) {
  case CpuIsa::Scalar:
    return runScalar<T>(a, wNK, n0, n1);
  case CpuIsa::Avx2:
    return runAvx2<T>(a, wNK, n0, n1);
  case CpuIsa::Avx512:
    return runAvx512<T>(a, wNK, n0, n1);
  }
}

} // namespace

void llmc::cpu::fewRowGemm(CpuIsa isa, kir::DType type, const float *x,
                           int64_t m, int64_t ldx, const void *w, int64_t ldw,
                           bool wNK, int64_t k, float *c, int64_t ldc,
                           int64_t n0, int64_t n1, bool accumulate) {
  if (type == DType::F16 && isa == CpuIsa::Avx2 && !cpuHasF16c())
    isa = CpuIsa::Scalar;
  for (int64_t i0 = 0; i0 < m; i0 += kFewRowGemmMaxRows) {
    Args a{x + i0 * ldx, std::min(m - i0, kFewRowGemmMaxRows), ldx, w,
           ldw, k, c + i0 * ldc, ldc, accumulate};
    switch (type) {
    case DType::F32:
      runOn<DType::F32>(isa, a, wNK, n0, n1);
      break;
    case DType::F16:
      runOn<DType::F16>(isa, a, wNK, n0, n1);
      break;
    default:
      runOn<DType::BF16>(isa, a, wNK, n0, n1);
      break;
    }
  }
}
