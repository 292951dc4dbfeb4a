// `llmc plan`'s report, as a table and as JSON.
#include "training/Plan/Report.h"

#include "training/Plan/Goodput.h"

#include "frontend/ConfigYaml.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>

using namespace llvm;
using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;
using mlir::llmc::config::makeError;

//===----------------------------------------------------------------------===//
// Report
//===----------------------------------------------------------------------===//

namespace {
std::string withCommas(double value) {
  std::string digits = formatv("{0:F0}", value).str(), result;
  size_t start = digits[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > start && (digits.size() - i) % 3 == 0)
      result += ',';
    result += digits[i];
  }
  return result;
}

/// The shortest of %g's forms: 2, 18, 2.0039.
std::string shortNumber(double value) {
  return formatv("{0}", format("%.6g", value)).str();
}

std::string humanCount(double value) {
  if (value >= 1e12)
    return formatv("{0:F2}T", value / 1e12).str();
  if (value >= 1e9)
    return formatv("{0:F2}B", value / 1e9).str();
  if (value >= 1e6)
    return formatv("{0:F2}M", value / 1e6).str();
  return withCommas(value);
}

std::string formatBytes(double bytes) {
  // Disks are sold in decimal units: terabytes say both.
  if (bytes >= kGiB * 1024)
    return formatv("{0:F2} TiB ({1:F1} TB)", bytes / (kGiB * 1024),
                   bytes / 1e12)
        .str();
  if (bytes >= kGiB)
    return formatv("{0:F2} GiB", bytes / kGiB).str();
  if (bytes >= 1024.0 * 1024)
    return formatv("{0:F2} MiB", bytes / (1024.0 * 1024)).str();
  if (bytes >= 1024.0)
    return formatv("{0:F2} KiB", bytes / 1024.0).str();
  return formatv("{0:F0} B", bytes).str();
}

std::string formatSeconds(double s) {
  if (s < 0)
    return "-" + formatSeconds(-s);
  if (s < 0.1)
    return formatv("{0:F2} ms", s * 1e3).str();
  if (s < 120)
    return formatv("{0:F3} s", s).str();
  if (s < 2 * 3600)
    return formatv("{0:F1} min", s / 60).str();
  if (s < 72 * 3600)
    return formatv("{0:F1} h", s / 3600).str();
  return formatv("{0:F1} days", s / 86400).str();
}

std::string formatValue(const Quantity &q) {
  if (q.unit == "bytes")
    return formatBytes(q.value);
  if (q.unit == "s")
    return formatSeconds(q.value);
  if (q.unit == "USD")
    return q.value >= 1000 ? "$" + withCommas(q.value)
                           : formatv("${0:F2}", q.value).str();
  if (q.unit == "fraction")
    return formatv("{0:F1}%", 100 * q.value).str();
  if (q.unit == "FLOP")
    return formatv("{0:e} FLOP", q.value).str();
  if (q.unit == "bytes/s")
    return formatv("{0:F1} GB/s", q.value / 1e9).str();
  if (q.unit == "FLOP/s")
    return formatv("{0:F1} TFLOP/s", q.value / 1e12).str();
  if (q.unit == "GPU-hours")
    return withCommas(q.value) + " GPU-h";
  if (q.unit == "tokens")
    return humanCount(q.value) + " tokens";
  if (q.unit == "parameters")
    return withCommas(q.value);
  if (q.unit == "epochs") // of a data source: fractions matter
    return formatv("{0:F2} epochs", q.value).str();
  return withCommas(q.value) + " " + q.unit;
}

std::string precisionLabel(const TrainingFacts &train) {
  switch (train.precision) {
  case Precision::Fp32:
    return "fp32";
  case Precision::Tf32:
    return "fp32 weights, tf32 GEMMs";
  case Precision::Fp8:
    return "fp8 GEMMs, bf16 weights and activations, fp32 master";
  default:
    return (stringifyPrecision(train.precision) +
            " mixed precision, fp32 master weights")
        .str();
  }
}

std::string layoutLabel(const Layout &l) {
  return formatv("tp {0} x pp {1} x dp {2}, ZeRO-{3}", l.tp, l.pp, l.dp, l.zero)
      .str();
}

/// The layouts compared in the default (non --fit) report: every ZeRO
/// stage of the configured layout, then other tp and pp sizes.
std::vector<Layout> comparedLayouts(const PlanModel &model,
                                    const TrainingFacts &train,
                                    const ClusterConfig &cluster,
                                    const Layout &base) {
  std::vector<Layout> layouts;
  auto add = [&](int64_t tp, int64_t pp, int zero) {
    int64_t gpus = cluster.numGpus();
    if (gpus % (tp * pp))
      return;
    Layout l = base;
    l.tp = tp;
    l.sp = base.sp && tp > 1;
    l.pp = pp;
    l.dp = gpus / (tp * pp);
    l.zero = zero;
    for (const Layout &seen : layouts)
      if (seen.tp == l.tp && seen.pp == l.pp && seen.zero == l.zero)
        return;
    if (Error err = validateLayout(model, train, cluster, l)) {
      consumeError(std::move(err));
      return;
    }
    layouts.push_back(l);
  };
  for (int zero = 0; zero <= 3; ++zero)
    add(base.tp, base.pp, zero);
  for (int64_t tp = 1; tp <= cluster.gpusPerNode; tp *= 2)
    add(tp, 1, base.pp > 1 ? std::min(base.zero, 1) : base.zero);
  for (int64_t pp = 2; pp <= 16; pp *= 2)
    add(base.tp, pp, std::min(base.zero, 1));
  return layouts;
}

/// What every part of the report reads: the request, the configured
/// layout's estimate (with the compiled step's memory when there is one)
/// and the compiled step itself.
struct ReportInputs {
  const PlanRequest &request;
  const Estimate &est;
  const StepMemory *step; // null: activations and workspace by formula
  StateBytes perParameter;
  std::string data; // "data file NAME", the hardware data's source
};

const char *const kKorthikanti = "formula: Korthikanti et al. 2022";

