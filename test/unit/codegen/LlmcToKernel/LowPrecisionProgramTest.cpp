// f16 and bf16 programs on the CPU executor, each checked against a
// reference computed from the same (rounded) inputs:
//  - GEMMs (matmul folding rows, batch_matmul with transpose_a, one
//    crossing the executor's m, n and k tiles): a double reference rounded
//    to the product's type; tolerance 1 ulp of that type plus 1e-5 of the
//    sum of |a b| (f32 accumulation in another order);
//  - casts and narrow ops inside fused kernels: every f16/bf16 value that
//    another op of the kernel reads is rounded to its type where it is
//    computed, so a fused kernel gives the unfused ops' bits (exact);
//  - element-wise ops (bias add, GELU, dropout) compute in f32 and round
//    each result: fused bit-identical to unfused, and within an ulp per op
//    of the f32 program;
//  - a GEMM epilogue on a narrow product (in place on a narrow C; on an f32
//    C when the epilogue casts the product up, which then rounds it as it
//    loads it): 2 ulps, each stage checked from the previous stage's output;
//  - attention forward and backward: double reference, 2 ulps of the
//    type plus 1e-3 (forward) / 1e-2 (backward) of the largest value;
//  - embedding gradients of narrow gradients: exact (f32 sums in position
//    order, rounded once);
//  - weight gradients X + cast(dY^T X) summed by the GEMM into the f32
//    gradient (beta = 1), unfused, GEMM-fused and pointwise-fused: 1e-5 of
//    the sum of |terms|;
//  - a tiny GPT training step under llmc-amp (fp16, bf16, with dropout):
//    loss and gradients against the f32 step (tolerances below, measured
//    and stated), and the arena's measured high-water mark equal to the
//    plan (the f16 staging of GEMMs and attention is outside the arena).
#include "test/unit/codegen/LlmcToKernel/CompileUtil.h"
#include "test/unit/codegen/LlmcToKernel/LowPrecisionTestUtil.h"
#include "test/unit/codegen/LlmcToKernel/TinyGptAmp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

using namespace llmc;
using namespace llmc::test;
using kir::DType;
using runtime::HostTensor;

namespace {

const char *typeName(DType type) { return kir::dtypeName(type); }

std::unique_ptr<runtime::CpuExecutor> executorFor(const kir::Program &program) {
  auto executor = makeExecutor(program, 2);
  if (!executor) {
    ADD_FAILURE() << llvm::toString(executor.takeError());
    return nullptr;
  }
  return std::move(*executor);
}

HostTensor outputOf(runtime::CpuExecutor &exec, llvm::StringRef name) {
  auto tensor = exec.output(name);
  if (!tensor) {
    ADD_FAILURE() << llvm::toString(tensor.takeError());
    return HostTensor();
  }
  return std::move(*tensor);
}

void set(runtime::CpuExecutor &exec, llvm::StringRef name,
         const HostTensor &tensor) {
  if (llvm::Error error = exec.setTensor(name, tensor))
    ADD_FAILURE() << llvm::toString(std::move(error));
}

using TypeAndFusion = std::tuple<DType, bool>;
std::string typeAndFusionName(
    const ::testing::TestParamInfo<TypeAndFusion> &info) {
  return std::string(typeName(std::get<0>(info.param))) +
         (std::get<1>(info.param) ? "_fused" : "_unfused");
}
std::string typeOnlyName(const ::testing::TestParamInfo<DType> &info) {
  return typeName(info.param);
}

//===----------------------------------------------------------------------===//
// GEMMs
//===----------------------------------------------------------------------===//

// p: [3, 100, 48] x [600, 48]^T, rows folded to m = 300 (two m tiles of the
// CPU executor, two n tiles); q: a batch of two [48, 40]^T x [48, 30];
// r: [20, 700] x [700, 520], k and n across tiles.
constexpr const char *kGemms = R"mlir(
func.func @f(%x: tensor<3x100x48xFT> {llmc.input = "x"},
             %w: tensor<600x48xFT> {llmc.input = "w"},
             %a: tensor<2x48x40xFT> {llmc.input = "a"},
             %b: tensor<2x48x30xFT> {llmc.input = "b"},
             %u: tensor<20x700xFT> {llmc.input = "u"},
             %v: tensor<700x520xFT> {llmc.input = "v"})
    -> (tensor<3x100x600xFT> {llmc.output = "p"},
        tensor<2x40x30xFT> {llmc.output = "q"},
        tensor<20x520xFT> {llmc.output = "r"}) {
  %p = llmc.matmul %x, %w {transpose_b} : tensor<3x100x48xFT>, tensor<600x48xFT>
  %q = llmc.batch_matmul %a, %b {transpose_a}
      : tensor<2x48x40xFT>, tensor<2x48x30xFT>
  %r = llmc.matmul %u, %v : tensor<20x700xFT>, tensor<700x520xFT>
  return %p, %q, %r
      : tensor<3x100x600xFT>, tensor<2x40x30xFT>, tensor<20x520xFT>
}
)mlir";

class LowPrecisionGemm : public ::testing::TestWithParam<TypeAndFusion> {};

/// Checks `c` (batch x m x n of `type`) against C[i, j] = sum_k A(i, k)
/// B(k, j) in double, from element accessors: within an ulp of `type` of
/// the sum plus 1e-5 of the sum of |terms| (f32 summation order).
template <typename AAt, typename BAt>
void checkProduct(const HostTensor &c, DType type, bool fuse,
                  const char *name, int64_t batch, int64_t m, int64_t n,
                  int64_t k, AAt aAt, BAt bAt) {
  ASSERT_EQ(c.dtype, type);
  std::vector<double> got = valuesOf(c);
  double worst = 0;
  for (int64_t bt = 0; bt < batch; ++bt)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t l = 0; l < k; ++l) {
          double term = aAt(bt, i, l) * bAt(bt, l, j);
          sum += term;
          magnitude += std::fabs(term);
        }
        double value = got[(bt * m + i) * n + j];
        double error = std::fabs(value - sum);
        double tolerance = ulpOf(type, sum) + 1e-5 * magnitude;
        ASSERT_LE(error, tolerance)
            << name << "[" << bt << ", " << i << ", " << j << "]: " << value
            << " vs " << sum;
        worst = std::max(worst, error / ulpOf(type, sum));
      }
  std::printf("[ %s %s ] %s: worst error %.2f ulp\n", typeName(type),
              fuse ? "fused" : "unfused", name, worst);
}

