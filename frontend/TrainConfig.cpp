// The training config's parser: the values of the file and the flags are
// collected by the table of keys (TrainConfigKeys.cpp), set by each section's
// reader (TrainConfigApply.cpp) and checked together; the resolved config
// printed back, and the sections a resume must agree with.
#include "frontend/TrainConfig.h"

#include "frontend/TrainConfigParser.h"

#include "frontend/ConfigYaml.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"
#include "llvm/Support/xxhash.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace llvm;
using namespace mlir::llmc;
using ::llmc::LossScaleConfig;
using ::llmc::OptimizerConfig;
using ::llmc::PrecisionConfig;
using ::llmc::RematConfig;
using ::llmc::LrSchedule;

using namespace mlir::llmc::trainconfig;

namespace mlir::llmc::trainconfig {

std::string formatDouble(double value) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  return buf;
}

namespace {
Error makeError(StringRef text) {
  return createStringError(std::make_error_code(std::errc::invalid_argument),
                           text.rtrim());
}
} // namespace

Error Parser::errorAt(const Value &value, StringRef path,
                      const Twine &message) {
  if (!value.flag.empty())
    return makeError(("--" + StringRef(value.flag).ltrim('-') + ": " +
                      message)
                         .str());
  std::string text;
  raw_string_ostream os(text);
  SMLoc loc = value.range.Start;
  if (!loc.isValid()) {
    os << bufferName << ": error: " << path << ": " << message << "\n";
    return makeError(text);
  }
  return file.error(value.range, path + ": " + message);
}

Error Parser::errorAtKey(Key key, const Twine &message) {
  auto it = values.find(key);
  if (it != values.end())
    return errorAt(it->second, info(key).path, message);
  Value none;
  return errorAt(none, info(key).path, message);
}

Error Parser::collectValue(const KeyInfo &k, const config::YNode &node) {
  using config::YNode;
  Value value;
  value.range = node.range; // an empty value's range is its key's
  if (k.kind == Kind::Model && node.kind == YNode::Kind::Mapping) {
    // The mapping runs to the next top-level key (collectFile closes it).
    value.inlineModel = std::string();
    // A flow mapping's range starts at its first key: its '{' is kept too
    // (model: {n_layer: 2, ...}), or the model parser sees a stray '}'.
    const char *start = node.range.Start.getPointer();
    const char *first = file.text().data();
    const char *before = start;
    while (before > first && (before[-1] == ' ' || before[-1] == '\t'))
      --before;
    if (before > first && before[-1] == '{')
      start = before - 1;
    inlineModelStart = start;
    values[k.key] = std::move(value);
    return Error::success();
  }
  if (k.kind == Kind::Sources && node.kind == YNode::Kind::Sequence &&
      any_of(node.items, [](const YNode &item) {
        return item.kind == YNode::Kind::Mapping;
      })) {
    value.isList = true;
    if (Error err = collectSources(k, node, value))
      return err;
    values[k.key] = std::move(value);
    return Error::success();
  }
  if (isListKind(k.kind) && node.kind == YNode::Kind::Sequence) {
    value.isList = true;
    for (const YNode &item : node.items) {
      if (item.kind != YNode::Kind::Scalar)
        return errorAt(value, k.path,
                       "expected a list of scalars, got " + item.describe() +
                           " in it");
      value.items.push_back(item.text);
    }
    values[k.key] = std::move(value);
    return Error::success();
  }
  if (node.kind != YNode::Kind::Scalar)
    return errorAt(value, k.path,
                   Twine("expected ") +
                       (isListKind(k.kind) ? "a list or a scalar" : "a scalar") +
                       ", got " + node.describe());
  value.items.push_back(node.text);
  values[k.key] = std::move(value);
  return Error::success();
}

