// f16/bf16 code for CUDA, without a GPU:
//  - the RoundF16/RoundBF16 ops and f16/bf16 stores under the CPU emulation
//    of CUDA (CudaEmulation.h beside this file) give the CPU kernels' bits:
//    every non-NaN input exactly, RoundF16/RoundBF16 of a NaN 0x7FC00000;
//  - every kernel of the tiny GPT's training programs under llmc-amp
//    (fp16 and bf16: forward, grad_step, update_step) and of the f16/bf16
//    casts, compiled by NVRTC for sm_80 and sm_90 together with the flash
//    attention variants they use;
//  - GEMM epilogues on narrow products are classified as the cuBLASLt
//    kinds (bias, bias + GELU, GELU gradient on a 16BF/16F C), those on an
//    f32 C that rounds the product as it loads it are not;
//  - every kernel of the fp16 and bf16 grad_step run under emulation
//    against the CPU kernel on the same random inputs (ids within their
//    tables): f32 results within 1e-4 (absolute and relative: the math
//    functions and reduction orders differ), f16/bf16 results within one
//    unit in the last place of their type plus that.
#include "test/unit/codegen/KernelToCpu/KernelTestUtil.h"
#include "test/unit/codegen/KernelToCuda/CudaTestUtil.h"
#include "test/unit/codegen/KernelToCuda/EmulationRunner.h"
#include "test/unit/codegen/LlmcToKernel/LowPrecisionTestUtil.h"
#include "test/unit/codegen/LlmcToKernel/TinyGptAmp.h"

#include "codegen/KernelToCuda/FlashAttention.h"
#include "codegen/KernelToCuda/KernelToCuda.h"
#include "codegen/KernelToCuda/CudaCompiler.h"
#include "codegen/LlmcToKernel/GemmEpilogue.h"
#include "codegen/KernelToCuda/Nvrtc.h"

#include "llvm/ADT/bit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

using namespace llmc;
using namespace llmc::test;
using kir::DType;
using kir::Op;

