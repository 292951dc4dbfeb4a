// The training config: one table of keys for the YAML file, the command-line
// flags and the help text; values from both go through the same checks.
#include "frontend/TrainConfig.h"

#include "frontend/ConfigYaml.h"
#include "frontend/PlanConfig.h"

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

namespace {

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
};

/// How a value is read; the same reader serves YAML scalars and flags.
enum class Kind {
  Positive,    // integer >= 1
  NonNegative, // integer >= 0
  Number,      // finite double, range checked per key
  Bool,
  String,
  Path,  // a string; relative paths in the file resolve against its dir
  Paths, // a list of paths (YAML sequence, or comma separated in a flag)
  Numbers, // a list of numbers
  Names,   // a list of names (YAML sequence, or comma separated in a flag)
  Bytes,   // a size: an integer with an optional KiB/MiB/GiB suffix
  Model,   // scalar (preset or path) or an inline mapping
};

/// Whether a key of this kind takes a list (a YAML sequence, or comma
/// separated in a flag).
bool isListKind(Kind kind) {
  return kind == Kind::Paths || kind == Kind::Numbers || kind == Kind::Names;
}

struct KeyInfo {
  Key key;
  StringRef path;   // YAML path, sections joined by '.'
  Kind kind;
  StringRef values; // for the help: what may be given
  StringRef help;
};

// Sections whose keys are flags by their leaf name (when no other key has
// the same leaf); keys of other sections are flags by their whole path
// (`--batch-size-rampup-start`).
constexpr StringRef kLeafFlagSections[] = {"optimizer", "schedule", "data",
                                           "parallel"};