/// data.train as a list of sources: each a mapping of path (a pattern or a
/// list of them), weight and name.
Error Parser::collectSources(const KeyInfo &k, const config::YNode &node,
                             Value &value) {
  using config::YNode;
  static constexpr StringRef known[] = {"path", "weight", "name"};
  for (size_t i = 0; i < node.items.size(); ++i) {
    const YNode &item = node.items[i];
    std::string path = (k.path + "[" + Twine(i) + "]").str();
    Value at;
    at.range = item.range;
    if (item.kind != YNode::Kind::Mapping)
      return errorAt(at, path,
                     "expected a mapping {path, weight, name} like the other "
                     "sources, got " +
                         item.describe());
    SourceValue source;
    source.range = item.range;
    config::KeyRules rules;
    rules.known = known;
    auto unknown = [&](StringRef name) {
      return path + ": " + unknownKeyMessage(name, known);
    };
    rules.unknown = unknown;
    if (Error err = config::forEachKey(
            file, item, rules,
            [&](StringRef name, const YNode &key,
                const YNode &field) -> Error {
              Value where;
              where.range = field.kind == YNode::Kind::Null ? key.range
                                                            : field.range;
              std::string fieldPath = (path + "." + name).str();
              if (name == "path" && field.kind == YNode::Kind::Sequence) {
                for (const YNode &entry : field.items) {
                  if (entry.kind != YNode::Kind::Scalar)
                    return errorAt(where, fieldPath,
                                   "expected a list of file patterns, got " +
                                       entry.describe() + " in it");
                  source.paths.push_back(entry.text);
                }
                return Error::success();
              }
              if (field.kind != YNode::Kind::Scalar)
                return errorAt(where, fieldPath,
                               "expected a scalar, got " + field.describe());
              if (name == "path") {
                source.paths.push_back(field.text);
              } else if (name == "weight") {
                source.weight = field.text;
                source.weightRange = field.range;
              } else {
                source.name = field.text;
                source.nameRange = field.range;
              }
              return Error::success();
            }))
      return err;
    if (source.paths.empty())
      return errorAt(at, path, "missing path: the source's files (a pattern "
                               "or a list of them)");
    value.sources.push_back(std::move(source));
  }
  return Error::success();
}

/// Keeps the inline model's bytes, from its first key to `end`, where they
/// are and blanks everything else (newlines stay), so that the model
/// parser's line:col are the file's.
void Parser::closeInlineModel(const char *end) {
  StringRef text = file.text();
  std::string blanked = text.str();
  for (size_t i = 0; i < blanked.size(); ++i) {
    const char *at = text.data() + i;
    if ((at < inlineModelStart || at >= end) && blanked[i] != '\n')
      blanked[i] = ' ';
  }
  values[Key::Model].inlineModel = std::move(blanked);
  inlineModelStart = nullptr;
}

Error Parser::collectMapping(const config::YNode &mapping, StringRef section) {
  using config::YNode;
  // The names allowed here, each once: at the top level the keys without a
  // section and the section names, in a section its leaves.
  SmallVector<StringRef> known;
  for (const KeyInfo &k : keyTable()) {
    StringRef here = section.empty()
                         ? (sectionOf(k.path).empty() ? k.path
                                                      : sectionOf(k.path))
                         : (sectionOf(k.path) == section ? leafOf(k.path)
                                                         : StringRef());
    if (!here.empty() && !is_contained(known, here))
      known.push_back(here);
  }
  auto pathOf = [&](StringRef name) {
    return section.empty() ? name.str() : (section + "." + name).str();
  };
  std::string notScalar =
      (section.empty() ? StringRef("config") : section).str() +
      ": expected a scalar key";
  auto unknown = [&](StringRef name) {
    if (!section.empty())
      return section.str() + ": " + unknownKeyMessage(name, known);
    if (std::optional<std::string> renamed = renamedKeyMessage(name))
      return *renamed;
    return unknownKeyMessage(name, known);
  };
  auto duplicate = [&](StringRef name, const YNode &firstKey, const YNode &) {
    return pathOf(name) + ": duplicate key (first given on line " +
           std::to_string(file.line(firstKey.range.Start)) + ")";
  };
  config::KeyRules rules;
  rules.known = known;
  rules.notScalar = notScalar;
  rules.unknown = unknown;
  rules.duplicate = duplicate;
  return config::forEachKey(
      file, mapping, rules,
      [&](StringRef name, const YNode &key, const YNode &node) -> Error {
        std::string path = pathOf(name);
        if (section.empty() && inlineModelStart)
          closeInlineModel(key.range.Start.getPointer());

        // A section: a mapping of its keys, or a scalar naming it
        // (`optimizer: sgd` is `optimizer: {name: sgd}`).
        bool isSection =
            section.empty() && any_of(keyTable(), [&](const KeyInfo &k) {
              return sectionOf(k.path) == name;
            });
        if (isSection) {
          if (node.kind == YNode::Kind::Mapping)
            return collectMapping(node, name);
          if (node.kind == YNode::Kind::Scalar)
            for (const KeyInfo &k : keyTable())
              if (k.path == path + ".name")
                return collectValue(k, node);
          Value where;
          where.range = node.range;
          return errorAt(where, name,
                         "expected a mapping, got " + node.describe());
        }
        for (const KeyInfo &k : keyTable())
          if (k.path == path)
            return collectValue(k, node);
        llvm_unreachable("forEachKey lets only known keys through");
      });
}

Error Parser::collectFile(const config::YNode &root) {
  if (Error err = collectMapping(root, ""))
    return err;
  if (inlineModelStart)
    closeInlineModel(file.text().end());
  return file.singleDocument();
}

