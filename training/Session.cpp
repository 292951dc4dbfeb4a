// The training session: create() prepares a run in the order that writes
// nothing before everything is checked; run() hands it to the trainer.
#include "training/Session.h"

#include "training/ModelFloor.h"
#include "training/Plan/Estimate.h"
#include "training/Plan/ModelAnalysis.h"
#include "runtime/Cpu/SgemmPeak.h"
#include "runtime/Exec/CpuBudget.h"
#include "runtime/Exec/MemoryBudget.h"
#ifdef LLMC_HAVE_NVRTC
#include "runtime/Cuda/NcclCommunicator.h"
#endif

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <algorithm>
#include <chrono>
#include <thread>
#ifdef __GLIBC__
#include <malloc.h>
#endif

using namespace llmc;
using namespace llmc::training;
using mlir::llmc::ModelConfig;
using mlir::llmc::ParameterInfo;
namespace rt = ::llmc::runtime;
namespace plan = ::mlir::llmc::plan;

namespace {
/// The sgemm that measures the CPU's peak at start-up (the benchmarks'
/// size: large enough for the BLAS to reach its peak).
constexpr int kPeakSgemmSize = 2048;

llvm::Error prefixed(const llvm::Twine &prefix, llvm::Error error) {
  return llvm::createStringError(prefix + llvm::toString(std::move(error)));
}
} // namespace

Session::Session(TrainingConfig config, Layout &layout, SessionOptions options)
    : cfg(std::move(config)), layout(layout), options(std::move(options)),
      timings(this->options.timings ? *this->options.timings : ownTimings),
      sourceMgr(std::make_shared<llvm::SourceMgr>()) {}

Session::~Session() = default;

llvm::Expected<std::unique_ptr<Session>>
Session::create(TrainingConfig config, Layout &layout, SessionOptions options) {
  std::unique_ptr<Session> session(
      new Session(std::move(config), layout, std::move(options)));
  if (llvm::Error err = session->prepare())
    return err;
  return session;
}

llvm::Error Session::prepare() {
  // 1. The data. From here on the resident set is followed by phase, for
  //    the memory report at the end of the run.
  llvm::Expected<TrainingData> loaded = loadTrainingData(cfg);
  if (!loaded)
    return loaded.takeError();
  data = std::move(*loaded);
  memoryPhases.end("data loading");
  timings.end("data");

  // 2. The checkpoint to resume from, checked before anything is compiled.
  llvm::Expected<ResumePoint> point =
      findResumePoint(cfg, options.resume, /*warn=*/layout.rank == 0);
  if (!point)
    return point.takeError();
  resume = std::move(*point);

  // 3. Compile: the training step at the full length, evaluation without
  //    dropout, and grad steps for shorter lengths when they are needed.
  registerDialects(context);
  diagnostics =
      std::make_unique<mlir::SourceMgrDiagnosticHandler>(*sourceMgr, &context);
  source = std::make_unique<ModelSource>(context, cfg, sourceMgr);
  if (llvm::Error err = openDeviceAndMesh())
    return err;
  if (llvm::Error err = buildTrainingStep())
    return err;
  if (llvm::Error err = makeStepExecutors())
    return err;
  if (llvm::Error err = makeEvalExecutors())
    return err;

  // 4. Weights: a checkpoint, --init-from, or the seeded initialization.
  if (llvm::Error err = initializeWeights())
    return err;

  // 5. The trainer, resumed from the checkpoint.
  if (llvm::Error err = makeTrainer())
    return err;

  // 6. Everything checked: now OUT is written (by rank 0).
  if (layout.rank == 0)
    if (llvm::Error err = prepareOutputDirectory(cfg, resume, out()))
      return err;
  timings.end("output directory, config.yaml");
  logRunSummary();
  // Compiling freed most of what it allocated (MLIR modules, LLVM's code
  // generation); glibc keeps such memory resident in its free lists until
  // asked to give it back.
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  memoryPhases.end("setup");
  timings.end("malloc_trim");
  return llvm::Error::success();
}

