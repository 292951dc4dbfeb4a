// `llmc plan`: configs and the hardware data file, the memory/time model of
// a layout, the --fit search and the report (table and JSON).
#include "codegen/Plan.h"

#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "frontend/ConfigYaml.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelInfo.h"
#include "ir/LlmcDialect.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
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

using namespace llvm;
using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int64_t kDefaultGlobalBatch = 512;

Error makeError(const Twine &message) {
  return createStringError(std::make_error_code(std::errc::invalid_argument),
                           message.str());
}
} // namespace

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
// YAML files: one mapping of known keys, errors at file:line:col
//===----------------------------------------------------------------------===//

namespace {
/// A YAML node read out of the streaming parser (which must be walked once,
/// in document order) into a tree that can be looked at in any order.
struct YNode {
  enum class Kind { Null, Scalar, Mapping, Sequence, Alias };
  Kind kind = Kind::Null;
  std::string text; // Scalar
  SMRange range;
  std::vector<YNode> keys, values; // Mapping, in document order

  StringRef describe() const {
    switch (kind) {
    case Kind::Null:
      return "an empty value";
    case Kind::Scalar:
      return "a scalar";
    case Kind::Mapping:
      return "a mapping";
    case Kind::Sequence:
      return "a sequence";
    case Kind::Alias:
      return "an alias";
    }
    llvm_unreachable("unknown node kind");
  }
};

YNode convertNode(yaml::Node *node) {
  YNode result;
  result.range = node->getSourceRange();
  if (auto *scalar = dyn_cast<yaml::ScalarNode>(node)) {
    SmallString<32> storage;
    result.kind = YNode::Kind::Scalar;
    result.text = scalar->getValue(storage).str();
  } else if (auto *block = dyn_cast<yaml::BlockScalarNode>(node)) {
    result.kind = YNode::Kind::Scalar;
    result.text = block->getValue().str();
  } else if (auto *mapping = dyn_cast<yaml::MappingNode>(node)) {
    result.kind = YNode::Kind::Mapping;
    for (yaml::KeyValueNode &kv : *mapping) {
      YNode key;
      if (yaml::Node *k = kv.getKey())
        key = convertNode(k);
      else
        key.range = kv.getSourceRange();
      YNode value;
      if (yaml::Node *v = kv.getValue())
        value = convertNode(v);
      if (value.kind == YNode::Kind::Null)
        value.range = key.range; // an empty value has no useful extent
      result.keys.push_back(std::move(key));
      result.values.push_back(std::move(value));
    }
  } else if (auto *sequence = dyn_cast<yaml::SequenceNode>(node)) {
    result.kind = YNode::Kind::Sequence;
    for (yaml::Node &item : *sequence)
      (void)convertNode(&item);
  } else if (isa<yaml::AliasNode>(node)) {
    result.kind = YNode::Kind::Alias;
  }
  return result;
}

/// A YAML text with its SourceMgr, so errors point into the file.
class YamlFile {
public:
  YamlFile(StringRef text, StringRef bufferName)
      : buffer(MemoryBuffer::getMemBufferCopy(text, bufferName)),
        name(bufferName.str()) {
    sm.setDiagHandler(YamlDiagnostic::capture, &capture);
  }

  /// The top-level mapping. Syntax is checked in a first pass: a stream
  /// reports errors lazily, while its nodes are walked.
  Expected<const YNode *> root(StringRef what) {
    {
      yaml::Stream check(buffer->getMemBufferRef(), sm, false);
      if (!check.validate() || capture.seen)
        return makeError(capture.seen ? StringRef(capture.message).rtrim()
                                      : StringRef(name + ": error: invalid "
                                                         "YAML"));
    }
    yaml::Stream stream(buffer->getMemBufferRef(), sm, false);
    yaml::document_iterator doc = stream.begin();
    yaml::Node *node = doc != stream.end() ? doc->getRoot() : nullptr;
    SMLoc start = SMLoc::getFromPointer(buffer->getBufferStart());
    if (node)
      tree = convertNode(node);
    if (capture.seen)
      return makeError(StringRef(capture.message).rtrim());
    if (!node || tree.kind == YNode::Kind::Null)
      return error(SMRange(start, start),
                   "empty document; expected a mapping of " + what);
    if (tree.kind != YNode::Kind::Mapping)
      return error(tree.range,
                   "expected a mapping of " + what + " at the top level");
    return &tree;
  }

  Error error(SMRange range, const Twine &message) const {
    std::string text;
    raw_string_ostream os(text);
    // Printed here rather than through sm.PrintMessage, which would hand
    // the message to the scanner's diagnostic handler.
    SMDiagnostic diag = sm.GetMessage(range.Start, SourceMgr::DK_Error, message,
                                      ArrayRef<SMRange>(range));
    diag.print(/*ProgName=*/nullptr, os, /*ShowColors=*/false);
    return makeError(StringRef(text).rtrim());
  }

  std::string where(SMLoc loc) const {
    auto [line, col] = sm.getLineAndColumn(loc);
    return formatv("{0}:{1}:{2}", name, line, col).str();
  }

private:
  SourceMgr sm;
  YamlDiagnostic capture;
  std::unique_ptr<MemoryBuffer> buffer;
  YNode tree;
  std::string name;
};

/// The keys of one mapping, checked against the known ones, with typed
/// getters whose errors point at the value.
class Fields {
public:
  Fields(const YamlFile &file, ArrayRef<StringRef> known)
      : file(file), known(known) {}

  Error collect(const YNode &mapping) {
    for (auto [keyNode, value] : zip(mapping.keys, mapping.values)) {
      if (keyNode.kind != YNode::Kind::Scalar)
        return file.error(keyNode.range, "expected a scalar key");
      const std::string &name = keyNode.text;
      if (!is_contained(known, name))
        return file.error(keyNode.range, unknownKeyMessage(name, known));
      if (entries.count(name))
        return file.error(keyNode.range, "duplicate key '" + name +
                                             "' (first given at " +
                                             entries[name].where + ")");
      if (value.kind == YNode::Kind::Null)
        return file.error(keyNode.range, name + ": missing value");
      Entry &entry = entries[name];
      entry.value = &value;
      entry.where = file.where(value.range.Start);
    }
    return Error::success();
  }

  bool has(StringRef key) const { return entries.count(key.str()); }
  std::string where(StringRef key) const { return entries.at(key.str()).where; }
  const YNode &node(StringRef key) const {
    return *entries.at(key.str()).value;
  }

  Error error(StringRef key, const Twine &message) const {
    return file.error(node(key).range, key + ": " + message);
  }

  Expected<std::string> getString(StringRef key) const {
    const YNode &value = node(key);
    if (value.kind != YNode::Kind::Scalar)
      return error(key, "expected a scalar, got " + value.describe());
    return value.text;
  }

