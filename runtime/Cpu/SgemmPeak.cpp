// This machine's sgemm peak, measured.
#include "runtime/Cpu/SgemmPeak.h"

#include "ir/kernel/AtomicFile.h"
#include "runtime/Cpu/Sgemm.h"
#include "runtime/Cpu/SignalMask.h"
#include "runtime/Cpu/ThreadPool.h"
#include "runtime/Exec/HostMemory.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"
#include "llvm/TargetParser/Host.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

namespace {
/// The process's f32 GEMM libraries; OpenBLAS alone when LLMC_CPU_SGEMM is
/// not valid (executors refuse to start then, with the reason).
const llmc::cpu::SgemmSetup &sgemmLibraries() {
  static const llmc::cpu::SgemmSetup fallback;
  llvm::Expected<const llmc::cpu::SgemmSetup &> setup = llmc::cpu::sgemmSetup();
  if (!setup) {
    llvm::consumeError(setup.takeError());
    return fallback;
  }
  return *setup;
}

/// The library of the peak's product: the one the executors use.
llmc::cpu::SgemmLibrary peakLibrary() { return sgemmLibraries().library; }
} // namespace

std::string llmc::runtime::describeBlas() {
  const char *coretype = std::getenv("OPENBLAS_CORETYPE");
  const char *l2 = std::getenv("OPENBLAS_L2_SIZE");
  llvm::Expected<const cpu::SgemmSetup &> setup = cpu::sgemmSetup();
  std::string sgemm = setup ? "f32 GEMMs on " + cpu::describeSgemm(*setup)
                            : "f32 GEMMs: " + llvm::toString(setup.takeError());
  return sgemm + "; " + openblas_get_config() + ", core " +
         openblas_get_corename() +
         " (OPENBLAS_CORETYPE=" + (coretype ? coretype : "unset") +
         ", OPENBLAS_L2_SIZE=" + (l2 ? l2 : "unset") + ")";
}

double llmc::runtime::measureSgemmPeak(int n, int threads, int reps,
                                        std::optional<cpu::SgemmLibrary> library) {
  // The executor's way: the library on one thread per call, C's rows in
  // chunks on the pool (ThreadPool.h), so that a busy neighbour slows the
  // measurement as it slows a step, no more (a library's own threads wait
  // for each other at every block).
  using Clock = std::chrono::steady_clock;
  cpu::AsyncSignalsBlocked shield;
  auto matrix = [&](float value) {
    std::unique_ptr<float, decltype(&std::free)> m(
        reinterpret_cast<float *>(
            allocateHostMemory(int64_t(n) * n * sizeof(float))),
        &std::free);
    if (!m)
      llvm::report_fatal_error(llvm::Twine("sgemm peak: cannot allocate a ") +
                               llvm::Twine(n) + "x" + llvm::Twine(n) +
                               " f32 matrix");
    std::fill(m.get(), m.get() + size_t(n) * n, value);
    return m;
  };
  auto a = matrix(0.5f), b = matrix(0.25f), c = matrix(0.0f);
  ThreadPool pool(threads);
  cpu::SgemmLibrary chosen = library.value_or(peakLibrary());
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    pool.parallelFor(
        n,
        [&](int64_t begin, int64_t end, int) {
          cpu::sgemm(chosen, false, true, end - begin, n, n, 1.0f,
                     a.get() + begin * n, n, b.get(), n, 0.0f,
                     c.get() + begin * n, n);
        },
        /*minItems=*/std::max<int64_t>(64, n / (2 * pool.size())));
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return 2.0 * n * n * n / best / 1e9;
}

namespace {
/// Where the record of (n, threads) lives, and its key.
std::pair<std::string, std::string> recordPath(int n, int threads) {
  std::string directory = llmc::kir::defaultCacheDirectory();
  if (directory.empty())
    return {};
  llmc::cpu::SgemmLibrary library = peakLibrary();
  std::string key = llvm::sys::getHostCPUName().str() + "/" +
                    (library == llmc::cpu::SgemmLibrary::OneDnn
                         ? sgemmLibraries().oneDnn
                         : std::string("OpenBLAS ") + openblas_get_corename()) +
                    "/" + std::to_string(n) + "/" + std::to_string(threads);
  llvm::SmallString<256> path(directory);
  llvm::sys::path::append(
      path, "sgemm-peak-" + llvm::utohexstr(llvm::xxh3_64bits(key)) + ".txt");
  return {std::string(path), key};
}

/// The GFLOP/s the record at `path` holds for `key`; 0 when none.
double readRecord(const std::string &path, llvm::StringRef key) {
  double recorded = 0;
  if (auto buffer = llvm::MemoryBuffer::getFile(path)) {
    // "<GFLOP/s> <key>"; anything else is no record.
    llvm::StringRef text = (*buffer)->getBuffer();
    if (text.split(' ').first.getAsDouble(recorded) || recorded <= 0 ||
        text.split(' ').second.trim() != key)
      recorded = 0;
  }
  return recorded;
}
} // namespace

llmc::runtime::MachinePeak llmc::runtime::recordedSgemmPeak(int n,
                                                            int threads) {
  MachinePeak peak;
  auto [path, key] = recordPath(n, threads);
  if (path.empty())
    return peak;
  peak.record = path;
  peak.bestGflops = readRecord(path, key);
  return peak;
}

llmc::runtime::MachinePeak llmc::runtime::machineSgemmPeak(int n, int threads,
                                                           int reps) {
  MachinePeak peak;
  peak.measuredGflops = measureSgemmPeak(n, threads, reps);
  peak.bestGflops = peak.measuredGflops;
  auto [path, key] = recordPath(n, threads);
  if (path.empty())
    return peak;
  peak.record = path;
  double recorded = readRecord(path, key);
  if (recorded >= peak.measuredGflops) {
    peak.bestGflops = recorded;
    return peak;
  }
  // A new best: kept for the next runs (a cache; failing to write it only
  // means the next run measures again).
  std::string text = std::to_string(peak.measuredGflops) + " " + key + "\n";
  llvm::SmallString<256> directory(path);
  llvm::sys::path::remove_filename(directory);
  if (!llvm::sys::fs::create_directories(directory))
    llvm::consumeError(kir::writeFileAtomically(
        path,
        llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(text.data()),
                                text.size())));
  return peak;
}