/// Checks what the estimate needs beyond a valid layout: the GPU's peak at
/// the precision and --stage.
Error checkRequest(const PlanRequest &request, const Layout &layout) {
  const TrainingFacts &train = request.train;
  const GpuSpec *gpu = request.gpu;
  if (Error err =
          validateLayout(*request.model, train, request.cluster, layout))
    return err;
  if (gpu && gpu->peakFlops(train.precision) == 0)
    return layoutError(train.origins, "precision", "precision",
                       formatv("GPU '{0}' has no {1} peak in {2} ({3}); "
                               "choose another precision or add "
                               "tflops.{1} to its entry",
                               gpu->name, stringifyPrecision(train.precision),
                               request.hardwarePath, gpu->location));
  if (request.stage && (*request.stage < 0 || *request.stage >= layout.pp))
    return createStringError(formatv("--stage: {0} is not a stage of "
                                     "pp {1} (0 to {2})",
                                     *request.stage, layout.pp, layout.pp - 1));
  return Error::success();
}

/// The compiled step of this layout, when there is one: its activations
/// and arena replace the formulas in `est` (the layouts compared stay
/// formulas).
const StepMemory *applyCompiledStep(const PlanRequest &request, Estimate &est) {
  const Layout &layout = est.layout;
  const StepMemory *step = nullptr;
  if (request.step && request.step->batch == layout.microBatch &&
      request.step->seqLen == est.seqLen && request.step->dp == layout.dp &&
      request.step->zero == (layout.dp > 1 ? layout.zero : request.step->zero) &&
      layout.tp == 1 && layout.pp == 1 && layout.remat != Remat::Attention &&
      request.step->compiled[static_cast<unsigned>(layout.remat)])
    step = &*request.step;
  if (step) {
    unsigned r = static_cast<unsigned>(layout.remat);
    est.memory.activations = static_cast<double>(step->storedBytes[r]);
    est.memory.workspace =
        static_cast<double>(step->arenaBytes[r] - step->storedBytes[r]);
    for (Remat other : {Remat::None, Remat::Selective, Remat::Full})
      if (step->compiled[static_cast<unsigned>(other)])
        est.activationsByRemat[static_cast<unsigned>(other)] =
            static_cast<double>(step->storedBytes[static_cast<unsigned>(other)]);
  }
  return step;
}

/// The lines above the sections (model, cluster, training, batch, layout,
/// pipeline cut) and the facts JSON carries at its top.
void addHeader(const ReportInputs &in, Report &report) {
  const PlanRequest &request = in.request;
  const PlanModel &model = *request.model;
  const TrainingFacts &train = request.train;
  const ClusterConfig &cluster = request.cluster;
  const ModelConfig &c = model.config;
  const GpuSpec *gpu = request.gpu;
  const Estimate &est = in.est;
  const Layout &layout = est.layout;
  report.facts["model"] = c.name;
  report.facts["model_input"] = model.input;
  report.facts["ir"] = model.irSource;
  report.facts["precision"] = stringifyPrecision(train.precision).str();
  report.facts["optimizer"] = stringifyOptimizer(train.optimizer).str();
  report.facts["remat"] = stringifyRemat(train.remat).str();
  report.facts["layout"] = layoutLabel(layout);
  report.facts["sequence_parallel"] = layout.sp ? "yes" : "no";
  report.header.push_back(formatv("model: {0}, {1} parameters ({2})", c.name,
                                  withCommas(model.numParameters),
                                  model.irSource));
  if (gpu) {
    report.facts["gpu"] = gpu->name;
    report.header.push_back(formatv(
        "cluster: {0} x {1} ({2}), {3} node(s) x {4} GPUs; {5:F1} GiB each "
        "({6})",
        cluster.numGpus(), gpu->name, gpu->description, cluster.nodes,
        cluster.gpusPerNode, gpu->memoryGiB, in.data));
  } else {
    report.header.push_back(
        formatv("cluster: {0} device(s), no GPU given (--gpu or plan.gpu for "
                "capacity, time and cost)",
                cluster.numGpus()));
  }
  const StateBytes &perParameter = in.perParameter;
  report.header.push_back(
      formatv("training: {0}, {1}, {2} gradients ({3} bytes/parameter before "
              "ZeRO); remat {4}",
              precisionLabel(train), stringifyOptimizer(train.optimizer),
              perParameter.gradients == 4 ? "fp32" : "16-bit",
              shortNumber(perParameter.total()), stringifyRemat(train.remat)));
  report.header.push_back(formatv(
      "batch: micro-batch {0} x {1} tokens; global batch {2} sequences = {3} "
      "tokens ({4} micro-batches per step per pipeline{5})",
      layout.microBatch, est.seqLen, est.globalBatch,
      withCommas(static_cast<double>(est.globalBatch) * est.seqLen),
      est.microBatchesPerStep, train.globalBatch ? "" : "; default batch"));
  // 1F1B idles each stage for (p-1) of the m + p - 1 micro-batch slots
  // of a step (`llmc run --pp` prints the same fraction).
  std::string bubble;
  if (layout.pp > 1)
    bubble = formatv("; 1F1B bubble (p-1)/(m+p-1) = {0:f4}",
                     double(layout.pp - 1) /
                         double(est.microBatchesPerStep + layout.pp - 1))
                 .str();
  report.header.push_back(
      "layout: " + layoutLabel(layout) +
      (layout.tp == 1 ? ""
       : layout.sp    ? ", sequence parallel"
                      : ", no sequence parallelism (--sp)") +
      bubble);
  // The stages llmc-pipeline-parallel cuts (`llmc run --pp` prints the
  // same line); the slowest sets the pace of the step.
  if (layout.pp > 1) {
    report.facts["pipeline_cut"] = describePipelineCut(est.cut);
    report.header.push_back("pipeline cut by FLOPs per token: " +
                            describePipelineCut(est.cut));
  }
}

