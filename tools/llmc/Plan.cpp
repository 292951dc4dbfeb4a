// llmc plan: argument handling. The config keys (a training config, as
// `llmc run` reads it, and its flags: frontend/TrainConfig.h's one table)
// and the command's own options (--fit, --json, ...) go to the planner of
// training/Plan/, whose report is printed.
#include "tools/llmc/Plan.h"

#include "training/Plan/Report.h"
#include "training/SessionData.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
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
cl::OptionCategory planCat(
    "llmc plan: options of the command (config keys: see below, or `llmc "
    "help config`)");

cl::opt<std::string> planInput(
    cl::Positional, cl::Optional,
    cl::desc("<config.yaml | model.mlir | model.yaml | preset>: an `llmc "
             "run` config, planned as it is (its model, batch, precision, "
             "remat, parallel layout and plan: section), or a model alone "
             "(a pretraining run of micro-batch 1, global batch 512, bf16)"),
    cl::sub(planCmd), cl::cat(planCat));
cl::opt<std::string> hardwareFile(
    "hardware",
    cl::desc("GPU data file (default: $LLMC_HARDWARE, else the source "
             "tree's examples/hardware.yaml)"),
    cl::value_desc("file"), cl::sub(planCmd), cl::cat(planCat));
cl::opt<std::string>
    fitMemory("fit",
              cl::desc("Search tp, pp, ZeRO stage, micro-batch and remat "
                       "for the fastest plans whose most loaded device fits "
                       "in MEMORY (80GB = 80e9 bytes, 80GiB, 81920MiB; "
                       "'gpu': the GPU's memory)"),
              cl::value_desc("MEMORY"), cl::sub(planCmd), cl::cat(planCat));
cl::opt<bool> jsonOutput("json",
                         cl::desc("Print JSON: every number with its value "
                                  "in base units, unit and source"),
                         cl::sub(planCmd), cl::cat(planCat));
cl::opt<std::string> stepMemoryFlag(
    "step-memory",
    cl::desc("Where the activations of the planned layout come from: ir "
             "compiles @grad_step (with llmc-amp, llmc-shard at the plan's "
             "dp and ZeRO stage, and each llmc-remat policy) and reads its "
             "memory plan; formula uses Korthikanti et al.'s; auto "
             "(default) compiles models of up to 24 layers when llmc can "
             "compile the layout (tp 1, pp 1, no fp8, no remat attention)"),
    cl::value_desc("auto|ir|formula"), cl::init("auto"), cl::sub(planCmd),
    cl::cat(planCat));
cl::opt<bool> listGpus("list-gpus",
                       cl::desc("List the GPUs of the data file and exit"),
                       cl::sub(planCmd), cl::cat(planCat));
cl::opt<int64_t> stageFlag("stage",
                           cl::desc("the pipeline stage whose memory the "
                                    "report shows (default: the most "
                                    "loaded)"),
                           cl::value_desc("s"), cl::sub(planCmd),
                           cl::cat(planCat));

/// The config-key flags of the command line (`--tp 2`, `--gpu=a100-80gb`),
/// set aside by splitPlanArguments for the config parser.
std::vector<std::string> configFlags;
bool helpRequested = false;

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

/// The config (`llmc run`'s, read for planning) and the planner's view of
/// it. A positional config file gives llmc run's defaults for keys it does
/// not set; a model given alone plans a pretraining run.
struct PlanInputs {
  TrainingConfig run;
  bool fromFile = false;
  std::string modelInput; // a model given as the positional argument
  std::string configName; // the config file's name, for the report
};

