// The tensor-core flash attention kernels (mma.sync m16n8k16, f16 and
// bf16, head sizes 64 and 128) against the CPU backend: an llmc function
// with llmc.attention and llmc.attention_grad (causal, T = 80: a full and a
// ragged tile) is compiled as `llmc run` compiles it and run by the CPU
// executor; the same kir::AttentionStep and AttentionGradStep, with the
// views the lowering chose, run under the CUDA emulation
// (CudaEmulation.h), the backward from the CPU's out and lse.
//
// Tolerance, per element: 2 ulps of the type at the CPU's value plus u
// times the largest |value| of that output (u = 2^-8 for bf16, 2^-11 for
// f16): the CPU keeps the probabilities (and dS) in f32 where the tensor
// cores take them rounded to the type, so each product differs by up to
// u / 2 of its sum of |terms|. lse (f32 on both sides, from exact
// products of the same inputs): 2 f32 ulps plus 1e-6 of the largest. The
// largest error seen is printed.
#include "test/unit/codegen/KernelToCuda/EmulatedFlash.h"
#include "test/unit/codegen/LlmcToKernel/CompileUtil.h"
#include "test/unit/codegen/LlmcToKernel/LowPrecisionTestUtil.h"

#include "codegen/KernelToCuda/CudaCompiler.h"
#include "codegen/KernelToCuda/Nvrtc.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>

using namespace llmc;
using namespace llmc::test;

namespace {

constexpr const char *kAttention = R"mlir(
func.func @f(%q: tensor<2x2x80xDxFT> {llmc.input = "q"},
             %k: tensor<2x2x80xDxFT> {llmc.input = "k"},
             %v: tensor<2x2x80xDxFT> {llmc.input = "v"},
             %do: tensor<2x2x80xDxFT> {llmc.input = "do"})
    -> (tensor<2x2x80xDxFT> {llmc.output = "out"},
        tensor<2x2x80xf32> {llmc.output = "lse"},
        tensor<2x2x80xDxFT> {llmc.output = "dq"},
        tensor<2x2x80xDxFT> {llmc.output = "dk"},
        tensor<2x2x80xDxFT> {llmc.output = "dv"}) {
  %o, %lse = llmc.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32}
      : tensor<2x2x80xDxFT>, tensor<2x2x80xDxFT>, tensor<2x2x80xDxFT>
  %dq, %dk, %dv = llmc.attention_grad %do, %q, %k, %v, %o, %lse
      {causal, scale = 1.250000e-01 : f32}
      : tensor<2x2x80xDxFT>, tensor<2x2x80xDxFT>, tensor<2x2x80xDxFT>,
        tensor<2x2x80xDxFT>, tensor<2x2x80xDxFT>, tensor<2x2x80xf32>
  return %o, %lse, %dq, %dk, %dv
      : tensor<2x2x80xDxFT>, tensor<2x2x80xf32>, tensor<2x2x80xDxFT>,
        tensor<2x2x80xDxFT>, tensor<2x2x80xDxFT>
}
)mlir";

/// kAttention at head size `headDim` in `type`, lowered as `llmc run`
/// lowers it.
mlir::FailureOr<kir::Program> attentionProgram(mlir::MLIRContext &context,
                                               int64_t headDim,
                                               kir::DType type) {
  std::string source = instantiate(kAttention, type);
  for (size_t at = source.find("xDx"); at != std::string::npos;
       at = source.find("xDx", at))
    source.replace(at, 3, "x" + std::to_string(headDim) + "x");
  return compileFunction(context, source, "f");
}

cuda::AttentionViewArgs viewArgs(const kir::View &view) {
  cuda::AttentionViewArgs args;
  args.offset = view.offset;
  int64_t *fields[] = {&args.batch, &args.head, &args.seq, &args.dim};
  for (size_t i = 0; i < view.strides.size() && i < 4; ++i)
    *fields[i] = view.strides[i];
  return args;
}

struct CpuCase {
  int64_t headDim;
  kir::DType dtype;
};

class FlashTensorCoreCpuTest : public ::testing::TestWithParam<CpuCase> {};

