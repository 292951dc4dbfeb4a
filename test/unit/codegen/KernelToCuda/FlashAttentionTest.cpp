// Flash attention kernels: NVRTC compiles them for sm_80 and sm_90 (head
// sizes 16, 64, 128; f32, f16, bf16; the tensor-core kernels, mma.sync
// m16n8k16, at 64 and 128 in f16 and bf16), and under the CPU emulation of
// CUDA (CudaEmulation.h beside this file, which emulates the mma
// fragments) forward and backward match a plain double-precision reference
// of kir::AttentionStep / AttentionGradStep on small odd shapes, with q, k, v
// strided views into one fused qkv buffer; and the forward over a KV cache
// (kvSeq keys, per-row positions) against the same kind of reference.
#include "test/unit/codegen/KernelToCuda/EmulatedFlash.h"

#include "codegen/KernelToCuda/CudaCompiler.h"
#include "codegen/KernelToCuda/FlashAttention.h"
#include "codegen/KernelToCuda/Nvrtc.h"
#include "runtime/Weights/Weights.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace llmc;
using namespace llmc::cuda;

namespace {

//===----------------------------------------------------------------------===//
// NVRTC
//===----------------------------------------------------------------------===//

TEST(FlashAttentionTest, NvrtcCompilesEveryVariantForSm80AndSm90) {
  std::string why;
  if (!nvrtcAvailable(&why))
    GTEST_SKIP() << "NVRTC not available: " << why;
  std::vector<FlashAttentionVariant> variants;
  // At 64 and 128, f16 and bf16 select the tensor-core kernels; their
  // CUDA-core kernels are compiled too (`scalar`).
  for (int64_t headDim : {16, 64, 128})
    for (kir::DType dtype : {kir::DType::F32, kir::DType::F16, kir::DType::BF16}) {
      variants.push_back({headDim, dtype});
      if (usesTensorCores(variants.back()))
        variants.push_back({headDim, dtype, /*scalar=*/true});
    }
  NvrtcOptions options;
  options.archs = {80, 90};
  options.ptxArch = 80;
  options.cacheEnabled = false; // compile for real, every time
  NvrtcStats stats;
  llvm::Expected<CudaBinaries> binaries = compileCuda(
      cuda::cudaLibrarySource(variants), "flash.cu", options, &stats);
  ASSERT_TRUE(bool(binaries)) << llvm::toString(binaries.takeError());
  ASSERT_EQ(binaries->cubins.size(), 2u);
  EXPECT_EQ(binaries->cubins[0].arch, 80);
  EXPECT_EQ(binaries->cubins[1].arch, 90);
  // Every kernel is in the PTX (extern "C": the names are not mangled).
  for (const FlashAttentionVariant &variant : variants)
    for (const std::string &name :
         {flashForwardName(variant), flashBackwardDkDvName(variant),
          flashBackwardDqName(variant)})
      EXPECT_NE(binaries->ptx.find(".entry " + name), std::string::npos)
          << name;
  EXPECT_NE(binaries->ptx.find(".entry llmc_embedding_grad_i32"),
            std::string::npos);
  // The tensor-core kernels' instructions.
  for (const char *type : {"f16", "bf16"}) {
    std::string mma = std::string("mma.sync.aligned.m16n8k16.row.col.f32.") +
                      type + "." + type + ".f32";
    EXPECT_NE(binaries->ptx.find(mma), std::string::npos) << mma;
    std::string cvt = std::string("cvt.rn.") + type + "x2.f32";
    EXPECT_NE(binaries->ptx.find(cvt), std::string::npos) << cvt;
  }
}

TEST(FlashAttentionTest, RejectsUnsupportedVariants) {
  std::string why;
  EXPECT_FALSE(isSupported({256, kir::DType::F32}, &why));
  EXPECT_NE(why.find("head sizes 1 to 128"), std::string::npos) << why;
  EXPECT_FALSE(isSupported({64, kir::DType::I32}, &why));
  EXPECT_TRUE(isSupported({13, kir::DType::BF16}, &why));
}

TEST(FlashAttentionTest, ArgumentBlockLayout) {
  // The source declares the same layout: 8-byte fields, then 4-byte ones.
  EXPECT_EQ(sizeof(AttentionViewArgs), 40u);
  EXPECT_EQ(sizeof(AttentionForwardArgs), 6 * 8 + 6 * 40 + 6 * 4u);
  EXPECT_EQ(sizeof(AttentionBackwardArgs), 9 * 8 + 9 * 40 + 6 * 4u);
}

//===----------------------------------------------------------------------===//
// Emulation
//===----------------------------------------------------------------------===//

using llmc::test::EmulatedFlash;

/// Host storage of one dtype: values as rounded by the dtype, and the raw
/// bytes the kernels read and write.
struct Storage {
  kir::DType dtype;
  std::vector<char> bytes;