const KeyInfo kKeys[] = {
    {Key::Model, "model", Kind::Model, "PRESET|FILE|{...}",
     "the model: a preset, a model .yaml or .mlir, or an inline mapping of "
     "model config keys"},
    {Key::OptimizerName, "optimizer.name", Kind::String, "adamw|sgd",
     "the optimizer (default adamw)"},
    {Key::Lr, "optimizer.lr", Kind::Number, "X", "peak learning rate (3e-4)"},
    {Key::Betas, "optimizer.betas", Kind::Numbers, "B1,B2",
     "AdamW betas (0.9, 0.95)"},
    {Key::Eps, "optimizer.eps", Kind::Number, "X", "AdamW epsilon (1e-8)"},
    {Key::WeightDecay, "optimizer.weight_decay", Kind::Number, "X",
     "decoupled weight decay (0.1)"},
    {Key::Momentum, "optimizer.momentum", Kind::Number, "X",
     "SGD momentum (0.9)"},
    {Key::Nesterov, "optimizer.nesterov", Kind::Bool, "BOOL",
     "SGD Nesterov momentum (false)"},
    {Key::GradClip, "optimizer.grad_clip", Kind::Number, "X",
     "clip the global gradient norm to X; 0 turns clipping off (1.0)"},
    {Key::DecayNormsAndBiases, "optimizer.decay_norms_and_biases", Kind::Bool,
     "BOOL", "weight decay on biases and norm weights too (false)"},
    {Key::ScheduleName, "schedule.name", Kind::String,
     "constant|cosine|linear|one_cycle", "learning-rate schedule (cosine)"},
    {Key::WarmupSteps, "schedule.warmup_steps", Kind::NonNegative, "N",
     "linear warmup steps (Megatron --lr-warmup-iters; 0)"},
    {Key::DecaySteps, "schedule.decay_steps", Kind::NonNegative, "N",
     "step at which the decay reaches min_lr (--lr-decay-iters; default "
     "max_steps)"},
    {Key::MinLr, "schedule.min_lr", Kind::Number, "X",
     "learning rate at the end of the decay (--min-lr; 0)"},
    {Key::GlobalBatchSize, "global_batch_size", Kind::Positive, "N",
     "sequences per optimizer step (default micro_batch_size)"},
    {Key::MicroBatchSize, "micro_batch_size", Kind::Positive, "N",
     "sequences per forward/backward; global / micro gradients are "
     "accumulated (4)"},
    {Key::SeqLen, "seq_len", Kind::Positive, "N",
     "tokens per sequence (default the model's seq_len)"},
    {Key::RampupStart, "batch_size_rampup.start", Kind::NonNegative, "N",
     "batch-size ramp-up (Megatron --rampup-batch-size): first global "
     "batch; 0 is off"},
    {Key::RampupIncrement, "batch_size_rampup.increment", Kind::Positive, "N",
     "batch-size ramp-up: growth of each increment"},
    {Key::RampupSamples, "batch_size_rampup.samples", Kind::NonNegative, "N",
     "batch-size ramp-up: samples over which it reaches global_batch_size"},
    {Key::SeqLenWarmupStart, "seq_len_warmup.start", Kind::Positive, "N",
     "sequence-length warmup: first length (grows in steps of 8)"},
    {Key::SeqLenWarmupSteps, "seq_len_warmup.steps", Kind::NonNegative, "N",
     "sequence-length warmup: steps to reach seq_len; 0 is off"},
    {Key::MaxSteps, "max_steps", Kind::Positive, "N",
     "optimizer steps to train (this or max_tokens)"},
    {Key::MaxTokens, "max_tokens", Kind::Positive, "N",
     "tokens to train on (this or max_steps)"},
    {Key::DataTrain, "data.train", Kind::Paths, "FILE,...",
     "training text files or llm.c token shards (globs allowed)"},
    {Key::DataVal, "data.val", Kind::Paths, "FILE,...",
     "validation files (default: val_fraction of the training data)"},
    {Key::DataValFraction, "data.val_fraction", Kind::Number, "X",
     "fraction of the training data held out for validation when no val "
     "files are given (0)"},
    {Key::DataTokenizer, "data.tokenizer", Kind::Path, "byte|DIR",
     "byte, or a GPT-2 BPE directory (vocab.json, merges.txt) (byte)"},
    {Key::LogInterval, "log_interval", Kind::Positive, "N",
     "steps between progress lines and metrics (10)"},
    {Key::Progress, "progress", Kind::String, "auto|bar|lines",
     "how progress shows: a live bar with tokens/s, MFU, ETA and loss "
     "above the logged lines (bar), the lines only (lines), or bar on a "
     "terminal and lines elsewhere (auto)"},
    {Key::EvalInterval, "eval_interval", Kind::NonNegative, "N",
     "steps between evaluations; 0: only at the end (100)"},
    {Key::EvalSteps, "eval_steps", Kind::NonNegative, "N",
     "validation batches per evaluation; 0: no validation loss (10)"},
    {Key::SampleTokens, "sample_tokens", Kind::NonNegative, "N",
     "tokens sampled at each evaluation; 0: none (64)"},
    {Key::CheckpointInterval, "checkpoint_interval", Kind::NonNegative, "N",
     "steps between checkpoints; 0: only at the end (0)"},
    {Key::KeepCheckpoints, "keep_checkpoints", Kind::NonNegative, "K",
     "keep the last K checkpoints; 0 keeps all (3)"},
    {Key::Seed, "seed", Kind::NonNegative, "N",
     "initialization, data order, dropout and sampling (1337)"},
    {Key::Precision, "precision", Kind::String, "fp32|fp16|bf16",
     "fp32, or mixed precision (llmc-amp): allow-listed ops (matmuls, "
     "attention) in fp16 or bf16, fp32 master weights and optimizer state "
     "(fp32)"},
    {Key::AmpAllow, "amp.allow", Kind::Names, "OP,...",
     "ops moved onto the low-precision list, e.g. llmc.softmax"},
    {Key::AmpDeny, "amp.deny", Kind::Names, "OP,...",
     "ops moved onto the fp32 list, e.g. llmc.matmul"},
    {Key::LossScaleInitialPower, "loss_scale.initial_scale_power",
     Kind::Number, "X", "fp16: the loss scale starts at 2^X (16)"},
    {Key::LossScaleWindow, "loss_scale.window", Kind::Positive, "N",
     "fp16: clean steps in a row before the scale doubles (1000)"},
    {Key::LossScaleHysteresis, "loss_scale.hysteresis", Kind::Positive, "N",
     "fp16: overflows it takes to halve the scale (2)"},
    {Key::LossScaleMin, "loss_scale.min_scale", Kind::Number, "X",
     "fp16: the smallest scale; overflowing there stops the run (1)"},
    {Key::LossScaleConsecutiveHysteresis, "loss_scale.consecutive_hysteresis",
     Kind::Bool, "BOOL",
     "fp16: a clean step restores the hysteresis (false)"},
    {Key::Remat, "remat", Kind::String, "none|full|selective|budget",
     "activation checkpointing (llmc-remat): none; full (keep each "
     "transformer block's input, recompute the block); selective (keep "
     "matmul and attention outputs, recompute the cheap ops); budget (fit "
     "remat_budget) (none)"},
    {Key::RematBudget, "remat_budget", Kind::Bytes, "SIZE",
     "remat budget: the planned activation peak must fit, e.g. 512MiB"},
    {Key::SparsityPattern, "sparsity.pattern", Kind::String, "2:4",
     "structured sparsity (llmc-sparsify, Apex ASP's m4n2_1d): keep the 2 "
     "largest magnitudes of every 4 along each selected weight's reduction "
     "dimension; giving any sparsity key turns it on (2:4)"},
    {Key::SparsityPruneAtStep, "sparsity.prune_at_step", Kind::NonNegative,
     "N", "sparsity: train densely for N steps, then prune once and "
          "fine-tune with the masks fixed; 0 prunes the initial (e.g. "
          "init_from) weights (0)"},
    {Key::SparsityParams, "sparsity.params", Kind::Names, "GLOB,...",
     "sparsity: parameter-name patterns of the weights to prune, e.g. "
     "h.*.mlp.* (default: every matmul weight inside the transformer "
     "blocks, not the embeddings or the classifier)"},
    {Key::ParallelDp, "parallel.dp", Kind::Positive, "N",
     "data-parallel ranks (llmc-shard); dp * tp * pp must equal the "
     "launcher's world size, e.g. mpirun -np N (default: world / (tp * pp))"},
    {Key::ParallelTp, "parallel.tp", Kind::Positive, "N",
     "tensor-parallel ranks (Megatron-LM, llmc-tensor-parallel): attention "
     "heads, the MLP's hidden units and the vocabulary (embedding, "
     "classifier, cross-entropy) are split over them; "
     "the world size is dp * tp * pp, ranks tp-fastest (1)"},
    {Key::ParallelSp, "parallel.sp", Kind::Bool, "BOOL",
     "sequence parallelism (Korthikanti et al.) with tp above 1: norms, "
     "dropout, biases and residual adds run on each tp rank's 1/tp of the "
     "sequence (all-gather and reduce-scatter in place of the all-reduces); "
     "seq_len must be a multiple of tp (false)"},
    {Key::ParallelPp, "parallel.pp", Kind::Positive, "N",
     "pipeline-parallel stages (llmc-pipeline-parallel): the transformer "
     "blocks are cut into pp stages balanced by the planner's FLOPs (the "
     "cut is printed; llmc plan shows the same) and run in the 1F1B order "
     "over the micro-batches; pp at most n_layer (1)"},
    {Key::ParallelZero, "parallel.zero", Kind::NonNegative, "0-3",
     "ZeRO stage: 0 replicates all state (DDP), 1 shards the optimizer "
     "state, 2 also the gradients, 3 also the parameters; with pp, over "
     "each stage's dp ranks (0)"},
    {Key::ParallelBucketMb, "parallel.bucket_mb", Kind::Number, "X",
     "gradient all-reduce bucket cap in MiB, DDP's bucket_cap_mb (25)"},
    {Key::ParallelTimeout, "parallel.timeout", Kind::Number, "SECONDS",
     "a collective that makes no progress this long names the rank that "
     "did not arrive and stops the job (30)"},
    {Key::GuardAction, "guard.action", Kind::String, "off|warn|stop|rollback",
     "on a loss or gradient-norm spike: nothing (off), log it (warn), stop "
     "(stop), or go back to the last snapshot, skip the data since, lower "
     "the lr and retry (rollback); a NaN/inf loss or gradient norm stops the "
     "run unless rollback (warn)"},
    {Key::GuardWindow, "guard.window", Kind::Positive, "N",
     "steps of loss and gradient-norm history spikes are judged against; "
     "none before it is full (50)"},
    {Key::GuardZscore, "guard.zscore", Kind::Number, "Z",
     "a spike: loss above the window's mean + Z standard deviations; 0 is "
     "off (6)"},
    {Key::GuardRatio, "guard.ratio", Kind::Number, "R",
     "a spike: loss above R x the window's mean; 0 is off (0)"},
    {Key::GuardMaxGradNormRatio, "guard.max_grad_norm_ratio", Kind::Number,
     "R", "a spike: gradient norm above R x the window's median; 0 is off "
     "(0)"},
    {Key::GuardSnapshotInterval, "guard.snapshot_interval", Kind::Positive,
     "N", "rollback: steps between in-memory snapshots of the training state "
     "(checkpoints are snapshots too) (50)"},
    {Key::GuardLrFactor, "guard.lr_factor", Kind::Number, "X",
     "rollback: multiply the learning rate by X (0 < X <= 1) (0.5)"},
    {Key::GuardCooldown, "guard.cooldown", Kind::NonNegative, "N",
     "rollback: steps the lower learning rate lasts; 0: the rest of the "
     "run (100)"},
    {Key::GuardMaxRollbacks, "guard.max_rollbacks", Kind::Positive, "N",
     "rollback: more rollbacks in a row without getting past the spike "
     "stop the run (3)"},
    {Key::Dropout, "dropout", Kind::Number, "X",
     "overrides the model's dropout rate"},
    {Key::Threads, "threads", Kind::NonNegative, "N",
     "CPU threads; 0: all (0)"},
    {Key::Device, "device", Kind::String, "cpu|cuda",
     "where the steps run: cpu, or cuda (an NVIDIA GPU; driver loaded at run "
     "time) (cpu)"},
    {Key::Out, "out", Kind::String, "DIR",
     "output directory: metrics.jsonl, loss.svg, checkpoints/ (default "
     "runs/<config name>)"},
    {Key::InitFrom, "init_from", Kind::Path, "FILE",
     "start from these weights: an llm.c checkpoint or safetensors"},
};