TEST_P(FlashTensorCoreCpuTest, MatchesTheCpuBackend) {
  const auto [D, type] = GetParam();
  const cuda::FlashAttentionVariant variant{D, type};
  ASSERT_TRUE(cuda::usesTensorCores(variant));
  mlir::MLIRContext context;
  auto program = attentionProgram(context, D, type);
  ASSERT_TRUE(mlir::succeeded(program));
  auto forward = stepsOf(*program, kir::StepKind::Attention);
  auto backward = stepsOf(*program, kir::StepKind::AttentionGrad);
  ASSERT_EQ(forward.size(), 1u);
  ASSERT_EQ(backward.size(), 1u);
  const kir::AttentionStep &fa = forward[0]->attention;
  const kir::AttentionGradStep &ba = backward[0]->attentionGrad;

  // The CPU backend.
  std::mt19937 rng(5);
  std::map<std::string, runtime::HostTensor> in;
  for (const char *name : {"q", "k", "v", "do"})
    in[name] = randomTensor(type, {2, 2, 80, D}, rng, 2.0f);
  auto exec = makeExecutor(*program);
  ASSERT_TRUE(bool(exec)) << llvm::toString(exec.takeError());
  for (auto &[name, tensor] : in)
    ASSERT_FALSE(bool((*exec)->setTensor(name, tensor))) << name;
  ASSERT_FALSE(bool((*exec)->run()));
  std::map<std::string, runtime::HostTensor> cpu;
  for (const char *name : {"out", "lse", "dq", "dk", "dv"}) {
    auto tensor = (*exec)->output(name);
    ASSERT_TRUE(bool(tensor)) << llvm::toString(tensor.takeError());
    cpu[name] = std::move(*tensor);
  }

  // The same steps under emulation, one host allocation per buffer (views
  // are relative to their buffer), sentinels in everything but inputs.
  std::vector<std::vector<char>> memory(program->buffers.size());
  for (auto [index, buffer] : llvm::enumerate(program->buffers))
    memory[index].assign(buffer.bytes(), char(0x7f));
  for (const kir::Binding &binding : program->inputs) {
    const runtime::HostTensor &tensor = in.at(binding.name);
    ASSERT_EQ(tensor.bytes.size(), memory[binding.buffer].size());
    std::memcpy(memory[binding.buffer].data(), tensor.bytes.data(),
                tensor.bytes.size());
  }
  auto base = [&](const kir::View &view) -> void * {
    return memory[view.buffer].data();
  };
  std::string error;
  auto module = EmulatedFlash::build({variant}, error);
  ASSERT_TRUE(module) << error;

  cuda::AttentionForwardArgs fargs;
  fargs.q = base(fa.q);
  fargs.k = base(fa.k);
  fargs.v = base(fa.v);
  fargs.out = base(fa.out);
  fargs.lse = static_cast<float *>(base(fa.lse));
  fargs.vq = viewArgs(fa.q);
  fargs.vk = viewArgs(fa.k);
  fargs.vv = viewArgs(fa.v);
  fargs.vout = viewArgs(fa.out);
  fargs.vlse = viewArgs(fa.lse);
  fargs.vlse.dim = 0;
  fargs.batch = fa.batch;
  fargs.heads = fa.heads;
  fargs.seq = fa.seq;
  fargs.causal = fa.causal;
  fargs.scale = fa.scale;
  fargs.kvSeq = fa.keys();
  module->run(cuda::flashForwardName(variant), &fargs,
              cuda::flashForwardLaunch(variant, fa.batch, fa.heads, fa.seq));

  // Element (b, h, t, d) of a step's view, widened; and the CPU's.
  auto at = [&](const kir::View &view, int64_t b, int64_t h, int64_t t,
                int64_t d) {
    int64_t index = view.offset + b * view.strides[0] + h * view.strides[1] +
                    t * view.strides[2] +
                    (view.strides.size() > 3 ? d * view.strides[3] : 0);
    return index;
  };
  auto read = [&](const kir::View &view, kir::DType dtype, int64_t index) {
    const char *p = memory[view.buffer].data();
    if (dtype == kir::DType::F32) {
      float value;
      std::memcpy(&value, p + 4 * index, 4);
      return double(value);
    }
    uint16_t bits;
    std::memcpy(&bits, p + 2 * index, 2);
    return double(dtype == kir::DType::F16 ? runtime::halfToFloat(bits)
                                           : runtime::bfloat16ToFloat(bits));
  };
  const double u = type == kir::DType::F16 ? 1.0 / 2048 : 1.0 / 256;
  // lse: both f32 from exact products of the same inputs.
  const double lseTolerance = 1e-6;
  auto compare = [&](const char *name, const kir::View &view,
                     kir::DType dtype, int64_t depth, double u) {
    std::vector<float> want = cpu.at(name).toF32();
    double largest = 0, worst = 0;
    for (float value : want)
      largest = std::max(largest, double(std::fabs(value)));
    int bad = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t t = 0; t < 80; ++t)
          for (int64_t d = 0; d < depth; ++d) {
            double expected = want[((b * 2 + h) * 80 + t) * depth + d];
            double got = read(view, dtype, at(view, b, h, t, d));
            double allowed = 2 * ulpOf(dtype, expected) + u * largest;
            double error = std::fabs(got - expected);
            worst = std::max(worst, error / largest);
            if (!(error <= allowed) && bad++ < 5)
              ADD_FAILURE() << name << "[" << b << "][" << h << "][" << t
                            << "][" << d << "] = " << got << ", CPU "
                            << expected;
          }
    std::printf("[ tc vs cpu ] d%lld %s %s: largest error %.2e of the "
                "largest |value| (allowed %.2e + 2 ulps)\n",
                (long long)D, kir::dtypeName(type), name, worst, u);
  };
  compare("out", fa.out, type, D, u);
  compare("lse", fa.lse, kir::DType::F32, 1, lseTolerance);

  // Backward from the CPU's out and lse.
  for (auto [view, name] : {std::pair{&ba.out, "out"}, std::pair{&ba.lse, "lse"}}) {
    const runtime::HostTensor &tensor = cpu.at(name);
    int64_t depth = view == &ba.lse ? 1 : D;
    size_t bytes = kir::dtypeBytes(tensor.dtype);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t t = 0; t < 80; ++t)
          for (int64_t d = 0; d < depth; ++d)
            std::memcpy(memory[view->buffer].data() +
                            bytes * at(*view, b, h, t, d),
                        tensor.bytes.data() +
                            bytes * (((b * 2 + h) * 80 + t) * depth + d),
                        bytes);
  }
  cuda::AttentionBackwardArgs bargs;
  bargs.dout = base(ba.dout);
  bargs.q = base(ba.q);
  bargs.k = base(ba.k);
  bargs.v = base(ba.v);
  bargs.out = base(ba.out);
  bargs.lse = static_cast<const float *>(base(ba.lse));
  bargs.dq = base(ba.dq);
  bargs.dk = base(ba.dk);
  bargs.dv = base(ba.dv);
  bargs.vdout = viewArgs(ba.dout);
  bargs.vq = viewArgs(ba.q);
  bargs.vk = viewArgs(ba.k);
  bargs.vv = viewArgs(ba.v);
  bargs.vout = viewArgs(ba.out);
  bargs.vlse = viewArgs(ba.lse);
  bargs.vlse.dim = 0;
  bargs.vdq = viewArgs(ba.dq);
  bargs.vdk = viewArgs(ba.dk);
  bargs.vdv = viewArgs(ba.dv);
  bargs.batch = ba.batch;
  bargs.heads = ba.heads;
  bargs.seq = ba.seq;
  bargs.causal = ba.causal;
  bargs.scale = ba.scale;
  module->run(cuda::flashBackwardDkDvName(variant), &bargs,
              cuda::flashBackwardDkDvLaunch(variant, ba.batch, ba.heads, ba.seq));
  module->run(cuda::flashBackwardDqName(variant), &bargs,
              cuda::flashBackwardDqLaunch(variant, ba.batch, ba.heads, ba.seq));
  compare("dq", ba.dq, type, D, u);
  compare("dk", ba.dk, type, D, u);
  compare("dv", ba.dv, type, D, u);
}