llvm::Error Session::openDeviceAndMesh() {
  llvm::Expected<Device> opened = openDevice(cfg);
  if (!opened)
    return opened.takeError();
  device = std::move(*opened);
  device.log = &out();
  device.phases = &memoryPhases;
  device.timings = &timings;
  // The programs' collectives: on the host's MPI communicator of each
  // axis, or on the GPU through an NCCL communicator per axis group (its
  // unique id shared over that group's MPI communicator).
  for (auto [name, host, onDevice] :
       {std::tuple{"dp", layout.dp.get(), &deviceDp},
        std::tuple{"tp", layout.tp.get(), &deviceTp}}) {
    if (!host)
      continue;
#ifdef LLMC_HAVE_NVRTC
    if (device.cudaStore) {
      llvm::Expected<std::unique_ptr<rt::comm::Communicator>> nccl =
          rt::comm::createNccl(*host, device.cudaDevice, layout.commOptions);
      if (!nccl)
        return nccl.takeError();
      *onDevice = std::move(*nccl);
    }
#endif
    device.mesh.axes[name] = *onDevice ? onDevice->get() : host;
  }
  // Pipeline transfers and the stages' norm sum: on the host (CPU only).
  if (layout.pp)
    device.mesh.axes["pp"] = layout.pp.get();
  return llvm::Error::success();
}

llvm::Error Session::buildTrainingStep() {
  // What shapes the compiled programs; under tensor parallelism each rank
  // compiles its own (its block of the vocabulary).
  training = cfg.stepOptions();
  training.tpRank = layout.tp ? layout.tp->rank() : 0;
  training.ppStage = layout.pp ? layout.pp->rank() : 0;
  training.forCuda = cfg.device != "cpu";

  // Before the IR is built (minutes for an absurd config): a model or
  // batch that cannot fit, by its sizes alone, fails now.
  if (cfg.modelMlirPath.empty()) {
    llvm::Expected<ModelFloor> floor =
        modelFloor(cfg.model, cfg.microBatchSize, cfg.seqLen,
                   /*weights, gradients, two AdamW moments=*/16,
                   "the training step");
    if (!floor)
      return floor.takeError();
    int64_t ranks = 1;
    for (const auto *axis : {&layout.dp, &layout.tp, &layout.pp})
      if (*axis)
        ranks *= (*axis)->size();
    if (std::optional<rt::AvailableMemory> available = availableMemory(device))
      if (llvm::Error error = checkFloorFits(
              *floor, *available, ranks, "the training step",
              "nothing was built. To fit: ZeRO sharding over more ranks "
              "(parallel.zero), a smaller model or micro-batch"))
        return error;
  }
  auto compileStart = std::chrono::steady_clock::now();
  llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> module =
      source->build(cfg.seqLen, /*withDropout=*/true);
  if (!module)
    return module.takeError();
  info = mlir::llmc::getModelInfo(**module);
  // Pipeline parallelism: the cut, once for every program of the run, and
  // the parameters the first and the last stage both hold.
  if (layout.pp) {
    llvm::Expected<std::vector<std::string>> tied =
        cutPipeline(**module, cfg, training, out());
    if (!tied)
      return tied.takeError();
    ppTiedParams = std::move(*tied);
  }
  timings.end("checkpoint check, context, IR build");
  llvm::Expected<TrainingStepPrograms> compiled =
      compileTrainingStep(**module, training);
  if (!compiled)
    return compiled.takeError();
  programs = std::move(*compiled);
  tpShards = tpShardsOf(**module);
  memoryPhases.end("building and lowering the training step");
  timings.end("passes and lowering");
  std::string modelName = info.name.empty() ? "model" : info.name;
  out() << llvm::formatv(
      "llmc run: model {0}: {1} parameters in {2} tensors; training step "
      "({4}, remat {5}) built and lowered in {3:f2} s\n",
      modelName, info.numParameters, info.parameters.size(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    compileStart)
          .count(),
      stringifyPrecision(cfg.precision.kind),
      stringifyRematPolicy(cfg.remat.policy));

  // Before any kernel is compiled: a run that cannot fit fails now.
  std::vector<const kir::Program *> planned = {
      &programs->gradStep, &programs->updateStep, &programs->forward};
  for (const auto *optional : {&programs->gradStepNoSync, &programs->shardInit,
                               &programs->castWeights})
    if (optional->has_value())
      planned.push_back(&**optional);
  if (std::optional<rt::AvailableMemory> available = availableMemory(device))
    if (llvm::Error error = rt::checkMemoryFits(rt::memoryNeed(planned),
                                                *available, "the training step",
                                                /*training=*/true))
      return error;
  timings.end("memory check");
  return llvm::Error::success();
}