  Storage(kir::DType dtype, int64_t count)
      : dtype(dtype), bytes(count * kir::dtypeBytes(dtype), 0) {}
  float get(int64_t i) const {
    if (dtype == kir::DType::F32)
      return reinterpret_cast<const float *>(bytes.data())[i];
    uint16_t bits = reinterpret_cast<const uint16_t *>(bytes.data())[i];
    return dtype == kir::DType::F16 ? runtime::halfToFloat(bits)
                                    : runtime::bfloat16ToFloat(bits);
  }
  void set(int64_t i, float value) {
    if (dtype == kir::DType::F32) {
      reinterpret_cast<float *>(bytes.data())[i] = value;
      return;
    }
    reinterpret_cast<uint16_t *>(bytes.data())[i] =
        dtype == kir::DType::F16 ? runtime::floatToHalf(value)
                                 : runtime::floatToBFloat16(value);
  }
  void *data() { return bytes.data(); }
};

/// Tolerance of a kernel's output against the double reference: f32
/// accumulation error (2e-5, 5e-5 on the tensor cores), plus one rounding
/// of the output to the storage type (u = 2^-11 for f16, 2^-8 for bf16,
/// twice the unit roundoff), plus on the tensor cores u times the sum of
/// |terms| of the product whose left operand is rounded to the storage type
/// before the mma (P for out and dv, dS for dq and dk): each rounded
/// element is off by at most u / 2 of itself.
struct Tolerance {
  double u = 0;
  bool tensorCores = false;

  Tolerance(const FlashAttentionVariant &variant)
      : u(variant.dtype == kir::DType::F32   ? 0.0
          : variant.dtype == kir::DType::F16 ? 1.0 / 2048
                                             : 1.0 / 256),
        tensorCores(usesTensorCores(variant)) {}
  bool near(double got, double want, double magnitude) const {
    double allowed = (tensorCores ? 5e-5 : 2e-5) + 2 * u * std::fabs(want) +
                     (tensorCores ? u * magnitude : 0.0);
    return std::fabs(got - want) <= allowed;
  }
};

/// Forward and backward of `variant` under the emulation on B x H heads of
/// T tokens, inputs uniform in [-range, range] (rounded to the dtype),
/// against a double-precision reference from the same stored inputs: q,
/// k, v strided views into one fused qkv buffer [B, T, 3, H, D], out and
/// dout [B, T, H, D], lse [B, H, T], dq, dk, dv [B, H, T, D]; every output
/// starts as a sentinel, so an element no thread writes fails.
void checkForwardBackward(const EmulatedFlash &module,
                          const FlashAttentionVariant &variant, int64_t B,
                          int64_t H, int64_t T, bool causal, float range) {
  const int64_t D = variant.headDim;
  const kir::DType dtype = variant.dtype;
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-range, range);
  Storage qkv(dtype, B * T * 3 * H * D), out(dtype, B * T * H * D),
      dout(dtype, B * T * H * D), dq(dtype, B * H * T * D),
      dk(dtype, B * H * T * D), dv(dtype, B * H * T * D);
  std::vector<float> lse(B * H * T, 1234.0f);
  for (int64_t i = 0; i < B * T * 3 * H * D; ++i)
    qkv.set(i, uniform(random));
  for (int64_t i = 0; i < B * T * H * D; ++i) {
    dout.set(i, uniform(random));
    out.set(i, 1234.0f);
  }
  for (int64_t i = 0; i < B * H * T * D; ++i)
    for (Storage *grad : {&dq, &dk, &dv})
      grad->set(i, 1234.0f);
  auto qkvAt = [&](int which, int64_t b, int64_t h, int64_t t, int64_t d) {
    return (((b * T + t) * 3 + which) * H + h) * D + d;
  };
  auto outAt = [&](int64_t b, int64_t h, int64_t t, int64_t d) {
    return ((b * T + t) * H + h) * D + d;
  };
  auto gradAt = [&](int64_t b, int64_t h, int64_t t, int64_t d) {
    return ((b * H + h) * T + t) * D + d;
  };
  const float scale = 1.0f / std::sqrt(float(D));

