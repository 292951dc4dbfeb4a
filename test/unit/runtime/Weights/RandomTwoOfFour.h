// A random 2:4 weight for the tests of the 2:4 products (CPU and CUDA).
#ifndef LLMC_TEST_UNIT_RUNTIME_WEIGHTS_RANDOMTWOOFFOUR_H
#define LLMC_TEST_UNIT_RUNTIME_WEIGHTS_RANDOMTWOOFFOUR_H

#include "runtime/Weights/Sparsity.h"

#include <algorithm>
#include <random>
#include <vector>

namespace llmc::test {

/// A random [n, k] weight pruned to 2:4 by magnitude, some groups with one
/// or no non-zero (the compressed form keeps zeros for them).
inline std::vector<float> randomTwoOfFour(int64_t n, int64_t k,
                                          std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  std::vector<float> w(n * k), mask(n * k);
  for (float &v : w)
    v = normal(rng);
  runtime::maskTwoOfFour(w, k, mask);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] *= mask[i];
  for (size_t g = 0; g < w.size(); g += 4) {
    if (g % 36 == 8) // one kept value zero
      for (int i = 0; i < 4; ++i)
        if (w[g + i] != 0) {
          w[g + i] = 0;
          break;
        }
    if (g % 52 == 12) // the whole group zero
      std::fill(w.begin() + g, w.begin() + g + 4, 0.0f);
  }
  return w;
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_RUNTIME_WEIGHTS_RANDOMTWOOFFOUR_H
