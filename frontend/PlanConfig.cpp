// `llmc plan`'s view of a training config: its training facts and cluster,
// the names of what it estimates, and sizes and counts with units.
#include "frontend/PlanConfig.h"


#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include "frontend/ConfigYaml.h"

using namespace llvm;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;
using mlir::llmc::config::makeError;
using namespace mlir::llmc::config;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

StringRef plan::stringifyPrecision(Precision precision) {
  switch (precision) {
  case Precision::Fp32:
    return "fp32";
  case Precision::Tf32:
    return "tf32";
  case Precision::Fp16:
    return "fp16";
  case Precision::Bf16:
    return "bf16";
  case Precision::Fp8:
    return "fp8";
  }
  llvm_unreachable("unknown precision");
}

StringRef plan::stringifyOptimizer(Optimizer optimizer) {
  switch (optimizer) {
  case Optimizer::AdamW:
    return "adamw";
  case Optimizer::AdamW8bit:
    return "adamw-8bit";
  case Optimizer::Sgd:
    return "sgd";
  }
  llvm_unreachable("unknown optimizer");
}

StringRef plan::stringifyRemat(Remat remat) {
  switch (remat) {
  case Remat::None:
    return "none";
  case Remat::Selective:
    return "selective";
  case Remat::Full:
    return "full";
  case Remat::Attention:
    return "attention";
  }
  llvm_unreachable("unknown remat policy");
}

namespace {
template <typename E>
std::optional<E> parseByName(StringRef text, StringRef (*stringify)(E),
                             unsigned count) {
  for (unsigned i = 0; i < count; ++i)
    if (stringify(static_cast<E>(i)).equals_insensitive(text))
      return static_cast<E>(i);
  return std::nullopt;
}

} // namespace

std::optional<Precision> plan::parsePrecision(StringRef text) {
  return parseByName(text, stringifyPrecision, kNumPrecisions);
}
std::optional<Optimizer> plan::parseOptimizer(StringRef text) {
  return parseByName(text, stringifyOptimizer, 3);
}
std::optional<Remat> plan::parseRemat(StringRef text) {
  return parseByName(text, stringifyRemat, kNumRemats);
}

//===----------------------------------------------------------------------===//
// Numbers with units
//===----------------------------------------------------------------------===//

