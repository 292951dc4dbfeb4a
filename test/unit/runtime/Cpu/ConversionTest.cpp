// Round-to-nearest-even conversions between f32 and f16/bf16, bit for bit,
// everywhere llmc does them on the CPU: the scalar reference
// (runtime/Weights/Weights.h), the executor's bulk conversions
// (runtime/Cpu/LowPrecision.h, F16C / AVX-512 BF16 where the CPU has them)
// and JIT-compiled kernels (f16/bf16 stores, and the RoundF16/RoundBF16
// ops that casts inside a kernel lower to). Edge cases: ties (to even),
// the largest finite values and overflow to infinity, f16 subnormals and
// the underflow ties around them, f32 subnormals (bf16 keeps them), signed
// zeros and infinities, all exact. NaNs: the reference and the bulk
// conversions quiet them keeping sign and top payload (F16C's widening
// quiets a signaling f16 NaN, the reference keeps it signaling: equal but
// for the quiet bit); kernel stores give some NaN (the bf16 expansion in
// the CPU kernels and CUDA's conversions canonicalize); RoundF16 and
// RoundBF16 give the one quiet NaN 0x7FC00000 on every target.
#include "test/unit/codegen/KernelToCpu/KernelTestUtil.h"
#include "test/unit/codegen/LlmcToKernel/LowPrecisionTestUtil.h"

#include "runtime/Cpu/LowPrecision.h"
#include "runtime/Weights/Weights.h"

#include "llvm/ADT/bit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>

using namespace llmc;
using kir::DType;
using kir::Op;

namespace {

float fromBits(uint32_t bits) { return llvm::bit_cast<float>(bits); }
uint32_t toBits(float value) { return llvm::bit_cast<uint32_t>(value); }

/// (f32 input, expected f16 bits).
const std::pair<uint32_t, uint16_t> kHalfCases[] = {
    {0x3f800000, 0x3c00}, // 1
    {0x3f801000, 0x3c00}, // 1 + 2^-11: a tie, to the even 1
    {0x3f803000, 0x3c02}, // 1 + 3 * 2^-11: a tie, to the even 1 + 2^-9
    {0x3f801001, 0x3c01}, // just above the tie: up
    {0x3f800fff, 0x3c00}, // just below: down
    {0xbf803000, 0xbc02}, // negative ties too
    {0x477fe000, 0x7bff}, // 65504, the largest f16
    {0x477fefff, 0x7bff}, // below 65520: still 65504
    {0x477ff000, 0x7c00}, // 65520: the tie rounds to infinity (even)
    {0x47800000, 0x7c00}, // 65536
    {0x7f7fffff, 0x7c00}, // the largest f32
    {0xc7800000, 0xfc00}, // -65536: -infinity
    {0x38800000, 0x0400}, // 2^-14, the smallest normal f16
    {0x387fc000, 0x03ff}, // 2^-14 - 2^-24, the largest subnormal
    {0x387fe000, 0x0400}, // between them, a tie: to the even 2^-14
    {0x33800000, 0x0001}, // 2^-24, the smallest subnormal
    {0x33000000, 0x0000}, // 2^-25: a tie with 0, to the even 0
    {0x33000001, 0x0001}, // just above: up
    {0x33c00000, 0x0002}, // 1.5 * 2^-24: a tie, to the even 2 * 2^-24
    {0x34200000, 0x0002}, // 2.5 * 2^-24: a tie, to the even 2 * 2^-24
    {0xb3c00000, 0x8002}, // negative subnormal tie
    {0x00000001, 0x0000}, // an f32 subnormal: 0
    {0x80000001, 0x8000}, // negative: -0
    {0x00000000, 0x0000}, // 0
    {0x80000000, 0x8000}, // -0
    {0x7f800000, 0x7c00}, // infinity
    {0xff800000, 0xfc00}, // -infinity
    {0x7fc00000, 0x7e00}, // the quiet NaN
    {0xffc00000, 0xfe00}, // negative NaN keeps its sign
    {0x7f800001, 0x7e00}, // a signaling NaN is quieted
    {0x7fd56000, 0x7eab}, // top payload bits kept
};

/// (f32 input, expected bf16 bits).
const std::pair<uint32_t, uint16_t> kBFloatCases[] = {
    {0x3f800000, 0x3f80}, // 1
    {0x3f808000, 0x3f80}, // 1 + 2^-8: a tie, to the even 1
    {0x3f818000, 0x3f82}, // 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
    {0x3f808001, 0x3f81}, // just above the tie: up
    {0xbf818000, 0xbf82}, // negative
    {0x7f7f0000, 0x7f7f}, // the largest bf16
    {0x7f7f7fff, 0x7f7f}, // below the tie: kept
    {0x7f7f8000, 0x7f80}, // the tie: to infinity (even)
    {0x7f7fffff, 0x7f80}, // the largest f32: infinity
    {0xff7fffff, 0xff80}, // and -infinity
    {0x00800000, 0x0080}, // the smallest normal f32
    {0x00010000, 0x0001}, // an f32 subnormal bf16 keeps
    {0x00008000, 0x0000}, // a subnormal tie with 0: 0
    {0x00018000, 0x0002}, // a subnormal tie: to even
    {0x00000001, 0x0000}, // the smallest f32 subnormal: 0
    {0x80018000, 0x8002}, // negative subnormal
    {0x007fffff, 0x0080}, // the largest subnormal rounds up to normal
    {0x80000000, 0x8000}, // -0
    {0x7f800000, 0x7f80}, // infinity
    {0xff800000, 0xff80}, // -infinity
    {0x7fc00000, 0x7fc0}, // the quiet NaN
    {0xffc00000, 0xffc0}, // negative NaN keeps its sign
    {0x7f800001, 0x7fc0}, // a signaling NaN is quieted
    {0x7f812345, 0x7fc1}, // top payload bits kept
};

TEST(ConversionTest, ScalarReferenceEdgeCases) {
  for (auto [input, want] : kHalfCases)
    EXPECT_EQ(runtime::floatToHalf(fromBits(input)), want)
        << std::hex << "f16 of 0x" << input;
  for (auto [input, want] : kBFloatCases)
    EXPECT_EQ(runtime::floatToBFloat16(fromBits(input)), want)
        << std::hex << "bf16 of 0x" << input;
}

/// Inputs for the bulk and kernel checks: the edge cases, then random bit
/// patterns (every exponent, NaNs included) and random values near the f16
/// range, so vector bodies and scalar tails both see every kind of input.
std::vector<float> conversionInputs() {
  std::vector<float> values;
  for (auto [input, want] : kHalfCases)
    values.push_back(fromBits(input));
  for (auto [input, want] : kBFloatCases)
    values.push_back(fromBits(input));
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i)
    values.push_back(fromBits(uint32_t(rng())));
  std::uniform_real_distribution<float> near(-70000.0f, 70000.0f);
  for (int i = 0; i < 5000; ++i)
    values.push_back(near(rng) * std::ldexp(1.0f, -int(rng() % 40)));
  values.push_back(1.0f); // an odd length: a scalar tail
  return values;
}