llvm::Expected<PlanInputs> readPlanInputs() {
  PlanInputs inputs;
  llvm::StringRef input = planInput;
  bool yaml = input.ends_with(".yaml") || input.ends_with(".yml");
  if (yaml && llvm::sys::fs::exists(input)) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
        llvm::MemoryBuffer::getFile(input);
    // With --model, the file can only be a training config.
    bool modelFlag = llvm::any_of(configFlags, [](llvm::StringRef flag) {
      return flag == "--model" || flag.starts_with("--model=");
    });
    inputs.fromFile =
        modelFlag ||
        (buffer && isTrainingConfigText((*buffer)->getBuffer(), input));
  }
  llvm::Expected<TrainingConfig> run =
      inputs.fromFile
          ? loadTrainingConfig(input, configFlags, TrainingConfigUse::Plan)
          : parseTrainingConfig("{}", "the command line", "", configFlags,
                                TrainingConfigUse::Plan);
  if (!run)
    return run.takeError();
  inputs.run = std::move(*run);
  if (inputs.fromFile) {
    inputs.configName = llvm::sys::path::filename(input).str();
  } else if (!input.empty()) {
    if (inputs.run.origins.count("model"))
      return llvm::createStringError("the model is given twice: '" + input +
                                     "' and " + inputs.run.origins["model"] +
                                     "; give one");
    inputs.modelInput = input.str();
  }
  return inputs;
}

/// The model: the positional argument, else the config's `model`.
llvm::Expected<PlanModel> loadModel(MLIRContext &context,
                                    const PlanInputs &inputs) {
  const TrainingConfig &run = inputs.run;
  if (!inputs.modelInput.empty())
    return loadPlanModel(context, inputs.modelInput);
  auto origin = run.origins.find("model");
  if (origin == run.origins.end())
    return llvm::createStringError(
        "no model: give a training config with 'model:', a model (a "
        "model.mlir, a model .yaml or a preset) or --model");
  if (!run.modelMlirPath.empty())
    return loadPlanModel(context, run.modelMlirPath);
  // A preset or file named by --model is named as it was given.
  if (llvm::StringRef(origin->second).starts_with("--") &&
      run.modelSource != "(inline)")
    return loadPlanModel(context, run.modelSource);
  llvm::Expected<PlanModel> analyzed = analyzeModel(context, run.model);
  if (analyzed) {
    analyzed->input = run.modelSource;
    analyzed->irSource =
        "IR of @forward built from the model of " + inputs.configName;
  }
  return analyzed;
}

/// The config's training sources (headers only): a section of tokens,
/// windows, weight and epochs per source. Data that cannot be opened is a
/// note, not an error: a plan is often made before the data exists.
void addDataSection(TrainingConfig run, int64_t seqLen, int64_t microBatch,
                    Report &report) {
  if (run.data.train.empty() && run.data.blend.empty())
    return;
  run.seqLen = seqLen;
  run.microBatchSize = microBatch;
  if (!run.maxSteps && run.maxTokens)
    run.maxSteps = run.batchSchedule().stepsForTokens(run.maxTokens);
  llvm::Expected<std::vector<::llmc::training::SourceSummary>> sources =
      ::llmc::training::summarizeDataOf(run);
  if (!sources) {
    report.notes.push_back("data: not opened (" +
                           llvm::toString(sources.takeError()) + ")");
    return;
  }
  Section data;
  data.key = "data";
  data.title = "Data (training sources)";
  for (size_t i = 0; i < sources->size(); ++i) {
    const ::llmc::training::SourceSummary &s = (*sources)[i];
    std::string key = "source" + std::to_string(i) + "_";
    std::string label = "source '" + s.name + "': ";
    data.rows.push_back({key + "files", label + "files", double(s.files),
                         "files", "data files"});
    data.rows.push_back({key + "tokens", label + "tokens", double(s.tokens),
                         "tokens", "data files"});
    data.rows.push_back(
        {key + "windows", label + "windows of seq_len + 1 tokens",
         double(s.windows), "sequences", "data files"});
    data.rows.push_back({key + "share", label + "weight (share of windows)",
                         s.share, "fraction", "train config"});
    data.rows.push_back({key + "epochs", label + "epochs in the run",
                         s.epochs, "epochs",
                         "max_steps x global batch x share / windows"});
  }
  report.sections.push_back(std::move(data));
}

