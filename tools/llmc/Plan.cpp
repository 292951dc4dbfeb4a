// llmc plan: options of the subcommand, overlaying flags on the training
// config (an `llmc run` config) and the cluster file, and printing the plan
// codegen/Plan/ builds.
#include "tools/llmc/Plan.h"

#include "codegen/Plan/Report.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"

#include <cmath>
#include <tuple>

using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;
namespace cl = llvm::cl;

cl::SubCommand planCmd(
    "plan",
    "Plan a training run before launch: memory per device (weights, "
    "gradients, optimizer states, activations under each remat policy), "
    "FLOPs, time and cost on a cluster, and with --fit the fastest parallel "
    "layout that fits");

namespace {
// Numbered so that --help lists them in this order.
cl::OptionCategory modelCat("llmc plan (1): inputs and output");
cl::OptionCategory trainCat(
    "llmc plan (2): training; a flag overrides the --train key in brackets "
    "(defaults without --train: a pretraining run of micro-batch 1, global "
    "batch 512; with it, llmc run's)");
cl::OptionCategory
    clusterCat("llmc plan (3): cluster; a flag overrides the --cluster key in "
               "brackets");
cl::OptionCategory
    runCat("llmc plan (4): restarts, checkpoints and an observed run; a flag "
           "overrides the --cluster key in brackets");

cl::opt<std::string>
    planInput(cl::Positional, cl::Optional,
              cl::desc("<model.mlir | config.yaml | preset> (default: the "
                       "model of the --train config)"),
              cl::sub(planCmd), cl::cat(modelCat));
cl::opt<std::string> trainFile(
    "train",
    cl::desc("An `llmc run` training config, as it is: its model, precision, "
             "optimizer, micro_batch_size, global_batch_size, seq_len, remat "
             "and max_tokens or max_steps are planned; its other keys are "
             "checked and ignored"),
    cl::value_desc("file"), cl::sub(planCmd), cl::cat(modelCat));
cl::opt<std::string> clusterFile(
    "cluster",
    cl::desc("Cluster YAML, the parallel layout and the machines (keys: "
             "zero, tensor_parallel, pipeline_parallel, gpu, gpus_per_node, "
             "nodes, price_per_gpu_hour, mfu, reserve_gib; restarts, "
             "restart_minutes, storage_write_gbps, storage_read_gbps, "
             "observed_days, observed_step_time)"),
    cl::value_desc("file"), cl::sub(planCmd), cl::cat(modelCat));
cl::opt<std::string> hardwareFile(
    "hardware",
    cl::desc("GPU data file (default: $LLMC_HARDWARE, else the source "
             "tree's examples/hardware.yaml)"),
    cl::value_desc("file"), cl::sub(planCmd), cl::cat(modelCat));
cl::opt<std::string>
    fitMemory("fit",
              cl::desc("Search tp, pp, ZeRO stage, micro-batch and remat "
                       "for the fastest plans whose most loaded device fits "
                       "in MEMORY (80GB = 80e9 bytes, 80GiB, 81920MiB; "
                       "'gpu': the GPU's memory)"),
              cl::value_desc("MEMORY"), cl::sub(planCmd), cl::cat(modelCat));
cl::opt<bool> jsonOutput("json",
                         cl::desc("Print JSON: every number with its value "
                                  "in base units, unit and source"),
                         cl::sub(planCmd), cl::cat(modelCat));
cl::opt<std::string> stepMemoryFlag(
    "step-memory",
    cl::desc("Where the activations of the planned layout come from: ir "
             "compiles @grad_step (with llmc-amp, llmc-shard at the plan's "
             "dp and ZeRO stage, and each llmc-remat policy) and reads its "
             "memory plan; formula uses Korthikanti et al.'s; auto "
             "(default) compiles models of up to 24 layers when llmc can "
             "compile the layout (tp 1, pp 1, no fp8, no remat attention)"),
    cl::value_desc("auto|ir|formula"), cl::init("auto"), cl::sub(planCmd),
    cl::cat(modelCat));
cl::opt<bool> listGpus("list-gpus",
                       cl::desc("List the GPUs of the data file and exit"),
                       cl::sub(planCmd), cl::cat(modelCat));

cl::opt<std::string>
    precisionFlag("precision",
                  cl::desc("[precision] fp32, tf32, fp16, bf16 (default "
                           "without --train) or fp8: GEMM precision; 16-bit "
                           "ones keep fp32 master weights (tf32 and fp8 are "
                           "flags only: llmc run has neither)"),
                  cl::value_desc("fp32|tf32|fp16|bf16|fp8"), cl::sub(planCmd),
                  cl::cat(trainCat));
cl::opt<std::string>
    optimizerFlag("optimizer",
                  cl::desc("[optimizer.name] adamw (default), adamw-8bit "
                           "(a flag only) or sgd (with momentum)"),
                  cl::value_desc("adamw|adamw-8bit|sgd"), cl::sub(planCmd),
                  cl::cat(trainCat));
cl::opt<std::string> gradPrecisionFlag(
    "grad-precision",
    cl::desc("fp32 (default, as llmc run: gradients accumulate in fp32, "
             "18 bytes/parameter with AdamW) or half (16 bytes)"),
    cl::value_desc("fp32|half"), cl::sub(planCmd), cl::cat(trainCat));
cl::opt<int64_t> microBatchFlag(
    "micro-batch",
    cl::desc("[micro_batch_size] sequences per device per "
             "forward/backward (default 1 without --train; a model.mlir's "
             "own batch)"),
    cl::value_desc("n"), cl::sub(planCmd), cl::cat(trainCat));
cl::opt<int64_t>
    globalBatchFlag("global-batch",
                    cl::desc("[global_batch_size] sequences per optimizer "
                             "step (default 512 without --train)"),
                    cl::value_desc("n"), cl::sub(planCmd), cl::cat(trainCat));
cl::opt<int64_t>
    seqLenFlag("seq-len",
               cl::desc("[seq_len] tokens per sequence (default: the "
                        "model's seq_len; a model.mlir's own)"),
               cl::value_desc("n"), cl::sub(planCmd), cl::cat(trainCat));
cl::opt<std::string>
    rematFlag("remat",
              cl::desc("[remat] llmc-remat's none (default), selective "
                       "(keep matmul and attention outputs) or full "
                       "(recompute each block); or attention (Korthikanti "
                       "et al.'s selective: recompute the attention core; "
                       "estimated, llmc run has no such policy)"),
              cl::value_desc("none|selective|full|attention"), cl::sub(planCmd),
              cl::cat(trainCat));
cl::opt<int> zeroFlag("zero",
                      cl::desc("[zero] ZeRO stage 0-3 over data parallelism "
                               "(default 0)"),
                      cl::value_desc("0-3"), cl::sub(planCmd),
                      cl::cat(clusterCat));
cl::opt<int64_t> tpFlag("tp",
                        cl::desc("[tensor_parallel] tensor-parallel size "
                                 "(default 1)"),
                        cl::value_desc("n"), cl::sub(planCmd),
                        cl::cat(clusterCat));
cl::opt<bool> spFlag("sp",
                     cl::desc("[sequence_parallel] sequence parallelism over "
                              "the tp ranks, as llmc run --sp: norms, "
                              "dropout and residual activations divided by "
                              "tp (default false)"),
                     cl::sub(planCmd), cl::cat(clusterCat));
cl::opt<int64_t> ppFlag("pp",
                        cl::desc("[pipeline_parallel] pipeline stages "
                                 "(default 1)"),
                        cl::value_desc("n"), cl::sub(planCmd),
                        cl::cat(clusterCat));
cl::opt<int64_t> stageFlag("stage",
                           cl::desc("the pipeline stage whose memory the "
                                    "report shows (default: the most "
                                    "loaded)"),
                           cl::value_desc("s"), cl::sub(planCmd),
                           cl::cat(clusterCat));
cl::opt<std::string>
    tokensFlag("tokens",
               cl::desc("[max_tokens] training tokens, e.g. 10e9, 300B, 1.4T "
                        "(default: max_steps x global batch x seq_len, else "
                        "Chinchilla's 20 x parameters)"),
               cl::value_desc("count"), cl::sub(planCmd), cl::cat(trainCat));

cl::opt<std::string> gpuFlag("gpu",
                             cl::desc("[gpu] GPU name from the data file, "
                                      "e.g. a100-80gb, h100-sxm"),
                             cl::value_desc("name"), cl::sub(planCmd),
                             cl::cat(clusterCat));
cl::opt<int64_t> gpusPerNodeFlag("gpus-per-node",
                                 cl::desc("[gpus_per_node] (default 8)"),
                                 cl::value_desc("n"), cl::sub(planCmd),
                                 cl::cat(clusterCat));
cl::opt<int64_t> nodesFlag("nodes", cl::desc("[nodes] (default 1)"),
                           cl::value_desc("n"), cl::sub(planCmd),
                           cl::cat(clusterCat));
cl::opt<double> priceFlag("price",
                          cl::desc("[price_per_gpu_hour] USD per GPU-hour "
                                   "(default: no cost)"),
                          cl::value_desc("USD"), cl::sub(planCmd),
                          cl::cat(clusterCat));
cl::opt<double>
    mfuFlag("mfu",
            cl::desc("[mfu] fraction of peak the kernels reach on the "
                     "model's FLOPs, assumed or measured (default 0.4); "
                     "bubbles, recompute and communication come on top"),
            cl::value_desc("fraction"), cl::sub(planCmd), cl::cat(clusterCat));
cl::opt<int64_t> checkpointIntervalFlag(
    "checkpoint-interval",
    cl::desc("[checkpoint_interval] steps between checkpoints (default "
             "llmc run's 0: only at the end)"),
    cl::value_desc("steps"), cl::sub(planCmd), cl::cat(trainCat));
cl::opt<int64_t> keepCheckpointsFlag(
    "keep-checkpoints",
    cl::desc("[keep_checkpoints] checkpoints kept on disk, 0: all "
             "(default 3)"),
    cl::value_desc("n"), cl::sub(planCmd), cl::cat(trainCat));

cl::opt<int64_t> restartsFlag(
    "restarts",
    cl::desc("[restarts] job restarts over the run: each re-launches, "
             "reloads the last checkpoint and redoes the work since it "
             "(default 0)"),
    cl::value_desc("n"), cl::sub(planCmd), cl::cat(runCat));
cl::opt<double> restartMinutesFlag(
    "restart-minutes",
    cl::desc("[restart_minutes] re-launch per restart before the reload: "
             "scheduling, process start, NCCL init (default 10, assumed)"),
    cl::value_desc("min"), cl::sub(planCmd), cl::cat(runCat));
cl::opt<double> storageWriteFlag(
    "storage-write-gbps",
    cl::desc("[storage_write_gbps] aggregate checkpoint write bandwidth "
             "(default 10 GB/s, assumed)"),
    cl::value_desc("GB/s"), cl::sub(planCmd), cl::cat(runCat));
cl::opt<double> storageReadFlag(
    "storage-read-gbps",
    cl::desc("[storage_read_gbps] aggregate reload bandwidth (default: the "
             "write bandwidth)"),
    cl::value_desc("GB/s"), cl::sub(planCmd), cl::cat(runCat));
cl::opt<double> observedDaysFlag(
    "observed-days",
    cl::desc("[observed_days] wall-clock days a real run of this plan took: "
             "prints its implied MFU and the gap to the plan, split into "
             "checkpoints, restarts, lost work and what is unexplained"),
    cl::value_desc("days"), cl::sub(planCmd), cl::cat(runCat));
cl::opt<double> observedStepFlag(
    "observed-step-time",
    cl::desc("[observed_step_time] measured seconds per optimizer step: "
             "prints its implied MFU, the gap to the plan's step time and "
             "the wall-clock time at that speed with the overheads"),
    cl::value_desc("s"), cl::sub(planCmd), cl::cat(runCat));

cl::opt<double> reserveFlag(
    "reserve-gib",
    cl::desc("[reserve_gib] per-device memory for the CUDA context and "
             "library workspaces (default 1)"),
    cl::value_desc("GiB"), cl::sub(planCmd), cl::cat(clusterCat));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "llmc") << message << "\n";
  return 1;
}

