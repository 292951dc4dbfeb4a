// The 2:4 sparse tensor-core GEMM (codegen/KernelToCuda/SparseGemm.h): NVRTC
// compiles it for sm_80 and sm_90, and under the CPU emulation of CUDA
// (CudaEmulation.h beside this file, which emulates mma.sp m16n8k32 from
// our reading of the PTX ISA) it matches the dense product of the masked,
// rounded weights in double on odd shapes, bf16 and f16, with and without a
// k tail; the packed layout (runtime/Weights/Sparsity.h's TensorCoreTwoOfFour).
#include "codegen/KernelToCuda/Nvrtc.h"
#include "codegen/KernelToCuda/SparseGemm.h"
#include "runtime/Weights/Sparsity.h"
#include "runtime/Weights/Weights.h"
#include "test/unit/codegen/KernelToCuda/EmulationRunner.h"
#include "test/unit/runtime/Weights/RandomTwoOfFour.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>

using namespace llmc;
using namespace llmc::cuda;
using runtime::CompressedTwoOfFour;
using runtime::TensorCoreTwoOfFour;
using test::randomTwoOfFour;

namespace {

uint16_t toBits(float v, bool f16) {
  return f16 ? runtime::floatToHalf(v) : runtime::floatToBFloat16(v);
}
float fromBits(uint16_t bits, bool f16) {
  return f16 ? runtime::halfToFloat(bits) : runtime::bfloat16ToFloat(bits);
}

TEST(SparseGemmCuda, NvrtcCompilesBothKernelsForSm80AndSm90) {
  std::string why;
  if (!nvrtcAvailable(&why))
    GTEST_SKIP() << "NVRTC not available: " << why;
  NvrtcOptions options;
  options.archs = {80, 90};
  options.ptxArch = 80;
  options.cacheEnabled = false; // compile for real, every time
  llvm::Expected<CudaBinaries> binaries =
      compileCuda(emitSparseGemmModule(), "sparse_gemm.cu", options);
  ASSERT_TRUE(bool(binaries)) << llvm::toString(binaries.takeError());
  ASSERT_EQ(binaries->cubins.size(), 2u);
  EXPECT_EQ(binaries->cubins[0].arch, 80);
  EXPECT_EQ(binaries->cubins[1].arch, 90);
  for (bool f16 : {false, true})
    EXPECT_NE(binaries->ptx.find(".entry " + sparseGemmName(f16)),
              std::string::npos);
  // The instruction itself, not an emulation or a dense fallback.
  for (const char *instruction :
       {"mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16."
        "bf16.f32",
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16."
        "f32"})
    EXPECT_NE(binaries->ptx.find(instruction), std::string::npos)
        << instruction;
}

TEST(SparseGemmCuda, ArgumentBlockLayout) {
  // llmc_sparse_gemm_args in the source: 4 pointers, then 7 long longs.
  EXPECT_EQ(sizeof(SparseGemmArgs), 4 * 8 + 7 * 8u);
  EXPECT_EQ(offsetof(SparseGemmArgs, y), 24u);
  EXPECT_EQ(offsetof(SparseGemmArgs, m), 32u);
  EXPECT_EQ(offsetof(SparseGemmArgs, kTiles), 80u);
}

TEST(SparseGemmCuda, TensorCorePackingPadsWithValidMetadata) {
  std::mt19937 rng(3);
  int64_t n = 27, k = 36; // 2 x 2 tiles, the last row and column padded
  std::vector<float> w = randomTwoOfFour(n, k, rng);
  CompressedTwoOfFour c = cantFail(runtime::compressTwoOfFour("w", w, n, k));
  TensorCoreTwoOfFour t = runtime::packForTensorCores(c);
  EXPECT_EQ(t.rowTiles, 2);
  EXPECT_EQ(t.kTiles, 2);
  EXPECT_EQ(t.bytes(), 2 * 2 * (512 + 64));
  // Every nibble of a padded group (rows 27..31, groups 9..15) reads
  // 0b0100: positions 0 and 1, valid metadata for zero values.
  for (int64_t tile : {int64_t(1), int64_t(3)})
    for (int word = 0; word < 16; ++word) {
      uint32_t m = t.meta[size_t(tile * 16 + word)];
      for (int shift = 0; shift < 32; shift += 4) {
        int group = (word % 2) * 4 + shift % 16 / 4; // in the tile
        int row = word / 2 + 8 * (shift / 16) + int(tile / 2) * 16;
        bool real = row < n && (tile % 2) * 8 + group < k / 4;
        if (!real) {
          EXPECT_EQ(m >> shift & 0xf, 0x4u) << "tile " << tile;
        }
      }
    }
  // A real group: row 26 (tile row 1, row 10 of it: g = 2, the upper
  // half), group 8 (tile column 1, chunk 0: lane t = 0, register 1, the
  // metadata word of lane 4 g + 0 in bits 16..19).
  ASSERT_GT(n, 26);
  auto [p0, p1] = c.positions(26, 8);
  uint32_t word = t.meta[size_t(3 * 16 + 2 * 2 + 0)];
  EXPECT_EQ(word >> 16 & 0xf, uint32_t(p0 | p1 << 2));
  uint32_t pair = t.values[size_t((3 * 32 + 4 * 2 + 0) * 4 + 1)];
  EXPECT_EQ(runtime::bfloat16ToFloat(uint16_t(pair)),
            runtime::bfloat16ToFloat(runtime::floatToBFloat16(
                w[26 * k + 32 + p0])));
  EXPECT_EQ(runtime::bfloat16ToFloat(uint16_t(pair >> 16)),
            runtime::bfloat16ToFloat(runtime::floatToBFloat16(
                w[26 * k + 32 + p1])));
}

/// The module compiled for emulation, with a launch wrapper per kernel
/// that takes the argument block.
class EmulatedSparseGemm {
public:
  using RunFn = void (*)(const void *args, const long long *grid,
                         const int *block);