TEST_P(LowPrecisionGemm, MatchesRoundedDoubleProducts) {
  auto [type, fuse] = GetParam();
  mlir::MLIRContext context;
  auto program = compileFunction(context, instantiate(kGemms, type), "f", fuse);
  ASSERT_TRUE(mlir::succeeded(program));
  auto gemms = stepsOf(*program, kir::StepKind::Gemm);
  ASSERT_EQ(gemms.size(), 3u);
  for (const kir::Step *step : gemms) {
    EXPECT_EQ(dtypeOf(*program, step->gemm.a), type);
    EXPECT_EQ(dtypeOf(*program, step->gemm.b), type);
    EXPECT_EQ(dtypeOf(*program, step->gemm.c), type); // the product's type
  }
  std::mt19937 rng(11);
  std::map<std::string, HostTensor> in = {
      {"x", randomTensor(type, {3, 100, 48}, rng)},
      {"w", randomTensor(type, {600, 48}, rng)},
      {"a", randomTensor(type, {2, 48, 40}, rng)},
      {"b", randomTensor(type, {2, 48, 30}, rng)},
      {"u", randomTensor(type, {20, 700}, rng)},
      {"v", randomTensor(type, {700, 520}, rng)}};
  auto exec = executorFor(*program);
  ASSERT_TRUE(exec);
  for (auto &[name, tensor] : in)
    set(*exec, name, tensor);
  ASSERT_FALSE(bool(exec->run()));

  auto check = [&](const char *name, int64_t batch, int64_t m, int64_t n,
                   int64_t k, auto aAt, auto bAt) {
    checkProduct(outputOf(*exec, name), type, fuse, name, batch, m, n, k,
                 aAt, bAt);
  };
  std::vector<double> x = valuesOf(in["x"]), w = valuesOf(in["w"]),
                      a = valuesOf(in["a"]), b = valuesOf(in["b"]),
                      u = valuesOf(in["u"]), v = valuesOf(in["v"]);
  check(
      "p", 1, 300, 600, 48,
      [&](int64_t, int64_t i, int64_t l) { return x[i * 48 + l]; },
      [&](int64_t, int64_t l, int64_t j) { return w[j * 48 + l]; });
  check(
      "q", 2, 40, 30, 48,
      [&](int64_t bt, int64_t i, int64_t l) {
        return a[(bt * 48 + l) * 40 + i];
      },
      [&](int64_t bt, int64_t l, int64_t j) {
        return b[(bt * 48 + l) * 30 + j];
      });
  check(
      "r", 1, 20, 520, 700,
      [&](int64_t, int64_t i, int64_t l) { return u[i * 700 + l]; },
      [&](int64_t, int64_t l, int64_t j) { return v[l * 520 + j]; });
}

INSTANTIATE_TEST_SUITE_P(
    Types, LowPrecisionGemm,
    ::testing::Combine(::testing::Values(DType::F16, DType::BF16),
                       ::testing::Bool()),
    typeAndFusionName);

/// Runs `program` (grad.w [m, n] f32 += dY^T X, dY [..., m] and X [..., n]
/// of `type` with the given shapes) twice from random values and checks
/// grad.w against its start plus twice the double product.
void checkGradientSummedTwice(const kir::Program &program, DType type,
                              std::vector<int64_t> dyShape,
                              std::vector<int64_t> xShape, std::mt19937 &rng) {
  int64_t m = dyShape.back(), n = xShape.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < dyShape.size(); ++d)
    rows *= dyShape[d];
  HostTensor gw = randomTensor(DType::F32, {m, n}, rng);
  HostTensor dy = randomTensor(type, dyShape, rng);
  HostTensor x = randomTensor(type, xShape, rng);
  auto exec = executorFor(program);
  ASSERT_TRUE(exec);
  set(*exec, "grad.w", gw);
  set(*exec, "dy", dy);
  set(*exec, "x", x);
  // Two runs add the gradient twice.
  ASSERT_FALSE(bool(exec->run()));
  ASSERT_FALSE(bool(exec->run()));
  HostTensor got = outputOf(*exec, "grad.w");
  std::vector<double> dyv = valuesOf(dy), xv = valuesOf(x);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dw = 0, magnitude = 0;
      for (int64_t r = 0; r < rows; ++r) {
        dw += dyv[r * m + i] * xv[r * n + j];
        magnitude += std::fabs(dyv[r * m + i] * xv[r * n + j]);
      }
      double want = gw.f32()[i * n + j] + 2 * dw;
      ASSERT_NEAR(got.f32()[i * n + j], want, 1e-5 * (2 * magnitude + 1))
          << i << ", " << j;
    }
}

// Shapes past the CPU executor's staging blocks (stagedNarrowGemm: K
// blocks of 1024, narrow-C panels of at most 1024 rows of the shorter
// side; f16 always, bf16 where the CPU lacks vdpbf16ps or with
// LLMC_CPU_BF16_DOT=off): p = u v, k = 1100, two K blocks summed in f32
// before one rounding, B's column panels; q = x w^T, M the longer side,
// row panels of A against a shared transposed B; r = a^T b, 1100 rows of a
// transposed A shared in two blocks; g += dy^T x into f32 state, k = 1100
// in two blocks, accumulated twice.
constexpr const char *kStagedGemms = R"mlir(
func.func @f(%u: tensor<40x1100xFT> {llmc.input = "u"},
             %v: tensor<1100x300xFT> {llmc.input = "v"},
             %x: tensor<1300x72xFT> {llmc.input = "x"},
             %w: tensor<200x72xFT> {llmc.input = "w"},
             %a: tensor<24x1100xFT> {llmc.input = "a"},
             %b: tensor<24x1150xFT> {llmc.input = "b"})
    -> (tensor<40x300xFT> {llmc.output = "p"},
        tensor<1300x200xFT> {llmc.output = "q"},
        tensor<1100x1150xFT> {llmc.output = "r"}) {
  %p = llmc.matmul %u, %v : tensor<40x1100xFT>, tensor<1100x300xFT>
  %q = llmc.matmul %x, %w {transpose_b} : tensor<1300x72xFT>, tensor<200x72xFT>
  %r = llmc.matmul %a, %b {transpose_a} : tensor<24x1100xFT>, tensor<24x1150xFT>
  return %p, %q, %r
      : tensor<40x300xFT>, tensor<1300x200xFT>, tensor<1100x1150xFT>
}
func.func @grad(%gw: tensor<70x90xf32> {llmc.state = "grad.w"},
                %dy: tensor<1100x70xFT> {llmc.input = "dy"},
                %x: tensor<1100x90xFT> {llmc.input = "x"})
    -> (tensor<70x90xf32> {llmc.updates = "grad.w"}) {
  %dw = llmc.matmul %dy, %x {transpose_a} : tensor<1100x70xFT>, tensor<1100x90xFT>
  %dwf = llmc.cast %dw : tensor<70x90xFT> -> tensor<70x90xf32>
  %w1 = llmc.add %gw, %dwf : tensor<70x90xf32>, tensor<70x90xf32>
  return %w1 : tensor<70x90xf32>
}
)mlir";