const KeyInfo &info(Key key) {
  for (const KeyInfo &k : kKeys)
    if (k.key == key)
      return k;
  llvm_unreachable("key not in the table");
}

StringRef sectionOf(StringRef path) {
  size_t dot = path.find('.');
  return dot == StringRef::npos ? StringRef() : path.take_front(dot);
}
StringRef leafOf(StringRef path) { return path.rsplit('.').second.empty()
                                              ? path
                                              : path.rsplit('.').second; }

std::string dashes(StringRef text) {
  std::string result = text.str();
  for (char &c : result)
    if (c == '_' || c == '.')
      c = '-';
  return result;
}

/// The flag a key is given by: the section name for a section's `name`
/// (`--optimizer sgd`), the leaf for keys of the optimizer, schedule and
/// data sections when no other key ends the same, else the whole path.
std::string primaryFlag(const KeyInfo &k) {
  StringRef section = sectionOf(k.path);
  if (section.empty())
    return dashes(k.path);
  StringRef leaf = leafOf(k.path);
  if (leaf == "name")
    return dashes(section);
  if (is_contained(kLeafFlagSections, section) &&
      count_if(kKeys, [&](const KeyInfo &o) {
        return leafOf(o.path) == leaf;
      }) == 1)
    return dashes(leaf);
  return dashes(k.path);
}

