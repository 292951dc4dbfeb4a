// The training loop: steps, evaluation, metrics, the loss plot, checkpoints.
#include "runtime/Train/Trainer.h"
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

namespace {
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string joinPath(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

HostTensor tokenTensor(const std::vector<int32_t> &ids, int64_t batch,
                       int64_t seqLen) {
  HostTensor tensor = HostTensor::zeros(kir::DType::I32, {batch, seqLen});
  std::copy(ids.begin(), ids.end(), tensor.i32().begin());
  return tensor;
}

/// The value of an f32 scalar in the store.
llvm::Expected<double> storedScalar(const TensorStore &store,
                                    llvm::StringRef name) {
  llvm::Expected<HostTensor> tensor = store.get(name);
  if (!tensor)
    return tensor.takeError();
  return double(tensor->toF32()[0]);
}

/// A loss scale as people read it: 65536, 0.25 (powers of two, mostly).
std::string formatScale(double scale) {
  char text[32];
  if (scale >= 1 && scale < 1e15 && scale == std::floor(scale))
    std::snprintf(text, sizeof(text), "%.0f", scale);
  else
    std::snprintf(text, sizeof(text), "%g", scale);
  return text;
}

std::string formatDuration(double seconds) {
  long long s = (long long)(seconds + 0.5);
  char text[32];
  if (seconds < 60)
    std::snprintf(text, sizeof(text), "%.1fs", seconds);
  else if (s >= 3600)
    std::snprintf(text, sizeof(text), "%lldh%02lldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(text, sizeof(text), "%lldm%02llds", s / 60, s % 60);
  return text;
}

/// A sample as the log shows it: made safe for a terminal (TerminalText),
/// blank space at both ends dropped, each further line indented under the
/// first. metrics.jsonl keeps the text as it was generated.
std::string printable(llvm::StringRef text) {
  std::string safe = TerminalText::escape(text);
  llvm::StringRef trimmed = llvm::StringRef(safe).trim();
  std::string shown;
  for (char c : trimmed) {
    shown += c;
    if (c == '\n')
      shown += "        "; // under the text after "sample: "
  }
  return shown;
}

/// How often the status line is redrawn at most (a tiny model takes a
/// few milliseconds a step; a terminal need not repaint that often).
constexpr double kStatusSeconds = 0.1;

std::string formatRate(double value) {
  if (value >= 1e6)
    return llvm::formatv("{0:f2}M", value / 1e6).str();
  if (value >= 1e3)
    return llvm::formatv("{0:f1}k", value / 1e3).str();
  return llvm::formatv("{0:f0}", value).str();
}
} // namespace

Trainer::Trainer(TrainerOptions options, TrainerPrograms programs,
                 TrainerData data, std::shared_ptr<TensorStore> store)
    : options(std::move(options)), programs(std::move(programs)),
      data(std::move(data)), store(std::move(store)),
      guard(this->options.guard) {}

double Trainer::modelFlopsUtilization(double tokensPerSecond) const {
  if (options.peakFlops <= 0 || options.modelFlopsPerToken <= 0)
    return 0;
  return tokensPerSecond * options.modelFlopsPerToken /
         (options.peakFlops * dpSize());
}

std::string Trainer::statusLine(double loss, double tokensPerSecond,
                                double eta) const {
  double done = double(currentStep) / double(std::max<int64_t>(
                                          options.maxSteps, 1));
  std::string text = llvm::formatv(
      "{0} {1}/{2} {3,3}% | loss {4:f4} | {5} tok/s", progressBar(done, 24),
      currentStep, options.maxSteps, int(100 * done), loss,
      formatRate(tokensPerSecond));
  if (double mfu = modelFlopsUtilization(tokensPerSecond); mfu > 0)
    text += llvm::formatv(" | MFU {0:f1}%", 100 * mfu).str();
  return text + " | ETA " + formatDuration(eta);
}

llvm::Expected<Executor *> Trainer::gradStep(int64_t seqLen, bool sync) {
  auto it = gradSteps.find({seqLen, sync});
  if (it != gradSteps.end())
    return it->second.get();
  llvm::Expected<std::unique_ptr<Executor>> executor =
      programs.gradStepFor(seqLen, sync);
  if (!executor)
    return executor.takeError();
  Executor *raw = executor->get();
  gradSteps[{seqLen, sync}] = std::move(*executor);
  return raw;
}

llvm::Expected<std::vector<float>>
Trainer::gatherFloats(std::vector<float> local) {
  if (!options.dp)
    return local;
  std::vector<float> all(local.size() * options.dp->size());
  comm::Ticket ticket = options.dp->allGather(
      local.data(), all.data(), int64_t(local.size()), kir::DType::F32);
  if (llvm::Error err = options.dp->wait(ticket))
    return err;
  return all;
}

llvm::Expected<double> Trainer::fromLastStage(double value) {
  if (!options.pp)
    return value;
  // The double's bits, so that every stage logs the same number.
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  comm::Ticket ticket =
      options.pp->broadcast(&bits, 1, kir::DType::I64, ppSize() - 1);
  if (llvm::Error err = options.pp->wait(ticket))
    return err;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

llvm::Error Trainer::runPipelineStep(
    const std::vector<std::vector<int32_t>> &tokens,
    const std::vector<std::vector<int32_t>> &targets, int64_t seqLen,
    int64_t first, int64_t maxMicroBatches, Executor &grad, Executor &noSync,
    std::vector<float> &losses) {
  const int64_t m = int64_t(tokens.size());
  const int64_t stage = ppStage(), stages = ppSize();
  // 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs
  // stages - s - 1 forwards ahead, then one forward and one backward in
  // turn, then the backwards left; at most stages - s micro-batches are
  // in flight, each kept as its stage input only.
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, m);
  Executor &forwardStep = *programs.pipelineForward;
  std::map<int64_t, HostTensor> stash;
  const int64_t batch = options.microBatch;
  auto setBatch = [&](Executor &e, int64_t i) -> llvm::Error {
    if (llvm::Error err =
            e.setTensor("tokens", tokenTensor(tokens[i], batch, seqLen)))
      return err;
    if (llvm::Error err =
            e.setTensor("targets", tokenTensor(targets[i], batch, seqLen)))
      return err;
    // The dropout masks of one process's micro-batch (numbered globally).
    e.setRng(options.seed,
             uint64_t(currentStep * maxMicroBatches + first + i));
    return llvm::Error::success();
  };
  auto forward = [&](int64_t i) -> llvm::Error {
    if (llvm::Error err = setBatch(forwardStep, i))
      return err;
    if (llvm::Error err = forwardStep.run())
      return err;
    if (stage == 0)
      return llvm::Error::success(); // its input is the tokens
    llvm::Expected<HostTensor> input = forwardStep.output("stage_input");
    if (!input)
      return input.takeError();
    stash[i] = std::move(*input);
    return llvm::Error::success();
  };
  auto backward = [&](int64_t i) -> llvm::Error {
    Executor &step = i == m - 1 ? grad : noSync;
    if (llvm::Error err = setBatch(step, i))
      return err;
    if (llvm::Error err =
            step.setScalar(kir::StepScalar::DLoss, 1.0 / double(m)))
      return err;
    if (stage > 0) {
      if (llvm::Error err = step.setTensor("stage_input", stash.at(i)))
        return err;
      stash.erase(i);
    }
    if (llvm::Error err = step.run())
      return err;
    if (stage != stages - 1)
      return llvm::Error::success();
    llvm::Expected<double> loss = step.scalarOutput(kir::StepScalar::Loss);
    if (!loss)
      return loss.takeError();
    losses.push_back(float(*loss));
    return llvm::Error::success();
  };
  for (int64_t i = 0; i < warmup; ++i)
    if (llvm::Error err = forward(i))
      return err;
  for (int64_t i = warmup; i < m; ++i) {
    if (llvm::Error err = forward(i))
      return err;
    if (llvm::Error err = backward(i - warmup))
      return err;
  }
  for (int64_t i = m - warmup; i < m; ++i)
    if (llvm::Error err = backward(i))
      return err;
  return llvm::Error::success();
}

llvm::Error Trainer::gatherStages(std::vector<std::string> &names,
                                  TensorMap &tensors) {
  // Each later stage sends its tensors (the tied copies aside: stage 0
  // holds them) to stage 0 in stage order: a count, then per tensor a
  // header (name length, dtype, rank, 8 dims, bytes), its name and data.
  auto tied = [&](llvm::StringRef name) {
    for (const std::string &param : options.ppTiedParams)
      if (name == param || name.ends_with("." + param))
        return true;
    return false;
  };
  comm::Communicator &pp = *options.pp;
  auto waitFor = [&](comm::Ticket ticket) { return pp.wait(ticket); };
  if (ppStage() > 0) {
    std::vector<std::pair<std::string, HostTensor>> mine;
    for (const std::string &name : names)
      if (!tied(name)) {
        llvm::Expected<HostTensor> value = store->get(name);
        if (!value)
          return value.takeError();
        mine.push_back({name, std::move(*value)});
      }
    for (auto &entry : tensors)
      if (!tied(entry.first))
        mine.push_back(entry);
    int64_t count = int64_t(mine.size());
    if (llvm::Error err = waitFor(pp.send(&count, 1, kir::DType::I64, 0)))
      return err;
    for (auto &[name, value] : mine) {
      int64_t header[12] = {int64_t(name.size()), int64_t(value.dtype),
                            int64_t(value.shape.size())};
      if (value.shape.size() > 8)
        return llvm::createStringError("checkpoint: '" + name +
                                       "' has more than 8 dimensions");
      for (size_t d = 0; d < value.shape.size(); ++d)
        header[3 + d] = value.shape[d];
      header[11] = int64_t(value.bytes.size());
      if (llvm::Error err = waitFor(pp.send(header, 12, kir::DType::I64, 0)))
        return err;
      if (llvm::Error err =
              waitFor(pp.send(name.data(), int64_t(name.size()),
                              kir::DType::I1, 0)))
        return err;
      if (llvm::Error err =
              waitFor(pp.send(value.bytes.data(), int64_t(value.bytes.size()),
                              kir::DType::I1, 0)))
        return err;
    }
    return llvm::Error::success();
  }
  for (int from = 1; from < ppSize(); ++from) {
    int64_t count = 0;
    if (llvm::Error err = waitFor(pp.recv(&count, 1, kir::DType::I64, from)))
      return err;
    for (int64_t t = 0; t < count; ++t) {
      int64_t header[12] = {};
      if (llvm::Error err =
              waitFor(pp.recv(header, 12, kir::DType::I64, from)))
        return err;
      std::string name(size_t(header[0]), '\0');
      if (llvm::Error err = waitFor(
              pp.recv(name.data(), header[0], kir::DType::I1, from)))
        return err;
      HostTensor value;
      value.dtype = kir::DType(header[1]);
      value.shape.assign(header + 3, header + 3 + header[2]);
      value.bytes.resize(size_t(header[11]));
      if (llvm::Error err = waitFor(pp.recv(value.bytes.data(), header[11],
                                            kir::DType::I1, from)))
        return err;
      // Scalars every stage keeps (the loss scale) are stage 0's.
      if (store->contains(name) || tensors.count(name))
        continue;
      tensors[name] = std::move(value);
    }
  }
  return llvm::Error::success();
}

llvm::Expected<int> Trainer::agreedStopSignal() {
  if (!options.stopRequested)
    return 0;
  int64_t local = options.stopRequested();
  if (!options.dp)
    return int(local);
  std::vector<int64_t> all(options.dp->size());
  comm::Ticket ticket =
      options.dp->allGather(&local, all.data(), 1, kir::DType::I64);
  if (llvm::Error err = options.dp->wait(ticket))
    return err;
  for (int64_t signal : all)
    if (signal != 0)
      return int(signal);
  return 0;
}

Checkpoint Trainer::checkpointState() const {
  Checkpoint c;
  c.step = currentStep;
  c.consumedSamples = consumedSamples;
  c.consumedTokens = consumedTokens;
  c.seed = options.seed;
  c.lr = lastLr;
  c.loaderPosition = data.savePosition ? data.savePosition() : "";
  if (!guard.state().isDefault())
    c.guard = guard.state().toJson();
  c.config = options.configSections;
  return c;
}

/// Whether a checkpoint holds the persistent tensor `name` as it is (what
/// checkpoints write, and what a resume requires). Gradients are zero
/// between steps (the update step zeroes them). ZeRO's blocks are stored
/// as the full tensors one process has, so that any world size and stage
/// can resume them. Mixed precision's 16-bit weight copies are the casts of
/// the masters, made again by @cast_weights.
static bool checkpointedAsItIs(llvm::StringRef name) {
  return !name.starts_with("grad.") && !name.starts_with("shard.") &&
         !name.starts_with("cast.");
}

std::vector<std::string> Trainer::checkpointTensorNames() const {
  std::vector<std::string> names;
  for (const std::string &name : store->names())
    if (checkpointedAsItIs(name))
      names.push_back(name);
  return names;
}

std::vector<StreamedTensor>
Trainer::streamFromStore(llvm::ArrayRef<std::string> names) const {
  std::vector<StreamedTensor> streamed;
  for (const std::string &name : names)
    streamed.push_back({name, [this, name](StreamedTensor::Consumer consume) {
                          return store->read(
                              name, [&](const TensorView &view) {
                                return consume(view.dtype, view.shape,
                                               view.bytes);
                              });
                        }});
  return streamed;
}

llvm::Expected<Checkpoint> Trainer::checkpoint() const {
  Checkpoint c = checkpointState();
  for (const std::string &name : checkpointTensorNames()) {
    llvm::Expected<HostTensor> tensor = store->get(name);
    if (!tensor)
      return tensor.takeError();
    c.tensors[name] = std::move(*tensor);
  }
  return c;
}

const TpShard *Trainer::tpShardOf(llvm::StringRef tensor) const {
  if (!options.tp || options.tpShards.empty() || tensor.starts_with("grad."))
    return nullptr;
  auto it = options.tpShards.find(tensor.str());
  if (it == options.tpShards.end()) // an optimizer state: <kind>.<param>
    it = options.tpShards.find(tensor.split('.').second.str());
  return it == options.tpShards.end() ? nullptr : &it->second;
}

llvm::Error Trainer::initializeShards() {
  shardsInitialized = true;
  if (!programs.shardInit)
    return llvm::Error::success();
  Executor &init = *programs.shardInit;
  for (const kir::Binding &input : init.program().inputs) {
    const kir::Buffer &buffer = init.program().buffers[input.buffer];
    auto it = pendingFullStates.find(input.name);
    HostTensor tensor = it != pendingFullStates.end()
                            ? it->second
                            : HostTensor::zeros(buffer.dtype, buffer.shape);
    if (llvm::Error err = init.setTensor(input.name, tensor))
      return err;
  }
  pendingFullStates.clear();
  return init.run();
}

llvm::Error Trainer::castWeights() {
  return programs.castWeights ? programs.castWeights->run()
                              : llvm::Error::success();
}

llvm::Error Trainer::resume(const Checkpoint &main, llvm::StringRef source) {
  // A ZeRO checkpoint's blocks, joined into the full tensors.
  Checkpoint c = main;
  if (llvm::Error err = joinShardedTensors(c, source))
    return err;
  std::string difference =
      describeConfigDifference(c.config, options.configSections);
  if (!difference.empty())
    return llvm::createStringError(
        source + ": cannot resume: the config differs from the one the "
                 "checkpoint was trained with:\n" +
        llvm::StringRef(difference).rtrim() +
        "\n(model, optimizer and data must match; steps, intervals and the "
        "output directory may change)");
  // The checkpoint must hold exactly the persistent tensors the programs
  // use that checkpoints hold as they are.
  for (const std::string &name : store->names()) {
    if (!checkpointedAsItIs(name))
      continue;
    auto it = c.tensors.find(name);
    if (it == c.tensors.end())
      return llvm::createStringError(source + ": the checkpoint has no "
                                              "tensor '" +
                                     name + "'");
    HostTensor value = it->second;
    if (const TpShard *shard = tpShardOf(name)) {
      // The whole tensor of the checkpoint (of any tp): this rank's share.
      llvm::Expected<HostTensor> mine =
          cutTpShard(value, *shard, options.tp->rank());
      if (!mine)
        return llvm::createStringError(source + ": '" + name + "': " +
                                       llvm::toString(mine.takeError()));
      value = std::move(*mine);
    }
    if (llvm::Error err = store->set(name, value))
      return llvm::createStringError(source + ": " +
                                     llvm::toString(std::move(err)));
  }
  pendingFullStates.clear();
  for (const auto &entry : c.tensors) {
    if (store->contains(entry.first))
      continue;
    // ZeRO: a full optimizer state becomes this rank's block.
    bool sharded = false;
    if (programs.shardInit)
      for (const kir::Binding &input : programs.shardInit->program().inputs)
        sharded = sharded || input.name == entry.first;
    // Pipeline parallelism: another stage's tensor.
    if (!sharded && options.pp)
      continue;
    if (!sharded)
      return llvm::createStringError(source + ": the checkpoint has a tensor '" +
                                     entry.first +
                                     "' that the model does not have");
    HostTensor value = entry.second;
    if (const TpShard *shard = tpShardOf(entry.first)) {
      llvm::Expected<HostTensor> mine =
          cutTpShard(value, *shard, options.tp->rank());
      if (!mine)
        return llvm::createStringError(source + ": '" + entry.first + "': " +
                                       llvm::toString(mine.takeError()));
      value = std::move(*mine);
    }
    pendingFullStates[entry.first] = std::move(value);
  }
  if (data.restorePosition)
    if (llvm::Error err = data.restorePosition(c.loaderPosition))
      return llvm::createStringError(source + ": data loader position: " +
                                     llvm::toString(std::move(err)));
  currentStep = c.step;
  consumedSamples = c.consumedSamples;
  consumedTokens = c.consumedTokens;
  lastLr = c.lr;
  guard.state() = GuardState();
  if (!c.guard.empty()) {
    llvm::Expected<GuardState> state = GuardState::fromJson(c.guard);
    if (!state)
      return llvm::createStringError(source + ": guard state: " +
                                     llvm::toString(state.takeError()));
    guard.state() = std::move(*state);
  }

  keptMetricLines.clear();
  trainPoints.clear();
  valPoints.clear();
  eventPoints.clear();
  std::string metricsPath = joinPath(options.outDir, "metrics.jsonl");
  if (llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
          llvm::MemoryBuffer::getFile(metricsPath))
    readMetricLines((*file)->getBuffer(), currentStep, keptMetricLines,
                    trainPoints, valPoints, &eventPoints);
  return llvm::Error::success();
}

void llmc::runtime::readMetricLines(llvm::StringRef text, int64_t beforeStep,
                                    std::vector<std::string> &kept,
                                    std::vector<MetricPoint> &train,
                                    std::vector<MetricPoint> &val,
                                    std::vector<PlotEvent> *events) {
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    llvm::Expected<llvm::json::Value> json = llvm::json::parse(line);
    if (!json) {
      llvm::consumeError(json.takeError());
      continue; // a torn last line of a killed run
    }
    const llvm::json::Object *object = json->getAsObject();
    std::optional<int64_t> step = object ? object->getInteger("step") : std::nullopt;
    if (!step || *step >= beforeStep)
      continue;
    kept.push_back(line.str());
    if (std::optional<llvm::StringRef> event = object->getString("event")) {
      std::optional<int64_t> from = object->getInteger("from_step");
      if (events)
        events->push_back({from.value_or(*step), event->str()});
      // A rollback undid the steps from the one it went back to.
      if (std::optional<int64_t> to = object->getInteger("to_step"))
        llvm::erase_if(train, [&](const MetricPoint &p) {
          return p.step >= *to;
        });
      continue;
    }
    if (std::optional<double> loss = object->getNumber("loss"))
      train.push_back({*step, *loss});
    if (std::optional<double> loss = object->getNumber("val_loss"))
      val.push_back({*step, *loss});
  }
}

llvm::Error Trainer::pruneNow() {
  // The validation loss right before and after: what pruning costs, which
  // the fine-tune then wins back (the val_loss lines after show how much).
  // No text sample: only the loss is wanted.
  auto validationLoss = [&]() -> llvm::Expected<double> {
    if (options.evalSteps == 0)
      return std::nan("");
    std::string sample;
    int64_t sampleTokens = options.sampleTokens;
    options.sampleTokens = 0;
    llvm::Expected<double> loss = evaluate(sample);
    options.sampleTokens = sampleTokens;
    return loss;
  };
  llvm::Expected<double> before = validationLoss();
  if (!before)
    return before.takeError();
  // Every rank prunes its own identical copy: the mask is a function of
  // the weights, which data parallelism keeps equal.
  // Under pipeline parallelism each stage prunes its own weights; the
  // report lists every stage's, in stage order.
  llvm::Expected<std::vector<PrunedTensor>> pruned = pruneTwoOfFour(*store);
  if (!pruned)
    return pruned.takeError();
  if (llvm::Error err = castWeights())
    return err;
  if (options.pp)
    if (llvm::Error err = gatherPrunedOverStages(*pruned))
      return err;
  if (pruned->empty())
    return llvm::createStringError(
        "sparsity.prune_at_step is set but the compiled step has no "
        "sparsity_mask states to prune");
  llvm::Expected<double> after = validationLoss();
  if (!after)
    return after.takeError();
  double zeros = 0;
  for (const PrunedTensor &t : *pruned)
    zeros += t.zeroFraction;
  if (llvm::raw_ostream *log = options.log) {
    *log << llvm::format("step %6lld | pruned 2:4: %zu tensors, %.1f%% zeros",
                         (long long)currentStep, pruned->size(),
                         100.0 * zeros / double(pruned->size()));
    if (!std::isnan(*before))
      *log << llvm::format(" | val loss %.4f -> %.4f", *before, *after);
    *log << "\n";
    for (const PrunedTensor &t : *pruned)
      *log << llvm::format("         %-40s %5.1f%% zeros\n", t.name.c_str(),
                           100.0 * t.zeroFraction);
    log->flush();
  }
  std::string line;
  llvm::raw_string_ostream os(line);
  llvm::json::OStream j(os);
  j.object([&] {
    j.attribute("step", currentStep);
    j.attribute("event", "prune");
    j.attribute("pattern", "2:4");
    if (!std::isnan(*before)) {
      j.attribute("val_loss_before", *before);
      j.attribute("val_loss_after", *after);
    }
    j.attributeObject("zero_fraction", [&] {
      for (const PrunedTensor &t : *pruned)
        j.attribute(t.name, t.zeroFraction);
    });
  });
  eventPoints.push_back({currentStep, "prune"});
  return appendMetrics(line);
}

llvm::Error Trainer::gatherPrunedOverStages(
    std::vector<PrunedTensor> &pruned) {
  // Each stage's list as "name=fraction" lines, padded to the longest and
  // all-gathered over pp.
  std::string mine;
  llvm::raw_string_ostream os(mine);
  for (const PrunedTensor &t : pruned)
    os << t.name << "=" << llvm::format("%.17g", t.zeroFraction) << "\n";
  comm::Communicator &pp = *options.pp;
  int64_t length = int64_t(mine.size());
  std::vector<int64_t> lengths(ppSize());
  if (llvm::Error err = pp.wait(
          pp.allGather(&length, lengths.data(), 1, kir::DType::I64)))
    return err;
  int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  mine.resize(size_t(longest), '\0');
  std::string all(size_t(longest) * lengths.size(), '\0');
  if (longest > 0)
    if (llvm::Error err = pp.wait(pp.allGather(mine.data(), all.data(),
                                               longest, kir::DType::I1)))
      return err;
  pruned.clear();
  for (size_t stage = 0; stage < lengths.size(); ++stage) {
    llvm::StringRef text(all.data() + stage * longest, size_t(lengths[stage]));
    while (!text.empty()) {
      auto [line, rest] = text.split('\n');
      text = rest;
      auto [name, fraction] = line.rsplit('=');
      PrunedTensor t;
      t.name = name.str();
      if (fraction.getAsDouble(t.zeroFraction))
        return llvm::createStringError("pipeline stage " +
                                       llvm::Twine(stage) +
                                       ": unreadable prune report '" + line +
                                       "'");
      pruned.push_back(std::move(t));
    }
  }
  return llvm::Error::success();
}

llvm::Error Trainer::appendMetrics(const std::string &line) {
  if (!writes())
    return llvm::Error::success();
  std::string path = joinPath(options.outDir, "metrics.jsonl");
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Append);
  if (ec)
    return llvm::createStringError(ec, "cannot write '" + path +
                                           "': " + ec.message());
  // One write per line: a killed run leaves whole lines (or one torn last
  // line, which a resume drops).
  os << line + "\n";
  os.close();
  if (os.has_error())
    return llvm::createStringError(os.error(), "cannot write '" + path +
                                                   "': " +
                                                   os.error().message());
  return llvm::Error::success();
}