class StagedNarrowGemm : public ::testing::TestWithParam<DType> {};

TEST_P(StagedNarrowGemm, BlocksMatchRoundedDoubleProducts) {
  DType type = GetParam();
  mlir::MLIRContext context;
  std::string source = instantiate(kStagedGemms, type);
  auto program = compileFunction(context, source, "f", false);
  ASSERT_TRUE(mlir::succeeded(program));
  ASSERT_EQ(stepsOf(*program, kir::StepKind::Gemm).size(), 3u);
  std::mt19937 rng(23);
  std::map<std::string, HostTensor> in = {
      {"u", randomTensor(type, {40, 1100}, rng)},
      {"v", randomTensor(type, {1100, 300}, rng)},
      {"x", randomTensor(type, {1300, 72}, rng)},
      {"w", randomTensor(type, {200, 72}, rng)},
      {"a", randomTensor(type, {24, 1100}, rng)},
      {"b", randomTensor(type, {24, 1150}, rng)}};
  auto exec = executorFor(*program);
  ASSERT_TRUE(exec);
  for (auto &[name, tensor] : in)
    set(*exec, name, tensor);
  ASSERT_FALSE(bool(exec->run()));
  std::vector<double> u = valuesOf(in["u"]), v = valuesOf(in["v"]),
                      x = valuesOf(in["x"]), w = valuesOf(in["w"]),
                      a = valuesOf(in["a"]), b = valuesOf(in["b"]);
  checkProduct(
      outputOf(*exec, "p"), type, false, "p", 1, 40, 300, 1100,
      [&](int64_t, int64_t i, int64_t l) { return u[i * 1100 + l]; },
      [&](int64_t, int64_t l, int64_t j) { return v[l * 300 + j]; });
  checkProduct(
      outputOf(*exec, "q"), type, false, "q", 1, 1300, 200, 72,
      [&](int64_t, int64_t i, int64_t l) { return x[i * 72 + l]; },
      [&](int64_t, int64_t l, int64_t j) { return w[j * 72 + l]; });
  checkProduct(
      outputOf(*exec, "r"), type, false, "r", 1, 1100, 1150, 24,
      [&](int64_t, int64_t i, int64_t l) { return a[l * 1100 + i]; },
      [&](int64_t, int64_t l, int64_t j) { return b[l * 1150 + j]; });

  // The weight gradient: one accumulating GEMM into the f32 state.
  auto grad = compileFunction(context, source, "grad", true);
  ASSERT_TRUE(mlir::succeeded(grad));
  ASSERT_EQ(grad->steps.size(), 1u);
  ASSERT_TRUE(grad->steps[0].gemm.accumulate);
  checkGradientSummedTwice(*grad, type, {1100, 70}, {1100, 90}, rng);
}

INSTANTIATE_TEST_SUITE_P(Types, StagedNarrowGemm,
                         ::testing::Values(DType::F16, DType::BF16),
                         typeOnlyName);

//===----------------------------------------------------------------------===//
// Casts and element-wise ops inside kernels
//===----------------------------------------------------------------------===//

// c = cast(x) to f16 is used again (squared) in the kernel and returned;
// hb = cast(h) from f16 to bf16 is doubled. Unfused, each op is a kernel
// whose store rounds: the square is stored as f16, z = f16(f32(c)^2).
// Fused, the kernel rounds c, the f16 square and hb where they are computed
// (two RoundF16, one RoundBF16; s is only stored, the store rounds it), so
// it gives the same bits: z = f16(f32(c)^2) (not f32(c)^2, 22 significant
// bits), s = 2 * bf16(h) (exact).
constexpr const char *kCasts = R"mlir(
func.func @f(%x: tensor<4x100xf32> {llmc.input = "x"},
             %h: tensor<4x100xf16> {llmc.input = "h"})
    -> (tensor<4x100xf32> {llmc.output = "z"},
        tensor<4x100xf16> {llmc.output = "c"},
        tensor<4x100xbf16> {llmc.output = "s"}) {
  %c = llmc.cast %x : tensor<4x100xf32> -> tensor<4x100xf16>
  %m = llmc.mul %c, %c : tensor<4x100xf16>, tensor<4x100xf16>
  %z = llmc.cast %m : tensor<4x100xf16> -> tensor<4x100xf32>
  %hb = llmc.cast %h : tensor<4x100xf16> -> tensor<4x100xbf16>
  %s = llmc.add %hb, %hb : tensor<4x100xbf16>, tensor<4x100xbf16>
  return %z, %c, %s : tensor<4x100xf32>, tensor<4x100xf16>, tensor<4x100xbf16>
}
)mlir";

class CastsInsideKernels : public ::testing::TestWithParam<bool> {};

