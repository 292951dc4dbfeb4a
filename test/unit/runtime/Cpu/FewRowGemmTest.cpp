// The CPU's few-row products (runtime/Cpu/FewRowGemm.h), f32, bf16 and f16
// weights, every ISA path this CPU runs, both weight layouts, against the
// product in double of the widened weights.
#include "runtime/Cpu/FewRowGemm.h"
#include "runtime/Weights/Weights.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>

using namespace llmc::cpu;
using namespace llmc::runtime;

namespace {

/// [m, k] x W, W `type` stored [n, k] (wNK) or [k, n] with a row stride past
/// its valid elements filled with NaN bits, as are x's rows past k; c's
/// columns outside [n0, n1) hold a sentinel, and c's rows have a stride
/// past n. |c - ref| <= 1e-5 * sum |x w| (+ |c0| when accumulating).
void checkProduct(CpuIsa isa, llmc::kir::DType type, bool wNK, int64_t m,
                  int64_t n, int64_t k, int64_t n0, int64_t n1, bool accumulate,
                  uint32_t seed) {
  bool f16 = type == llmc::kir::DType::F16;
  bool f32 = type == llmc::kir::DType::F32;
  SCOPED_TRACE(testing::Message()
               << cpuIsaName(isa) << " " << llmc::kir::dtypeName(type)
               << (wNK ? " [n,k]" : " [k,n]") << " m=" << m << " n=" << n
               << " k=" << k << " cols [" << n0 << ", " << n1 << ")"
               << (accumulate ? " accumulate" : ""));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const uint16_t nanBits = f16 ? 0x7e01 : 0x7fc1;
  int64_t ldx = k + 3, ldc = n + 5;
  int64_t ldw = wNK ? k + 7 : n + 7;
  int64_t wRows = wNK ? n : k, wValid = wNK ? k : n;
  std::vector<float> x(size_t(m * ldx), nan);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      x[i * ldx + p] = normal(rng);
  // The weights as stored (f32: their bits in pairs of uint16), NaN past
  // each row's valid elements.
  int64_t words = f32 ? 2 : 1;
  std::vector<uint16_t> w(size_t(wRows * ldw * words), nanBits);
  auto store = [&](int64_t index, float value) {
    if (f32)
      std::memcpy(&w[index * 2], &value, 4);
    else
      w[index] = f16 ? floatToHalf(value) : floatToBFloat16(value);
  };
  if (f32)
    for (int64_t i = 0; i < wRows * ldw; ++i)
      store(i, nan);
  for (int64_t r = 0; r < wRows; ++r)
    for (int64_t v = 0; v < wValid; ++v)
      store(r * ldw + v, normal(rng));
  auto weight = [&](int64_t p, int64_t j) {
    int64_t index = wNK ? j * ldw + p : p * ldw + j;
    if (f32) {
      float value;
      std::memcpy(&value, &w[index * 2], 4);
      return double(value);
    }
    return double(f16 ? halfToFloat(w[index]) : bfloat16ToFloat(w[index]));
  };
  const float sentinel = 12345.0f;
  std::vector<float> c(size_t(m * ldc), sentinel), c0(c.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n0; j < n1; ++j)
      c[i * ldc + j] = accumulate ? normal(rng) : nan;
  c0 = c;
  fewRowGemm(isa, type, x.data(), m, ldx, w.data(), ldw, wNK, k,
                   c.data(), ldc, n0, n1, accumulate);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      float got = c[i * ldc + j];
      if (j < n0 || j >= n1) {
        ASSERT_EQ(got, sentinel) << "wrote outside its columns at " << i
                                 << ", " << j;
        continue;
      }
      double ref = accumulate ? c0[i * ldc + j] : 0.0;
      double scale = accumulate ? std::fabs(ref) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        double term = double(x[i * ldx + p]) * weight(p, j);
        ref += term;
        scale += std::fabs(term);
      }
      ASSERT_LE(std::fabs(got - ref), 1e-5 * scale + 1e-30)
          << "at " << i << ", " << j << ": got " << got << ", want " << ref;
    }
}

TEST(FewRowGemm, EveryPathOddShapes) {
  std::vector<CpuIsa> isas = cpuIsasThisCpuRuns();
  std::cerr << "few-row GEMM paths this CPU runs:";
  for (CpuIsa isa : isas)
    std::cerr << " " << cpuIsaName(isa);
  std::cerr << "\n";
  uint32_t seed = 1;
  for (llmc::kir::DType type : {llmc::kir::DType::F32, llmc::kir::DType::BF16,
                                 llmc::kir::DType::F16})
    for (CpuIsa isa : isas)
      for (bool wNK : {true, false})
        for (int64_t m : {1, 2, 3, 5, 8, 11})
          for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1},
                              {7, 13},
                              {37, 64},
                              {67, 129},
                              {45, 771}})
            for (bool accumulate : {false, true}) {
              checkProduct(isa, type, wNK, m, n, k, 0, n, accumulate, seed++);
              if (n > 4)
                checkProduct(isa, type, wNK, m, n, k, 1, n - 2, accumulate,
                             seed++);
            }
}

TEST(FewRowGemm, PathsAgreeOnLargeShape) {
  // A decode-sized product (GPT-2's c_fc at one row) on every path.
  for (llmc::kir::DType type : {llmc::kir::DType::F32, llmc::kir::DType::BF16,
                                 llmc::kir::DType::F16})
    for (CpuIsa isa : cpuIsasThisCpuRuns())
      for (bool wNK : {true, false})
        checkProduct(isa, type, wNK, 1, 3072, 768, 0, 3072, false, 99);
}

} // namespace