/// Every flag of a key: the primary one and the whole path.
SmallVector<std::string, 2> flagsOf(const KeyInfo &k) {
  SmallVector<std::string, 2> flags = {primaryFlag(k)};
  if (dashes(k.path) != flags[0])
    flags.push_back(dashes(k.path));
  return flags;
}

const KeyInfo *lookupFlag(StringRef flag) {
  for (const KeyInfo &k : kKeys)
    for (const std::string &f : flagsOf(k))
      if (f == flag)
        return &k;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Values and where they came from
//===----------------------------------------------------------------------===//

struct Value {
  SmallVector<std::string, 2> items; // one for scalars
  bool isList = false;
  SMRange range;    // in the file, when it came from there
  std::string flag; // "--lr", when it came from the command line
  /// An inline model: the config file's text with everything outside the
  /// model mapping blanked out, so its diagnostics keep line and column.
  std::optional<std::string> inlineModel;
};

std::string formatDouble(double value) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  return buf;
}

class Parser {
public:
  Parser(const config::YamlFile &file, StringRef baseDir,
         TrainingConfigUse use)
      : file(file), bufferName(file.bufferName()), baseDir(baseDir),
        use(use) {}

  Error collectFile(const config::YNode &root);
  Error collectFlags(ArrayRef<std::string> flags);
  Expected<TrainingConfig> apply();

private:
  Error errorAt(const Value &value, StringRef path, const Twine &message);
  Error errorAtKey(Key key, const Twine &message);
  Error collectMapping(const config::YNode &mapping, StringRef section);
  Error collectValue(const KeyInfo &k, const config::YNode &node);
  void closeInlineModel(const char *end);
  Error applyKey(const KeyInfo &k, const Value &value, TrainingConfig &c);
  Error validate(TrainingConfig &c);
  std::string resolve(const Value &value, StringRef path) const;

