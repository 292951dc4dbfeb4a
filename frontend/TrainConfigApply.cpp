// The readers of the training config's keys, one function a section (model,
// optimizer and schedule, batch and data, run, precision, parallel, guard,
// plan), over a ValueReader.
#include "frontend/TrainConfigParser.h"

#include "frontend/PlanConfig.h"

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FileSystem.h"

using namespace llvm;
using namespace mlir::llmc;
using ::llmc::LossScaleConfig;
using ::llmc::OptimizerConfig;
using ::llmc::PrecisionConfig;
using ::llmc::RematConfig;
using ::llmc::LrSchedule;

namespace mlir::llmc::trainconfig {

/// model: a preset, a model file or inline keys.
Error Parser::applyModelKey(const ValueReader &r, TrainingConfig &c) {
  StringRef text = r.text;
  if (r.value.inlineModel) {
    Expected<ModelConfig> model =
        parseModelConfig(*r.value.inlineModel, bufferName);
    if (!model)
      return model.takeError();
    c.model = std::move(*model);
    c.modelSource = "(inline)";
    return Error::success();
  }
  if (text.trim().starts_with("{")) {
    // Inline keys on the command line: --model '{preset: gpt2, n_layer: 2}'.
    Expected<ModelConfig> model =
        parseModelConfig(text, "--" + r.value.flag);
    if (!model)
      return model.takeError();
    c.model = std::move(*model);
    c.modelSource = "(inline)";
    return Error::success();
  }
  c.modelSource = text.str();
  if (text.ends_with(".mlir") || text.ends_with(".yaml") ||
      text.ends_with(".yml") || text.contains('/')) {
    std::string path = resolve(r.value, text);
    if (!sys::fs::exists(path))
      return r.fail("no such file '" + path + "'");
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
    return r.fail("'" + text +
                  "' is neither a model file (.yaml, .mlir), inline keys "
                  "({n_layer: 2, ...}) nor a preset; " +
                  describePresetsFor(text));
  c.model = std::move(*preset);
  return Error::success();
}

/// optimizer.* and schedule.*.
Error Parser::applyOptimizerKey(const ValueReader &r, TrainingConfig &c) {
  StringRef text = r.text;
  const double inf = INFINITY;
  switch (r.k.key) {
  case Key::OptimizerName:
    if (text == "adamw") {
      c.optimizer.kind = OptimizerConfig::Kind::AdamW;
    } else if (text == "sgd") {
      c.optimizer.kind = OptimizerConfig::Kind::SGD;
    } else if (text == "adamw-8bit" && use == TrainingConfigUse::Plan) {
      // Estimated as AdamW with 8-bit moments.
      c.optimizer.kind = OptimizerConfig::Kind::AdamW;
      c.plan.estimatedOptimizer = text.str();
    } else {
      return r.fail("unknown optimizer '" + text + "'; expected adamw or sgd" +
                    (use == TrainingConfigUse::Plan
                         ? " (llmc plan also estimates adamw-8bit)"
                         : ""));
    }
    return Error::success();
  case Key::Lr:
    return r.getNumber(c.schedule.lr, 0, inf, true, "a value >= 0");
  case Key::Betas: {
    if (r.value.items.size() != 2)
      return r.fail("expected two numbers [beta1, beta2], got " +
                    Twine(r.value.items.size()));
    if (Error err = r.getNumber(r.value.items[0], c.optimizer.beta1, 0, 1,
                                true, "a value in [0, 1)"))
      return err;
    return r.getNumber(r.value.items[1], c.optimizer.beta2, 0, 1, true,
                       "a value in [0, 1)");
  }
  case Key::Eps:
    return r.getNumber(c.optimizer.epsilon, 0, inf, true, "a value >= 0");
  case Key::WeightDecay:
    return r.getNumber(c.optimizer.weightDecay, 0, inf, true, "a value >= 0");
  case Key::Momentum:
    return r.getNumber(c.optimizer.momentum, 0, 1, true, "a value in [0, 1)");
  case Key::Nesterov:
    return r.getBool(c.optimizer.nesterov);
  case Key::GradClip:
    return r.getNumber(c.optimizer.maxGradNorm, 0, inf, true,
                       "a value >= 0 (0 turns clipping off)");
  case Key::DecayNormsAndBiases:
    return r.getBool(c.optimizer.decayNormsAndBiases);
  case Key::ScheduleName: {
    std::optional<LrSchedule::Kind> kind = ::llmc::parseLrScheduleKind(text);
    if (!kind)
      return r.fail("unknown schedule '" + text +
                    "'; expected constant, cosine, linear or one_cycle");
    c.schedule.kind = *kind;
    return Error::success();
  }
  case Key::WarmupSteps:
    return r.getInt(c.schedule.warmupSteps, 0);
  case Key::DecaySteps:
    return r.getInt(c.schedule.decaySteps, 0);
  case Key::MinLr:
    return r.getNumber(c.schedule.minLr, 0, inf, true, "a value >= 0");
  default:
    llvm_unreachable("not an optimizer or schedule key");
  }
}

/// The batch, its ramp-ups, the run's length and the data.
Error Parser::applyBatchKey(const ValueReader &r, TrainingConfig &c) {
  StringRef text = r.text;
  switch (r.k.key) {
  case Key::GlobalBatchSize:
    return r.getInt(c.globalBatchSize, 1);
  case Key::MicroBatchSize:
    return r.getInt(c.microBatchSize, 1);
  case Key::SeqLen:
    return r.getInt(c.seqLen, 1);
  case Key::RampupStart:
    return r.getInt(c.batchRampup.start, 0);
  case Key::RampupIncrement:
    return r.getInt(c.batchRampup.increment, 1);
  case Key::RampupSamples:
    return r.getInt(c.batchRampup.samples, 0);
  case Key::SeqLenWarmupStart:
    return r.getInt(c.seqLenWarmup.start, 1);
  case Key::SeqLenWarmupSteps:
    return r.getInt(c.seqLenWarmup.steps, 0);
  case Key::MaxSteps:
    return r.getInt(c.maxSteps, 1);
  case Key::MaxTokens: {
    // A count with a suffix too: 300M, 180B, 1.4T.
    if (!text.empty() && isAlpha(text.back())) {
      Expected<double> count = plan::parseCount(text);
      if (!count)
        return r.fail(toString(count.takeError()));
      c.maxTokens = int64_t(*count);
      return Error::success();
    }
    return r.getInt(c.maxTokens, 1);
  }
  case Key::DataTrain:
  case Key::DataVal: {
    if (r.k.key == Key::DataTrain && !r.value.sources.empty())
      return applySources(r, c);
    if (r.k.key == Key::DataTrain)
      c.data.blend.clear();
    std::vector<std::string> &files =
        r.k.key == Key::DataTrain ? c.data.train : c.data.val;
    files.clear();
    for (const std::string &item : r.value.items) {
      if (item.empty())
        return r.fail("empty file name");
      files.push_back(resolve(r.value, item));
    }
    if (r.k.key == Key::DataTrain && files.empty())
      return r.fail("expected at least one file");
    return Error::success();
  }
  case Key::DataValFraction:
    return r.getNumber(c.data.valFraction, 0, 1, true, "a value in [0, 1)");
  case Key::DataShuffleWindows:
    return r.getInt(c.data.shuffleWindows, 1);
  case Key::DataTokenizer:
    if (text.empty())
      return r.fail("expected 'byte' or a BPE tokenizer directory");
    c.data.tokenizer = text == "byte" ? "byte" : resolve(r.value, text);
    return Error::success();
  default:
    llvm_unreachable("not a batch or data key");
  }
}

/// data.train as weighted sources; errors name the field
/// (data.train[1].weight).
Error Parser::applySources(const ValueReader &r, TrainingConfig &c) {
  c.data.train.clear();
  c.data.blend.clear();
  for (size_t i = 0; i < r.value.sources.size(); ++i) {
    const SourceValue &given = r.value.sources[i];
    std::string path = (r.k.path + "[" + Twine(i) + "]").str();
    auto failAt = [&](SMRange range, StringRef field, const Twine &message) {
      Value where = r.value;
      where.range = range.isValid() ? range : given.range;
      return errorAt(where, (path + "." + field).str(), message);
    };
    TrainSourceConfig source;
    for (const std::string &pattern : given.paths) {
      if (pattern.empty())
        return failAt(given.range, "path", "empty file name");
      source.paths.push_back(resolve(r.value, pattern));
    }
    source.name = given.name ? *given.name : given.paths.front();
    if (source.name.empty())
      return failAt(given.nameRange, "name", "empty name");
    if (given.weight) {
      StringRef text = StringRef(*given.weight).trim();
      double weight = 0;
      if (text.empty() || text.getAsDouble(weight) || !std::isfinite(weight))
        return failAt(given.weightRange, "weight",
                      "expected a number, got '" + *given.weight + "'");
      if (!(weight > 0))
        return failAt(given.weightRange, "weight",
                      text + " is not positive: a weight is the source's "
                             "share of the training windows (> 0)");
      source.weight = weight;
    }
    for (size_t j = 0; j < c.data.blend.size(); ++j)
      if (c.data.blend[j].name == source.name)
        return failAt(given.nameRange, "name",
                      "'" + source.name + "' names data.train[" + Twine(j) +
                          "] too; give each source its own name");
    c.data.blend.push_back(std::move(source));
  }
  return Error::success();
}

/// Logging, evaluation, checkpoints and where the run happens.
Error Parser::applyRunKey(const ValueReader &r, TrainingConfig &c) {
  StringRef text = r.text;
  switch (r.k.key) {
  case Key::LogInterval:
    return r.getInt(c.logInterval, 1);
  case Key::Progress:
    if (text != "auto" && text != "bar" && text != "lines")
      return r.fail("unknown progress display '" + text +
                    "'; expected auto, bar or lines");
    c.progress = text.str();
    return Error::success();
  case Key::EvalInterval:
    return r.getInt(c.evalInterval, 0);
  case Key::EvalSteps:
    return r.getInt(c.evalSteps, 0);
  case Key::SampleTokens:
    return r.getInt(c.sampleTokens, 0);
  case Key::CheckpointInterval:
    return r.getInt(c.checkpointInterval, 0);
  case Key::KeepCheckpoints:
    return r.getInt(c.keepCheckpoints, 0);
  case Key::Seed: {
    uint64_t seed = 0;
    if (!isInteger(text) || text.getAsInteger(10, seed))
      return r.fail("expected a non-negative integer, got '" + text + "'");
    c.seed = seed;
    return Error::success();
  }
  case Key::Dropout: {
    double rate = 0;
    if (Error err = r.getNumber(rate, 0, 1, true, "a value in [0, 1)"))
      return err;
    c.dropout = rate;
    return Error::success();
  }
  case Key::Threads:
    return r.getInt(c.threads, 0);
  case Key::Device:
    if (text != "cpu" && text != "cuda")
      return r.fail("unknown device '" + text + "'; expected cpu or cuda");
    c.device = text.str();
    return Error::success();
  case Key::Out:
    if (text.empty())
      return r.fail("expected a directory");
    c.out = text.str();
    return Error::success();
  case Key::InitFrom:
    if (text.empty())
      return r.fail("expected a file");
    c.initFrom = resolve(r.value, text);
    if (!sys::fs::exists(c.initFrom))
      return r.fail("no such file '" + c.initFrom + "'");
    return Error::success();
  default:
    llvm_unreachable("not a run key");
  }
}

/// precision, amp.*, loss_scale.*, remat and sparsity.*.
Error Parser::applyPrecisionKey(const ValueReader &r, TrainingConfig &c) {
  StringRef text = r.text;
  bool plan = use == TrainingConfigUse::Plan;
  switch (r.k.key) {
  case Key::Precision:
    if (text == "fp32") {
      c.precision.kind = PrecisionConfig::Kind::FP32;
    } else if (text == "fp16") {
      c.precision.kind = PrecisionConfig::Kind::FP16;
    } else if (text == "bf16") {
      c.precision.kind = PrecisionConfig::Kind::BF16;
    } else if (plan && (text == "tf32" || text == "fp8")) {
      // Estimated only; the AMP keys treat it as mixed precision.
      c.precision.kind = PrecisionConfig::Kind::BF16;
      c.plan.estimatedPrecision = text.str();
    } else {
      return r.fail("unknown precision '" + text +
                    "'; expected fp32, fp16 or bf16" +
                    (plan ? " (llmc plan also estimates tf32 and fp8)" : ""));
    }
    return Error::success();
  case Key::AmpAllow:
  case Key::AmpDeny: {
    std::vector<std::string> &names = r.k.key == Key::AmpAllow
                                          ? c.precision.allow
                                          : c.precision.deny;
    names.clear();
    for (const std::string &item : r.value.items) {
      StringRef name = StringRef(item).trim();
      if (!name.starts_with("llmc.") || name.size() == 5)
        return r.fail("'" + name +
                      "' is not an llmc op name (e.g. llmc.softmax)");
      names.push_back(name.str());
    }
    return Error::success();
  }
  case Key::LossScaleInitialPower:
    return r.getNumber(c.lossScale.initialScalePower, 0, 127, false,
                       "a value in [0, 127]");
  case Key::LossScaleWindow:
    return r.getInt(c.lossScale.window, 1);
  case Key::LossScaleHysteresis:
    return r.getInt(c.lossScale.hysteresis, 1);
  case Key::LossScaleMin:
    return r.getNumber(c.lossScale.minScale, 0x1p-126, 0x1p127, false,
                       "a value in [2^-126, 2^127]");
  case Key::LossScaleConsecutiveHysteresis:
    return r.getBool(c.lossScale.consecutiveHysteresis);
  case Key::Remat:
    if (std::optional<RematConfig::Policy> policy =
            ::llmc::parseRematPolicy(text)) {
      c.remat.policy = *policy;
    } else if (plan && text == "attention") {
      // Korthikanti et al.'s selective: estimated, not a policy of
      // llmc-remat.
      c.plan.estimatedRemat = text.str();
    } else {
      return r.fail("unknown remat policy '" + text +
                    "'; expected none, full, selective or budget" +
                    (plan ? " (llmc plan also estimates attention)" : ""));
    }
    return Error::success();
  case Key::RematBudget: {
    std::optional<int64_t> bytes = ::llmc::parseByteSize(text);
    if (!bytes)
      return r.fail("expected a positive size such as 512MiB, 2GiB or "
                    "1000000, got '" + text + "'");
    c.remat.budgetBytes = *bytes;
    return Error::success();
  }
  case Key::SparsityPattern:
    if (text != "2:4")
      return r.fail("unknown sparsity pattern '" + text + "'; expected 2:4");
    c.sparsity.enabled = true;
    c.sparsity.pattern = text;
    return Error::success();
  case Key::SparsityPruneAtStep:
    c.sparsity.enabled = true;
    return r.getInt(c.sparsity.pruneAtStep, 0);
  case Key::SparsityParams:
    c.sparsity.enabled = true;
    c.sparsity.params.clear();
    for (const std::string &item : r.value.items)
      c.sparsity.params.push_back(StringRef(item).trim().str());
    return Error::success();
  default:
    llvm_unreachable("not a precision, remat or sparsity key");
  }
}

/// parallel.*: the mesh and its collectives.
Error Parser::applyParallelKey(const ValueReader &r, TrainingConfig &c) {
  switch (r.k.key) {
  case Key::ParallelDp:
    return r.getInt(c.parallel.dp, 1);
  case Key::ParallelTp:
    return r.getInt(c.parallel.tp, 1);
  case Key::ParallelSp:
    return r.getBool(c.parallel.sp);
  case Key::ParallelPp:
    return r.getInt(c.parallel.pp, 1);
  case Key::ParallelZero:
    if (Error err = r.getInt(c.parallel.zero, 0))
      return err;
    if (c.parallel.zero > 3)
      return r.fail("ZeRO stage " + r.text +
                    " does not exist; expected 0, 1, 2 or 3");
    return Error::success();
  case Key::ParallelBucketMb:
    return r.getNumber(c.parallel.bucketMb, 1.0 / 1024, 1 << 20, false,
                       "a size in MiB in [1/1024, 2^20]");
  case Key::ParallelTimeout:
    return r.getNumber(c.parallel.timeoutSeconds, 0.1, 86400, false,
                       "seconds in [0.1, 86400]");
  default:
    llvm_unreachable("not a parallel key");
  }
}

/// guard.*: loss-spike handling.
Error Parser::applyGuardKey(const ValueReader &r, TrainingConfig &c) {
  StringRef text = r.text;
  const double inf = INFINITY;
  switch (r.k.key) {
  case Key::GuardAction:
    if (text != "off" && text != "warn" && text != "stop" &&
        text != "rollback")
      return r.fail("unknown action '" + text +
                    "'; expected off, warn, stop or rollback");
    c.guard.action = text.str();
    return Error::success();
  case Key::GuardWindow:
    if (Error err = r.getInt(c.guard.window, 1))
      return err;
    if (c.guard.window < 2)
      return r.fail("expected at least 2 steps (a standard deviation needs "
                    "two), got '" + text + "'");
    return Error::success();
  case Key::GuardZscore:
    return r.getNumber(c.guard.zscore, 0, inf, true,
                       "a value >= 0 (0 turns it off)");
  case Key::GuardRatio:
  case Key::GuardMaxGradNormRatio: {
    double &field = r.k.key == Key::GuardRatio ? c.guard.ratio
                                               : c.guard.maxGradNormRatio;
    if (Error err = r.getNumber(field, 0, inf, true, "0 (off) or a value > 1"))
      return err;
    if (field > 0 && field <= 1)
      return r.fail(text +
                    " is out of range; expected 0 (off) or a value > 1");
    return Error::success();
  }
  case Key::GuardSnapshotInterval:
    return r.getInt(c.guard.snapshotInterval, 1);
  case Key::GuardLrFactor:
    if (Error err = r.getNumber(c.guard.lrFactor, 0, 1, false,
                                "a value in (0, 1]"))
      return err;
    if (c.guard.lrFactor == 0)
      return r.fail("0 is out of range; expected a value in (0, 1]");
    return Error::success();
  case Key::GuardCooldown:
    return r.getInt(c.guard.cooldown, 0);
  case Key::GuardMaxRollbacks:
    return r.getInt(c.guard.maxRollbacks, 1);
  default:
    llvm_unreachable("not a guard key");
  }
}

/// plan.*: what llmc plan needs besides the run.
Error Parser::applyPlanKey(const ValueReader &r, TrainingConfig &c) {
  ::llmc::PlanSection &p = c.plan;
  const double inf = INFINITY;
  switch (r.k.key) {
  case Key::PlanGpu:
    if (r.text.empty())
      return r.fail("expected a GPU name of the hardware data file");
    p.gpu = r.text.str();
    return Error::success();
  case Key::PlanGpusPerNode:
    return r.getInt(p.gpusPerNode, 1);
  case Key::PlanNodes:
    return r.getInt(p.nodes, 1);
  case Key::PlanPricePerGpuHour:
    return r.getNumber(p.pricePerGpuHour, 0, inf, true, "a value >= 0");
  case Key::PlanMfu:
    return r.getPositive(p.mfu, 1);
  case Key::PlanReserveGib:
    return r.getNumber(p.reserveGiB, 0, inf, true, "a value >= 0");
  case Key::PlanRestarts:
    return r.getInt(p.restarts, 0);
  case Key::PlanRestartMinutes:
    return r.getNumber(p.restartMinutes, 0, inf, true, "a value >= 0");
  case Key::PlanStorageWriteGbps:
    return r.getPositive(p.storageWriteGBps);
  case Key::PlanStorageReadGbps:
    return r.getPositive(p.storageReadGBps);
  case Key::PlanObservedDays:
    return r.getPositive(p.observedDays);
  case Key::PlanObservedStepTime:
    return r.getPositive(p.observedStepSeconds);
  case Key::PlanGradPrecision:
    if (r.text != "fp32" && r.text != "half")
      return r.fail("unknown gradient precision '" + r.text +
                    "'; expected fp32 or half");
    p.fp32Gradients = r.text == "fp32";
    return Error::success();
  default:
    llvm_unreachable("not a plan key");
  }
}

/// Sets the field of one key: the section's reader does it.
Error Parser::applyKey(const KeyInfo &k, const Value &value,
                       TrainingConfig &c) {
  ValueReader r(*this, k, value);
  switch (sectionKind(k.key)) {
  case Section::Model:
    return applyModelKey(r, c);
  case Section::Optimizer:
    return applyOptimizerKey(r, c);
  case Section::Batch:
    return applyBatchKey(r, c);
  case Section::Run:
    return applyRunKey(r, c);
  case Section::Precision:
    return applyPrecisionKey(r, c);
  case Section::Parallel:
    return applyParallelKey(r, c);
  case Section::Guard:
    return applyGuardKey(r, c);
  case Section::Plan:
    return applyPlanKey(r, c);
  }
  llvm_unreachable("unknown section");
}

} // namespace mlir::llmc::trainconfig
