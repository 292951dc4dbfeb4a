// bench-bandwidth: this machine's memory read bandwidth, the limit of
// memory-bound decoding (bench/export.sh divides weight bytes by it).
//
//   bench-bandwidth [--bench-threads N] [--mib M]
// prints "cpu: NAME, N threads", the BLAS and its kernels (what the
// benchmarked GEMMs ran) and "read bandwidth: X GB/s".
#include "bench/Bandwidth.h"
#include "bench/Options.h"
#include "runtime/Cpu/SgemmPeak.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace llmc;

static llvm::cl::opt<int> numThreads("bench-threads",
                                     llvm::cl::cat(llmc::bench::benchOptions()),
                                     llvm::cl::desc("Threads (default: all)"),
                                     llvm::cl::init(0));
static llvm::cl::opt<int> mib("mib", llvm::cl::cat(llmc::bench::benchOptions()),
                              llvm::cl::desc("MiB read (default 1024)"),
                              llvm::cl::init(1024));

int main(int argc, char **argv) {
  llmc::bench::parseOptions(
      argc, argv, "bench-bandwidth: memory read bandwidth (STREAM-like sum)\n");
  if (numThreads < 0 || mib < 1) {
    llvm::errs()
        << "bench-bandwidth: --bench-threads must be >= 0 and --mib >= 1\n";
    return 1;
  }
  runtime::ThreadPool pool(numThreads);
  llvm::outs() << "cpu: " << bench::cpuModel() << ", " << pool.size()
               << " threads\n";
  llvm::outs() << "BLAS: " << runtime::describeBlas() << "\n";
  double bytesPerSecond =
      bench::readBandwidth(pool, int64_t(mib) * (1 << 20) / 4);
  llvm::outs() << llvm::format("read bandwidth: %.1f GB/s\n",
                               bytesPerSecond / 1e9);
  return 0;
}