  Expected<double> getNumber(StringRef key, double min, bool minInclusive,
                             double max = HUGE_VAL) const {
    Expected<std::string> text = getString(key);
    if (!text)
      return text.takeError();
    double value = 0;
    if (StringRef(*text).trim().getAsDouble(value) || !std::isfinite(value))
      return error(key, "expected a number, got '" + *text + "'");
    if (value < min || (!minInclusive && value == min) || value > max) {
      std::string range = (minInclusive ? ">= " : "> ") + formatNumber(min);
      if (max != HUGE_VAL)
        range += " and <= " + formatNumber(max);
      return error(key, *text + " is out of range; expected a value " + range);
    }
    return value;
  }

  Expected<int64_t> getInt(StringRef key, int64_t min, int64_t max) const {
    Expected<std::string> text = getString(key);
    if (!text)
      return text.takeError();
    int64_t value = 0;
    if (StringRef(*text).trim().getAsInteger(10, value))
      return error(key, "expected an integer, got '" + *text + "'");
    if (value < min || value > max)
      return error(key, formatv("{0} is out of range; expected {1} to {2}",
                                value, min, max));
    return value;
  }

  template <typename E>
  Expected<E> getEnum(StringRef key, std::optional<E> (*parse)(StringRef),
                      StringRef allowed) const {
    Expected<std::string> text = getString(key);
    if (!text)
      return text.takeError();
    if (std::optional<E> value = parse(*text))
      return *value;
    return error(key,
                 "unknown value '" + *text + "'; expected one of " + allowed);
  }

  Expected<const YNode *> getMapping(StringRef key) const {
    const YNode &value = node(key);
    if (value.kind != YNode::Kind::Mapping)
      return error(key, "expected a mapping, got " + value.describe());
    return &value;
  }

private:
  struct Entry {
    const YNode *value = nullptr;
    std::string where;
  };

  static std::string formatNumber(double value) {
    return formatv("{0}", format("%g", value)).str();
  }

  const YamlFile &file;
  ArrayRef<StringRef> known;
  std::map<std::string, Entry> entries;
};

Expected<std::unique_ptr<MemoryBuffer>> readFile(StringRef path,
                                                 StringRef what) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> file = MemoryBuffer::getFile(path);
  if (std::error_code ec = file.getError())
    return createStringError(ec, "cannot read " + what + " '" + path +
                                     "': " + ec.message());
  return std::move(*file);
}
} // namespace

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

//===----------------------------------------------------------------------===//
// Hardware data file
//===----------------------------------------------------------------------===//

const GpuSpec *HardwareTable::find(StringRef name) const {
  for (const GpuSpec &gpu : gpus)
    if (StringRef(gpu.name).equals_insensitive(name))
      return &gpu;
  return nullptr;
}

Expected<HardwareTable> plan::parseHardware(StringRef text,
                                            StringRef bufferName) {
  static constexpr StringRef gpuKeys[] = {"description", "memory_gib",
                                          "hbm_tbps",    "nvlink_gbps",
                                          "ib_gbps",     "tflops"};
  static const std::array<StringRef, kNumPrecisions> precisionKeys = [] {
    std::array<StringRef, kNumPrecisions> names;
    for (unsigned i = 0; i < kNumPrecisions; ++i)
      names[i] = stringifyPrecision(static_cast<Precision>(i));
    return names;
  }();
  YamlFile file(text, bufferName);
  Expected<const YNode *> root =
      file.root("GPU names to their specs (memory_gib, tflops, ...)");
  if (!root)
    return root.takeError();
  HardwareTable table;
  table.path = bufferName.str();
  for (auto [keyNode, spec] : zip((*root)->keys, (*root)->values)) {
    if (keyNode.kind != YNode::Kind::Scalar)
      return file.error(keyNode.range, "expected a GPU name");
    GpuSpec gpu;
    gpu.name = keyNode.text;
    gpu.location = file.where(keyNode.range.Start);
    if (table.find(gpu.name))
      return file.error(keyNode.range,
                        "GPU '" + gpu.name + "' is defined twice");
    if (spec.kind != YNode::Kind::Mapping)
      return file.error(keyNode.range,
                        gpu.name + ": expected a mapping of " +
                            join(ArrayRef<StringRef>(gpuKeys), ", "));
    Fields fields(file, gpuKeys);
    if (Error err = fields.collect(spec))
      return err;
    for (StringRef key : gpuKeys)
      if (!fields.has(key) && key != "description")
        return file.error(keyNode.range,
                          gpu.name + ": missing key '" + key + "'");
    if (fields.has("description")) {
      Expected<std::string> value = fields.getString("description");
      if (!value)
        return value.takeError();
      gpu.description = *value;
    }
    struct NumberKey {
      StringRef key;
      double *field;
    } numbers[] = {{"memory_gib", &gpu.memoryGiB},
                   {"hbm_tbps", &gpu.hbmTBps},
                   {"nvlink_gbps", &gpu.nvlinkGBps},
                   {"ib_gbps", &gpu.ibGBps}};
    for (const NumberKey &n : numbers) {
      Expected<double> value = fields.getNumber(n.key, 0, false);
      if (!value)
        return value.takeError();
      *n.field = *value;
    }
    Expected<const YNode *> tflops = fields.getMapping("tflops");
    if (!tflops)
      return tflops.takeError();
    Fields peaks(file, precisionKeys);
    if (Error err = peaks.collect(**tflops))
      return err;
    bool any = false;
    for (unsigned i = 0; i < kNumPrecisions; ++i) {
      if (!peaks.has(precisionKeys[i]))
        continue;
      Expected<double> value = peaks.getNumber(precisionKeys[i], 0, false);
      if (!value)
        return value.takeError();
      gpu.peakTflops[i] = *value;
      any = true;
    }
    if (!any)
      return fields.error("tflops", "give the dense peak of at least one of " +
                                        join(precisionKeys, ", "));
    table.gpus.push_back(std::move(gpu));
  }
  return table;
}

Expected<HardwareTable> plan::loadHardwareFile(StringRef path) {
  auto buffer = readFile(path, "hardware data file");
  if (!buffer)
    return buffer.takeError();
  return parseHardware((*buffer)->getBuffer(), path);
}

std::string plan::getDefaultHardwarePath() {
  if (std::optional<std::string> env = sys::Process::GetEnv("LLMC_HARDWARE"))
    if (!env->empty())
      return *env;
  return LLMC_DEFAULT_HARDWARE_FILE;
}

Expected<GpuSpec> plan::lookupGpu(const HardwareTable &table, StringRef name) {
  if (const GpuSpec *gpu = table.find(name))
    return *gpu;
  std::vector<std::string> known;
  for (const GpuSpec &gpu : table.gpus)
    known.push_back(gpu.name);
  return makeError("unknown GPU '" + name +
                   "': add it to the hardware data "
                   "file " +
                   table.path + " (known: " + join(known, ", ") + ")");
}