TEST_P(CastsInsideKernels, RoundWhereTheCastSays) {
  bool fuse = GetParam();
  mlir::MLIRContext context;
  auto program = compileFunction(context, kCasts, "f", fuse);
  ASSERT_TRUE(mlir::succeeded(program));
  EXPECT_EQ(countOps(*program, kir::Op::RoundF16), fuse ? 2 : 0);
  EXPECT_EQ(countOps(*program, kir::Op::RoundBF16), fuse ? 1 : 0);

  std::mt19937 rng(3);
  HostTensor x = randomTensor(DType::F32, {4, 100}, rng, 3.0f);
  // Some values that f16 rounds visibly, ties included.
  x.f32()[0] = 1.0f + 0x1p-11f;
  x.f32()[1] = 1.0f + 3 * 0x1p-11f;
  x.f32()[2] = 70000.0f; // overflows f16: infinity, squared infinity
  x.f32()[3] = 0x1p-25f; // underflows f16 to 0
  HostTensor h = randomTensor(DType::F16, {4, 100}, rng, 100.0f);
  auto exec = executorFor(*program);
  ASSERT_TRUE(exec);
  set(*exec, "x", x);
  set(*exec, "h", h);
  ASSERT_FALSE(bool(exec->run()));
  HostTensor z = outputOf(*exec, "z"), c = outputOf(*exec, "c"),
             s = outputOf(*exec, "s");
  std::vector<float> hv = h.toF32();
  for (int64_t i = 0; i < 400; ++i) {
    float rounded = roundTo(DType::F16, x.f32()[i]);
    ASSERT_EQ(c.u16()[i], runtime::floatToHalf(x.f32()[i])) << i;
    float want = roundTo(DType::F16, rounded * rounded);
    ASSERT_TRUE(std::memcmp(&z.f32()[i], &want, 4) == 0)
        << i << ": " << z.f32()[i] << " vs " << want;
    ASSERT_EQ(s.u16()[i],
              runtime::floatToBFloat16(2.0f * roundTo(DType::BF16, hv[i])))
        << i;
  }
  EXPECT_TRUE(std::isinf(z.f32()[2]));
  EXPECT_EQ(z.f32()[3], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(FusedAndUnfused, CastsInsideKernels,
                         ::testing::Bool());

// A bias add, GELU and dropout of one type: one fused kernel that computes
// in f32 and rounds the add and the GELU to the type as it computes them
// (the dropout's result at the store), so it gives the bits of the three
// ops unfused, each a kernel that stores its result rounded. Against the
// f32 program (same inputs, same mask): three roundings of half an ulp of
// at most |x| + |b| each (|gelu'| < 1.13, |gelu(a)| <= |a|), scaled by the
// dropout's 1 / (1 - rate); checked against 3 such ulps.
constexpr const char *kPointwise = R"mlir(
func.func @f(%x: tensor<6x80xFT> {llmc.input = "x"},
             %b: tensor<80xFT> {llmc.input = "b"})
    -> (tensor<6x80xFT> {llmc.output = "y"}) {
  %a = llmc.add %x, %b : tensor<6x80xFT>, tensor<80xFT>
  %g = llmc.gelu %a approximate = tanh : tensor<6x80xFT>
  %d = llmc.dropout %g {rate = 2.500000e-01 : f32, stream = 1 : i64}
      : tensor<6x80xFT>
  return %d : tensor<6x80xFT>
}
)mlir";

class PointwiseLowPrecision : public ::testing::TestWithParam<DType> {};

TEST_P(PointwiseLowPrecision, FusedGivesTheUnfusedBits) {
  DType type = GetParam();
  std::mt19937 rng(9);
  HostTensor x = randomTensor(type, {6, 80}, rng, 4.0f);
  HostTensor b = randomTensor(type, {80}, rng, 1.0f);
  auto run = [&](DType as, bool fuse) -> HostTensor {
    mlir::MLIRContext context;
    auto program =
        compileFunction(context, instantiate(kPointwise, as), "f", fuse);
    EXPECT_TRUE(mlir::succeeded(program));
    if (mlir::failed(program))
      return {};
    EXPECT_EQ(stepsOf(*program, kir::StepKind::Kernel).size(), fuse ? 1u : 3u);
    // Fused: the add and the GELU rounded in the kernel.
    if (fuse && as != DType::F32) {
      EXPECT_EQ(countOps(*program, as == DType::F16 ? kir::Op::RoundF16
                                                    : kir::Op::RoundBF16),
                2);
    }
    auto exec = executorFor(*program);
    EXPECT_TRUE(exec);
    if (!exec)
      return {};
    set(*exec, "x", as == type ? x : widened(x));
    set(*exec, "b", as == type ? b : widened(b));
    exec->setRng(77, 3);
    EXPECT_FALSE(bool(exec->run()));
    return outputOf(*exec, "y");
  };
  HostTensor fused = run(type, true), unfused = run(type, false);
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_TRUE(fused == unfused);

  std::vector<float> reference = run(DType::F32, true).f32();
  std::vector<float> narrow = fused.toF32(), xs = x.toF32(), bs = b.toF32();
  for (size_t i = 0; i < reference.size(); ++i) {
    double bound = std::fabs(xs[i]) + std::fabs(bs[i % 80]);
    double tolerance = 3 * ulpOf(type, bound) / (1 - 0.25);
    ASSERT_LE(std::fabs(narrow[i] - reference[i]), tolerance)
        << i << ": " << narrow[i] << " vs " << reference[i];
  }
  int64_t dropped = llvm::count(reference, 0.0f);
  EXPECT_GT(dropped, 40); // a quarter of 480, about
  EXPECT_LT(dropped, 200);
}

INSTANTIATE_TEST_SUITE_P(Types, PointwiseLowPrecision,
                         ::testing::Values(DType::F16, DType::BF16),
                         typeOnlyName);

//===----------------------------------------------------------------------===//
// GEMM epilogues on narrow products
//===----------------------------------------------------------------------===//

// g = gelu(x W^T + b), all of one narrow type: C has that type and the
// epilogue runs on it in place. o = f32(g W2^T) + r: the epilogue casts the
// product up, so C is f32 and the epilogue rounds the product as it loads
// it (the IR's narrow product), then adds the f32 residual in place.
constexpr const char *kEpilogues = R"mlir(
func.func @f(%x: tensor<2x24x32xFT> {llmc.input = "x"},
             %w: tensor<64x32xFT> {llmc.input = "w"},
             %b: tensor<64xFT> {llmc.input = "b"},
             %w2: tensor<16x64xFT> {llmc.input = "w2"},
             %r: tensor<2x24x16xf32> {llmc.input = "r"})
    -> (tensor<2x24x64xFT> {llmc.output = "g"},
        tensor<2x24x16xf32> {llmc.output = "o"}) {
  %p = llmc.matmul %x, %w {transpose_b} : tensor<2x24x32xFT>, tensor<64x32xFT>
  %pb = llmc.add %p, %b : tensor<2x24x64xFT>, tensor<64xFT>
  %g = llmc.gelu %pb approximate = tanh : tensor<2x24x64xFT>
  %l = llmc.matmul %g, %w2 {transpose_b} : tensor<2x24x64xFT>, tensor<16x64xFT>
  %lf = llmc.cast %l : tensor<2x24x16xFT> -> tensor<2x24x16xf32>
  %o = llmc.add %lf, %r : tensor<2x24x16xf32>, tensor<2x24x16xf32>
  return %g, %o : tensor<2x24x64xFT>, tensor<2x24x16xf32>
}
)mlir";

