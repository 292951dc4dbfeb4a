// The bf16 GEMM (runtime/Cpu/Bf16Gemm.h): its scalar emulation of
// vdpbf16ps on any CPU, so packing and indexing are checked everywhere,
// and the AVX-512 BF16 path where the CPU has it (skipped with a message
// otherwise); both against the product in double of the bf16 inputs, over
// both layouts of A and B, odd k, partial micro-tiles and several packed
// blocks, with NaN past every operand's valid elements and a sentinel past
// C's columns.
#include "runtime/Cpu/Bf16Gemm.h"
#include "runtime/Weights/Weights.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace llmc::cpu;
using namespace llmc::runtime;

namespace {

constexpr uint16_t kNanBits = 0x7fc1;
constexpr float kSentinel = -12345.0f;

struct Case {
  int64_t m, n, k;
  bool aTransposed, bTransposed; // A stored [k, m], B stored [n, k]
  bool accumulate;
};

/// A stored matrix of bf16: `rows` x `cols` valid, a row stride 3 past
/// them filled with NaN; the view reads it as [r, c] or transposed.
struct Stored {
  std::vector<uint16_t> bits;
  int64_t ld;
  Bf16View view(bool transposed) const {
    return transposed ? Bf16View{bits.data(), 1, ld}
                      : Bf16View{bits.data(), ld, 1};
  }
};

Stored randomBf16(int64_t rows, int64_t cols, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Stored s{std::vector<uint16_t>(size_t(rows * (cols + 3)), kNanBits),
           cols + 3};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      s.bits[r * s.ld + c] = floatToBFloat16(normal(rng));
  return s;
}

float at(Bf16View v, int64_t r, int64_t c) {
  return bfloat16ToFloat(v.data[r * v.rowStride + c * v.colStride]);
}

/// Runs `path` on the case and checks every element of C against double,
/// within the f32 summation bound k * 2^-24 * sum |a b| (+ |c0|); returns C.
std::vector<float> check(Bf16DotPath path, const Case &t, uint32_t seed) {
  SCOPED_TRACE(testing::Message()
               << bf16DotPathName(path) << " m=" << t.m << " n=" << t.n
               << " k=" << t.k << (t.aTransposed ? " A^T" : "")
               << (t.bTransposed ? " B^T" : "")
               << (t.accumulate ? " accumulate" : ""));
  std::mt19937 rng(seed);
  Stored a = t.aTransposed ? randomBf16(t.k, t.m, rng)
                           : randomBf16(t.m, t.k, rng);
  Stored b = t.bTransposed ? randomBf16(t.n, t.k, rng)
                           : randomBf16(t.k, t.n, rng);
  Bf16View av = a.view(t.aTransposed), bv = b.view(t.bTransposed);
  int64_t ldc = t.n + 5;
  std::vector<float> c(size_t(t.m * ldc), kSentinel);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t j = 0; j < t.n; ++j)
      c[i * ldc + j] = t.accumulate ? normal(rng) : std::nanf("");
  std::vector<float> c0 = c;
  bf16Gemm(path, t.m, t.n, t.k, av, bv, c.data(), ldc, t.accumulate);
  int64_t bad = 0;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= t.n) {
        if (c[i * ldc + j] != kSentinel && ++bad < 5)
          ADD_FAILURE() << "wrote past n at (" << i << ", " << j << ")";
        continue;
      }
      double ref = t.accumulate ? c0[i * ldc + j] : 0.0, mass = std::abs(ref);
      for (int64_t p = 0; p < t.k; ++p) {
        double term = double(at(av, i, p)) * at(bv, p, j);
        ref += term;
        mass += std::abs(term);
      }
      double got = c[i * ldc + j];
      double bound = (t.k + 1) * std::ldexp(1.0, -24) * mass + 1e-30;
      if (!(std::abs(got - ref) <= bound) && ++bad < 5)
        ADD_FAILURE() << "c(" << i << ", " << j << ") = " << got
                      << ", expected " << ref << " +- " << bound;
    }
  }
  EXPECT_EQ(bad, 0);
  return c;
}

const Case kCases[] = {
    {1, 1, 1, false, false, false},    {8, 32, 2, false, false, false},
    {7, 33, 5, false, true, false},    {13, 50, 31, true, false, true},
    {9, 65, 64, true, true, false},    {17, 31, 257, false, false, true},
    {300, 70, 40, false, true, false}, {20, 300, 520, true, false, false},
    {40, 96, 300, false, true, true},  {3, 17, 0, false, false, false},
    {3, 17, 0, false, false, true},
};

TEST(Bf16Gemm, EmulatedMatchesDouble) {
  uint32_t seed = 1;
  for (const Case &t : kCases)
    check(Bf16DotPath::Emulated, t, seed++);
}

TEST(Bf16Gemm, Avx512Bf16MatchesDoubleAndEmulation) {
  if (!cpuHasAvx512Bf16())
    GTEST_SKIP() << "this CPU lacks AVX-512 BF16 (vdpbf16ps); the emulated "
                    "path is tested instead";
  uint32_t seed = 1;
  for (const Case &t : kCases) {
    std::vector<float> native = check(Bf16DotPath::Avx512Bf16, t, seed);
    std::vector<float> emulated = check(Bf16DotPath::Emulated, t, seed);
    ++seed;
    // Same pairs, same order: the emulation of the instruction's
    // semantics gives the same bits (NaN compares by bits too).
    ASSERT_EQ(native.size(), emulated.size());
    EXPECT_EQ(std::memcmp(native.data(), emulated.data(),
                          native.size() * sizeof(float)),
              0)
        << "m=" << t.m << " n=" << t.n << " k=" << t.k;
  }
}

TEST(Bf16Gemm, DenormalsFlushedLikeTheInstruction) {
  // A denormal bf16 input reads as zero: 1e-39 * 1 + 1 * 1 = 1 exactly.
  std::vector<Bf16DotPath> paths = {Bf16DotPath::Emulated};
  if (cpuHasAvx512Bf16())
    paths.push_back(Bf16DotPath::Avx512Bf16);
  for (Bf16DotPath path : paths) {
    uint16_t a[2] = {floatToBFloat16(1e-39f), floatToBFloat16(1.0f)};
    uint16_t b[2] = {floatToBFloat16(1.0f), floatToBFloat16(1.0f)};
    float c = 0.0f;
    bf16Gemm(path, 1, 1, 1, {a, 2, 1}, {b, 1, 1}, &c, 1, false);
    EXPECT_EQ(c, 0.0f) << bf16DotPathName(path);
    bf16Gemm(path, 1, 1, 2, {a, 2, 1}, {b, 1, 1}, &c, 1, false);
    EXPECT_EQ(c, 1.0f) << bf16DotPathName(path);
  }
}

} // namespace
