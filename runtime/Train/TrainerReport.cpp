// What the trainer reports at the end of a run: the mesh traffic, the
// memory report, and the loss plot (OUT/loss.svg).
#include "runtime/Train/Trainer.h"
#include "runtime/Train/TrainerSupport.h"
#include "runtime/Weights/Sparsity.h"

#include "ir/kernel/AtomicFile.h"
#include "ir/kernel/MemoryPlan.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Weights/Checkpoint.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>

using namespace llmc;
using namespace llmc::runtime;
using namespace llmc::runtime::trainer;

std::map<std::string, comm::Traffic> Trainer::meshTraffic() const {
  std::map<std::string, comm::Traffic> byAxis;
  for (const comm::Communicator *comm : options.meshComms)
    byAxis[comm->axis().str()] += comm->traffic();
  return byAxis;
}

llvm::Error Trainer::reportMemory() {
  // Pipeline parallelism: every stage's figures, printed by stage 0 (the
  // stages hold different parameters).
  const bool stageWriter =
      options.pp && dpRank() == 0 && (!options.tp || options.tp->rank() == 0);
  if (!writes() && !stageWriter)
    return llvm::Error::success();
  // What this rank holds, as allocated in the store, by kind.
  std::vector<kir::PersistentTensor> tensors;
  std::set<std::string> params;
  for (const auto &entry : gradSteps)
    for (const kir::Binding &p : entry.second->program().params)
      params.insert(p.name);
  for (const std::string &name : store->names()) {
    llvm::Expected<int64_t> size = store->bytes(name);
    if (!size)
      return size.takeError();
    tensors.push_back({name, params.count(name) > 0, *size});
  }
  std::vector<kir::PersistentKind> kinds = kir::persistentKinds(tensors);
  kir::PersistentBytes bytes = kir::classifyPersistent(tensors);
  int64_t arena = programs.updateStep->program().arenaBytes;
  for (const auto &entry : gradSteps)
    arena = std::max(arena, entry.second->program().arenaBytes);
  int64_t mine[6] = {bytes.parameters, bytes.master, bytes.gradients,
                     bytes.optimizer, bytes.other, arena};
  std::vector<int64_t> stages(mine, mine + 6);
  if (stageWriter) {
    stages.resize(6 * ppSize());
    comm::Ticket ticket =
        options.pp->allGather(mine, stages.data(), 6, kir::DType::I64);
    if (llvm::Error err = options.pp->wait(ticket))
      return err;
  }
  if (!writes())
    return llvm::Error::success();
  for (size_t stage = 0; stage * 6 < stages.size(); ++stage) {
    const int64_t *figures = stages.data() + 6 * stage;
    std::string which =
        stage == 0 ? "" : llvm::formatv(", pipeline stage {0}", stage).str();
    if (options.log)
      *options.log << llvm::format(
          "memory per rank%s: parameters %lld B, master partition %lld B, "
          "gradients %lld B, optimizer state %lld B, other %lld B; largest "
          "training arena %lld B\n",
          which.c_str(), (long long)figures[0], (long long)figures[1],
          (long long)figures[2], (long long)figures[3], (long long)figures[4],
          (long long)figures[5]);
  }

  // The plan (persistent tensors, every program's arena) against what is
  // resident, and everything above it by category.
  MemoryLedger ledger;
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return kinds[x] < kinds[y];
  });
  for (size_t index : order) {
    const kir::PersistentTensor &tensor = tensors[index];
    llvm::StringRef category = kir::persistentKindName(kinds[index]);
    if (const char *data = store->hostData(tensor.name))
      ledger.add(category, MemoryLedger::Source::Planned, data, tensor.bytes);
    else
      ledger.addPlannedElsewhere((category + " (GPU)").str(), tensor.bytes);
  }
  for (const auto &[key, executor] : gradSteps)
    executor->describeMemory(
        ledger, llvm::formatv("grad step{0} (T={1})",
                              key.second ? "" : " no_sync", key.first)
                    .str());
  programs.updateStep->describeMemory(ledger, "update step");
  if (programs.eval)
    programs.eval->describeMemory(ledger, "forward (evaluation)");
  if (programs.sampler)
    programs.sampler->describeMemory(ledger, "forward (samples)");
  if (programs.shardInit)
    programs.shardInit->describeMemory(ledger, "shard init");
  if (programs.castWeights)
    programs.castWeights->describeMemory(ledger, "weight casts");
  if (data.describeMemory)
    data.describeMemory(ledger);
  MemoryBreakdown breakdown = measureMemory(ledger, &phases());
  if (options.log)
    printMemoryBreakdown(*options.log, breakdown, options.reportMemory);
  return appendMetrics(memoryBreakdownJson(breakdown, &phases()));
}

