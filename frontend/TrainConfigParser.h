// The training config's parser, shared by its files (not an interface):
// the table of keys (TrainConfigKeys.cpp), the values read from the file and
// the flags, the parser (TrainConfig.cpp) and the readers of each section's
// keys (TrainConfigApply.cpp).
#ifndef LLMC_FRONTEND_TRAINCONFIGPARSER_H
#define LLMC_FRONTEND_TRAINCONFIGPARSER_H

#include "frontend/ConfigYaml.h"
#include "frontend/TrainConfig.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SMLoc.h"

#include <cmath>
#include <map>
#include <optional>
#include <string>

namespace mlir::llmc::trainconfig {
using namespace llvm;

//===----------------------------------------------------------------------===//
// The table of keys
//===----------------------------------------------------------------------===//

enum class Key {
  Model,
  OptimizerName,
  Lr,
  Betas,
  Eps,
  WeightDecay,
  Momentum,
  Nesterov,
  GradClip,
  DecayNormsAndBiases,
  ScheduleName,
  WarmupSteps,
  DecaySteps,
  MinLr,
  GlobalBatchSize,
  MicroBatchSize,
  SeqLen,
  RampupStart,
  RampupIncrement,
  RampupSamples,
  SeqLenWarmupStart,
  SeqLenWarmupSteps,
  MaxSteps,
  MaxTokens,
  DataTrain,
  DataVal,
  DataValFraction,
  DataShuffleWindows,
  DataTokenizer,
  LogInterval,
  Progress,
  EvalInterval,
  EvalSteps,
  SampleTokens,
  CheckpointInterval,
  KeepCheckpoints,
  Seed,
  Precision,
  AmpAllow,
  AmpDeny,
  LossScaleInitialPower,
  LossScaleWindow,
  LossScaleHysteresis,
  LossScaleMin,
  LossScaleConsecutiveHysteresis,
  Remat,
  RematBudget,
  SparsityPattern,
  SparsityPruneAtStep,
  SparsityParams,
  ParallelDp,
  ParallelTp,
  ParallelSp,
  ParallelPp,
  ParallelZero,
  ParallelBucketMb,
  ParallelTimeout,
  GuardAction,
  GuardWindow,
  GuardZscore,
  GuardRatio,
  GuardMaxGradNormRatio,
  GuardSnapshotInterval,
  GuardLrFactor,
  GuardCooldown,
  GuardMaxRollbacks,
  Dropout,
  Threads,
  Device,
  Out,
  InitFrom,
  PlanGpu,
  PlanGpusPerNode,
  PlanNodes,
  PlanPricePerGpuHour,
  PlanMfu,
  PlanReserveGib,
  PlanRestarts,
  PlanRestartMinutes,
  PlanStorageWriteGbps,
  PlanStorageReadGbps,
  PlanObservedDays,
  PlanObservedStepTime,
  PlanGradPrecision,
};

/// The groups of keys that one function of the parser sets (applyKey).
enum class Section { Model, Optimizer, Batch, Run, Precision, Parallel, Guard,
                     Plan };
Section sectionKind(Key key);

/// How a value is read; the same reader serves YAML scalars and flags.
enum class Kind {
  Positive,    // integer >= 1
  NonNegative, // integer >= 0
  Number,      // finite double, range checked per key
  Bool,
  String,
  Path,  // a string; relative paths in the file resolve against its dir
  Paths, // a list of paths (YAML sequence, or comma separated in a flag)
  Sources, // data.train: Paths, or a YAML list of {path, weight, name}
  Numbers, // a list of numbers
  Names,   // a list of names (YAML sequence, or comma separated in a flag)
  Bytes,   // a size: an integer with an optional KiB/MiB/GiB suffix
  Model,   // scalar (preset or path) or an inline mapping
};
/// Whether a key of this kind takes a list (a YAML sequence, or comma
/// separated in a flag).
bool isListKind(Kind kind);

struct KeyInfo {
  Key key;
  StringRef path;   // YAML path, sections joined by '.'
  Kind kind;
  StringRef values; // for the help: what may be given
  StringRef help;
};

/// Every key, in the order of the help and the reference.
ArrayRef<KeyInfo> keyTable();
const KeyInfo &info(Key key);
/// "optimizer" of "optimizer.lr"; empty for a top-level key.
StringRef sectionOf(StringRef path);
/// "lr" of "optimizer.lr"; a top-level key itself.
StringRef leafOf(StringRef path);
/// The flag a key is given by (without "--"), and all of its flags.
std::string primaryFlag(const KeyInfo &k);
SmallVector<std::string, 2> flagsOf(const KeyInfo &k);
const KeyInfo *lookupFlag(StringRef flag);
/// "'x' is now 'parallel.tp' ..." for a key of the former cluster file.
std::optional<std::string> renamedKeyMessage(StringRef name);
/// "--x is now --y ..." for a former flag (without "--").
std::optional<std::string> renamedFlagMessage(StringRef name);

//===----------------------------------------------------------------------===//
// Values and the parser
//===----------------------------------------------------------------------===//

/// One source of data.train given as a mapping: `path` (a pattern or a
/// list of them), `weight` and `name` as written, and where each was.
struct SourceValue {
  SmallVector<std::string, 2> paths;
  std::optional<std::string> weight, name;
  SMRange range, weightRange, nameRange;
};

struct Value {
  SmallVector<std::string, 2> items; // one for scalars
  /// data.train as a list of mappings (then `items` is empty).
  std::vector<SourceValue> sources;
  bool isList = false;
  SMRange range;    // in the file, when it came from there
  std::string flag; // "--lr", when it came from the command line
  /// An inline model: the config file's text with everything outside the
  /// model mapping blanked out, so its diagnostics keep line and column.
  std::optional<std::string> inlineModel;
};

/// The shortest text that reads back as `value`.
std::string formatDouble(double value);

inline bool isInteger(StringRef text) {
  return !text.empty() && all_of(text, isDigit);
}

class ValueReader;

class Parser {
public:
  Parser(const config::YamlFile &file, StringRef baseDir,
         TrainingConfigUse use)
      : file(file), bufferName(file.bufferName()), baseDir(baseDir),
        use(use) {}