namespace {

uint32_t toBits(float value) { return llvm::bit_cast<uint32_t>(value); }

//===----------------------------------------------------------------------===//
// Conversions under emulation
//===----------------------------------------------------------------------===//

TEST(CudaLowPrecision, RoundOpsAndStoresMatchTheCpuBitForBit) {
  // Edge cases (ties, overflow, subnormals, signed zeros, infinities,
  // NaNs) and random bit patterns; an odd length for the scalar tail.
  std::vector<float> inputs;
  for (uint32_t bits :
       {0x3f801000u, 0x3f803000u, 0x3f808000u, 0x3f818000u, 0x477fefffu,
        0x477ff000u, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0x387fe000u,
        0x33000000u, 0x33000001u, 0x33c00000u, 0x00018000u, 0x00008000u,
        0x007fffffu, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
        0xffc00000u, 0x7f800001u})
    inputs.push_back(llvm::bit_cast<float>(bits));
  std::mt19937 rng(17);
  for (int i = 0; i < 4000; ++i)
    inputs.push_back(llvm::bit_cast<float>(uint32_t(rng())));
  for (int i = 0; i < 1001; ++i)
    inputs.push_back(std::ldexp(float(int32_t(rng())), -int(rng() % 50)));
  int64_t n = inputs.size();

  KernelBuilder k("round_edges", {1, n});
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
  cuda::CudaKernel emitted = cuda::emitCudaKernel(k.kernel);
  EXPECT_NE(emitted.source.find("llmc_round_f16("), std::string::npos);
  EXPECT_NE(emitted.source.find("llmc_round_bf16("), std::string::npos);

  Compiled cpu = compileKernels({k.kernel});
  ASSERT_TRUE(cpu);
  std::string error;
  auto emulated = EmulatedModule::build({k.kernel}, error);
  ASSERT_TRUE(emulated) << error;
  struct Outputs {
    std::vector<uint16_t> half, bf;
    std::vector<float> roundHalf, roundBf;
  } out[2];
  for (Outputs &o : out) {
    o.half.resize(n);
    o.bf.resize(n);
    o.roundHalf.resize(n);
    o.roundBf.resize(n);
  }
  cpu.run(k.kernel.name,
          {inputs.data(), out[0].half.data(), out[0].bf.data(),
           out[0].roundHalf.data(), out[0].roundBf.data()},
          0, 1);
  emulated->run(k.kernel.name,
                {inputs.data(), out[1].half.data(), out[1].bf.data(),
                 out[1].roundHalf.data(), out[1].roundBf.data()});
  for (int64_t i = 0; i < n; ++i) {
    // RoundF16/RoundBF16: the same bits on both targets, NaNs included.
    ASSERT_EQ(toBits(out[0].roundHalf[i]), toBits(out[1].roundHalf[i]))
        << "RoundF16 of 0x" << std::hex << toBits(inputs[i]);
    ASSERT_EQ(toBits(out[0].roundBf[i]), toBits(out[1].roundBf[i]))
        << "RoundBF16 of 0x" << std::hex << toBits(inputs[i]);
    if (std::isnan(inputs[i])) {
      EXPECT_EQ(toBits(out[0].roundHalf[i]), 0x7fc00000u);
      continue; // stores: a NaN of the type, payloads differ
    }
    ASSERT_EQ(out[0].half[i], out[1].half[i])
        << "f16 store of 0x" << std::hex << toBits(inputs[i]);
    ASSERT_EQ(out[0].bf[i], out[1].bf[i])
        << "bf16 store of 0x" << std::hex << toBits(inputs[i]);
  }
}

//===----------------------------------------------------------------------===//
// The tiny GPT's programs
//===----------------------------------------------------------------------===//

struct AmpPrograms {
  std::vector<std::pair<std::string, kir::Program>> programs;
};

llvm::Expected<AmpPrograms> tinyPrograms(const char *precision,
                                         llvm::ArrayRef<const char *> which) {
  AmpPrograms result;
  for (const char *function : which) {
    auto program = compileTinyGpt(precision, function, 2, 32);
    if (!program)
      return program.takeError();
    result.programs.push_back({function, std::move(*program)});
  }
  return result;
}

/// The flash attention variants a program's attention steps use.
std::vector<cuda::FlashAttentionVariant>
attentionVariants(const kir::Program &program) {
  std::vector<cuda::FlashAttentionVariant> variants;
  for (const kir::Step &step : program.steps) {
    if (step.kind == kir::StepKind::Attention)
      variants.push_back({step.attention.headDim,
                          dtypeOf(program, step.attention.q)});
    if (step.kind == kir::StepKind::AttentionGrad)
      variants.push_back({step.attentionGrad.headDim,
                          dtypeOf(program, step.attentionGrad.q)});
  }
  return variants;
}

class CudaAmpPrograms : public ::testing::TestWithParam<const char *> {};

TEST_P(CudaAmpPrograms, NvrtcCompilesEveryKernelForSm80AndSm90) {
  std::string why;
  if (!cuda::nvrtcAvailable(&why))
    GTEST_SKIP() << "NVRTC not available: " << why;
  const char *precision = GetParam();
  DType type = llvm::StringRef(precision) == "fp16" ? DType::F16 : DType::BF16;
  auto programs =
      tinyPrograms(precision, {"forward", "grad_step", "update_step"});
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  cuda::NvrtcOptions options;
  options.archs = {80, 90};
  options.cacheEnabled = false; // compile for real, every time
  int narrowKernels = 0;
  std::vector<cuda::FlashAttentionVariant> variants;
  for (auto &[name, program] : programs->programs) {
    for (const kir::Kernel &kernel : program.kernels)
      narrowKernels += llvm::any_of(kernel.operands, [&](const kir::Access &a) {
        return a.dtype == type;
      });
    for (const cuda::FlashAttentionVariant &variant :
         attentionVariants(program))
      if (!llvm::is_contained(variants, variant))
        variants.push_back(variant);
    std::string source = cuda::emitCudaModule(program);
    auto binaries = cuda::compileCuda(source, name + ".cu", options);
    ASSERT_TRUE(bool(binaries))
        << name << ": " << llvm::toString(binaries.takeError());
    ASSERT_EQ(binaries->cubins.size(), 2u);
    EXPECT_EQ(binaries->cubins[0].arch, 80);
    EXPECT_EQ(binaries->cubins[1].arch, 90);
    for (const kir::Kernel &kernel : program.kernels)
      EXPECT_NE(binaries->ptx.find(".entry " + kernel.name), std::string::npos)
          << name << ": " << kernel.name;
  }
  EXPECT_GT(narrowKernels, 20);
  // Flash attention in the narrow type, forward and backward.
  ASSERT_EQ(variants.size(), 1u);
  EXPECT_EQ(variants[0].dtype, type);
  auto library = cuda::compileCuda(cuda::cudaLibrarySource(variants),
                                   "library.cu", options);
  ASSERT_TRUE(bool(library)) << llvm::toString(library.takeError());
  for (const std::string &kernel :
       {cuda::flashForwardName(variants[0]),
        cuda::flashBackwardDkDvName(variants[0]),
        cuda::flashBackwardDqName(variants[0])})
    EXPECT_NE(library->ptx.find(".entry " + kernel), std::string::npos)
        << kernel;
}

TEST_P(CudaAmpPrograms, NarrowEpiloguesAreCublasLtKindsOnNarrowC) {
  // An epilogue on a narrow C whose bias or aux is of C's type is one
  // cuBLASLt runs for a 16BF/16F D (bias, bias + GELU, the GELU gradient,
  // per GEMM in test/unit/runtime/Cuda/GemmPlanTest.cpp). One that rounds
  // an f32 C to the product's type as it loads it (a product cast back up
  // to f32) is not: cuBLASLt would not round it, so its kernel runs after
  // the GEMM.
  const char *precision = GetParam();
  DType type = llvm::StringRef(precision) == "fp16" ? DType::F16 : DType::BF16;
  auto programs = tinyPrograms(precision, {"forward", "grad_step"});
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  int narrow = 0, fused = 0, roundedOnLoad = 0;
  for (auto &[name, program] : programs->programs)
    for (const kir::Step *step : stepsOf(program, kir::StepKind::Gemm)) {
      if (step->gemm.epilogue < 0 ||
          dtypeOf(program, step->gemm.a) == DType::F32)
        continue;
      ++narrow;
      llmc::FusedEpilogue match = llmc::matchGemmEpilogue(
          program.kernels[step->gemm.epilogue], step->gemm, program);
      EXPECT_EQ(match.kind, step->gemm.epilogueKind)
          << name << ": " << step->origin;
      if (dtypeOf(program, step->gemm.c) == DType::F32) {
        ++roundedOnLoad;
        EXPECT_EQ(match.kind, kir::EpilogueKind::None)
            << name << ": " << step->origin;
        continue;
      }
      EXPECT_NE(match.kind, kir::EpilogueKind::None)
          << name << ": " << step->origin;
      fused += match.kind != kir::EpilogueKind::None;
      if (match.kind == kir::EpilogueKind::DGelu)
        EXPECT_EQ(dtypeOf(program, match.aux), type) << step->origin;
      else if (match.kind != kir::EpilogueKind::Gelu)
        EXPECT_EQ(dtypeOf(program, match.bias), type) << step->origin;
    }
  EXPECT_GT(narrow, 4);
  EXPECT_GE(fused, 4 + 6); // forward 4, grad_step 4 bias and 2 DGELU
  EXPECT_GT(roundedOnLoad, 0);
}

/// Random contents for `buffer`: floats in [-2, 2] (rounded to the type),
/// ids within their table, any other integer small and non-negative.
GuardedBuffer randomBuffer(const kir::Buffer &buffer, std::mt19937 &rng) {
  GuardedBuffer memory(std::max<int64_t>(buffer.bytes(), 1));
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  int64_t n = buffer.numElements();
  char *data = memory.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (buffer.dtype) {
    case DType::F32: {
      float value = uniform(rng);
      std::memcpy(data + 4 * i, &value, 4);
      break;
    }
    case DType::F16: {
      uint16_t value = runtime::floatToHalf(uniform(rng));
      std::memcpy(data + 2 * i, &value, 2);
      break;
    }
    case DType::BF16: {
      uint16_t value = runtime::floatToBFloat16(uniform(rng));
      std::memcpy(data + 2 * i, &value, 2);
      break;
    }
    case DType::I32: {
      int32_t value = int32_t(rng() % uint32_t(buffer.idBound > 0
                                                   ? buffer.idBound
                                                   : 4));
      std::memcpy(data + 4 * i, &value, 4);
      break;
    }
    case DType::I64: {
      int64_t value = int64_t(rng() % uint32_t(buffer.idBound > 0
                                                   ? buffer.idBound
                                                   : 1000));
      std::memcpy(data + 8 * i, &value, 8);
      break;
    }
    case DType::I1:
      data[i] = 0;
      break;
    }
  }
  return memory;
}