  // The double reference, from the stored (rounded) inputs, and per output
  // element the sum of |terms| of its second product (Tolerance).
  std::vector<double> refOut(B * T * H * D), refLse(B * H * T),
      refDq(B * H * T * D), refDk(B * H * T * D), refDv(B * H * T * D);
  std::vector<double> magOut(B * T * H * D), magDq(B * H * T * D),
      magDk(B * H * T * D), magDv(B * H * T * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> p(T * T, 0.0), dp(T * T, 0.0);
      for (int64_t t = 0; t < T; ++t) {
        int64_t visible = causal ? t + 1 : T;
        double max = -INFINITY;
        for (int64_t s = 0; s < visible; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(qkv.get(qkvAt(0, b, h, t, d))) *
                   qkv.get(qkvAt(1, b, h, s, d));
          p[t * T + s] = double(scale) * dot;
          max = std::max(max, p[t * T + s]);
        }
        double sum = 0;
        for (int64_t s = 0; s < visible; ++s)
          sum += std::exp(p[t * T + s] - max);
        for (int64_t s = 0; s < visible; ++s)
          p[t * T + s] = std::exp(p[t * T + s] - max) / sum;
        refLse[(b * H + h) * T + t] = max + std::log(sum);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0, mag = 0;
          for (int64_t s = 0; s < visible; ++s) {
            acc += p[t * T + s] * qkv.get(qkvAt(2, b, h, s, d));
            mag += p[t * T + s] * std::fabs(qkv.get(qkvAt(2, b, h, s, d)));
          }
          refOut[outAt(b, h, t, d)] = acc;
          magOut[outAt(b, h, t, d)] = mag;
        }
      }
      // Backward from the reference out rounded to the dtype, as the
      // kernels will read it.
      for (int64_t t = 0; t < T; ++t) {
        double delta = 0;
        for (int64_t d = 0; d < D; ++d) {
          Storage rounded(dtype, 1);
          rounded.set(0, float(refOut[outAt(b, h, t, d)]));
          delta += double(dout.get(outAt(b, h, t, d))) * rounded.get(0);
        }
        for (int64_t s = 0; s < T; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(dout.get(outAt(b, h, t, d))) *
                   qkv.get(qkvAt(2, b, h, s, d));
          dp[t * T + s] = p[t * T + s] * (dot - delta); // ds
        }
      }
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          double gq = 0, gk = 0, gv = 0, mq = 0, mk = 0, mv = 0;
          for (int64_t s = 0; s < T; ++s) {
            double k = qkv.get(qkvAt(1, b, h, s, d));
            double q = qkv.get(qkvAt(0, b, h, s, d));
            double o = dout.get(outAt(b, h, s, d));
            gq += dp[t * T + s] * k;
            mq += std::fabs(dp[t * T + s] * k);
            // Row t as a key here: sums over the queries s.
            gk += dp[s * T + t] * q;
            mk += std::fabs(dp[s * T + t] * q);
            gv += p[s * T + t] * o;
            mv += std::fabs(p[s * T + t] * o);
          }
          refDq[gradAt(b, h, t, d)] = scale * gq;
          refDk[gradAt(b, h, t, d)] = scale * gk;
          refDv[gradAt(b, h, t, d)] = gv;
          magDq[gradAt(b, h, t, d)] = scale * mq;
          magDk[gradAt(b, h, t, d)] = scale * mk;
          magDv[gradAt(b, h, t, d)] = mv;
        }
    }
  const Tolerance tolerance(variant);

  // Forward.
  AttentionViewArgs qView{0, T * 3 * H * D, D, 3 * H * D, 1};
  AttentionViewArgs kView = qView, vView = qView;
  kView.offset = H * D;
  vView.offset = 2 * H * D;
  AttentionViewArgs outView{0, T * H * D, D, H * D, 1};
  AttentionViewArgs lseView{0, H * T, T, 1, 0};
  AttentionViewArgs gradView{0, H * T * D, T * D, D, 1};
  AttentionForwardArgs forward;
  forward.q = forward.k = forward.v = qkv.data();
  forward.out = out.data();
  forward.lse = lse.data();
  forward.vq = qView;
  forward.vk = kView;
  forward.vv = vView;
  forward.vout = outView;
  forward.vlse = lseView;
  forward.batch = B;
  forward.heads = H;
  forward.seq = T;
  forward.causal = causal;
  forward.scale = scale;
  module.run(flashForwardName(variant), &forward,
             flashForwardLaunch(variant, B, H, T));
  int bad = 0;
  for (int64_t i = 0; i < B * T * H * D && bad < 5; ++i)
    if (!tolerance.near(out.get(i), refOut[i], magOut[i])) {
      ADD_FAILURE() << "out[" << i << "] = " << out.get(i) << ", expected "
                    << refOut[i];
      ++bad;
    }
  for (int64_t i = 0; i < B * H * T && bad < 5; ++i)
    if (!(std::fabs(lse[i] - refLse[i]) <=
          2e-5 * std::max(1.0, std::fabs(refLse[i])))) {
      ADD_FAILURE() << "lse[" << i << "] = " << lse[i] << ", expected "
                    << refLse[i];
      ++bad;
    }

  // Backward, from the reference out and lse.
  for (int64_t i = 0; i < B * T * H * D; ++i)
    out.set(i, float(refOut[i]));
  for (int64_t i = 0; i < B * H * T; ++i)
    lse[i] = float(refLse[i]);
  AttentionBackwardArgs backward;
  backward.dout = dout.data();
  backward.q = backward.k = backward.v = qkv.data();
  backward.out = out.data();
  backward.lse = lse.data();
  backward.dq = dq.data();
  backward.dk = dk.data();
  backward.dv = dv.data();
  backward.vdout = outView;
  backward.vq = qView;
  backward.vk = kView;
  backward.vv = vView;
  backward.vout = outView;
  backward.vlse = lseView;
  backward.vdq = backward.vdk = backward.vdv = gradView;
  backward.batch = B;
  backward.heads = H;
  backward.seq = T;
  backward.causal = causal;
  backward.scale = scale;
  module.run(flashBackwardDkDvName(variant), &backward,
             flashBackwardDkDvLaunch(variant, B, H, T));
  module.run(flashBackwardDqName(variant), &backward,
             flashBackwardDqLaunch(variant, B, H, T));
  for (auto [name, got, want, mag] :
       {std::tuple{"dq", &dq, &refDq, &magDq},
        std::tuple{"dk", &dk, &refDk, &magDk},
        std::tuple{"dv", &dv, &refDv, &magDv}})
    for (int64_t i = 0; i < B * H * T * D && bad < 5; ++i)
      if (!tolerance.near(got->get(i), (*want)[i], (*mag)[i])) {
        ADD_FAILURE() << name << "[" << i << "] = " << got->get(i)
                      << ", expected " << (*want)[i];
        ++bad;
      }
}

