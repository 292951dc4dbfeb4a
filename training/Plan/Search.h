// `llmc plan --fit`: the search for the fastest layouts that fit a memory
// budget, and why the others lose.
#ifndef LLMC_CODEGEN_PLAN_SEARCH_H
#define LLMC_CODEGEN_PLAN_SEARCH_H

#include "training/Plan/Estimate.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::llmc::plan {

//===----------------------------------------------------------------------===//
// The --fit search
//===----------------------------------------------------------------------===//

struct FitResult {
  double budgetBytes = 0;
  int64_t candidates = 0; // layouts the search tried
  int64_t invalid = 0;    // batch not divisible by micro-batch x dp
  int64_t tooBig = 0;     // did not fit
  std::optional<Estimate> smallestTooBig; // the closest miss
  std::vector<Estimate> fitting;          // fastest first
};

/// Tries every tp (powers of two dividing heads, MLP width and the GPU
/// count), pp (dividing the layers), ZeRO stage, micro-batch (powers of two
/// dividing the per-rank batch) and remat policy; keeps those whose most
/// loaded device fits in `budgetBytes`, fastest step first (ties: larger
/// micro-batch, lower ZeRO stage, less memory).
FitResult searchFit(const PlanModel &model, const TrainingFacts &train,
                    const ClusterConfig &cluster, const GpuSpec &gpu,
                    double budgetBytes);

/// Why `other` is slower than `best`: its largest step-time components
/// over best's, e.g. "pipeline bubble +4.1%, recompute +2.7%".
std::string explainLoss(const Estimate &best, const Estimate &other);

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_SEARCH_H