class NarrowEpilogue : public ::testing::TestWithParam<DType> {};

TEST_P(NarrowEpilogue, RunsInPlaceAndRoundsTheProduct) {
  DType type = GetParam();
  mlir::MLIRContext context;
  auto program = compileFunction(context, instantiate(kEpilogues, type), "f");
  ASSERT_TRUE(mlir::succeeded(program));
  auto gemms = stepsOf(*program, kir::StepKind::Gemm);
  ASSERT_EQ(gemms.size(), 2u);
  // Both epilogues store into C.
  for (const kir::Step *step : gemms) {
    ASSERT_GE(step->gemm.epilogue, 0);
    const kir::Kernel &epilogue = program->kernels[step->gemm.epilogue];
    for (const kir::Instr &instr : epilogue.body) {
      if (instr.op == kir::Op::Store) {
        EXPECT_EQ(epilogue.operands[instr.operand].buffer,
                  step->gemm.c.buffer);
      }
    }
  }
  EXPECT_EQ(dtypeOf(*program, gemms[0]->gemm.c), type);
  EXPECT_EQ(dtypeOf(*program, gemms[1]->gemm.c), DType::F32);
  kir::Op round = type == DType::F16 ? kir::Op::RoundF16 : kir::Op::RoundBF16;
  const kir::Kernel &second = program->kernels[gemms[1]->gemm.epilogue];
  EXPECT_TRUE(llvm::any_of(second.body, [&](const kir::Instr &instr) {
    return instr.op == round &&
           second.body[instr.args[0]].op == kir::Op::Load;
  }));

  std::mt19937 rng(21);
  std::map<std::string, HostTensor> in = {
      {"x", randomTensor(type, {2, 24, 32}, rng)},
      {"w", randomTensor(type, {64, 32}, rng, 0.5f)},
      {"b", randomTensor(type, {64}, rng)},
      {"w2", randomTensor(type, {16, 64}, rng, 0.5f)},
      {"r", randomTensor(DType::F32, {2, 24, 16}, rng)}};
  auto exec = executorFor(*program);
  ASSERT_TRUE(exec);
  for (auto &[name, tensor] : in)
    set(*exec, name, tensor);
  ASSERT_FALSE(bool(exec->run()));
  std::vector<double> x = valuesOf(in["x"]), w = valuesOf(in["w"]),
                      b = valuesOf(in["b"]), w2 = valuesOf(in["w2"]),
                      r = valuesOf(in["r"]);
  HostTensor g = outputOf(*exec, "g"), o = outputOf(*exec, "o");
  std::vector<double> gv = valuesOf(g), ov = valuesOf(o);
  auto gelu = [](double v) {
    return 0.5 * v *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  // g = round(gelu(round(p) + b)): the product's rounding may differ by an
  // ulp from the double sum's (f32 accumulation order), and GELU's slope is
  // at most about 1.13: 2 ulps of the larger of |g| and |p + b|.
  for (int64_t row = 0; row < 48; ++row)
    for (int64_t j = 0; j < 64; ++j) {
      double p = 0;
      for (int64_t l = 0; l < 32; ++l)
        p += x[row * 32 + l] * w[j * 32 + l];
      double pre = roundTo(type, float(p)) + b[j];
      double want = gelu(pre);
      double got = gv[row * 64 + j];
      double scale =
          std::max({std::fabs(want), std::fabs(pre), std::fabs(p)});
      ASSERT_LE(std::fabs(got - want), 2 * ulpOf(type, scale) + 1e-6)
          << "g[" << row << ", " << j << "]";
    }
  // o = round(g W2^T) + r, from the g the program produced: 1 ulp.
  for (int64_t row = 0; row < 48; ++row)
    for (int64_t j = 0; j < 16; ++j) {
      double l = 0, magnitude = 0;
      for (int64_t c = 0; c < 64; ++c) {
        l += gv[row * 64 + c] * w2[j * 64 + c];
        magnitude += std::fabs(gv[row * 64 + c] * w2[j * 64 + c]);
      }
      double want = l + r[row * 16 + j];
      double got = ov[row * 16 + j];
      ASSERT_LE(std::fabs(got - want), ulpOf(type, l) + 1e-5 * magnitude)
          << "o[" << row << ", " << j << "]";
    }
}

INSTANTIATE_TEST_SUITE_P(Types, NarrowEpilogue,
                         ::testing::Values(DType::F16, DType::BF16),
                         typeOnlyName);

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

constexpr const char *kAttention = R"mlir(
func.func @f(%q: tensor<2x3x17x16xFT> {llmc.input = "q"},
             %k: tensor<2x3x17x16xFT> {llmc.input = "k"},
             %v: tensor<2x3x17x16xFT> {llmc.input = "v"},
             %do: tensor<2x3x17x16xFT> {llmc.input = "do"})
    -> (tensor<2x3x17x16xFT> {llmc.output = "out"},
        tensor<2x3x17xf32> {llmc.output = "lse"},
        tensor<2x3x17x16xFT> {llmc.output = "dq"},
        tensor<2x3x17x16xFT> {llmc.output = "dk"},
        tensor<2x3x17x16xFT> {llmc.output = "dv"}) {
  %o, %lse = llmc.attention %q, %k, %v {causal, scale = 2.500000e-01 : f32}
      : tensor<2x3x17x16xFT>, tensor<2x3x17x16xFT>, tensor<2x3x17x16xFT>
  %dq, %dk, %dv = llmc.attention_grad %do, %q, %k, %v, %o, %lse
      {causal, scale = 2.500000e-01 : f32}
      : tensor<2x3x17x16xFT>, tensor<2x3x17x16xFT>, tensor<2x3x17x16xFT>,
        tensor<2x3x17x16xFT>, tensor<2x3x17x16xFT>, tensor<2x3x17xf32>
  return %o, %lse, %dq, %dk, %dv
      : tensor<2x3x17x16xFT>, tensor<2x3x17xf32>, tensor<2x3x17x16xFT>,
        tensor<2x3x17x16xFT>, tensor<2x3x17x16xFT>
}
)mlir";

