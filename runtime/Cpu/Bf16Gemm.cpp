// bf16 GEMM on vdpbf16ps (Bf16Gemm.h): packing, the 8 x 32 micro-kernel
// and its scalar emulation.
#include "runtime/Cpu/Bf16Gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace llmc;
using namespace llmc::cpu;

namespace {

constexpr int64_t kMR = 8;   // rows of C per micro-kernel
constexpr int64_t kNR = 32;  // columns of C per micro-kernel (2 zmm)
constexpr int64_t kMC = 256; // rows of A per packed block
constexpr int64_t kNC = 256; // columns of B per packed block
constexpr int64_t kKC = 256; // k per packed block (128 pairs)

inline uint32_t pairOf(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | uint32_t(hi) << 16;
}

/// A's rows i0.. i0 + mc, k k0.. k0 + kc as panels of kMR rows, [pair][row]
/// words (rows past mc and the pad of an odd kc are zero).
void packA(Bf16View a, int64_t mc, int64_t kc, uint32_t *out) {
  int64_t pairs = (kc + 1) / 2;
  for (int64_t i0 = 0; i0 < mc; i0 += kMR) {
    uint32_t *panel = out + i0 * pairs;
    int64_t rows = std::min(kMR, mc - i0);
    for (int64_t r = 0; r < kMR; ++r) {
      if (r >= rows) {
        for (int64_t p = 0; p < pairs; ++p)
          panel[p * kMR + r] = 0;
        continue;
      }
      const uint16_t *row = a.data + (i0 + r) * a.rowStride;
      int64_t p = 0;
      if (a.colStride == 1) // a pair is one unaligned word
        for (; 2 * p + 1 < kc; ++p)
          std::memcpy(&panel[p * kMR + r], row + 2 * p, 4);
      for (; p < pairs; ++p)
        panel[p * kMR + r] =
            pairOf(row[2 * p * a.colStride],
                   2 * p + 1 < kc ? row[(2 * p + 1) * a.colStride] : 0);
    }
  }
}

/// B's k k0.. k0 + kc, columns j0.. j0 + nc as panels of kNR columns,
/// [pair][column] words (columns past nc and an odd kc's pad are zero).
void packB(Bf16View b, int64_t kc, int64_t nc, uint32_t *out) {
  int64_t pairs = (kc + 1) / 2;
  for (int64_t j0 = 0; j0 < nc; j0 += kNR) {
    uint32_t *panel = out + j0 * pairs;
    int64_t cols = std::min(kNR, nc - j0);
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t *even = b.data + 2 * p * b.rowStride + j0 * b.colStride;
      const uint16_t *odd = even + b.rowStride;
      bool full = 2 * p + 1 < kc;
      uint32_t *dst = panel + p * kNR;
      int64_t j = 0;
#if defined(__x86_64__)
      if (b.colStride == 1 && full) // rows of B: interleave two of them
        for (; j + 8 <= cols; j += 8) {
          __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(even + j));
          __m128i o = _mm_loadu_si128(reinterpret_cast<const __m128i *>(odd + j));
          _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + j),
                           _mm_unpacklo_epi16(e, o));
          _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + j + 4),
                           _mm_unpackhi_epi16(e, o));
        }
#endif
      if (b.rowStride == 1 && full) // columns of B: a pair is one word
        for (; j < cols; ++j)
          std::memcpy(&dst[j], even + j * b.colStride, 4);
      for (; j < cols; ++j)
        dst[j] = pairOf(even[j * b.colStride],
                        full ? odd[j * b.colStride] : 0);
      for (; j < kNR; ++j)
        dst[j] = 0;
    }
  }
}

float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

/// Denormals to signed zero (vdpbf16ps's DAZ and FTZ).
float flushDenormal(float value) {
  return std::fpclassify(value) == FP_SUBNORMAL ? std::copysign(0.0f, value)
                                                : value;
}

/// One lane of vdpbf16ps: acc + a.hi * b.hi, then + a.lo * b.lo, each a
/// fused multiply-add rounded to nearest even, denormals flushed.
float emulatedDot(float acc, uint32_t a, uint32_t b) {
  auto half = [](uint32_t pair, int shift) {
    return flushDenormal(fromBits((pair >> shift & 0xffffu) << 16));
  };
  acc = flushDenormal(acc);
  acc = flushDenormal(std::fma(half(a, 16), half(b, 16), acc));
  return flushDenormal(std::fma(half(a, 0), half(b, 0), acc));
}

