// The yardstick of CPU throughput: this machine's sgemm peak, measured with
// the BLAS the runtime multiplies with. `llmc run` reports MFU against it and
// the benchmarks their fraction of it.
#ifndef LLMC_RUNTIME_SGEMMPEAK_H
#define LLMC_RUNTIME_SGEMMPEAK_H

#include "runtime/Cpu/Sgemm.h"

#include <optional>
#include <string>

namespace llmc::runtime {

/// Which BLAS runs and what steers its kernel choice: "f32 GEMMs on
/// <library and why, runtime/Cpu/Sgemm.h>; OpenBLAS 0.3.21 <build options>,
/// core <name> (OPENBLAS_CORETYPE=..., OPENBLAS_L2_SIZE=...)" (OpenBLAS
/// runs the one-row products, and the f32 GEMMs where it was chosen).
std::string describeBlas();

/// The best GFLOP/s of `reps` n^3 sgemms (C = A B^T, llmc's weight layout)
/// with `library`, by default the one the executor uses for that product
/// (cpu::sgemmSetup), run as the executor runs it: single-threaded library
/// calls on chunks of C's rows over a ThreadPool of `threads`.
double measureSgemmPeak(int n, int threads, int reps,
                        std::optional<cpu::SgemmLibrary> library = {});

/// The yardstick MFU is measured against: the peak measured now, and the
/// best this machine has shown for the same CPU, BLAS core, size and
/// thread count, kept in llmc's cache directory (sgemm-peak-<key>). A run
/// that starts while the machine is busy measures a low peak; the best one
/// is the machine's, and utilization is reported against it.
struct MachinePeak {
  double measuredGflops = 0; // this run's measurement
  double bestGflops = 0;     // max of it and the record
  std::string record;        // the record's path; empty when not kept
};
MachinePeak machineSgemmPeak(int n, int threads, int reps);

/// The record machineSgemmPeak keeps for (n, threads) on this CPU and BLAS
/// core, without measuring (which costs every core for a moment): `record`
/// names the file; bestGflops is 0 when there is none.
MachinePeak recordedSgemmPeak(int n, int threads);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_SGEMMPEAK_H
