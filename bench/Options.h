// The command line of a benchmark binary: its options, and only those, in
// --help. The binaries link LLVM, whose libraries register hundreds of
// options of their own in the general category; every benchmark option
// names benchOptions() (cl::cat) and parseOptions hides the rest.
#ifndef LLMC_BENCH_OPTIONS_H
#define LLMC_BENCH_OPTIONS_H

#include "llvm/Support/CommandLine.h"

namespace llmc::bench {

/// The category of every benchmark option.
inline llvm::cl::OptionCategory &benchOptions() {
  static llvm::cl::OptionCategory category("Benchmark options");
  return category;
}

/// cl::ParseCommandLineOptions with LLVM's own options hidden.
inline void parseOptions(int argc, char **argv, const char *overview) {
  llvm::cl::HideUnrelatedOptions(benchOptions());
  llvm::cl::ParseCommandLineOptions(argc, argv, overview);
}

} // namespace llmc::bench

#endif // LLMC_BENCH_OPTIONS_H
