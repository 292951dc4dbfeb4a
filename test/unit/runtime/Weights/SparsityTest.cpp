// 2:4 masks (ASP's m4n2_1d), the check, and the compressed layout, against
// straightforward references.
#include "runtime/Weights/Sparsity.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/FileSystem.h"

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

/// A pruned [rows, k] weight as a tensor.
HostTensor prunedTensor(int64_t rows, int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> w(rows * k), mask(rows * k);
  for (float &x : w)
    x = normal(rng);
  maskTwoOfFour(w, k, mask);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] *= mask[i];
  return HostTensor::fromF32(w, {rows, k});
}

TEST(Sparsity, StoredCompressedRoundTripsThroughSafetensors) {
  // 3 x 12: 9 groups, an odd number of nibbles (a half-used last byte).
  TensorMap tensors;
  tensors["w"] = prunedTensor(3, 12, 1);
  tensors["big"] = prunedTensor(64, 128, 2);
  tensors["dense"] = HostTensor::fromF32({1, 2, 3, 4}, {1, 4});
  TensorMap original = tensors;
  ASSERT_FALSE(bool(compressTensorTwoOfFour(tensors, "w")));
  ASSERT_FALSE(bool(compressTensorTwoOfFour(tensors, "big")));
  EXPECT_EQ(tensors.count("w"), 0u);
  EXPECT_EQ(tensors["w.values_2of4"].shape, (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(tensors["w.meta_2of4"].shape, (std::vector<int64_t>{2}));
  // Half the values' bytes plus K/8 bytes a row.
  EXPECT_EQ(tensors["big.values_2of4"].bytes.size(), size_t(64 * 128 * 2));
  EXPECT_EQ(tensors["big.meta_2of4"].bytes.size(), size_t(64 * 128 / 8));
  llvm::SmallString<64> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("sparse", "safetensors",
                                                  path));
  ASSERT_FALSE(bool(writeSafetensors(path, tensors)));
  llvm::Expected<TensorMap> back = readSafetensors(path);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  ASSERT_FALSE(bool(expandTwoOfFour(*back, "f.safetensors")));
  // The same values (a pruned -0.0 comes back as 0.0: the layout keeps no
  // sign of dropped zeros).
  ASSERT_EQ(back->size(), original.size());
  for (const auto &[name, tensor] : original) {
    ASSERT_EQ((*back)[name].shape, tensor.shape) << name;
    std::vector<float> got = (*back)[name].toF32(), want = tensor.toF32();
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << name << "[" << i << "]";
  }
}

TEST(Sparsity, CompressedTensorErrorsNameTheFileAndTensor) {
  TensorMap dense;
  dense["w"] = HostTensor::fromF32({1, 1, 1, 0}, {1, 4});
  EXPECT_EQ(llvm::toString(compressTensorTwoOfFour(dense, "w")),
            "w is not 2:4: row 0, columns 0-3 have more than 2 non-zeros");

  TensorMap good;
  good["w"] = prunedTensor(2, 8, 3);
  ASSERT_FALSE(bool(compressTensorTwoOfFour(good, "w")));

  TensorMap half = good;
  half.erase("w.meta_2of4");
  EXPECT_EQ(llvm::toString(expandTwoOfFour(half, "f")),
            "f: 2:4 weight 'w': has values but no metadata");

  TensorMap damaged = good;
  damaged["w.meta_2of4"].bytes[0] = 0x0F; // positions 3, 3
  EXPECT_EQ(llvm::toString(expandTwoOfFour(damaged, "f")),
            "f: 2:4 weight 'w': row 0, group 0: positions 3, 3 are not two "
            "increasing ones of 0..3 (damaged metadata)");

  TensorMap shortMeta = good;
  shortMeta["w.meta_2of4"] = HostTensor::zeros(llmc::kir::DType::I32, {2});
  EXPECT_EQ(llvm::toString(expandTwoOfFour(shortMeta, "f")),
            "f: 2:4 weight 'w': 2 metadata words for [2, 8], expected 1");

  TensorMap both = good;
  both["w"] = prunedTensor(2, 8, 3);
  EXPECT_EQ(llvm::toString(expandTwoOfFour(both, "f")),
            "f: 2:4 weight 'w': is stored both dense and compressed");
}

} // namespace
