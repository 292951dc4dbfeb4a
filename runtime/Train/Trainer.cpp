// The training loop: steps, micro-batches, the update, the guard,
// evaluation, progress lines and checkpoints when due.
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
      if (llvm::Error err = data.valBatch(i < batches ? i : 0, tokens, targets))
        return err;
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
  if (currentStep >= options.maxSteps) {
    if (options.log)
      *options.log << "nothing to do: the run is at step " << currentStep
                   << " of max_steps " << options.maxSteps << "\n";
    return llvm::Error::success();
  }
  RunState run;
  if (llvm::Error err = startRun(run))
    return err;
  while (currentStep < options.maxSteps) {
    // A step boundary: a stop asked for (SIGINT, SIGTERM) ends the run
    // here with a checkpoint that --resume continues exactly.
    llvm::Expected<bool> stopped = stopIfAsked(run);
    if (!stopped)
      return stopped.takeError();
    if (*stopped)
      return llvm::Error::success();
    if (llvm::Error err = beforeStep(run))
      return err;
    double lrScale = 1;
    if (options.injectFault)
      if (llvm::Error err = options.injectFault(currentStep, *store, lrScale))
        return err;
    llvm::Expected<StepResult> result = trainStep(run, lrScale);
    if (!result)
      return result.takeError();
    llvm::Expected<bool> rolledBack = judgeStep(run, *result);
    if (!rolledBack)
      return rolledBack.takeError();
    if (*rolledBack)
      continue;
    if (llvm::Error err = finishStep(run, *result))
      return err;
  }
  return finishRun(run);
}

llvm::Error Trainer::startRun(RunState &run) {
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
  run.maxMicroBatches = options.maxGlobalBatch / options.microBatch;
  // Dynamic loss scaling (fp16): the update step reports an overflow and
  // then skips the update, which Adam's step count t must not count.
  run.lossScaling = programs.updateStep->hasOutput(kir::StepScalar::Overflow);
  if (run.lossScaling) {
    llvm::Expected<double> skipped =
        storedScalar(*store, kir::StepScalar::LossScaleSkippedSteps);
    if (!skipped)
      return skipped.takeError();
    run.skippedSteps = int64_t(*skipped);
    llvm::Expected<double> scale = storedScalar(*store, kir::StepScalar::LossScale);
    if (!scale)
      return scale.takeError();
    run.firstScale = *scale;
  }
  run.runStart = run.intervalStart = Clock::now();
  run.lastStatus = run.runStart - std::chrono::seconds(1);
  run.firstStep = currentStep;
  run.firstTokens = consumedTokens;
  return llvm::Error::success();
}

bool Trainer::evalDue(int64_t step) const {
  return (options.evalInterval > 0 && step % options.evalInterval == 0) ||
         step == options.maxSteps;
}

bool Trainer::checkpointDue(int64_t step) const {
  return (options.checkpointInterval > 0 &&
          step % options.checkpointInterval == 0) ||
         step == options.maxSteps;
}

/// Rollback: a snapshot at the start, every snapshot_interval steps and at
/// every checkpoint (so that a resumed run has the snapshot the
/// uninterrupted one has).
bool Trainer::snapshotDue(int64_t step) const {
  const GuardOptions &guardOptions = guard.settings();
  return (guardOptions.snapshotInterval > 0 &&
          step % guardOptions.snapshotInterval == 0) ||
         (options.checkpointInterval > 0 &&
          step % options.checkpointInterval == 0);
}

int64_t Trainer::flopsOf(RunState &run, const Executor &executor) {
  auto it = run.flops.find(&executor);
  if (it == run.flops.end())
    it = run.flops.emplace(&executor, kir::countFlops(executor.program()))
             .first;
  return it->second;
}