int fail(llvm::Error error) {
  std::string message = llvm::toString(std::move(error));
  // Errors from files arrive as "file:line:col: error: ..." already.
  if (llvm::StringRef(message).contains(": error: ")) {
    llvm::errs() << llvm::StringRef(message).rtrim() << "\n";
    return 1;
  }
  return fail(message);
}

/// Sets `field` from `flag` when it was given, recording the flag as the
/// value's origin (so errors name it instead of a file line).
template <typename T, typename F>
bool overlay(cl::opt<T> &flag, F &field, Origins &origins,
             llvm::StringRef key) {
  if (!flag.getNumOccurrences())
    return false;
  field = flag;
  origins.erase(key.str());
  return true;
}

template <typename E>
llvm::Error overlayEnum(cl::opt<std::string> &flag, E &field, Origins &origins,
                        llvm::StringRef key,
                        std::optional<E> (*parse)(llvm::StringRef),
                        llvm::StringRef allowed) {
  if (!flag.getNumOccurrences())
    return llvm::Error::success();
  std::optional<E> value = parse(flag);
  if (!value)
    return llvm::createStringError("--" + flag.ArgStr + ": unknown value '" +
                                   flag + "'; expected one of " + allowed);
  field = *value;
  origins.erase(key.str());
  return llvm::Error::success();
}