/// Memory per device: the sharded states, activations, workspace and
/// reserve, and with a GPU whether they fit.
void addMemorySection(const ReportInputs &in, Report &report) {
  const TrainingFacts &train = in.request.train;
  const ClusterConfig &cluster = in.request.cluster;
  const GpuSpec *gpu = in.request.gpu;
  const StepMemory *step = in.step;
  const StateBytes &perParameter = in.perParameter;
  const Layout &layout = in.est.layout;
  const DeviceMemory &mem = in.est.memory;
  std::string stateSource = "IR parameters x bytes/parameter";
  std::string zeroNote =
      layout.dp > 1 ? formatv(" / {0}", layout.dp).str() : std::string();
  Section memory{"memory",
                 formatv("Memory per device (pipeline stage {0} of {1}, "
                         "{2} parameters)",
                         mem.stage, layout.pp, withCommas(mem.parameters))
                     .str(),
                 {}};
  auto stateRow = [&](StringRef key, StringRef what, double perParam,
                      double bytes, bool sharded) {
    memory.rows.push_back(
        {key.str(),
         formatv("{0} ({1} B/param{2})", what, shortNumber(perParam),
                 sharded ? zeroNote : "")
             .str(),
         bytes, "bytes", stateSource});
  };
  bool half = isHalf(train.precision);
  stateRow("weights", half ? "weights, 16-bit" : "weights, fp32",
           perParameter.weights, mem.states.weights, layout.zero >= 3);
  std::string gradients =
      perParameter.gradients == 4 ? "gradients, fp32" : "gradients, 16-bit";
  if (layout.zero == 1 && layout.dp > 1)
    // Full gradients to accumulate micro-batches locally, then the rank's
    // averaged partition (llmc-shard's ZeRO-1).
    memory.rows.push_back(
        {"gradients",
         formatv("{0} ({1} B/param + {1} B/param / {2})",
                 gradients, shortNumber(perParameter.gradients), layout.dp)
             .str(),
         mem.states.gradients, "bytes", stateSource});
  else
    stateRow("gradients", gradients, perParameter.gradients,
             mem.states.gradients, layout.zero >= 2);
  if (half || mem.states.master > 0)
    stateRow("master_weights",
             half ? "master weights, fp32"
                  : "master weights, fp32 partition the optimizer steps",
             mem.states.master / std::max(mem.parameters, 1.0) *
                 (layout.zero >= 1 ? layout.dp : 1),
             mem.states.master, layout.zero >= 1);
  stateRow("optimizer_states",
           train.optimizer == Optimizer::AdamW       ? "AdamW m and v, fp32"
           : train.optimizer == Optimizer::AdamW8bit ? "AdamW m and v, 8-bit"
           : train.sgdMomentum                       ? "SGD momentum, fp32"
                                                     : "SGD without momentum: none",
           perParameter.optimizer, mem.states.optimizer, layout.zero >= 1);
  memory.rows.push_back(
      {"activations",
       formatv("activations, remat {0} ({1} micro-batch{2} in flight)",
               stringifyRemat(layout.remat), mem.microBatchesInFlight,
               mem.microBatchesInFlight > 1 ? "es" : "")
           .str(),
       mem.activations, "bytes",
       step ? step->source + ", what llmc-remat counts as kept"
       : layout.remat == Remat::Selective
           ? std::string("formula: what llmc-remat selective keeps")
           : std::string(kKorthikanti)});
  if (step)
    memory.rows.push_back(
        {"workspace",
         "rest of the step's arena (activation gradients, logits, "
         "temporaries" +
             std::string(layout.zero == 3 ? ", gathered ZeRO-3 weights)"
                                          : ")"),
         mem.workspace, "bytes", step->source + ", arena - activations"});
  else
    memory.rows.push_back(
        {"workspace",
         layout.zero == 3 ? "workspace (a block's backward, 2 ZeRO-3 blocks)"
                          : "workspace (a block's backward)",
         mem.workspace, "bytes", "formula"});
  memory.rows.push_back({"reserve",
                         "reserve (CUDA context, library workspaces)",
                         mem.reserve, "bytes",
                         sourceOf(cluster.origins, "plan.reserve_gib",
                                  "cluster config", "default 1 GiB")});
  memory.rows.push_back({"total", "total", mem.total(), "bytes", "sum"});
  if (gpu) {
    double capacity = gpu->memoryGiB * kGiB;
    memory.rows.push_back({"capacity", "capacity of one " + gpu->name, capacity,
                           "bytes", in.data});
    memory.rows.push_back(
        {"utilization",
         mem.total() <= capacity ? "fits: uses" : "DOES NOT FIT: needs",
         mem.total() / capacity, "fraction", "total / capacity"});
    report.facts["fits"] = mem.total() <= capacity ? "yes" : "no";
  }
  report.sections.push_back(std::move(memory));
}

/// Activations per micro-batch: the forward's arena, one block, and the
/// device's under each remat policy (compiled or by formula).
void addActivationSection(const ReportInputs &in, Report &report) {
  const PlanRequest &request = in.request;
  const StepMemory *step = in.step;
  const Estimate &est = in.est;
  const Layout &layout = est.layout;
  bool half = isHalf(request.train.precision);
  std::string korthikanti = kKorthikanti;
  Section act{"activations",
              formatv("Activations per micro-batch ({0} x {1} tokens)",
                      layout.microBatch, est.seqLen)
                  .str(),
              {}};
  if (request.forward) {
    const ForwardMemory &fwd = *request.forward;
    act.rows.push_back(
        {"forward_arena",
         formatv("forward pass only, f32, one device ({0} x {1})", fwd.batch,
                 fwd.seqLen)
             .str(),
         static_cast<double>(fwd.arenaBytes), "bytes", fwd.source});
  }
  act.rows.push_back(
      {"block_none",
       formatv("one block, kept for backward (tp {0})", layout.tp).str(),
       est.block.stored(Remat::None), "bytes",
       korthikanti + ": sbh(34 + 5as/h) generalized"});
  // llmc-remat's policies, then Korthikanti's selective under its own name.
  for (Remat r :
       {Remat::None, Remat::Selective, Remat::Full, Remat::Attention}) {
    std::string formula =
        r == Remat::None ? korthikanti + ": sbh(34 + 5as/h) per block"
        : r == Remat::Selective
            ? "formula: what llmc-remat selective keeps, matmul and "
              "attention outputs, 2sbh(7 + f/h) per block"
        : r == Remat::Full ? korthikanti + ": 2sbh per block"
                           : korthikanti + ": selective, sbh 34 per block";
    bool compiled = step && step->compiled[static_cast<unsigned>(r)];
    act.rows.push_back(
        {("device_" + stringifyRemat(r)).str(),
         formatv("training, remat {0}{1}", stringifyRemat(r),
                 r == layout.remat ? " (chosen)" : "")
             .str(),
         est.activationsByRemat[static_cast<unsigned>(r)], "bytes",
         compiled ? step->source + ", kept for backward"
                  : formula + (half ? " (16-bit)"
                                    : " (fp32: twice the 16-bit terms)")});
    if (compiled)
      act.rows.push_back(
          {("step_arena_" + stringifyRemat(r)).str(),
           formatv("  @grad_step planned peak, remat {0}", stringifyRemat(r))
               .str(),
           static_cast<double>(step->arenaBytes[static_cast<unsigned>(r)]),
           "bytes", step->source});
  }
  report.sections.push_back(std::move(act));
}

