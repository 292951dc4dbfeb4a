// What llmc compile and llmc inspect print about a compiled program: its
// kernels, steps and memory plan, what remat recomputed, its CUDA section.
#ifndef LLMC_TOOLS_LLMC_PROGRAMSUMMARY_H
#define LLMC_TOOLS_LLMC_PROGRAMSUMMARY_H

#include "ir/kernel/Artifact.h"
#include "ir/kernel/Program.h"
#include "passes/Remat.h"

#include "llvm/Support/raw_ostream.h"

namespace llmc {

/// Two lines: kernels, steps, GEMMs, attention and FLOPs per run, then the
/// memory plan's arena (the planned peak) against what is alive at once
/// and what no reuse would take.
void printPlanSummary(const kir::Program &program, llvm::raw_ostream &os);

/// One line on stderr: what llmc-remat recomputed and what it costs.
void printRematSummary(const mlir::llmc::RematSummary &remat,
                       const kir::Program &program);

/// An artifact's CUDA section: its binaries, then each kernel's launch.
void printCudaSection(const kir::CudaSection &cuda, llvm::raw_ostream &os);

} // namespace llmc

#endif // LLMC_TOOLS_LLMC_PROGRAMSUMMARY_H