class LowPrecisionAttention : public ::testing::TestWithParam<DType> {};

TEST_P(LowPrecisionAttention, ForwardAndGradientMatchDoubleReference) {
  DType type = GetParam();
  mlir::MLIRContext context;
  auto program = compileFunction(context, instantiate(kAttention, type), "f");
  ASSERT_TRUE(mlir::succeeded(program));
  auto forward = stepsOf(*program, kir::StepKind::Attention);
  auto backward = stepsOf(*program, kir::StepKind::AttentionGrad);
  ASSERT_EQ(forward.size(), 1u);
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(dtypeOf(*program, forward[0]->attention.out), type);
  EXPECT_EQ(dtypeOf(*program, forward[0]->attention.lse), DType::F32);
  EXPECT_EQ(dtypeOf(*program, backward[0]->attentionGrad.dq), type);

  constexpr int64_t BH = 6, T = 17, D = 16;
  std::mt19937 rng(31);
  std::map<std::string, HostTensor> in;
  for (const char *name : {"q", "k", "v", "do"})
    in[name] = randomTensor(type, {2, 3, T, D}, rng, 2.0f);
  auto exec = executorFor(*program);
  ASSERT_TRUE(exec);
  for (auto &[name, tensor] : in)
    set(*exec, name, tensor);
  ASSERT_FALSE(bool(exec->run()));
  std::vector<double> q = valuesOf(in["q"]), k = valuesOf(in["k"]),
                      v = valuesOf(in["v"]), dout = valuesOf(in["do"]);
  std::vector<double> out = valuesOf(outputOf(*exec, "out")),
                      lse = valuesOf(outputOf(*exec, "lse")),
                      dq = valuesOf(outputOf(*exec, "dq")),
                      dk = valuesOf(outputOf(*exec, "dk")),
                      dv = valuesOf(outputOf(*exec, "dv"));
  // The reference, per (batch, head), in double: the backward from the
  // program's own out (delta = dout . out), as AttentionGradStep defines it.
  std::vector<double> wantOut(out.size()), wantDq(out.size(), 0),
      wantDk(out.size(), 0), wantDv(out.size(), 0), wantLse(lse.size());
  for (int64_t bh = 0; bh < BH; ++bh) {
    auto at = [&](int64_t t, int64_t d) { return (bh * T + t) * D + d; };
    std::vector<double> p(T * T, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      double max = -INFINITY;
      for (int64_t s = 0; s <= t; ++s) {
        double score = 0;
        for (int64_t d = 0; d < D; ++d)
          score += q[at(t, d)] * k[at(s, d)];
        p[t * T + s] = 0.25 * score;
        max = std::max(max, p[t * T + s]);
      }
      double sum = 0;
      for (int64_t s = 0; s <= t; ++s)
        sum += std::exp(p[t * T + s] - max);
      wantLse[bh * T + t] = max + std::log(sum);
      for (int64_t s = 0; s <= t; ++s)
        p[t * T + s] = std::exp(p[t * T + s] - wantLse[bh * T + t]);
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t s = 0; s <= t; ++s)
          o += p[t * T + s] * v[at(s, d)];
        wantOut[at(t, d)] = o;
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      double delta = 0;
      for (int64_t d = 0; d < D; ++d)
        delta += dout[at(t, d)] * out[at(t, d)];
      for (int64_t s = 0; s <= t; ++s) {
        double dp = 0;
        for (int64_t d = 0; d < D; ++d)
          dp += dout[at(t, d)] * v[at(s, d)];
        double ds = p[t * T + s] * (dp - delta);
        for (int64_t d = 0; d < D; ++d) {
          wantDv[at(s, d)] += p[t * T + s] * dout[at(t, d)];
          wantDq[at(t, d)] += 0.25 * ds * k[at(s, d)];
          wantDk[at(s, d)] += 0.25 * ds * q[at(t, d)];
        }
      }
    }
  }
  auto compare = [&](const char *name, const std::vector<double> &got,
                     const std::vector<double> &want, double relative,
                     DType as) {
    double largest = 0, worst = 0;
    for (double value : want)
      largest = std::max(largest, std::fabs(value));
    for (size_t i = 0; i < got.size(); ++i) {
      double error = std::fabs(got[i] - want[i]);
      double tolerance = 2 * ulpOf(as, want[i]) + relative * largest;
      ASSERT_LE(error, tolerance)
          << name << "[" << i << "]: " << got[i] << " vs " << want[i];
      worst = std::max(worst, error / largest);
    }
    std::printf("[ %s ] %s: worst error %.2e of the largest |value|\n",
                typeName(type), name, worst);
  };
  compare("out", out, wantOut, 1e-3, type);
  compare("lse", lse, wantLse, 1e-5, DType::F32);
  compare("dq", dq, wantDq, 1e-2, type);
  compare("dk", dk, wantDk, 1e-2, type);
  compare("dv", dv, wantDv, 1e-2, type);
}

INSTANTIATE_TEST_SUITE_P(Types, LowPrecisionAttention,
                         ::testing::Values(DType::F16, DType::BF16),
                         typeOnlyName);

//===----------------------------------------------------------------------===//
// Embedding gradients
//===----------------------------------------------------------------------===//

constexpr const char *kEmbeddingGrad = R"mlir(
func.func @f(%g: tensor<3x10x8xFT> {llmc.input = "g"},
             %ids: tensor<3x10xi32> {llmc.input = "ids"})
    -> (tensor<16x8xFT> {llmc.output = "table"}) {
  %e = llmc.embedding_grad %g, %ids
      : tensor<3x10x8xFT>, tensor<3x10xi32> -> tensor<16x8xFT>
  return %e : tensor<16x8xFT>
}
)mlir";

class LowPrecisionEmbeddingGrad : public ::testing::TestWithParam<DType> {};

