// Hand-built kernels through the CUDA emitter: compiled by NVRTC for sm_80
// and sm_90 (and PTX), and run under CudaEmulation.h on the CPU against the
// CPU backend's kernels on the same inputs. See CudaEmulation.h for what
// the emulation proves and what it cannot.
//
// Tolerances (CPU backend vs emulated CUDA): arithmetic without math
// functions or reductions is compared exactly (both sides do the same IEEE
// operations in the same order; the host compile does not contract FMAs);
// math functions within 4e-7 relative (a few ulp: the CPU's polynomials vs
// glibc); reductions within 1e-5 relative to the row's magnitude (the
// summation orders differ); f16/bf16 stores exactly (round to nearest even
// on both sides); Random bit-identical.
#include "test/unit/codegen/KernelToCpu/KernelTestUtil.h"
#include "test/unit/codegen/KernelToCuda/CudaTestUtil.h"
#include "test/unit/codegen/KernelToCuda/EmulationRunner.h"

#include "codegen/KernelToCuda/KernelToCuda.h"
#include "codegen/KernelToCuda/CudaTarget.h"
#include "ir/kernel/Artifact.h"
#include "codegen/KernelToCuda/Nvrtc.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>

using namespace llmc;
using namespace llmc::test;
using kir::DType;
using kir::Op;

