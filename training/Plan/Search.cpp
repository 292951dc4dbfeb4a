// `llmc plan --fit`: the layout search.
#include "training/Plan/Search.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace llvm;
using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;

//===----------------------------------------------------------------------===//
// --fit
//===----------------------------------------------------------------------===//

namespace {
bool fasterThan(const Estimate &a, const Estimate &b) {
  double ta = a.step.total(), tb = b.step.total();
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb))
    return ta < tb;
  // Equal modelled time: larger micro-batches make better GEMMs, and a
  // lower ZeRO stage moves less data, neither of which the model prices.
  if (a.layout.microBatch != b.layout.microBatch)
    return a.layout.microBatch > b.layout.microBatch;
  if (a.layout.zero != b.layout.zero)
    return a.layout.zero < b.layout.zero;
  return a.memory.total() < b.memory.total();
}
} // namespace

FitResult plan::searchFit(const PlanModel &model, const TrainingFacts &train,
                          const ClusterConfig &cluster, const GpuSpec &gpu,
                          double budgetBytes) {
  FitResult result;
  result.budgetBytes = budgetBytes;
  const ModelConfig &c = model.config;
  int64_t gpus = cluster.numGpus();
  int64_t global = globalBatchOf(train);
  int64_t seqLen = train.seqLen ? train.seqLen : c.seqLen;
  for (int64_t tp = 1; tp <= gpus; tp *= 2) {
    if (gpus % tp || c.nHead % tp || c.ffnHidden % tp)
      continue;
    for (int64_t pp = 1; pp <= c.nLayer && tp * pp <= gpus; ++pp) {
      if (gpus % (tp * pp))
        continue;
      int64_t dp = gpus / (tp * pp);
      for (int zero = 0; zero <= 3; ++zero) {
        for (int64_t micro = 1; micro * dp <= global; micro *= 2) {
          // The policies llmc run has; `attention` is for comparison.
          for (Remat remat : {Remat::None, Remat::Selective, Remat::Full}) {
            ++result.candidates;
            Layout layout{tp, pp, dp, zero, micro, remat};
            // Sequence parallelism under tp where the sequence splits:
            // it only saves memory.
            layout.sp = tp > 1 && seqLen % tp == 0;
            if (Error err = validateLayout(model, train, cluster, layout)) {
              consumeError(std::move(err));
              ++result.invalid;
              continue;
            }
            Estimate est = estimate(model, train, cluster, &gpu, layout);
            if (est.memory.total() > budgetBytes) {
              ++result.tooBig;
              if (!result.smallestTooBig ||
                  est.memory.total() < result.smallestTooBig->memory.total())
                result.smallestTooBig = est;
              continue;
            }
            result.fitting.push_back(std::move(est));
          }
        }
      }
    }
  }
  llvm::stable_sort(result.fitting, fasterThan);
  return result;
}

std::string plan::explainLoss(const Estimate &best, const Estimate &other) {
  double base = best.step.total();
  struct Part {
    StringRef name;
    double delta;
  } parts[] = {
      {"compute", other.step.compute - best.step.compute},
      {"recompute", other.step.recompute - best.step.recompute},
      {"pipeline bubble", other.step.bubble - best.step.bubble},
      {"pipeline imbalance", other.step.imbalance - best.step.imbalance},
      {"tensor-parallel comm", other.step.tpComm - best.step.tpComm},
      {"pipeline comm", other.step.ppComm - best.step.ppComm},
      {"data-parallel comm", other.step.dpComm - best.step.dpComm},
      {"optimizer update", other.step.optimizer - best.step.optimizer},
  };
  llvm::stable_sort(
      parts, [](const Part &a, const Part &b) { return a.delta > b.delta; });
  std::string text;
  for (const Part &part : parts) {
    if (part.delta <= 1e-4 * base)
      break;
    if (!text.empty())
      text += ", ";
    text += formatv("{0} +{1:F1}%", part.name, 100 * part.delta / base).str();
  }
  if (text.empty()) {
    if (other.layout.microBatch < best.layout.microBatch)
      return "same time, smaller micro-batch (less efficient GEMMs, not "
             "modelled)";
    if (other.layout.zero > best.layout.zero)
      return "same time, more communication (ZeRO stage)";
    return "same time, more memory";
  }
  return text;
}