Error Parser::collectFlags(ArrayRef<std::string> flags) {
  for (size_t i = 0; i < flags.size(); ++i) {
    StringRef arg = flags[i];
    if (!arg.starts_with("--"))
      return makeError(("unexpected argument '" + arg +
                        "' (config keys are given as --key value)")
                           .str());
    StringRef name = arg.drop_front(2), text;
    bool hasValue = false;
    if (size_t eq = name.find('='); eq != StringRef::npos) {
      text = name.drop_front(eq + 1);
      name = name.take_front(eq);
      hasValue = true;
    }
    const KeyInfo *k = lookupFlag(name);
    if (std::optional<std::string> renamed = renamedFlagMessage(name);
        !k && renamed)
      return makeError(*renamed);
    if (!k) {
      std::string best;
      unsigned bestDistance = 3;
      for (const KeyInfo &key : keyTable())
        for (const std::string &f : flagsOf(key)) {
          unsigned d = name.edit_distance(f, true, bestDistance);
          if (d < bestDistance) {
            bestDistance = d;
            best = f;
          }
        }
      return makeError(
          ("unknown option '--" + name + "'" +
           (best.empty() ? std::string("; see 'llmc help config'")
                         : " (did you mean '--" + best + "'?)"))
              .str());
    }
    if (!hasValue) {
      // A bare boolean flag means true.
      bool next = i + 1 < flags.size() &&
                  !(StringRef(flags[i + 1]).starts_with("--"));
      if (next) {
        text = flags[++i];
      } else if (k->kind == Kind::Bool) {
        text = "true";
      } else {
        return makeError(("--" + name + ": missing value (" + k->values + ")")
                             .str());
      }
    }
    Value value;
    value.flag = name.str();
    if (isListKind(k->kind)) {
      value.isList = true;
      SmallVector<StringRef> parts;
      text.split(parts, ',', -1, /*KeepEmpty=*/false);
      for (StringRef part : parts)
        value.items.push_back(part.trim().str());
    } else {
      value.items.push_back(text.str());
    }
    values[k->key] = std::move(value);
  }
  return Error::success();
}

/// Paths in the file are relative to its directory, in flags to the
/// working directory; both become absolute, so the resolved config
/// (OUT/config.yaml) means the same wherever it is read.
std::string Parser::resolve(const Value &value, StringRef path) const {
  SmallString<256> joined;
  if (value.flag.empty() && !baseDir.empty() && !sys::path::is_absolute(path))
    sys::path::append(joined, baseDir, path);
  else
    joined = path;
  sys::fs::make_absolute(joined);
  sys::path::remove_dots(joined, /*remove_dot_dot=*/true);
  return std::string(joined);
}