llvm::Error positive(cl::opt<int64_t> &flag, int64_t min = 1) {
  if (flag.getNumOccurrences() && flag < min)
    return llvm::createStringError("--" + flag.ArgStr + ": expected an " +
                                   "integer >= " + llvm::Twine(min) + ", got " +
                                   llvm::Twine(flag.getValue()));
  return llvm::Error::success();
}

llvm::Error applyTrainFlags(TrainConfig &train) {
  Origins &o = train.origins;
  if (llvm::Error err =
          overlayEnum(precisionFlag, train.precision, o, "precision",
                      parsePrecision, "fp32, tf32, fp16, bf16, fp8"))
    return err;
  if (llvm::Error err =
          overlayEnum(optimizerFlag, train.optimizer, o, "optimizer.name",
                      parseOptimizer, "adamw, adamw-8bit, sgd"))
    return err;
  if (llvm::Error err =
          overlayEnum(rematFlag, train.remat, o, "remat", parseRemat,
                      "none, selective, full, attention"))
    return err;
  if (gradPrecisionFlag.getNumOccurrences()) {
    if (gradPrecisionFlag != "fp32" && gradPrecisionFlag != "half")
      return llvm::createStringError("--grad-precision: unknown value '" +
                                     gradPrecisionFlag +
                                     "'; expected fp32 or half");
    train.fp32Gradients = gradPrecisionFlag == "fp32";
  }
  for (cl::opt<int64_t> *flag : {&microBatchFlag, &globalBatchFlag, &seqLenFlag})
    if (llvm::Error err = positive(*flag))
      return err;
  overlay(microBatchFlag, train.microBatch, o, "micro_batch_size");
  overlay(globalBatchFlag, train.globalBatch, o, "global_batch_size");
  overlay(seqLenFlag, train.seqLen, o, "seq_len");
  for (cl::opt<int64_t> *flag : {&checkpointIntervalFlag, &keepCheckpointsFlag})
    if (llvm::Error err = positive(*flag, 0))
      return err;
  if (overlay(checkpointIntervalFlag, train.checkpointInterval, o,
              "checkpoint_interval"))
    o["checkpoint_interval"] = "--checkpoint-interval";
  if (overlay(keepCheckpointsFlag, train.keepCheckpoints, o,
              "keep_checkpoints"))
    o["keep_checkpoints"] = "--keep-checkpoints";
  if (tokensFlag.getNumOccurrences()) {
    llvm::Expected<double> tokens = parseCount(tokensFlag);
    if (!tokens)
      return llvm::createStringError("--tokens: " +
                                     llvm::toString(tokens.takeError()));
    train.tokens = *tokens;
    train.steps = 0;
    o["max_tokens"] = "--tokens";
  }
  return llvm::Error::success();
}