//===----------------------------------------------------------------------===//
// The loss plot
//===----------------------------------------------------------------------===//

namespace {
/// Tick spacing of 1, 2 or 5 times a power of ten giving about `count`
/// ticks over `span`.
double niceStep(double span, int count) {
  double raw = span / count;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw)
      return m * power;
  return 10 * power;
}

std::string formatTick(double value, double step) {
  int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  return llvm::formatv("{0}", llvm::format("%.*f", decimals, value)).str();
}
} // namespace

std::string llmc::runtime::renderLossPlot(llvm::ArrayRef<MetricPoint> train,
                                          llvm::ArrayRef<MetricPoint> val,
                                          llvm::StringRef title,
                                          llvm::ArrayRef<PlotEvent> events) {
  const double width = 760, height = 440;
  const double left = 70, right = 24, top = 44, bottom = 56;
  const double plotW = width - left - right, plotH = height - top - bottom;

  double xMax = 1, yMin = INFINITY, yMax = -INFINITY;
  for (llvm::ArrayRef<MetricPoint> series : {train, val})
    for (const MetricPoint &p : series) {
      xMax = std::max(xMax, double(p.step));
      yMin = std::min(yMin, p.value);
      yMax = std::max(yMax, p.value);
    }
  for (const PlotEvent &e : events)
    xMax = std::max(xMax, double(e.step));
  if (!(yMin <= yMax)) {
    yMin = 0;
    yMax = 1;
  }
  if (yMax - yMin < 1e-6) {
    yMin -= 0.5;
    yMax += 0.5;
  }
  double yStep = niceStep(yMax - yMin, 6);
  yMin = std::floor(yMin / yStep) * yStep;
  yMax = std::ceil(yMax / yStep) * yStep;
  double xStep = niceStep(xMax, 8);
  xMax = std::ceil(xMax / xStep) * xStep;

  auto x = [&](double step) { return left + step / xMax * plotW; };
  auto y = [&](double v) { return top + (yMax - v) / (yMax - yMin) * plotH; };

  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
                     "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                     "font-family=\"sans-serif\" font-size=\"12\">\n",
                     width, height, width, height);
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string escaped;
  for (char c : title)
    escaped += c == '<' ? "&lt;" : c == '&' ? "&amp;" : std::string(1, c);
  os << llvm::format("<text x=\"%.1f\" y=\"24\" font-size=\"15\" "
                     "text-anchor=\"middle\">loss: %s</text>\n",
                     left + plotW / 2, escaped.c_str());
  // Grid, ticks and their labels.
  for (double v = yMin; v <= yMax + yStep * 1e-6; v += yStep) {
    os << llvm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                       "stroke=\"#e4e4e4\"/>\n",
                       left, y(v), left + plotW, y(v));
    os << llvm::format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s"
                       "</text>\n",
                       left - 8, y(v) + 4, formatTick(v, yStep).c_str());
  }
  for (double s = 0; s <= xMax + xStep * 1e-6; s += xStep) {
    os << llvm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                       "stroke=\"#e4e4e4\"/>\n",
                       x(s), top, x(s), top + plotH);
    os << llvm::format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
                       "%s</text>\n",
                       x(s), top + plotH + 18, formatTick(s, xStep).c_str());
  }
  os << llvm::format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                     "height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n",
                     left, top, plotW, plotH);
  os << llvm::format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
                     "step</text>\n",
                     left + plotW / 2, height - 14);
  os << llvm::format("<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" "
                     "transform=\"rotate(-90 16 %.1f)\">loss (nats/token)"
                     "</text>\n",
                     top + plotH / 2, top + plotH / 2);
  // The curves.
  auto polyline = [&](llvm::ArrayRef<MetricPoint> series, const char *color,
                      bool markers) {
    if (series.empty())
      return;
    os << "<polyline fill=\"none\" stroke=\"" << color
       << "\" stroke-width=\"1.8\" points=\"";
    for (const MetricPoint &p : series)
      os << llvm::format("%.1f,%.1f ", x(p.step), y(p.value));
    os << "\"/>\n";
    if (markers)
      for (const MetricPoint &p : series)
        os << llvm::format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                           "fill=\"%s\"/>\n",
                           x(p.step), y(p.value), color);
  };
  polyline(train, "#1f77b4", false);
  polyline(val, "#ff7f0e", true);
  // Guard events: a dashed line at the step that spiked, labelled.
  for (const PlotEvent &e : events) {
    const char *color = e.kind == "spike" ? "#e6a700" : "#d62728";
    os << llvm::format("<line class=\"guard-%s\" x1=\"%.1f\" y1=\"%.1f\" "
                       "x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-dasharray=\"4 3\"/>\n",
                       e.kind.c_str(), x(e.step), top, x(e.step),
                       top + plotH, color);
    os << llvm::format("<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                       "fill=\"%s\" transform=\"rotate(-90 %.1f %.1f)\" "
                       "text-anchor=\"end\">%s %lld</text>\n",
                       x(e.step) - 3, top + 4, color, x(e.step) - 3, top + 4,
                       e.kind.c_str(), (long long)e.step);
  }
  // Legend.
  double lx = left + plotW - 150, ly = top + 14;
  os << llvm::format("<rect x=\"%.1f\" y=\"%.1f\" width=\"140\" height=\"44\" "
                     "fill=\"white\" stroke=\"#999\"/>\n",
                     lx, ly - 10);
  os << llvm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                     "stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"%.1f\" "
                     "y=\"%.1f\">train</text>\n",
                     lx + 8, ly + 2, lx + 32, ly + 2, lx + 40, ly + 6);
  os << llvm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                     "stroke=\"#ff7f0e\" stroke-width=\"2\"/><circle "
                     "cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#ff7f0e\"/>"
                     "<text x=\"%.1f\" y=\"%.1f\">validation</text>\n",
                     lx + 8, ly + 22, lx + 32, ly + 22, lx + 20, ly + 22,
                     lx + 40, ly + 26);
  os << "</svg>\n";
  return out;
}