TEST_P(CudaAmpPrograms, EveryGradStepKernelMatchesTheCpuUnderEmulation) {
  const char *precision = GetParam();
  auto programs = tinyPrograms(precision, {"grad_step"});
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  const kir::Program &program = programs->programs[0].second;
  Compiled cpu = compileKernels(program.kernels);
  ASSERT_TRUE(cpu);
  std::string error;
  auto emulated = EmulatedModule::build(program.kernels, error);
  ASSERT_TRUE(emulated) << error;

  std::mt19937 rng(23);
  ErrorStats f32Stats, narrowStats;
  int rounding = 0;
  for (const kir::Kernel &kernel : program.kernels) {
    SCOPED_TRACE(kernel.name);
    rounding += llvm::any_of(kernel.body, [](const kir::Instr &instr) {
      return instr.op == Op::RoundF16 || instr.op == Op::RoundBF16;
    });
    // The kernel's buffers, randomly filled; one copy per target.
    std::map<int32_t, GuardedBuffer> memory[2];
    for (const kir::Access &access : kernel.operands)
      if (!memory[0].count(access.buffer))
        memory[0][access.buffer] =
            randomBuffer(program.buffers[access.buffer], rng);
    memory[1] = memory[0];
    std::vector<void *> operands[2];
    for (int target : {0, 1})
      for (const kir::Access &access : kernel.operands)
        operands[target].push_back(memory[target][access.buffer].data());
    cpu.run(kernel.name, operands[0], 0, kernel.numRows());
    emulated->run(kernel.name, operands[1]);
    std::set<int32_t> stored;
    for (const kir::Instr &instr : kernel.body)
      if (instr.op == Op::Store)
        stored.insert(kernel.operands[instr.operand].buffer);
    for (auto &[buffer, want] : memory[0]) {
      const GuardedBuffer &got = memory[1][buffer];
      ASSERT_EQ(got.guardDamage(), "") << "buffer " << buffer;
      if (!stored.count(buffer)) {
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.bytes()), 0)
            << "buffer " << buffer << " is not stored to, yet changed";
        continue;
      }
      DType dtype = program.buffers[buffer].dtype;
      double ulp = dtype == DType::F16    ? 0x1p-10
                   : dtype == DType::BF16 ? 0x1p-7
                                          : 0.0;
      Tolerance tolerance{1e-4 + ulp, 1e-4};
      ErrorStats stats = compareElements(
          want.data(), got.data(), dtype, program.buffers[buffer].numElements(),
          tolerance, kernel.name + ", buffer '" + program.buffers[buffer].name +
                         "'");
      (kir::isFloat(dtype) && dtype != DType::F32 ? narrowStats : f32Stats)
          .merge(stats);
    }
  }
  EXPECT_GT(rounding, 0); // casts used inside kernels (the logits' product)
  std::printf("[ %s grad_step ] %zu kernels; f32 results: max abs error "
              "%.2e, max rel %.2e; %s results: max abs %.2e, max rel %.2e\n",
              precision, program.kernels.size(), f32Stats.maxAbs,
              f32Stats.maxRel, precision, narrowStats.maxAbs,
              narrowStats.maxRel);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaAmpPrograms,
                         ::testing::Values("fp16", "bf16"),
                         [](const auto &info) {
                           return std::string(info.param);
                         });

} // namespace