//===----------------------------------------------------------------------===//
// The model, from its IR
//===----------------------------------------------------------------------===//

namespace {
/// Puts each parameter where a layout holds it, from its name and shape.
/// Tensor parallelism (Megatron) splits every matrix but the position
/// embedding (the token embedding and classifier over the vocabulary) and
/// the biases of column-parallel layers (whose length is not n_embd); it
/// replicates norms and the biases of row-parallel layers.
Error placeParameters(const ModelInfo &info, PlanModel &model) {
  const ModelConfig &config = model.config;
  std::map<int64_t, std::pair<int64_t, int64_t>> blocks; // split, replicated
  for (const ParameterInfo &param : info.parameters) {
    StringRef name = param.name;
    bool split = param.type.getRank() >= 2
                     ? name != "wpe"
                     : param.type.getDimSize(0) != config.nEmbd;
    if (name.consume_front("h.")) {
      int64_t index = 0;
      if (name.consumeInteger(10, index) || !name.starts_with("."))
        return makeError("cannot place parameter '" + param.name +
                         "': expected h.<block>.<name>");
      (split ? blocks[index].first : blocks[index].second) += param.numElements;
      continue;
    }
    if (name == "wte" || name == "wpe") {
      (split ? model.firstSplit : model.firstReplicated) += param.numElements;
      if (name == "wte" && config.tieEmbeddings)
        model.tiedEmbedding = param.numElements;
      continue;
    }
    (split ? model.lastSplit : model.lastReplicated) += param.numElements;
  }
  model.numParameters = info.numParameters;
  model.numBlocks = static_cast<int64_t>(blocks.size());
  if (blocks.empty() || model.numBlocks != config.nLayer)
    return makeError(formatv("found {0} transformer blocks (parameters "
                             "h.<i>.*) in the IR of '{1}', its config says "
                             "n_layer {2}",
                             blocks.size(), model.input, config.nLayer));
  // Every block of these models has the same shapes; a block that differs
  // would make per-stage counts wrong, so the largest is used.
  for (const auto &entry : blocks) {
    model.blockSplit = std::max(model.blockSplit, entry.second.first);
    model.blockReplicated =
        std::max(model.blockReplicated, entry.second.second);
  }
  return Error::success();
}

/// Diagnostics of MLIR collected into a string instead of stderr.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext &context)
      : handler(&context, [this](Diagnostic &diag) {
          if (!text.empty())
            text += "\n";
          std::string loc;
          raw_string_ostream os(loc);
          diag.getLocation().print(os);
          text += loc + ": " + diag.str();
          return success();
        }) {}
  std::string text;

private:
  ScopedDiagnosticHandler handler;
};

/// The config recorded in a module's `llmc.model` attribute.
Expected<ModelConfig> configFromModule(ModuleOp module, StringRef path) {
  auto dict = module->getAttrOfType<DictionaryAttr>("llmc.model");
  auto missing = [&](StringRef key) {
    return makeError(path + ": the module has no llmc.model attribute with '" +
                     key +
                     "' (llmc emit-model writes it); llmc plan reads "
                     "the model's layers, heads and widths from it");
  };
  if (!dict)
    return missing("n_layer");
  ModelConfig config;
  for (auto [key, field] :
       {std::pair<StringRef, int64_t *>{"n_layer", &config.nLayer},
        {"n_head", &config.nHead},
        {"n_embd", &config.nEmbd},
        {"seq_len", &config.seqLen},
        {"vocab_size", &config.vocabSize},
        {"ffn_hidden", &config.ffnHidden}}) {
    auto attr = dict.getAs<IntegerAttr>(key);
    if (!attr || attr.getInt() < 1)
      return missing(key);
    *field = attr.getInt();
  }
  if (auto name = dict.getAs<StringAttr>("name"))
    config.name = name.str();
  if (auto act = dict.getAs<StringAttr>("activation"))
    for (Activation a : {Activation::Gelu, Activation::GeluExact,
                         Activation::Relu, Activation::SwiGlu})
      if (stringifyActivation(a) == act.getValue())
        config.activation = a;
  if (auto norm = dict.getAs<StringAttr>("norm"))
    config.norm =
        norm.getValue() == "rmsnorm" ? Norm::RmsNorm : Norm::LayerNorm;
  if (auto pos = dict.getAs<StringAttr>("position"))
    config.position =
        pos.getValue() == "rope" ? Position::Rope : Position::Learned;
  if (auto tie = dict.getAs<BoolAttr>("tie_embeddings"))
    config.tieEmbeddings = tie.getValue();
  if (auto bias = dict.getAs<BoolAttr>("bias"))
    config.bias = bias.getValue();
  if (auto dropout = dict.getAs<FloatAttr>("dropout"))
    config.dropout = dropout.getValueAsDouble();
  if (config.nEmbd % config.nHead)
    return makeError(path + ": llmc.model has n_embd " + Twine(config.nEmbd) +
                     " not divisible by n_head " + Twine(config.nHead));
  return config;
}

void registerPlanDialects(MLIRContext &context) {
  context.loadDialect<LlmcDialect, func::FuncDialect>();
}

/// Parses model.mlir text and checks it is a legal llmc model.
Expected<OwningOpRef<ModuleOp>> parseModel(MLIRContext &context, StringRef text,
                                           StringRef path) {
  registerPlanDialects(context);
  auto sourceMgr = std::make_shared<SourceMgr>();
  sourceMgr->AddNewSourceBuffer(MemoryBuffer::getMemBufferCopy(text, path),
                                SMLoc());
  std::string diagnostics;
  raw_string_ostream os(diagnostics);
  SourceMgrDiagnosticHandler handler(*sourceMgr, &context, os);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&context));
  if (module) {
    PassManager pm(&context);
    pm.addPass(createVerifyLegalityPass());
    if (succeeded(pm.run(*module)))
      return module;
  }
  return makeError(StringRef(diagnostics).rtrim());
}
} // namespace

Expected<PlanModel> plan::analyzeModel(MLIRContext &context,
                                       const ModelConfig &config) {
  // Parameter shapes do not depend on the token shape; one token builds
  // the smallest IR.
  auto module = buildForwardModule(context, config, {1, 1});
  if (!module)
    return module.takeError();
  PlanModel model;
  model.config = config;
  model.input = config.name;
  ModelInfo info = getModelInfo(**module);
  if (Error err = placeParameters(info, model))
    return err;
  return model;
}