/// Compute: parameters, FLOPs per token, tokens, steps and Chinchilla's.
void addComputeSection(const ReportInputs &in, Report &report) {
  const PlanRequest &request = in.request;
  const PlanModel &model = *request.model;
  const Estimate &est = in.est;
  Section compute{"compute", "Compute", {}};
  compute.rows.push_back({"parameters", "parameters",
                          static_cast<double>(model.numParameters),
                          "parameters", "IR"});
  compute.rows.push_back({"flops_per_token",
                          "training FLOPs per token, 6N + 12 L h s",
                          est.modelFlopsPerToken, "FLOP",
                          "formula: PaLM (Chowdhery et al. 2022), N from IR"});
  if (request.forward && request.forward->flops > 0) {
    double tokens =
        static_cast<double>(request.forward->batch) * request.forward->seqLen;
    compute.rows.push_back({"ir_flops_per_token",
                            "3 x forward FLOPs per token (causal attention)",
                            3.0 * request.forward->flops / tokens, "FLOP",
                            "IR: kir::countFlops x 3"});
  }
  compute.rows.push_back({"tokens", "training tokens", est.tokens, "tokens",
                          est.tokensFromChinchilla
                              ? "default: Chinchilla 20 x P"
                              : sourceOf(request.train.origins, "max_tokens",
                                         "train config", "--max-tokens")});
  compute.rows.push_back({"training_flops", "training FLOPs", est.trainingFlops,
                          "FLOP", "formula"});
  compute.rows.push_back({"steps", "optimizer steps", est.steps, "steps",
                          "tokens / (global batch x seq)"});
  double chinchilla = chinchillaTokens(model.numParameters);
  compute.rows.push_back({"chinchilla_tokens",
                          "Chinchilla-optimal tokens (D = 20 P)", chinchilla,
                          "tokens", "formula: Hoffmann et al. 2022"});
  compute.rows.push_back({"chinchilla_flops", "FLOPs at Chinchilla tokens",
                          est.modelFlopsPerToken * chinchilla, "FLOP",
                          "formula"});
  report.sections.push_back(std::move(compute));
}

/// Bytes per step on each axis: what the communication times divide by a
/// bandwidth, and what llmc run's `mesh traffic` line measures. No section
/// when nothing crosses devices.
void addTrafficSection(const ReportInputs &in, Report &report) {
  const Layout &layout = in.est.layout;
  Section traffic{"traffic", "Communication per step and device", {}};
  const StepTraffic &bytes = in.est.traffic;
  std::string ring = "formula: ring volume, 2(n-1)/n of an all-reduce";
  if (bytes.tp > 0)
    traffic.rows.push_back(
        {"step_tp_bytes",
         formatv("tensor-parallel: {0} {1} of B x T x h per block and "
                 "micro-batch, the embedding's, classifier's and "
                 "loss's{2}",
                 layout.remat == Remat::Full ? 6 : 4,
                 layout.sp ? "reduce-scatter/all-gather pairs" : "all-reduces",
                 layout.sp ? ", sequence-slice parameters' gradients" : "")
             .str(),
         bytes.tp, "bytes", ring});
  if (bytes.pp > 0)
    traffic.rows.push_back(
        {"step_pp_bytes",
         "pipeline: B x T x h per micro-batch each way per boundary", bytes.pp,
         "bytes", "formula: activations and their gradients"});
  if (bytes.ppTied > 0)
    traffic.rows.push_back(
        {"step_pp_tied_bytes",
         "pipeline: the tied embedding's gradient summed between the first "
         "and last stage",
         bytes.ppTied, "bytes", "formula: vocab/t x h gradient bytes"});
  if (bytes.dpGradients > 0)
    traffic.rows.push_back(
        {"step_dp_gradient_bytes",
         formatv("data-parallel gradients ({0})",
                 layout.zero == 0 ? "all-reduce" : "reduce-scatter")
             .str(),
         bytes.dpGradients, "bytes", ring + ", (n-1)/n of a reduce-scatter"});
  if (bytes.dpWeights > 0)
    traffic.rows.push_back({"step_dp_weight_bytes",
                            "data-parallel weights (ZeRO all-gathers)",
                            bytes.dpWeights, "bytes",
                            "formula: ring volume, (n-1)/n of an all-gather"});
  if (!traffic.rows.empty())
    report.sections.push_back(std::move(traffic));
}