/// The former --cluster file and `--train CONFIG.yaml`: say where they went.
llvm::Error checkFormerOptions() {
  for (size_t i = 0; i < configFlags.size(); ++i) {
    llvm::StringRef flag = configFlags[i];
    if (flag == "--cluster" || flag.starts_with("--cluster="))
      return llvm::createStringError(
          "--cluster: the cluster's keys are the config's now: the "
          "layout in parallel: (tp, pp, sp, zero), the machines in "
          "plan: (gpu, nodes, gpus_per_node, ...); give them in the "
          "training config or as flags (--tp 2, --gpu a100-80gb); "
          "see docs/config-keys.md");
    llvm::StringRef value =
        flag.contains('=')
            ? flag.split('=').second
            : (i + 1 < configFlags.size() ? llvm::StringRef(configFlags[i + 1])
                                          : llvm::StringRef());
    if ((flag == "--train" || flag.starts_with("--train=")) &&
        (value.ends_with(".yaml") || value.ends_with(".yml")))
      return llvm::createStringError(
          "--train is data.train (training data files); llmc plan "
          "reads a training config as its argument: llmc plan " +
          value);
  }
  return llvm::Error::success();
}

} // namespace

std::vector<char *> splitPlanArguments(int argc, char **argv) {
  // The command's own options stay for the command-line parser; every
  // other --flag is a config key (or an unknown one, which the config
  // parser names with a suggestion).
  static const llvm::StringRef ownOptions[] = {
      "hardware", "fit",         "json",      "step-memory", "list-gpus",
      "stage",    "help-hidden", "help-list", "version"};
  std::vector<char *> kept = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      helpRequested = true;
      continue;
    }
    llvm::StringRef name = arg;
    if (!name.consume_front("--") &&
        !(name.size() > 1 && name.consume_front("-"))) {
      kept.push_back(argv[i]);
      continue;
    }
    name = name.split('=').first;
    if (llvm::is_contained(ownOptions, name)) {
      kept.push_back(argv[i]);
      continue;
    }
    configFlags.push_back(("--" + arg.ltrim('-')).str());
    if (!arg.contains('=') && i + 1 < argc &&
        !llvm::StringRef(argv[i + 1]).starts_with("--"))
      configFlags.push_back(argv[++i]);
  }
  return kept;
}

int runPlan(MLIRContext &context) {
  if (helpRequested) {
    cl::PrintHelpMessage();
    llvm::outs() << "\n";
    printTrainingConfigHelp(llvm::outs());
    return 0;
  }
  if (llvm::Error err = checkFormerOptions())
    return fail(std::move(err));
  std::string hardwarePath =
      hardwareFile.empty() ? getDefaultHardwarePath() : hardwareFile.getValue();
  llvm::Expected<PlanInputs> inputs = readPlanInputs();
  if (!inputs)
    return fail(inputs.takeError());
  llvm::Expected<TrainingFacts> facts =
      trainingFactsFromRun(inputs->run, /*runDefaults=*/inputs->fromFile);
  if (!facts)
    return fail(facts.takeError());
  TrainingFacts train = std::move(*facts);
  llvm::Expected<ClusterConfig> layout = clusterConfigFromRun(inputs->run);
  if (!layout)
    return fail(layout.takeError());
  ClusterConfig cluster = std::move(*layout);

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
    return fail(
        llvm::Twine(cluster.observedDays > 0
                        ? originOf(cluster.origins, "plan.observed_days",
                                   "observed-days")
                        : originOf(cluster.origins, "plan.observed_step_time",
                                   "observed-step-time")) +
        ": an observed run is compared with the GPUs' peak: give "
        "--gpu NAME or plan.gpu in the config");

  llvm::Expected<PlanModel> model = loadModel(context, *inputs);
  if (!model)
    return fail(model.takeError());
  // A model.mlir was compiled for one token shape; plan that one unless
  // told otherwise.
  if (model->mlirBatch) {
    if (!train.origins.count("micro_batch_size"))
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
      return fail("--fit needs a GPU: give --gpu NAME or plan.gpu in the "
                  "config");
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
  llvm::Expected<ForwardMemory> forward =
      compileForwardMemory(context, *model, train.microBatch, seqLen);
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
    llvm::Expected<StepMemory> step = compileStepMemory(
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
  addDataSection(inputs->run, seqLen, request.train.microBatch, *report);
  if (jsonOutput)
    printReportJson(*report, llvm::outs());
  else
    printReportTable(*report, llvm::outs());
  return 0;
}