llvm::Error Trainer::writePlot() {
  if (!writes())
    return llvm::Error::success();
  std::string svg =
      renderLossPlot(trainPoints, valPoints,
                     llvm::sys::path::filename(options.outDir), eventPoints);
  return kir::writeFileAtomically(
      joinPath(options.outDir, "loss.svg"),
      llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(svg.data()),
                              svg.size()));
}

llvm::Error Trainer::writeCheckpointNow() {
  std::string dir = joinPath(options.outDir, "checkpoints");
  // The newest checkpoint before this one, for the message if this write
  // fails (disk full): the atomic write leaves it intact.
  std::vector<std::string> before = listCheckpoints(dir);
  llvm::Error error = writeCheckpointFiles(dir);
  if (!error)
    return writes() ? pruneCheckpoints(dir, options.keepCheckpoints)
                    : llvm::Error::success();
  std::string previous =
      before.empty() ? "there is no earlier checkpoint"
                     : "the newest checkpoint, " + before.back() +
                           ", is intact (free space and continue with "
                           "--resume)";
  return llvm::createStringError(
      "the checkpoint of step " + llvm::Twine(currentStep) +
      " was not written: " + llvm::toString(std::move(error)) + "; " +
      previous);
}

llvm::Error Trainer::writeCheckpointFiles(const std::string &dir) {
  // The tensors go from the store to the file one at a time: no copy of
  // the whole state is made.
  std::optional<Checkpoint> c = checkpointState();
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return llvm::createStringError(ec, "cannot create '" + dir +
                                           "': " + ec.message());
  // ZeRO under tensor or pipeline parallelism: each rank's blocks are
  // all-gathered over dp into its tp share or its stage's tensor (the flat
  // padded layout, cut to the share's elements), and the shares joined and
  // the stages gathered below like the parameters', so that the main file
  // alone holds the whole state (no rank files: tp ranks and stages of a dp
  // rank hold different blocks under one rank number).
  if (options.dp && programs.shardInit && (options.tp || options.pp)) {
    for (const kir::Binding &input : programs.shardInit->program().inputs) {
      const kir::Buffer &buffer =
          programs.shardInit->program().buffers[input.buffer];
      llvm::Expected<HostTensor> block = store->get("shard." + input.name);
      if (!block)
        return block.takeError();
      HostTensor share;
      share.dtype = block->dtype;
      share.shape = buffer.shape;
      std::vector<char> all(block->bytes.size() * dpSize());
      comm::Ticket ticket =
          options.dp->allGather(block->bytes.data(), all.data(),
                                block->numElements(), block->dtype);
      if (llvm::Error err = options.dp->wait(ticket))
        return err;
      int64_t elements = 1;
      for (int64_t extent : buffer.shape)
        elements *= extent;
      all.resize(elements * kir::dtypeBytes(block->dtype));
      share.bytes = std::move(all);
      c->tensors[input.name] = std::move(share);
    }
  } else if (options.dp && programs.shardInit) {
    // ZeRO: every rank writes its blocks of the tensors @shard_init cuts;
    // the files' sizes and checksums go into rank 0's manifest, and the
    // main file, written last, makes the checkpoint.
    Checkpoint mine;
    mine.step = c->step;
    mine.seed = c->seed;
    mine.config = c->config;
    ShardManifest manifest;
    manifest.worldSize = dpSize();
    std::vector<std::string> blocks;
    for (const kir::Binding &input : programs.shardInit->program().inputs) {
      std::string block = "shard." + input.name;
      blocks.push_back(block);
      manifest.blocks[block] = {
          input.name,
          programs.shardInit->program().buffers[input.buffer].shape};
    }
    std::string name =
        checkpointShardFileName(currentStep, dpRank(), dpSize());
    std::string path = joinPath(dir, name);
    if (llvm::Error err = writeCheckpoint(path, mine, streamFromStore(blocks)))
      return err;
    llvm::Expected<std::pair<int64_t, uint64_t>> digest = fileDigest(path);
    if (!digest)
      return digest.takeError();
    int64_t local[2] = {digest->first, int64_t(digest->second)};
    std::vector<int64_t> all(2 * dpSize());
    comm::Ticket ticket =
        options.dp->allGather(local, all.data(), 2, kir::DType::I64);
    if (llvm::Error err = options.dp->wait(ticket))
      return err;
    for (int rank = 0; rank < dpSize(); ++rank)
      manifest.files.push_back(
          {rank, checkpointShardFileName(currentStep, rank, dpSize()),
           all[2 * rank], uint64_t(all[2 * rank + 1])});
    c->manifest = manifest.toJson();
  }
  // Tensor parallelism: every tp rank's shares are joined into the whole
  // tensors, which the main file holds as one process's.
  std::vector<std::string> streamed;
  std::vector<std::string> names = checkpointTensorNames();
  for (const auto &entry : c->tensors) // ZeRO's gathered shares
    names.push_back(entry.first);
  for (const std::string &name : names) {
    const TpShard *shard = tpShardOf(name);
    if (!shard) {
      if (!c->tensors.count(name))
        streamed.push_back(name);
      continue;
    }
    llvm::Expected<HostTensor> mine =
        c->tensors.count(name) ? c->tensors.at(name) : store->get(name);
    if (!mine)
      return mine.takeError();
    std::vector<char> all(mine->bytes.size() * options.tp->size());
    comm::Ticket ticket =
        options.tp->allGather(mine->bytes.data(), all.data(),
                              mine->numElements(), mine->dtype);
    if (llvm::Error err = options.tp->wait(ticket))
      return err;
    std::vector<HostTensor> parts(options.tp->size(), *mine);
    for (size_t r = 0; r < parts.size(); ++r)
      std::memcpy(parts[r].bytes.data(), all.data() + r * mine->bytes.size(),
                  mine->bytes.size());
    llvm::Expected<HostTensor> whole = joinTpShards(parts, *shard);
    if (!whole)
      return llvm::createStringError("checkpoint: '" + name + "': " +
                                     llvm::toString(whole.takeError()));
    c->tensors[name] = std::move(*whole);
  }
  // Pipeline parallelism: the other stages' tensors, to stage 0's writer.
  if (options.pp && dpRank() == 0 && (!options.tp || options.tp->rank() == 0))
    if (llvm::Error err = gatherStages(streamed, c->tensors))
      return err;
  if (!writes())
    return llvm::Error::success();
  std::string path = joinPath(dir, checkpointFileName(currentStep));
  if (llvm::Error err = writeCheckpoint(path, *c, streamFromStore(streamed)))
    return err;
  if (options.log)
    *options.log << "checkpoint: " << path << "\n";
  return llvm::Error::success();
}