Error Parser::validate(TrainingConfig &c) {
  bool mlir = !c.modelMlirPath.empty();
  bool run = use == TrainingConfigUse::Run;
  bool hasModel = values.count(Key::Model);
  if (!hasModel && run)
    return errorAtKey(Key::Model, "missing: a preset, a model file or an "
                                  "inline model config");
  if (!values.count(Key::DataTrain) && run)
    return errorAtKey(Key::DataTrain, "missing: the training data files");
  if (c.dropout) {
    if (mlir)
      return errorAtKey(Key::Dropout,
                        "cannot override the dropout of a .mlir model");
    c.model.dropout = *c.dropout;
  }
  if (!mlir && hasModel) {
    if (c.seqLen == 0)
      c.seqLen = c.model.seqLen;
    if (c.seqLen > c.model.seqLen)
      return errorAtKey(Key::SeqLen, formatv("{0} is longer than the model's "
                                             "seq_len ({1})",
                                             c.seqLen, c.model.seqLen));
  } else if (c.seqLenWarmup.enabled()) {
    return errorAtKey(Key::SeqLenWarmupSteps,
                      "a .mlir model has one sequence length; sequence "
                      "length warmup needs a model config");
  }
  if (c.globalBatchSize == 0)
    c.globalBatchSize = c.microBatchSize;
  if (c.globalBatchSize % c.microBatchSize != 0)
    return errorAtKey(Key::GlobalBatchSize,
                      formatv("{0} is not a multiple of micro_batch_size ({1})",
                              c.globalBatchSize, c.microBatchSize));
  if (c.batchRampup.enabled()) {
    const ::llmc::BatchRampup &r = c.batchRampup;
    if (r.increment == 0)
      return errorAtKey(Key::RampupIncrement, "missing (the ramp-up needs "
                                              "start, increment and samples)");
    if (r.start > c.globalBatchSize)
      return errorAtKey(Key::RampupStart,
                        formatv("{0} is above global_batch_size ({1})",
                                r.start, c.globalBatchSize));
    if (r.start % c.microBatchSize || r.increment % c.microBatchSize)
      return errorAtKey(r.start % c.microBatchSize ? Key::RampupStart
                                                   : Key::RampupIncrement,
                        formatv("start ({0}) and increment ({1}) must be "
                                "multiples of micro_batch_size ({2})",
                                r.start, r.increment, c.microBatchSize));
    if ((c.globalBatchSize - r.start) % r.increment)
      return errorAtKey(Key::RampupIncrement,
                        formatv("global_batch_size - start = {0} is not a "
                                "multiple of the increment ({1})",
                                c.globalBatchSize - r.start, r.increment));
  }
  if (c.seqLenWarmup.enabled() && c.seqLenWarmup.start == 0)
    return errorAtKey(Key::SeqLenWarmupStart,
                      "missing (the warmup needs start and steps)");
  if (c.seqLenWarmup.start > c.seqLen)
    return errorAtKey(Key::SeqLenWarmupStart,
                      formatv("{0} is longer than seq_len ({1})",
                              c.seqLenWarmup.start, c.seqLen));
  if (c.parallel.sp && c.parallel.tp < 2)
    return errorAtKey(Key::ParallelSp,
                      formatv("sequence parallelism splits the sequence over "
                              "the tensor-parallel ranks; it needs "
                              "parallel.tp (--tp) above 1, got {0}",
                              c.parallel.tp));
  if (c.parallel.sp && c.seqLen % c.parallel.tp)
    return errorAtKey(Key::ParallelSp,
                      formatv("seq_len ({0}) is not a multiple of tp ({1}): "
                              "each tp rank keeps an equal slice of the "
                              "sequence",
                              c.seqLen, c.parallel.tp));
  if (c.parallel.sp && c.seqLenWarmup.enabled())
    return errorAtKey(Key::ParallelSp, "sequence length warmup with "
                                       "sequence parallelism is not "
                                       "implemented");
  if (c.maxSteps && c.maxTokens)
    return errorAtKey(Key::MaxTokens, "give max_steps or max_tokens, not both");
  if (!c.maxSteps && !c.maxTokens && run)
    return errorAtKey(Key::MaxSteps, "missing: max_steps or max_tokens");
  // Without a model (llmc plan), the sequence length is the model's, known
  // later.
  if (c.maxTokens && c.seqLen)
    c.maxSteps = c.batchSchedule().stepsForTokens(c.maxTokens);
  // Unset, the decay ends with the run; a run shorter than its warmup
  // (--max-steps 10 on a config that warms up for 30) stays in the warmup.
  if (c.schedule.decaySteps == 0)
    c.schedule.decaySteps = std::max(c.maxSteps, c.schedule.warmupSteps);
  if (c.schedule.decaySteps < c.schedule.warmupSteps)
    return errorAtKey(Key::DecaySteps,
                      formatv("{0} is below warmup_steps ({1})",
                              c.schedule.decaySteps, c.schedule.warmupSteps));
  if (c.schedule.minLr > c.schedule.lr)
    return errorAtKey(Key::MinLr, formatv("{0} is above lr ({1})",
                                          formatDouble(c.schedule.minLr),
                                          formatDouble(c.schedule.lr)));
  // Validation files and a split of the training data exclude each other;
  // a flag overrides the file's choice (--val on a config with
  // val_fraction uses the files), both in one place is an error.
  if (!c.data.val.empty() && c.data.valFraction > 0) {
    auto fromFlag = [&](Key key) {
      auto it = values.find(key);
      return it != values.end() && !it->second.flag.empty();
    };
    bool valFlag = fromFlag(Key::DataVal);
    bool fractionFlag = fromFlag(Key::DataValFraction);
    if (valFlag && !fractionFlag)
      c.data.valFraction = 0;
    else if (fractionFlag && !valFlag)
      c.data.val.clear();
    else
      return errorAtKey(Key::DataValFraction,
                        "give val files or val_fraction, not both");
  }
  bool mixed = c.precision.kind != PrecisionConfig::Kind::FP32;
  for (Key key : {Key::AmpAllow, Key::AmpDeny})
    if (values.count(key) && !mixed)
      return errorAtKey(key, "the AMP lists need precision fp16 or bf16");
  for (Key key : {Key::LossScaleInitialPower, Key::LossScaleWindow,
                  Key::LossScaleHysteresis, Key::LossScaleMin,
                  Key::LossScaleConsecutiveHysteresis})
    if (values.count(key) && c.precision.kind != PrecisionConfig::Kind::FP16)
      return errorAtKey(key, "loss scaling is for precision fp16 only (fp32 "
                             "and bf16 have fp32's exponent range and get "
                             "none)");
  if (c.lossScale.minScale > std::exp2(c.lossScale.initialScalePower))
    return errorAtKey(Key::LossScaleMin,
                      formatv("{0} is above the initial scale 2^{1}",
                              formatDouble(c.lossScale.minScale),
                              formatDouble(c.lossScale.initialScalePower)));
  if (c.remat.policy == RematConfig::Policy::Budget && !c.remat.budgetBytes)
    return errorAtKey(Key::Remat, "the budget policy needs remat_budget");
  if (values.count(Key::RematBudget) &&
      c.remat.policy != RematConfig::Policy::Budget)
    return errorAtKey(Key::RematBudget, "needs remat: budget");
  if (c.sparsity.enabled && c.maxSteps &&
      c.sparsity.pruneAtStep > c.maxSteps)
    return errorAtKey(Key::SparsityPruneAtStep,
                      formatv("step {0} is after max_steps {1}: the run "
                              "would never prune",
                              c.sparsity.pruneAtStep, c.maxSteps));
  if (c.sparsity.enabled && c.parallel.zero > 0)
    return errorAtKey(Key::SparsityPattern,
                      "2:4 sparsity needs parallel.zero 0 (the masks of "
                      "ZeRO-sharded optimizer state are not implemented)");
  if (Error err = validatePlan(c))
    return err;
  if (c.out.empty()) {
    StringRef stem = sys::path::stem(bufferName);
    c.out = ("runs/" + (stem.empty() ? StringRef("run") : stem)).str();
  }
  return Error::success();
}

