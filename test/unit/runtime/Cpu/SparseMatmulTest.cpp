// The CPU's 2:4 sparse products (runtime/Cpu/SparseMatmul.h), every ISA path
// this CPU runs and both value types (f32, bf16), against the dense product
// of the masked weights (bf16-rounded for bf16 values) in double.
#include "runtime/Cpu/SparseMatmul.h"
#include "runtime/Weights/Sparsity.h"
#include "runtime/Weights/Weights.h"
#include "test/unit/runtime/Weights/RandomTwoOfFour.h"

#include "gtest/gtest.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>

using namespace llmc::cpu;
using namespace llmc::runtime;
using llmc::test::randomTwoOfFour;

namespace {

/// Runs `isa` on [m, k] x [n, k]^T, W's kept values stored as `values`,
/// and compares with the dense product in double of W as the kernel must
/// see it (each value rounded to bf16 for BF16, by runtime/Weights/Weights.h's
/// rounding, not the packer's): |y - ref| <= 1e-5 * sum |x_c w_c| (relative
/// to the magnitude
/// of the terms, the scale f32 summation error has; random signs make
/// |ref| itself arbitrarily small). x rows have a stride past k, filled
/// with NaN, and y's columns outside [n0, n1) hold a sentinel: a kernel
/// that reads past k or writes outside its rows fails.
void checkProduct(CpuIsa isa, SparseValues values, int64_t m, int64_t n,
                  int64_t k, int64_t n0, int64_t n1, uint32_t seed) {
  SCOPED_TRACE(testing::Message()
               << cpuIsaName(isa) << " " << sparseValuesName(values)
               << " m=" << m << " n=" << n << " k=" << k << " rows [" << n0
               << ", " << n1 << ")");
  std::mt19937 rng(seed);
  std::vector<float> w = randomTwoOfFour(n, k, rng);
  llvm::Expected<CompressedTwoOfFour> compressed =
      compressTwoOfFour("w", w, n, k);
  ASSERT_TRUE(bool(compressed)) << llvm::toString(compressed.takeError());
  PackedTwoOfFour packed = packForCpu(*compressed);
  EXPECT_EQ(packed.paddedK % 32, 0);
  if (values == SparseValues::BF16) {
    packed = toBf16Values(packed);
    ASSERT_TRUE(packed.values.empty());
    ASSERT_EQ(packed.bf16Values.size(), size_t(n * packed.paddedK / 2));
    for (float &v : w) // the reference's weights: rounded, NaN-free here
      v = bfloat16ToFloat(floatToBFloat16(v));
  }
  int64_t ldx = k + 3, ldy = n + 2;
  std::normal_distribution<float> normal;
  std::vector<float> x(m * ldx, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c)
      x[i * ldx + c] = normal(rng);
  const float sentinel = 12345.0f;
  std::vector<float> y(m * ldy, sentinel);
  sparseMatmulF32(isa, packed, x.data(), m, ldx, y.data(), ldy, n0, n1);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldy; ++j) {
      float got = y[i * ldy + j];
      if (j < n0 || j >= n1) {
        ASSERT_EQ(got, sentinel) << "wrote y[" << i << ", " << j << "]";
        continue;
      }
      double ref = 0, scale = 0;
      for (int64_t c = 0; c < k; ++c) {
        double term = double(x[i * ldx + c]) * double(w[j * k + c]);
        ref += term;
        scale += std::fabs(term);
      }
      ASSERT_LE(std::fabs(got - ref), 1e-5 * scale + 1e-30)
          << "y[" << i << ", " << j << "] = " << got << ", dense " << ref;
    }
}

constexpr SparseValues kValueTypes[] = {SparseValues::F32, SparseValues::BF16};

class SparseMatmul : public testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override {
    if (!cpuRuns(GetParam()))
      GTEST_SKIP() << "this CPU does not run the " << cpuIsaName(GetParam())
                   << " path";
    std::cout << "[ path     ] " << cpuIsaName(GetParam()) << "\n";
  }
};

TEST_P(SparseMatmul, GemvMatchesTheDenseProductOnOddShapes) {
  // k a multiple of 4 but not of 8: a group tail in every vector step.
  for (int64_t k : {4, 12, 20, 36, 60, 100, 228, 772})
    for (int64_t n : {1, 3, 5, 13, 37})
      for (SparseValues values : kValueTypes)
        checkProduct(GetParam(), values, 1, n, k, 0, n, uint32_t(k * 31 + n));
}

TEST_P(SparseMatmul, GemmMatchesTheDenseProductOnOddShapes) {
  for (int64_t m : {2, 3, 5, 7, 33, 67})
    for (int64_t k : {12, 44, 100, 300})
      for (int64_t n : {1, 7, 19})
        for (SparseValues values : kValueTypes)
          checkProduct(GetParam(), values, m, n, k, 0, n,
                       uint32_t(m * 1000 + k + n));
}

TEST_P(SparseMatmul, ARangeOfRowsWritesOnlyThoseColumns) {
  for (SparseValues values : kValueTypes) {
    checkProduct(GetParam(), values, 1, 41, 68, 5, 30, 3);
    checkProduct(GetParam(), values, 9, 41, 68, 13, 14, 4);
    checkProduct(GetParam(), values, 5, 41, 68, 7, 7, 5); // an empty range
  }
}