llvm::Error Trainer::takeSnapshot(Snapshot &snapshot, int64_t skippedSteps) {
  snapshot.tensors.clear();
  // Gradients are zero between steps; ZeRO's blocks are this rank's.
  for (const std::string &name : store->names()) {
    if (llvm::StringRef(name).starts_with("grad."))
      continue;
    llvm::Expected<HostTensor> tensor = store->get(name);
    if (!tensor)
      return tensor.takeError();
    snapshot.tensors[name] = std::move(*tensor);
  }
  snapshot.step = currentStep;
  snapshot.consumedSamples = consumedSamples;
  snapshot.consumedTokens = consumedTokens;
  snapshot.skippedSteps = skippedSteps;
  snapshot.lastLr = lastLr;
  snapshot.guard = guard.state();
  snapshot.batchesRead = batchesRead;
  return llvm::Error::success();
}

namespace {
llvm::StringRef describeGuardEvent(const GuardEvent &event) {
  switch (event.kind) {
  case GuardEvent::Kind::NonFinite:
    return "non-finite";
  case GuardEvent::Kind::LossSpike:
    return "loss spike";
  case GuardEvent::Kind::GradSpike:
    return "gradient-norm spike";
  }
  return "event";
}
} // namespace

llvm::Expected<bool> Trainer::handleGuardEvent(
    const GuardEvent &event, int64_t eventStep, double loss,
    int64_t &skippedSteps, const std::string &stopMessage) {
  llvm::raw_ostream *log = options.log;
  const GuardOptions &settings = guard.settings();
  const GuardAction action = settings.action;
  const bool nonFinite = event.kind == GuardEvent::Kind::NonFinite;
  std::string what =
      (describeGuardEvent(event) + ": " + event.reason).str();
  // One metrics.jsonl line per event; `fields` adds the event's own.
  auto record = [&](llvm::StringRef name, int64_t step,
                    llvm::function_ref<void(llvm::json::OStream &)> fields)
      -> llvm::Error {
    std::string line;
    llvm::raw_string_ostream os(line);
    llvm::json::OStream j(os);
    j.object([&] {
      j.attribute("step", step);
      j.attribute("event", name);
      j.attribute("reason", what);
      if (std::isfinite(loss))
        j.attribute("spike_loss", loss);
      fields(j);
    });
    eventPoints.push_back({eventStep, name.str()});
    if (llvm::Error err = appendMetrics(line))
      return err;
    return writePlot();
  };

  if (action == GuardAction::Rollback && guard.mayRollBack()) {
    // Back to the snapshot; the loader stays where it is, past the
    // micro-batches read since: the window that spiked is skipped.
    const Snapshot &snapshot = goodSnapshot;
    int64_t batches = batchesRead - snapshot.batchesRead;
    pendingSnapshot = Snapshot();
    for (const auto &[name, tensor] : snapshot.tensors)
      if (llvm::Error err = store->set(name, tensor))
        return err;
    currentStep = snapshot.step;
    consumedSamples = snapshot.consumedSamples;
    consumedTokens = snapshot.consumedTokens;
    lastLr = snapshot.lastLr;
    skippedSteps = snapshot.skippedSteps;
    guard.recordRollback(eventStep, batches, snapshot.guard);
    // The next rollback skips from here on.
    goodSnapshot.batchesRead = batchesRead;
    const GuardState &state = guard.state();
    double lr = options.learningRate(currentStep) * state.lrFactor;
    llvm::erase_if(trainPoints, [&](const MetricPoint &p) {
      return p.step >= currentStep;
    });
    std::string scale;
    if (store->contains(kir::stepScalarName(kir::StepScalar::LossScale))) {
      llvm::Expected<double> value =
          storedScalar(*store, kir::stepScalarName(kir::StepScalar::LossScale));
      if (!value)
        return value.takeError();
      scale = ", loss scale reset to " + formatScale(*value);
    }
    if (log) {
      *log << llvm::formatv(
          "guard: step {0}: {1}; rolled back to step {2}, skipping the {3} "
          "micro-batches read since; lr x{4} ({5:e2} at step {2}) for {6}{7} "
          "(rollback {8} in a row, at most {9})\n",
          eventStep, what, currentStep, batches,
          llvm::format("%g", state.lrFactor), lr,
          settings.cooldown > 0
              ? llvm::formatv("{0} steps", state.cooldownLeft).str()
              : std::string("the rest of the run"),
          scale, state.rollbacksInARow, settings.maxRollbacks);
      log->flush();
    }
    if (llvm::Error err = record("rollback", currentStep,
                                 [&](llvm::json::OStream &j) {
                                   j.attribute("from_step", eventStep);
                                   j.attribute("to_step", currentStep);
                                   j.attribute("lr", lr);
                                   j.attribute("lr_factor", state.lrFactor);
                                   j.attribute("cooldown", state.cooldownLeft);
                                   j.attribute("batches_skipped", batches);
                                   j.attribute("rollbacks_in_a_row",
                                               state.rollbacksInARow);
                                 }))
      return err;
    return true;
  }

  std::string message;
  if (action == GuardAction::Rollback)
    message = llvm::formatv(
        "guard: step {0}: {1}; {2} rollbacks in a row did not get past it "
        "(guard.max_rollbacks: {3}); stopping rather than train on it. "
        "Lower the learning rate (guard.lr_factor), look at the data near "
        "step {0}, raise guard.max_rollbacks, or resume from an earlier "
        "checkpoint",
        eventStep, what, guard.state().rollbacksInARow,
        settings.maxRollbacks);
  else if (nonFinite)
    message = stopMessage;
  else if (action == GuardAction::Stop)
    message = llvm::formatv("guard: step {0}: {1}; stopping (guard.action: "
                            "stop); the update was applied but no "
                            "checkpoint is written for this step",
                            eventStep, what);
  if (!message.empty()) {
    if (llvm::Error err = record("stop", eventStep,
                                 [&](llvm::json::OStream &j) {
                                   j.attribute("action",
                                               stringifyGuardAction(action));
                                 }))
      return err;
    return llvm::createStringError(message);
  }
  // Warn: log it and train on.
  ++guard.state().warnings;
  if (log) {
    *log << "guard: step " << eventStep << ": " << what
         << " (guard.action: warn; training on)\n";
    log->flush();
  }
  if (llvm::Error err = record("spike", eventStep,
                               [&](llvm::json::OStream &j) {
                                 j.attribute("action", "warn");
                               }))
    return err;
  return false;
}