/// `flag` must be > 0 (or >= 0 with `orZero`) when given.
llvm::Error positiveNumber(cl::opt<double> &flag, llvm::StringRef what,
                           bool orZero = false) {
  if (flag.getNumOccurrences() &&
      (!std::isfinite(flag.getValue()) || flag < 0 || (!orZero && flag == 0)))
    return llvm::createStringError(
        llvm::formatv("--{0}: expected {1} {2} 0, got {3}", flag.ArgStr, what,
                      orZero ? ">=" : ">",
                      llvm::format("%g", flag.getValue()))
            .str());
  return llvm::Error::success();
}

/// The restart, storage and observed-run flags over the cluster file.
llvm::Error applyRunFlags(ClusterConfig &cluster) {
  Origins &o = cluster.origins;
  if (observedDaysFlag.getNumOccurrences() &&
      observedStepFlag.getNumOccurrences())
    return llvm::createStringError(
        "--observed-days and --observed-step-time: give one observed "
        "figure, the run's wall-clock days or its seconds per step, not "
        "both");
  if (llvm::Error err = positive(restartsFlag, 0))
    return err;
  for (auto [flag, what, orZero] :
       {std::tuple<cl::opt<double> *, llvm::StringRef, bool>{
            &restartMinutesFlag, "minutes", true},
        {&storageWriteFlag, "a bandwidth in GB/s", false},
        {&storageReadFlag, "a bandwidth in GB/s", false},
        {&observedDaysFlag, "a number of days", false},
        {&observedStepFlag, "seconds per step", false}})
    if (llvm::Error err = positiveNumber(*flag, what, orZero))
      return err;
  // These keep the flag as their origin: the report names it as the
  // source of the value.
  auto set = [&](auto &flag, auto &field, llvm::StringRef key) {
    if (overlay(flag, field, o, key))
      o[key.str()] = ("--" + flag.ArgStr).str();
  };
  set(restartsFlag, cluster.restarts, "restarts");
  set(restartMinutesFlag, cluster.restartMinutes, "restart_minutes");
  set(storageWriteFlag, cluster.storageWriteGBps, "storage_write_gbps");
  set(storageReadFlag, cluster.storageReadGBps, "storage_read_gbps");
  // One observed figure: a flag replaces the file's figure of either kind.
  if (observedDaysFlag.getNumOccurrences()) {
    cluster.observedStepSeconds = 0;
    o.erase("observed_step_time");
  }
  if (observedStepFlag.getNumOccurrences()) {
    cluster.observedDays = 0;
    o.erase("observed_days");
  }
  set(observedDaysFlag, cluster.observedDays, "observed_days");
  set(observedStepFlag, cluster.observedStepSeconds, "observed_step_time");
  return llvm::Error::success();
}