struct Case {
  kir::DType dtype;
  bool causal;
};

class FlashEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashEmulationTest, MatchesDoubleReference) {
  const Case param = GetParam();
  FlashAttentionVariant variant{16, param.dtype};
  std::string error;
  std::unique_ptr<EmulatedFlash> module = EmulatedFlash::build({variant}, error);
  ASSERT_TRUE(module) << error;
  checkForwardBackward(*module, variant, 2, 3, 13, param.causal, 1.0f);
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypes, FlashEmulationTest,
    ::testing::Values(Case{kir::DType::F32, true}, Case{kir::DType::F32, false},
                      Case{kir::DType::F16, true}, Case{kir::DType::F16, false},
                      Case{kir::DType::BF16, true},
                      Case{kir::DType::BF16, false}),
    [](const ::testing::TestParamInfo<Case> &info) {
      return std::string(kir::dtypeName(info.param.dtype)) +
             (info.param.causal ? "_causal" : "_full");
    });

//===----------------------------------------------------------------------===//
// Tensor cores (mma.sync m16n8k16)
//===----------------------------------------------------------------------===//

TEST(FlashTensorCoreTest, SelectedForF16AndBf16AtHeadSizes64And128) {
  for (kir::DType dtype : {kir::DType::F16, kir::DType::BF16})
    for (int64_t headDim : {64, 128}) {
      FlashAttentionVariant variant{headDim, dtype};
      EXPECT_TRUE(usesTensorCores(variant));
      EXPECT_EQ(flashForwardName(variant),
                "llmc_flash_tc_fwd_d" + std::to_string(headDim) + "_" +
                    kir::dtypeName(dtype));
      variant.scalar = true;
      EXPECT_FALSE(usesTensorCores(variant));
      EXPECT_EQ(flashBackwardDqName(variant),
                "llmc_flash_bwd_dq_d" + std::to_string(headDim) + "_" +
                    kir::dtypeName(dtype));
    }
  EXPECT_FALSE(usesTensorCores({64, kir::DType::F32}));
  EXPECT_FALSE(usesTensorCores({96, kir::DType::BF16}));
  EXPECT_FALSE(usesTensorCores({16, kir::DType::F16}));
  // A block of 64 query rows (forward, dq) or keys (dk/dv).
  CudaLaunch launch = flashForwardLaunch({64, kir::DType::BF16}, 2, 3, 130);
  EXPECT_EQ(launch.grid[0], 3);
  EXPECT_EQ(launch.grid[1], 6);
  EXPECT_EQ(launch.block[0], 128);
  EXPECT_EQ(flashBackwardDkDvLaunch({128, kir::DType::F16}, 1, 1, 64).grid[0],
            1);
  EXPECT_EQ(flashBackwardDqLaunch({128, kir::DType::F16}, 1, 1, 65).grid[0], 2);
}