Expected<PlanModel> plan::loadPlanModel(MLIRContext &context, StringRef input) {
  registerPlanDialects(context);
  if (input.ends_with(".mlir")) {
    auto buffer = readFile(input, "model");
    if (!buffer)
      return buffer.takeError();
    auto module = parseModel(context, (*buffer)->getBuffer(), input);
    if (!module)
      return module.takeError();
    Expected<ModelConfig> config = configFromModule(**module, input);
    if (!config)
      return config.takeError();
    PlanModel model;
    model.config = *config;
    model.input = input.str();
    model.irSource = "IR of " + sys::path::filename(input).str();
    ModelInfo info = getModelInfo(**module);
    if (Error err = placeParameters(info, model))
      return err;
    model.mlirBatch = info.tokens.getDimSize(0);
    model.mlirSeqLen = info.tokens.getDimSize(1);
    model.mlirText = (*buffer)->getBuffer().str();
    return model;
  }
  ModelConfig config;
  std::string how;
  if (sys::fs::exists(input) || input.ends_with(".yaml") ||
      input.ends_with(".yml")) {
    Expected<ModelConfig> loaded = loadModelConfigFile(input);
    if (!loaded)
      return loaded.takeError();
    config = *loaded;
    how = "config " + sys::path::filename(input).str();
  } else if (std::optional<ModelConfig> preset = getModelPreset(input)) {
    config = *preset;
    how = "preset " + input.str();
  } else {
    return makeError("'" + input +
                     "' is neither a model.mlir, a config file nor a preset "
                     "(presets: " +
                     join(getModelPresetNames(), ", ") + ")");
  }
  Expected<PlanModel> model = analyzeModel(context, config);
  if (!model)
    return model.takeError();
  model->input = input.str();
  model->irSource = "IR of @forward built from " + how;
  return model;
}