/// The plan section's keys that depend on each other: one observed figure
/// (a flag replaces the file's figure of either kind).
Error Parser::validatePlan(TrainingConfig &c) {
  auto given = values.find(Key::PlanObservedDays);
  auto step = values.find(Key::PlanObservedStepTime);
  if (given == values.end() || step == values.end())
    return Error::success();
  bool daysFlag = !given->second.flag.empty();
  bool stepFlag = !step->second.flag.empty();
  if (daysFlag && !stepFlag) {
    c.plan.observedStepSeconds = 0;
    c.origins.erase(info(Key::PlanObservedStepTime).path.str());
    values.erase(step);
    return Error::success();
  }
  if (stepFlag && !daysFlag) {
    c.plan.observedDays = 0;
    c.origins.erase(info(Key::PlanObservedDays).path.str());
    values.erase(given);
    return Error::success();
  }
  std::string where = daysFlag ? "--" + given->second.flag
                               : file.where(given->second.range.Start);
  return errorAtKey(Key::PlanObservedStepTime,
                    "give one observed figure, observed_days or "
                    "observed_step_time, not both (observed_days is at " +
                        where + ")");
}

Expected<TrainingConfig> Parser::apply() {
  TrainingConfig c;
  c.path = bufferName.str();
  for (const KeyInfo &k : keyTable()) {
    auto it = values.find(k.key);
    if (it == values.end())
      continue;
    if (Error err = applyKey(k, it->second, c))
      return err;
    const Value &value = it->second;
    if (!value.flag.empty()) {
      c.origins[k.path.str()] = "--" + value.flag;
    } else if (value.range.Start.isValid()) {
      c.origins[k.path.str()] = file.where(value.range.Start);
    }
  }
  if (Error err = validate(c))
    return err;
  return c;
}
} // namespace mlir::llmc::trainconfig

::llmc::TrainingStepOptions TrainingConfig::stepOptions() const {
  ::llmc::TrainingStepOptions options;
  options.optimizer = optimizer;
  options.precision = precision;
  options.lossScale = lossScale;
  options.remat = remat;
  options.parallel = parallel;
  options.sparsity = sparsity;
  return options;
}

::llmc::BatchSchedule TrainingConfig::batchSchedule() const {
  ::llmc::BatchSchedule s;
  s.globalBatch = globalBatchSize ? globalBatchSize : microBatchSize;
  s.microBatch = microBatchSize;
  s.seqLen = seqLen;
  s.rampup = batchRampup;
  s.seqLenWarmup = seqLenWarmup;
  return s;
}

Expected<TrainingConfig>
mlir::llmc::parseTrainingConfig(StringRef text, StringRef bufferName,
                                StringRef baseDir, ArrayRef<std::string> flags,
                                TrainingConfigUse use) {
  config::YamlFile file(text, bufferName);
  Expected<const config::YNode *> root = file.root("training config keys");
  if (!root)
    return root.takeError();
  Parser parser(file, baseDir, use);
  if (Error err = parser.collectFile(**root))
    return err;
  if (Error err = parser.collectFlags(flags))
    return err;
  return parser.apply();
}

Expected<TrainingConfig>
mlir::llmc::loadTrainingConfig(StringRef path, ArrayRef<std::string> flags,
                                TrainingConfigUse use) {
  Expected<std::unique_ptr<MemoryBuffer>> file =
      config::readFile(path, "training config");
  if (!file)
    return file.takeError();
  return parseTrainingConfig((*file)->getBuffer(), path,
                             sys::path::parent_path(path), flags, use);
}