TEST_P(SparseMatmul, GptShapesMatchTheDenseProduct) {
  // GPT-2 124M's c_fc (3072 x 768) and c_proj (768 x 3072) in decode and a
  // short odd prefill.
  for (SparseValues values : kValueTypes) {
    checkProduct(GetParam(), values, 1, 3072, 768, 0, 3072, 11);
    checkProduct(GetParam(), values, 5, 768, 3072, 0, 768, 12);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, SparseMatmul,
                         testing::Values(CpuIsa::Scalar, CpuIsa::Avx2,
                                         CpuIsa::Avx512),
                         [](const testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

TEST(SparseMatmulDispatch, BestPathFollowsCpuinfo) {
  // /proc/cpuinfo's flags, read independently of __builtin_cpu_supports.
  auto cpuinfo = llvm::MemoryBuffer::getFileAsStream("/proc/cpuinfo");
  if (!cpuinfo)
    GTEST_SKIP() << "no /proc/cpuinfo";
  llvm::StringRef text = (*cpuinfo)->getBuffer();
  size_t at = text.find("\nflags");
  ASSERT_NE(at, llvm::StringRef::npos) << "/proc/cpuinfo has no flags line";
  std::string flags = text.substr(at + 1).split('\n').first.str() + " ";
  auto has = [&](const char *flag) {
    return flags.find(" " + std::string(flag) + " ") != std::string::npos;
  };
  bool avx512 = has("avx512f");
  bool avx2 = has("avx2") && has("fma");
  CpuIsa expected = avx512 ? CpuIsa::Avx512
                    : avx2 ? CpuIsa::Avx2
                           : CpuIsa::Scalar;
  EXPECT_EQ(bestCpuIsa(), expected);
  std::cout << "[ paths    ] this CPU runs:";
  for (CpuIsa isa : cpuIsasThisCpuRuns())
    std::cout << " " << cpuIsaName(isa);
  std::cout << " (best " << cpuIsaName(bestCpuIsa()) << ")\n";
}

TEST(SparseMatmulPack, PackKeepsValuesAndPositions) {
  std::mt19937 rng(9);
  int64_t n = 3, k = 44; // 11 groups: a word and a half a row
  std::vector<float> w = randomTwoOfFour(n, k, rng);
  llvm::Expected<CompressedTwoOfFour> c = compressTwoOfFour("w", w, n, k);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  PackedTwoOfFour p = packForCpu(*c);
  EXPECT_EQ(p.paddedK, 64);
  EXPECT_EQ(p.bytes(), int64_t(n * (32 * 4 + 2 * 4)));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < p.paddedK / 4; ++g) {
      uint32_t nibble = p.meta[r * p.wordsPerRow() + g / 8] >> (4 * (g % 8)) & 15;
      const float *values = &p.values[r * p.valuesPerRow() + 2 * g];
      if (g >= k / 4) { // padding: zeros at positions 0 and 1
        EXPECT_EQ(nibble, 0x4u);
        EXPECT_EQ(values[0], 0.0f);
        EXPECT_EQ(values[1], 0.0f);
        continue;
      }
      auto [a, b] = c->positions(r, g);
      EXPECT_EQ(nibble, uint32_t(a | b << 2));
      EXPECT_EQ(values[0], w[r * k + 4 * g + a]);
      EXPECT_EQ(values[1], w[r * k + 4 * g + b]);
    }
}

TEST(SparseMatmulPack, Bf16ValuesRoundToNearestEvenAndKeepTheMetadata) {
  std::mt19937 rng(10);
  int64_t n = 5, k = 44;
  std::vector<float> w = randomTwoOfFour(n, k, rng);
  w[1 * k + 4 * 2 + (w[1 * k + 8] != 0 ? 0 : 1)] = 1.0f + 0x1.8p-8f; // a tie
  llvm::Expected<CompressedTwoOfFour> c = compressTwoOfFour("w", w, n, k);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  PackedTwoOfFour f32 = packForCpu(*c);
  EXPECT_FALSE(exactlyBf16(f32)); // normal draws have low mantissa bits
  PackedTwoOfFour bf16 = toBf16Values(f32);
  EXPECT_EQ(bf16.valueType, SparseValues::BF16);
  EXPECT_EQ(bf16.meta, f32.meta);
  // Half the value bytes, the same metadata bytes.
  EXPECT_EQ(bf16.bytes(), int64_t(n * (32 * 2 + 2 * 4)));
  bool sawTie = false;
  for (size_t i = 0; i < f32.values.size(); ++i) {
    float v = f32.values[i], got = bf16.value(int64_t(i));
    // Nearest bf16, ties to the even mantissa.
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    uint32_t lower = bits & 0xFFFF0000u, upper = lower + 0x10000u;
    float lo, hi;
    std::memcpy(&lo, &lower, 4);
    std::memcpy(&hi, &upper, 4);
    double dLo = std::fabs(double(v) - lo), dHi = std::fabs(double(hi) - v);
    float expected = dLo < dHi ? lo : dHi < dLo ? hi : ((lower >> 16) & 1 ? hi : lo);
    sawTie |= v == 1.0f + 0x1.8p-8f;
    ASSERT_EQ(got, expected) << "value " << i << " = " << v;
  }
  EXPECT_TRUE(sawTie);
  EXPECT_EQ(bf16.value(0), bfloat16ToFloat(bf16.bf16Values[0]));
  // Weights that are bf16 already (a bf16 file) convert without loss.
  for (float &v : w)
    v = bfloat16ToFloat(floatToBFloat16(v));
  PackedTwoOfFour exact = packForCpu(cantFail(compressTwoOfFour("w", w, n, k)));
  EXPECT_TRUE(exactlyBf16(exact));
  PackedTwoOfFour converted = toBf16Values(exact);
  for (size_t i = 0; i < exact.values.size(); ++i)
    ASSERT_EQ(converted.value(int64_t(i)), exact.values[i]);
}

} // namespace