llvm::Expected<double> Trainer::evaluate(std::string &sample) {
  Executor &eval = *programs.eval;
  const kir::Buffer &tokensBuffer = [&]() -> const kir::Buffer & {
    for (const kir::Binding &b : eval.program().inputs)
      if (b.name == "tokens")
        return eval.program().buffers[b.buffer];
    return eval.program().buffers.front();
  }();
  int64_t batch = tokensBuffer.shape[0], seqLen = tokensBuffer.shape[1];
  double loss = NAN;
  int64_t batches = std::min(options.evalSteps, data.valBatches);
  if (batches > 0) {
    // Rank r evaluates batches r, r + n, ...; the losses are gathered and
    // summed in batch order, as one process sums them.
    // Every rank runs as many batches (a sharded forward has collectives):
    // one past the end evaluates batch 0 again and is not counted.
    const int64_t n = dpSize(), perRank = (batches + n - 1) / n;
    std::vector<float> mine(perRank, 0.0f);
    std::vector<int32_t> tokens, targets;
    for (int64_t j = 0; j < perRank; ++j) {
      int64_t i = dpRank() + j * n;
      data.valBatch(i < batches ? i : 0, tokens, targets);
      if (llvm::Error err =
              eval.setTensor("tokens", tokenTensor(tokens, batch, seqLen)))
        return err;
      if (llvm::Error err =
              eval.setTensor("targets", tokenTensor(targets, batch, seqLen)))
        return err;
      if (llvm::Error err = eval.run())
        return err;
      llvm::Expected<double> value = eval.scalarOutput(kir::StepScalar::Loss);
      if (!value)
        return value.takeError();
      mine[j] = float(*value);
    }
    llvm::Expected<std::vector<float>> all = gatherFloats(std::move(mine));
    if (!all)
      return all.takeError();
    double sum = 0;
    for (int64_t i = 0; i < batches; ++i)
      sum += double((*all)[(i % n) * perRank + i / n]);
    llvm::Expected<double> last = fromLastStage(sum / double(batches));
    if (!last)
      return last.takeError();
    loss = *last;
  }
  sample.clear();
  // Every rank samples (the same text: a sharded forward needs them all);
  // rank 0 prints it.
  if (options.sampleTokens > 0) {
    std::vector<int32_t> context = data.samplePrompt;
    SamplingOptions sampling;
    sampling.temperature = 0.8;
    sampling.topK = 40;
    // Keyed by the step, so a resumed run samples the same text.
    sampling.seed = options.seed + uint64_t(currentStep);
    Executor &sampler = programs.sampler ? *programs.sampler : eval;
    if (llvm::Error err = generate(sampler, context, options.sampleTokens,
                                   sampling, [&](int64_t id) {
                                     sample += data.decode(int32_t(id));
                                   }))
      return err;
  }
  return loss;
}

