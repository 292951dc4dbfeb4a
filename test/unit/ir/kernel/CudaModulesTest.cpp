// CUDA modules as an exported binary carries them (ir/kernel/CudaModule.h):
// a round trip keeps every field, and every truncation, trailing byte,
// foreign magic or other format version is refused with the name given.
#include "ir/kernel/CudaModule.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace llmc::cuda;

namespace {

CudaLaunch launch(int64_t grid, int block, int shared) {
  CudaLaunch l;
  l.grid[0] = grid;
  l.grid[1] = grid + 1;
  l.grid[2] = 3;
  l.block[0] = block;
  l.block[1] = 2;
  l.sharedBytes = shared;
  l.staticSharedBytes = shared / 2;
  return l;
}

CudaBinaries binaries(uint8_t fill, size_t size) {
  CudaBinaries b;
  b.cubins.push_back({80, std::vector<uint8_t>(size, fill)});
  b.cubins.push_back({90, std::vector<uint8_t>(size + 7, uint8_t(fill + 1))});
  b.ptx = ".version 8.0\n.target sm_80\n" + std::string(size % 13, 'x');
  b.ptxArch = 80;
  return b;
}

/// Modules shaped like a program's: 3 kernels, a library and 4 steps (a
/// kernel step, attention, a GEMM, the embedding gradient's two kernels).
CudaModules sample() {
  CudaModules m;
  m.kernels = binaries(7, 301);
  m.kernelLaunches = {launch(10, 128, 0), launch(1 << 20, 256, 4096),
                      launch(1, 32, 48)};
  m.hasLibrary = true;
  m.library = binaries(9, 1000);
  m.stepKernels = {{},
                   {{"llmc_flash_fwd_64_f32", launch(64, 128, 16384)}},
                   {},
                   {{"llmc_embedding_zero", launch(8192, 256, 0)},
                    {"llmc_embedding_grad_i32", launch(6, 128, 0)}}};
  return m;
}

void expectSameBinaries(const CudaBinaries &a, const CudaBinaries &b) {
  ASSERT_EQ(a.cubins.size(), b.cubins.size());
  for (size_t i = 0; i < a.cubins.size(); ++i) {
    EXPECT_EQ(a.cubins[i].arch, b.cubins[i].arch);
    EXPECT_EQ(a.cubins[i].bytes, b.cubins[i].bytes);
  }
  EXPECT_EQ(a.ptx, b.ptx);
  EXPECT_EQ(a.ptxArch, b.ptxArch);
}

void expectSameLaunch(const CudaLaunch &a, const CudaLaunch &b) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.grid[i], b.grid[i]);
    EXPECT_EQ(a.block[i], b.block[i]);
  }
  EXPECT_EQ(a.sharedBytes, b.sharedBytes);
  EXPECT_EQ(a.staticSharedBytes, b.staticSharedBytes);
}

std::string errorOf(const std::vector<char> &bytes) {
  auto modules = deserializeCudaModules(bytes, "bin: section 'cuda.decode'");
  if (modules)
    return "";
  return llvm::toString(modules.takeError());
}

TEST(CudaModulesTest, RoundTripKeepsEveryField) {
  CudaModules original = sample();
  std::vector<char> bytes = serializeCudaModules(original);
  auto read = deserializeCudaModules(bytes, "test");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_TRUE(read->kernelsPrecompiled);
  expectSameBinaries(original.kernels, read->kernels);
  ASSERT_EQ(read->kernelLaunches.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    expectSameLaunch(original.kernelLaunches[i], read->kernelLaunches[i]);
  EXPECT_TRUE(read->hasLibrary);
  expectSameBinaries(original.library, read->library);
  ASSERT_EQ(read->stepKernels.size(), original.stepKernels.size());
  for (size_t s = 0; s < original.stepKernels.size(); ++s) {
    ASSERT_EQ(read->stepKernels[s].size(), original.stepKernels[s].size());
    for (size_t k = 0; k < original.stepKernels[s].size(); ++k) {
      EXPECT_EQ(read->stepKernels[s][k].name, original.stepKernels[s][k].name);
      expectSameLaunch(read->stepKernels[s][k].launch,
                       original.stepKernels[s][k].launch);
    }
  }
  // And again: the bytes are a function of the modules.
  EXPECT_EQ(serializeCudaModules(*read), bytes);
}

TEST(CudaModulesTest, WithoutLibraryOrKernels) {
  CudaModules empty;
  auto read = deserializeCudaModules(serializeCudaModules(empty), "test");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_FALSE(read->hasLibrary);
  EXPECT_TRUE(read->kernels.cubins.empty());
  EXPECT_TRUE(read->stepKernels.empty());
}

TEST(CudaModulesTest, EveryTruncationIsRefused) {
  std::vector<char> bytes = serializeCudaModules(sample());
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<char> cut(bytes.begin(), bytes.begin() + size);
    std::string error = errorOf(cut);
    ASSERT_FALSE(error.empty()) << "a prefix of " << size << " bytes was read";
    EXPECT_EQ(error.rfind("bin: section 'cuda.decode': ", 0), 0u) << error;
  }
  EXPECT_EQ(errorOf(std::vector<char>(bytes.begin(), bytes.begin() + 100)),
            "bin: section 'cuda.decode': truncated CUDA modules");
}

TEST(CudaModulesTest, TrailingBytesMagicAndVersion) {
  std::vector<char> bytes = serializeCudaModules(sample());
  std::vector<char> longer = bytes;
  longer.insert(longer.end(), {'x', 'y'});
  EXPECT_EQ(errorOf(longer),
            "bin: section 'cuda.decode': 2 bytes after the CUDA modules");
  std::vector<char> foreign = bytes;
  foreign[0] = 'X';
  EXPECT_EQ(errorOf(foreign),
            "bin: section 'cuda.decode': not CUDA modules (no LLMCCUDA magic)");
  std::vector<char> newer = bytes;
  uint32_t version = 2;
  std::memcpy(newer.data() + 8, &version, 4);
  EXPECT_EQ(errorOf(newer), "bin: section 'cuda.decode': CUDA modules of "
                            "format 2; this llmc reads 1");
}

// A count that claims more items than the bytes could hold is refused
// before anything is allocated for it.
TEST(CudaModulesTest, HugeCountsAreRefusedWithoutAllocating) {
  std::vector<char> bytes = serializeCudaModules(sample());
  uint32_t huge = 0xffffffffu;
  std::memcpy(bytes.data() + 12, &huge, 4); // the kernels' cubin count
  EXPECT_EQ(errorOf(bytes),
            "bin: section 'cuda.decode': truncated CUDA modules");
}

} // namespace