// The CUDA compiler (what the executor loads) gives a bf16 head-size-64
// program's attention steps the tensor-core kernels and their launches.
TEST(FlashTensorCoreCpuTest, TheCudaCompilerSelectsThem) {
  std::string why;
  if (!cuda::nvrtcAvailable(&why))
    GTEST_SKIP() << "NVRTC not available: " << why;
  mlir::MLIRContext context;
  auto program = attentionProgram(context, 64, kir::DType::BF16);
  ASSERT_TRUE(mlir::succeeded(program));
  cuda::CudaCompilerOptions options;
  options.nvrtc.archs = {80};
  options.nvrtc.ptxArch = 0;
  options.nvrtc.cacheEnabled = false;
  auto modules = cuda::compileCudaModules(*program, options);
  ASSERT_TRUE(bool(modules)) << llvm::toString(modules.takeError());
  cuda::FlashAttentionVariant variant{64, kir::DType::BF16};
  int attention = 0;
  for (auto [index, step] : llvm::enumerate(program->steps)) {
    const std::vector<cuda::LibraryKernel> &kernels =
        modules->stepKernels[index];
    if (step.kind == kir::StepKind::Attention) {
      ++attention;
      ASSERT_EQ(kernels.size(), 1u);
      EXPECT_EQ(kernels[0].name, "llmc_flash_tc_fwd_d64_bf16");
      EXPECT_EQ(kernels[0].launch.grid[0],
                cuda::flashForwardLaunch(variant, 2, 2, 80).grid[0]);
      EXPECT_EQ(kernels[0].launch.grid[0], 2); // 64 rows a block
    }
    if (step.kind == kir::StepKind::AttentionGrad) {
      ++attention;
      ASSERT_EQ(kernels.size(), 2u);
      EXPECT_EQ(kernels[0].name, "llmc_flash_tc_bwd_dkdv_d64_bf16");
      EXPECT_EQ(kernels[1].name, "llmc_flash_tc_bwd_dq_d64_bf16");
      EXPECT_EQ(kernels[1].launch.grid[1], 4); // batch x heads
    }
  }
  EXPECT_EQ(attention, 2);
  EXPECT_TRUE(modules->hasLibrary);
}

INSTANTIATE_TEST_SUITE_P(
    HeadSizesAndDtypes, FlashTensorCoreCpuTest,
    ::testing::Values(CpuCase{64, kir::DType::BF16}, CpuCase{64, kir::DType::F16},
                      CpuCase{128, kir::DType::BF16},
                      CpuCase{128, kir::DType::F16}),
    [](const ::testing::TestParamInfo<CpuCase> &info) {
      return "d" + std::to_string(info.param.headDim) + "_" +
             kir::dtypeName(info.param.dtype);
    });

} // namespace
