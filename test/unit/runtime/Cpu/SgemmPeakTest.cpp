// The yardstick of MFU on the CPU: the sgemm peak measured now, and the best
// the machine has shown, kept in the cache directory.
#include "runtime/Cpu/SgemmPeak.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdlib>
#include <fstream>
#include <vector>

using namespace llmc::runtime;

namespace {

// Every library the executor can choose measures a positive peak on the
// pool (the executor's way: one library thread per chunk).
TEST(SgemmPeakTest, EveryLibraryMeasuresAPeak) {
  std::vector<llmc::cpu::SgemmLibrary> libraries = {
      llmc::cpu::SgemmLibrary::OpenBlas};
  llvm::Expected<const llmc::cpu::SgemmSetup &> setup =
      llmc::cpu::sgemmSetup();
  ASSERT_TRUE(bool(setup)) << llvm::toString(setup.takeError());
  if (setup->oneDnnLoaded)
    libraries.push_back(llmc::cpu::SgemmLibrary::OneDnn);
  for (llmc::cpu::SgemmLibrary library : libraries)
    EXPECT_GT(measureSgemmPeak(128, 2, 2, library), 0.1)
        << llmc::cpu::sgemmLibraryName(library);
}

TEST(SgemmPeakTest, TheBestMeasurementIsKeptAndUsed) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-peak", dir));
  ::setenv("LLMC_CACHE_DIR", dir.c_str(), 1);

  // The first run records what it measured.
  MachinePeak first = machineSgemmPeak(64, 1, 2);
  ASSERT_GT(first.measuredGflops, 0);
  EXPECT_EQ(first.bestGflops, first.measuredGflops);
  ASSERT_FALSE(first.record.empty());
  auto text = llvm::MemoryBuffer::getFile(first.record);
  ASSERT_TRUE(bool(text));
  std::string key = (*text)->getBuffer().split(' ').second.trim().str();
  EXPECT_THAT(key, testing::EndsWith("/64/1"));

  // A better record (a quieter moment of the same machine) wins over a
  // measurement on a busy one.
  {
    std::ofstream record(first.record);
    record << 1e6 << " " << key << "\n";
  }
  MachinePeak second = machineSgemmPeak(64, 1, 2);
  EXPECT_EQ(second.bestGflops, 1e6);
  EXPECT_LT(second.measuredGflops, 1e6);
  // Read without measuring (llmc run's start-up), for this size only.
  MachinePeak recorded = recordedSgemmPeak(64, 1);
  EXPECT_EQ(recorded.bestGflops, 1e6);
  EXPECT_EQ(recorded.measuredGflops, 0);
  EXPECT_EQ(recorded.record, first.record);
  EXPECT_EQ(recordedSgemmPeak(128, 1).bestGflops, 0);

  // A record of another machine or size is not this one's.
  {
    std::ofstream record(first.record);
    record << 1e6 << " other-cpu/Haswell/64/1\n";
  }
  MachinePeak third = machineSgemmPeak(64, 1, 2);
  EXPECT_EQ(third.bestGflops, third.measuredGflops);
  // The file holds 6 decimals.
  EXPECT_NEAR(recordedSgemmPeak(64, 1).bestGflops, third.measuredGflops,
              1e-5);

  ::unsetenv("LLMC_CACHE_DIR");
  llvm::sys::fs::remove_directories(dir);
}

} // namespace