/// C[rows x cols] (= or +=, `load`) the product of an A panel and a B
/// panel over `pairs` k pairs, emulated lane by lane.
void kernelEmulated(int64_t pairs, const uint32_t *pa, const uint32_t *pb,
                    float *c, int64_t ldc, int64_t rows, int64_t cols,
                    bool load) {
  float acc[kMR][kNR];
  for (int64_t r = 0; r < kMR; ++r)
    for (int64_t j = 0; j < kNR; ++j)
      acc[r][j] = load && r < rows && j < cols ? c[r * ldc + j] : 0.0f;
  for (int64_t p = 0; p < pairs; ++p)
    for (int64_t r = 0; r < kMR; ++r)
      for (int64_t j = 0; j < kNR; ++j)
        acc[r][j] = emulatedDot(acc[r][j], pa[p * kMR + r], pb[p * kNR + j]);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      c[r * ldc + j] = acc[r][j];
}

#if defined(__x86_64__)
#define LLMC_BF16 __attribute__((target("avx512f,avx512bf16")))

template <int Rows>
LLMC_BF16 void kernelNative(int64_t pairs, const uint32_t *pa,
                            const uint32_t *pb, float *c, int64_t ldc,
                            int64_t cols, bool load) {
  __mmask16 m0 = cols >= 16 ? 0xffff : __mmask16((1u << cols) - 1);
  __mmask16 m1 = cols >= 32  ? 0xffff
                 : cols > 16 ? __mmask16((1u << (cols - 16)) - 1)
                             : 0;
  __m512 acc[Rows][2];
  for (int r = 0; r < Rows; ++r) {
    acc[r][0] = load ? _mm512_maskz_loadu_ps(m0, c + r * ldc)
                     : _mm512_setzero_ps();
    acc[r][1] = load ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16)
                     : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(pb + p * kNR);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(pb + p * kNR + 16);
    for (int r = 0; r < Rows; ++r) {
      __m512bh a = (__m512bh)_mm512_set1_epi32(int(pa[p * kMR + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  }
  for (int r = 0; r < Rows; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

using NativeKernel = void (*)(int64_t, const uint32_t *, const uint32_t *,
                              float *, int64_t, int64_t, bool);
constexpr NativeKernel kNativeKernels[kMR] = {
    kernelNative<1>, kernelNative<2>, kernelNative<3>, kernelNative<4>,
    kernelNative<5>, kernelNative<6>, kernelNative<7>, kernelNative<8>};
#endif

} // namespace

const char *cpu::bf16DotPathName(Bf16DotPath path) {
  return path == Bf16DotPath::Avx512Bf16 ? "avx512bf16 (vdpbf16ps)"
                                         : "emulated vdpbf16ps";
}

std::optional<Bf16DotPath> cpu::executorBf16Dot() {
  static const std::optional<Bf16DotPath> path =
      []() -> std::optional<Bf16DotPath> {
    const char *env = std::getenv("LLMC_CPU_BF16_DOT");
    if (env && std::string_view(env) == "off")
      return std::nullopt;
    if (cpuHasAvx512Bf16())
      return Bf16DotPath::Avx512Bf16;
    return std::nullopt;
  }();
  return path;
}

void cpu::bf16Gemm(Bf16DotPath path, int64_t m, int64_t n, int64_t k,
                   Bf16View a, Bf16View b, float *c, int64_t ldc,
                   bool accumulate) {
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  thread_local std::vector<uint32_t> packing;
  packing.resize((kMC + kNC) * (kKC / 2));
  uint32_t *packedA = packing.data(), *packedB = packedA + kMC * (kKC / 2);
  for (int64_t i0 = 0; i0 < m; i0 += kMC) {
    int64_t mc = std::min(kMC, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kNC) {
      int64_t nc = std::min(kNC, n - j0);
      for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        int64_t kc = std::min(kKC, k - k0), pairs = (kc + 1) / 2;
        packA({a.data + i0 * a.rowStride + k0 * a.colStride, a.rowStride,
               a.colStride},
              mc, kc, packedA);
        packB({b.data + k0 * b.rowStride + j0 * b.colStride, b.rowStride,
               b.colStride},
              kc, nc, packedB);
        bool load = accumulate || k0 > 0;
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const uint32_t *pb = packedB + jr * pairs;
          int64_t cols = std::min(kNR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const uint32_t *pa = packedA + ir * pairs;
            int64_t rows = std::min(kMR, mc - ir);
            float *cBlock = c + (i0 + ir) * ldc + j0 + jr;
#if defined(__x86_64__)
            if (path == Bf16DotPath::Avx512Bf16) {
              kNativeKernels[rows - 1](pairs, pa, pb, cBlock, ldc, cols,
                                       load);
              continue;
            }
#endif
            kernelEmulated(pairs, pa, pb, cBlock, ldc, rows, cols, load);
          }
        }
      }
    }
  }
}