struct TcCase {
  int64_t headDim;
  kir::DType dtype;
  bool causal;
};

class FlashTensorCoreEmulationTest : public ::testing::TestWithParam<TcCase> {
protected:
  /// One host build of every tensor-core variant for the whole suite.
  static void SetUpTestSuite() {
    std::vector<FlashAttentionVariant> variants;
    for (int64_t headDim : {64, 128})
      for (kir::DType dtype : {kir::DType::F16, kir::DType::BF16})
        variants.push_back({headDim, dtype});
    module = EmulatedFlash::build(variants, buildError).release();
  }
  static void TearDownTestSuite() {
    delete module;
    module = nullptr;
  }
  static EmulatedFlash *module;
  static std::string buildError;
};
EmulatedFlash *FlashTensorCoreEmulationTest::module = nullptr;
std::string FlashTensorCoreEmulationTest::buildError;

// T = 80: one full tile of 64 and a ragged one (and 2.5 tiles of 32); two
// batch rows of two heads; inputs in [-2, 2] so that the softmax is far
// from uniform (scores up to several units).
TEST_P(FlashTensorCoreEmulationTest, MatchesDoubleReference) {
  ASSERT_TRUE(module) << buildError;
  const TcCase param = GetParam();
  FlashAttentionVariant variant{param.headDim, param.dtype};
  ASSERT_TRUE(usesTensorCores(variant));
  checkForwardBackward(*module, variant, 2, 2, 80, param.causal, 2.0f);
}