/// Time and cost (with a GPU): the step's parts, time to train, GPU-hours
/// and, with a price, the cost.
void addTimeSection(const ReportInputs &in, Report &report) {
  const TrainingFacts &train = in.request.train;
  const ClusterConfig &cluster = in.request.cluster;
  const GpuSpec &gpu = *in.request.gpu;
  const Estimate &est = in.est;
  const std::string &data = in.data;
  Section time{"time", "Time and cost", {}};
  time.rows.push_back(
      {"peak_flops",
       formatv("peak {0} per GPU, dense", stringifyPrecision(train.precision))
           .str(),
       gpu.peakFlops(train.precision), "FLOP/s", data});
  time.rows.push_back(
      {"mfu_assumed", "MFU of the kernels (assumed)", cluster.mfu, "fraction",
       sourceOf(cluster.origins, "plan.mfu", "cluster config", "default 0.4")});
  const StepTime &step = est.step;
  struct Part {
    StringRef key, label;
    double value;
  } parts[] = {
      {"step_compute", "step: compute", step.compute},
      {"step_recompute", "step: recompute (remat)", step.recompute},
      {"step_bubble", "step: pipeline bubble (1F1B)", step.bubble},
      {"step_imbalance", "step: pipeline stages' imbalance (the slowest)",
       step.imbalance},
      {"step_tp_comm", "step: tensor-parallel all-reduces", step.tpComm},
      {"step_pp_comm", "step: pipeline sends", step.ppComm},
      {"step_dp_comm", "step: data-parallel comm not overlapped", step.dpComm},
      {"step_optimizer", "step: optimizer update (HBM-bound)", step.optimizer},
  };
  for (const Part &part : parts)
    if (part.value > 0 || part.key == "step_compute")
      time.rows.push_back({part.key.str(), part.label.str(), part.value, "s",
                           "formula + " + data});
  time.rows.push_back({"step_time", "step time", step.total(), "s", "sum"});
  time.rows.push_back({"mfu_achieved", "MFU end to end", est.achievedMfu,
                       "fraction", "model FLOPs / (step time x peak)"});
  time.rows.push_back({"time_to_train", "time to train", est.seconds, "s",
                       "steps x step time"});
  time.rows.push_back({"gpu_hours", "GPU-hours",
                       est.seconds / 3600 * cluster.numGpus(), "GPU-hours",
                       "time x GPUs"});
  double chinchilla = chinchillaTokens(in.request.model->numParameters);
  double chinchillaSeconds =
      std::ceil(chinchilla /
                (static_cast<double>(est.globalBatch) * est.seqLen)) *
      step.total();
  time.rows.push_back({"chinchilla_time", "time at Chinchilla tokens",
                       chinchillaSeconds, "s", "formula"});
  if (cluster.pricePerGpuHour > 0) {
    time.rows.push_back({"price", "price per GPU-hour", cluster.pricePerGpuHour,
                         "USD",
                         sourceOf(cluster.origins, "plan.price_per_gpu_hour",
                                  "cluster config", "cluster config")});
    time.rows.push_back({"cost", "cost", est.cost, "USD", "GPU-hours x price"});
    time.rows.push_back(
        {"chinchilla_cost", "cost at Chinchilla tokens",
         chinchillaSeconds / 3600 * cluster.numGpus() * cluster.pricePerGpuHour,
         "USD", "formula"});
  }
  report.sections.push_back(std::move(time));
}

/// The checkpoints of the run: their size, count and disk.
CheckpointSize addCheckpointSection(const ReportInputs &in, Report &report) {
  const TrainingFacts &train = in.request.train;
  const Origins &o = train.origins;
  const Estimate &est = in.est;
  const Layout &layout = est.layout;
  const StateBytes &perParameter = in.perParameter;
  double parameters = static_cast<double>(in.request.model->numParameters);
  CheckpointSize size = checkpointSize(perParameter, parameters, layout);
  std::string intervalSource =
      sourceOf(o, "checkpoint_interval", "train config",
               "default: llmc run's 0, only at the end");
  int64_t count = checkpointCount(est.steps, train.checkpointInterval);

  Section ckpt{"checkpoints", "Checkpoints", {}};
  ckpt.rows.push_back(
      {"checkpoint_bytes_per_parameter",
       formatv("bytes per parameter (f32 weights {0} + optimizer {1}; no "
               "gradients or 16-bit copies)",
               shortNumber(size.bytesPerParameter - perParameter.optimizer),
               shortNumber(perParameter.optimizer))
           .str(),
       size.bytesPerParameter, "bytes",
       "formula: llmc run's checkpoint: the f32 weights (mixed precision's "
       "masters) and the optimizer states"});
  ckpt.rows.push_back({"checkpoint_bytes", "one checkpoint", size.bytes,
                       "bytes", "IR parameters x bytes/parameter"});
  ckpt.rows.push_back(
      {"checkpoint_per_rank",
       formatv("largest part one rank writes (of {0} writing)", size.writers)
           .str(),
       size.perRankBytes, "bytes",
       size.writers > 1
           ? formatv("formula: ZeRO-{0}, a file per dp rank ({1}); rank 0 "
                     "also the main file",
                     layout.zero, layout.dp)
                 .str()
           : std::string("formula: one rank writes it all (tp shares, "
                         "stages and ZeRO blocks gathered)")});
  ckpt.rows.push_back({"checkpoint_interval", "interval",
                       static_cast<double>(train.checkpointInterval), "steps",
                       intervalSource});
  ckpt.rows.push_back({"checkpoint_count", "checkpoints over the run",
                       static_cast<double>(count), "checkpoints",
                       "ceil(steps / interval)"});
  ckpt.rows.push_back({"checkpoint_disk_all", "disk if every one is kept",
                       count * size.bytes, "bytes",
                       "checkpoints x one checkpoint"});
  if (train.keepCheckpoints > 0 && train.keepCheckpoints < count)
    ckpt.rows.push_back(
        {"checkpoint_disk_kept",
         formatv("disk keeping the last {0}", train.keepCheckpoints).str(),
         train.keepCheckpoints * size.bytes, "bytes",
         sourceOf(o, "keep_checkpoints", "train config",
                  formatv("default: llmc run's keep_checkpoints {0}",
                          ::llmc::kDefaultKeepCheckpoints)
                      .str())});
  report.sections.push_back(std::move(ckpt));
  return size;
}