llvm::Error Session::makeStepExecutors() {
  auto madeGrad =
      makeExecutor(std::move(programs->gradStep), device,
                   llvm::formatv("grad step (T={0})", cfg.seqLen).str());
  if (!madeGrad)
    return madeGrad.takeError();
  grad = std::move(*madeGrad);
  auto madeUpdate =
      makeExecutor(std::move(programs->updateStep), device, "update step");
  if (!madeUpdate)
    return madeUpdate.takeError();
  update = std::move(*madeUpdate);
  // 1F1B's forward half: the stage's training @forward (dropout as in
  // the grad step).
  if (layout.pp) {
    auto created = makeExecutor(kir::Program(programs->forward), device,
                                "forward (pipeline stage)");
    if (!created)
      return created.takeError();
    pipelineForward = std::move(*created);
  }
  return llvm::Error::success();
}

llvm::Error Session::makeEvalExecutors() {
  kir::Program evalProgram = std::move(programs->forward);
  bool dropout = cfg.modelMlirPath.empty() && cfg.model.dropout > 0;
  if (dropout) {
    llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> evalModule =
        source->build(cfg.seqLen, /*withDropout=*/false);
    if (!evalModule)
      return evalModule.takeError();
    llvm::Expected<kir::Program> lowered =
        compileForward(**evalModule, training);
    if (!lowered)
      return lowered.takeError();
    evalProgram = std::move(*lowered);
    timings.end("forward (evaluation): IR build, lowering");
  }
  auto madeEval =
      makeExecutor(std::move(evalProgram), device, "forward (evaluation)");
  if (!madeEval)
    return madeEval.takeError();
  eval = std::move(*madeEval);
  // Samples draw one sequence at a time: a forward for one sequence saves
  // running the whole micro-batch per token.
  if (cfg.sampleTokens > 0 && layout.pp) {
    out() << "llmc run: no samples under pipeline parallelism yet (each "
             "token would need a pass through every stage)\n";
    cfg.sampleTokens = 0;
  }
  if (cfg.sampleTokens > 0 && cfg.modelMlirPath.empty() &&
      cfg.microBatchSize > 1) {
    llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> samplerModule =
        source->build(cfg.seqLen, /*withDropout=*/false, /*batch=*/1);
    if (!samplerModule)
      return samplerModule.takeError();
    llvm::Expected<kir::Program> lowered =
        compileForward(**samplerModule, training);
    if (!lowered)
      return lowered.takeError();
    timings.end("forward (samples): IR build, lowering");
    auto created =
        makeExecutor(std::move(*lowered), device, "forward (samples)");
    if (!created)
      return created.takeError();
    sampler = std::move(*created);
  }
  return llvm::Error::success();
}

llvm::Error Session::initializeWeights() {
  // ZeRO-3 has no full parameters to set: they go to the trainer, which
  // cuts every rank's blocks from them. Under tensor parallelism every
  // rank makes the whole weights too and keeps its share of the split
  // ones: one process's model, cut.
  const bool fromCheckpoint = resume.checkpoint.has_value();
  bool zero3 = cfg.parallel.dp > 1 && cfg.parallel.zero == 3;
  if (!fromCheckpoint && (zero3 || !tpShards.empty() || layout.pp)) {
    std::vector<rt::ParamSpec> specs;
    for (const ParameterInfo &param : info.parameters)
      specs.push_back(
          {param.name, std::vector<int64_t>(param.type.getShape().begin(),
                                            param.type.getShape().end())});
    llvm::Expected<rt::TensorMap> params =
        rt::readWeights(specs, eval->program(), cfg.initFrom, cfg.seed);
    if (!params)
      return params.takeError();
    if (zero3) {
      initialParams = std::move(*params);
    } else {
      for (auto &[name, tensor] : *params) {
        rt::HostTensor value = std::move(tensor);
        // Pipeline parallelism: another stage's parameter.
        if (!llvm::any_of(eval->program().params,
                          [&, &name = name](const kir::Binding &input) {
                            return input.name == name;
                          }))
          continue;
        if (auto it = tpShards.find(name); it != tpShards.end()) {
          llvm::Expected<rt::HostTensor> mine =
              rt::cutTpShard(value, it->second, layout.tp->rank());
          if (!mine)
            return prefixed("'" + name + "': ", mine.takeError());
          value = std::move(*mine);
        }
        if (llvm::Error err = eval->setTensor(name, value))
          return err;
      }
    }
  } else if (!fromCheckpoint) {
    if (llvm::Error err = rt::loadWeights(*eval, cfg.initFrom, cfg.seed))
      return err;
  }
  memoryPhases.end("weights");
  timings.end(fromCheckpoint         ? "weights (from the checkpoint, later)"
              : cfg.initFrom.empty() ? "weights: seeded initialization"
                                     : "weights: --init-from");
  return llvm::Error::success();
}

