// The trainer's state on disk and in memory: checkpoints written and
// resumed, metrics kept over a resume, and the guard's rollback snapshots.
#include "runtime/Train/Trainer.h"
#include "runtime/Train/TrainerSupport.h"
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
using namespace llmc::runtime::trainer;

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
      llvm::Expected<double> value = storedScalar(*store, kir::StepScalar::LossScale);
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