namespace {
void printList(raw_ostream &os, StringRef key,
               const std::vector<std::string> &items) {
  os << key << ": [";
  interleave(
      items, os, [&](const std::string &s) { os << '"' << yaml::escape(s) << '"'; },
      ", ");
  os << "]\n";
}
} // namespace

namespace {
/// The plan: section's keys that the config gives (llmc plan reads a run's
/// resolved config as it reads the run's; defaults stay unwritten, so that
/// the machines are sized as the run's were).
void printPlanSection(const TrainingConfig &c, raw_ostream &os) {
  const ::llmc::PlanSection &p = c.plan;
  std::string text;
  raw_string_ostream section(text);
  auto given = [&](Key key) {
    return c.origins.count(info(key).path.str()) != 0;
  };
  auto number = [&](Key key, double value) {
    if (given(key))
      section << "  " << leafOf(info(key).path) << ": "
              << formatDouble(value) << "\n";
  };
  if (given(Key::PlanGpu))
    section << "  gpu: \"" << yaml::escape(p.gpu) << "\"\n";
  number(Key::PlanGpusPerNode, double(p.gpusPerNode));
  number(Key::PlanNodes, double(p.nodes));
  number(Key::PlanPricePerGpuHour, p.pricePerGpuHour);
  number(Key::PlanMfu, p.mfu);
  number(Key::PlanReserveGib, p.reserveGiB);
  number(Key::PlanRestarts, double(p.restarts));
  number(Key::PlanRestartMinutes, p.restartMinutes);
  number(Key::PlanStorageWriteGbps, p.storageWriteGBps);
  number(Key::PlanStorageReadGbps, p.storageReadGBps);
  number(Key::PlanObservedDays, p.observedDays);
  number(Key::PlanObservedStepTime, p.observedStepSeconds);
  if (given(Key::PlanGradPrecision))
    section << "  grad_precision: " << (p.fp32Gradients ? "fp32" : "half")
            << "\n";
  if (!text.empty())
    os << "plan:\n" << text;
}
} // namespace