  const config::YamlFile &file;
  StringRef bufferName;
  StringRef baseDir;
  TrainingConfigUse use;
  std::map<Key, Value> values;
  const char *inlineModelStart = nullptr;
};

Error makeError(StringRef text) {
  return createStringError(std::make_error_code(std::errc::invalid_argument),
                           text.rtrim());
}

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
  for (const KeyInfo &k : kKeys) {
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
    if (is_contained(plan::clusterConfigKeys(), name))
      return "'" + name.str() +
             "' is a key of the cluster schema, not of the training "
             "config: give it in the file of `llmc plan --cluster` (or "
             "as a flag of llmc plan)";
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
            section.empty() && any_of(kKeys, [&](const KeyInfo &k) {
              return sectionOf(k.path) == name;
            });
        if (isSection) {
          if (node.kind == YNode::Kind::Mapping)
            return collectMapping(node, name);
          if (node.kind == YNode::Kind::Scalar)
            for (const KeyInfo &k : kKeys)
              if (k.path == path + ".name")
                return collectValue(k, node);
          Value where;
          where.range = node.range;
          return errorAt(where, name,
                         "expected a mapping, got " + node.describe());
        }
        for (const KeyInfo &k : kKeys)
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
    if (!k) {
      std::string best;
      unsigned bestDistance = 3;
      for (const KeyInfo &key : kKeys)
        for (const std::string &f : flagsOf(key)) {
          unsigned d = name.edit_distance(f, true, bestDistance);
          if (d < bestDistance) {
            bestDistance = d;
            best = f;
          }
        }
      return makeError(
          ("unknown option '--" + name + "'" +
           (best.empty() ? std::string("; see 'llmc run --help'")
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

bool isInteger(StringRef text) {
  return !text.empty() && all_of(text, isDigit);
}

Error Parser::applyKey(const KeyInfo &k, const Value &value,
                       TrainingConfig &c) {
  StringRef text = value.items.empty() ? StringRef() : value.items[0];
  auto fail = [&](const Twine &message) {
    return errorAt(value, k.path, message);
  };
  auto getInt = [&](int64_t &field, int64_t min) -> Error {
    uint64_t parsed = 0;
    // Accept integral numbers written as floats too (max_tokens: 1e6).
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
  };
  auto getNumber = [&](StringRef item, double &field, double min, double max,
                       bool maxOpen, StringRef range) -> Error {
    double parsed = 0;
    if (item.trim().empty() || item.getAsDouble(parsed) ||
        !std::isfinite(parsed))
      return fail("expected a number, got '" + item + "'");
    if (parsed < min || parsed > max || (maxOpen && parsed == max))
      return fail(item + " is out of range; expected " + range);
    field = parsed;
    return Error::success();
  };
  auto getBool = [&](bool &field) -> Error {
    if (text == "true" || text == "1") {
      field = true;
      return Error::success();
    }
    if (text == "false" || text == "0") {
      field = false;
      return Error::success();
    }
    return fail("expected true or false, got '" + text + "'");
  };
  const double inf = INFINITY;

  switch (k.key) {
  case Key::Model: {
    if (value.inlineModel) {
      Expected<ModelConfig> model =
          parseModelConfig(*value.inlineModel, bufferName);
      if (!model)
        return model.takeError();
      c.model = std::move(*model);
      c.modelSource = "(inline)";
      return Error::success();
    }
    if (text.trim().starts_with("{")) {
      // Inline keys on the command line: --model '{preset: gpt2, n_layer: 2}'.
      Expected<ModelConfig> model =
          parseModelConfig(text, "--" + value.flag);
      if (!model)
        return model.takeError();
      c.model = std::move(*model);
      c.modelSource = "(inline)";
      return Error::success();
    }
    c.modelSource = text.str();
    if (text.ends_with(".mlir") || text.ends_with(".yaml") ||
        text.ends_with(".yml") || text.contains('/')) {
      std::string path = resolve(value, text);
      if (!sys::fs::exists(path))
        return fail("no such file '" + path + "'");
      if (text.ends_with(".mlir")) {
        c.modelMlirPath = path;
        return Error::success();
      }
      Expected<ModelConfig> model = loadModelConfigFile(path);
      if (!model)
        return model.takeError();
      c.model = std::move(*model);
      return Error::success();
    }
    std::optional<ModelConfig> preset = getModelPreset(text);
    if (!preset)
      return fail("'" + text +
                  "' is neither a model file (.yaml, .mlir), inline keys "
                  "({n_layer: 2, ...}) nor a preset; " +
                  describePresetsFor(text));
    c.model = std::move(*preset);
    return Error::success();
  }
  case Key::OptimizerName:
    if (text == "adamw")
      c.optimizer.kind = OptimizerConfig::Kind::AdamW;
    else if (text == "sgd")
      c.optimizer.kind = OptimizerConfig::Kind::SGD;
    else
      return fail("unknown optimizer '" + text + "'; expected adamw or sgd");
    return Error::success();
  case Key::Lr:
    return getNumber(text, c.schedule.lr, 0, inf, true, "a value >= 0");
  case Key::Betas: {
    if (value.items.size() != 2)
      return fail("expected two numbers [beta1, beta2], got " +
                  Twine(value.items.size()));
    if (Error err = getNumber(value.items[0], c.optimizer.beta1, 0, 1, true,
                              "a value in [0, 1)"))
      return err;
    return getNumber(value.items[1], c.optimizer.beta2, 0, 1, true,
                     "a value in [0, 1)");
  }
  case Key::Eps:
    return getNumber(text, c.optimizer.epsilon, 0, inf, true, "a value >= 0");
  case Key::WeightDecay:
    return getNumber(text, c.optimizer.weightDecay, 0, inf, true,
                     "a value >= 0");
  case Key::Momentum:
    return getNumber(text, c.optimizer.momentum, 0, 1, true,
                     "a value in [0, 1)");
  case Key::Nesterov:
    return getBool(c.optimizer.nesterov);
  case Key::GradClip:
    return getNumber(text, c.optimizer.maxGradNorm, 0, inf, true,
                     "a value >= 0 (0 turns clipping off)");
  case Key::DecayNormsAndBiases:
    return getBool(c.optimizer.decayNormsAndBiases);
  case Key::ScheduleName: {
    std::optional<LrSchedule::Kind> kind =
        ::llmc::parseLrScheduleKind(text);
    if (!kind)
      return fail("unknown schedule '" + text +
                  "'; expected constant, cosine, linear or one_cycle");
    c.schedule.kind = *kind;
    return Error::success();
  }
  case Key::WarmupSteps:
    return getInt(c.schedule.warmupSteps, 0);
  case Key::DecaySteps:
    return getInt(c.schedule.decaySteps, 0);
  case Key::MinLr:
    return getNumber(text, c.schedule.minLr, 0, inf, true, "a value >= 0");
  case Key::GlobalBatchSize:
    return getInt(c.globalBatchSize, 1);
  case Key::MicroBatchSize:
    return getInt(c.microBatchSize, 1);
  case Key::SeqLen:
    return getInt(c.seqLen, 1);
  case Key::RampupStart:
    return getInt(c.batchRampup.start, 0);
  case Key::RampupIncrement:
    return getInt(c.batchRampup.increment, 1);
  case Key::RampupSamples:
    return getInt(c.batchRampup.samples, 0);
  case Key::SeqLenWarmupStart:
    return getInt(c.seqLenWarmup.start, 1);
  case Key::SeqLenWarmupSteps:
    return getInt(c.seqLenWarmup.steps, 0);
  case Key::MaxSteps:
    return getInt(c.maxSteps, 1);
  case Key::MaxTokens:
    return getInt(c.maxTokens, 1);
  case Key::DataTrain:
  case Key::DataVal: {
    std::vector<std::string> &files =
        k.key == Key::DataTrain ? c.data.train : c.data.val;
    files.clear();
    for (const std::string &item : value.items) {
      if (item.empty())
        return fail("empty file name");
      files.push_back(resolve(value, item));
    }
    if (k.key == Key::DataTrain && files.empty())
      return fail("expected at least one file");
    return Error::success();
  }
  case Key::DataValFraction:
    return getNumber(text, c.data.valFraction, 0, 1, true,
                     "a value in [0, 1)");
  case Key::DataTokenizer:
    if (text.empty())
      return fail("expected 'byte' or a BPE tokenizer directory");
    c.data.tokenizer = text == "byte" ? "byte" : resolve(value, text);
    return Error::success();
  case Key::LogInterval:
    return getInt(c.logInterval, 1);
  case Key::EvalInterval:
    return getInt(c.evalInterval, 0);
  case Key::EvalSteps:
    return getInt(c.evalSteps, 0);
  case Key::SampleTokens:
    return getInt(c.sampleTokens, 0);
  case Key::CheckpointInterval:
    return getInt(c.checkpointInterval, 0);
  case Key::KeepCheckpoints:
    return getInt(c.keepCheckpoints, 0);
  case Key::Seed: {
    uint64_t seed = 0;
    if (!isInteger(text) || text.getAsInteger(10, seed))
      return fail("expected a non-negative integer, got '" + text + "'");
    c.seed = seed;
    return Error::success();
  }
  case Key::Precision:
    if (text == "fp32")
      c.precision.kind = PrecisionConfig::Kind::FP32;
    else if (text == "fp16")
      c.precision.kind = PrecisionConfig::Kind::FP16;
    else if (text == "bf16")
      c.precision.kind = PrecisionConfig::Kind::BF16;
    else
      return fail("unknown precision '" + text +
                  "'; expected fp32, fp16 or bf16");
    return Error::success();
  case Key::AmpAllow:
  case Key::AmpDeny: {
    std::vector<std::string> &names = k.key == Key::AmpAllow
                                          ? c.precision.allow
                                          : c.precision.deny;
    names.clear();
    for (const std::string &item : value.items) {
      StringRef name = StringRef(item).trim();
      if (!name.starts_with("llmc.") || name.size() == 5)
        return fail("'" + name + "' is not an llmc op name (e.g. llmc.softmax)");
      names.push_back(name.str());
    }
    return Error::success();
  }
  case Key::LossScaleInitialPower:
    return getNumber(text, c.lossScale.initialScalePower, 0, 127, false,
                     "a value in [0, 127]");
  case Key::LossScaleWindow:
    return getInt(c.lossScale.window, 1);
  case Key::LossScaleHysteresis:
    return getInt(c.lossScale.hysteresis, 1);
  case Key::LossScaleMin:
    return getNumber(text, c.lossScale.minScale, 0x1p-126, 0x1p127, false,
                     "a value in [2^-126, 2^127]");
  case Key::LossScaleConsecutiveHysteresis:
    return getBool(c.lossScale.consecutiveHysteresis);
  case Key::Remat:
    if (text == "none")
      c.remat.policy = RematConfig::Policy::None;
    else if (text == "full")
      c.remat.policy = RematConfig::Policy::Full;
    else if (text == "selective")
      c.remat.policy = RematConfig::Policy::Selective;
    else if (text == "budget")
      c.remat.policy = RematConfig::Policy::Budget;
    else
      return fail("unknown remat policy '" + text +
                  "'; expected none, full, selective or budget");
    return Error::success();
  case Key::RematBudget: {
    std::optional<int64_t> bytes = ::llmc::parseByteSize(text);
    if (!bytes)
      return fail("expected a positive size such as 512MiB, 2GiB or 1000000, "
                  "got '" + text + "'");
    c.remat.budgetBytes = *bytes;
    return Error::success();
  }
  case Key::SparsityPattern:
    if (text != "2:4")
      return fail("unknown sparsity pattern '" + text + "'; expected 2:4");
    c.sparsity.enabled = true;
    c.sparsity.pattern = text;
    return Error::success();
  case Key::SparsityPruneAtStep:
    c.sparsity.enabled = true;
    return getInt(c.sparsity.pruneAtStep, 0);
  case Key::SparsityParams:
    c.sparsity.enabled = true;
    c.sparsity.params.clear();
    for (const std::string &item : value.items)
      c.sparsity.params.push_back(StringRef(item).trim().str());
    return Error::success();
  case Key::ParallelDp:
    return getInt(c.parallel.dp, 1);
  case Key::ParallelTp:
    return getInt(c.parallel.tp, 1);
  case Key::ParallelSp:
    return getBool(c.parallel.sp);
  case Key::ParallelPp:
    return getInt(c.parallel.pp, 1);
  case Key::ParallelZero:
    if (Error err = getInt(c.parallel.zero, 0))
      return err;
    if (c.parallel.zero > 3)
      return fail("ZeRO stage " + text + " does not exist; expected 0, 1, 2 "
                  "or 3");
    return Error::success();
  case Key::ParallelBucketMb:
    return getNumber(text, c.parallel.bucketMb, 1.0 / 1024, 1 << 20, false,
                     "a size in MiB in [1/1024, 2^20]");
  case Key::ParallelTimeout:
    return getNumber(text, c.parallel.timeoutSeconds, 0.1, 86400, false,
                     "seconds in [0.1, 86400]");
  case Key::GuardAction:
    if (text != "off" && text != "warn" && text != "stop" &&
        text != "rollback")
      return fail("unknown action '" + text +
                  "'; expected off, warn, stop or rollback");
    c.guard.action = text.str();
    return Error::success();
  case Key::GuardWindow:
    if (Error err = getInt(c.guard.window, 1))
      return err;
    if (c.guard.window < 2)
      return fail("expected at least 2 steps (a standard deviation needs "
                  "two), got '" + text + "'");
    return Error::success();
  case Key::GuardZscore:
    return getNumber(text, c.guard.zscore, 0, inf, true,
                     "a value >= 0 (0 turns it off)");
  case Key::GuardRatio:
  case Key::GuardMaxGradNormRatio: {
    double &field = k.key == Key::GuardRatio ? c.guard.ratio
                                             : c.guard.maxGradNormRatio;
    if (Error err = getNumber(text, field, 0, inf, true,
                              "0 (off) or a value > 1"))
      return err;
    if (field > 0 && field <= 1)
      return fail(text + " is out of range; expected 0 (off) or a value > 1");
    return Error::success();
  }
  case Key::GuardSnapshotInterval:
    return getInt(c.guard.snapshotInterval, 1);
  case Key::GuardLrFactor:
    if (Error err = getNumber(text, c.guard.lrFactor, 0, 1, false,
                              "a value in (0, 1]"))
      return err;
    if (c.guard.lrFactor == 0)
      return fail("0 is out of range; expected a value in (0, 1]");
    return Error::success();
  case Key::GuardCooldown:
    return getInt(c.guard.cooldown, 0);
  case Key::GuardMaxRollbacks:
    return getInt(c.guard.maxRollbacks, 1);
  case Key::Dropout: {
    double rate = 0;
    if (Error err = getNumber(text, rate, 0, 1, true, "a value in [0, 1)"))
      return err;
    c.dropout = rate;
    return Error::success();
  }
  case Key::Progress:
    if (text != "auto" && text != "bar" && text != "lines")
      return fail("unknown progress display '" + text +
                  "'; expected auto, bar or lines");
    c.progress = text.str();
    return Error::success();
  case Key::Threads:
    return getInt(c.threads, 0);
  case Key::Device:
    if (text != "cpu" && text != "cuda")
      return fail("unknown device '" + text + "'; expected cpu or cuda");
    c.device = text.str();
    return Error::success();
  case Key::Out:
    if (text.empty())
      return fail("expected a directory");
    c.out = text.str();
    return Error::success();
  case Key::InitFrom:
    if (text.empty())
      return fail("expected a file");
    c.initFrom = resolve(value, text);
    if (!sys::fs::exists(c.initFrom))
      return fail("no such file '" + c.initFrom + "'");
    return Error::success();
  }
  llvm_unreachable("unknown key");
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
  if (c.out.empty()) {
    StringRef stem = sys::path::stem(bufferName);
    c.out = ("runs/" + (stem.empty() ? StringRef("run") : stem)).str();
  }
  return Error::success();
}

Expected<TrainingConfig> Parser::apply() {
  TrainingConfig c;
  c.path = bufferName.str();
  for (const KeyInfo &k : kKeys) {
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

} // namespace

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

bool mlir::llmc::isTrainingConfigFlag(StringRef flag) {
  return lookupFlag(flag.split('=').first) != nullptr;
}

void mlir::llmc::printTrainingConfigHelp(raw_ostream &os) {
  os << "Config keys (YAML path; every key is also a flag that overrides the "
        "file):\n";
  for (const KeyInfo &k : kKeys) {
    std::string flag = "--" + primaryFlag(k) + " " + k.values.str();
    os << formatv("  {0,-36} {1}\n", flag, k.path);
    os << formatv("  {0,-36}   {1}\n", "", k.help);
  }
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
  printList(os << "  ", "train", c.data.train);
  if (!c.data.val.empty())
    printList(os << "  ", "val", c.data.val);
  os << "  val_fraction: " << formatDouble(c.data.valFraction) << "\n"
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
    printList(os, "train", c.data.train);
    printList(os, "val", c.data.val);
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