  static std::unique_ptr<EmulatedSparseGemm> build(std::string &error) {
    std::string source = emitSparseGemmModule();
    for (bool f16 : {false, true})
      source += "extern \"C\" void run_" + sparseGemmName(f16) +
                "(const void *args, const long long *grid, const int "
                "*block) {\n  llmc_emu::launch(grid, block, [&] { " +
                sparseGemmName(f16) +
                "(*(const llmc_sparse_gemm_args *)args); });\n}\n";
    std::unique_ptr<EmulatedSparseGemm> module(new EmulatedSparseGemm());
    module->library = test::EmulatedLibrary::build(source, error);
    if (!module->library)
      return nullptr;
    for (bool f16 : {false, true})
      module->run[f16] = reinterpret_cast<RunFn>(
          module->library->lookup("run_" + sparseGemmName(f16)));
    return module;
  }

  void launch(bool f16, const SparseGemmArgs &args) const {
    CudaLaunch shape = sparseGemmLaunch(args.n, args.m);
    long long grid[3] = {shape.grid[0], shape.grid[1], shape.grid[2]};
    run[f16](&args, grid, shape.block);
  }

private:
  std::unique_ptr<test::EmulatedLibrary> library;
  RunFn run[2] = {nullptr, nullptr};
};

const EmulatedSparseGemm &emulated() {
  static std::unique_ptr<EmulatedSparseGemm> module = [] {
    std::string error;
    auto built = EmulatedSparseGemm::build(error);
    if (!built)
      ADD_FAILURE() << error;
    return built;
  }();
  if (!module)
    std::abort();
  return *module;
}

/// y = x · Wᵀ under emulation against the dense product in double of the
/// values the kernel multiplies (x and W's kept values rounded to the
/// type): |y - ref| <= 1e-5 * sum |terms| (f32 accumulation; the rounding
/// of the inputs is in the reference). x rows have 4 NaN elements past k
/// and y 3 sentinel columns past n: a read past k or a write past n fails.
void checkProduct(bool f16, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << (f16 ? "f16" : "bf16") << " m=" << m
                                  << " n=" << n << " k=" << k);
  std::mt19937 rng(seed);
  std::vector<float> w = randomTwoOfFour(n, k, rng);
  TensorCoreTwoOfFour packed = runtime::packForTensorCores(
      cantFail(runtime::compressTwoOfFour("w", w, n, k)), f16);
  int64_t ldx = k + 4, ldy = n + 3;
  std::normal_distribution<float> normal;
  std::vector<uint16_t> x(m * ldx, toBits(std::nanf(""), f16));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c)
      x[i * ldx + c] = toBits(normal(rng), f16);
  const float sentinel = 12345.0f;
  std::vector<float> y(m * ldy, sentinel);
  SparseGemmArgs args =
      sparseGemmArgs(m, n, k, packed.values.data(), packed.meta.data(),
                     x.data(), ldx, y.data(), ldy);
  EXPECT_EQ(args.rowTiles, packed.rowTiles);
  EXPECT_EQ(args.kTiles, packed.kTiles);
  emulated().launch(f16, args);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldy; ++j) {
      float got = y[i * ldy + j];
      if (j >= n) {
        ASSERT_EQ(got, sentinel) << "wrote y[" << i << ", " << j << "]";
        continue;
      }
      double ref = 0, scale = 0;
      for (int64_t c = 0; c < k; ++c) {
        double term = double(fromBits(x[i * ldx + c], f16)) *
                      double(fromBits(toBits(w[j * k + c], f16), f16));
        ref += term;
        scale += std::fabs(term);
      }
      ASSERT_LE(std::fabs(got - ref), 1e-5 * scale + 1e-30)
          << "y[" << i << ", " << j << "] = " << got << ", dense " << ref;
    }
}

