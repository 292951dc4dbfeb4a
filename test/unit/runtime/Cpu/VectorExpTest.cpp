// The attention softmax's vectorized exp (runtime/Cpu/VectorExp.h): within
// 2 ulp of exp in double, the same bits on every vector path this CPU runs
// (AVX-512, AVX2) as on the scalar path, every tail length, NaN kept, 0
// below the range.
#include "runtime/Cpu/VectorExp.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

using namespace llmc::cpu;

namespace {

const CpuIsa kPaths[] = {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512};

/// ulps between a float and a double reference, at the float's scale.
double ulpError(float got, double want) {
  double ulp = std::ldexp(1.0, std::ilogb(float(want)) - 23);
  return std::fabs(double(got) - want) / ulp;
}

TEST(VectorExp, WithinTwoUlpOfExp) {
  std::cout << "path taken here: " << vectorExpPath() << "\n";
  std::vector<float> xs;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f)
    xs.push_back(x);
  for (CpuIsa path : kPaths) {
    if (!cpuRuns(path))
      continue;
    std::vector<float> row = xs;
    expShiftSumOn(path, row.data(), int64_t(row.size()), 0.0f);
    double worst = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      double want = std::exp(double(xs[i]));
      if (want >= std::numeric_limits<float>::min()) // not subnormals
        worst = std::max(worst, ulpError(row[i], want));
    }
    std::cout << "path " << int(path) << ": worst " << worst << " ulp\n";
    EXPECT_LE(worst, 2.0) << "path " << int(path);
  }
  // A softmax row's sum (x - max in [-20, 0], 1000 terms) against the
  // exact sum in double.
  std::vector<float> row(1000);
  double exact = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    row[i] = -20.0f * float(i) / 999.0f + 3.0f;
    exact += std::exp(double(row[i]) - 3.0);
  }
  EXPECT_NEAR(expShiftSum(row.data(), 1000, 3.0f), exact, 1e-6 * exact);
}

TEST(VectorExp, VectorPathsEqualScalarBitForBit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-90.0f, 10.0f);
  for (CpuIsa path : {CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (!cpuRuns(path)) {
      std::cout << "path " << int(path) << " not on this CPU\n";
      continue;
    }
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> a(n);
      for (float &x : a)
        x = uniform(rng);
      std::vector<float> b = a;
      float shift = n % 3 ? 1.5f : -0.25f;
      EXPECT_EQ(rowMaxOn(path, a.data(), n),
                rowMaxOn(CpuIsa::Scalar, a.data(), n));
      float sumVector = expShiftSumOn(path, a.data(), n, shift);
      float sumScalar = expShiftSumOn(CpuIsa::Scalar, b.data(), n, shift);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)))
          << "path " << int(path) << ", n = " << n;
      EXPECT_NEAR(sumVector, sumScalar, 1e-6f * std::fabs(sumScalar) + 1e-30f);
    }
  }
}

TEST(VectorExp, EdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (CpuIsa path : kPaths) {
    if (!cpuRuns(path))
      continue;
    SCOPED_TRACE(testing::Message() << "path " << int(path));
    // 20 elements: one NaN in a full vector, one in the tail.
    std::vector<float> row(20, 0.0f);
    row[1] = -inf;
    row[2] = -100.0f; // below the range: 0
    row[3] = nan;
    row[19] = nan;
    row[4] = 88.0f;
    float sum = expShiftSumOn(path, row.data(), int64_t(row.size()), 0.0f);
    EXPECT_EQ(row[0], 1.0f);
    EXPECT_EQ(row[1], 0.0f);
    EXPECT_EQ(row[2], 0.0f);
    EXPECT_TRUE(std::isnan(row[3]));
    EXPECT_TRUE(std::isnan(row[19]));
    EXPECT_LE(ulpError(row[4], std::exp(88.0)), 2.0);
    EXPECT_TRUE(std::isnan(sum)); // a NaN score poisons the row's sum
  }
}

TEST(VectorExp, RowMax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int64_t n = 1; n <= 40; ++n) {
    std::vector<float> row(n);
    for (float &x : row)
      x = normal(rng);
    EXPECT_EQ(rowMax(row.data(), n), *std::max_element(row.begin(), row.end()))
        << "n = " << n;
  }
  EXPECT_EQ(rowMax(nullptr, 0), -std::numeric_limits<float>::infinity());
}

} // namespace