/// The runtime's trainer options from the training config: the one place
/// they are filled (the runtime cannot read the config, frontend/ is a
/// layer above it). The schedules go in as functions of the step.
rt::TrainerOptions Session::trainerOptions() {
  const TrainingConfig &config = cfg;
  rt::TrainerOptions options;
  BatchSchedule batches = config.batchSchedule();
  options.stepShape = [batches](int64_t step, int64_t consumedSamples) {
    StepShape shape = batches.at(step, consumedSamples);
    return rt::StepShape{shape.globalBatch, shape.seqLen};
  };
  options.learningRate = [schedule = config.schedule](int64_t step) {
    return schedule.at(step);
  };
  options.microBatch = batches.microBatch;
  options.maxGlobalBatch = batches.globalBatch;
  options.maxSteps = config.maxSteps;
  options.pruneAtStep =
      config.sparsity.enabled ? config.sparsity.pruneAtStep : -1;
  options.logInterval = config.logInterval;
  options.evalInterval = config.evalInterval;
  options.evalSteps = config.evalSteps;
  options.sampleTokens = config.sampleTokens;
  options.checkpointInterval = config.checkpointInterval;
  options.keepCheckpoints = config.keepCheckpoints;
  options.seed = config.seed;
  options.outDir = config.out;
  const GuardConfig &guard = config.guard;
  // The schema checked the name.
  options.guard.action =
      rt::parseGuardAction(guard.action).value_or(rt::GuardAction::Warn);
  options.guard.window = guard.window;
  options.guard.zscore = guard.zscore;
  options.guard.ratio = guard.ratio;
  options.guard.maxGradNormRatio = guard.maxGradNormRatio;
  options.guard.snapshotInterval = guard.snapshotInterval;
  options.guard.lrFactor = guard.lrFactor;
  options.guard.cooldown = guard.cooldown;
  options.guard.maxRollbacks = guard.maxRollbacks;
  return options;
}

/// MFU: the planner's model FLOPs per token against the sgemm peak of
/// this machine's cores, measured with the BLAS the kernels call (every
/// rank at once: under mpirun they share the machine).
llvm::Error Session::setUpMfu(rt::TrainerOptions &options) {
  if (cfg.device != "cpu")
    return llvm::Error::success();
  const TrainingConfig &config = cfg;
  llvm::raw_ostream &out = this->out();
  Device *device = &this->device;
  llvm::Expected<plan::PlanModel> planModel =
      config.modelMlirPath.empty()
          ? plan::analyzeModel(context, config.model)
          : plan::loadPlanModel(context, config.modelMlirPath);
  if (!planModel)
    return planModel.takeError();
  options.modelFlopsPerToken =
      plan::modelFlopsPerToken(*planModel, config.seqLen);
  timings.end("model FLOPs (planner)");
  int peakThreads = device->threads > 0
                        ? device->threads
                        : rt::defaultThreadCount();
  // The machine's recorded best when there is one (measuring takes both
  // cores for a while at start-up; the run measures again at its end and
  // keeps a better figure); the first run on a machine measures now.
  rt::MachinePeak peak = rt::recordedSgemmPeak(kPeakSgemmSize, peakThreads);
  std::string measured;
  if (peak.bestGflops > 0) {
    remeasurePeakThreads = peakThreads;
    measured = llvm::formatv("this machine's best, recorded in {0}; "
                             "measured again at the end of the run",
                             peak.record)
                   .str();
  } else {
    peak = rt::machineSgemmPeak(kPeakSgemmSize, peakThreads, /*reps=*/3);
    measured = llvm::formatv("measured now: {0:f1}", peak.measuredGflops).str();
  }
  options.peakFlops = peak.bestGflops * 1e9;
  if (peak.measuredGflops == 0) // a record: a step faster than it re-measures
    options.remeasurePeakFlops = [peakThreads] {
      return rt::machineSgemmPeak(kPeakSgemmSize, peakThreads, /*reps=*/3)
                 .bestGflops *
             1e9;
    };
  out << llvm::formatv(
      "llmc run: MFU is model FLOPs ({0:e2} per token: 6N + 12 L h s) "
      "against this machine's sgemm peak: {1:f1} GFLOP/s ({2}^3 on {3} "
      "thread(s) per rank, {4}; {5})\n",
      options.modelFlopsPerToken, peak.bestGflops, kPeakSgemmSize, peakThreads,
      measured, rt::describeBlas());
  timings.end("sgemm peak");
  return llvm::Error::success();
}

