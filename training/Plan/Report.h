// `llmc plan`'s report: labelled quantities with their sources, layout
// tables, printed as a table or as JSON (--json).
#ifndef LLMC_CODEGEN_PLAN_REPORT_H
#define LLMC_CODEGEN_PLAN_REPORT_H

#include "training/Plan/Search.h"

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
// Report
//===----------------------------------------------------------------------===//

/// One labelled number: a value in a base unit (bytes, FLOP, s, USD, ...)
/// and where it comes from.
struct Quantity {
  std::string key;   // JSON key
  std::string label; // for people
  double value = 0;
  std::string unit;   // "bytes", "parameters", "tokens", "FLOP", "FLOP/s",
                      // "s", "USD", "steps", "sequences", "fraction"
  std::string source; // "IR", "formula: ...", "data file", "train config"
};

struct Section {
  std::string key, title;
  std::vector<Quantity> rows;
};

/// A table whose rows are layouts (the by-layout comparison, --fit).
struct LayoutTable {
  std::string key, title, note;
  double capacityBytes = 0; // per device; 0: no "fits" column
  std::vector<Estimate> rows;
  std::vector<std::string> why; // per row, --fit only
};

struct Report {
  std::vector<std::string> header; // lines describing model, run, layout
  std::vector<Section> sections;
  std::vector<LayoutTable> tables;
  std::vector<std::string> notes; // closing lines (assumptions, misses)
  std::map<std::string, std::string> facts; // model/cluster strings (JSON)
};

struct PlanRequest {
  const PlanModel *model = nullptr;
  TrainingFacts train;
  ClusterConfig cluster;
  const GpuSpec *gpu = nullptr; // null: memory and FLOPs only
  std::string hardwarePath;
  std::optional<ForwardMemory> forward;
  /// The compiled training step, when the layout allows it (tp 1, pp 1;
  /// see compileStepMemory): its memory plan replaces the activation and
  /// workspace formulas of the configured layout.
  std::optional<StepMemory> step;
  std::optional<double> fitBudget; // --fit
  /// --stage: the pipeline stage whose memory the report shows (default
  /// the most loaded).
  std::optional<int64_t> stage;
};

/// Builds the report of a validated request (and, with --fit, searches).
llvm::Expected<Report> buildReport(const PlanRequest &request);
void printReportTable(const Report &report, llvm::raw_ostream &os);
void printReportJson(const Report &report, llvm::raw_ostream &os);

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_REPORT_H