/// The run's overheads (checkpoints, restarts, lost work) and its goodput,
/// at the plan's step time or the observed one; needs a GPU.
Goodput addGoodputSection(const ReportInputs &in, const CheckpointSize &size,
                          Report &report) {
  const TrainingFacts &train = in.request.train;
  const ClusterConfig &cluster = in.request.cluster;
  const Origins &co = cluster.origins;
  const Estimate &est = in.est;
  bool fromStep = cluster.observedStepSeconds > 0;
  GoodputInputs inputs;
  inputs.steps = est.steps;
  inputs.stepSeconds =
      fromStep ? cluster.observedStepSeconds : est.step.total();
  inputs.checkpointBytes = size.bytes;
  inputs.checkpointInterval = train.checkpointInterval;
  inputs.writeBytesPerSecond = cluster.storageWriteGBps * 1e9;
  inputs.readBytesPerSecond = cluster.storageReadGBps * 1e9;
  inputs.restarts = cluster.restarts;
  inputs.relaunchSeconds = cluster.restartMinutes * 60;
  Goodput g = computeGoodput(inputs);
  std::string writeSource =
      sourceOf(co, "plan.storage_write_gbps", "cluster config",
               "default: assumed 10 GB/s, a parallel file system's aggregate "
               "write rate; set plan.storage_write_gbps");
  std::string readSource = cluster.storageReadGBps > 0
                               ? sourceOf(co, "plan.storage_read_gbps",
                                          "cluster config", "cluster config")
                               : "default: the write bandwidth";
  Section run{"goodput", "Run overheads and goodput", {}};
  run.rows.push_back({"storage_write", "storage write bandwidth (aggregate)",
                      cluster.storageWriteGBps * 1e9, "bytes/s", writeSource});
  run.rows.push_back({"storage_read", "storage read bandwidth (aggregate)",
                      (cluster.storageReadGBps > 0 ? cluster.storageReadGBps
                                                   : cluster.storageWriteGBps) *
                          1e9,
                      "bytes/s", readSource});
  run.rows.push_back(
      {"restarts", "restarts", static_cast<double>(cluster.restarts),
       "restarts",
       sourceOf(co, "plan.restarts", "cluster config", "default 0")});
  run.rows.push_back(
      {"relaunch", "re-launch per restart (scheduler, processes, NCCL init)",
       cluster.restartMinutes * 60, "s",
       sourceOf(co, "plan.restart_minutes", "cluster config",
                "default: assumed 10 min; set plan.restart_minutes")});
  run.rows.push_back({"reload", "reload per restart",
                      cluster.restarts
                          ? g.reloadSeconds / cluster.restarts
                          : size.bytes / (inputs.readBytesPerSecond > 0
                                              ? inputs.readBytesPerSecond
                                              : inputs.writeBytesPerSecond),
                      "s", "one checkpoint / read bandwidth"});
  run.rows.push_back({"checkpoint_write", "writing one checkpoint",
                      g.checkpointWriteSeconds, "s",
                      "one checkpoint / write bandwidth (synchronous)"});
  std::string stepSource =
      fromStep ? "the observed step time" : "the plan's step time";
  run.rows.push_back({"training_time", "training: steps x step time",
                      g.trainingSeconds, "s", "steps x " + stepSource});
  run.rows.push_back({"checkpointing_time",
                      formatv("+ writing {0} checkpoints", g.checkpoints).str(),
                      g.checkpointSeconds, "s", "checkpoints x writing one"});
  run.rows.push_back(
      {"restart_time",
       formatv("+ {0} restarts: re-launch and reload", cluster.restarts).str(),
       g.relaunchSeconds + g.reloadSeconds, "s",
       "restarts x (re-launch + reload)"});
  run.rows.push_back({"lost_work",
                      "+ work lost since the last checkpoint at each failure",
                      g.lostWorkSeconds, "s",
                      train.checkpointInterval > 0
                          ? "formula: restarts x interval / 2 x " + stepSource
                          : "formula: restarts x steps / 2 x " + stepSource +
                                " (no intermediate checkpoints)"});
  run.rows.push_back(
      {"wall_time", "wall-clock time", g.wallSeconds(), "s", "sum"});
  run.rows.push_back({"goodput", "goodput (training / wall-clock)", g.goodput(),
                      "fraction", "formula"});
  report.sections.push_back(std::move(run));
  return g;
}

/// The observed run (--observed-days or --observed-step-time) against the
/// plan: implied MFU and the gap the overheads `g` explain or not.
void addObservedSection(const ReportInputs &in, const Goodput &g,
                        Report &report) {
  const TrainingFacts &train = in.request.train;
  const ClusterConfig &cluster = in.request.cluster;
  const Origins &co = cluster.origins;
  const Estimate &est = in.est;
  bool fromStep = cluster.observedStepSeconds > 0;
  double gpus = static_cast<double>(cluster.numGpus());
  double peak = in.request.gpu->peakFlops(train.precision);
  double tokensPerStep = static_cast<double>(est.globalBatch) * est.seqLen;
  ObservedRun observed =
      fromStep ? compareObserved(false, cluster.observedStepSeconds,
                                 tokensPerStep * est.modelFlopsPerToken, gpus,
                                 peak, est.step.total(), 0)
               : compareObserved(true, cluster.observedDays * 86400,
                                 est.trainingFlops, gpus, peak, est.seconds,
                                 g.overheadSeconds());
  std::string observedSource =
      fromStep ? sourceOf(co, "plan.observed_step_time", "cluster config",
                          "--observed-step-time")
               : sourceOf(co, "plan.observed_days", "cluster config",
                          "--observed-days");
  Section obs{"observed", "Observed run against the plan", {}};
  obs.rows.push_back({"observed",
                      fromStep ? "observed step time" : "observed wall-clock",
                      observed.observed, "s", observedSource});
  obs.rows.push_back(
      {"implied_mfu", "implied MFU", observed.impliedMfu, "fraction",
       fromStep ? "model FLOPs per step / (observed x GPUs x peak)"
                : "model FLOPs / (observed x GPUs x peak)"});
  obs.rows.push_back({"implied_flops_per_gpu", "implied model FLOP/s per GPU",
                      observed.impliedMfu * peak, "FLOP/s",
                      "implied MFU x peak (" + in.data + ")"});
  obs.rows.push_back(
      {"ideal",
       fromStep ? "the plan's step time" : "the plan's time to train (ideal)",
       observed.ideal, "s",
       fromStep ? "sum of the step's parts above" : "steps x step time"});
  obs.rows.push_back(
      {"gap", "observed - plan", observed.gap, "s", "difference"});
  if (observed.fromDays) {
    obs.rows.push_back({"explained",
                        "of which checkpoints, restarts and lost work",
                        observed.explained, "s", "the overheads above"});
    obs.rows.push_back(
        {"unexplained",
         observed.unexplained >= 0
             ? "unexplained (slower steps than planned, stalls, rollbacks)"
             : "unexplained: NEGATIVE, the run was faster than the model "
               "says",
         observed.unexplained, "s", "observed - plan - overheads"});
    obs.rows.push_back({"observed_goodput", "plan / observed",
                        observed.ideal / observed.observed, "fraction",
                        "time to train / observed"});
  }
  report.sections.push_back(std::move(obs));
}

/// The checkpoints of the run, and with a GPU the run's overheads
/// (goodput) and the observed run against the plan.
void addCheckpointSections(const ReportInputs &in, Report &report) {
  CheckpointSize size = addCheckpointSection(in, report);
  if (!in.est.hasGpu)
    return;
  Goodput g = addGoodputSection(in, size, report);
  const ClusterConfig &cluster = in.request.cluster;
  if (cluster.observedDays <= 0 && cluster.observedStepSeconds <= 0)
    return;
  addObservedSection(in, g, report);
}

