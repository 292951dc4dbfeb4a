// The yardstick of CPU throughput: this machine's sgemm peak, measured with
// the BLAS the runtime multiplies with. `llmc run` reports MFU against it and
// the benchmarks their fraction of it.
#ifndef LLMC_RUNTIME_SGEMMPEAK_H
#define LLMC_RUNTIME_SGEMMPEAK_H

#include <string>

namespace llmc::runtime {

/// Which BLAS runs and what steers its kernel choice: "OpenBLAS 0.3.21
/// <build options>, core <name> (OPENBLAS_CORETYPE=...,
/// OPENBLAS_L2_SIZE=...)".
std::string describeBlas();

/// The best GFLOP/s of `reps` n^3 sgemms (C = A B^T, llmc's weight layout)
/// on `threads` BLAS threads; BLAS goes back to one thread after (the
/// runtime's pool calls it from its own threads).
double measureSgemmPeak(int n, int threads, int reps);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_SGEMMPEAK_H
