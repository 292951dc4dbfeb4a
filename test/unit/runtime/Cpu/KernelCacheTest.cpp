// The on-disk kernel cache: hits skip compiling, keys follow the kernels,
// damaged entries are recompiled, and cache trouble never fails a load.
#include "ir/kernel/AtomicFile.h"
#include "runtime/Cpu/KernelCache.h"
#include "test/unit/codegen/KernelToCpu/KernelTestUtil.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <tuple>
#include <cmath>
#include <cstdlib>

using namespace llmc;
using namespace llmc::test;
using kir::DType;
using kir::Op;

using ::testing::EndsWith;
using ::testing::StartsWith;

namespace {

/// out = x * scale + shift over [rows, length].
kir::Kernel scaleShiftKernel(const std::string &name, float scale,
                             int64_t length = 24) {
  KernelBuilder k(name, {3, length});
  int x = k.operand(0, DType::F32, {length, 1});
  int out = k.operand(1, DType::F32, {length, 1});
  k.store(out, k.binary(Op::Add,
                        k.binary(Op::Mul, k.load(x), k.constant(scale)),
                        k.constant(0.5f)));
  return k.kernel;
}

/// A fresh directory under the system temp dir, removed at the end.
class KernelCacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-cache-test",
                                                      directory));
    options.directory = std::string(directory);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(directory); }

  /// Loads through the cache, counting calls of the compiler.
  std::unique_ptr<cpu::CpuKernels> load(const std::vector<kir::Kernel> &kernels,
                                        cpu::CacheStats &stats) {
    auto compile = [&]() {
      ++compiles;
      return cpu::compileKernelsToObject(kernels);
    };
    auto loaded = cpu::loadCpuKernels(kernels, compile, &stats, options);
    if (!loaded) {
      ADD_FAILURE() << llvm::toString(loaded.takeError());
      return nullptr;
    }
    return std::move(*loaded);
  }

  /// Runs `name` on 3 x 24 inputs 0, 1, 2, ... and returns element 5.
  static float runAt5(cpu::CpuKernels &kernels, const std::string &name) {
    auto function = kernels.lookup(name);
    if (!function) {
      ADD_FAILURE() << llvm::toString(function.takeError());
      return NAN;
    }
    std::vector<float> x(72), out(72, NAN);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float(i);
    void *operands[] = {x.data(), out.data()};
    (*function)(operands, 0, 3);
    return out[5];
  }

  llvm::SmallString<128> directory;
  cpu::KernelCacheOptions options;
  int compiles = 0;
};

TEST_F(KernelCacheTest, SecondLoadIsAHit) {
  std::vector<kir::Kernel> kernels = {scaleShiftKernel("affine", 2)};
  cpu::CacheStats first, second;
  auto cold = load(kernels, first);
  ASSERT_TRUE(cold);
  EXPECT_FALSE(first.hit);
  EXPECT_EQ(compiles, 1);
  EXPECT_TRUE(llvm::sys::fs::exists(first.path)) << first.path;
  EXPECT_TRUE(first.warning.empty()) << first.warning;

  auto warm = load(kernels, second);
  ASSERT_TRUE(warm);
  EXPECT_TRUE(second.hit);
  EXPECT_FALSE(second.corruptEntry);
  EXPECT_EQ(compiles, 1) << "a hit must not compile";
  EXPECT_EQ(second.compileSeconds, 0);
  EXPECT_EQ(runAt5(*warm, "affine"), 10.5f);
  EXPECT_EQ(runAt5(*cold, "affine"), 10.5f);
}

TEST_F(KernelCacheTest, ParallelRunsLinkAsOneAndAreCached) {
  // Five kernels compiled in three runs on three threads, bundled: every
  // kernel computes what it computes in one object, and the bundle is an
  // ordinary cache entry.
  std::vector<kir::Kernel> kernels;
  for (int i = 0; i < 5; ++i)
    kernels.push_back(
        scaleShiftKernel("affine" + std::to_string(i), float(i + 2)));
  auto objects = cpu::compileKernelsToObjects(kernels, 3);
  ASSERT_TRUE(bool(objects)) << llvm::toString(objects.takeError());
  EXPECT_EQ(objects->size(), 3u);
  // More runs than kernels: one per kernel.
  auto many = cpu::compileKernelsToObjects({kernels[0], kernels[1]}, 8);
  ASSERT_TRUE(bool(many)) << llvm::toString(many.takeError());
  EXPECT_EQ(many->size(), 2u);

  cpu::CacheStats first, second;
  auto compile = [&]() -> llvm::Expected<llvm::SmallVector<char, 0>> {
    ++compiles;
    return cpu::bundleObjects(*objects);
  };
  for (cpu::CacheStats *stats : {&first, &second}) {
    auto loaded = cpu::loadCpuKernels(kernels, compile, stats, options);
    ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
    // x * (i + 2) + 0.5 at x = 5.
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(runAt5(**loaded, "affine" + std::to_string(i)),
                5.0f * float(i + 2) + 0.5f);
  }
  EXPECT_FALSE(first.hit);
  EXPECT_TRUE(second.hit);
  EXPECT_EQ(compiles, 1);

  // A bundle whose sizes do not add up is refused with what is wrong.
  llvm::SmallVector<char, 0> bundle = cpu::bundleObjects(*objects);
  auto truncated = cpu::CpuKernels::load(
      llvm::ArrayRef<char>(bundle).drop_back(1), "truncated.o");
  ASSERT_FALSE(bool(truncated));
  EXPECT_THAT(llvm::toString(truncated.takeError()),
              testing::HasSubstr("'truncated.o': malformed object bundle"));
  bundle.push_back(0);
  auto longer = cpu::unbundleObjects(bundle);
  ASSERT_FALSE(bool(longer));
  EXPECT_THAT(llvm::toString(longer.takeError()),
              testing::HasSubstr("1 bytes after the last object"));
}