/// The default (non --fit) table: the configured layout's memory under
/// other ZeRO stages and tp and pp sizes.
void addComparedLayouts(const ReportInputs &in, Report &report) {
  const PlanRequest &request = in.request;
  const GpuSpec *gpu = request.gpu;
  const Layout &layout = in.est.layout;
  LayoutTable table;
  table.key = "layouts";
  table.title = formatv("Per-device memory by layout (micro-batch {0}, "
                        "remat {1})",
                        layout.microBatch, stringifyRemat(layout.remat));
  table.note = "states: IR parameters x bytes/parameter, sharded by tp, pp "
               "and ZeRO; activations: formula";
  if (gpu)
    table.capacityBytes = gpu->memoryGiB * kGiB;
  for (const Layout &l :
       comparedLayouts(*request.model, request.train, request.cluster, layout))
    table.rows.push_back(
        estimate(*request.model, request.train, request.cluster, gpu, l));
  report.tables.push_back(std::move(table));
}

/// --fit's notes: what the search tried, how the configured layout
/// compares, and when nothing fits the smallest plan.
void addFitNotes(const ReportInputs &in, const FitResult &fit, Report &report) {
  const Estimate &est = in.est;
  const Layout &layout = est.layout;
  report.facts["fit_budget_bytes"] = formatv("{0:F0}", fit.budgetBytes);
  report.notes.push_back(formatv(
      "--fit: {0} candidates: {1} fit, {2} do not fit, {3} invalid (global "
      "batch {4} not divisible by micro-batch x dp)",
      fit.candidates, fit.fitting.size(), fit.tooBig, fit.invalid,
      globalBatchOf(in.request.train)));
  // How the configured layout compares.
  if (est.memory.total() > fit.budgetBytes)
    report.notes.push_back(formatv(
        "--fit: the configured layout ({0}, micro-batch {1}, remat {2}) "
        "needs {3}: it does not fit",
        layoutLabel(layout), layout.microBatch, stringifyRemat(layout.remat),
        formatBytes(est.memory.total())));
  else if (!fit.fitting.empty())
    report.notes.push_back(formatv(
        "--fit: the configured layout ({0}, micro-batch {1}, remat {2}) "
        "fits; against the fastest: {3}",
        layoutLabel(layout), layout.microBatch, stringifyRemat(layout.remat),
        explainLoss(fit.fitting[0], est)));
  if (fit.fitting.empty()) {
    report.notes.push_back(
        "--fit: nothing fits; add GPUs, shorten the sequence or use a "
        "smaller model");
    if (fit.smallestTooBig)
      report.notes.push_back(
          formatv("--fit: the smallest plan needs {0} ({1}, micro-batch {2}, "
                  "remat {3})",
                  formatBytes(fit.smallestTooBig->memory.total()),
                  layoutLabel(fit.smallestTooBig->layout),
                  fit.smallestTooBig->layout.microBatch,
                  stringifyRemat(fit.smallestTooBig->layout.remat)));
  }
}

/// --fit: the search's fastest layouts that fit the budget, the best plan
/// of every other tp x pp size, and the notes.
Error addFitTables(const ReportInputs &in, Report &report) {
  const PlanRequest &request = in.request;
  if (!request.gpu)
    return makeError("--fit needs a GPU: give --gpu NAME or plan.gpu in the "
                     "config");
  FitResult fit = searchFit(*request.model, request.train, request.cluster,
                            *request.gpu, *request.fitBudget);
  LayoutTable table;
  table.key = "fit";
  table.title = formatv("Fastest layouts that fit in {0} per device",
                        formatBytes(*request.fitBudget))
                    .str();
  table.note = "tried tp (powers of 2), pp (up to n_layer), ZeRO "
               "0-3, micro-batches (powers of 2) and remat none/selective/"
               "full";
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < fit.fitting.size() && i < kShown; ++i) {
    table.rows.push_back(fit.fitting[i]);
    table.why.push_back(i == 0 ? "fastest"
                               : explainLoss(fit.fitting[0], fit.fitting[i]));
  }
  // The best plan of every other (tp, pp) says why that layout loses.
  constexpr size_t kOthers = 10;
  std::vector<std::pair<int64_t, int64_t>> shown;
  for (const Estimate &e : table.rows)
    shown.push_back({e.layout.tp, e.layout.pp});
  LayoutTable others;
  others.key = "fit_other_layouts";
  others.title = "Best plan of other tp x pp sizes, and why it loses";
  size_t notShown = 0;
  for (const Estimate &e : fit.fitting) {
    std::pair<int64_t, int64_t> key{e.layout.tp, e.layout.pp};
    if (is_contained(shown, key))
      continue;
    shown.push_back(key);
    if (others.rows.size() == kOthers) {
      ++notShown;
      continue;
    }
    others.rows.push_back(e);
    others.why.push_back(explainLoss(fit.fitting[0], e));
  }
  if (notShown)
    others.note = formatv("{0} slower tp x pp sizes not shown", notShown);
  addFitNotes(in, fit, report);
  report.tables.push_back(std::move(table));
  if (!others.rows.empty())
    report.tables.push_back(std::move(others));
  return Error::success();
}

/// The closing notes: where the activations come from, and with a GPU
/// what the time model counts.
void addClosingNotes(const ReportInputs &in, Report &report) {
  const PlanRequest &request = in.request;
  const TrainingFacts &train = request.train;
  const Layout &layout = in.est.layout;
  if (in.step)
    report.notes.push_back(
        "activations: the compiled @grad_step's memory plan for this "
        "layout; the layouts compared above are formulas (Korthikanti et "
        "al. 2022: under tp 10sbh + 24sbh/t, with --sp llmc's 4sbh + "
        "30sbh/t)");
  else
    report.notes.push_back(
        "activations and workspace: formulas (Korthikanti et al. 2022: "
        "under tp 10sbh + 24sbh/t, with --sp llmc's 4sbh + 30sbh/t); " +
        std::string(request.step || layout.tp > 1 || layout.pp > 1 ||
                            layout.remat == Remat::Attention ||
                            train.precision == Precision::Fp8
                        ? "llmc compiles no step with tensor or pipeline "
                          "parallelism, fp8 or remat attention"
                        : "--step-memory ir compiles the training step "
                          "for its memory plan"));
  if (request.gpu)
    report.notes.push_back(
        "time: model FLOPs at the assumed MFU, plus recompute, the 1F1B "
        "bubble, communication at the data file's bandwidths (ring "
        "collectives; data-parallel traffic overlapped with backward) and "
        "the optimizer update at its HBM bandwidth");
}
} // namespace