namespace {
/// Splits "80GiB" into 80 and "GiB"; fails on a malformed number.
std::optional<std::pair<double, StringRef>> splitNumber(StringRef text) {
  text = text.trim();
  size_t end = 0;
  while (end < text.size() &&
         (isDigit(text[end]) || text[end] == '.' || text[end] == 'e' ||
          text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
    // An 'e' that no digit follows starts the unit, not an exponent.
    if ((text[end] == 'e' || text[end] == 'E') &&
        (end + 1 >= text.size() ||
         !(isDigit(text[end + 1]) || text[end + 1] == '+' ||
           text[end + 1] == '-')))
      break;
    ++end;
  }
  double value = 0;
  if (end == 0 || text.take_front(end).getAsDouble(value) ||
      !std::isfinite(value))
    return std::nullopt;
  return std::make_pair(value, text.drop_front(end).trim());
}
} // namespace

Expected<double> plan::parseMemorySize(StringRef text) {
  auto parsed = splitNumber(text);
  if (parsed && parsed->first > 0) {
    StringRef unit = parsed->second;
    struct Unit {
      StringRef name;
      double bytes;
    } units[] = {{"", kGiB},          {"B", 1},         {"KB", 1e3},
                 {"MB", 1e6},         {"GB", 1e9},      {"TB", 1e12},
                 {"KiB", 1024.0},     {"MiB", 1048576}, {"GiB", kGiB},
                 {"TiB", kGiB * 1024}};
    for (const Unit &u : units)
      if (unit.equals_insensitive(u.name))
        return parsed->first * u.bytes;
  }
  return makeError("'" + text +
                   "' is not a memory size; expected e.g. 80GB (10^9 bytes), "
                   "80GiB (2^30 bytes), 81920MiB or 80 (GiB)");
}

Expected<double> plan::parseCount(StringRef text) {
  auto parsed = splitNumber(text);
  if (parsed && parsed->first > 0) {
    StringRef suffix = parsed->second;
    double scale = suffix.empty()                   ? 1
                   : suffix.equals_insensitive("K") ? 1e3
                   : suffix.equals_insensitive("M") ? 1e6
                   : suffix.equals_insensitive("B") ? 1e9
                   : suffix.equals_insensitive("T") ? 1e12
                                                    : 0;
    if (scale)
      return parsed->first * scale;
  }
  return makeError("'" + text +
                   "' is not a positive count; expected e.g. 180e9, 180B, "
                   "1.4T or 300M");
}

//===----------------------------------------------------------------------===//
// Train and cluster configs
//===----------------------------------------------------------------------===//

Expected<TrainingFacts> plan::trainingFactsFromRun(const TrainingConfig &run,
                                                   bool runDefaults) {
  TrainingFacts train;
  train.origins = run.origins;
  // Without a config file, a key not given keeps the planner's default.
  auto given = [&](StringRef key) {
    return runDefaults || run.origins.count(key.str());
  };
  const ::llmc::PlanSection &estimated = run.plan;
  if (!estimated.estimatedPrecision.empty()) {
    train.precision = *parsePrecision(estimated.estimatedPrecision);
  } else if (given("precision")) {
    switch (run.precision.kind) {
    case ::llmc::PrecisionConfig::Kind::FP32:
      train.precision = Precision::Fp32;
      break;
    case ::llmc::PrecisionConfig::Kind::FP16:
      train.precision = Precision::Fp16;
      break;
    case ::llmc::PrecisionConfig::Kind::BF16:
      train.precision = Precision::Bf16;
      break;
    }
  }
  if (!estimated.estimatedOptimizer.empty())
    train.optimizer = *parseOptimizer(estimated.estimatedOptimizer);
  else
    train.optimizer = run.optimizer.kind == ::llmc::OptimizerConfig::Kind::SGD
                          ? Optimizer::Sgd
                          : Optimizer::AdamW;
  train.sgdMomentum = run.optimizer.momentum != 0;
  // llmc run's optimizer step reads fp32 gradients; plan.grad_precision
  // half estimates 16-bit ones.
  train.fp32Gradients = estimated.fp32Gradients;
  if (given("micro_batch_size"))
    train.microBatch = run.microBatchSize;
  if (given("global_batch_size") || given("micro_batch_size"))
    train.globalBatch = run.origins.count("global_batch_size") || runDefaults
                            ? run.globalBatchSize
                            : 0;
  if (given("seq_len"))
    train.seqLen = run.seqLen;
  if (!estimated.estimatedRemat.empty()) {
    train.remat = *parseRemat(estimated.estimatedRemat);
  } else {
    switch (run.remat.policy) {
    case ::llmc::RematConfig::Policy::None:
      train.remat = Remat::None;
      break;
    case ::llmc::RematConfig::Policy::Selective:
      train.remat = Remat::Selective;
      break;
    case ::llmc::RematConfig::Policy::Full:
      train.remat = Remat::Full;
      break;
    case ::llmc::RematConfig::Policy::Budget:
      return layoutError(train.origins, "remat", "remat",
                         "llmc plan has no estimate of the budget policy (it "
                         "recomputes until the step fits remat_budget); plan "
                         "none, selective or full with --remat");
    }
  }
  train.checkpointInterval = run.checkpointInterval;
  train.keepCheckpoints = run.keepCheckpoints;
  if (run.maxTokens) {
    train.tokens = static_cast<double>(run.maxTokens);
  } else {
    train.steps = run.maxSteps;
    if (train.origins.count("max_steps"))
      train.origins["max_tokens"] = train.origins["max_steps"];
  }
  return train;
}

Expected<ClusterConfig> plan::clusterConfigFromRun(const TrainingConfig &run) {
  ClusterConfig cluster;
  static_cast<::llmc::PlanSection &>(cluster) = run.plan;
  cluster.origins = run.origins;
  cluster.zero = static_cast<int>(run.parallel.zero);
  cluster.tensorParallel = run.parallel.tp;
  cluster.sequenceParallel = run.parallel.sp;
  cluster.pipelineParallel = run.parallel.pp;
  if (!run.origins.count("parallel.dp"))
    return cluster;
  // A run's mesh sizes the cluster it plans on, unless the plan section
  // says otherwise; then the two must agree.
  int64_t world = run.parallel.dp * run.parallel.tp * run.parallel.pp;
  bool sized = run.origins.count("plan.nodes") ||
               run.origins.count("plan.gpus_per_node");
  if (!sized) {
    int64_t perNode = cluster.gpusPerNode;
    if (world % perNode == 0) {
      cluster.nodes = world / perNode;
    } else {
      cluster.gpusPerNode = world;
      cluster.nodes = 1;
    }
  }
  if (cluster.numGpus() != world)
    return layoutError(
        cluster.origins, "parallel.dp", "dp",
        formatv("dp {0} x tp {1} x pp {2} = {3} ranks, but the plan section "
                "gives {4} GPUs ({5} per node x {6} nodes)",
                run.parallel.dp, run.parallel.tp, run.parallel.pp, world,
                cluster.numGpus(), cluster.gpusPerNode, cluster.nodes));
  return cluster;
}

bool plan::isHalf(Precision p) {
  return p != Precision::Fp32 && p != Precision::Tf32;
}

std::string plan::originOf(const Origins &origins, StringRef key, StringRef flag) {
  auto it = origins.find(key.str());
  return it != origins.end() ? it->second : ("--" + flag).str();
}

/// "train.yaml:3:18: error: key: message" for a value from a file, or
/// "--flag: message" for a flag or a default.
Error plan::layoutError(const Origins &origins, StringRef key, StringRef flag,
                  const Twine &message) {
  std::string origin = originOf(origins, key, flag);
  if (StringRef(origin).starts_with("--"))
    return makeError(origin + ": " + message);
  return makeError(origin + ": error: " + key + ": " + message);
}

/// How a report names the origin of a configured value.
std::string plan::sourceOf(const Origins &origins, StringRef key, StringRef file,
                     StringRef fallback) {
  auto it = origins.find(key.str());
  if (it == origins.end())
    return fallback.str();
  if (StringRef(it->second).starts_with("--"))
    return it->second;
  return file.str();
}

int64_t plan::globalBatchOf(const TrainingFacts &train) {
  return train.globalBatch ? train.globalBatch : kDefaultGlobalBatch;
}
