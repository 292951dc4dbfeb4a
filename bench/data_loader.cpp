// bench-data-loader: how fast the training data loader hands out windows,
// per rank, from token files on disk (bench/README.md, bench/data.sh).
//
//   build/bin/bench-data-loader FILE_OR_PATTERN... [--seq-len T]
//       [--batch B] [--ranks R] [--seconds S] [--shuffle-windows N]
//
// Opens the files as one training source (headers only, as `llmc run`
// does) and times two things, each for about S seconds after a warm-up:
//   - one rank reading every micro-batch (Loader::next, B windows of T + 1
//     tokens, ids converted to int32 and checked against the vocabulary);
//   - rank 0 of R data-parallel ranks: it reads one micro-batch in R and
//     skips the others' (Loader::skip), as the trainer does.
// It prints tokens/s (the windows' T tokens each) and MB/s of token bytes
// read, the time to open the source, and the loader's heap and mapped
// bytes at the end. Page-cache state is the caller's: bench/data.sh runs it
// right after writing the files (warm) and says so.
#include "bench/Machine.h"
#include "bench/Options.h"
#include "training/Data/Loader.h"
#include "training/Data/Sources.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>

using namespace llmc;
namespace cl = llvm::cl;

static cl::list<std::string> files(cl::Positional, cl::OneOrMore,
                                   cl::desc("<token file or pattern>..."),
                                   cl::cat(bench::benchOptions()));
static cl::opt<int64_t> seqLen("seq-len", cl::init(1024),
                               cl::desc("tokens per row (T)"),
                               cl::cat(bench::benchOptions()));
static cl::opt<int64_t> batch("batch", cl::init(16),
                              cl::desc("windows per micro-batch (B)"),
                              cl::cat(bench::benchOptions()));
static cl::opt<int64_t> ranks("ranks", cl::init(4),
                              cl::desc("data-parallel ranks to model (R)"),
                              cl::cat(bench::benchOptions()));
static cl::opt<double> seconds("seconds", cl::init(3.0),
                               cl::desc("seconds per measurement"),
                               cl::cat(bench::benchOptions()));
static cl::opt<int64_t> shuffleWindows(
    "shuffle-windows", cl::init(1 << 20),
    cl::desc("the shuffle buffer in windows (data.shuffle_windows)"),
    cl::cat(bench::benchOptions()));
static cl::opt<int32_t> vocab("vocab", cl::init(50257),
                              cl::desc("ids must be below this"),
                              cl::cat(bench::benchOptions()));

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void fail(llvm::Error error) {
  llvm::errs() << "bench-data-loader: " << llvm::toString(std::move(error))
               << "\n";
  std::exit(1);
}

/// Runs micro-batches for `seconds` (after one warm-up pass of 8); rank 0 of
/// `dpRanks` reads micro-batch m when m % dpRanks == 0 and skips the rest.
/// Returns the windows read per second.
double measure(data::Loader &loader, int64_t dpRanks) {
  std::vector<int32_t> tokens, targets;
  auto microBatch = [&](int64_t m) {
    if (m % dpRanks != 0) {
      loader.skip(batch);
      return int64_t(0);
    }
    if (llvm::Error error = loader.next(seqLen, tokens, targets))
      fail(std::move(error));
    return int64_t(batch);
  };
  int64_t m = 0;
  for (; m < 8 * dpRanks; ++m)
    microBatch(m);
  int64_t windows = 0;
  Clock::time_point start = Clock::now();
  double elapsed = 0;
  while ((elapsed = since(start)) < seconds)
    for (int64_t i = 0; i < dpRanks; ++i)
      windows += microBatch(m++);
  return double(windows) / elapsed;
}
} // namespace

int main(int argc, char **argv) {
  bench::parseOptions(argc, argv,
                      "bench-data-loader: the training data loader's "
                      "windows per second, per rank, from token files");
  llvm::outs() << "CPU: " << bench::cpuModel() << "\n"
               << "bench-data-loader: T = " << seqLen << ", B = " << batch
               << ", shuffle buffer " << shuffleWindows
               << " windows, page cache as the caller left it\n";
  Clock::time_point openStart = Clock::now();
  data::DataSpec spec;
  spec.train = {{"bench", std::vector<std::string>(files.begin(), files.end()),
                 1.0}};
  llvm::Expected<data::OpenedSources> opened =
      data::openSources(spec, /*tokenizer=*/nullptr);
  if (!opened)
    fail(opened.takeError());
  data::LoaderOptions options;
  options.batch = batch;
  options.seqLen = seqLen;
  options.seed = 1337;
  options.shuffleWindows = shuffleWindows;
  options.vocabLimit = vocab;
  int64_t tokensInData = opened->train[0].tokens();
  int64_t fileCount = int64_t(opened->train[0].files.size());
  llvm::Expected<std::unique_ptr<data::Loader>> loader =
      data::Loader::create(std::move(opened->train), options);
  if (!loader)
    fail(loader.takeError());
  double openSeconds = since(openStart);
  llvm::outs() << llvm::format("data: %lld files, %.3f billion tokens, %lld "
                               "windows an epoch; opened in %.3f s\n",
                               (long long)fileCount, tokensInData / 1e9,
                               (long long)(*loader)->windowsPerEpoch(0),
                               openSeconds);
  int64_t bytesPerToken =
      data::typeBytes((*loader)->sources()[0].segments[0].file->type());
  for (int64_t r : {int64_t(1), int64_t(ranks)}) {
    double windowsPerSecond = measure(**loader, r);
    double tokensPerSecond = windowsPerSecond * seqLen;
    llvm::outs() << llvm::format(
        "rank 0 of %lld: %.2f M tokens/s read (%.1f MB/s of token bytes)\n",
        (long long)r, tokensPerSecond / 1e6,
        windowsPerSecond * (seqLen + 1) * bytesPerToken / 1e6);
  }
  llvm::outs() << llvm::format(
      "loader memory at the end: heap %.2f MiB, mapped %.2f MiB (address "
      "space; resident pages are dropped after each read)\n",
      (*loader)->heapBytes() / 1048576.0, (*loader)->mappedBytes() / 1048576.0);
  return 0;
}