namespace {

/// Fills buffer `index` (`count` elements of `dtype`) before the run.
using InitFn =
    std::function<void(int32_t index, DType dtype, size_t count, char *data)>;

void defaultInit(int32_t index, DType dtype, size_t count, char *data) {
  std::mt19937 rng(100 + index);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (size_t i = 0; i < count; ++i) {
    float value = uniform(rng);
    switch (dtype) {
    case DType::F32:
      std::memcpy(data + 4 * i, &value, 4);
      break;
    case DType::F16:
    case DType::BF16: {
      // Any 16-bit pattern of a finite value in range: a small float's bits.
      uint16_t bits = dtype == DType::BF16
                          ? uint16_t(llvm::bit_cast<uint32_t>(value) >> 16)
                          : uint16_t(0x3c00 ^ (rng() & 0x83ff));
      std::memcpy(data + 2 * i, &bits, 2);
      break;
    }
    default:
      std::memset(data + kir::dtypeBytes(dtype) * i, 0, kir::dtypeBytes(dtype));
      break;
    }
  }
}

/// The buffers a set of kernels touches: element counts from the largest
/// reach of any operand (indices overridden by loads must stay inside it).
struct BufferSpec {
  DType dtype = DType::F32;
  int64_t elements = 0;
};

std::map<int32_t, BufferSpec> bufferSpecs(llvm::ArrayRef<kir::Kernel> kernels,
                                          std::map<int32_t, int64_t> sizes) {
  std::map<int32_t, BufferSpec> specs;
  for (const kir::Kernel &kernel : kernels)
    for (const kir::Access &access : kernel.operands) {
      int64_t reach = access.offset;
      for (size_t d = 0; d < kernel.domain.size(); ++d)
        reach += access.strides[d] * (kernel.domain[d] - 1);
      BufferSpec &spec = specs[access.buffer];
      spec.dtype = access.dtype;
      spec.elements = std::max(spec.elements, reach + 1);
    }
  for (auto [buffer, size] : sizes)
    specs[buffer].elements = std::max(specs[buffer].elements, size);
  return specs;
}

struct RunOptions {
  std::map<int32_t, int64_t> sizes; // buffers larger than operands reach
  InitFn init = defaultInit;
  Tolerance tolerance;
  long long gridOverride = 0; // emulated launches with this many blocks
};

/// Runs `kernels` in order on the CPU backend and under emulation, from the
/// same inputs, and compares every buffer afterwards.
ErrorStats checkAgainstCpu(const std::vector<kir::Kernel> &kernels,
                           const RunOptions &options = {}) {
  ErrorStats stats;
  Compiled cpu = compileKernels(kernels);
  if (!cpu)
    return stats;
  std::string error;
  auto emulated = EmulatedModule::build(kernels, error);
  if (!emulated) {
    ADD_FAILURE() << error;
    return stats;
  }
  std::map<int32_t, BufferSpec> specs = bufferSpecs(kernels, options.sizes);
  std::map<int32_t, GuardedBuffer> cpuBuffers, cudaBuffers;
  for (auto &[index, spec] : specs) {
    size_t bytes = spec.elements * kir::dtypeBytes(spec.dtype);
    cpuBuffers[index] = GuardedBuffer(bytes);
    cudaBuffers[index] = GuardedBuffer(bytes);
    options.init(index, spec.dtype, spec.elements, cpuBuffers[index].data());
    std::memcpy(cudaBuffers[index].data(), cpuBuffers[index].data(), bytes);
  }
  for (const kir::Kernel &kernel : kernels) {
    std::vector<void *> cpuArgs, cudaArgs;
    for (const kir::Access &access : kernel.operands) {
      cpuArgs.push_back(cpuBuffers[access.buffer].data());
      cudaArgs.push_back(cudaBuffers[access.buffer].data());
    }
    cpu.run(kernel.name, cpuArgs, 0, kernel.numRows());
    emulated->run(kernel.name, cudaArgs, options.gridOverride);
  }
  for (auto &[index, spec] : specs) {
    std::string damage = cudaBuffers[index].guardDamage();
    EXPECT_EQ(damage, "") << "buffer " << index;
    stats.merge(compareElements(cpuBuffers[index].data(),
                                cudaBuffers[index].data(), spec.dtype,
                                spec.elements, options.tolerance,
                                "buffer " + std::to_string(index)));
  }
  return stats;
}

/// Compiles the kernels' module with NVRTC for sm_80, sm_90 and PTX.
void expectNvrtcCompiles(const std::vector<kir::Kernel> &kernels) {
  std::string why;
  if (!cuda::nvrtcAvailable(&why))
    GTEST_SKIP() << why;
  cuda::NvrtcOptions options;
  options.cacheEnabled = false;
  auto binaries = cuda::compileCuda(cuda::emitCudaModule(kernels), "test.cu",
                                    options);
  ASSERT_TRUE(bool(binaries)) << llvm::toString(binaries.takeError());
  ASSERT_EQ(binaries->cubins.size(), 2u);
  EXPECT_EQ(binaries->cubins[0].arch, 80);
  EXPECT_EQ(binaries->cubins[1].arch, 90);
  for (const cuda::Cubin &cubin : binaries->cubins)
    EXPECT_GT(cubin.bytes.size(), 0u);
  EXPECT_NE(binaries->ptx.find(".target sm_80"), std::string::npos);
  for (const kir::Kernel &kernel : kernels)
    EXPECT_NE(binaries->ptx.find(".entry " + kernel.name), std::string::npos)
        << kernel.name;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

// out[r, c] = x[r, c] + bias[c] * scale[r], x and out with a row pitch of
// `pitch` elements: pitch 68 (length 66) gives 4-wide chunks and a 2-column
// tail, pitch 37 (= length) no vector accesses (misaligned rows).
kir::Kernel biasKernel(const std::string &name, int64_t rows, int64_t length,
                       int64_t pitch) {
  KernelBuilder k(name, {rows, length});
  int x = k.operand(0, DType::F32, {pitch, 1});
  int bias = k.operand(1, DType::F32, {0, 1});
  int scale = k.operand(2, DType::F32, {1, 0});
  int out = k.operand(3, DType::F32, {pitch, 1});
  k.store(out, k.binary(Op::Add, k.load(x),
                        k.binary(Op::Mul, k.load(bias), k.load(scale))));
  return k.kernel;
}

// softmax over rows of `length`: max, then sum of exp, then the stores.
kir::Kernel softmaxKernel(const std::string &name, int64_t rows,
                          int64_t length) {
  KernelBuilder k(name, {rows, length});
  int x = k.operand(0, DType::F32, {length, 1});
  int out = k.operand(1, DType::F32, {length, 1});
  int32_t value = k.load(x);
  int32_t max = k.add({Op::ReduceMax, DType::F32, {value}});
  int32_t e = k.unary(Op::Exp, k.binary(Op::Sub, value, max));
  int32_t sum = k.add({Op::ReduceSum, DType::F32, {e}});
  k.store(out, k.binary(Op::Div, e, sum));
  return k.kernel;
}

// layernorm over rows, with the row's mean and rstd stored (row-level
// stores through operands with row stride 0).
kir::Kernel layerNormKernel(const std::string &name, int64_t rows,
                            int64_t length, DType storage) {
  KernelBuilder k(name, {rows, length});
  int x = k.operand(0, storage, {length, 1});
  int weight = k.operand(1, DType::F32, {0, 1});
  int bias = k.operand(2, DType::F32, {0, 1});
  int out = k.operand(3, storage, {length, 1});
  int meanOut = k.operand(4, DType::F32, {1, 0});
  int rstdOut = k.operand(5, DType::F32, {1, 0});
  int32_t value = k.load(x);
  int32_t inverse = k.constant(1.0f / float(length));
  int32_t mean = k.binary(Op::Mul, k.add({Op::ReduceSum, DType::F32, {value}}),
                          inverse);
  int32_t centered = k.binary(Op::Sub, value, mean);
  int32_t var = k.binary(
      Op::Mul,
      k.add({Op::ReduceSum, DType::F32, {k.binary(Op::Mul, centered, centered)}}),
      inverse);
  int32_t rstd = k.unary(Op::Rsqrt, k.binary(Op::Add, var, k.constant(1e-5f)));
  k.store(out, k.binary(Op::Add,
                        k.binary(Op::Mul, k.binary(Op::Mul, centered, rstd),
                                 k.load(weight)),
                        k.load(bias)));
  k.store(meanOut, mean);
  k.store(rstdOut, rstd);
  return k.kernel;
}

TEST(CudaEmitter, PointwiseVectorAndTail) {
  kir::Kernel vector = biasKernel("bias_vector", 5, 66, 68);
  kir::Kernel scalar = biasKernel("bias_scalar", 5, 37, 37);
  cuda::CudaKernel a = cuda::emitCudaKernel(vector);
  cuda::CudaKernel b = cuda::emitCudaKernel(scalar);
  EXPECT_EQ(a.schedule, cuda::CudaSchedule::Pointwise);
  EXPECT_EQ(a.vectorWidth, 4);
  EXPECT_NE(a.source.find("llmc_load_vec<4>"), std::string::npos) << a.source;
  EXPECT_NE(a.source.find("llmc_store_vec<4>"), std::string::npos);
  EXPECT_EQ(b.vectorWidth, 1);
  EXPECT_EQ(b.source.find("llmc_load_vec"), std::string::npos) << b.source;
  ErrorStats stats = checkAgainstCpu({vector, scalar});
  EXPECT_EQ(stats.maxAbs, 0.0);
  // Any grid covers the domain: one block, and a few.
  for (long long grid : {1, 3})
    checkAgainstCpu({vector, scalar}, {{}, defaultInit, {}, grid});
}

TEST(CudaEmitter, HalfAndBFloat16Storage) {
  // f16 in, bf16 and f16 out: 8-wide chunks (all operands 16-bit).
  KernelBuilder k("half_mix", {3, 72});
  int x = k.operand(0, DType::F16, {72, 1});
  int y = k.operand(1, DType::BF16, {0, 1});
  int outB = k.operand(2, DType::BF16, {72, 1});
  int outH = k.operand(3, DType::F16, {72, 1});
  int32_t sum = k.binary(Op::Add, k.binary(Op::Mul, k.load(x), k.constant(1.5f)),
                         k.load(y));
  k.store(outB, sum);
  k.store(outH, k.binary(Op::Mul, sum, k.constant(0.3f)));
  // f32 and bf16 together: 4-wide, and an odd length for the tail.
  KernelBuilder m("bf16_f32", {4, 30});
  int a = m.operand(4, DType::F32, {32, 1});
  int b = m.operand(5, DType::BF16, {32, 1});
  int out = m.operand(6, DType::F32, {32, 1});
  m.store(out, m.binary(Op::Sub, m.load(a), m.load(b)));
  EXPECT_EQ(cuda::emitCudaKernel(k.kernel).vectorWidth, 8);
  EXPECT_EQ(cuda::emitCudaKernel(m.kernel).vectorWidth, 4);
  ErrorStats stats = checkAgainstCpu({k.kernel, m.kernel});
  EXPECT_EQ(stats.maxAbs, 0.0);
  expectNvrtcCompiles({k.kernel, m.kernel});
}

TEST(CudaEmitter, WarpRowSoftmax) {
  kir::Kernel kernel = softmaxKernel("softmax_warp", 19, 100);
  cuda::CudaKernel emitted = cuda::emitCudaKernel(kernel);
  EXPECT_EQ(emitted.schedule, cuda::CudaSchedule::WarpRow);
  EXPECT_NE(emitted.source.find("llmc_warp_max"), std::string::npos);
  ErrorStats stats = checkAgainstCpu({kernel}, {{}, defaultInit, {1e-5, 1e-7}});
  EXPECT_LT(stats.maxRel, 1e-5);
  checkAgainstCpu({kernel}, {{}, defaultInit, {1e-5, 1e-7}, 1});
}

TEST(CudaEmitter, BlockRowLayerNormF32AndBf16) {
  kir::Kernel f32 = layerNormKernel("layernorm_block", 3, 3000, DType::F32);
  kir::Kernel bf16 = layerNormKernel("layernorm_bf16", 3, 2500, DType::BF16);
  for (kir::Access &access : bf16.operands)
    access.buffer += 10;
  kir::Kernel warp = layerNormKernel("layernorm_warp", 9, 768, DType::F32);
  for (kir::Access &access : warp.operands)
    access.buffer += 20;
  EXPECT_EQ(cuda::emitCudaKernel(f32).schedule, cuda::CudaSchedule::BlockRow);
  EXPECT_EQ(cuda::emitCudaKernel(warp).schedule, cuda::CudaSchedule::WarpRow);
  // bf16 outputs may round differently when the f32 values differ in the
  // last bits: one bf16 ulp (2^-8 relative).
  checkAgainstCpu({f32, warp}, {{}, defaultInit, {2e-5, 1e-6}});
  checkAgainstCpu({bf16}, {{}, defaultInit, {1.0 / 128, 1e-6}});
  checkAgainstCpu({f32}, {{}, defaultInit, {2e-5, 1e-6}, 2});
  expectNvrtcCompiles({f32, bf16, warp});
}

// A row-level store into the buffer the row also loads: y = x + x[r, 0],
// x[r, L] = 2 x[r, 0]. The store waits for the row's loads (a row
// schedule with a barrier).
TEST(CudaEmitter, RowStoreIntoLoadedBuffer) {
  const int64_t rows = 6, length = 40, pitch = 44;
  KernelBuilder k("row_store_hazard", {rows, length});
  int x = k.operand(0, DType::F32, {pitch, 1});
  int first = k.operand(0, DType::F32, {pitch, 0});
  int last = k.operand(0, DType::F32, {pitch, 0}, length);
  int y = k.operand(1, DType::F32, {length, 1});
  int32_t head = k.load(first);
  k.store(y, k.binary(Op::Add, k.load(x), head));
  k.store(last, k.binary(Op::Mul, head, k.constant(2.0f)));
  cuda::CudaKernel emitted = cuda::emitCudaKernel(k.kernel);
  EXPECT_EQ(emitted.schedule, cuda::CudaSchedule::WarpRow);
  EXPECT_NE(emitted.source.find("__syncwarp();"), std::string::npos)
      << emitted.source;
  EXPECT_EQ(checkAgainstCpu({k.kernel}).maxAbs, 0.0);
}

// Philox: the known-answer vector of Random123 (key 0, counter 0 gives a
// first word of 0x6627e8d5), then a field of dropout-style draws, bit for
// bit against the CPU.
TEST(CudaEmitter, RandomIsBitIdentical) {
  KernelBuilder kat("random_kat", {1, 1});
  int katOut = kat.operand(0, DType::F32, {1, 1});
  int32_t zero = kat.intConstant(0);
  kat.store(katOut, kat.add({Op::Random, DType::F32, {zero, zero, zero}}));

  const int64_t rows = 7, length = 45;
  KernelBuilder k("random_field", {rows, length});
  int seed = k.operand(1, DType::I64, {0, 0});
  int out = k.operand(2, DType::F32, {length, 1});
  int keep = k.operand(3, DType::F32, {length, 1});
  int32_t flat = k.binary(
      Op::Add,
      k.binary(Op::Mul, k.index(0), k.intConstant(length)), k.index(1));
  int32_t high = k.intConstant((int64_t(3) << 32) | 5);
  int32_t draw = k.add({Op::Random, DType::F32, {k.load(seed), high, flat}});
  k.store(out, draw);
  k.store(keep, k.select(k.binary(Op::CmpLt, draw, k.constant(0.1f)),
                         k.constant(0.0f), k.constant(1.0f / 0.9f)));
  RunOptions options;
  options.init = [](int32_t index, DType dtype, size_t count, char *data) {
    if (dtype == DType::I64) {
      int64_t seedValue = 0x1234567887654321;
      std::memcpy(data, &seedValue, 8);
      return;
    }
    defaultInit(index, dtype, count, data);
  };
  options.sizes = {{1, 1}};
  ErrorStats stats = checkAgainstCpu({kat.kernel, k.kernel}, options);
  EXPECT_EQ(stats.maxAbs, 0.0);

  // The known answer, under emulation.
  std::string error;
  auto module = EmulatedModule::build({kat.kernel}, error);
  ASSERT_TRUE(module) << error;
  GuardedBuffer result(4);
  module->run("random_kat", {result.data()});
  float value;
  std::memcpy(&value, result.data(), 4);
  EXPECT_EQ(value, float(0x6627e8d5u >> 8) * 0x1p-24f);
  expectNvrtcCompiles({kat.kernel, k.kernel});
}

// An embedding lookup (a load whose index is another load), positions
// added, stored as f32 and i32/i64 integer arithmetic on the way.
TEST(CudaEmitter, GatherAndIntegerOps) {
  const int64_t batch = 2, seq = 5, channels = 16, vocab = 11;
  KernelBuilder k("embed", {batch, seq, channels});
  int tokens = k.operand(0, DType::I32, {seq, 1, 0});
  int table = k.operand(1, DType::F32, {channels, 0, 1});
  int positions = k.operand(2, DType::F32, {0, channels, 1});
  int out = k.operand(3, DType::F32, {seq * channels, channels, 1});
  int ids = k.operand(4, DType::I64, {seq * channels, channels, 1});
  int halves = k.operand(5, DType::I32, {seq * channels, channels, 1});
  int32_t token = k.load(tokens);
  int32_t row = k.load(table, {token, -1, -1});
  k.store(out, k.binary(Op::Add, row, k.load(positions)));
  int32_t column = k.index(2);
  int32_t three = k.intConstant(3);
  k.store(ids, k.binary(Op::Add, k.binary(Op::Mul, token, k.intConstant(100)),
                        k.binary(Op::Rem, column, three)));
  int32_t isMultiple = k.binary(Op::CmpEq, k.binary(Op::Rem, column, three),
                                k.intConstant(0));
  k.store(halves, k.select(isMultiple, k.binary(Op::Div, column, k.intConstant(2)),
                           k.binary(Op::Max, token, k.intConstant(4))));
  RunOptions options;
  options.sizes = {{1, vocab * channels}};
  options.init = [](int32_t index, DType dtype, size_t count, char *data) {
    if (dtype == DType::I32 && index == 0) {
      for (size_t i = 0; i < count; ++i) {
        int32_t id = int32_t((i * 7 + 3) % 11);
        std::memcpy(data + 4 * i, &id, 4);
      }
      return;
    }
    defaultInit(index, dtype, count, data);
  };
  EXPECT_EQ(checkAgainstCpu({k.kernel}, options).maxAbs, 0.0);
  expectNvrtcCompiles({k.kernel});
}

// Every math function, max/min with NaN, division, integer-to-float.
// A KV-cache write: new rows [B, H, T, D] stored into a cache [B, H, S, D]
// at each token's position (a store whose token index is a loaded id);
// the cache's other slots keep their values. The emulated CUDA kernel
// writes the same bits as the CPU's, and NVRTC compiles it.
TEST(CudaEmitter, ScatterStore) {
  const int64_t batch = 2, heads = 3, tokens = 2, slots = 7, dim = 8;
  KernelBuilder k("cache_write", {batch, heads, tokens, dim});
  int update = k.operand(0, DType::F32,
                         {heads * tokens * dim, tokens * dim, dim, 1});
  int positions = k.operand(1, DType::I32, {tokens, 0, 1, 0});
  int cache = k.operand(2, DType::F32,
                        {heads * slots * dim, slots * dim, dim, 1});
  int32_t at = k.load(positions);
  k.store(cache, k.load(update), {-1, -1, at, -1});
  RunOptions options;
  options.sizes = {{2, batch * heads * slots * dim}};
  options.init = [](int32_t index, DType dtype, size_t count, char *data) {
    if (index == 1) { // distinct in-range slots per sequence
      int32_t ids[] = {3, 4, 6, 0};
      std::memcpy(data, ids, sizeof(ids));
      return;
    }
    defaultInit(index, dtype, count, data);
  };
  EXPECT_EQ(checkAgainstCpu({k.kernel}, options).maxAbs, 0.0);
  expectNvrtcCompiles({k.kernel});
}

TEST(CudaEmitter, MathFunctions) {
  const int64_t rows = 4, length = 50;
  KernelBuilder k("math", {rows, length});
  int x = k.operand(0, DType::F32, {length, 1});
  std::vector<int> outs;
  for (int i = 0; i < 13; ++i)
    outs.push_back(k.operand(1 + i, DType::F32, {length, 1}));
  int32_t v = k.load(x);
  int32_t positive = k.binary(Op::Add, k.unary(Op::Abs, v), k.constant(0.01f));
  int32_t nan = k.constant(NAN);
  int32_t values[] = {
      k.unary(Op::Exp, v),       k.unary(Op::Log, positive),
      k.unary(Op::Tanh, v),      k.unary(Op::Erf, v),
      k.unary(Op::Sqrt, positive), k.unary(Op::Rsqrt, positive),
      k.unary(Op::Sin, v),       k.unary(Op::Cos, v),
      k.unary(Op::Neg, v),       k.binary(Op::Div, v, positive),
      k.binary(Op::Max, v, k.select(k.binary(Op::CmpLt, v, k.constant(-1.5f)),
                                    nan, k.constant(0.0f))),
      k.binary(Op::Min, v, k.constant(0.5f)),
      k.unary(Op::IToF, k.binary(Op::Sub, k.index(1), k.intConstant(25)))};
  for (int i = 0; i < 13; ++i)
    k.store(outs[i], values[i]);
  ErrorStats stats = checkAgainstCpu({k.kernel}, {{}, defaultInit, {4e-7, 1e-7}});
  EXPECT_LT(stats.maxRel, 4e-7);
  expectNvrtcCompiles({k.kernel});
}

// A rank-1 domain (one row): a pointwise kernel over all elements, and a
// total over them stored once (a block-per-row kernel with one row); a
// rank-4 domain with a transposed read.
TEST(CudaEmitter, RanksAndTransposes) {
  KernelBuilder flat("flat", {1000});
  int in = flat.operand(0, DType::F32, {1});
  int twice = flat.operand(1, DType::F32, {1});
  flat.store(twice, flat.binary(Op::Mul, flat.load(in), flat.constant(2.0f)));
  KernelBuilder total("total", {5000});
  int values = total.operand(2, DType::F32, {1});
  int sum = total.operand(3, DType::F32, {0});
  total.store(sum, total.add({Op::ReduceSum, DType::F32, {total.load(values)}}));
  KernelBuilder t("transpose4", {2, 3, 4, 20});
  int src = t.operand(4, DType::F32, {240, 1, 60, 3});
  int dst = t.operand(5, DType::F32, {240, 80, 20, 1});
  t.store(dst, t.unary(Op::Tanh, t.load(src)));
  EXPECT_EQ(cuda::emitCudaKernel(total.kernel).schedule,
            cuda::CudaSchedule::BlockRow);
  checkAgainstCpu({flat.kernel, total.kernel, t.kernel},
                  {{}, defaultInit, {1e-5, 1e-6}});
  expectNvrtcCompiles({flat.kernel, total.kernel, t.kernel});
}

//===----------------------------------------------------------------------===//
// NVRTC
//===----------------------------------------------------------------------===//

TEST(Nvrtc, ErrorsQuoteTheSourceLine) {
  std::string why;
  if (!cuda::nvrtcAvailable(&why))
    GTEST_SKIP() << why;
  cuda::NvrtcOptions options;
  options.cacheEnabled = false;
  std::string source = "extern \"C\" __global__ void broken(float *p) {\n"
                       "  p[0] = undefined_name;\n"
                       "}\n";
  auto binaries = cuda::compileCuda(source, "broken.cu", options);
  ASSERT_FALSE(bool(binaries));
  std::string message = llvm::toString(binaries.takeError());
  EXPECT_NE(message.find("broken.cu(2)"), std::string::npos) << message;
  EXPECT_NE(message.find("2 |   p[0] = undefined_name;"), std::string::npos)
      << message;
}

TEST(Nvrtc, CacheHitsAndRecompilesDamagedEntries) {
  std::string why;
  if (!cuda::nvrtcAvailable(&why))
    GTEST_SKIP() << why;
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-nvrtc-cache", dir));
  cuda::NvrtcOptions options;
  options.cacheDirectory = std::string(dir);
  std::string source = cuda::emitCudaModule({softmaxKernel("sm", 4, 64)});
  cuda::NvrtcStats first, second, third;
  auto a = cuda::compileCuda(source, "sm.cu", options, &first);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  EXPECT_FALSE(first.cacheHit);
  EXPECT_EQ(first.compilations, 3);
  EXPECT_EQ(first.warning, "");
  auto b = cuda::compileCuda(source, "sm.cu", options, &second);
  ASSERT_TRUE(bool(b));
  EXPECT_TRUE(second.cacheHit);
  EXPECT_EQ(second.compilations, 0);
  EXPECT_EQ(b->cubins[1].bytes, a->cubins[1].bytes);
  EXPECT_EQ(b->ptx, a->ptx);
  // Flip a byte in the middle of the entry: it fails its digest and is
  // compiled again.
  {
    auto file = llvm::MemoryBuffer::getFile(first.cachePath);
    ASSERT_TRUE(bool(file));
    std::string bytes = (*file)->getBuffer().str();
    bytes[bytes.size() / 2] ^= 1;
    std::error_code ec;
    llvm::raw_fd_ostream os(first.cachePath, ec);
    os << bytes;
  }
  auto c = cuda::compileCuda(source, "sm.cu", options, &third);
  ASSERT_TRUE(bool(c));
  EXPECT_FALSE(third.cacheHit);
  EXPECT_TRUE(third.corruptEntry);
  EXPECT_EQ(c->cubins[0].bytes, a->cubins[0].bytes);
  llvm::sys::fs::remove_directories(dir);

  // Image choice: sm_80's cubin for 8.x, sm_90's for 9.0, PTX beyond.
  auto sm86 = a->imageFor(86);
  ASSERT_TRUE(bool(sm86));
  EXPECT_EQ(sm86->arch, 80);
  EXPECT_FALSE(sm86->isPtx);
  auto sm90 = a->imageFor(90);
  ASSERT_TRUE(bool(sm90));
  EXPECT_EQ(sm90->arch, 90);
  auto sm120 = a->imageFor(120);
  ASSERT_TRUE(bool(sm120));
  EXPECT_TRUE(sm120->isPtx);
  auto sm75 = a->imageFor(75);
  EXPECT_FALSE(bool(sm75));
  llvm::consumeError(sm75.takeError());
}

//===----------------------------------------------------------------------===//
// The artifact's CUDA section
//===----------------------------------------------------------------------===//

TEST(CudaArtifact, SectionRoundTripsAndIsChecked) {
  std::string why;
  if (!cuda::nvrtcAvailable(&why))
    GTEST_SKIP() << why;
  kir::Program program;
  program.function = "forward";
  program.buffers.resize(2);
  for (kir::Buffer &buffer : program.buffers) {
    buffer.kind = kir::BufferKind::Input;
    buffer.shape = {19, 100};
  }
  program.kernels.push_back(softmaxKernel("softmax", 19, 100));
  kir::Step step;
  step.kernel = 0;
  program.steps.push_back(step);
  ASSERT_EQ(kir::verifyProgram(program), "");

  cuda::NvrtcOptions options;
  options.cacheEnabled = false;
  auto section = cuda::buildCudaSection(program, nullptr, options);
  ASSERT_TRUE(bool(section)) << llvm::toString(section.takeError());
  ASSERT_EQ(section->launches.size(), 1u);
  EXPECT_EQ(section->launches[0].block[0], 256);
  EXPECT_EQ(section->launches[0].grid[0], 3);
  std::vector<uint8_t> bytes = kir::serializeArtifact(program, &*section);
  auto read = kir::deserializeArtifact(bytes, "cuda.llmc");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  ASSERT_TRUE(read->cuda.has_value());
  EXPECT_EQ(read->cuda->source, section->source);
  EXPECT_EQ(read->cuda->ptx, section->ptx);
  ASSERT_EQ(read->cuda->cubins.size(), 2u);
  EXPECT_EQ(read->cuda->cubins[1].arch, 90);
  EXPECT_EQ(read->cuda->cubins[1].image, section->cubins[1].image);
  EXPECT_EQ(read->cuda->launches[0].kernel, "softmax");
  // A CPU artifact has no section, and reads as before.
  auto cpuOnly = kir::deserializeArtifact(kir::serializeProgram(program));
  ASSERT_TRUE(bool(cpuOnly));
  EXPECT_FALSE(cpuOnly->cuda.has_value());
  // A section whose launches do not name the program's kernels is refused.
  section->launches[0].kernel = "other";
  auto mismatched = kir::deserializeArtifact(
      kir::serializeArtifact(program, &*section), "bad.llmc");
  ASSERT_FALSE(bool(mismatched));
  EXPECT_NE(llvm::toString(mismatched.takeError())
                .find("bad.llmc: the CUDA section's launch 0 is for 'other'"),
            std::string::npos);
}

} // namespace
