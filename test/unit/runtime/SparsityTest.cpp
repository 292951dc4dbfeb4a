// 2:4 masks (ASP's m4n2_1d), the check, and the compressed layout, against
// straightforward references.
#include "runtime/Sparsity.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace llmc::runtime;

namespace {

TEST(Sparsity, MaskKeepsTheTwoLargestMagnitudesOfEachGroup) {
  std::vector<float> w = {0.1f, -3.0f, 2.0f, 0.5f,   // keeps -3, 2
                          -1.0f, 1.0f, 1.0f, 0.0f,   // ties: lower index
                          0.0f, 0.0f, 0.0f, 0.0f,    // all zero: first two
                          NAN, 5.0f, -6.0f, 1.0f};   // NaN is kept
  std::vector<float> mask(w.size());
  maskTwoOfFour(w, 4, mask);
  std::vector<float> expected = {0, 1, 1, 0, 1, 1, 0, 0,
                                 1, 1, 0, 0, 1, 0, 1, 0};
  EXPECT_EQ(mask, expected);
}

TEST(Sparsity, MaskOfRandomRowsMatchesASortingReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> w(13 * 20);
  for (float &x : w)
    x = normal(rng);
  std::vector<float> mask(w.size());
  maskTwoOfFour(w, 20, mask);
  for (size_t g = 0; g < w.size(); g += 4) {
    std::vector<int> order = {0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return std::fabs(w[g + a]) > std::fabs(w[g + b]);
    });
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(mask[g + order[i]], i < 2 ? 1.0f : 0.0f) << "group " << g / 4;
  }
  for (size_t i = 0; i < w.size(); ++i)
    w[i] *= mask[i];
  TwoOfFourCheck check = checkTwoOfFour(w, 20);
  EXPECT_TRUE(check.ok());
  EXPECT_EQ(check.groups, 13 * 5);
  EXPECT_DOUBLE_EQ(check.zeroFraction(), 0.5);
}

TEST(Sparsity, CheckCountsDenseGroups) {
  std::vector<float> w = {1, 2, 0, 0, 1, 2, 3, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  TwoOfFourCheck check = checkTwoOfFour(w, 8);
  EXPECT_FALSE(check.ok());
  EXPECT_EQ(check.groups, 4);
  EXPECT_EQ(check.denseGroups, 2);
  EXPECT_EQ(check.zeros, 6);
}

TEST(Sparsity, CompressedRoundTripsAndHalvesTheValues) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1, 1);
  const int64_t rows = 7, k = 36; // odd rows, k/4 = 9 nibbles a row
  std::vector<float> w(rows * k);
  for (float &x : w)
    x = uniform(rng);
  std::vector<float> mask(w.size());
  maskTwoOfFour(w, k, mask);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] *= mask[i];
  w[5 * k + 8] = w[5 * k + 9] = w[5 * k + 10] = w[5 * k + 11] = 0; // empty
  w[6 * k + 1] = 0; w[6 * k + 2] = 0; w[6 * k + 3] = 0.5f; w[6 * k] = 0;
  llvm::Expected<CompressedTwoOfFour> c = compressTwoOfFour("w", w, rows, k);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->values.size(), size_t(rows * k / 2));
  EXPECT_EQ(c->meta.size(), size_t((rows * k / 4 + 1) / 2));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < k / 4; ++g) {
      auto [a, b] = c->positions(r, g);
      EXPECT_LT(a, b); // the hardware wants increasing positions
    }
  EXPECT_EQ(decompressTwoOfFour(*c), w);
}

TEST(Sparsity, CompressingADenseGroupNamesIt) {
  std::vector<float> w = {1, 0, 0, 1, 1, 1, 1, 0};
  llvm::Expected<CompressedTwoOfFour> c =
      compressTwoOfFour("h.0.mlp.c_fc.weight", w, 1, 8);
  ASSERT_FALSE(bool(c));
  EXPECT_EQ(llvm::toString(c.takeError()),
            "h.0.mlp.c_fc.weight is not 2:4: row 0, columns 4-7 have more "
            "than 2 non-zeros");
}

} // namespace