TEST(SparseGemmCudaEmulation, MatchesTheDenseProductOnOddShapes) {
  for (bool f16 : {false, true}) {
    // k a multiple of 32: whole tiles.
    checkProduct(f16, 1, 19, 32, 1);   // decode: one token
    checkProduct(f16, 7, 37, 64, 2);   // fewer tokens than a tile of 8
    checkProduct(f16, 33, 50, 96, 3);  // a second block of 32 tokens
    checkProduct(f16, 45, 131, 128, 4); // several blocks of W's rows
    // k tails (a multiple of 4, not of 32): padded tiles.
    checkProduct(f16, 3, 70, 36, 5);
    checkProduct(f16, 9, 17, 100, 6);
    checkProduct(f16, 1, 33, 260, 7);
  }
}

TEST(SparseGemmCudaEmulation, GptShapes) {
  // GPT-2 124M's mlp.c_proj (768 x 3072) in a decode step and its c_fc
  // (3072 x 768) for a short odd prefill.
  checkProduct(false, 1, 768, 3072, 11);
  checkProduct(false, 5, 3072, 768, 12);
}

TEST(SparseGemmCudaEmulation, LaunchCoversEveryTile) {
  CudaLaunch launch = sparseGemmLaunch(131, 45);
  EXPECT_EQ(launch.grid[0], 3); // 9 tiles of 16 rows, 4 warps a block
  EXPECT_EQ(launch.grid[1], 2); // 2 blocks of 32 tokens
  EXPECT_EQ(launch.block[0], 128);
  EXPECT_EQ(launch.sharedBytes, 0);
}

/// One launch over a 16 x 32 weight whose metadata word 5 (row 2, chunks
/// 4..7) has chunk 5's nibble cleared: one position named twice.
void runWithBadMetadata() {
  std::mt19937 rng(1);
  int64_t n = 16, k = 32;
  std::vector<float> w = randomTwoOfFour(n, k, rng);
  TensorCoreTwoOfFour packed = runtime::packForTensorCores(
      cantFail(runtime::compressTwoOfFour("w", w, n, k)));
  packed.meta[5] &= ~0xf0u;
  std::vector<uint16_t> x(8 * k, 0);
  std::vector<float> y(8 * n);
  SparseGemmArgs args = sparseGemmArgs(1, n, k, packed.values.data(),
                                       packed.meta.data(), x.data(), k,
                                       y.data(), n);
  emulated().launch(false, args);
}

TEST(SparseGemmCudaEmulationDeathTest, MetadataNamingAPositionTwiceAborts) {
  // The emulation reads the metadata it is given: a nibble naming one
  // position twice (undefined for mma.sp) aborts, naming row and chunk.
  EXPECT_DEATH(runWithBadMetadata(),
               "row 2, chunk 5 is not two increasing positions");
}

} // namespace