llvm::Error Trainer::evaluateAndLog() {
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
  if (llvm::raw_ostream *log = options.log) {
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
}

llvm::Expected<bool> Trainer::stopIfAsked(RunState &run) {
  llvm::Expected<int> stop = agreedStopSignal();
  if (!stop)
    return stop.takeError();
  if (*stop == 0)
    return false;
  stoppedBy = *stop;
  if (!run.checkpointWritten)
    if (llvm::Error err = writeCheckpointNow())
      return err;
  if (options.console)
    options.console->clearStatus();
  if (llvm::Error err = writePlot())
    return err;
  return true;
}

llvm::Error Trainer::beforeStep(RunState &run) {
  // Evaluations, pruning and compiling grad steps for new lengths are not
  // in the rates: their time is taken out.
  if (evalDue(currentStep)) {
    Clock::time_point evalStart = Clock::now();
    if (llvm::Error err = evaluateAndLog())
      return err;
    phases().end("evaluation and sample");
    run.excludeSeconds(secondsSince(evalStart));
  }
  if (currentStep == options.pruneAtStep) {
    Clock::time_point pruneStart = Clock::now();
    if (llvm::Error err = pruneNow())
      return err;
    run.excludeSeconds(secondsSince(pruneStart));
  }
  if (options.beforeStep)
    options.beforeStep(currentStep);
  if (guard.settings().action != GuardAction::Rollback)
    return llvm::Error::success();
  if (goodSnapshot.step < 0)
    return takeSnapshot(goodSnapshot, run.skippedSteps);
  if (goodSnapshot.step != currentStep &&
      pendingSnapshot.step != currentStep && snapshotDue(currentStep))
    return takeSnapshot(pendingSnapshot, run.skippedSteps);
  return llvm::Error::success();
}

llvm::Expected<Trainer::StepResult> Trainer::trainStep(RunState &run,
                                                       double lrScale) {
  StepResult result;
  result.shape = options.stepShape(currentStep, consumedSamples);
  result.microBatches = result.shape.globalBatch / options.microBatch;
  // This rank's micro-batches: a contiguous share [first, first + mine).
  const int64_t ranks = dpSize();
  if (result.microBatches % ranks != 0)
    return llvm::createStringError(llvm::formatv(
        "step {0}: the global batch of {1} sequences is {2} micro-batches "
        "of {3}, which do not split over {4} data-parallel ranks; make the "
        "global batch a multiple of micro_batch_size * dp",
        currentStep, result.shape.globalBatch, result.microBatches,
        options.microBatch, ranks));
  const int64_t mine = result.microBatches / ranks, first = dpRank() * mine;
  Clock::time_point compileStart = Clock::now();
  // With data parallelism the last micro-batch communicates its
  // gradients; the ones before only accumulate (no_sync).
  llvm::Expected<Executor *> grad = gradStep(result.shape.seqLen, true);
  if (!grad)
    return grad.takeError();
  result.grad = *grad;
  Executor *noSync = *grad;
  if (options.dp && mine > 1 && options.accumulateWithoutSync) {
    llvm::Expected<Executor *> local = gradStep(result.shape.seqLen, false);
    if (!local)
      return local.takeError();
    noSync = *local;
  }
  run.excludeSeconds(secondsSince(compileStart));
  std::map<std::string, comm::Traffic> trafficBefore = meshTraffic();
  std::vector<float> losses;
  if (llvm::Error err =
          options.pp ? pipelineMicroBatches(run, result, first, mine, *noSync,
                                            losses)
                     : runMicroBatches(run, result, first, mine, *noSync,
                                       losses))
    return err;
  llvm::Expected<double> loss = stepLoss(std::move(losses),
                                         result.microBatches);
  if (!loss)
    return loss.takeError();
  result.loss = *loss;
  if (llvm::Error err = sumTiedGradients())
    return err;
  if (llvm::Error err = runUpdate(run, lrScale, result))
    return err;
  for (auto &[axis, traffic] : meshTraffic()) {
    traffic -= trafficBefore[axis];
    stepTraffic[axis] += traffic;
  }
  ++trafficSteps;
  return result;
}

llvm::Error Trainer::readMicroBatch(RunState &run, int64_t microBatch,
                                    int64_t seqLen, bool skip) {
  ++batchesRead;
  // Another rank's micro-batch moves the loader past its windows unread
  // (a loader without skip reads and drops them).
  if (skip && data.skip) {
    data.skip(options.microBatch);
    return llvm::Error::success();
  }
  return data.next(currentStep, microBatch, seqLen, run.tokens, run.targets);
}

llvm::Error Trainer::runMicroBatches(RunState &run, const StepResult &result,
                                     int64_t first, int64_t mine,
                                     Executor &noSync,
                                     std::vector<float> &losses) {
  const int64_t seqLen = result.shape.seqLen;
  for (int64_t m = 0; m < result.microBatches; ++m) {
    bool other = m < first || m >= first + mine; // another rank's
    if (llvm::Error err = readMicroBatch(run, m, seqLen, other))
      return err;
    if (other)
      continue;
    Executor &step = m == first + mine - 1 ? *result.grad : noSync;
    int64_t batch = options.microBatch;
    if (llvm::Error err =
            step.setTensor("tokens", tokenTensor(run.tokens, batch, seqLen)))
      return err;
    if (llvm::Error err = step.setTensor(
            "targets", tokenTensor(run.targets, batch, seqLen)))
      return err;
    // Each rank averages its own micro-batches; the gradient all-reduce
    // averages over the ranks.
    if (llvm::Error err = step.setScalar(kir::StepScalar::DLoss, 1.0 / double(mine)))
      return err;
    // Each micro-batch of each step gets its own dropout masks (numbered
    // globally, so that data parallelism draws the same ones).
    step.setRng(options.seed,
                uint64_t(currentStep * run.maxMicroBatches + m));
    if (llvm::Error err = step.run())
      return err;
    llvm::Expected<double> loss = step.scalarOutput(kir::StepScalar::Loss);
    if (!loss)
      return loss.takeError();
    losses.push_back(float(*loss));
  }
  return llvm::Error::success();
}

llvm::Error Trainer::pipelineMicroBatches(RunState &run,
                                          const StepResult &result,
                                          int64_t first, int64_t mine,
                                          Executor &noSync,
                                          std::vector<float> &losses) {
  std::vector<std::vector<int32_t>> stepTokens, stepTargets;
  for (int64_t m = 0; m < result.microBatches; ++m) {
    bool other = m < first || m >= first + mine; // another rank's
    if (llvm::Error err = readMicroBatch(run, m, result.shape.seqLen, other))
      return err;
    if (other)
      continue;
    stepTokens.push_back(run.tokens);
    stepTargets.push_back(run.targets);
  }
  if (llvm::Error err = runPipelineStep(stepTokens, stepTargets,
                                        result.shape.seqLen, first,
                                        run.maxMicroBatches, *result.grad,
                                        noSync, losses))
    return err;
  // Only the last stage has losses; the others gather zeros.
  if (!lastStage())
    losses.assign(size_t(mine), 0.0f);
  return llvm::Error::success();
}

llvm::Expected<double> Trainer::stepLoss(std::vector<float> losses,
                                         int64_t microBatches) {
  // Summed in the global order of the micro-batches on every rank.
  llvm::Expected<std::vector<float>> allLosses =
      gatherFloats(std::move(losses));
  if (!allLosses)
    return allLosses.takeError();
  double lossSum = 0;
  for (float value : *allLosses)
    lossSum += double(value);
  double loss = lossSum / double(microBatches);
  if (options.pp)
    return fromLastStage(loss);
  return loss;
}

llvm::Error Trainer::sumTiedGradients() {
  // A tied parameter's copies on the first and the last stage get the
  // sum of both stages' gradients (Megatron-LM's embedding group). Under
  // ZeRO the gradient a rank updates with is its block (grad.shard.<p>,
  // already averaged over dp); the two stages cut the copies alike, so
  // the dp rank's blocks on the two stages are the same elements.
  for (const std::string &name : options.ppTiedParams) {
    std::string gradName =
        (programs.shardInit ? "grad.shard." : "grad.") + name;
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
  return llvm::Error::success();
}

llvm::Error Trainer::runUpdate(RunState &run, double lrScale,
                               StepResult &result) {
  Executor &update = *programs.updateStep;
  // A rollback lowers the rate for its cooldown.
  result.lr =
      options.learningRate(currentStep) * guard.state().lrFactor * lrScale;
  if (llvm::Error err = update.setScalar(kir::StepScalar::Lr, result.lr))
    return err;
  // AdamW's bias corrections from the betas the update was compiled with
  // (the program's; none for SGD), at its step count, which skipped
  // updates do not advance.
  if (llvm::Error err =
          update.setBiasCorrections(currentStep - run.skippedSteps + 1))
    return err;
  // Whether an overflow may still lower the scale: DeepSpeed's rule, the
  // hysteresis left before this update.
  if (run.lossScaling) {
    llvm::Expected<double> hysteresis =
        storedScalar(*store, kir::StepScalar::LossScaleHysteresis);
    if (!hysteresis)
      return hysteresis.takeError();
    result.hysteresisBefore = *hysteresis;
  }
  if (llvm::Error err = update.run())
    return err;
  llvm::Expected<double> gradNorm = update.scalarOutput(kir::StepScalar::GradNorm);
  if (!gradNorm)
    return gradNorm.takeError();
  result.gradNorm = *gradNorm;
  if (!run.lossScaling)
    return llvm::Error::success();
  double overflow = 0;
  for (auto [scalar, value] :
       {std::pair<kir::StepScalar, double *>{kir::StepScalar::Overflow,
                                             &overflow},
        {kir::StepScalar::UsedLossScale, &result.usedScale},
        {kir::StepScalar::LossScale, &result.nextScale},
        {kir::StepScalar::LossScaleHysteresis, &result.hysteresis}}) {
    llvm::Expected<double> output = update.scalarOutput(scalar);
    if (!output)
      return output.takeError();
    *value = *output;
  }
  result.skipped = overflow != 0;
  // An overflow that should lower the scale but cannot: the scale is at
  // its minimum. Training on would only skip every step.
  result.atMinScale = result.skipped && result.hysteresisBefore <= 1 &&
                      result.nextScale == result.usedScale;
  return llvm::Error::success();
}

std::string Trainer::divergenceMessage(const RunState &run,
                                       const StepResult &result) const {
  double loss = result.loss;
  std::string value =
      std::isfinite(loss)
          ? "the gradient norm is " + formatGuardValue(result.gradNorm) +
                " (the loss, " + formatGuardValue(loss) + ", is finite)"
          : "the loss is " + formatGuardValue(loss);
  if (!run.lossScaling)
    return llvm::formatv(
        "{0} at step {1}; the update is not kept (no checkpoint is "
        "written for this step): lower the learning rate, resume from an "
        "earlier checkpoint, or set guard.action: rollback",
        value, currentStep);
  return llvm::formatv(
      "fp16 training diverged at step {0}: {1}; the loss scaler {2}, "
      "after {3} skipped update(s) in a row and {4} in the run (scale "
      "{5} at step {6}). A non-finite loss comes from the forward pass, "
      "which no loss scale prevents: lower the learning rate, resume "
      "from an earlier checkpoint, or set guard.action: rollback",
      currentStep, value,
      result.skipped
          ? "skipped this update (overflow at scale " +
                formatScale(result.usedScale) +
                (result.nextScale != result.usedScale
                     ? ", lowered to " + formatScale(result.nextScale)
                     : std::string(", kept by the hysteresis")) +
                ")"
          : "saw no overflow at scale " + formatScale(result.usedScale),
      run.skippedInARow, run.skippedSteps, formatScale(run.firstScale),
      run.firstStep);
}

llvm::Expected<bool> Trainer::judgeStep(RunState &run,
                                        const StepResult &result) {
  // The guard: a NaN or inf loss or gradient norm (never trained
  // through), loss and gradient-norm spikes.
  std::optional<GuardEvent> event =
      guard.check(result.loss, result.gradNorm, result.skipped);
  std::string stopMessage;
  if (event && event->kind == GuardEvent::Kind::NonFinite) {
    stopMessage = divergenceMessage(run, result);
  } else if (result.atMinScale) {
    event = GuardEvent{
        GuardEvent::Kind::NonFinite,
        llvm::formatv("gradients overflow at the minimum loss scale {0}",
                      formatScale(result.usedScale))
            .str()};
    stopMessage = llvm::formatv(
        "fp16 training diverged: gradients overflow at the minimum loss "
        "scale {0} (step {1}); the update was skipped and no checkpoint is "
        "written for this step ({2} update(s) skipped in a row, {3} in the "
        "run). Lower the learning rate or loss_scale.min_scale, resume "
        "from an earlier checkpoint, or set guard.action: rollback",
        formatScale(result.usedScale), currentStep, run.skippedInARow + 1,
        run.skippedSteps + 1);
  }
  if (event) {
    llvm::Expected<bool> rolledBack = handleGuardEvent(
        *event, currentStep, result.loss, run.skippedSteps, stopMessage);
    if (!rolledBack)
      return rolledBack.takeError();
    if (*rolledBack) {
      run.skippedInARow = 0;
      run.checkpointWritten = false;
      return true;
    }
  }
  guard.recordClean(currentStep, result.loss, result.gradNorm,
                    result.skipped);
  if (pendingSnapshot.step == currentStep) {
    goodSnapshot = std::move(pendingSnapshot);
    pendingSnapshot = Snapshot();
  }
  return false;
}

llvm::Error Trainer::finishStep(RunState &run, const StepResult &result) {
  if (result.skipped) {
    ++run.skippedSteps;
    ++run.skippedInARow;
    if (llvm::raw_ostream *log = options.log) {
      *log << "step " << currentStep
           << ": gradient overflow, update skipped, loss scale "
           << formatScale(result.usedScale);
      if (result.nextScale != result.usedScale)
        *log << " -> " << formatScale(result.nextScale) << "\n";
      else
        *log << " kept (hysteresis " << int64_t(result.hysteresisBefore)
             << " -> " << int64_t(result.hysteresis) << ")\n";
      log->flush();
    }
  } else {
    run.skippedInARow = 0;
  }
  const int64_t stepTokens = result.shape.globalBatch * result.shape.seqLen;
  lastLr = result.lr;
  consumedSamples += result.shape.globalBatch;
  consumedTokens += stepTokens;
  run.intervalTokens += stepTokens;
  run.intervalFlops +=
      double(flopsOf(run, *result.grad)) * result.microBatches +
      double(flopsOf(run, *programs.updateStep)) * dpSize();
  int64_t step = currentStep++;
  run.checkpointWritten = false;
  phases().end(step == run.firstStep ? "first training step"
                                     : "training steps");
  if (result.skipped ||
      (options.logInterval > 0 && step % options.logInterval == 0) ||
      currentStep == options.maxSteps)
    if (llvm::Error err = logStep(run, result, step))
      return err;
  if (options.console && secondsSince(run.lastStatus) >= kStatusSeconds) {
    run.lastStatus = Clock::now();
    double trainSeconds =
        std::max(secondsSince(run.runStart) - run.excludedSeconds, 1e-9);
    double tokensPerSecond = (consumedTokens - run.firstTokens) / trainSeconds;
    double eta = trainSeconds / double(currentStep - run.firstStep) *
                 double(options.maxSteps - currentStep);
    options.console->setStatus(statusLine(result.loss, tokensPerSecond, eta));
  }
  if (checkpointDue(currentStep)) {
    if (llvm::Error err = writeCheckpointNow())
      return err;
    run.checkpointWritten = true;
    phases().end("checkpoint writing");
  }
  return llvm::Error::success();
}

llvm::Error Trainer::logStep(RunState &run, const StepResult &result,
                             int64_t step) {
  double seconds = std::max(
      secondsSince(run.intervalStart) - run.intervalExcludedSeconds, 1e-9);
  double trainSeconds = secondsSince(run.runStart) - run.excludedSeconds;
  double tokensPerSecond = run.intervalTokens / seconds;
  double gflops = run.intervalFlops / seconds / 1e9;
  double mfu = modelFlopsUtilization(tokensPerSecond);
  // Above 100%: the recorded peak came from a busier machine than this
  // one is now. Measured again once (the seconds count as evaluation's,
  // not training's), and the MFU against that.
  if (mfu > 1 && options.remeasurePeakFlops && !run.peakRemeasured) {
    run.peakRemeasured = true;
    Clock::time_point measureStart = Clock::now();
    options.peakFlops =
        std::max(options.peakFlops, options.remeasurePeakFlops());
    run.excludedSeconds += secondsSince(measureStart);
    mfu = modelFlopsUtilization(tokensPerSecond);
  }
  double elapsed = secondsSince(run.runStart);
  double eta = trainSeconds / double(currentStep - run.firstStep) *
               double(options.maxSteps - currentStep);
  std::string line;
  llvm::raw_string_ostream os(line);
  llvm::json::OStream j(os);
  j.object([&] {
    j.attribute("step", step);
    j.attribute("loss", result.loss);
    j.attribute("lr", result.lr);
    // JSON has no inf or NaN: an overflowed step's norm is null.
    if (std::isfinite(result.gradNorm))
      j.attribute("grad_norm", result.gradNorm);
    else
      j.attribute("grad_norm", nullptr);
    if (run.lossScaling) {
      j.attribute("loss_scale", result.usedScale);
      j.attribute("skipped", run.skippedSteps);
    }
    j.attribute("batch_size", result.shape.globalBatch);
    j.attribute("seq_len", result.shape.seqLen);
    j.attribute("tokens", consumedTokens);
    j.attribute("tokens_per_s", tokensPerSecond);
    j.attribute("gflop_per_s", gflops);
    if (mfu > 0)
      j.attribute("mfu", mfu);
    j.attribute("elapsed_s", elapsed);
  });
  trainPoints.push_back({step, result.loss});
  if (llvm::Error err = appendMetrics(line))
    return err;
  if (llvm::raw_ostream *log = options.log) {
    std::string scale = run.lossScaling
                            ? " | loss scale " + formatScale(result.usedScale)
                            : "";
    std::string mfuText =
        mfu > 0 ? llvm::formatv(" | MFU {0:f1}%", 100 * mfu).str() : "";
    *log << llvm::format("step %6lld/%lld | loss %.4f | lr %.2e | grad "
                         "norm %.4f%s | %s tok/s | %.2f GFLOP/s%s | ETA "
                         "%s\n",
                         (long long)step, (long long)options.maxSteps,
                         result.loss, result.lr, result.gradNorm,
                         scale.c_str(), formatRate(tokensPerSecond).c_str(),
                         gflops, mfuText.c_str(), formatDuration(eta).c_str());
    log->flush();
  }
  run.intervalStart = Clock::now();
  run.intervalExcludedSeconds = 0;
  run.intervalTokens = 0;
  run.intervalFlops = 0;
  return llvm::Error::success();
}

llvm::Error Trainer::finishRun(RunState &run) {
  if (options.console)
    options.console->clearStatus();
  if (evalDue(currentStep)) {
    if (llvm::Error err = evaluateAndLog())
      return err;
    phases().end("evaluation and sample");
  }
  if (!run.checkpointWritten) {
    if (llvm::Error err = writeCheckpointNow())
      return err;
    phases().end("checkpoint writing");
  }
  if (llvm::Error err = writePlot())
    return err;
  reportCommunication(run);
  if (llvm::Error err = reportMemory())
    return err;
  if (llvm::raw_ostream *log = options.log) {
    // This run's steps and tokens; after a resume also the whole run's.
    *log << llvm::format("done: %lld steps, %lld tokens in %s",
                         (long long)(currentStep - run.firstStep),
                         (long long)(consumedTokens - run.firstTokens),
                         formatDuration(secondsSince(run.runStart)).c_str());
    if (run.firstStep > 0)
      *log << llvm::format(" (resumed at step %lld; %lld steps, %lld tokens "
                           "since step 0)",
                           (long long)run.firstStep, (long long)currentStep,
                           (long long)consumedTokens);
    *log << "\n";
  }
  return llvm::Error::success();
}
