// 2:4 sparse y = x · Wᵀ on the CPU: scalar, AVX2 and AVX-512 blocks and
// the tiling that drives them.
//
// The kernels gather instead of decompressing: a step of the AVX-512 path
// takes 8 groups of one W row (16 kept values, one metadata word) and the
// 32 matching elements of an x row in two registers; one vpermt2ps picks
// the 16 x elements the kept values multiply, with indices computed from
// the metadata word in three instructions (lane j's index is
// 4 * (j / 2) + ((word >> 2j) & 3)), and one FMA accumulates. AVX2 does the
// same for 4 groups with two vpermps and a blend. A block of MR x rows and
// NR W rows shares the loads (x's across W rows, the indices across x
// rows), MR * NR accumulators, reduced across lanes once at the end.
// Decoding (m = 1) reads each W byte once: half of f32 W's bytes plus
// k / 8 metadata bytes a row, about 56% of the dense GEMV's traffic. With
// bf16 values every block is the same but for the value load: 16 (8 on
// AVX2) bf16 in a half-width register, zero-extended to 32-bit lanes and
// shifted left by 16, which is the f32 with the same value (bf16 is f32's
// upper half); about 30% of the dense traffic.

// GCC 12's AVX-512 intrinsics pass an undefined register to their masked
// builtins and warn about it when inlined into a target("avx512f")
// function (GCC bug 105593, fixed in GCC 13), as in VectorExp.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "runtime/Cpu/SparseMatmul.h"
#include "runtime/Weights/Weights.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>

using namespace llmc::cpu;

PackedTwoOfFour PackedTwoOfFour::zeros(int64_t n, int64_t k) {
  PackedTwoOfFour w;
  w.n = n;
  w.k = k;
  w.paddedK = (k + 31) / 32 * 32;
  w.values.assign(n * w.valuesPerRow(), 0.0f);
  // Every nibble 0b0100: positions 0 and 1.
  w.meta.assign(n * w.wordsPerRow(), 0x44444444u);
  return w;
}

void PackedTwoOfFour::setPositions(int64_t r, int64_t g, int p0, int p1) {
  assert(p0 < p1 && p1 < 4 && g < paddedK / 4);
  uint32_t &word = meta[r * wordsPerRow() + g / 8];
  int shift = 4 * (g % 8);
  word = (word & ~(0xFu << shift)) | (uint32_t(p0 | (p1 << 2)) << shift);
}

PackedTwoOfFour
llmc::cpu::packForCpu(const runtime::CompressedTwoOfFour &c) {
  PackedTwoOfFour packed = PackedTwoOfFour::zeros(c.rows, c.k);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t g = 0; g < c.k / 4; ++g) {
      auto [a, b] = c.positions(r, g);
      int64_t index = r * (c.k / 4) + g;
      float *values = &packed.values[size_t(r * packed.valuesPerRow() + 2 * g)];
      values[0] = c.values[size_t(index * 2)];
      values[1] = c.values[size_t(index * 2 + 1)];
      packed.setPositions(r, g, a, b);
    }
  return packed;
}

float PackedTwoOfFour::value(int64_t i) const {
  return valueType == SparseValues::F32
             ? values[size_t(i)]
             : runtime::bfloat16ToFloat(bf16Values[size_t(i)]);
}

const char *llmc::cpu::sparseValuesName(SparseValues values) {
  return values == SparseValues::F32 ? "f32" : "bf16";
}

PackedTwoOfFour llmc::cpu::toBf16Values(const PackedTwoOfFour &w) {
  assert(w.valueType == SparseValues::F32);
  PackedTwoOfFour out;
  out.n = w.n;
  out.k = w.k;
  out.paddedK = w.paddedK;
  out.valueType = SparseValues::BF16;
  out.meta = w.meta;
  out.bf16Values.resize(w.values.size());
  for (size_t i = 0; i < w.values.size(); ++i)
    out.bf16Values[i] = runtime::floatToBFloat16(w.values[i]);
  return out;
}

bool llmc::cpu::exactlyBf16(const PackedTwoOfFour &w) {
  if (w.valueType == SparseValues::BF16)
    return true;
  for (float v : w.values) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (bits & 0xFFFF)
      return false;
  }
  return true;
}