INSTANTIATE_TEST_SUITE_P(
    HeadSizesAndDtypes, FlashTensorCoreEmulationTest,
    ::testing::Values(TcCase{64, kir::DType::BF16, true},
                      TcCase{64, kir::DType::BF16, false},
                      TcCase{64, kir::DType::F16, true},
                      TcCase{64, kir::DType::F16, false},
                      TcCase{128, kir::DType::BF16, true},
                      TcCase{128, kir::DType::F16, true},
                      TcCase{128, kir::DType::F16, false}),
    [](const ::testing::TestParamInfo<TcCase> &info) {
      return "d" + std::to_string(info.param.headDim) + "_" +
             kir::dtypeName(info.param.dtype) +
             (info.param.causal ? "_causal" : "_full");
    });

//===----------------------------------------------------------------------===//
// Forward over a KV cache (kvSeq > seq, positions)
//===----------------------------------------------------------------------===//

struct CacheCase {
  const char *name;
  int64_t seq, kvSeq;
  bool positioned, causal;
  // positions[b][t] (when positioned); -1 is a query before the cache.
  std::vector<std::vector<int32_t>> positions;
};

TEST(FlashEmulationTest, ForwardOverKvCacheMatchesDoubleReference) {
  const int64_t B = 2, H = 3;
  // Head size 16 on the CUDA cores, 64 on the tensor cores.
  std::vector<FlashAttentionVariant> variants = {
      {16, kir::DType::F32},  {16, kir::DType::F16},  {16, kir::DType::BF16},
      {64, kir::DType::F16}, {64, kir::DType::BF16}};
  std::string error;
  std::unique_ptr<EmulatedFlash> module = EmulatedFlash::build(variants, error);
  ASSERT_TRUE(module) << error;

  const std::vector<CacheCase> cases = {
      // Decoding: one query per batch row, at position 0 (sees one key) and
      // deep into an odd cache of two key tiles.
      {"decode", 1, 37, true, true, {{0}, {35}}},
      {"decode_last_slot", 1, 37, true, true, {{36}, {17}}},
      // Prefill of P = 5 tokens into the cache; batch 1 continues at 30
      // (the prefix crosses the 32-key tile) and a position past the cache
      // is clamped to its last slot.
      {"prefill", 5, 37, true, true, {{0, 1, 2, 3, 4}, {30, 31, 32, 33, 40}}},
      // A query before the cache sees no key: out 0, lse -inf.
      {"prefill_unfilled", 5, 37, true, true, {{-1, 0, 1, 2, 3}, {3, 4, 5, 6, 7}}},
      // No positions: query t sees keys s <= t + kvSeq - seq.
      {"tail_causal", 5, 37, false, true, {}},
      {"tail_full", 5, 37, false, false, {}},
      // Seventeen queries (two query tiles) over a cache of 41.
      {"prefill_two_tiles", 17, 41, true, true, {}},
  };
  for (const FlashAttentionVariant &variant : variants)
    for (const CacheCase &c : cases) {
      SCOPED_TRACE(std::string(kir::dtypeName(variant.dtype)) + " d" +
                   std::to_string(variant.headDim) + " " + c.name);
      const int64_t T = c.seq, S = c.kvSeq, D = variant.headDim;
      std::vector<std::vector<int32_t>> positions = c.positions;
      if (c.positioned && positions.empty())
        positions = {std::vector<int32_t>(T), std::vector<int32_t>(T)};
      if (c.positioned && c.positions.empty())
        for (int64_t t = 0; t < T; ++t) {
          positions[0][t] = int32_t(t);
          positions[1][t] = int32_t(S - T + t);
        }
      // q, out: [B, T, H, D]; k: [B, H, S, D]; v: [B, S, H, D] after an
      // offset of 5; lse: [B, H, T]; positions: column-major [B, T] after
      // an offset of 3.
      std::mt19937 random(11);
      std::uniform_real_distribution<float> uniform(-1.5f, 1.5f);
      Storage q(variant.dtype, B * T * H * D), k(variant.dtype, B * H * S * D),
          v(variant.dtype, 5 + B * S * H * D), out(variant.dtype, B * T * H * D);
      for (int64_t i = 0; i < B * T * H * D; ++i)
        q.set(i, uniform(random));
      for (int64_t i = 0; i < B * H * S * D; ++i)
        k.set(i, uniform(random));
      for (int64_t i = 0; i < 5 + B * S * H * D; ++i)
        v.set(i, uniform(random));
      for (int64_t i = 0; i < B * T * H * D; ++i)
        out.set(i, 1234.0f); // every element must be written
      std::vector<float> lse(B * H * T, 1234.0f);
      std::vector<int32_t> pos(3 + B * T, 0);
      if (c.positioned)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T; ++t)
            pos[3 + b + t * B] = positions[b][t];
      auto qAt = [&](int64_t b, int64_t h, int64_t t, int64_t d) {
        return ((b * T + t) * H + h) * D + d;
      };
      auto kAt = [&](int64_t b, int64_t h, int64_t s, int64_t d) {
        return ((b * H + h) * S + s) * D + d;
      };
      auto vAt = [&](int64_t b, int64_t h, int64_t s, int64_t d) {
        return 5 + ((b * S + s) * H + h) * D + d;
      };
      const float scale = 1.0f / std::sqrt(float(D));

      // The plain reference (kir::AttentionStep's definition).
      std::vector<double> refOut(B * T * H * D, 0.0), refLse(B * H * T),
          magOut(B * T * H * D, 0.0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t) {
            int64_t last = c.positioned ? positions[b][t] : t + S - T;
            int64_t visible =
                c.causal ? std::clamp<int64_t>(last + 1, 0, S) : S;
            std::vector<double> p(visible);
            double max = -INFINITY;
            for (int64_t s = 0; s < visible; ++s) {
              double dot = 0;
              for (int64_t d = 0; d < D; ++d)
                dot += double(q.get(qAt(b, h, t, d))) * k.get(kAt(b, h, s, d));
              p[s] = double(scale) * dot;
              max = std::max(max, p[s]);
            }
            double sum = 0;
            for (int64_t s = 0; s < visible; ++s)
              sum += std::exp(p[s] - max);
            refLse[(b * H + h) * T + t] =
                visible ? max + std::log(sum) : -INFINITY;
            for (int64_t d = 0; d < D; ++d) {
              double acc = 0, mag = 0;
              for (int64_t s = 0; s < visible; ++s) {
                double weight = std::exp(p[s] - max) / sum;
                acc += weight * v.get(vAt(b, h, s, d));
                mag += weight * std::fabs(v.get(vAt(b, h, s, d)));
              }
              refOut[qAt(b, h, t, d)] = acc;
              magOut[qAt(b, h, t, d)] = mag;
            }
          }

      AttentionForwardArgs forward;
      forward.q = q.data();
      forward.k = k.data();
      forward.v = v.data();
      forward.out = out.data();
      forward.lse = lse.data();
      forward.vq = {0, T * H * D, D, H * D, 1};
      forward.vk = {0, H * S * D, S * D, D, 1};
      forward.vv = {5, S * H * D, D, H * D, 1};
      forward.vout = forward.vq;
      forward.vlse = {0, H * T, T, 1, 0};
      if (c.positioned) {
        forward.positions = pos.data();
        forward.vpos = {3, 1, 0, B, 0};
      }
      forward.batch = B;
      forward.heads = H;
      forward.seq = T;
      forward.causal = c.causal;
      forward.scale = scale;
      forward.kvSeq = S;
      module->run(flashForwardName(variant), &forward,
                  flashForwardLaunch(variant, B, H, T));

      const Tolerance tolerance(variant);
      int bad = 0;
      for (int64_t i = 0; i < B * T * H * D && bad < 5; ++i)
        if (!tolerance.near(out.get(i), refOut[i], magOut[i])) {
          ADD_FAILURE() << "out[" << i << "] = " << out.get(i)
                        << ", expected " << refOut[i];
          ++bad;
        }
      for (int64_t i = 0; i < B * H * T && bad < 5; ++i) {
        bool ok = std::isinf(refLse[i])
                      ? lse[i] == refLse[i]
                      : std::fabs(lse[i] - refLse[i]) <=
                            2e-5 * std::max(1.0, std::fabs(refLse[i]));
        if (!ok) {
          ADD_FAILURE() << "lse[" << i << "] = " << lse[i] << ", expected "
                        << refLse[i];
          ++bad;
        }
      }
    }
}

} // namespace