void Trainer::reportCommunication(const RunState &run) const {
  llvm::raw_ostream *log = options.log;
  if (log && options.dp) {
    CollectiveStats total;
    for (const auto &entry : gradSteps) {
      CollectiveStats stats = entry.second->collectiveStats();
      total.collectives += stats.collectives;
      total.bytes += stats.bytes;
      total.waitSeconds += stats.waitSeconds;
    }
    int64_t steps = std::max<int64_t>(currentStep - run.firstStep, 1);
    *log << llvm::format(
        "data parallel: %.1f collectives and %.2f MiB per step and rank; "
        "waited %.1f ms per step for them (the rest overlapped compute)\n",
        double(total.collectives) / steps,
        double(total.bytes) / steps / (1 << 20),
        total.waitSeconds / steps * 1e3);
  }
  if (log && !stepTraffic.empty() && trafficSteps > 0) {
    // Per axis, what this rank's steps moved: the bytes it sends by the
    // ring volume of each collective, and the pipeline's transfers.
    *log << "mesh traffic per step and rank:";
    double steps = double(trafficSteps);
    const char *separator = " ";
    for (const auto &[axis, t] : stepTraffic) {
      *log << llvm::format("%s%s %.1f collectives %.0f B", separator,
                           axis.c_str(), t.collectives / steps,
                           t.collectiveBytes / steps);
      if (t.sends || t.recvs)
        *log << llvm::format(", %.1f sends %.0f B, %.1f receives %.0f B",
                             t.sends / steps, t.sendBytes / steps,
                             t.recvs / steps, t.recvBytes / steps);
      separator = "; ";
    }
    *log << "\n";
  }
}