void mlir::llmc::printTrainingConfig(const TrainingConfig &c,
                                     raw_ostream &os) {
  if (!c.modelMlirPath.empty()) {
    os << "model: \"" << yaml::escape(c.modelMlirPath) << "\"\n";
  } else {
    os << "model:\n";
    std::string model;
    raw_string_ostream ms(model);
    printModelConfig(c.model, ms);
    for (StringRef line : split(StringRef(model).rtrim('\n'), '\n'))
      os << "  " << line << "\n";
  }
  const OptimizerConfig &o = c.optimizer;
  os << "optimizer:\n"
     << "  name: " << (o.kind == OptimizerConfig::Kind::AdamW ? "adamw" : "sgd")
     << "\n  lr: " << formatDouble(c.schedule.lr) << "\n  betas: ["
     << formatDouble(o.beta1) << ", " << formatDouble(o.beta2) << "]\n"
     << "  eps: " << formatDouble(o.epsilon) << "\n"
     << "  weight_decay: " << formatDouble(o.weightDecay) << "\n"
     << "  momentum: " << formatDouble(o.momentum) << "\n"
     << "  nesterov: " << (o.nesterov ? "true" : "false") << "\n"
     << "  grad_clip: " << formatDouble(o.maxGradNorm) << "\n"
     << "  decay_norms_and_biases: "
     << (o.decayNormsAndBiases ? "true" : "false") << "\n";
  os << "schedule:\n"
     << "  name: " << ::llmc::stringifyLrScheduleKind(c.schedule.kind)
     << "\n  warmup_steps: " << c.schedule.warmupSteps
     << "\n  decay_steps: " << c.schedule.decaySteps
     << "\n  min_lr: " << formatDouble(c.schedule.minLr) << "\n";
  os << "global_batch_size: " << c.globalBatchSize << "\n"
     << "micro_batch_size: " << c.microBatchSize << "\n"
     << "seq_len: " << c.seqLen << "\n";
  if (c.batchRampup.enabled())
    os << "batch_size_rampup: {start: " << c.batchRampup.start
       << ", increment: " << c.batchRampup.increment
       << ", samples: " << c.batchRampup.samples << "}\n";
  if (c.seqLenWarmup.enabled())
    os << "seq_len_warmup: {start: " << c.seqLenWarmup.start
       << ", steps: " << c.seqLenWarmup.steps << "}\n";
  os << "max_steps: " << c.maxSteps << "\n";
  os << "data:\n";
  if (c.data.blend.empty()) {
    printList(os << "  ", "train", c.data.train);
  } else {
    os << "  train:\n";
    for (const TrainSourceConfig &source : c.data.blend) {
      os << "    - {path: [";
      interleave(
          source.paths, os,
          [&](const std::string &p) { os << '"' << yaml::escape(p) << '"'; },
          ", ");
      os << "], weight: " << formatDouble(source.weight) << ", name: \""
         << yaml::escape(source.name) << "\"}\n";
    }
  }
  if (!c.data.val.empty())
    printList(os << "  ", "val", c.data.val);
  os << "  val_fraction: " << formatDouble(c.data.valFraction) << "\n"
     << "  shuffle_windows: " << c.data.shuffleWindows << "\n"
     << "  tokenizer: \"" << yaml::escape(c.data.tokenizer) << "\"\n";
  os << "log_interval: " << c.logInterval << "\n"
     << "progress: " << c.progress << "\n"
     << "eval_interval: " << c.evalInterval << "\n"
     << "eval_steps: " << c.evalSteps << "\n"
     << "sample_tokens: " << c.sampleTokens << "\n"
     << "checkpoint_interval: " << c.checkpointInterval << "\n"
     << "keep_checkpoints: " << c.keepCheckpoints << "\n"
     << "seed: " << c.seed << "\n"
     << "precision: " << ::llmc::stringifyPrecision(c.precision.kind) << "\n";
  if (!c.precision.allow.empty() || !c.precision.deny.empty()) {
    os << "amp:\n";
    printList(os << "  ", "allow", c.precision.allow);
    printList(os << "  ", "deny", c.precision.deny);
  }
  if (c.precision.kind == PrecisionConfig::Kind::FP16) {
    const LossScaleConfig &l = c.lossScale;
    os << "loss_scale:\n"
       << "  initial_scale_power: " << formatDouble(l.initialScalePower)
       << "\n  window: " << l.window << "\n  hysteresis: " << l.hysteresis
       << "\n  min_scale: " << formatDouble(l.minScale)
       << "\n  consecutive_hysteresis: "
       << (l.consecutiveHysteresis ? "true" : "false") << "\n";
  }
  os << "remat: " << ::llmc::stringifyRematPolicy(c.remat.policy) << "\n";
  if (c.remat.policy == RematConfig::Policy::Budget)
    os << "remat_budget: " << c.remat.budgetBytes << "\n";
  if (c.sparsity.enabled) {
    os << "sparsity:\n  pattern: " << c.sparsity.pattern
       << "\n  prune_at_step: " << c.sparsity.pruneAtStep << "\n";
    if (!c.sparsity.params.empty())
      printList(os << "  ", "params", c.sparsity.params);
  }
  os << "parallel:\n"
     << "  dp: " << c.parallel.dp << "\n  tp: " << c.parallel.tp
     << "\n  pp: " << c.parallel.pp << "\n  zero: " << c.parallel.zero
     << "\n  bucket_mb: " << formatDouble(c.parallel.bucketMb)
     << "\n  timeout: " << formatDouble(c.parallel.timeoutSeconds)
     << "\n  sp: " << (c.parallel.sp ? "true" : "false") << "\n";
  const ::llmc::GuardConfig &g = c.guard;
  os << "guard:\n"
     << "  action: " << g.action << "\n  window: " << g.window
     << "\n  zscore: " << formatDouble(g.zscore)
     << "\n  ratio: " << formatDouble(g.ratio)
     << "\n  max_grad_norm_ratio: " << formatDouble(g.maxGradNormRatio)
     << "\n  snapshot_interval: " << g.snapshotInterval
     << "\n  lr_factor: " << formatDouble(g.lrFactor)
     << "\n  cooldown: " << g.cooldown
     << "\n  max_rollbacks: " << g.maxRollbacks << "\n";
  os
     << "threads: " << c.threads << "\n"
     << "device: " << c.device << "\n"
     << "out: \"" << yaml::escape(c.out) << "\"\n";
  if (!c.initFrom.empty())
    os << "init_from: \"" << yaml::escape(c.initFrom) << "\"\n";
  printPlanSection(c, os);
}