llvm::Error applyClusterFlags(ClusterConfig &cluster) {
  Origins &o = cluster.origins;
  for (cl::opt<int64_t> *flag : {&gpusPerNodeFlag, &nodesFlag, &tpFlag, &ppFlag})
    if (llvm::Error err = positive(*flag))
      return err;
  overlay(tpFlag, cluster.tensorParallel, o, "tensor_parallel");
  overlay(spFlag, cluster.sequenceParallel, o, "sequence_parallel");
  overlay(ppFlag, cluster.pipelineParallel, o, "pipeline_parallel");
  if (zeroFlag.getNumOccurrences() && (zeroFlag < 0 || zeroFlag > 3))
    return llvm::createStringError("--zero: expected a stage 0 to 3, got " +
                                   llvm::Twine(zeroFlag.getValue()));
  overlay(zeroFlag, cluster.zero, o, "zero");
  overlay(gpuFlag, cluster.gpu, o, "gpu");
  overlay(gpusPerNodeFlag, cluster.gpusPerNode, o, "gpus_per_node");
  overlay(nodesFlag, cluster.nodes, o, "nodes");
  if (priceFlag.getNumOccurrences() && priceFlag < 0)
    return llvm::createStringError("--price: expected a price >= 0");
  if (mfuFlag.getNumOccurrences() && (mfuFlag <= 0 || mfuFlag > 1))
    return llvm::createStringError(
        llvm::formatv("--mfu: expected a fraction in (0, 1], got {0}",
                      mfuFlag.getValue())
            .str());
  if (reserveFlag.getNumOccurrences() && reserveFlag < 0)
    return llvm::createStringError("--reserve-gib: expected a size >= 0");
  // These keep the flag as their origin: the report names it as the
  // source of the value.
  if (overlay(priceFlag, cluster.pricePerGpuHour, o, "price_per_gpu_hour"))
    o["price_per_gpu_hour"] = "--price";
  if (overlay(mfuFlag, cluster.mfu, o, "mfu"))
    o["mfu"] = "--mfu";
  if (overlay(reserveFlag, cluster.reserveGiB, o, "reserve_gib"))
    o["reserve_gib"] = "--reserve-gib";
  return applyRunFlags(cluster);
}