rt::TrainerPrograms Session::trainerPrograms() {
  rt::TrainerPrograms bound;
  bound.updateStep = std::move(update);
  bound.eval = std::move(eval);
  bound.sampler = std::move(sampler);
  bound.pipelineForward = std::move(pipelineForward);
  // The grad step of another length (sequence-length warmup) or without
  // gradient communication is compiled when the trainer first asks.
  auto firstGrad =
      std::make_shared<std::unique_ptr<rt::Executor>>(std::move(grad));
  auto firstNoSync = std::make_shared<std::optional<kir::Program>>(
      std::move(programs->gradStepNoSync));
  bound.gradStepFor = [this, firstGrad, firstNoSync](int64_t seqLen, bool sync)
      -> llvm::Expected<std::unique_ptr<rt::Executor>> {
    std::string what =
        llvm::formatv("grad step{0} (T={1})", sync ? "" : " no_sync", seqLen)
            .str();
    if (seqLen == cfg.seqLen && sync && *firstGrad)
      return std::move(*firstGrad);
    if (seqLen == cfg.seqLen && !sync && firstNoSync->has_value()) {
      kir::Program program = std::move(**firstNoSync);
      firstNoSync->reset();
      return makeExecutor(std::move(program), device, what);
    }
    llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> shorter =
        source->build(seqLen, /*withDropout=*/true);
    if (!shorter)
      return shorter.takeError();
    llvm::Expected<TrainingStepPrograms> compiled =
        compileTrainingStep(**shorter, training);
    if (!compiled)
      return compiled.takeError();
    if (!sync && !compiled->gradStepNoSync)
      return llvm::createStringError("the training step has no "
                                     "@grad_step_no_sync");
    return makeExecutor(sync ? std::move(compiled->gradStep)
                             : std::move(*compiled->gradStepNoSync),
                        device, what);
  };
  return bound;
}

llvm::Error Session::makeTrainer() {
  rt::TrainerOptions trainerOptions = this->trainerOptions();
  if (!data.val)
    trainerOptions.evalSteps = 0;
  trainerOptions.configSections = resume.sections;
  trainerOptions.log = layout.rank == 0 ? &llvm::outs() : nullptr;
  if (options.log)
    trainerOptions.log = layout.rank == 0 ? options.log : nullptr;
  // Progress: on a terminal a live status line under the logged lines.
  if (!options.log && layout.rank == 0 &&
      (cfg.progress == "bar" ||
       (cfg.progress == "auto" && llvm::outs().is_displayed()))) {
    unsigned columns = llvm::sys::Process::StandardOutColumns();
    console = std::make_unique<rt::StatusConsole>(llvm::outs(),
                                                  columns ? columns : 100);
    trainerOptions.log = console.get();
    trainerOptions.console = console.get();
  }
  if (llvm::Error err = setUpMfu(trainerOptions))
    return err;
  trainerOptions.dp = layout.dp.get();
  trainerOptions.tp = layout.tp.get();
  trainerOptions.pp = layout.pp.get();
  if (layout.ppTied) {
    trainerOptions.ppTied = layout.ppTied.get();
    trainerOptions.ppTiedParams = ppTiedParams;
  }
  for (const rt::comm::Communicator *comm :
       {layout.dp.get(), layout.tp.get(), layout.pp.get(), layout.ppTied.get(),
        deviceDp.get(), deviceTp.get()})
    if (comm)
      trainerOptions.meshComms.push_back(comm);
  trainerOptions.tpShards = tpShards;
  trainerOptions.stopRequested = options.stopRequested;
  trainerOptions.beforeStep = options.beforeStep;
  trainerOptions.injectFault = options.injectFault;
  trainerOptions.reportMemory = options.reportMemory;
  trainerOptions.accumulateWithoutSync = cfg.parallel.zero < 2;
  trainerOptions.memoryPhases = &memoryPhases;

  rt::TrainerPrograms bound = trainerPrograms();
  if (programs->shardInit) {
    auto created =
        makeExecutor(std::move(*programs->shardInit), device, "shard init");
    if (!created)
      return created.takeError();
    bound.shardInit = std::move(*created);
  }
  if (programs->castWeights) {
    auto created =
        makeExecutor(std::move(*programs->castWeights), device, "weight casts");
    if (!created)
      return created.takeError();
    bound.castWeights = std::move(*created);
  }
  std::shared_ptr<DataTrace> trace;
  if (!options.dataTraceDir.empty()) {
    llvm::Expected<std::shared_ptr<DataTrace>> opened =
        DataTrace::open(options.dataTraceDir, layout.rank);
    if (!opened)
      return opened.takeError();
    trace = std::move(*opened);
  }
  timings.end("trainer options");
  trainer = std::make_unique<rt::Trainer>(std::move(trainerOptions),
                                          std::move(bound),
                                          bindTrainerData(data, trace),
                                          device.store);
  if (initialParams)
    trainer->setFullTensors(std::move(*initialParams));
  if (resume.checkpoint) {
    if (llvm::Error err = trainer->resume(*resume.checkpoint, resume.path))
      return err;
    timings.end("restoring the checkpoint");
    memoryPhases.end("restoring the checkpoint");
    out() << "llmc run: resumed from " << resume.path << " at step "
          << resume.checkpoint->step << "\n";
  }
  return llvm::Error::success();
}