TEST_P(LowPrecisionEmbeddingGrad, SumsInF32InPositionOrderAndRoundsOnce) {
  DType type = GetParam();
  mlir::MLIRContext context;
  auto program =
      compileFunction(context, instantiate(kEmbeddingGrad, type), "f");
  ASSERT_TRUE(mlir::succeeded(program));
  auto steps = stepsOf(*program, kir::StepKind::EmbeddingGrad);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(dtypeOf(*program, steps[0]->embeddingGrad.grad), DType::F32);
  std::mt19937 rng(41);
  HostTensor g = randomTensor(type, {3, 10, 8}, rng, 50.0f);
  HostTensor ids = HostTensor::zeros(DType::I32, {3, 10});
  for (int32_t &id : ids.i32())
    id = int32_t(rng() % 5); // few rows: long sums
  auto exec = executorFor(*program);
  ASSERT_TRUE(exec);
  set(*exec, "g", g);
  set(*exec, "ids", ids);
  ASSERT_FALSE(bool(exec->run()));
  std::vector<float> gv = g.toF32(), want(16 * 8, 0.0f);
  for (int64_t p = 0; p < 30; ++p)
    for (int64_t c = 0; c < 8; ++c)
      want[ids.i32()[p] * 8 + c] += gv[p * 8 + c];
  EXPECT_TRUE(outputOf(*exec, "table") ==
              HostTensor::fromF32(want, {16, 8}, type));
}

INSTANTIATE_TEST_SUITE_P(Types, LowPrecisionEmbeddingGrad,
                         ::testing::Values(DType::F16, DType::BF16),
                         typeOnlyName);

//===----------------------------------------------------------------------===//
// Weight gradients summed into f32 state
//===----------------------------------------------------------------------===//

// grad.w += f32(dY^T X) with narrow dY, X: the three forms code generation
// meets (unfused; a gemm fusion whose epilogue casts and adds; the cast and
// add in a pointwise fusion, written out here).
constexpr const char *kAccumulate = R"mlir(
func.func @grad(%gw: tensor<64x48xf32> {llmc.state = "grad.w"},
                %dy: tensor<2x30x64xFT> {llmc.input = "dy"},
                %x: tensor<2x30x48xFT> {llmc.input = "x"})
    -> (tensor<64x48xf32> {llmc.updates = "grad.w"}) {
  %dy2 = llmc.reshape %dy : tensor<2x30x64xFT> -> tensor<60x64xFT>
  %x2 = llmc.reshape %x : tensor<2x30x48xFT> -> tensor<60x48xFT>
  %dw = llmc.matmul %dy2, %x2 {transpose_a} : tensor<60x64xFT>, tensor<60x48xFT>
  %dwf = llmc.cast %dw : tensor<64x48xFT> -> tensor<64x48xf32>
  %w1 = llmc.add %gw, %dwf : tensor<64x48xf32>, tensor<64x48xf32>
  return %w1 : tensor<64x48xf32>
}
)mlir";

constexpr const char *kAccumulatePointwiseFusion = R"mlir(
func.func @grad(%gw: tensor<64x48xf32> {llmc.state = "grad.w"},
                %dy: tensor<2x30x64xFT> {llmc.input = "dy"},
                %x: tensor<2x30x48xFT> {llmc.input = "x"})
    -> (tensor<64x48xf32> {llmc.updates = "grad.w"}) {
  %dy2 = llmc.reshape %dy : tensor<2x30x64xFT> -> tensor<60x64xFT>
  %x2 = llmc.reshape %x : tensor<2x30x48xFT> -> tensor<60x48xFT>
  %dw = llmc.matmul %dy2, %x2 {transpose_a} : tensor<60x64xFT>, tensor<60x48xFT>
  %w1 = llmc.fusion "cast_add" "pointwise"(%dw, %gw)
      : (tensor<64x48xFT>, tensor<64x48xf32>) -> tensor<64x48xf32> {
  ^bb0(%a: tensor<64x48xFT>, %g: tensor<64x48xf32>):
    %c = llmc.cast %a : tensor<64x48xFT> -> tensor<64x48xf32>
    %s = llmc.add %g, %c : tensor<64x48xf32>, tensor<64x48xf32>
    llmc.yield %s : tensor<64x48xf32>
  }
  return %w1 : tensor<64x48xf32>
}
)mlir";

enum class AccumulateForm { Unfused, GemmFusion, PointwiseFusion };
using AccumulateCase = std::tuple<DType, AccumulateForm>;

class NarrowGradientAccumulation
    : public ::testing::TestWithParam<AccumulateCase> {};

TEST_P(NarrowGradientAccumulation, GemmSumsIntoTheF32State) {
  auto [type, form] = GetParam();
  mlir::MLIRContext context;
  const char *source = form == AccumulateForm::PointwiseFusion
                           ? kAccumulatePointwiseFusion
                           : kAccumulate;
  auto program = compileFunction(context, instantiate(source, type), "grad",
                                 form == AccumulateForm::GemmFusion);
  ASSERT_TRUE(mlir::succeeded(program));
  // One step: the GEMM, from narrow A and B into the f32 state; no cast,
  // add or copy kernels.
  int32_t state = program->states.at(0).buffer;
  ASSERT_EQ(program->steps.size(), 1u);
  const kir::Step &step = program->steps[0];
  ASSERT_EQ(step.kind, kir::StepKind::Gemm);
  EXPECT_TRUE(step.gemm.accumulate);
  EXPECT_EQ(step.gemm.c.buffer, state);
  EXPECT_EQ(dtypeOf(*program, step.gemm.a), type);
  EXPECT_EQ(dtypeOf(*program, step.gemm.b), type);
  EXPECT_EQ(program->arenaBytes, 0);

  std::mt19937 rng(51);
  checkGradientSummedTwice(*program, type, {2, 30, 64}, {2, 30, 48}, rng);
}