llvm::Error Trainer::run() {
  llvm::raw_ostream *log = options.log;
  if (currentStep >= options.maxSteps) {
    if (log)
      *log << "nothing to do: the run is at step " << currentStep
           << " of max_steps " << options.maxSteps << "\n";
    return llvm::Error::success();
  }
  // metrics.jsonl restarts with the lines a resume keeps (none when fresh).
  if (writes()) {
    std::string kept;
    for (const std::string &line : keptMetricLines)
      kept += line + "\n";
    if (llvm::Error err = kir::writeFileAtomically(
            joinPath(options.outDir, "metrics.jsonl"),
            llvm::ArrayRef<uint8_t>(
                reinterpret_cast<const uint8_t *>(kept.data()), kept.size())))
      return err;
  }

  if (!shardsInitialized)
    if (llvm::Error err = initializeShards())
      return err;
  // The weights were set from outside the programs (initialization, a
  // resume): their 16-bit copies follow, before the first evaluation.
  if (llvm::Error err = castWeights())
    return err;
  const int64_t maxMicroBatches = options.maxGlobalBatch / options.microBatch;
  // Dynamic loss scaling (fp16): the update step reports an overflow and
  // then skips the update, which Adam's step count t must not count.
  Executor &update = *programs.updateStep;
  const bool lossScaling = update.hasOutput(kir::StepScalar::Overflow);
  int64_t skippedSteps = 0; // updates skipped before currentStep
  if (lossScaling) {
    llvm::Expected<double> skipped = storedScalar(
        *store, kir::stepScalarName(kir::StepScalar::LossScaleSkippedSteps));
    if (!skipped)
      return skipped.takeError();
    skippedSteps = int64_t(*skipped);
  }
  int64_t skippedInARow = 0; // overflows since the last applied update
  double firstScale = 0;     // the loss scale this run() started with
  if (lossScaling) {
    llvm::Expected<double> scale =
        storedScalar(*store, kir::stepScalarName(kir::StepScalar::LossScale));
    if (!scale)
      return scale.takeError();
    firstScale = *scale;
  }
  // Rollback: a snapshot at the start, every snapshot_interval steps and at
  // every checkpoint (so that a resumed run has the snapshot the
  // uninterrupted one has).
  const GuardOptions &guardOptions = guard.settings();
  const bool rollingBack = guardOptions.action == GuardAction::Rollback;
  auto snapshotDue = [&](int64_t step) {
    return (guardOptions.snapshotInterval > 0 &&
            step % guardOptions.snapshotInterval == 0) ||
           (options.checkpointInterval > 0 &&
            step % options.checkpointInterval == 0);
  };
  std::map<const Executor *, int64_t> flopsOf;
  auto flops = [&](const Executor &e) {
    auto it = flopsOf.find(&e);
    if (it == flopsOf.end())
      it = flopsOf.emplace(&e, kir::countFlops(e.program())).first;
    return it->second;
  };

  Clock::time_point runStart = Clock::now(), intervalStart = runStart;
  Clock::time_point lastStatus = runStart - std::chrono::seconds(1);
  // Evaluations and compiling grad steps for new lengths are not in the
  // rates: their time is taken out.
  double evalSeconds = 0, intervalEvalSeconds = 0;
  int64_t firstStep = currentStep;
  int64_t firstTokens = consumedTokens;
  int64_t intervalTokens = 0;
  double intervalFlops = 0;
  bool checkpointWritten = false;
  bool peakRemeasured = false; // options.remeasurePeakFlops was called
  std::vector<int32_t> tokens, targets;

  auto evalDue = [&](int64_t step) {
    return (options.evalInterval > 0 && step % options.evalInterval == 0) ||
           step == options.maxSteps;
  };
  auto runEval = [&]() -> llvm::Error {
    if (options.evalSteps == 0 && options.sampleTokens == 0)
      return llvm::Error::success();
    std::string sample;
    llvm::Expected<double> valLoss = evaluate(sample);
    if (!valLoss)
      return valLoss.takeError();
    std::string line;
    llvm::raw_string_ostream os(line);
    llvm::json::OStream j(os);
    j.object([&] {
      j.attribute("step", currentStep);
      if (!std::isnan(*valLoss))
        j.attribute("val_loss", *valLoss);
      if (options.sampleTokens > 0)
        j.attribute("sample", llvm::json::fixUTF8(sample));
    });
    if (!std::isnan(*valLoss))
      valPoints.push_back({currentStep, *valLoss});
    if (log) {
      if (!std::isnan(*valLoss))
        *log << llvm::format("step %6lld | val loss %.4f\n",
                             (long long)currentStep, *valLoss);
      if (options.sampleTokens > 0)
        *log << "sample: " << printable(sample) << "\n";
      log->flush();
    }
    if (llvm::Error err = appendMetrics(line))
      return err;
    return writePlot();
  };

  while (currentStep < options.maxSteps) {
    // A step boundary: a stop asked for (SIGINT, SIGTERM) ends the run
    // here with a checkpoint that --resume continues exactly.
    llvm::Expected<int> stop = agreedStopSignal();
    if (!stop)
      return stop.takeError();
    if (*stop != 0) {
      stoppedBy = *stop;
      if (!checkpointWritten)
        if (llvm::Error err = writeCheckpointNow())
          return err;
      if (options.console)
        options.console->clearStatus();
      return writePlot();
    }
    if (evalDue(currentStep)) {
      Clock::time_point evalStart = Clock::now();
      if (llvm::Error err = runEval())
        return err;
      phases().end("evaluation and sample");
      double seconds = secondsSince(evalStart);
      evalSeconds += seconds;
      intervalEvalSeconds += seconds;
    }

    if (currentStep == options.pruneAtStep) {
      Clock::time_point pruneStart = Clock::now();
      if (llvm::Error err = pruneNow())
        return err;
      double seconds = secondsSince(pruneStart);
      evalSeconds += seconds;
      intervalEvalSeconds += seconds;
    }

    if (options.beforeStep)
      options.beforeStep(currentStep);
    if (rollingBack && goodSnapshot.step < 0) {
      if (llvm::Error err = takeSnapshot(goodSnapshot, skippedSteps))
        return err;
    } else if (rollingBack && goodSnapshot.step != currentStep &&
               pendingSnapshot.step != currentStep &&
               snapshotDue(currentStep)) {
      if (llvm::Error err = takeSnapshot(pendingSnapshot, skippedSteps))
        return err;
    }
    double lrScale = 1;
    if (options.injectFault)
      if (llvm::Error err = options.injectFault(currentStep, *store, lrScale))
        return err;
    StepShape shape = options.stepShape(currentStep, consumedSamples);
    const int64_t microBatches = shape.globalBatch / options.microBatch;
    const int64_t stepTokens = shape.globalBatch * shape.seqLen;
    // This rank's micro-batches: a contiguous share [first, first + mine).
    const int64_t ranks = dpSize();
    if (microBatches % ranks != 0)
      return llvm::createStringError(llvm::formatv(
          "step {0}: the global batch of {1} sequences is {2} micro-batches "
          "of {3}, which do not split over {4} data-parallel ranks; make the "
          "global batch a multiple of micro_batch_size * dp",
          currentStep, shape.globalBatch, microBatches, options.microBatch,
          ranks));
    const int64_t mine = microBatches / ranks, first = dpRank() * mine;
    Clock::time_point compileStart = Clock::now();
    // With data parallelism the last micro-batch communicates its
    // gradients; the ones before only accumulate (no_sync).
    llvm::Expected<Executor *> grad = gradStep(shape.seqLen, true);
    if (!grad)
      return grad.takeError();
    Executor *noSync = *grad;
    if (options.dp && mine > 1 && options.accumulateWithoutSync) {
      llvm::Expected<Executor *> local = gradStep(shape.seqLen, false);
      if (!local)
        return local.takeError();
      noSync = *local;
    }
    double compileSeconds = secondsSince(compileStart);
    evalSeconds += compileSeconds;
    intervalEvalSeconds += compileSeconds;
    std::map<std::string, comm::Traffic> trafficBefore = meshTraffic();
    std::vector<float> losses;
    if (options.pp) {
      std::vector<std::vector<int32_t>> stepTokens, stepTargets;
      for (int64_t m = 0; m < microBatches; ++m) {
        data.next(shape.seqLen, tokens, targets);
        ++batchesRead;
        if (m < first || m >= first + mine)
          continue; // another rank's
        stepTokens.push_back(tokens);
        stepTargets.push_back(targets);
      }
      if (llvm::Error err =
              runPipelineStep(stepTokens, stepTargets, shape.seqLen, first,
                              maxMicroBatches, **grad, *noSync, losses))
        return err;
      // Only the last stage has losses; the others gather zeros.
      if (!lastStage())
        losses.assign(size_t(mine), 0.0f);
    }
    for (int64_t m = 0; m < microBatches && !options.pp; ++m) {
      data.next(shape.seqLen, tokens, targets);
      ++batchesRead;
      if (m < first || m >= first + mine)
        continue; // another rank's
      Executor &step = m == first + mine - 1 ? **grad : *noSync;
      int64_t batch = options.microBatch;
      if (llvm::Error err = step.setTensor(
              "tokens", tokenTensor(tokens, batch, shape.seqLen)))
        return err;
      if (llvm::Error err = step.setTensor(
              "targets", tokenTensor(targets, batch, shape.seqLen)))
        return err;
      // Each rank averages its own micro-batches; the gradient all-reduce
      // averages over the ranks.
      if (llvm::Error err =
              step.setScalar(kir::StepScalar::DLoss, 1.0 / double(mine)))
        return err;
      // Each micro-batch of each step gets its own dropout masks (numbered
      // globally, so that data parallelism draws the same ones).
      step.setRng(options.seed, uint64_t(currentStep * maxMicroBatches + m));
      if (llvm::Error err = step.run())
        return err;
      llvm::Expected<double> loss = step.scalarOutput(kir::StepScalar::Loss);
      if (!loss)
        return loss.takeError();
      losses.push_back(float(*loss));
    }
    // Summed in the global order of the micro-batches on every rank.
    llvm::Expected<std::vector<float>> allLosses =
        gatherFloats(std::move(losses));
    if (!allLosses)
      return allLosses.takeError();
    double lossSum = 0;
    for (float value : *allLosses)
      lossSum += double(value);
    double loss = lossSum / double(microBatches);
    if (options.pp) {
      llvm::Expected<double> last = fromLastStage(loss);
      if (!last)
        return last.takeError();
      loss = *last;
    }
    // A tied parameter's copies on the first and the last stage get the
    // sum of both stages' gradients (Megatron-LM's embedding group). Under
    // ZeRO the gradient a rank updates with is its block (grad.shard.<p>,
    // already averaged over dp); the two stages cut the copies alike, so
    // the dp rank's blocks on the two stages are the same elements.
    for (const std::string &name : options.ppTiedParams) {
      std::string gradName = (programs.shardInit ? "grad.shard." : "grad.") +
                             name;
      llvm::Expected<HostTensor> gradient = store->get(gradName);
      if (!gradient)
        return gradient.takeError();
      comm::Ticket ticket = options.ppTied->allReduce(
          gradient->bytes.data(), gradient->bytes.data(),
          gradient->numElements(), gradient->dtype, comm::ReduceOp::Sum);
      if (llvm::Error err = options.ppTied->wait(ticket))
        return err;
      if (llvm::Error err = store->set(gradName, *gradient))
        return err;
    }

    // A rollback lowers the rate for its cooldown.
    double lr =
        options.learningRate(currentStep) * guard.state().lrFactor * lrScale;
    if (llvm::Error err = update.setScalar(kir::StepScalar::Lr, lr))
      return err;
    if (llvm::Error err =
            update.setBiasCorrections(currentStep - skippedSteps + 1))
      return err;
    // Whether an overflow may still lower the scale: DeepSpeed's rule, the
    // hysteresis left before this update.
    double hysteresisBefore = 0;
    if (lossScaling) {
      llvm::Expected<double> hysteresis = storedScalar(
          *store, kir::stepScalarName(kir::StepScalar::LossScaleHysteresis));
      if (!hysteresis)
        return hysteresis.takeError();
      hysteresisBefore = *hysteresis;
    }
    if (llvm::Error err = update.run())
      return err;
    llvm::Expected<double> gradNorm =
        update.scalarOutput(kir::StepScalar::GradNorm);
    if (!gradNorm)
      return gradNorm.takeError();
    for (auto &[axis, traffic] : meshTraffic()) {
      traffic -= trafficBefore[axis];
      stepTraffic[axis] += traffic;
    }
    ++trafficSteps;

    bool skipped = false;
    double usedScale = 0, nextScale = 0, hysteresis = 0;
    bool atMinScale = false;
    if (lossScaling) {
      double overflow = 0;
      for (auto [name, value] :
           {std::pair<kir::StepScalar, double *>{kir::StepScalar::Overflow,
                                                 &overflow},
            {kir::StepScalar::UsedLossScale, &usedScale},
            {kir::StepScalar::LossScale, &nextScale},
            {kir::StepScalar::LossScaleHysteresis, &hysteresis}}) {
        llvm::Expected<double> output = update.scalarOutput(name);
        if (!output)
          return output.takeError();
        *value = *output;
      }
      skipped = overflow != 0;
      // An overflow that should lower the scale but cannot: the scale is at
      // its minimum. Training on would only skip every step.
      atMinScale = skipped && hysteresisBefore <= 1 && nextScale == usedScale;
    }

    // The guard: a NaN or inf loss or gradient norm (never trained
    // through), loss and gradient-norm spikes.
    std::optional<GuardEvent> event = guard.check(loss, *gradNorm, skipped);
    std::string stopMessage;
    if (event && event->kind == GuardEvent::Kind::NonFinite) {
      std::string value =
          std::isfinite(loss)
              ? "the gradient norm is " + formatGuardValue(*gradNorm) +
                    " (the loss, " + formatGuardValue(loss) + ", is finite)"
              : "the loss is " + formatGuardValue(loss);
      if (lossScaling)
        stopMessage = llvm::formatv(
            "fp16 training diverged at step {0}: {1}; the loss scaler {2}, "
            "after {3} skipped update(s) in a row and {4} in the run (scale "
            "{5} at step {6}). A non-finite loss comes from the forward pass, "
            "which no loss scale prevents: lower the learning rate, resume "
            "from an earlier checkpoint, or set guard.action: rollback",
            currentStep, value,
            skipped ? "skipped this update (overflow at scale " +
                          formatScale(usedScale) +
                          (nextScale != usedScale
                               ? ", lowered to " + formatScale(nextScale)
                               : std::string(", kept by the hysteresis")) +
                          ")"
                    : "saw no overflow at scale " + formatScale(usedScale),
            skippedInARow, skippedSteps, formatScale(firstScale), firstStep);
      else
        stopMessage = llvm::formatv(
            "{0} at step {1}; the update is not kept (no checkpoint is "
            "written for this step): lower the learning rate, resume from an "
            "earlier checkpoint, or set guard.action: rollback",
            value, currentStep);
    } else if (atMinScale) {
      event = GuardEvent{
          GuardEvent::Kind::NonFinite,
          llvm::formatv("gradients overflow at the minimum loss scale {0}",
                        formatScale(usedScale))
              .str()};
      stopMessage = llvm::formatv(
          "fp16 training diverged: gradients overflow at the minimum loss "
          "scale {0} (step {1}); the update was skipped and no checkpoint is "
          "written for this step ({2} update(s) skipped in a row, {3} in the "
          "run). Lower the learning rate or loss_scale.min_scale, resume "
          "from an earlier checkpoint, or set guard.action: rollback",
          formatScale(usedScale), currentStep, skippedInARow + 1,
          skippedSteps + 1);
    }
    if (event) {
      llvm::Expected<bool> rolledBack = handleGuardEvent(
          *event, currentStep, loss, skippedSteps, stopMessage);
      if (!rolledBack)
        return rolledBack.takeError();
      if (*rolledBack) {
        skippedInARow = 0;
        checkpointWritten = false;
        continue;
      }
    }
    guard.recordClean(currentStep, loss, *gradNorm, skipped);
    if (pendingSnapshot.step == currentStep) {
      goodSnapshot = std::move(pendingSnapshot);
      pendingSnapshot = Snapshot();
    }

    if (skipped) {
      ++skippedSteps;
      ++skippedInARow;
      if (log) {
        *log << "step " << currentStep
             << ": gradient overflow, update skipped, loss scale "
             << formatScale(usedScale);
        if (nextScale != usedScale)
          *log << " -> " << formatScale(nextScale) << "\n";
        else
          *log << " kept (hysteresis " << int64_t(hysteresisBefore)
               << " -> " << int64_t(hysteresis) << ")\n";
        log->flush();
      }
    } else {
      skippedInARow = 0;
    }

    lastLr = lr;
    consumedSamples += shape.globalBatch;
    consumedTokens += stepTokens;
    intervalTokens += stepTokens;
    intervalFlops += double(flops(**grad)) * microBatches +
                     double(flops(update)) * ranks;
    int64_t step = currentStep++;
    checkpointWritten = false;
    phases().end(step == firstStep ? "first training step" : "training steps");

    if (skipped || (options.logInterval > 0 && step % options.logInterval == 0) ||
        currentStep == options.maxSteps) {
      double seconds =
          std::max(secondsSince(intervalStart) - intervalEvalSeconds, 1e-9);
      double trainSeconds = secondsSince(runStart) - evalSeconds;
      double tokensPerSecond = intervalTokens / seconds;
      double gflops = intervalFlops / seconds / 1e9;
      double mfu = modelFlopsUtilization(tokensPerSecond);
      // Above 100%: the recorded peak came from a busier machine than this
      // one is now. Measured again once (the seconds count as
      // evaluation's, not training's), and the MFU against that.
      if (mfu > 1 && options.remeasurePeakFlops && !peakRemeasured) {
        peakRemeasured = true;
        Clock::time_point measureStart = Clock::now();
        options.peakFlops =
            std::max(options.peakFlops, options.remeasurePeakFlops());
        evalSeconds += secondsSince(measureStart);
        mfu = modelFlopsUtilization(tokensPerSecond);
      }
      double elapsed = secondsSince(runStart);
      double eta = trainSeconds / double(currentStep - firstStep) *
                   double(options.maxSteps - currentStep);
      std::string line;
      llvm::raw_string_ostream os(line);
      llvm::json::OStream j(os);
      j.object([&] {
        j.attribute("step", step);
        j.attribute("loss", loss);
        j.attribute("lr", lr);
        // JSON has no inf or NaN: an overflowed step's norm is null.
        if (std::isfinite(*gradNorm))
          j.attribute("grad_norm", *gradNorm);
        else
          j.attribute("grad_norm", nullptr);
        if (lossScaling) {
          j.attribute("loss_scale", usedScale);
          j.attribute("skipped", skippedSteps);
        }
        j.attribute("batch_size", shape.globalBatch);
        j.attribute("seq_len", shape.seqLen);
        j.attribute("tokens", consumedTokens);
        j.attribute("tokens_per_s", tokensPerSecond);
        j.attribute("gflop_per_s", gflops);
        if (mfu > 0)
          j.attribute("mfu", mfu);
        j.attribute("elapsed_s", elapsed);
      });
      trainPoints.push_back({step, loss});
      if (llvm::Error err = appendMetrics(line))
        return err;
      if (log) {
        std::string scale =
            lossScaling ? " | loss scale " + formatScale(usedScale) : "";
        std::string mfuText =
            mfu > 0 ? llvm::formatv(" | MFU {0:f1}%", 100 * mfu).str() : "";
        *log << llvm::format("step %6lld/%lld | loss %.4f | lr %.2e | grad "
                             "norm %.4f%s | %s tok/s | %.2f GFLOP/s%s | ETA "
                             "%s\n",
                             (long long)step, (long long)options.maxSteps,
                             loss, lr, *gradNorm, scale.c_str(),
                             formatRate(tokensPerSecond).c_str(), gflops,
                             mfuText.c_str(), formatDuration(eta).c_str());
        log->flush();
      }
      intervalStart = Clock::now();
      intervalEvalSeconds = 0;
      intervalTokens = 0;
      intervalFlops = 0;
    }

    if (options.console && secondsSince(lastStatus) >= kStatusSeconds) {
      lastStatus = Clock::now();
      double trainSeconds =
          std::max(secondsSince(runStart) - evalSeconds, 1e-9);
      double tokensPerSecond = (consumedTokens - firstTokens) / trainSeconds;
      double eta = trainSeconds / double(currentStep - firstStep) *
                   double(options.maxSteps - currentStep);
      options.console->setStatus(statusLine(loss, tokensPerSecond, eta));
    }

    if ((options.checkpointInterval > 0 &&
         currentStep % options.checkpointInterval == 0) ||
        currentStep == options.maxSteps) {
      if (llvm::Error err = writeCheckpointNow())
        return err;
      checkpointWritten = true;
      phases().end("checkpoint writing");
    }
  }
  if (options.console)
    options.console->clearStatus();
  if (evalDue(currentStep)) {
    if (llvm::Error err = runEval())
      return err;
    phases().end("evaluation and sample");
  }
  if (!checkpointWritten) {
    if (llvm::Error err = writeCheckpointNow())
      return err;
    phases().end("checkpoint writing");
  }
  if (llvm::Error err = writePlot())
    return err;
  if (log && options.dp) {
    CollectiveStats total;
    for (const auto &entry : gradSteps) {
      CollectiveStats stats = entry.second->collectiveStats();
      total.collectives += stats.collectives;
      total.bytes += stats.bytes;
      total.waitSeconds += stats.waitSeconds;
    }
    int64_t steps = std::max<int64_t>(currentStep - firstStep, 1);
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
  if (llvm::Error err = reportMemory())
    return err;
  if (log) {
    // This run's steps and tokens; after a resume also the whole run's.
    *log << llvm::format("done: %lld steps, %lld tokens in %s",
                         (long long)(currentStep - firstStep),
                         (long long)(consumedTokens - firstTokens),
                         formatDuration(secondsSince(runStart)).c_str());
    if (firstStep > 0)
      *log << llvm::format(" (resumed at step %lld; %lld steps, %lld tokens "
                           "since step 0)",
                           (long long)firstStep, (long long)currentStep,
                           (long long)consumedTokens);
    *log << "\n";
  }
  return llvm::Error::success();
}

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
    printMemoryBreakdown(*options.log, breakdown);
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
