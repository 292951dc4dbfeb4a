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
  return parseByName(text, stringifyRemat, 3);
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

Error plan::parseTrainConfig(StringRef text, StringRef bufferName,
                             TrainConfig &config) {
  static constexpr StringRef keys[] = {
      "precision",       "optimizer",         "grad_precision", "micro_batch",
      "global_batch",    "seq_len",           "remat",          "zero",
      "tensor_parallel", "pipeline_parallel", "tokens"};
  YamlFile file(text, bufferName);
  Expected<const YNode *> root = file.root("training config keys");
  if (!root)
    return root.takeError();
  Fields fields(file, keys);
  if (Error err = fields.collect(**root))
    return err;
  constexpr int64_t kMax = 1ll << 31;
  auto setInt = [&](StringRef key, int64_t &field, int64_t min,
                    int64_t max) -> Error {
    if (!fields.has(key))
      return Error::success();
    Expected<int64_t> value = fields.getInt(key, min, max);
    if (!value)
      return value.takeError();
    field = *value;
    config.origins[key.str()] = fields.where(key);
    return Error::success();
  };
  if (fields.has("precision")) {
    auto value = fields.getEnum<Precision>(
        "precision", parsePrecision,
        listEnumNames(stringifyPrecision, kNumPrecisions));
    if (!value)
      return value.takeError();
    config.precision = *value;
    config.origins["precision"] = fields.where("precision");
  }
  if (fields.has("optimizer")) {
    auto value = fields.getEnum<Optimizer>("optimizer", parseOptimizer,
                                           listEnumNames(stringifyOptimizer, 3));
    if (!value)
      return value.takeError();
    config.optimizer = *value;
    config.origins["optimizer"] = fields.where("optimizer");
  }
  if (fields.has("grad_precision")) {
    Expected<std::string> value = fields.getString("grad_precision");
    if (!value)
      return value.takeError();
    if (*value != "fp32" && *value != "half")
      return fields.error("grad_precision", "unknown value '" + *value +
                                                "'; expected fp32 or half");
    config.fp32Gradients = *value == "fp32";
    config.origins["grad_precision"] = fields.where("grad_precision");
  }
  if (fields.has("remat")) {
    auto value = fields.getEnum<Remat>("remat", parseRemat,
                                       listEnumNames(stringifyRemat, 3));
    if (!value)
      return value.takeError();
    config.remat = *value;
    config.origins["remat"] = fields.where("remat");
  }
  int64_t zero = config.zero;
  if (Error err = setInt("micro_batch", config.microBatch, 1, kMax))
    return err;
  if (Error err = setInt("global_batch", config.globalBatch, 1, kMax))
    return err;
  if (Error err = setInt("seq_len", config.seqLen, 1, kMax))
    return err;
  if (Error err = setInt("zero", zero, 0, 3))
    return err;
  config.zero = static_cast<int>(zero);
  if (Error err = setInt("tensor_parallel", config.tensorParallel, 1, kMax))
    return err;
  if (Error err = setInt("pipeline_parallel", config.pipelineParallel, 1, kMax))
    return err;
  if (fields.has("tokens")) {
    Expected<std::string> text = fields.getString("tokens");
    if (!text)
      return text.takeError();
    Expected<double> tokens = parseCount(*text);
    if (!tokens)
      return fields.error("tokens", toString(tokens.takeError()));
    config.tokens = *tokens;
    config.origins["tokens"] = fields.where("tokens");
  }
  return Error::success();
}

Error plan::parseClusterConfig(StringRef text, StringRef bufferName,
                               ClusterConfig &config) {
  static constexpr StringRef keys[] = {"gpu",   "gpus_per_node",
                                       "nodes", "price_per_gpu_hour",
                                       "mfu",   "reserve_gib"};
  YamlFile file(text, bufferName);
  Expected<const YNode *> root = file.root("cluster keys");
  if (!root)
    return root.takeError();
  Fields fields(file, keys);
  if (Error err = fields.collect(**root))
    return err;
  if (fields.has("gpu")) {
    Expected<std::string> value = fields.getString("gpu");
    if (!value)
      return value.takeError();
    config.gpu = *value;
    config.origins["gpu"] = fields.where("gpu");
  }
  for (auto [key, field] :
       {std::pair<StringRef, int64_t *>{"gpus_per_node", &config.gpusPerNode},
        {"nodes", &config.nodes}}) {
    if (!fields.has(key))
      continue;
    Expected<int64_t> value = fields.getInt(key, 1, 1 << 20);
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
  return Error::success();
}

Error plan::loadTrainConfigFile(StringRef path, TrainConfig &config) {
  auto buffer = readFile(path, "training config");
  if (!buffer)
    return buffer.takeError();
  return parseTrainConfig((*buffer)->getBuffer(), path, config);
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