std::string accumulateName(
    const ::testing::TestParamInfo<AccumulateCase> &info) {
  static const char *forms[] = {"unfused", "gemm_fusion", "pointwise_fusion"};
  return std::string(typeName(std::get<0>(info.param))) + "_" +
         forms[int(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    Forms, NarrowGradientAccumulation,
    ::testing::Combine(::testing::Values(DType::F16, DType::BF16),
                       ::testing::Values(AccumulateForm::Unfused,
                                         AccumulateForm::GemmFusion,
                                         AccumulateForm::PointwiseFusion)),
    accumulateName);

//===----------------------------------------------------------------------===//
// A tiny GPT's training step under llmc-amp
//===----------------------------------------------------------------------===//

struct StepResult {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;
  int64_t plannedPeak = 0, measuredPeak = 0;
  kir::Program program;
};

/// Compiles the tiny model's @grad_step with llmc-amp at `precision`
/// ("" for none: f32) and runs it once from fixed parameters and data.
llvm::Expected<StepResult> runTinyStep(const char *precision) {
  constexpr int64_t batch = 2, seq = 32;
  auto program = compileTinyGpt(precision, "grad_step", batch, seq);
  if (!program)
    return program.takeError();
  StepResult result;
  result.program = *program;
  result.plannedPeak = program->arenaBytes;
  auto executor = makeExecutor(*program, 2);
  if (!executor)
    return executor.takeError();
  runtime::CpuExecutor &exec = **executor;
  // GPT-2's initialization with small noise on the biases and gains, so
  // that every gradient is exercised.
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const kir::Binding &param : exec.program().params) {
    const kir::Buffer &buffer = exec.program().buffers[param.buffer];
    HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
    bool gain = buffer.shape.size() == 1 &&
                llvm::StringRef(param.name).ends_with(".weight");
    for (float &value : tensor.f32())
      value = (gain ? 1.0f : 0.0f) + normal(rng);
    if (llvm::Error error = exec.setTensor(param.name, tensor))
      return error;
  }
  // Mixed precision: the 16-bit weight copies the step reads
  // (llmc-persistent-casts), made from the parameters just set.
  if (*precision) {
    auto casts = compileTinyGpt(precision, "cast_weights", batch, seq);
    if (!casts)
      return casts.takeError();
    auto castExecutor = makeExecutor(*casts, 2, exec.store());
    if (!castExecutor)
      return castExecutor.takeError();
    if (llvm::Error error = (*castExecutor)->run())
      return error;
  }
  for (const char *name : {"tokens", "targets"}) {
    HostTensor ids = HostTensor::zeros(DType::I32, {batch, seq});
    for (int32_t &id : ids.i32())
      id = int32_t(rng() % 96);
    if (llvm::Error error = exec.setTensor(name, ids))
      return error;
  }
  if (llvm::Error error =
          exec.setTensor("dloss", HostTensor::fromF32({1.0f}, {})))
    return error;
  exec.setRng(99, 1);
  llvm::Expected<int64_t> measured = exec.measureArenaHighWater();
  if (!measured)
    return measured.takeError();
  result.measuredPeak = *measured;
  llvm::Expected<HostTensor> loss = exec.output("loss");
  if (!loss)
    return loss.takeError();
  result.loss = loss->f32()[0];
  for (const kir::Binding &state : exec.program().states) {
    if (!llvm::StringRef(state.name).starts_with("grad."))
      continue; // the weight copies
    llvm::Expected<HostTensor> grad = exec.store()->get(state.name);
    if (!grad)
      return grad.takeError();
    result.grads[state.name] = grad->toF32();
  }
  return result;
}

class TinyGptAmp : public ::testing::TestWithParam<const char *> {};

TEST_P(TinyGptAmp, GradStepTracksF32) {
  const char *precision = GetParam();
  auto reference = runTinyStep("");
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  auto amp = runTinyStep(precision);
  ASSERT_TRUE(bool(amp)) << llvm::toString(amp.takeError());
  DType type = llvm::StringRef(precision) == "fp16" ? DType::F16 : DType::BF16;

  // Low precision runs where llmc-amp put it: narrow GEMMs (the weight
  // gradients summed into f32 state), attention and its gradient.
  int narrowGemms = 0, accumulating = 0;
  for (const kir::Step *step : stepsOf(amp->program, kir::StepKind::Gemm)) {
    narrowGemms += dtypeOf(amp->program, step->gemm.a) == type;
    accumulating += step->gemm.accumulate &&
                    dtypeOf(amp->program, step->gemm.a) == type;
  }
  EXPECT_GT(narrowGemms, 10);
  EXPECT_GE(accumulating, 8); // c_attn, c_proj, c_fc, mlp c_proj per layer
  for (const kir::Step *step :
       stepsOf(amp->program, kir::StepKind::AttentionGrad))
    EXPECT_EQ(dtypeOf(amp->program, step->attentionGrad.q), type);

  // The measured arena peak is the plan (staging is outside the arena).
  EXPECT_EQ(amp->measuredPeak, amp->plannedPeak);
  EXPECT_EQ(reference->measuredPeak, reference->plannedPeak);
  std::printf("[ tiny GPT %s ] loss %.6f (f32 %.6f); arena %lld B (f32 %lld "
              "B)\n",
              precision, amp->loss, reference->loss,
              (long long)amp->plannedPeak, (long long)reference->plannedPeak);

  // Tolerances, about 5x what this run measures (loss: 4e-6 relative in
  // f16, 2e-5 in bf16; worst gradient relative L2 error 9e-4 in f16, 1e-2
  // in bf16): the inputs of every product are rounded to 11 (8)
  // significant bits, and the errors compound over two layers and back.
  double lossTolerance = type == DType::F16 ? 1e-4 : 5e-4;
  double gradTolerance = type == DType::F16 ? 5e-3 : 5e-2;
  EXPECT_NEAR(amp->loss, reference->loss, lossTolerance * reference->loss);
  double worst = 0;
  std::string worstName;
  for (auto &[name, want] : reference->grads) {
    const std::vector<float> &got = amp->grads.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    double error = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << name << "[" << i << "]";
      error += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      norm += double(want[i]) * want[i];
    }
    double relative = std::sqrt(error / std::max(norm, 1e-30));
    EXPECT_LE(relative, gradTolerance) << name;
    if (relative > worst) {
      worst = relative;
      worstName = name;
    }
  }
  std::printf("[ tiny GPT %s ] worst gradient relative L2 error %.3e (%s)\n",
              precision, worst, worstName.c_str());
}

INSTANTIATE_TEST_SUITE_P(Precisions, TinyGptAmp,
                         ::testing::Values("fp16", "bf16"),
                         [](const auto &info) {
                           return std::string(info.param);
                         });

} // namespace

