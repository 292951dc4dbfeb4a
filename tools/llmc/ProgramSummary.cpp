// What llmc compile and llmc inspect print about a compiled program (see
// ProgramSummary.h).
#include "tools/llmc/ProgramSummary.h"

#include "ir/kernel/MemoryPlan.h"

#include "llvm/Support/Format.h"

#include <algorithm>

using namespace llmc;

void llmc::printPlanSummary(const kir::Program &program,
                            llvm::raw_ostream &os) {
  int64_t gemms = 0, attentions = 0;
  for (const kir::Step &step : program.steps) {
    gemms += step.kind == kir::StepKind::Gemm;
    attentions += step.kind == kir::StepKind::Attention;
  }
  kir::MemoryPlanStats stats = kir::memoryPlanStats(program);
  os << llvm::format("%zu kernels, %zu steps (%lld GEMMs, %lld attention), "
                     "%.3f GFLOP per forward\n",
                     program.kernels.size(), program.steps.size(),
                     (long long)gemms, (long long)attentions,
                     kir::countFlops(program) / 1e9)
     << llvm::format("memory plan: arena %lld bytes (%.2f MiB) planned peak; "
                     "%.2f MiB alive at once at most, %.2f MiB without reuse\n",
                     (long long)program.arenaBytes,
                     program.arenaBytes / 1048576.0,
                     stats.liveLowerBound / 1048576.0,
                     stats.totalBytes / 1048576.0);
}

void llmc::printRematSummary(const mlir::llmc::RematSummary &remat,
                             const kir::Program &program) {
  int64_t stepFlops = kir::countFlops(program);
  llvm::errs() << llvm::format(
      "llmc: remat %s: %lld saved activations recomputed by %lld ops, "
      "+%.3f GFLOP (+%.1f%% of the step without), %.2f MiB of activations "
      "kept; planned peak %.2f MiB\n",
      remat.policy.c_str(), (long long)remat.recomputedValues,
      (long long)remat.clonedOps, remat.extraFlops / 1e9,
      100.0 * remat.extraFlops /
          std::max<double>(stepFlops - remat.extraFlops, 1),
      remat.storedBytes / 1048576.0, program.arenaBytes / 1048576.0);
}

void llmc::printCudaSection(const kir::CudaSection &cuda,
                            llvm::raw_ostream &os) {
  os << "\ncuda: codegen version " << cuda.codegenVersion << ", source "
     << cuda.source.size() << " bytes";
  for (const auto &cubin : cuda.cubins)
    os << ", sm_" << cubin.arch << " cubin " << cubin.image.size() << " bytes";
  if (!cuda.ptx.empty())
    os << ", compute_" << cuda.ptxArch << " PTX " << cuda.ptx.size()
       << " bytes";
  os << "\n";
  for (const auto &launch : cuda.launches)
    os << llvm::format("  launch %-36s grid [%lld, %lld, %lld] block [%d, "
                       "%d, %d] shared %d bytes (static %d)\n",
                       launch.kernel.c_str(), (long long)launch.grid[0],
                       (long long)launch.grid[1], (long long)launch.grid[2],
                       launch.block[0], launch.block[1], launch.block[2],
                       launch.sharedBytes, launch.staticSharedBytes);
}