  Error collectFile(const config::YNode &root);
  Error collectFlags(ArrayRef<std::string> flags);
  Expected<TrainingConfig> apply();

  Error errorAt(const Value &value, StringRef path, const Twine &message);

private:
  Error errorAtKey(Key key, const Twine &message);
  Error collectMapping(const config::YNode &mapping, StringRef section);
  Error collectValue(const KeyInfo &k, const config::YNode &node);
  Error collectSources(const KeyInfo &k, const config::YNode &node,
                       Value &value);
  Error applySources(const ValueReader &r, TrainingConfig &c);
  void closeInlineModel(const char *end);
  Error applyKey(const KeyInfo &k, const Value &value, TrainingConfig &c);
  Error applyModelKey(const ValueReader &r, TrainingConfig &c);
  Error applyOptimizerKey(const ValueReader &r, TrainingConfig &c);
  Error applyBatchKey(const ValueReader &r, TrainingConfig &c);
  Error applyRunKey(const ValueReader &r, TrainingConfig &c);
  Error applyPrecisionKey(const ValueReader &r, TrainingConfig &c);
  Error applyParallelKey(const ValueReader &r, TrainingConfig &c);
  Error applyGuardKey(const ValueReader &r, TrainingConfig &c);
  Error applyPlanKey(const ValueReader &r, TrainingConfig &c);
  Error validate(TrainingConfig &c);
  Error validatePlan(TrainingConfig &c);
  std::string resolve(const Value &value, StringRef path) const;

  const config::YamlFile &file;
  StringRef bufferName;
  StringRef baseDir;
  TrainingConfigUse use;
  std::map<Key, Value> values;
  const char *inlineModelStart = nullptr;
};

/// Reads one key's value as its kind says, with errors at the key (file
/// line:col or the flag).
class ValueReader {
public:
  ValueReader(Parser &parser, const KeyInfo &k, const Value &value)
      : parser(parser), k(k), value(value),
        text(value.items.empty() ? StringRef() : StringRef(value.items[0])) {}

  Error fail(const Twine &message) const {
    return parser.errorAt(value, k.path, message);
  }

  /// An integer >= min; integral numbers written as floats too
  /// (max_tokens: 1e6).
  Error getInt(int64_t &field, int64_t min) const {
    uint64_t parsed = 0;
    double asDouble = 0;
    if (isInteger(text) && !text.getAsInteger(10, parsed) &&
        parsed <= uint64_t(INT64_MAX)) {
      asDouble = double(parsed);
    } else if (!text.empty() && !text.getAsDouble(asDouble) &&
               std::isfinite(asDouble) && asDouble == std::trunc(asDouble) &&
               asDouble >= 0 && asDouble < 9.2e18) {
      parsed = uint64_t(asDouble);
    } else {
      return fail("expected " +
                  Twine(min > 0 ? "a positive" : "a non-negative") +
                  " integer, got '" + text + "'");
    }
    if (int64_t(parsed) < min)
      return fail("expected a positive integer, got '" + text + "'");
    field = int64_t(parsed);
    return Error::success();
  }

  /// A finite number in [min, max] (max excluded with `maxOpen`); `range`
  /// says so in the error.
  Error getNumber(StringRef item, double &field, double min, double max,
                  bool maxOpen, StringRef range) const {
    double parsed = 0;
    if (item.trim().empty() || item.getAsDouble(parsed) ||
        !std::isfinite(parsed))
      return fail("expected a number, got '" + item + "'");
    if (parsed < min || parsed > max || (maxOpen && parsed == max))
      return fail(item + " is out of range; expected " + range);
    field = parsed;
    return Error::success();
  }
  Error getNumber(double &field, double min, double max, bool maxOpen,
                  StringRef range) const {
    return getNumber(text, field, min, max, maxOpen, range);
  }
  /// A number above 0 (and at most `max`).
  Error getPositive(double &field, double max = INFINITY) const {
    double parsed = 0;
    std::string range =
        max == INFINITY ? "a value > 0"
                        : ("a value > 0 and <= " + formatDouble(max));
    if (Error err = getNumber(parsed, 0, max, false, range))
      return err;
    if (parsed == 0)
      return fail(text + " is out of range; expected " + range);
    field = parsed;
    return Error::success();
  }

  Error getBool(bool &field) const {
    if (text == "true" || text == "1") {
      field = true;
      return Error::success();
    }
    if (text == "false" || text == "0") {
      field = false;
      return Error::success();
    }
    return fail("expected true or false, got '" + text + "'");
  }

  Parser &parser;
  const KeyInfo &k;
  const Value &value;
  StringRef text;
};

} // namespace mlir::llmc::trainconfig

#endif // LLMC_FRONTEND_TRAINCONFIGPARSER_H
