// f32 <-> f16/bf16 bulk conversions: AVX2, AVX-512, F16C and AVX-512 BF16
// where the CPU has them (checked once, at run time), else portable loops.
#include "runtime/Cpu/LowPrecision.h"
#include "runtime/Weights/Weights.h"

#include <cstring>

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics pass an undefined register to their masked
// builtins and warn about it when inlined into a target("avx512f")
// function (GCC bug 105593, fixed in GCC 13), as in VectorExp.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

using namespace llmc;
using namespace llmc::cpu;

namespace {

/// runtime::floatToBFloat16 without branches, so the loop vectorizes:
/// adding 0x7fff plus the kept lowest bit rounds to nearest even (a carry
/// into the exponent reaches infinity where it should); a NaN is quieted.
inline uint16_t toBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return uint16_t(nan ? (bits >> 16) | 0x40u : rounded);
}

inline float fromBFloat16(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

void widenBFloat16(const uint16_t *src, int64_t count, float *dst) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = fromBFloat16(src[i]);
}

void narrowBFloat16Portable(const float *src, int64_t count, uint16_t *dst) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = toBFloat16(src[i]);
}

void widenHalfPortable(const uint16_t *src, int64_t count, float *dst) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = runtime::halfToFloat(src[i]);
}

void narrowHalfPortable(const float *src, int64_t count, uint16_t *dst) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = runtime::floatToHalf(src[i]);
}

#if defined(__x86_64__)

// VCVTPH2PS is exact. VCVTPS2PH with an explicit rounding mode (not
// MXCSR's) rounds to nearest even; a NaN keeps its sign and top payload
// bits and is quieted, as runtime::floatToHalf does.
__attribute__((target("avx,f16c"))) void
widenHalfF16c(const uint16_t *src, int64_t count, float *dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(
                         reinterpret_cast<const __m128i *>(src + i))));
  widenHalfPortable(src + i, count - i, dst + i);
}

__attribute__((target("avx,f16c"))) void
narrowHalfF16c(const float *src, int64_t count, uint16_t *dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                     _MM_FROUND_TO_NEAREST_INT |
                                         _MM_FROUND_NO_EXC));
  narrowHalfPortable(src + i, count - i, dst + i);
}

// bf16 -> f32 is the 16 bits moved up: zero-extended and shifted.
__attribute__((target("avx2"))) void
widenBFloat16Avx2(const uint16_t *src, int64_t count, float *dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256i wide = _mm256_cvtepu16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i),
                        _mm256_slli_epi32(wide, 16));
  }
  widenBFloat16(src + i, count - i, dst + i);
}

__attribute__((target("avx512f,avx2"))) void
widenBFloat16Avx512(const uint16_t *src, int64_t count, float *dst) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512i wide = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(wide, 16));
  }
  widenBFloat16Avx2(src + i, count - i, dst + i);
}

// VCVTPH2PS on 16 lanes (AVX-512F), exact like the 8-lane F16C form.
__attribute__((target("avx512f,avx,f16c"))) void
widenHalfAvx512(const uint16_t *src, int64_t count, float *dst) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(dst + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(
                         reinterpret_cast<const __m256i *>(src + i))));
  widenHalfF16c(src + i, count - i, dst + i);
}

// VCVTNEPS2BF16 rounds to nearest even and quiets NaNs like toBFloat16,
// but reads subnormal f32 inputs as zero (bf16 has those subnormals): a
// vector holding one is redone by the portable loop.
__attribute__((target("avx512f,avx512bf16,avx512vl"))) void
narrowBFloat16Avx512(const float *src, int64_t count, uint16_t *dst) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512i mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 values = _mm512_loadu_ps(src + i);
    __m512i bits = _mm512_castps_si512(values);
    __mmask16 subnormal = _mm512_testn_epi32_mask(bits, exponent) &
                          _mm512_test_epi32_mask(bits, mantissa);
    if (subnormal) {
      narrowBFloat16Portable(src + i, 16, dst + i);
      continue;
    }
    __m256bh narrow = _mm512_cvtneps_pbh(values);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i),
                        (__m256i)narrow);
  }
  narrowBFloat16Portable(src + i, count - i, dst + i);
}

#endif

} // namespace

void llmc::cpu::widenToFloat(CpuIsa isa, kir::DType type, const void *src,
                             int64_t count, float *dst) {
  auto *narrow = static_cast<const uint16_t *>(src);
  switch (type) {
  case kir::DType::F16:
#if defined(__x86_64__)
    if (isa == CpuIsa::Avx512)
      return widenHalfAvx512(narrow, count, dst);
    if (isa == CpuIsa::Avx2 && cpuHasF16c())
      return widenHalfF16c(narrow, count, dst);
#endif
    return widenHalfPortable(narrow, count, dst);
  case kir::DType::BF16:
#if defined(__x86_64__)
    if (isa == CpuIsa::Avx512)
      return widenBFloat16Avx512(narrow, count, dst);
    if (isa == CpuIsa::Avx2)
      return widenBFloat16Avx2(narrow, count, dst);
#endif
    return widenBFloat16(narrow, count, dst);
  default:
    std::memcpy(dst, src, count * sizeof(float));
    return;
  }
}

void llmc::cpu::widenToFloat(kir::DType type, const void *src, int64_t count,
                             float *dst) {
  static const CpuIsa isa = bestCpuIsa();
  widenToFloat(isa, type, src, count, dst);
}

void llmc::cpu::narrowFromFloat(kir::DType type, const float *src,
                                int64_t count, void *dst) {
  auto *narrow = static_cast<uint16_t *>(dst);
  switch (type) {
  case kir::DType::F16:
#if defined(__x86_64__)
    if (cpuHasF16c())
      return narrowHalfF16c(src, count, narrow);
#endif
    return narrowHalfPortable(src, count, narrow);
  case kir::DType::BF16:
#if defined(__x86_64__)
    if (cpuHasAvx512Bf16())
      return narrowBFloat16Avx512(src, count, narrow);
#endif
    return narrowBFloat16Portable(src, count, narrow);
  default:
    std::memcpy(dst, src, count * sizeof(float));
    return;
  }
}

const char *llmc::cpu::lowPrecisionPath() {
  // Widening by bestCpuIsa(); rounding f32 to f16 on F16C, to bf16 on
  // AVX-512 BF16, each where the CPU has it.
#if defined(__x86_64__)
  bool bf16 = cpuHasAvx512Bf16();
  switch (bestCpuIsa()) {
  case CpuIsa::Avx512:
    return bf16 ? "widen avx512, narrow f16c+avx512bf16"
                : "widen avx512, narrow f16c";
  case CpuIsa::Avx2:
    return bf16 ? "widen avx2, narrow f16c+avx512bf16"
                : "widen avx2, narrow f16c";
  case CpuIsa::Scalar:
    if (cpuHasF16c())
      return bf16 ? "widen scalar, narrow f16c+avx512bf16"
                  : "widen scalar, narrow f16c";
    return bf16 ? "widen scalar, narrow avx512bf16" : "scalar";
  }
#endif
  return "scalar";
}