TEST_F(KernelCacheTest, KeyFollowsKernelsAndSalt) {
  std::string base = cpu::cpuKernelCacheKey({scaleShiftKernel("affine", 2)});
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base, cpu::cpuKernelCacheKey({scaleShiftKernel("affine", 2)}));
  // Any change to a kernel changes the key: the last bit of a constant,
  // a name, a shape, or the salt.
  EXPECT_NE(base, cpu::cpuKernelCacheKey(
                      {scaleShiftKernel("affine", 2.0f + 0x1p-22f)}));
  EXPECT_NE(base, cpu::cpuKernelCacheKey({scaleShiftKernel("affine", 3)}));
  EXPECT_NE(base, cpu::cpuKernelCacheKey({scaleShiftKernel("other", 2)}));
  EXPECT_NE(base, cpu::cpuKernelCacheKey({scaleShiftKernel("affine", 2, 25)}));
  EXPECT_NE(base,
            cpu::cpuKernelCacheKey({scaleShiftKernel("affine", 2)}, "width=4"));

  cpu::CacheStats a, b;
  ASSERT_TRUE(load({scaleShiftKernel("affine", 2)}, a));
  auto other = load({scaleShiftKernel("affine", 3)}, b);
  ASSERT_TRUE(other);
  EXPECT_FALSE(b.hit);
  EXPECT_NE(a.path, b.path);
  EXPECT_EQ(runAt5(*other, "affine"), 15.5f);
}

// Every kind of damage is detected by the header checks and recompiled;
// the entry is then whole again.
TEST_F(KernelCacheTest, DamagedEntriesAreRecompiled) {
  std::vector<kir::Kernel> kernels = {scaleShiftKernel("affine", 2)};
  cpu::CacheStats stats;
  ASSERT_TRUE(load(kernels, stats));
  std::string path = stats.path;
  auto original = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(original));
  std::string bytes = (*original)->getBuffer().str();

  // Each damage, and what the warning says of it.
  std::vector<std::tuple<std::string, std::string, std::string>> damages = {
      {"empty", "", "0 bytes, shorter than its header"},
      {"truncated header", bytes.substr(0, 20),
       "20 bytes, shorter than its header"},
      {"truncated payload", bytes.substr(0, bytes.size() / 2),
       "its header records"},
      {"flipped payload byte",
       [&] {
         std::string b = bytes;
         b[b.size() - 100] ^= 0x40;
         return b;
       }(),
       "SHA-256 mismatch"},
      {"bad magic", "XXXXXXXX" + bytes.substr(8), "bad magic"},
      {"appended garbage", bytes + "garbage", "its header records"},
  };
  int expectedCompiles = compiles;
  for (const auto &[what, content, why] : damages) {
    {
      std::error_code error;
      llvm::raw_fd_ostream os(path, error);
      ASSERT_FALSE(error) << error.message();
      os << content;
    }
    cpu::CacheStats damaged;
    auto kernelsLoaded = load(kernels, damaged);
    ASSERT_TRUE(kernelsLoaded) << what;
    EXPECT_FALSE(damaged.hit) << what;
    EXPECT_TRUE(damaged.corruptEntry) << what;
    EXPECT_THAT(damaged.warning,
                StartsWith("kernel cache entry " + path + " is damaged (" + why))
        << what;
    EXPECT_THAT(damaged.warning,
                EndsWith("); compiling the kernels again and replacing it"))
        << what;
    EXPECT_EQ(compiles, ++expectedCompiles) << what;
    EXPECT_EQ(runAt5(*kernelsLoaded, "affine"), 10.5f) << what;

    cpu::CacheStats repaired;
    ASSERT_TRUE(load(kernels, repaired)) << what;
    EXPECT_TRUE(repaired.hit) << what;
    EXPECT_EQ(repaired.warning, "") << what; // said once
    EXPECT_EQ(compiles, expectedCompiles) << what;
  }
}