Expected<Report> plan::buildReport(const PlanRequest &request) {
  const TrainingFacts &train = request.train;
  Layout layout = getConfiguredLayout(train, request.cluster);
  if (Error err = checkRequest(request, layout))
    return err;
  Estimate est = estimate(*request.model, train, request.cluster, request.gpu,
                          layout, request.stage.value_or(-1));
  const StepMemory *step = applyCompiledStep(request, est);
  ReportInputs in{request, est, step,
                  getStateBytes(train.precision, train.optimizer,
                                train.fp32Gradients, train.sgdMomentum),
                  "data file " +
                      sys::path::filename(request.hardwarePath).str()};

  Report report;
  addHeader(in, report);
  addMemorySection(in, report);
  addActivationSection(in, report);
  addComputeSection(in, report);
  addTrafficSection(in, report);
  if (request.gpu)
    addTimeSection(in, report);
  addCheckpointSections(in, report);
  if (!request.fitBudget)
    addComparedLayouts(in, report);
  else if (Error err = addFitTables(in, report))
    return err;
  addClosingNotes(in, report);
  return report;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {
void printLayoutTable(const LayoutTable &table, bool hasGpu, raw_ostream &os) {
  os << "\n" << table.title << "\n";
  if (!table.note.empty())
    os << "  (" << table.note << ")\n";
  os << format("  %3s %3s %4s %4s %5s %-9s %11s %11s %11s", "tp", "pp", "dp",
               "zero", "micro", "remat", "states", "activations", "total");
  if (table.capacityBytes > 0)
    os << format(" %4s", "fits");
  if (hasGpu)
    os << format(" %10s %10s %6s", "step", "train", "MFU");
  if (!table.why.empty())
    os << "  why";
  os << "\n";
  for (auto [i, e] : enumerate(table.rows)) {
    const Layout &l = e.layout;
    os << format("  %3lld %3lld %4lld %4d %5lld %-9s %11s %11s %11s",
                 (long long)l.tp, (long long)l.pp, (long long)l.dp, l.zero,
                 (long long)l.microBatch, stringifyRemat(l.remat).str().c_str(),
                 formatBytes(e.memory.states.total()).c_str(),
                 formatBytes(e.memory.activations).c_str(),
                 formatBytes(e.memory.total()).c_str());
    if (table.capacityBytes > 0)
      os << format(" %4s",
                   e.memory.total() <= table.capacityBytes ? "yes" : "NO");
    if (hasGpu)
      os << format(" %10s %10s %5.1f%%", formatSeconds(e.step.total()).c_str(),
                   formatSeconds(e.seconds).c_str(), 100 * e.achievedMfu);
    if (i < table.why.size())
      os << "  " << table.why[i];
    os << "\n";
  }
}

void writeQuantity(json::OStream &j, const Quantity &q) {
  j.attributeObject(q.key, [&] {
    j.attribute("label", q.label);
    if (q.value == std::floor(q.value) && std::abs(q.value) < 9e15)
      j.attribute("value", static_cast<int64_t>(q.value));
    else
      j.attribute("value", q.value);
    j.attribute("unit", q.unit);
    j.attribute("source", q.source);
  });
}

Quantity bytesOf(StringRef key, double value, StringRef source) {
  return {key.str(), key.str(), std::round(value), "bytes", source.str()};
}
} // namespace

void plan::printReportTable(const Report &report, raw_ostream &os) {
  for (const std::string &line : report.header)
    os << line << "\n";
  for (const Section &section : report.sections) {
    os << "\n" << section.title << "\n";
    for (const Quantity &q : section.rows)
      os << format("  %-58s %18s  %s\n", q.label.c_str(),
                   formatValue(q).c_str(), q.source.c_str());
  }
  bool hasGpu = report.facts.count("gpu");
  for (const LayoutTable &table : report.tables)
    printLayoutTable(table, hasGpu, os);
  if (!report.notes.empty())
    os << "\n";
  for (const std::string &note : report.notes)
    os << "note: " << note << "\n";
}

void plan::printReportJson(const Report &report, raw_ostream &os) {
  json::OStream j(os, 2);
  j.object([&] {
    for (const auto &[key, value] : report.facts)
      j.attribute(key, value);
    for (const Section &section : report.sections)
      j.attributeObject(section.key, [&] {
        for (const Quantity &q : section.rows)
          writeQuantity(j, q);
      });
    for (const LayoutTable &table : report.tables)
      j.attributeArray(table.key, [&] {
        for (auto [i, e] : enumerate(table.rows)) {
          j.object([&] {
            j.attribute("tp", e.layout.tp);
            j.attribute("pp", e.layout.pp);
            j.attribute("dp", e.layout.dp);
            j.attribute("zero", e.layout.zero);
            j.attribute("micro_batch", e.layout.microBatch);
            j.attribute("remat", stringifyRemat(e.layout.remat));
            writeQuantity(j, bytesOf("states", e.memory.states.total(),
                                     "IR parameters x bytes/parameter"));
            writeQuantity(j, bytesOf("activations", e.memory.activations,
                                     "formula: Korthikanti et al. 2022"));
            writeQuantity(j, bytesOf("total", e.memory.total(), "sum"));
            if (table.capacityBytes > 0)
              j.attribute("fits", e.memory.total() <= table.capacityBytes);
            if (e.hasGpu) {
              writeQuantity(j, {"step_time", "step time", e.step.total(), "s",
                                "formula"});
              writeQuantity(j, {"time_to_train", "time to train", e.seconds,
                                "s", "formula"});
              writeQuantity(j, {"mfu_achieved", "MFU end to end", e.achievedMfu,
                                "fraction", "formula"});
            }
            if (i < table.why.size())
              j.attribute("why", table.why[i]);
          });
        }
      });
    j.attributeArray("notes", [&] {
      for (const std::string &note : report.notes)
        j.value(note);
    });
  });
  os << "\n";
}