namespace {

/// What every block gets: W, the x rows of the block, and where y goes.
struct BlockArgs {
  const PackedTwoOfFour *w;
  const float *x; // the block's first x row
  int64_t ldx;
  float *y; // y[first x row][first W row]
  int64_t ldy;
  int64_t row; // the block's first W row
};

/// The kept values of row `row` of `w`, as stored (float or bf16 bits).
template <typename V> const V *rowValues(const PackedTwoOfFour &w, int64_t row);
template <> const float *rowValues(const PackedTwoOfFour &w, int64_t row) {
  return &w.values[size_t(row * w.valuesPerRow())];
}
template <> const uint16_t *rowValues(const PackedTwoOfFour &w, int64_t row) {
  return &w.bf16Values[size_t(row * w.valuesPerRow())];
}

inline float widen(float v) { return v; }
inline float widen(uint16_t bits) {
  uint32_t x = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

struct Scalar {
  template <typename V, int MR, int NR> static void block(const BlockArgs &a) {
    const PackedTwoOfFour &w = *a.w;
    float acc[MR][NR] = {};
    for (int j = 0; j < NR; ++j) {
      const V *values = rowValues<V>(w, a.row + j);
      const uint32_t *meta = &w.meta[(a.row + j) * w.wordsPerRow()];
      for (int64_t g = 0; g < w.k / 4; ++g) {
        uint32_t nibble = meta[g / 8] >> (4 * (g % 8));
        int64_t c0 = 4 * g + (nibble & 3), c1 = 4 * g + ((nibble >> 2) & 3);
        float v0 = widen(values[2 * g]), v1 = widen(values[2 * g + 1]);
        for (int i = 0; i < MR; ++i)
          acc[i][j] += v0 * a.x[i * a.ldx + c0] + v1 * a.x[i * a.ldx + c1];
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        a.y[i * a.ldy + j] = acc[i][j];
  }
};

struct Avx512 {
  /// 16 kept values from `p` as f32.
  __attribute__((target("avx512f"))) static __m512 load16(const float *p) {
    return _mm512_loadu_ps(p);
  }
  __attribute__((target("avx512f"))) static __m512 load16(const uint16_t *p) {
    __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }

  template <typename V, int MR, int NR>
  __attribute__((target("avx512f"))) static void block(const BlockArgs &a) {
    const PackedTwoOfFour &w = *a.w;
    const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                             20, 22, 24, 26, 28, 30);
    const __m512i groupBase = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16,
                                                16, 20, 20, 24, 24, 28, 28);
    const __m512i three = _mm512_set1_epi32(3);
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm512_setzero_ps();
    const V *values[NR];
    const uint32_t *meta[NR];
    for (int j = 0; j < NR; ++j) {
      values[j] = rowValues<V>(w, a.row + j);
      meta[j] = &w.meta[(a.row + j) * w.wordsPerRow()];
    }
    for (int64_t step = 0; step < w.wordsPerRow(); ++step) {
      // x's 32 columns of this step; past k (the last step of a k that is
      // not a multiple of 32) masked to zero, which the padding's zero
      // values multiply (never reading past x's row).
      int64_t col = 32 * step, left = w.k - col;
      __mmask16 maskLo = left >= 16 ? 0xFFFF : __mmask16((1u << left) - 1);
      __mmask16 maskHi = left >= 32   ? 0xFFFF
                         : left <= 16 ? 0
                                      : __mmask16((1u << (left - 16)) - 1);
      __m512 lo[MR], hi[MR];
      for (int i = 0; i < MR; ++i) {
        lo[i] = _mm512_maskz_loadu_ps(maskLo, a.x + i * a.ldx + col);
        hi[i] = _mm512_maskz_loadu_ps(maskHi, a.x + i * a.ldx + col + 16);
      }
      for (int j = 0; j < NR; ++j) {
        __m512i word = _mm512_set1_epi32(int(meta[j][step]));
        __m512i index = _mm512_add_epi32(
            groupBase,
            _mm512_and_si512(_mm512_srlv_epi32(word, shifts), three));
        __m512 v = load16(values[j] + 16 * step);
        for (int i = 0; i < MR; ++i)
          acc[i][j] = _mm512_fmadd_ps(
              v, _mm512_permutex2var_ps(lo[i], index, hi[i]), acc[i][j]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        a.y[i * a.ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
  }
};

struct Avx2 {
  /// 8 kept values from `p` as f32.
  __attribute__((target("avx2,fma"))) static __m256 load8(const float *p) {
    return _mm256_loadu_ps(p);
  }
  __attribute__((target("avx2,fma"))) static __m256 load8(const uint16_t *p) {
    __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }

  template <typename V, int MR, int NR>
  __attribute__((target("avx2,fma"))) static void block(const BlockArgs &a) {
    const PackedTwoOfFour &w = *a.w;
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i groupBase = _mm256_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4);
    const __m256i three = _mm256_set1_epi32(3);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm256_setzero_ps();
    const V *values[NR];
    const uint16_t *meta[NR]; // half words: 4 groups a step
    for (int j = 0; j < NR; ++j) {
      values[j] = rowValues<V>(w, a.row + j);
      meta[j] = reinterpret_cast<const uint16_t *>(
          &w.meta[(a.row + j) * w.wordsPerRow()]);
    }
    // 16 columns a step: groups 0, 1 in the low register, 2, 3 in the high
    // one; vpermps reads an index's low 3 bits, so one index vector serves
    // both and the blend takes lanes 4..7 from the high one.
    for (int64_t step = 0; step < w.paddedK / 16; ++step) {
      int64_t col = 16 * step, left = w.k - col;
      __m256 lo[MR], hi[MR];
      if (left >= 16) {
        for (int i = 0; i < MR; ++i) {
          lo[i] = _mm256_loadu_ps(a.x + i * a.ldx + col);
          hi[i] = _mm256_loadu_ps(a.x + i * a.ldx + col + 8);
        }
      } else {
        __m256i maskLo = _mm256_cmpgt_epi32(
            _mm256_set1_epi32(int(std::max<int64_t>(left, 0))), lanes);
        __m256i maskHi = _mm256_cmpgt_epi32(
            _mm256_set1_epi32(int(std::max<int64_t>(left - 8, 0))), lanes);
        for (int i = 0; i < MR; ++i) {
          lo[i] = _mm256_maskload_ps(a.x + i * a.ldx + col, maskLo);
          hi[i] = _mm256_maskload_ps(a.x + i * a.ldx + col + 8, maskHi);
        }
      }
      for (int j = 0; j < NR; ++j) {
        // Little-endian: half word `step` holds groups 4*step .. 4*step+3.
        __m256i word = _mm256_set1_epi32(int(meta[j][step]));
        __m256i index = _mm256_add_epi32(
            groupBase,
            _mm256_and_si256(_mm256_srlv_epi32(word, shifts), three));
        __m256 v = load8(values[j] + 8 * step);
        for (int i = 0; i < MR; ++i) {
          __m256 gathered = _mm256_blend_ps(
              _mm256_permutevar8x32_ps(lo[i], index),
              _mm256_permutevar8x32_ps(hi[i], index), 0xF0);
          acc[i][j] = _mm256_fmadd_ps(v, gathered, acc[i][j]);
        }
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[i][j]),
                              _mm256_extractf128_ps(acc[i][j], 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        a.y[i * a.ldy + j] = _mm_cvtss_f32(s);
      }
  }
};

/// The blocks of one x row block of `mr` rows (1..4) over W rows n0..n1:
/// NR W rows at a time (4 for a single x row, whose GEMV then keeps 4
/// accumulators in flight; 2 otherwise), one at a time for the rest.
template <typename Isa, typename V, int MR>
void rowBlock(BlockArgs a, int64_t n0, int64_t n1) {
  constexpr int NR = MR == 1 ? 4 : 2;
  float *y = a.y;
  int64_t j = n0;
  for (; j + NR <= n1; j += NR) {
    a.row = j;
    a.y = y + j;
    Isa::template block<V, MR, NR>(a);
  }
  for (; j < n1; ++j) {
    a.row = j;
    a.y = y + j;
    Isa::template block<V, MR, 1>(a);
  }
}

template <typename Isa, typename V>
void matmul(const PackedTwoOfFour &w, const float *x, int64_t m, int64_t ldx,
            float *y, int64_t ldy, int64_t n0, int64_t n1) {
  // x rows in tiles that stay in L2 (at most 512 KiB) while every W row of
  // the range streams past them once; within a tile, blocks of 4 x rows.
  int64_t tileRows =
      std::clamp<int64_t>((512 << 10) / (4 * std::max<int64_t>(w.k, 1)) / 4 * 4,
                          4, 64);
  for (int64_t tile = 0; tile < m; tile += tileRows) {
    int64_t tileEnd = std::min(m, tile + tileRows);
    for (int64_t i = tile; i < tileEnd; i += 4) {
      BlockArgs a{&w, x + i * ldx, ldx, y + i * ldy, ldy, 0};
      switch (std::min<int64_t>(4, tileEnd - i)) {
      case 1:
        rowBlock<Isa, V, 1>(a, n0, n1);
        break;
      case 2:
        rowBlock<Isa, V, 2>(a, n0, n1);
        break;
      case 3:
        rowBlock<Isa, V, 3>(a, n0, n1);
        break;
      default:
        rowBlock<Isa, V, 4>(a, n0, n1);
        break;
      }
    }
  }
}

} // namespace

void llmc::cpu::sparseMatmulF32(CpuIsa isa, const PackedTwoOfFour &w,
                                const float *x, int64_t m, int64_t ldx,
                                float *y, int64_t ldy, int64_t n0, int64_t n1) {
  assert(cpuRuns(isa) && n0 >= 0 && n1 <= w.n);
  bool bf16 = w.valueType == SparseValues::BF16;
  switch (isa) {
  case CpuIsa::Avx512:
    return bf16 ? matmul<Avx512, uint16_t>(w, x, m, ldx, y, ldy, n0, n1)
                : matmul<Avx512, float>(w, x, m, ldx, y, ldy, n0, n1);
  case CpuIsa::Avx2:
    return bf16 ? matmul<Avx2, uint16_t>(w, x, m, ldx, y, ldy, n0, n1)
                : matmul<Avx2, float>(w, x, m, ldx, y, ldy, n0, n1);
  case CpuIsa::Scalar:
    return bf16 ? matmul<Scalar, uint16_t>(w, x, m, ldx, y, ldy, n0, n1)
                : matmul<Scalar, float>(w, x, m, ldx, y, ldy, n0, n1);
  }
}