// A cache that cannot be written (its directory is a file) still loads.
TEST_F(KernelCacheTest, UnwritableCacheStillLoads) {
  llvm::SmallString<128> file(directory);
  llvm::sys::path::append(file, "not-a-directory");
  {
    std::error_code error;
    llvm::raw_fd_ostream os(file, error);
    ASSERT_FALSE(error);
  }
  options.directory = std::string(file);
  cpu::CacheStats stats;
  auto loaded = load({scaleShiftKernel("affine", 2)}, stats);
  ASSERT_TRUE(loaded);
  EXPECT_FALSE(stats.hit);
  EXPECT_FALSE(stats.warning.empty());
  EXPECT_EQ(runAt5(*loaded, "affine"), 10.5f);

  options.enabled = false;
  cpu::CacheStats off;
  ASSERT_TRUE(load({scaleShiftKernel("affine", 2)}, off));
  EXPECT_TRUE(off.path.empty());
  EXPECT_EQ(compiles, 2);
}

TEST_F(KernelCacheTest, CompileErrorsPropagate) {
  auto failing = []() -> llvm::Expected<llvm::SmallVector<char, 0>> {
    return llvm::createStringError("the compiler said no");
  };
  auto loaded = cpu::loadCpuKernels({scaleShiftKernel("affine", 2)}, failing,
                                    nullptr, options);
  ASSERT_FALSE(loaded);
  EXPECT_NE(llvm::toString(loaded.takeError()).find("the compiler said no"),
            std::string::npos);
}

TEST(KernelCacheDirectory, FollowsTheEnvironment) {
  auto get = [](const char *name) -> std::optional<std::string> {
    const char *value = getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  auto restore = [](const char *name, std::optional<std::string> value) {
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  };
  std::optional<std::string> llmc = get("LLMC_CACHE_DIR"),
                             xdg = get("XDG_CACHE_HOME"), home = get("HOME");
  setenv("LLMC_CACHE_DIR", "/tmp/llmc-explicit", 1);
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(llmc::kir::defaultCacheDirectory(), "/tmp/llmc-explicit");
  unsetenv("LLMC_CACHE_DIR");
  EXPECT_EQ(llmc::kir::defaultCacheDirectory(), "/tmp/xdg/llmc");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(llmc::kir::defaultCacheDirectory(), "/tmp/home/.cache/llmc");
  restore("LLMC_CACHE_DIR", llmc);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

// Prints the cold-compile and cache-hit times of 20 kernels of the kinds a
// GPT block has (a figure for people, not an assertion).
TEST_F(KernelCacheTest, TwentyKernelsColdAndWarm) {
  std::vector<kir::Kernel> kernels;
  for (int i = 0; i < 20; ++i) {
    KernelBuilder k("k" + std::to_string(i), {64, 768});
    int x = k.operand(0, DType::F32, {768, 1});
    int w = k.operand(1, DType::F32, {0, 1});
    int out = k.operand(2, i % 2 ? DType::BF16 : DType::F32, {768, 1});
    int32_t xs = k.load(x);
    int32_t y = k.binary(Op::Mul, xs, k.load(w));
    if (i % 4 == 0) // normalize the row
      y = k.binary(Op::Div, y, k.unary(Op::ReduceSum, k.unary(Op::Abs, y)));
    if (i % 4 == 1) // GELU (tanh form)
      y = k.binary(Op::Mul, y,
                   k.binary(Op::Add, k.constant(1),
                            k.unary(Op::Tanh, k.binary(Op::Mul, y,
                                                       k.constant(0.8f)))));
    if (i % 4 == 2) // softmax
      y = k.unary(Op::Exp,
                  k.binary(Op::Sub, y, k.unary(Op::ReduceMax, y)));
    k.store(out, k.binary(Op::Add, y, k.constant(float(i))));
    kernels.push_back(k.kernel);
  }
  // Linking happens at the first lookup, so the times include them all.
  auto loadAndLookUp = [&](cpu::CacheStats &stats) {
    auto start = std::chrono::steady_clock::now();
    std::unique_ptr<cpu::CpuKernels> loaded = load(kernels, stats);
    for (const kir::Kernel &kernel : kernels)
      if (!loaded || !loaded->lookup(kernel.name))
        ADD_FAILURE() << "cannot look up " << kernel.name;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  cpu::CacheStats cold, warm;
  double coldSeconds = loadAndLookUp(cold);
  double warmSeconds = loadAndLookUp(warm);
  EXPECT_FALSE(cold.hit);
  EXPECT_TRUE(warm.hit);
  llvm::outs() << llvm::format("20 kernels: cold %.3f s (compile %.3f s), "
                               "cache hit %.3f s\n",
                               coldSeconds, cold.compileSeconds, warmSeconds);
  llvm::outs().flush();
}

} // namespace
