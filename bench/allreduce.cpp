// bench-allreduce: all-reduce bandwidth of runtime/Comm's MPI world, as
// nccl-tests reports it, from 4 KiB to 256 MiB, beside the memcpy bandwidth
// of one core measured in the same run. Run under mpirun:
//   scripts/mpirun.sh -np 2 build/bin/bench-allreduce [--short]
#include "bench/Options.h"
#include "runtime/Comm/Communicator.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace cl = llvm::cl;
using namespace llmc;
using namespace llmc::runtime::comm;

static cl::opt<bool> shortRun("short", cl::cat(llmc::bench::benchOptions()),
                              cl::desc("a few sizes, a few iterations: a "
                                       "smoke test of seconds"));
static cl::opt<int64_t> minBytes("min-bytes",
                                 cl::cat(llmc::bench::benchOptions()),
                                 cl::desc("smallest message"),
                                 cl::init(4 << 10));
static cl::opt<int64_t> maxBytes("max-bytes",
                                 cl::cat(llmc::bench::benchOptions()),
                                 cl::desc("largest message"),
                                 cl::init(256 << 20));
static cl::opt<double>
    secondsPerSize("seconds", cl::cat(llmc::bench::benchOptions()),
                   cl::desc("time spent on each size (iterations adapt)"),
                   cl::init(0.5));

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string cpuModel() {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFileAsStream("/proc/cpuinfo");
  if (!file)
    return "unknown CPU";
  llvm::SmallVector<llvm::StringRef> lines;
  (*file)->getBuffer().split(lines, '\n');
  for (llvm::StringRef line : lines)
    if (line.starts_with("model name"))
      return line.split(':').second.trim().str();
  return "unknown CPU";
}

/// One core's memcpy bandwidth on 64 MiB (bytes read + written, GB/s).
double memcpyBandwidth() {
  std::vector<char> a(64 << 20, 1), b(64 << 20, 2);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto start = Clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    best = std::min(best, since(start));
  }
  return 2.0 * a.size() / best / 1e9;
}

/// The largest of every rank's value.
double maxOverRanks(Communicator &world, double value) {
  float mine = static_cast<float>(value), result = 0;
  llvm::cantFail(world.wait(
      world.allReduce(&mine, &result, 1, kir::DType::F32, ReduceOp::Max)));
  return result;
}

} // namespace

int main(int argc, char **argv) {
  llmc::bench::parseOptions(argc, argv,
                            "bench-allreduce: MPI all-reduce bandwidth "
                            "(algorithm and bus bandwidth, as "
                            "nccl-tests)\n");
  llvm::Expected<std::unique_ptr<Communicator>> made = createWorld();
  if (!made) {
    llvm::errs() << "bench-allreduce: " << llvm::toString(made.takeError())
                 << "\n";
    return 1;
  }
  Communicator &world = **made;
  int rank = world.rank(), size = world.size();
  llvm::raw_ostream &out = llvm::outs();
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    llvm::StringRef library = llvm::StringRef(version, length).trim();
    out << "bench-allreduce: f32 sum, in place, " << size << " ranks ("
        << world.backend() << "), one collective in flight\n"
        << "cpu: " << cpuModel() << ", " << std::thread::hardware_concurrency()
        << " logical CPUs\n"
        << "mpi: " << library.split('\n').first.split(',').first << "\n"
        << llvm::format("memcpy, one core, 64 MiB: %.1f GB/s "
                        "(read + write)\n",
                        memcpyBandwidth());
    if (size < 2)
      out << "(one rank: run under scripts/mpirun.sh -np 2 for a real "
             "all-reduce)\n";
    out << llvm::format("%12s %12s %7s %12s %12s %12s\n", "bytes", "elements",
                        "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    out.flush();
  }
  // Bus bandwidth: what each rank's link carries in a ring all-reduce,
  // 2 (n - 1) / n of the buffer (nccl-tests' definition), per second.
  double busFactor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  std::vector<int64_t> sizes;
  if (shortRun)
    sizes = {4 << 10, 1 << 20, 16 << 20};
  else
    for (int64_t bytes = minBytes; bytes <= maxBytes; bytes *= 2)
      sizes.push_back(bytes);
  std::vector<float> buffer(sizes.back() / sizeof(float));
  int failures = 0;
  for (int64_t bytes : sizes) {
    int64_t count = bytes / sizeof(float);
    auto once = [&] {
      llvm::cantFail(
          world.wait(world.allReduce(buffer.data(), buffer.data(), count,
                                     kir::DType::F32, ReduceOp::Sum)));
    };
    // Warm-up (2 runs) times one run to choose the iterations; every rank
    // takes the largest estimate so that all run the same number.
    once();
    auto start = Clock::now();
    once();
    double estimate = maxOverRanks(world, since(start));
    int64_t iterations = std::clamp<int64_t>(
        static_cast<int64_t>(secondsPerSize / std::max(estimate, 1e-7)), 3,
        shortRun ? 5 : 10000);
    std::fill(buffer.begin(), buffer.begin() + count, 0.0f);
    llvm::cantFail(world.barrier());
    start = Clock::now();
    once();
    for (int64_t i = 1; i < iterations; ++i)
      once();
    double time = maxOverRanks(world, since(start)) / iterations;
    // One more, checked: every rank holds rank + 1, the sum is
    // n (n + 1) / 2.
    std::fill(buffer.begin(), buffer.begin() + count, float(rank + 1));
    once();
    float want = size * (size + 1) / 2.0f;
    if (buffer[0] != want || buffer[count - 1] != want) {
      ++failures;
      llvm::errs() << "rank " << rank << ": wrong sum at " << bytes
                   << " bytes: " << buffer[0] << ", want " << want << "\n";
    }
    double algbw = bytes / time / 1e9;
    if (rank == 0) {
      out << llvm::format("%12lld %12lld %7lld %12.1f %12.2f %12.2f\n",
                          (long long)bytes, (long long)count,
                          (long long)iterations, time * 1e6, algbw,
                          algbw * busFactor);
      out.flush();
    }
  }
  return failures == 0 ? 0 : 1;
}