Expected<ForwardPlan> plan::planForward(MLIRContext &context,
                                        const PlanModel &model, int64_t batch,
                                        int64_t seqLen) {
  registerPlanDialects(context);
  OwningOpRef<ModuleOp> module;
  ForwardPlan result;
  result.batch = batch;
  result.seqLen = seqLen;
  if (!model.mlirText.empty() && batch == model.mlirBatch &&
      seqLen == model.mlirSeqLen) {
    auto parsed = parseModel(context, model.mlirText, model.input);
    if (!parsed)
      return parsed.takeError();
    module = std::move(*parsed);
    result.source = "IR: memory plan of " +
                    sys::path::filename(model.input).str() + "'s @forward";
  } else {
    auto built = buildForwardModule(context, model.config, {batch, seqLen});
    if (!built)
      return built.takeError();
    module = std::move(*built);
    result.source = "IR: memory plan of the compiled @forward";
    if (!model.mlirText.empty())
      result.source += " (rebuilt from its llmc.model at this shape)";
  }
  DiagnosticCollector diagnostics(context);
  PassManager pm(&context);
  buildCompilePipeline(pm);
  if (failed(pm.run(*module)))
    return makeError("compiling the forward pass of '" + model.input +
                     "' failed: " + diagnostics.text);
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  FailureOr<::llmc::kir::Program> program = lowerToProgram(forward);
  if (failed(program))
    return makeError("lowering the forward pass of '" + model.input +
                     "' failed: " + diagnostics.text);
  result.arenaBytes = program->arenaBytes;
  result.flops = ::llmc::kir::countFlops(*program);
  return result;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

namespace {
bool isHalf(Precision p) {
  return p != Precision::Fp32 && p != Precision::Tf32;
}

/// Bytes of one stored activation element: 16-bit for mixed precision (fp8
/// training keeps activations in bf16 outside its GEMMs), else fp32.
double activationElementBytes(Precision p) { return isHalf(p) ? 2 : 4; }
} // namespace

StateBytes plan::getStateBytes(Precision precision, Optimizer optimizer,
                               bool fp32Gradients) {
  StateBytes bytes;
  bool half = isHalf(precision);
  bytes.weights = half ? 2 : 4;
  bytes.gradients = half && !fp32Gradients ? 2 : 4;
  bytes.master = half ? 4 : 0; // fp32 master weights the optimizer updates
  switch (optimizer) {
  case Optimizer::AdamW:
    bytes.optimizer = 8; // m and v in fp32
    break;
  case Optimizer::AdamW8bit:
    // m and v in 8 bits, with one fp32 absmax per block of 2048 values
    // for each (Dettmers et al. 2022, block-wise quantization).
    bytes.optimizer = 2 + 2 * 4.0 / 2048;
    break;
  case Optimizer::Sgd:
    bytes.optimizer = 4; // momentum in fp32
    break;
  }
  return bytes;
}

StateBytes plan::shardStates(const StateBytes &perParameter, double parameters,
                             int zero, int64_t dp) {
  // ZeRO (Rajbhandari et al. 2020): stage 1 partitions the optimizer states
  // (master weights included), stage 2 also the gradients, stage 3 also
  // the weights, each over the data-parallel ranks.
  StateBytes result;
  double d = static_cast<double>(dp);
  result.weights = parameters * perParameter.weights / (zero >= 3 ? d : 1);
  result.gradients = parameters * perParameter.gradients / (zero >= 2 ? d : 1);
  result.master = parameters * perParameter.master / (zero >= 1 ? d : 1);
  result.optimizer = parameters * perParameter.optimizer / (zero >= 1 ? d : 1);
  return result;
}

double BlockActivations::stored(Remat remat) const {
  switch (remat) {
  case Remat::None:
    return norms + attention + attentionCore + mlp;
  case Remat::Selective:
    return norms + attention + mlp;
  case Remat::Full:
    return blockInput;
  }
  llvm_unreachable("unknown remat policy");
}

BlockActivations plan::getBlockActivations(const ModelConfig &config,
                                           int64_t batch, int64_t seqLen,
                                           int64_t tp, Precision precision) {
  double e = activationElementBytes(precision);
  double mask = config.dropout > 0 ? 1 : 0; // one byte per dropout mask
  double s = static_cast<double>(seqLen), b = static_cast<double>(batch);
  double h = static_cast<double>(config.nEmbd);
  double f = static_cast<double>(config.ffnHidden);
  double a = static_cast<double>(config.nHead);
  double sbh = s * b * h, sbf = s * b * f, as2b = a * s * s * b;
  // With sequence parallelism every term is split over the tensor-parallel
  // ranks (Korthikanti et al. sec. 4.2.2).
  double t = static_cast<double>(tp);
  BlockActivations act;
  // Inputs of the two norms: 2sbh each in 16 bits.
  act.norms = 2 * e * sbh / t;
  // QKV input 2sbh, Q and K 4sbh, V 2sbh, projection input 2sbh and the
  // projection's dropout mask sbh: 11sbh in 16 bits.
  act.attention = (5 * e + mask) * sbh / t;
  // Softmax output 2as^2b; with attention dropout also its mask as^2b and
  // its output 2as^2b: 5as^2b.
  act.attentionCore = (e + mask * (1 + e)) * as2b / t;
  // MLP input 2sbh and dropout mask sbh; GELU keeps its input and output
  // (8sbh each for f = 4h: 19sbh in all), ReLU its output only, SwiGLU the
  // gate and up projections and their product.
  double hidden = config.activation == Activation::SwiGlu ? 3
                  : config.activation == Activation::Relu ? 1
                                                          : 2;
  act.mlp = ((e + mask) * sbh + hidden * e * sbf) / t;
  // Full recompute keeps each block's input only: 2sbh.
  act.blockInput = e * sbh / t;
  return act;
}

double plan::modelFlopsPerToken(const PlanModel &model, int64_t seqLen) {
  const ModelConfig &c = model.config;
  // Parameters in matmuls: every block, and the classifier (V x h) whether
  // tied or not; embeddings are lookups, not matmuls.
  double matmul = static_cast<double>(model.numBlocks) *
                      static_cast<double>(model.blockParameters()) +
                  static_cast<double>(c.vocabSize) * c.nEmbd;
  return 6 * matmul + 12.0 * c.nLayer * c.nEmbd * seqLen;
}

namespace {
std::string originOf(const Origins &origins, StringRef key, StringRef flag) {
  auto it = origins.find(key.str());
  return it != origins.end() ? it->second : ("--" + flag).str();
}

/// "train.yaml:3:18: error: key: message" for a value from a file, or
/// "--flag: message" for a flag or a default.
Error layoutError(const Origins &origins, StringRef key, StringRef flag,
                  const Twine &message) {
  std::string origin = originOf(origins, key, flag);
  if (StringRef(origin).starts_with("--"))
    return makeError(origin + ": " + message);
  return makeError(origin + ": error: " + key + ": " + message);
}

/// How a report names the origin of a configured value.
std::string sourceOf(const Origins &origins, StringRef key, StringRef file,
                     StringRef fallback) {
  auto it = origins.find(key.str());
  if (it == origins.end())
    return fallback.str();
  if (StringRef(it->second).starts_with("--"))
    return it->second;
  return file.str();
}

int64_t globalBatchOf(const TrainConfig &train) {
  return train.globalBatch ? train.globalBatch : kDefaultGlobalBatch;
}
} // namespace

Layout plan::getConfiguredLayout(const TrainConfig &train,
                                 const ClusterConfig &cluster) {
  Layout layout;
  layout.tp = train.tensorParallel;
  layout.pp = train.pipelineParallel;
  layout.dp = std::max<int64_t>(1, cluster.numGpus() / (layout.tp * layout.pp));
  layout.zero = train.zero;
  layout.microBatch = train.microBatch;
  layout.remat = train.remat;
  return layout;
}

Error plan::validateLayout(const PlanModel &model, const TrainConfig &train,
                           const ClusterConfig &cluster, const Layout &layout) {
  const ModelConfig &c = model.config;
  const Origins &o = train.origins;
  int64_t seqLen = train.seqLen ? train.seqLen : c.seqLen;
  if (seqLen > c.seqLen)
    return layoutError(o, "seq_len", "seq-len",
                       formatv("{0} is longer than the model's seq_len {1}",
                               seqLen, c.seqLen));
  if (c.nHead % layout.tp)
    return layoutError(o, "tensor_parallel", "tp",
                       formatv("{0} does not divide n_head ({1}) of model "
                               "'{2}': each rank needs whole heads",
                               layout.tp, c.nHead, c.name));
  if (c.ffnHidden % layout.tp)
    return layoutError(o, "tensor_parallel", "tp",
                       formatv("{0} does not divide the MLP width "
                               "ffn_hidden ({1}) of model '{2}'",
                               layout.tp, c.ffnHidden, c.name));
  if (c.nLayer % layout.pp)
    return layoutError(o, "pipeline_parallel", "pp",
                       formatv("{0} does not divide n_layer ({1}) of model "
                               "'{2}' into equal stages",
                               layout.pp, c.nLayer, c.name));
  int64_t gpus = cluster.numGpus();
  if (gpus % (layout.tp * layout.pp))
    return layoutError(
        o, layout.tp > 1 ? "tensor_parallel" : "pipeline_parallel",
        layout.tp > 1 ? "tp" : "pp",
        formatv("tensor_parallel {0} x pipeline_parallel {1} = {2} does not "
                "divide the cluster's {3} GPUs ({4} per node x {5} nodes)",
                layout.tp, layout.pp, layout.tp * layout.pp, gpus,
                cluster.gpusPerNode, cluster.nodes));
  if (layout.zero >= 2 && layout.pp > 1)
    return layoutError(o, "zero", "zero",
                       formatv("ZeRO-{0} shards gradients across the "
                               "micro-batches a pipeline accumulates; use "
                               "ZeRO-0 or 1 with pipeline_parallel {1}",
                               layout.zero, layout.pp));
  int64_t global = globalBatchOf(train);
  if (global % (layout.microBatch * layout.dp))
    return layoutError(
        o, train.globalBatch ? "global_batch" : "micro_batch",
        train.globalBatch ? "global-batch" : "micro-batch",
        formatv("global batch {0} is not a multiple of micro-batch x "
                "data-parallel size = {1} x {2} = {3}",
                global, layout.microBatch, layout.dp,
                layout.microBatch * layout.dp));
  return Error::success();
}

namespace {
/// The memory of pipeline stage `stage` under `layout`.
DeviceMemory stageMemory(const PlanModel &model, const TrainConfig &train,
                         const ClusterConfig &cluster, const Layout &layout,
                         const BlockActivations &block, double extraFirst,
                         double extraLast, int64_t microBatches, int64_t stage,
                         Remat remat) {
  double t = static_cast<double>(layout.tp);
  int64_t blocksPerStage = model.config.nLayer / layout.pp;
  bool first = stage == 0, last = stage == layout.pp - 1;
  DeviceMemory memory;
  memory.stage = stage;
  double blockParams = model.blockSplit / t + model.blockReplicated;
  memory.parameters = blocksPerStage * blockParams;
  if (first)
    memory.parameters += model.firstSplit / t + model.firstReplicated;
  if (last) {
    memory.parameters += model.lastSplit / t + model.lastReplicated;
    // A tied classifier on the last of several stages needs its own copy
    // of the token embedding (Megatron all-reduces the two gradients).
    if (layout.pp > 1)
      memory.parameters += model.tiedEmbedding / t;
  }
  StateBytes perParameter =
      getStateBytes(train.precision, train.optimizer, train.fp32Gradients);
  memory.states =
      shardStates(perParameter, memory.parameters, layout.zero, layout.dp);
  // 1F1B: stage k has pp - k micro-batches in flight after warm-up, so the
  // first stage holds the activations of pp of them (Narayanan et al. 2021).
  memory.microBatchesInFlight =
      std::min<int64_t>(layout.pp - stage, microBatches);
  double inFlight = static_cast<double>(memory.microBatchesInFlight);
  memory.activations = blocksPerStage * block.stored(remat) * inFlight;
  if (first)
    memory.activations += extraFirst * inFlight;
  if (last)
    memory.activations += extraLast;
  // Backward of one block holds the gradients of its activations (or, with
  // full recompute, its recomputed activations): about one block's worth.
  // ZeRO-3 gathers the weights of the current and the prefetched block.
  memory.workspace = block.stored(Remat::None);
  if (layout.zero == 3)
    memory.workspace += 2 * blockParams * perParameter.weights;
  memory.reserve = cluster.reserveGiB * kGiB;
  return memory;
}

DeviceMemory deviceMemory(const PlanModel &model, const TrainConfig &train,
                          const ClusterConfig &cluster, const Layout &layout,
                          const BlockActivations &block, double extraFirst,
                          double extraLast, int64_t microBatches, Remat remat) {
  DeviceMemory first =
      stageMemory(model, train, cluster, layout, block, extraFirst, extraLast,
                  microBatches, 0, remat);
  if (layout.pp == 1)
    return first;
  DeviceMemory last =
      stageMemory(model, train, cluster, layout, block, extraFirst, extraLast,
                  microBatches, layout.pp - 1, remat);
  return last.total() > first.total() ? last : first;
}
} // namespace

Estimate plan::estimate(const PlanModel &model, const TrainConfig &train,
                        const ClusterConfig &cluster, const GpuSpec *gpu,
                        const Layout &layout) {
  const ModelConfig &c = model.config;
  Estimate est;
  est.layout = layout;
  est.seqLen = train.seqLen ? train.seqLen : c.seqLen;
  est.globalBatch = globalBatchOf(train);
  est.microBatchesPerStep = est.globalBatch / (layout.microBatch * layout.dp);
  int64_t m = est.microBatchesPerStep;
  double s = static_cast<double>(est.seqLen);
  double b = static_cast<double>(layout.microBatch);
  double t = static_cast<double>(layout.tp);
  double e = activationElementBytes(train.precision);
  double sbh = s * b * c.nEmbd;

  // Activations: blocks by formula, plus the embedding's dropout mask on
  // the first stage and, on the last, the final norm's and classifier's
  // inputs and the fp32 logits the loss keeps (Korthikanti et al.:
  // 4sbh/t (1 + v/h) in 16 bits).
  est.block = getBlockActivations(c, layout.microBatch, est.seqLen, layout.tp,
                                  train.precision);
  est.extraFirst = (c.dropout > 0 ? 1 : 0) * sbh / t;
  est.extraLast = (2 * e * sbh + 4 * s * b * c.vocabSize) / t;
  est.memory = deviceMemory(model, train, cluster, layout, est.block,
                            est.extraFirst, est.extraLast, m, layout.remat);
  for (Remat r : {Remat::None, Remat::Selective, Remat::Full})
    est.activationsByRemat[static_cast<unsigned>(r)] =
        deviceMemory(model, train, cluster, layout, est.block, est.extraFirst,
                     est.extraLast, m, r)
            .activations;

  // FLOPs and tokens.
  est.modelFlopsPerToken = modelFlopsPerToken(model, est.seqLen);
  double attentionCore = 4.0 * c.nLayer * c.nEmbd * s; // QK^T and AV
  if (layout.remat == Remat::Selective)
    est.recomputeFlopsPerToken = attentionCore;
  else if (layout.remat == Remat::Full)
    est.recomputeFlopsPerToken =
        2.0 * model.numBlocks * model.blockParameters() + attentionCore;
  est.tokensFromChinchilla = train.tokens == 0;
  est.tokens =
      train.tokens ? train.tokens : chinchillaTokens(model.numParameters);
  est.trainingFlops = est.modelFlopsPerToken * est.tokens;
  double tokensPerStep = static_cast<double>(est.globalBatch) * s;
  est.steps = std::ceil(est.tokens / tokensPerStep);
  if (!gpu)
    return est;

  // Time of one step on each device.
  est.hasGpu = true;
  double gpus = static_cast<double>(cluster.numGpus());
  double rate = gpu->peakFlops(train.precision) * cluster.mfu;
  StepTime &step = est.step;
  step.compute = tokensPerStep * est.modelFlopsPerToken / (gpus * rate);
  step.recompute = tokensPerStep * est.recomputeFlopsPerToken / (gpus * rate);
  double work = step.compute + step.recompute;
  // 1F1B fill and drain: (pp - 1) micro-batch slots of idle time per step.
  if (layout.pp > 1)
    step.bubble = work * (layout.pp - 1) / m;
  // A ring moves 2(n-1)/n of the data per GPU for an all-reduce and half
  // that for a reduce-scatter or all-gather; datasheets give NVLink in
  // both directions, a ring uses one.
  double nvlink = gpu->nvlinkGBps / 2 * 1e9, ib = gpu->ibGBps * 1e9;
  int64_t blocksPerStage = c.nLayer / layout.pp;
  if (layout.tp > 1) {
    // Per block two all-reduces forward and two backward (as reduce-
    // scatter/all-gather pairs with sequence parallelism), two more when
    // the forward is recomputed.
    double count = layout.remat == Remat::Full ? 6 : 4;
    double bandwidth = layout.tp <= cluster.gpusPerNode ? nvlink : ib;
    step.tpComm =
        blocksPerStage * m * count * 2 * (t - 1) / t * e * sbh / bandwidth;
  }
  if (layout.pp > 1) {
    // Each micro-batch's activations forward and their gradients backward.
    double bandwidth =
        layout.tp * layout.pp <= cluster.gpusPerNode ? nvlink : ib;
    step.ppComm = 2.0 * m * e * sbh / t / bandwidth;
  }
  if (layout.dp > 1) {
    double d = static_cast<double>(layout.dp), frac = (d - 1) / d;
    double bandwidth = cluster.nodes > 1 ? ib : nvlink;
    StateBytes perParameter =
        getStateBytes(train.precision, train.optimizer, train.fp32Gradients);
    double grads = est.memory.parameters * perParameter.gradients;
    double weights = est.memory.parameters * perParameter.weights;
    double micro = work / m;
    double backward = micro * 2 / 3; // backward is 2/3 of the FLOPs
    switch (layout.zero) {
    case 0: // all-reduce in the last micro-batch's backward
      step.dpComm = std::max(0.0, 2 * frac * grads / bandwidth - backward);
      break;
    case 1: // reduce-scatter in backward, all-gather of weights after
      step.dpComm = std::max(0.0, frac * grads / bandwidth - backward) +
                    frac * weights / bandwidth;
      break;
    case 2: // reduce-scatter in every micro-batch's backward
      step.dpComm = m * std::max(0.0, frac * grads / bandwidth - backward) +
                    frac * weights / bandwidth;
      break;
    default: // ZeRO-3: also gathers weights forward and backward
      step.dpComm =
          m * std::max(0.0, frac * (grads + 2 * weights) / bandwidth - micro);
      break;
    }
  }
  // The optimizer update streams its states through HBM once per step:
  // reads the gradient, reads and writes master weights and moments, and
  // writes the weights the next forward uses. ZeRO-1+ updates 1/dp of them.
  {
    StateBytes perParameter =
        getStateBytes(train.precision, train.optimizer, train.fp32Gradients);
    double updated = est.memory.parameters / (layout.zero >= 1 ? layout.dp : 1);
    double bytes = perParameter.gradients +
                   2 * (perParameter.master + perParameter.optimizer) +
                   perParameter.weights * (perParameter.master ? 1 : 2);
    step.optimizer = updated * bytes / (gpu->hbmTBps * 1e12);
  }
  est.seconds = est.steps * step.total();
  est.cost = est.seconds / 3600 * gpus * cluster.pricePerGpuHour;
  est.achievedMfu = tokensPerStep * est.modelFlopsPerToken /
                    (step.total() * gpus * gpu->peakFlops(train.precision));
  return est;
}

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

FitResult plan::searchFit(const PlanModel &model, const TrainConfig &train,
                          const ClusterConfig &cluster, const GpuSpec &gpu,
                          double budgetBytes) {
  FitResult result;
  result.budgetBytes = budgetBytes;
  const ModelConfig &c = model.config;
  int64_t gpus = cluster.numGpus();
  int64_t global = globalBatchOf(train);
  for (int64_t tp = 1; tp <= gpus; tp *= 2) {
    if (gpus % tp || c.nHead % tp || c.ffnHidden % tp)
      continue;
    for (int64_t pp = 1; pp <= c.nLayer && tp * pp <= gpus; ++pp) {
      if (c.nLayer % pp || gpus % (tp * pp))
        continue;
      int64_t dp = gpus / (tp * pp);
      for (int zero = 0; zero <= 3; ++zero) {
        for (int64_t micro = 1; micro * dp <= global; micro *= 2) {
          for (Remat remat : {Remat::None, Remat::Selective, Remat::Full}) {
            ++result.candidates;
            Layout layout{tp, pp, dp, zero, micro, remat};
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
  if (bytes >= kGiB)
    return formatv("{0:F2} GiB", bytes / kGiB).str();
  if (bytes >= 1024.0 * 1024)
    return formatv("{0:F2} MiB", bytes / (1024.0 * 1024)).str();
  if (bytes >= 1024.0)
    return formatv("{0:F2} KiB", bytes / 1024.0).str();
  return formatv("{0:F0} B", bytes).str();
}

std::string formatSeconds(double s) {
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
  if (q.unit == "FLOP/s")
    return formatv("{0:F1} TFLOP/s", q.value / 1e12).str();
  if (q.unit == "GPU-hours")
    return withCommas(q.value) + " GPU-h";
  if (q.unit == "tokens")
    return humanCount(q.value) + " tokens";
  if (q.unit == "parameters")
    return withCommas(q.value);
  return withCommas(q.value) + " " + q.unit;
}

std::string precisionLabel(const TrainConfig &train) {
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
                                    const TrainConfig &train,
                                    const ClusterConfig &cluster,
                                    const Layout &base) {
  std::vector<Layout> layouts;
  auto add = [&](int64_t tp, int64_t pp, int zero) {
    int64_t gpus = cluster.numGpus();
    if (gpus % (tp * pp))
      return;
    Layout l = base;
    l.tp = tp;
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
} // namespace

Expected<Report> plan::buildReport(const PlanRequest &request) {
  const PlanModel &model = *request.model;
  const TrainConfig &train = request.train;
  const ClusterConfig &cluster = request.cluster;
  const ModelConfig &c = model.config;
  const GpuSpec *gpu = request.gpu;
  Report report;

  Layout layout = getConfiguredLayout(train, cluster);
  if (Error err = validateLayout(model, train, cluster, layout))
    return err;
  if (gpu && gpu->peakFlops(train.precision) == 0)
    return layoutError(train.origins, "precision", "precision",
                       formatv("GPU '{0}' has no {1} peak in {2} ({3}); "
                               "choose another precision or add "
                               "tflops.{1} to its entry",
                               gpu->name, stringifyPrecision(train.precision),
                               request.hardwarePath, gpu->location));
  Estimate est = estimate(model, train, cluster, gpu, layout);
  std::string data =
      "data file " + sys::path::filename(request.hardwarePath).str();

  // Header.
  report.facts["model"] = c.name;
  report.facts["model_input"] = model.input;
  report.facts["ir"] = model.irSource;
  report.facts["precision"] = stringifyPrecision(train.precision).str();
  report.facts["optimizer"] = stringifyOptimizer(train.optimizer).str();
  report.facts["remat"] = stringifyRemat(train.remat).str();
  report.facts["layout"] = layoutLabel(layout);
  report.header.push_back(formatv("model: {0}, {1} parameters ({2})", c.name,
                                  withCommas(model.numParameters),
                                  model.irSource));
  if (gpu) {
    report.facts["gpu"] = gpu->name;
    report.header.push_back(formatv(
        "cluster: {0} x {1} ({2}), {3} node(s) x {4} GPUs; {5:F1} GiB each "
        "({6})",
        cluster.numGpus(), gpu->name, gpu->description, cluster.nodes,
        cluster.gpusPerNode, gpu->memoryGiB, data));
  } else {
    report.header.push_back(
        formatv("cluster: {0} device(s), no GPU given (--gpu or --cluster for "
                "capacity, time and cost)",
                cluster.numGpus()));
  }
  StateBytes perParameter =
      getStateBytes(train.precision, train.optimizer, train.fp32Gradients);
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
  report.header.push_back("layout: " + layoutLabel(layout) +
                          (layout.tp > 1 ? ", sequence parallel" : ""));

  // Memory per device.
  const DeviceMemory &mem = est.memory;
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
  stateRow("gradients",
           perParameter.gradients == 4 ? "gradients, fp32"
                                       : "gradients, 16-bit",
           perParameter.gradients, mem.states.gradients, layout.zero >= 2);
  if (half)
    stateRow("master_weights", "master weights, fp32", perParameter.master,
             mem.states.master, layout.zero >= 1);
  stateRow("optimizer_states",
           train.optimizer == Optimizer::AdamW       ? "AdamW m and v, fp32"
           : train.optimizer == Optimizer::AdamW8bit ? "AdamW m and v, 8-bit"
                                                     : "SGD momentum, fp32",
           perParameter.optimizer, mem.states.optimizer, layout.zero >= 1);
  std::string korthikanti = "formula: Korthikanti et al. 2022";
  memory.rows.push_back(
      {"activations",
       formatv("activations, remat {0} ({1} micro-batch{2} in flight)",
               stringifyRemat(layout.remat), mem.microBatchesInFlight,
               mem.microBatchesInFlight > 1 ? "es" : "")
           .str(),
       mem.activations, "bytes", korthikanti});
  memory.rows.push_back({"workspace",
                         layout.zero == 3
                             ? "workspace (a block's backward, 2 ZeRO-3 blocks)"
                             : "workspace (a block's backward)",
                         mem.workspace, "bytes", "formula"});
  memory.rows.push_back({"reserve",
                         "reserve (CUDA context, library workspaces)",
                         mem.reserve, "bytes",
                         sourceOf(cluster.origins, "reserve_gib",
                                  "cluster config", "default 1 GiB")});
  memory.rows.push_back({"total", "total", mem.total(), "bytes", "sum"});
  if (gpu) {
    double capacity = gpu->memoryGiB * kGiB;
    memory.rows.push_back(
        {"capacity", "capacity of one " + gpu->name, capacity, "bytes", data});
    memory.rows.push_back(
        {"utilization",
         mem.total() <= capacity ? "fits: uses" : "DOES NOT FIT: needs",
         mem.total() / capacity, "fraction", "total / capacity"});
    report.facts["fits"] = mem.total() <= capacity ? "yes" : "no";
  }
  report.sections.push_back(std::move(memory));

  // Activations per micro-batch.
  Section act{"activations",
              formatv("Activations per micro-batch ({0} x {1} tokens)",
                      layout.microBatch, est.seqLen)
                  .str(),
              {}};
  if (request.forward) {
    const ForwardPlan &fwd = *request.forward;
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
  for (Remat r : {Remat::None, Remat::Selective, Remat::Full}) {
    std::string formula = r == Remat::None        ? "sbh(34 + 5as/h) per block"
                          : r == Remat::Selective ? "sbh 34 per block"
                                                  : "2sbh per block";
    act.rows.push_back(
        {("device_" + stringifyRemat(r)).str(),
         formatv("training, remat {0}{1}", stringifyRemat(r),
                 r == layout.remat ? " (chosen)" : "")
             .str(),
         est.activationsByRemat[static_cast<unsigned>(r)], "bytes",
         korthikanti + ": " + formula +
             (half ? " (16-bit)" : " (fp32: twice the 16-bit terms)")});
  }
  report.sections.push_back(std::move(act));

  // Compute.
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
  compute.rows.push_back(
      {"tokens", "training tokens", est.tokens, "tokens",
       est.tokensFromChinchilla
           ? "default: Chinchilla 20 x P"
           : sourceOf(train.origins, "tokens", "train config", "--tokens")});
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

  // Time and cost.
  if (gpu) {
    Section time{"time", "Time and cost", {}};
    time.rows.push_back(
        {"peak_flops",
         formatv("peak {0} per GPU, dense", stringifyPrecision(train.precision))
             .str(),
         gpu->peakFlops(train.precision), "FLOP/s", data});
    time.rows.push_back(
        {"mfu_assumed", "MFU of the kernels (assumed)", cluster.mfu, "fraction",
         sourceOf(cluster.origins, "mfu", "cluster config", "default 0.4")});
    const StepTime &step = est.step;
    struct Part {
      StringRef key, label;
      double value;
    } parts[] = {
        {"step_compute", "step: compute", step.compute},
        {"step_recompute", "step: recompute (remat)", step.recompute},
        {"step_bubble", "step: pipeline bubble (1F1B)", step.bubble},
        {"step_tp_comm", "step: tensor-parallel all-reduces", step.tpComm},
        {"step_pp_comm", "step: pipeline sends", step.ppComm},
        {"step_dp_comm", "step: data-parallel comm not overlapped",
         step.dpComm},
        {"step_optimizer", "step: optimizer update (HBM-bound)",
         step.optimizer},
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
    double chinchillaSeconds =
        std::ceil(chinchilla /
                  (static_cast<double>(est.globalBatch) * est.seqLen)) *
        step.total();
    time.rows.push_back({"chinchilla_time", "time at Chinchilla tokens",
                         chinchillaSeconds, "s", "formula"});
    if (cluster.pricePerGpuHour > 0) {
      time.rows.push_back({"price", "price per GPU-hour",
                           cluster.pricePerGpuHour, "USD",
                           sourceOf(cluster.origins, "price_per_gpu_hour",
                                    "cluster config", "cluster config")});
      time.rows.push_back(
          {"cost", "cost", est.cost, "USD", "GPU-hours x price"});
      time.rows.push_back({"chinchilla_cost", "cost at Chinchilla tokens",
                           chinchillaSeconds / 3600 * cluster.numGpus() *
                               cluster.pricePerGpuHour,
                           "USD", "formula"});
    }
    report.sections.push_back(std::move(time));
  }

  // Layouts compared, or the --fit search.
  if (!request.fitBudget) {
    LayoutTable table;
    table.key = "layouts";
    table.title = formatv("Per-device memory by layout (micro-batch {0}, "
                          "remat {1})",
                          layout.microBatch, stringifyRemat(layout.remat));
    table.note = "states: IR parameters x bytes/parameter, sharded by tp, pp "
                 "and ZeRO; activations: formula";
    if (gpu)
      table.capacityBytes = gpu->memoryGiB * kGiB;
    for (const Layout &l : comparedLayouts(model, train, cluster, layout))
      table.rows.push_back(estimate(model, train, cluster, gpu, l));
    report.tables.push_back(std::move(table));
  } else {
    if (!gpu)
      return makeError("--fit needs a GPU: give --gpu or a --cluster file "
                       "with gpu:");
    FitResult fit = searchFit(model, train, cluster, *gpu, *request.fitBudget);
    LayoutTable table;
    table.key = "fit";
    table.title = formatv("Fastest layouts that fit in {0} per device",
                          formatBytes(*request.fitBudget))
                      .str();
    table.note = "tried tp (powers of 2), pp (divisors of n_layer), ZeRO "
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
    report.facts["fit_budget_bytes"] = formatv("{0:F0}", fit.budgetBytes);
    report.notes.push_back(formatv(
        "--fit: {0} candidates: {1} fit, {2} do not fit, {3} invalid (global "
        "batch {4} not divisible by micro-batch x dp, or ZeRO-2/3 with "
        "pipeline parallelism)",
        fit.candidates, fit.fitting.size(), fit.tooBig, fit.invalid,
        globalBatchOf(train)));
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
    report.tables.push_back(std::move(table));
    if (!others.rows.empty())
      report.tables.push_back(std::move(others));
  }

  report.notes.push_back(
      "activations and workspace are formulas (Korthikanti et al. 2022, "
      "with sequence parallelism under tp) until llmc's training step "
      "exists; the forward arena is the IR's memory plan");
  if (gpu)
    report.notes.push_back(
        "time: model FLOPs at the assumed MFU, plus recompute, the 1F1B "
        "bubble, communication at the data file's bandwidths (ring "
        "collectives; data-parallel traffic overlapped with backward) and "
        "the optimizer update at its HBM bandwidth");
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