void Session::logRunSummary() {
  const TrainingConfig &config = cfg;
  llvm::raw_ostream &out = this->out();
  const data::Tokenizer &tok = *data.tokenizer;
  int64_t microBatches = config.globalBatchSize / config.microBatchSize;
  out << llvm::format(
      "llmc run: %lld steps of %lld x %lld tokens (%lld micro-batch%s of "
      "%lld), %s, %s lr %g -> %g; data: %lld train / %lld val tokens (%s); "
      "out: %s\n",
      (long long)config.maxSteps, (long long)config.globalBatchSize,
      (long long)config.seqLen, (long long)microBatches,
      microBatches == 1 ? "" : "es", (long long)config.microBatchSize,
      config.optimizer.kind == OptimizerConfig::Kind::AdamW ? "adamw" : "sgd",
      stringifyLrScheduleKind(config.schedule.kind).str().c_str(),
      config.schedule.lr, config.schedule.minLr,
      (long long)data.trainTokens(), (long long)data.valTokens,
      tok.describe().c_str(), config.out.c_str());
  describeSources(summarizeSources(*data.train, windowsOfRun(config)), out);
  if (config.maxSteps < config.schedule.warmupSteps)
    out << llvm::format("llmc run: note: the run ends within the warmup "
                        "(max_steps %lld < warmup_steps %lld): the learning "
                        "rate only ramps up\n",
                        (long long)config.maxSteps,
                        (long long)config.schedule.warmupSteps);
}

llvm::Error Session::run() {
  if (llvm::Error err = trainer->run())
    return err;
  // What each source gave, at the end of a finished run (every rank's
  // loader counts every rank's windows).
  if (layout.rank == 0 && !trainer->stopSignal())
    for (size_t s = 0; s < data.train->sources().size(); ++s)
      out() << llvm::formatv("data: source '{0}': {1} windows taken since "
                             "step 0, {2:f2} epochs of it\n",
                             data.train->sources()[s].name,
                             data.train->consumed(int(s)),
                             data.train->epochs(int(s)));
  // The training is over: measuring now costs no start-up time, and a
  // better figure than the record becomes the next runs' yardstick.
  if (remeasurePeakThreads > 0 && !trainer->stopSignal())
    (void)rt::machineSgemmPeak(kPeakSgemmSize, remeasurePeakThreads,
                               /*reps=*/3);
  return llvm::Error::success();
}

llvm::Expected<double> Session::evaluate() {
  std::string sample;
  return trainer->evaluate(sample);
}

llvm::Expected<rt::Checkpoint> Session::checkpoint() const {
  return trainer->checkpoint();
}

std::string Session::checkpointPath() const {
  llvm::SmallString<256> path(checkpointDirectory(cfg));
  llvm::sys::path::append(path, rt::checkpointFileName(trainer->step()));
  return std::string(path);
}
