// `llmc plan`'s train and cluster configs: names, sizes and the YAML files.
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

Expected<TrainConfig> plan::trainConfigFromRun(const TrainingConfig &run) {
  TrainConfig train;
  train.origins = run.origins;
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
  train.optimizer = run.optimizer.kind == ::llmc::OptimizerConfig::Kind::SGD
                        ? Optimizer::Sgd
                        : Optimizer::AdamW;
  train.sgdMomentum = run.optimizer.momentum != 0;
  // llmc run's optimizer step reads fp32 gradients.
  train.fp32Gradients = true;
  train.microBatch = run.microBatchSize;
  train.globalBatch = run.globalBatchSize ? run.globalBatchSize
                                          : run.microBatchSize;
  train.seqLen = run.seqLen;
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

namespace {
constexpr StringRef kClusterKeys[] = {
    "zero",          "tensor_parallel",    "pipeline_parallel",
    "sequence_parallel",
    "gpu",           "gpus_per_node",      "nodes",
    "price_per_gpu_hour", "mfu",           "reserve_gib",
    "restarts",      "restart_minutes",    "storage_write_gbps",
    "storage_read_gbps", "observed_days",  "observed_step_time"};
} // namespace

ArrayRef<StringRef> plan::clusterConfigKeys() { return kClusterKeys; }

Error plan::parseClusterConfig(StringRef text, StringRef bufferName,
                               ClusterConfig &config) {
  YamlFile file(text, bufferName);
  Expected<const YNode *> root = file.root("cluster keys");
  if (!root)
    return root.takeError();
  Fields fields(file, kClusterKeys);
  if (Error err = fields.collect(**root))
    return err;
  constexpr int64_t kMax = 1ll << 31;
  for (auto [key, field, max] :
       {std::tuple<StringRef, int64_t *, int64_t>{
            "tensor_parallel", &config.tensorParallel, kMax},
        {"pipeline_parallel", &config.pipelineParallel, kMax}}) {
    if (!fields.has(key))
      continue;
    Expected<int64_t> value = fields.getInt(key, 1, max);
    if (!value)
      return value.takeError();
    *field = *value;
    config.origins[key.str()] = fields.where(key);
  }
  if (fields.has("zero")) {
    Expected<int64_t> value = fields.getInt("zero", 0, 3);
    if (!value)
      return value.takeError();
    config.zero = static_cast<int>(*value);
    config.origins["zero"] = fields.where("zero");
  }
  if (fields.has("sequence_parallel")) {
    Expected<bool> value = fields.getEnum<bool>(
        "sequence_parallel",
        +[](StringRef text) -> std::optional<bool> {
          if (text == "true")
            return true;
          if (text == "false")
            return false;
          return std::nullopt;
        },
        "true, false");
    if (!value)
      return value.takeError();
    config.sequenceParallel = *value;
    config.origins["sequence_parallel"] = fields.where("sequence_parallel");
  }
  if (fields.has("gpu")) {
    Expected<std::string> value = fields.getString("gpu");
    if (!value)
      return value.takeError();
    config.gpu = *value;
    config.origins["gpu"] = fields.where("gpu");
  }
  for (auto [key, field, min] :
       {std::tuple<StringRef, int64_t *, int64_t>{"gpus_per_node",
                                                  &config.gpusPerNode, 1},
        {"nodes", &config.nodes, 1},
        {"restarts", &config.restarts, 0}}) {
    if (!fields.has(key))
      continue;
    Expected<int64_t> value = fields.getInt(key, min, 1 << 20);
    if (!value)
      return value.takeError();
    *field = *value;
    config.origins[key.str()] = fields.where(key);
  }
  struct NumberKey {
    StringRef key;
    double *field;
    double min;
    bool inclusive;
    double max;
  } numbers[] = {
      {"price_per_gpu_hour", &config.pricePerGpuHour, 0, true, HUGE_VAL},
      {"mfu", &config.mfu, 0, false, 1},
      {"reserve_gib", &config.reserveGiB, 0, true, HUGE_VAL},
      {"restart_minutes", &config.restartMinutes, 0, true, HUGE_VAL},
      {"storage_write_gbps", &config.storageWriteGBps, 0, false, HUGE_VAL},
      {"storage_read_gbps", &config.storageReadGBps, 0, false, HUGE_VAL},
      {"observed_days", &config.observedDays, 0, false, HUGE_VAL},
      {"observed_step_time", &config.observedStepSeconds, 0, false, HUGE_VAL},
  };
  for (const NumberKey &n : numbers) {
    if (!fields.has(n.key))
      continue;
    Expected<double> value = fields.getNumber(n.key, n.min, n.inclusive, n.max);
    if (!value)
      return value.takeError();
    *n.field = *value;
    config.origins[n.key.str()] = fields.where(n.key);
  }
  if (fields.has("observed_days") && fields.has("observed_step_time"))
    return fields.error("observed_step_time",
                        "give one observed figure, observed_days or "
                        "observed_step_time, not both (observed_days is at " +
                            fields.where("observed_days") + ")");
  return Error::success();
}

Error plan::loadClusterConfigFile(StringRef path, ClusterConfig &config) {
  auto buffer = readFile(path, "cluster config");
  if (!buffer)
    return buffer.takeError();
  return parseClusterConfig((*buffer)->getBuffer(), path, config);
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

int64_t plan::globalBatchOf(const TrainConfig &train) {
  return train.globalBatch ? train.globalBatch : kDefaultGlobalBatch;
}