TEST(ConversionTest, BulkConversionsMatchTheScalarReference) {
  // F16C, AVX-512 BF16 or portable, whatever this CPU runs.
  std::vector<float> inputs = conversionInputs();
  int64_t n = inputs.size();
  for (DType type : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> narrow(n);
    cpu::narrowFromFloat(type, inputs.data(), n, narrow.data());
    for (int64_t i = 0; i < n; ++i) {
      uint16_t want = type == DType::F16 ? runtime::floatToHalf(inputs[i])
                                         : runtime::floatToBFloat16(inputs[i]);
      ASSERT_EQ(narrow[i], want)
          << kir::dtypeName(type) << " of 0x" << std::hex << toBits(inputs[i])
          << " (path " << cpu::lowPrecisionPath() << ")";
    }
  }
  // Widening every 16-bit pattern is exact, on every instruction set this
  // CPU runs (the 16-lane loops' tails go to the 8-lane ones, theirs to the
  // portable loop: the odd count reaches all three), and by the default
  // entry point.
  std::vector<uint16_t> all(65536 + 13);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = uint16_t(i);
  std::vector<std::optional<cpu::CpuIsa>> isas = {std::nullopt};
  for (cpu::CpuIsa isa : cpu::cpuIsasThisCpuRuns())
    isas.push_back(isa);
  for (std::optional<cpu::CpuIsa> isa : isas)
    for (DType type : {DType::F16, DType::BF16}) {
      std::vector<float> wide(all.size());
      if (isa)
        cpu::widenToFloat(*isa, type, all.data(), all.size(), wide.data());
      else
        cpu::widenToFloat(type, all.data(), all.size(), wide.data());
      for (size_t i = 0; i < all.size(); ++i) {
        float want = type == DType::F16 ? runtime::halfToFloat(all[i])
                                        : runtime::bfloat16ToFloat(all[i]);
        uint32_t quiet = std::isnan(want) ? 0x00400000u : 0u;
        ASSERT_EQ(toBits(wide[i]) | quiet, toBits(want) | quiet)
            << kir::dtypeName(type) << " 0x" << std::hex << all[i]
            << " at " << std::dec << i << ", isa "
            << (isa ? int(*isa) : -1);
      }
    }
  std::printf("[ conversions ] CPU path: %s; widened on %zu instruction "
              "sets\n",
              cpu::lowPrecisionPath(), isas.size() - 1);
}