std::map<std::string, std::string>
mlir::llmc::resumeSections(const TrainingConfig &c) {
  std::map<std::string, std::string> sections;
  {
    std::string text;
    raw_string_ostream os(text);
    if (!c.modelMlirPath.empty()) {
      // The module itself is what must match; its bytes stand for it.
      ErrorOr<std::unique_ptr<MemoryBuffer>> file =
          MemoryBuffer::getFile(c.modelMlirPath);
      os << "mlir_bytes: "
         << (file ? std::to_string(
                        xxh3_64bits((*file)->getBuffer()))
                  : std::string("unreadable"))
         << "\n";
    } else {
      ModelConfig model = c.model;
      model.name.clear(); // a renamed model is the same model
      printModelConfig(model, os);
    }
    sections["model"] = text;
  }
  {
    std::string text;
    raw_string_ostream os(text);
    const OptimizerConfig &o = c.optimizer;
    os << "name: " << (o.kind == OptimizerConfig::Kind::AdamW ? "adamw" : "sgd")
       << "\nlr: " << formatDouble(c.schedule.lr)
       << "\nbetas: [" << formatDouble(o.beta1) << ", "
       << formatDouble(o.beta2) << "]\neps: " << formatDouble(o.epsilon)
       << "\nweight_decay: " << formatDouble(o.weightDecay)
       << "\nmomentum: " << formatDouble(o.momentum)
       << "\nnesterov: " << (o.nesterov ? "true" : "false")
       << "\ngrad_clip: " << formatDouble(o.maxGradNorm)
       << "\ndecay_norms_and_biases: "
       << (o.decayNormsAndBiases ? "true" : "false") << "\n";
    sections["optimizer"] = text;
  }
  {
    std::string text;
    raw_string_ostream os(text);
    // One source prints as before blends existed, and the default shuffle
    // buffer not at all, so that earlier checkpoints still match.
    if (c.data.blend.empty())
      printList(os, "train", c.data.train);
    for (const TrainSourceConfig &source : c.data.blend) {
      os << "source: \"" << yaml::escape(source.name)
         << "\" weight " << formatDouble(source.weight) << " ";
      printList(os, "train", source.paths);
    }
    printList(os, "val", c.data.val);
    if (c.data.shuffleWindows != ::llmc::kDefaultShuffleWindows)
      os << "shuffle_windows: " << c.data.shuffleWindows << "\n";
    os << "val_fraction: " << formatDouble(c.data.valFraction) << "\n"
       << "tokenizer: " << c.data.tokenizer << "\n"
       << "global_batch_size: " << c.globalBatchSize << "\n"
       << "micro_batch_size: " << c.microBatchSize << "\n"
       << "seq_len: " << c.seqLen << "\n"
       << "batch_size_rampup: " << c.batchRampup.start << " "
       << c.batchRampup.increment << " " << c.batchRampup.samples << "\n"
       << "seq_len_warmup: " << c.seqLenWarmup.start << " "
       << c.seqLenWarmup.steps << "\n"
       << "seed: " << c.seed << "\n";
    sections["data"] = text;
  }
  {
    // Activation checkpointing is not here: it changes no number, so a run
    // may be resumed under another policy.
    std::string text;
    raw_string_ostream os(text);
    os << "precision: " << ::llmc::stringifyPrecision(c.precision.kind) << "\n";
    printList(os, "allow", c.precision.allow);
    printList(os, "deny", c.precision.deny);
    if (c.precision.kind == PrecisionConfig::Kind::FP16) {
      const LossScaleConfig &l = c.lossScale;
      os << "loss_scale: " << formatDouble(l.initialScalePower) << " "
         << l.window << " " << l.hysteresis << " "
         << formatDouble(l.minScale) << " " << l.consecutiveHysteresis
         << "\n";
    }
    sections["precision"] = text;
  }
  return sections;
}

//===----------------------------------------------------------------------===//
// The schema's names and sizes
//===----------------------------------------------------------------------===//

std::optional<int64_t> llmc::parseByteSize(llvm::StringRef text) {
  text = text.trim();
  double scale = 1;
  for (auto [suffix, factor] : {std::pair{"KiB", 1024.0},
                                {"MiB", 1024.0 * 1024},
                                {"GiB", 1024.0 * 1024 * 1024}})
    if (text.consume_back(suffix)) {
      scale = factor;
      break;
    }
  double value;
  if (text.trim().getAsDouble(value) || !(value * scale >= 1) ||
      value * scale > 9e18)
    return std::nullopt;
  return int64_t(value * scale);
}

llvm::StringRef llmc::stringifyPrecision(PrecisionConfig::Kind kind) {
  switch (kind) {
  case PrecisionConfig::Kind::FP32:
    return "fp32";
  case PrecisionConfig::Kind::FP16:
    return "fp16";
  case PrecisionConfig::Kind::BF16:
    return "bf16";
  }
  llvm_unreachable("unknown precision");
}

llvm::StringRef llmc::stringifyRematPolicy(RematConfig::Policy policy) {
  switch (policy) {
  case RematConfig::Policy::None:
    return "none";
  case RematConfig::Policy::Full:
    return "full";
  case RematConfig::Policy::Selective:
    return "selective";
  case RematConfig::Policy::Budget:
    return "budget";
  }
  llvm_unreachable("unknown remat policy");
}

std::optional<llmc::RematConfig::Policy>
llmc::parseRematPolicy(llvm::StringRef name) {
  for (auto policy :
       {RematConfig::Policy::None, RematConfig::Policy::Full,
        RematConfig::Policy::Selective, RematConfig::Policy::Budget})
    if (stringifyRematPolicy(policy) == name)
      return policy;
  return std::nullopt;
}