int printGpus(const HardwareTable &table) {
  llvm::outs() << table.path << ":\n";
  for (const GpuSpec &gpu : table.gpus) {
    llvm::outs() << llvm::format("  %-12s %-34s %6.0f GiB", gpu.name.c_str(),
                                 gpu.description.c_str(), gpu.memoryGiB);
    for (unsigned i = 0; i < kNumPrecisions; ++i)
      if (gpu.peakTflops[i] > 0)
        llvm::outs() << "  " << stringifyPrecision(static_cast<Precision>(i))
                     << " " << llvm::formatv("{0}", gpu.peakTflops[i]);
    llvm::outs() << "  (TFLOP/s)\n";
  }
  return 0;
}
} // namespace

int runPlan(MLIRContext &context) {
  std::string hardwarePath =
      hardwareFile.empty() ? getDefaultHardwarePath() : hardwareFile.getValue();
  TrainConfig train;
  ClusterConfig cluster;
  std::optional<TrainingConfig> run;
  if (!trainFile.empty()) {
    llvm::Expected<TrainingConfig> loaded =
        loadTrainingConfig(trainFile, {}, TrainingConfigUse::Plan);
    if (!loaded)
      return fail(loaded.takeError());
    run = std::move(*loaded);
    llvm::Expected<TrainConfig> facts = trainConfigFromRun(*run);
    if (!facts)
      return fail(facts.takeError());
    train = std::move(*facts);
  }
  if (!clusterFile.empty())
    if (llvm::Error err = loadClusterConfigFile(clusterFile, cluster))
      return fail(std::move(err));
  if (llvm::Error err = applyTrainFlags(train))
    return fail(std::move(err));
  if (llvm::Error err = applyClusterFlags(cluster))
    return fail(std::move(err));

  std::optional<HardwareTable> hardware;
  if (!cluster.gpu.empty() || listGpus) {
    llvm::Expected<HardwareTable> table = loadHardwareFile(hardwarePath);
    if (!table)
      return fail(table.takeError());
    hardware = std::move(*table);
    if (listGpus)
      return printGpus(*hardware);
  }
  std::optional<GpuSpec> gpu;
  if (!cluster.gpu.empty()) {
    llvm::Expected<GpuSpec> found = lookupGpu(*hardware, cluster.gpu);
    if (!found)
      return fail(found.takeError());
    gpu = *found;
  }
  if (!gpu && (cluster.observedDays > 0 || cluster.observedStepSeconds > 0))
    return fail(llvm::Twine(cluster.observedDays > 0
                                ? originOf(cluster.origins, "observed_days",
                                           "observed-days")
                                : originOf(cluster.origins,
                                           "observed_step_time",
                                           "observed-step-time")) +
                ": an observed run is compared with the GPUs' peak: give "
                "--gpu NAME or a --cluster file with 'gpu:'");

  // The model: the positional argument, else the training config's.
  llvm::Expected<PlanModel> model = [&]() -> llvm::Expected<PlanModel> {
    if (!planInput.empty())
      return loadPlanModel(context, planInput);
    if (!run || !run->origins.count("model"))
      return llvm::createStringError(
          "no model: give one (a model.mlir, a config .yaml or a preset) or "
          "a --train config with 'model:'");
    if (!run->modelMlirPath.empty())
      return loadPlanModel(context, run->modelMlirPath);
    llvm::Expected<PlanModel> analyzed = analyzeModel(context, run->model);
    if (analyzed) {
      analyzed->input = run->modelSource;
      analyzed->irSource = "IR of @forward built from the model of " +
                           llvm::sys::path::filename(trainFile).str();
    }
    return analyzed;
  }();
  if (!model)
    return fail(model.takeError());
  // A model.mlir was compiled for one token shape; plan that one unless
  // told otherwise.
  if (model->mlirBatch) {
    if (!train.origins.count("micro_batch_size") &&
        !microBatchFlag.getNumOccurrences())
      train.microBatch = model->mlirBatch;
    if (!train.seqLen)
      train.seqLen = model->mlirSeqLen;
  }

  PlanRequest request;
  request.model = &*model;
  request.hardwarePath = hardwarePath;
  if (gpu)
    request.gpu = &*gpu;
  if (!fitMemory.empty()) {
    if (!gpu)
      return fail("--fit needs a GPU: give --gpu NAME or a --cluster file "
                  "with 'gpu:'");
    if (fitMemory == "gpu") {
      request.fitBudget = gpu->memoryGiB * 1024.0 * 1024.0 * 1024.0;
    } else {
      llvm::Expected<double> budget = parseMemorySize(fitMemory);
      if (!budget)
        return fail("--fit: " + llvm::toString(budget.takeError()));
      request.fitBudget = *budget;
    }
  }
  // Check the layout before compiling, so a bad size is reported as such.
  if (llvm::Error err = validateLayout(*model, train, cluster,
                                       getConfiguredLayout(train, cluster)))
    return fail(std::move(err));
  int64_t seqLen = train.seqLen ? train.seqLen : model->config.seqLen;
  llvm::Expected<ForwardPlan> forward =
      planForward(context, *model, train.microBatch, seqLen);
  if (!forward)
    return fail(forward.takeError());
  request.forward = *forward;

  // The compiled training step, where llmc can compile this layout.
  // Compiling takes about 0.05 s per layer per remat policy here,
  // whatever the shapes (GPT-2 XL's 48 layers: 7 s for the three): auto
  // stops at 24 layers (GPT-2 medium, ~2.5 s) so that a plan stays
  // interactive; --step-memory ir compiles any size.
  constexpr int64_t kAutoStepLayers = 24;
  Layout configured = getConfiguredLayout(train, cluster);
  bool compilable =
      canCompileStep(train.precision, configured.tp, configured.pp) &&
      train.remat != Remat::Attention;
  if (stepMemoryFlag != "auto" && stepMemoryFlag != "ir" &&
      stepMemoryFlag != "formula")
    return fail("--step-memory: unknown value '" + stepMemoryFlag +
                "'; expected auto, ir or formula");
  if (stepMemoryFlag == "ir" && !compilable)
    return fail(llvm::formatv(
        "--step-memory ir: llmc compiles no training step for this layout "
        "(tp {0}, pp {1}, {2}, remat {3}): it needs tp 1, pp 1, fp32, tf32, "
        "fp16 or bf16 and a remat policy of llmc-remat",
        configured.tp, configured.pp, stringifyPrecision(train.precision),
        stringifyRemat(train.remat)));
  if (stepMemoryFlag == "ir" ||
      (stepMemoryFlag == "auto" && compilable &&
       model->config.nLayer <= kAutoStepLayers)) {
    llvm::Expected<StepPlan> step = planTrainingStep(
        context, *model, train.microBatch, seqLen, train.precision,
        train.optimizer, configured.dp, configured.zero);
    if (!step)
      return fail(step.takeError());
    request.step = std::move(*step);
  }
  if (stageFlag.getNumOccurrences())
    request.stage = stageFlag.getValue();
  request.train = std::move(train);
  request.cluster = std::move(cluster);

  llvm::Expected<Report> report = buildReport(request);
  if (!report)
    return fail(report.takeError());
  if (jsonOutput)
    printReportJson(*report, llvm::outs());
  else
    printReportTable(*report, llvm::outs());
  return 0;
}