/// What RoundF16/RoundBF16 give: the stored value widened, NaN canonical.
uint32_t roundedBits(DType type, float value) {
  if (std::isnan(value))
    return 0x7fc00000u;
  return toBits(test::roundTo(type, value));
}

/// One kernel over [1, n]: x (f32) -> f16 and bf16 stores, and RoundF16 /
/// RoundBF16 of x stored as f32. Buffers: 0 x, 1 f16, 2 bf16, 3 round f16,
/// 4 round bf16.
kir::Kernel conversionKernel(int64_t n) {
  test::KernelBuilder k("convert_edges", {1, n});
  int x = k.operand(0, DType::F32, {0, 1});
  int half = k.operand(1, DType::F16, {0, 1});
  int bf = k.operand(2, DType::BF16, {0, 1});
  int roundHalf = k.operand(3, DType::F32, {0, 1});
  int roundBf = k.operand(4, DType::F32, {0, 1});
  int32_t value = k.load(x);
  k.store(half, value);
  k.store(bf, value);
  k.store(roundHalf, k.unary(Op::RoundF16, value));
  k.store(roundBf, k.unary(Op::RoundBF16, value));
  return k.kernel;
}

TEST(ConversionTest, CpuKernelStoresAndRoundOpsRoundToNearestEven) {
  std::vector<float> inputs = conversionInputs();
  int64_t n = inputs.size();
  kir::Kernel kernel = conversionKernel(n);
  test::Compiled compiled = test::compileKernels({kernel});
  ASSERT_TRUE(compiled);
  std::vector<uint16_t> half(n), bf(n);
  std::vector<float> roundHalf(n), roundBf(n);
  compiled.run(kernel.name,
               {inputs.data(), half.data(), bf.data(), roundHalf.data(),
                roundBf.data()},
               0, 1);
  for (int64_t i = 0; i < n; ++i) {
    float x = inputs[i];
    // Stores: the reference's bits; a NaN of the type for a NaN.
    if (std::isnan(x)) {
      ASSERT_TRUE((half[i] & 0x7c00) == 0x7c00 && (half[i] & 0x03ff) != 0)
          << "f16 store of 0x" << std::hex << toBits(x);
      ASSERT_TRUE((bf[i] & 0x7f80) == 0x7f80 && (bf[i] & 0x007f) != 0)
          << "bf16 store of 0x" << std::hex << toBits(x);
    } else {
      ASSERT_EQ(half[i], runtime::floatToHalf(x))
          << "f16 store of 0x" << std::hex << toBits(x);
      ASSERT_EQ(bf[i], runtime::floatToBFloat16(x))
          << "bf16 store of 0x" << std::hex << toBits(x);
    }
    ASSERT_EQ(toBits(roundHalf[i]), roundedBits(DType::F16, x))
        << "RoundF16 of 0x" << std::hex << toBits(x);
    ASSERT_EQ(toBits(roundBf[i]), roundedBits(DType::BF16, x))
        << "RoundBF16 of 0x" << std::hex << toBits(x);
  }
}

TEST(ConversionTest, RoundOpsVerifyAndCountNoFlops) {
  kir::Kernel kernel = conversionKernel(8);
  EXPECT_EQ(kir::verifyKernel(kernel), "");
  EXPECT_EQ(kir::countFlops(kernel), 0);
  // They take one f32.
  kir::Kernel bad = kernel;
  bad.body[3].args = {};
  EXPECT_NE(kir::verifyKernel(bad).find("expects 1 arguments"),
            std::string::npos);
}

} // namespace
