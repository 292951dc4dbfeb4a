// llmc: the driver. Subcommands emit-model, compile, inspect, generate,
// convert, info, plan and presets.
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/KernelToCuda/KernelToCuda.h"
#ifdef LLMC_HAVE_NVRTC
#include "codegen/KernelToCuda/CudaTarget.h"
#endif
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "codegen/TrainingStep.h"
#include "frontend/ConfigYaml.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "frontend/ModelInfo.h"
#include "frontend/TrainConfig.h"
#include "frontend/Tokenizer.h"
#include "ir/LlmcDialect.h"
#include "ir/ParseModule.h"
#include "ir/kernel/Artifact.h"
#include "ir/kernel/AtomicFile.h"
#include "ir/kernel/MemoryPlan.h"
#include "passes/Passes.h"
#include "runtime/Exec/MemoryBudget.h"
#include "training/ModelFloor.h"
#include "runtime/Serve/CachedGenerate.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Weights/Weights.h"
#include "tools/common/GenerateOutput.h"
#include "tools/llmc/CommandNames.h"
#include "tools/llmc/CrashWatchdog.h"
#include "tools/llmc/DataCommand.h"
#include "tools/llmc/Inference.h"
#ifdef LLMC_HAVE_NVRTC
#include "codegen/KernelToCuda/CudaCompiler.h"
#include "runtime/Cuda/CudaExecutor.h"
#endif
#include "passes/Pipelines.h"
#include "passes/Remat.h"
#include "runtime/Serve/ExportPayload.h"
#include "tools/llmc/Convert.h"
#include "tools/llmc/Export.h"
#include "tools/llmc/Plan.h"
#include "tools/llmc/ProgramSummary.h"
#include "tools/llmc/SparsityCommand.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"

#include <chrono>
#include <cmath>
#include <optional>

using namespace mlir;
using namespace mlir::llmc;
namespace cl = llvm::cl;

static cl::SubCommand emitCmd(
    "emit-model",
    "Write the @forward function of a model config (YAML file or preset "
    "name) as llmc IR");
static cl::SubCommand compileCmd(
    "compile",
    "Compile a model (model.mlir, a YAML config or a preset) to an artifact "
    "(model.llmc): the compile pipeline (llmc-compile-pipeline), lowering "
    "to kernels and the memory plan");
static cl::SubCommand inspectCmd(
    "inspect", "Print an artifact readably: buffers and their planned "
               "offsets, the schedule, every kernel in the kernel IR; or "
               "what a binary of llmc export holds (its --info)");
static cl::SubCommand generateCmd(
    "generate", "Sample text from a compiled model");
static cl::SubCommand exportCmd(
    "export",
    "Compile a model's KV-cache programs (@prefill, @decode) ahead of time "
    "into one standalone executable -o NAME that generates text with no "
    "llmc, LLVM or MLIR installed: the kernels linked in, the weights, "
    "programs and tokenizer appended to it (run NAME --help; llmc inspect "
    "NAME prints what it holds)");
static cl::SubCommand convertCmd(
    "convert",
    "Write the parameters of an llmc run checkpoint (CKPT) to OUT: "
    "OUT.safetensors under Hugging Face names (GPT-2: GPT2Model's names "
    "and Conv1D [in, out] weights, loadable by "
    "GPT2LMHeadModel.from_pretrained; Llama-style: LlamaForCausalLM's "
    "names), the llmc model and a Hugging Face config.json in its "
    "metadata; or OUT.bin, an llm.c checkpoint (GPT-2 only). Optimizer "
    "state is left out. llmc generate --weights reads both back");
static cl::SubCommand
    infoCmd("info",
            "Print the parameters (per tensor and total, counted from the "
            "IR) and the op counts of a model: model.mlir, a YAML config or "
            "a preset name");

static cl::SubCommand sparsityCmd(
    "sparsity",
    "check CKPT: print, per matrix weight of an llmc run checkpoint, its "
    "zeros and whether it is 2:4; exit 1 unless every weight selected for "
    "sparsity (it has a sparsity_mask state) is 2:4 and zero where its mask "
    "is");
static cl::list<std::string> sparsityArgs(cl::Positional, cl::OneOrMore,
                                          cl::desc("check <CKPT>"),
                                          cl::sub(sparsityCmd));

static cl::SubCommand
    presetsCmd("presets", "List the built-in model presets, or print one as a "
                          "complete YAML config to start from");

static cl::opt<std::string> emitInput(cl::Positional, cl::Required,
                                      cl::desc("<config.yaml | preset>"),
                                      cl::sub(emitCmd));
static cl::opt<std::string>
    compileInput(cl::Positional, cl::Required,
                 cl::desc("<model.mlir | config.yaml | preset>"),
                 cl::sub(compileCmd));
static cl::opt<std::string> artifactInput(cl::Positional, cl::Required,
                                          cl::desc("<model.llmc>"),
                                          cl::sub(inspectCmd),
                                          cl::sub(generateCmd),
                                          cl::sub(exportCmd));
static cl::opt<std::string> convertInput(cl::Positional, cl::Required,
                                         cl::desc("<CKPT>"),
                                         cl::sub(convertCmd));
static cl::opt<std::string> convertPrecision(
    "precision",
    cl::desc("Element type written: fp32 (the default), bf16 or fp16 "
             "(.bin: fp32 or bf16, llm.c's versions 3 and 5)"),
    cl::init("fp32"), cl::value_desc("fp32|bf16|fp16"), cl::sub(convertCmd));
static cl::opt<std::string> convertNames(
    "names",
    cl::desc("Tensor names of a .safetensors output: hf (the default; "
             "Hugging Face GPT-2 or Llama) or llmc (llmc's own, for models "
             "with neither layout)"),
    cl::init("hf"), cl::value_desc("hf|llmc"), cl::sub(convertCmd));
static cl::opt<bool> convertSparse(
    "sparse",
    cl::desc("Store the weights selected for 2:4 (those with a "
             "sparsity_mask) compressed: kept values [N, K/2] as "
             "W.values_2of4 and their 2-bit positions as W.meta_2of4, half "
             "the values' bytes; llmc generate --weights expands them (needs "
             "--names llmc, fp32)"),
    cl::sub(convertCmd));
static cl::opt<bool> convertWeightsOnly(
    "weights-only",
    cl::desc("Parameters only, no optimizer state (always so; accepted for "
             "scripts that spell it out)"),
    cl::sub(convertCmd));
static cl::opt<bool> inspectRun(
    "run",
    cl::desc("Also run the forward pass once (seeded initialization) and "
             "compare the measured arena high-water mark with the plan"),
    cl::sub(inspectCmd));
static cl::opt<std::string>
    weightsPath("weights",
                cl::desc("Parameters: a safetensors file (llmc's or "
                         "Hugging Face GPT-2/Llama names, as llmc convert "
                         "writes them), an llm.c checkpoint or a checkpoint "
                         "of llmc run (default: GPT-2 initialization)"),
                cl::value_desc("file"), cl::sub(generateCmd),
                cl::sub(exportCmd));
// --prompt, --max-tokens, --temperature, --top-k, --print-logits: the
// flags exported binaries have too, defined once (tools/common).
static ::llmc::GenerationFlags generation(generateCmd, cl::getGeneralCategory());
static cl::opt<std::string> tokenizerSpec(
    "tokenizer",
    cl::desc("How text maps to ids: byte (the default) or a GPT-2 BPE "
             "directory (vocab.json, merges.txt), as in the training config"),
    cl::init("byte"), cl::value_desc("byte|dir"), cl::sub(generateCmd),
    cl::sub(exportCmd));
static cl::opt<uint64_t>
    seed("seed",
         cl::desc("Seed of the sampler and of the initialization when no "
                  "--weights are given (default 1337)"),
         cl::init(::llmc::runtime::SamplingOptions().seed),
         cl::sub(generateCmd), cl::sub(inspectCmd), cl::sub(exportCmd));
static cl::opt<int> numThreads("threads",
                               cl::desc("CPU threads (default: usable CPUs)"),
                               cl::init(0), cl::sub(generateCmd),
                               cl::sub(inspectCmd));
static cl::opt<int64_t> maxContext(
    "max-context",
    cl::desc("Positions the KV cache holds (default: the model's seq_len); "
             "when it fills, the last half of the text is fed again"),
    cl::init(0), cl::sub(generateCmd), cl::sub(exportCmd));
static cl::opt<int64_t> prefillChunk(
    "prefill-chunk",
    cl::desc("Prompt tokens per @prefill step (default 64, at most "
             "--max-context)"),
    cl::init(64), cl::sub(generateCmd), cl::sub(exportCmd));
static cl::opt<bool> recompute(
    "recompute",
    cl::desc("Run the artifact's training-shaped forward over the whole "
             "window for every token instead of the KV-cache programs (slow; "
             "a reference for them, and the path for hand-written models "
             "without a model config)"),
    cl::sub(generateCmd));
static cl::opt<std::string> generatePrecision(
    "precision",
    cl::desc("Element type of the KV-cache programs' stored weights: fp32 "
             "(the default), bf16 or fp16 (as llmc export --precision: half "
             "the bytes, activations, KV cache and sums f32; not with "
             "--recompute)"),
    cl::init("fp32"), cl::value_desc("fp32|bf16|fp16"), cl::sub(generateCmd));
static cl::opt<int64_t> sparseMaxRows(
    "sparse-max-rows",
    cl::desc("CPU: GEMMs whose weight is 2:4 run the 2:4 kernels when they "
             "have at most this many rows, the dense BLAS above (default: "
             "the crossover bench-sparse measured; 0: never)"),
    cl::init(::llmc::runtime::CpuExecutor::kDefaultSparseMaxRows),
    cl::sub(generateCmd));
static cl::opt<std::string> sparseValues(
    "sparse-values",
    cl::desc("CPU: how 2:4 weights store their kept values: auto (the "
             "default: bf16 when every kept value is a bf16 exactly, e.g. "
             "weights from a bf16 file, so nothing changes; f32 otherwise), "
             "f32, or bf16 (rounds f32 values: half the value bytes, lossy)"),
    cl::init("auto"), cl::value_desc("auto|f32|bf16"), cl::sub(generateCmd));
static cl::opt<std::string> device(
    "device",
    cl::desc("Where to run: cpu (the default) or cuda (an NVIDIA GPU: the "
             "driver is loaded at run time, kernels are compiled by NVRTC; "
             "generate runs its KV-cache programs there, fp32)"),
    cl::init("cpu"), cl::value_desc("cpu|cuda"), cl::sub(generateCmd),
    cl::sub(inspectCmd));
static cl::opt<std::string>
    infoInput(cl::Positional, cl::Required,
              cl::desc("<model.mlir | config.yaml | preset>"),
              cl::sub(infoCmd));
static cl::opt<std::string> presetName(cl::Positional, cl::Optional,
                                       cl::desc("[preset]"),
                                       cl::sub(presetsCmd));
static cl::opt<std::string> compileTo(
    "compile-to",
    cl::desc("Stop after a phase and print its result: llmc (the parsed, "
             "verified model), fused (after the compile pipeline), kernels "
             "(the program: schedule, buffers, kernel IR), cpu-mlir, "
             "cpu-llvm-dialect, cpu-llvm-ir, cpu-asm (the CPU code of the "
             "kernels), cuda (the CUDA C++ module, each kernel with its "
             "launch)"),
    cl::value_desc("phase"), cl::sub(compileCmd));
static cl::opt<std::string> compileTarget(
    "target",
    cl::desc("What the artifact holds code for: cpu (the default; kernels "
             "are JIT-compiled when loaded) or cuda (also the CUDA module, "
             "its NVRTC cubins for sm_80 and sm_90, PTX and each kernel's "
             "launch)"),
    cl::init("cpu"), cl::value_desc("cpu|cuda"), cl::sub(compileCmd));
static cl::opt<std::string> outputPath(
    "o",
    cl::desc("Output file (emit-model: '-' is stdout, the default; "
             "compile: default the input's path with extension .llmc; "
             "convert: required, .safetensors or .bin; export: required, "
             "the binary)"),
    cl::value_desc("path"), cl::sub(emitCmd), cl::sub(compileCmd),
    cl::sub(convertCmd), cl::sub(exportCmd));
static cl::opt<int64_t> exportBatch(
    "batch", cl::desc("Sequences the binary's programs run at once (default 1)"),
    cl::init(::mlir::llmc::InferenceShape().batch), cl::sub(exportCmd));
static cl::opt<std::string> exportPrecision(
    "precision",
    cl::desc("Element type of the stored weights: fp32 (the default), "
             "bf16 or fp16 (half the bytes; activations, KV cache and sums "
             "stay f32)"),
    cl::init("fp32"), cl::value_desc("fp32|bf16|fp16"), cl::sub(exportCmd));
static cl::opt<std::string> exportTarget(
    "target",
    cl::desc("What the binary runs on: cpu (the default: kernels compiled "
             "ahead of time for --cpu) or cuda (an NVIDIA GPU: kernels "
             "compiled now by NVRTC for sm_80, sm_90 and PTX; fp32)"),
    cl::init("cpu"), cl::value_desc("cpu|cuda"), cl::sub(exportCmd));
static cl::opt<std::string> exportCpu(
    "cpu",
    cl::desc("The x86-64 CPU the kernels are compiled for, as LLVM names it "
             "(x86-64-v3: AVX2 machines; x86-64-v4: AVX-512; znver4, ...); "
             "default this machine's CPU and features. The binary refuses "
             "to start on a CPU without them"),
    cl::value_desc("name"), cl::sub(exportCmd));
static cl::opt<int64_t> batchSize("batch",
                                  cl::desc("Sequences per forward call, when "
                                           "the model is a config or preset "
                                           "(default 4)"),
                                  cl::init(ForwardShape().batch),
                                  cl::sub(emitCmd),
                                  cl::sub(infoCmd), cl::sub(compileCmd));
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("Tokens per sequence (default: the config's seq_len)"),
           cl::init(0), cl::sub(emitCmd), cl::sub(infoCmd),
           cl::sub(compileCmd));
static cl::opt<bool> skipMemoryCheck(
    "skip-memory-check",
    cl::desc("Write the artifact even if the config's sizes cannot fit this "
             "machine's memory (64-bit overflows are still refused)"),
    cl::init(false), cl::sub(compileCmd));
static cl::opt<std::string> compileFunction(
    "function",
    cl::desc("Which function to compile: forward (the default: the compile "
             "pipeline), or grad_step / update_step (the training pipeline: "
             "llmc-autodiff and llmc-optimizer with default AdamW options, "
             "then fusion)"),
    cl::init("forward"), cl::value_desc("name"), cl::sub(compileCmd));
static cl::opt<std::string> compileRemat(
    "remat",
    cl::desc("Activation checkpointing of grad_step (llmc-remat): none (the "
             "default), full (each block keeps its input only and is "
             "recomputed), selective (matmul and attention outputs kept, the "
             "cheap ops recomputed) or budget (the fewest recomputations "
             "whose planned peak fits --remat-budget); prints the planned "
             "peak and the extra FLOPs"),
    cl::init("none"), cl::value_desc("policy"), cl::sub(compileCmd));
static cl::opt<std::string> rematBudget(
    "remat-budget",
    cl::desc("The planned peak (arena) --remat=budget must fit: bytes, or a "
             "number with KiB, MiB or GiB"),
    cl::value_desc("size"), cl::sub(compileCmd));
static cl::opt<bool> rematReport(
    "remat-report",
    cl::desc("Compile grad_step with each remat policy (budget too, given "
             "--remat-budget) and print planned peaks and extra FLOPs side "
             "by side instead of writing an artifact"),
    cl::sub(compileCmd));
static cl::opt<int64_t> compileDp(
    "dp",
    cl::desc("Data-parallel ranks the training step is sharded for "
             "(llmc-shard; 1: one process)"),
    cl::init(1), cl::value_desc("N"), cl::sub(compileCmd));
static cl::opt<int64_t> compilePp(
    "pp",
    cl::desc("Pipeline stages the model is cut into (llmc-pipeline-parallel, "
             "balanced by the planner's FLOPs as llmc run and llmc plan cut "
             "it; 1: none); --stage picks the stage compiled"),
    cl::init(1), cl::value_desc("N"), cl::sub(compileCmd));
static cl::opt<int64_t> compileStage(
    "stage", cl::desc("The pipeline stage compiled with --pp (0)"),
    cl::init(0), cl::value_desc("S"), cl::sub(compileCmd));
static cl::opt<int64_t> compileZero(
    "zero", cl::desc("ZeRO stage of the sharded step (0: DDP)"), cl::init(0),
    cl::value_desc("0-3"), cl::sub(compileCmd));
static cl::opt<double> compileBucketMb(
    "bucket-mb",
    cl::desc("Gradient all-reduce bucket cap in MiB (DDP's bucket_cap_mb)"),
    cl::init(::mlir::llmc::defaults::kGradientBucketMb), cl::value_desc("X"),
    cl::sub(compileCmd));
static cl::opt<bool> summaryOnly("summary",
                                 cl::desc("Omit the per-tensor table"),
                                 cl::sub(infoCmd));

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "llmc") << message << "\n";
  return 1;
}

static int fail(llvm::Error error) {
  std::string message = llvm::toString(std::move(error));
  // Config errors arrive formatted by SourceMgr ("file:line:col: error: ...")
  // and need no prefix of ours.
  if (llvm::StringRef(message).contains(": error: ")) {
    llvm::errs() << message;
    if (!llvm::StringRef(message).ends_with("\n"))
      llvm::errs() << "\n";
    return 1;
  }
  return fail(message);
}

static void registerDialects(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<LlmcDialect, func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  // Diagnostics point at file:line:col; a dump of the whole module after
  // each one would bury them.
  context.printOpOnDiagnostic(false);
}

static llvm::Error unknownPreset(llvm::StringRef name, llvm::StringRef what) {
  return llvm::createStringError("'" + name + "' is " + what + "; " +
                                 describePresetsFor(name));
}

/// A config file if `input` names an existing file, else a preset.
static llvm::Expected<ModelConfig> loadConfig(llvm::StringRef input) {
  if (llvm::sys::fs::exists(input) || input.ends_with(".yaml") ||
      input.ends_with(".yml"))
    return loadModelConfigFile(input);
  if (std::optional<ModelConfig> preset = getModelPreset(input))
    return *preset;
  return unknownPreset(input, "neither a config file nor a preset");
}

/// Holds every file read, so that diagnostics of any phase (parsing, passes,
/// code generation) print as file:line:col with the source line.
static auto sourceMgr = std::make_shared<llvm::SourceMgr>();

/// Parses model.mlir and checks it: the op verifiers and
/// llmc-verify-legality. Diagnostics print as file:line:col.
static OwningOpRef<ModuleOp> loadModule(MLIRContext &context,
                                        llvm::StringRef path) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer = openInputFile(path, &error);
  if (!buffer) {
    fail("cannot read '" + path + "': " + error);
    return nullptr;
  }
  sourceMgr->AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  OwningOpRef<ModuleOp> module =
      parseModuleSource(sourceMgr, &context);
  if (!module)
    return nullptr;
  PassManager pm(&context);
  pm.addPass(createVerifyLegalityPass());
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

static llvm::Expected<OwningOpRef<ModuleOp>>
buildFromConfig(MLIRContext &context, llvm::StringRef input) {
  llvm::Expected<ModelConfig> config = loadConfig(input);
  if (!config)
    return config.takeError();
  return buildForwardModule(context, *config, {batchSize, seqLen});
}

static int runPresets() {
  if (!presetName.empty()) {
    std::optional<ModelConfig> config = getModelPreset(presetName);
    if (!config)
      return fail(unknownPreset(presetName, "not a preset"));
    printModelConfig(*config, llvm::outs());
    return 0;
  }
  for (llvm::StringRef name : getModelPresetNames()) {
    ModelConfig c = *getModelPreset(name);
    llvm::outs() << llvm::format(
        "%-12s n_layer=%-3lld n_head=%-3lld n_embd=%-5lld seq_len=%-5lld "
        "vocab_size=%-6lld %s %s %s\n",
        name.str().c_str(), (long long)c.nLayer, (long long)c.nHead,
        (long long)c.nEmbd, (long long)c.seqLen, (long long)c.vocabSize,
        stringifyActivation(c.activation).str().c_str(),
        stringifyNorm(c.norm).str().c_str(),
        stringifyPosition(c.position).str().c_str());
  }
  return 0;
}

static int runEmitModel(MLIRContext &context) {
  auto module = buildFromConfig(context, emitInput);
  if (!module)
    return fail(module.takeError());
  if (outputPath.empty() || outputPath == "-") {
    (*module)->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  // Written atomically, so a failed run leaves no partial model.mlir behind.
  llvm::Error error = ::llmc::kir::writeFileAtomically(
      outputPath, [&](llvm::raw_ostream &os) {
        (*module)->print(os);
        os << "\n";
        return llvm::Error::success();
      });
  if (!error)
    return 0;
  // The message starts with the path: name it once, in emit-model's form.
  std::string message = llvm::toString(std::move(error));
  llvm::StringRef reason(message);
  reason.consume_front(outputPath + ": ");
  return fail("cannot create '" + outputPath + "': " + reason.str());
}

/// --remat-report: every policy's @grad_step, side by side.
static int runRematReport(ModuleOp module, int64_t budgetBytes) {
  SmallVector<RematPassOptions> policies;
  for (const char *name : {"none", "full", "selective", "budget"}) {
    RematPassOptions options;
    options.policy = name;
    options.budgetBytes = budgetBytes;
    if (options.policy != "budget" || budgetBytes > 0)
      policies.push_back(options);
  }
  SmallVector<RematPolicyFigures> rows =
      compareRematPolicies(module, TrainingPipelineOptions(), policies);
  llvm::outs() << "grad_step by remat policy (planned peak: the arena of the "
                  "lowered step; extra: FLOPs of the recomputed ops)\n";
  llvm::outs() << llvm::format("%-10s %14s %8s %14s %11s %8s %12s %8s\n",
                               "policy", "planned peak", "vs none",
                               "activations", "recomputed", "ops",
                               "extra GFLOP", "extra");
  const RematPolicyFigures &none = rows.front();
  bool ok = true;
  for (const RematPolicyFigures &row : rows) {
    if (!row.compiled) {
      llvm::outs() << llvm::format("%-10s failed (see the error above)\n",
                                   row.policy.c_str());
      ok = false;
      continue;
    }
    int64_t base = std::max<int64_t>(none.stepFlops, 1);
    llvm::outs() << llvm::format(
        "%-10s %10.2f MiB %7.2fx %10.2f MiB %11lld %8lld %12.3f %7.1f%%\n",
        row.policy.c_str(), row.plannedPeak / 1048576.0,
        double(none.plannedPeak) / std::max<int64_t>(row.plannedPeak, 1),
        row.summary.storedBytes / 1048576.0,
        (long long)row.summary.recomputedValues,
        (long long)row.summary.clonedOps, row.summary.extraFlops / 1e9,
        100.0 * row.summary.extraFlops / base);
  }
  return ok ? 0 : 1;
}

/// The flags of `llmc compile` checked against each other; the byte count
/// of --remat-budget (0 without one).
static llvm::Expected<int64_t> checkCompileFlags(bool cpuPhase) {
  auto error = [](const llvm::Twine &message) {
    return llvm::createStringError(message);
  };
  if (!compileTo.empty() && compileTo != "fused" && compileTo != "kernels" &&
      compileTo != "cuda" && !cpuPhase)
    return error("unknown phase '" + compileTo +
                 "' for --compile-to (llmc, fused, kernels, " +
                 llvm::join(::llmc::cpu::cpuPhaseNames(), ", ") + ", cuda)");
  if (compileTarget != "cpu" && compileTarget != "cuda")
    return error("unknown target '" + compileTarget +
                 "' for --target (cpu, cuda)");
  bool training = compileFunction != "forward";
  if (training && compileFunction != "grad_step" &&
      compileFunction != "grad_step_no_sync" &&
      compileFunction != "update_step")
    return error("unknown function '" + compileFunction +
                 "' for --function (forward, grad_step, grad_step_no_sync, "
                 "update_step)");
  if ((compileDp != 1 || compileZero != 0) && !training)
    return error("--dp and --zero shard the training step: use them with "
                 "--function grad_step or update_step");
  if (compileFunction == "grad_step_no_sync" && compileDp == 1)
    return error("grad_step_no_sync exists with --dp 2 or more");
  int64_t budgetBytes = 0;
  if (!rematBudget.empty()) {
    std::optional<int64_t> bytes = ::llmc::parseByteSize(rematBudget);
    if (!bytes)
      return error("--remat-budget: '" + rematBudget +
                   "' is not a size (bytes, or a number with KiB, MiB or GiB)");
    budgetBytes = *bytes;
  }
  if (!llvm::is_contained({"none", "full", "selective", "budget"},
                          compileRemat))
    return error("unknown policy '" + compileRemat +
                 "' for --remat (none, full, selective, budget)");
  if (compileRemat == "budget" && !budgetBytes)
    return error("--remat=budget needs --remat-budget");
  return budgetBytes;
}

/// The compile pipeline (@forward) or the training pipeline (the other
/// functions) as the flags configure them: sharding, pipeline stages,
/// remat, the CUDA target.
static LogicalResult runCompilePipeline(MLIRContext &context, ModuleOp module,
                                        int64_t budgetBytes) {
  PassManager pm(&context);
  TrainingPipelineOptions trainingOptions;
  trainingOptions.plannedPeak = plannedPeakBytes;
  trainingOptions.forCuda = compileTarget == "cuda";
  if (compileDp != 1 || compileZero != 0) {
    ShardPassOptions &shard = trainingOptions.shard.emplace();
    shard.dp = compileDp;
    shard.zero = compileZero;
    shard.bucketMb = compileBucketMb;
  }
  std::optional<PipelineParallelPassOptions> pipeline;
  if (compilePp != 1) {
    pipeline.emplace();
    pipeline->pp = compilePp;
    pipeline->stage = compileStage;
    trainingOptions.pipelineParallel = pipeline;
  }
  if (compileRemat != "none") {
    RematPassOptions &remat = trainingOptions.remat.emplace();
    remat.policy = compileRemat;
    remat.budgetBytes = budgetBytes;
  }
  if (compileFunction != "forward")
    buildTrainingPipeline(pm, trainingOptions);
  else
    buildCompilePipeline(pm, {}, {}, {}, {}, pipeline);
  return pm.run(module);
}

/// --dp 2 or more: what one rank holds, the persistent tensors of every
/// program of the sharded step (each name once) and this program's arena.
static LogicalResult printPerRankBytes(ModuleOp module,
                                       const ::llmc::kir::Program &program) {
  std::vector<::llmc::kir::Program> others;
  for (const char *name :
       {"grad_step", "grad_step_no_sync", "update_step", "shard_init"}) {
    auto other = module.lookupSymbol<func::FuncOp>(name);
    if (!other || name == compileFunction)
      continue;
    FailureOr<::llmc::kir::Program> lowered = lowerToProgram(other);
    if (failed(lowered))
      return failure();
    others.push_back(std::move(*lowered));
  }
  std::vector<const ::llmc::kir::Program *> all = {&program};
  for (const ::llmc::kir::Program &other : others)
    all.push_back(&other);
  ::llmc::kir::PersistentBytes bytes =
      ::llmc::kir::classifyPersistent(::llmc::kir::persistentTensors(all));
  llvm::outs() << llvm::format(
      "per rank (dp %lld, zero %lld): parameters %lld B, master partition "
      "%lld B, gradients %lld B, optimizer state %lld B, other %lld B; "
      "@%s arena %lld B (planned peak); total %lld B\n",
      (long long)compileDp, (long long)compileZero,
      (long long)bytes.parameters, (long long)bytes.master,
      (long long)bytes.gradients, (long long)bytes.optimizer,
      (long long)bytes.other, compileFunction.c_str(),
      (long long)program.arenaBytes,
      (long long)(bytes.total() + program.arenaBytes));
  return success();
}

/// --target=cuda: the program's CUDA module compiled by NVRTC (or from its
/// cache), for the artifact's CUDA section; none for the CPU target.
static llvm::Expected<std::optional<::llmc::kir::CudaSection>>
buildCudaSectionFor(const ::llmc::kir::Program &program) {
  if (compileTarget != "cuda")
    return std::nullopt;
#ifdef LLMC_HAVE_NVRTC
  ::llmc::cuda::NvrtcStats nvrtc;
  auto section = ::llmc::cuda::buildCudaSection(program, &nvrtc);
  if (!section)
    return section.takeError();
  llvm::errs() << llvm::format(
      "llmc: CUDA module of %zu kernels %s (%.2f s)\n",
      program.kernels.size(),
      nvrtc.cacheHit ? "loaded from the NVRTC cache"
                     : "compiled by NVRTC for sm_80, sm_90 and PTX",
      nvrtc.compileSeconds);
  if (!nvrtc.warning.empty())
    llvm::errs() << "llmc: warning: " << nvrtc.warning << "\n";
  return std::move(*section);
#else
  return llvm::createStringError(
      "--target=cuda: this llmc was built without the CUDA toolkit (NVRTC); "
      "rebuild with it installed");
#endif
}

/// Writes the artifact (-o, or next to the input) and says what it holds.
static int writeCompiledArtifact(const ::llmc::kir::Program &program,
                                 const ModelInfo &info) {
  llvm::Expected<std::optional<::llmc::kir::CudaSection>> cuda =
      buildCudaSectionFor(program);
  if (!cuda)
    return fail(cuda.takeError());
  int64_t numOps = 0;
  for (const auto &entry : info.opCounts)
    numOps += entry.second;
  std::string output = outputPath;
  if (output.empty()) {
    // Next to the input (model.mlir -> model.llmc); a preset in the
    // working directory.
    llvm::SmallString<128> path(compileInput);
    llvm::sys::path::replace_extension(path, "llmc");
    output = path.str().str();
  }
  if (llvm::Error error = ::llmc::kir::writeArtifact(
          output, program, *cuda ? &**cuda : nullptr))
    return fail(std::move(error));
  llvm::outs() << compileInput << ": ok: " << numOps << " ops, "
               << info.parameters.size() << " parameter tensors, "
               << info.numParameters << " parameters\n"
               << "wrote " << output << ": ";
  ::llmc::printPlanSummary(program, llvm::outs());
  return 0;
}

/// Whether a model config's sizes (at --batch and --seq-len) can fit this
/// machine, before its IR is built (training/ModelFloor.h: fp32 parameters
/// and one batch's logits); --skip-memory-check keeps the overflow check.
static llvm::Error checkConfigFloor(llvm::StringRef input) {
  llvm::Expected<ModelConfig> config = loadConfig(input);
  if (!config)
    return config.takeError();
  auto floor = ::llmc::training::modelFloor(
      *config, batchSize, seqLen ? int64_t(seqLen) : config->seqLen,
      /*fp32 weights=*/4, input);
  if (!floor || skipMemoryCheck)
    return floor.takeError();
  auto available = ::llmc::runtime::availableHostMemory();
  const char *advice = "shrink the model or the batch, or pass --skip-memory-"
                       "check to write the artifact for a larger machine";
  if (!available)
    return llvm::Error::success();
  return ::llmc::training::checkFloorFits(
      *floor, *available, /*ranks=*/1, ("the model of " + input).str(), advice);
}

/// `llmc compile`: the model (.mlir or a config), the pipeline the flags
/// ask for, then the phase --compile-to names printed or the artifact
/// written.
static int runCompile(MLIRContext &context) {
  OwningOpRef<ModuleOp> module;
  if (llvm::StringRef(compileInput).ends_with(".mlir")) {
    module = loadModule(context, compileInput);
    if (!module)
      return 1;
  } else {
    if (llvm::Error error = checkConfigFloor(compileInput))
      return fail(std::move(error));
    auto built = buildFromConfig(context, compileInput);
    if (!built)
      return fail(built.takeError());
    module = std::move(*built);
  }
  if (compileTo == "llmc") {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  bool cpuPhase = llvm::is_contained(::llmc::cpu::cpuPhaseNames(), compileTo);
  llvm::Expected<int64_t> budgetBytes = checkCompileFlags(cpuPhase);
  if (!budgetBytes)
    return fail(budgetBytes.takeError());
  if (rematReport)
    return runRematReport(*module, *budgetBytes);
  if (compileRemat != "none" && compileFunction != "grad_step")
    return fail("--remat rewrites the training step: use it with "
                "--function grad_step");
  ModelInfo info = getModelInfo(*module);
  if (failed(runCompilePipeline(context, *module, *budgetBytes)))
    return 1;
  if (compileTo == "fused") {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  auto function = module->lookupSymbol<func::FuncOp>(compileFunction);
  FailureOr<::llmc::kir::Program> program = lowerToProgram(function);
  if (failed(program))
    return 1;
  if (compileDp > 1 && failed(printPerRankBytes(*module, *program)))
    return 1;
  if (std::optional<RematSummary> remat = getRematSummary(function))
    ::llmc::printRematSummary(*remat, *program);
  if (compileTo == "kernels") {
    ::llmc::kir::printProgram(llvm::outs(), *program);
    return 0;
  }
  if (cpuPhase) {
    if (llvm::Error error = ::llmc::cpu::printCpuPhase(
            llvm::outs(), program->kernels, compileTo))
      return fail(std::move(error));
    return 0;
  }
  if (compileTo == "cuda") {
    llvm::outs() << ::llmc::cuda::emitCudaModule(*program);
    return 0;
  }
  return writeCompiledArtifact(*program, info);
}

/// --sparse-values as the executor's mode; none for an unknown value
/// (runGenerate checks it first).
static std::optional<::llmc::runtime::CpuExecutor::SparseValuesMode>
sparseValuesMode() {
  using Mode = ::llmc::runtime::CpuExecutor::SparseValuesMode;
  if (sparseValues == "auto")
    return Mode::Auto;
  if (sparseValues == "f32")
    return Mode::F32;
  if (sparseValues == "bf16")
    return Mode::BF16;
  return std::nullopt;
}

/// Loads an artifact and its kernels (from the kernel cache, or compiled
/// now) into a CPU executor with parameters set.
static llvm::Expected<std::unique_ptr<::llmc::runtime::CpuExecutor>>
loadCpuArtifact(llvm::StringRef path, llvm::StringRef weights) {
  llvm::Expected<::llmc::kir::Program> program =
      ::llmc::kir::readArtifact(path);
  if (!program)
    return program.takeError();
  if (auto available = ::llmc::runtime::availableHostMemory())
    if (llvm::Error error = ::llmc::runtime::checkMemoryFits(
            ::llmc::runtime::memoryNeed({&*program}), *available,
            "running " + path.str(), /*training=*/false))
      return error;
  std::vector<::llmc::kir::Kernel> kernels = program->kernels;
  ::llmc::cpu::CacheStats stats;
  auto executor = ::llmc::runtime::createCpuExecutor(
      std::move(*program),
      [&]() { return ::llmc::cpu::compileKernelsToObject(kernels); },
      numThreads, &stats);
  if (!executor)
    return executor.takeError();
  (*executor)->setSparseMaxRows(sparseMaxRows);
  (*executor)->setSparseValues(*sparseValuesMode());
  llvm::errs() << llvm::format(
      "llmc: %zu kernels %s (%.2f s), %d threads\n", kernels.size(),
      stats.hit ? "loaded from the kernel cache" : "JIT-compiled",
      stats.hit ? stats.loadSeconds : stats.compileSeconds + stats.loadSeconds,
      (*executor)->numThreads());
  if (!stats.warning.empty())
    llvm::errs() << "llmc: warning: " << stats.warning << "\n";
  if (llvm::Error error =
          ::llmc::runtime::loadWeights(**executor, weights, seed))
    return error;
  return executor;
}

/// Loads an artifact onto the --device: the CPU (kernels JIT-compiled or
/// from the kernel cache) or a CUDA GPU (kernels compiled by NVRTC or from
/// its cache; the driver is loaded at run time, so without one this is an
/// error, not a crash).
static llvm::Expected<std::unique_ptr<::llmc::runtime::Executor>>
loadArtifact(llvm::StringRef path, llvm::StringRef weights) {
  if (device == "cpu") {
    auto executor = loadCpuArtifact(path, weights);
    if (!executor)
      return executor.takeError();
    return std::unique_ptr<::llmc::runtime::Executor>(std::move(*executor));
  }
  if (device != "cuda")
    return llvm::createStringError("unknown device '" + device +
                                   "' (cpu, cuda)");
#ifdef LLMC_HAVE_NVRTC
  llvm::Expected<::llmc::kir::Program> program =
      ::llmc::kir::readArtifact(path);
  if (!program)
    return program.takeError();
  auto executor = ::llmc::runtime::CudaExecutor::create(
      std::move(*program), ::llmc::cuda::cudaCompiler());
  if (!executor)
    return executor.takeError();
  if (llvm::Error error =
          ::llmc::runtime::loadWeights(**executor, weights, seed))
    return error;
  llvm::errs() << "llmc: running on the GPU\n";
  return std::unique_ptr<::llmc::runtime::Executor>(std::move(*executor));
#else
  return llvm::createStringError(
      "--device=cuda: this llmc was built without the CUDA toolkit");
#endif
}

static int runInspect() {
  // An exported binary (llmc export): what its --info prints, read without
  // running it.
  if (::llmc::runtime::Payload::isExported(artifactInput)) {
    if (llvm::Error error =
            ::llmc::printExportedBinary(artifactInput, llvm::outs()))
      return fail(std::move(error));
    return 0;
  }
  llvm::Expected<::llmc::kir::ArtifactContents> contents =
      ::llmc::kir::readArtifactContents(artifactInput);
  if (!contents)
    return fail(contents.takeError());
  const ::llmc::kir::Program *program = &contents->program;
  llvm::outs() << artifactInput << ": ";
  ::llmc::printPlanSummary(*program, llvm::outs());
  if (inspectRun && device != "cpu") {
    // On a GPU the run shows the loss; the canary measurement of the
    // arena is the CPU backend's.
    auto executor = loadArtifact(artifactInput, "");
    if (!executor)
      return fail(executor.takeError());
    if (llvm::Error error = (*executor)->run())
      return fail(std::move(error));
    auto loss = (*executor)->scalarOutput(::llmc::kir::StepScalar::Loss);
    if (!loss)
      return fail(loss.takeError());
    llvm::outs() << llvm::format("loss: %.6f\n", *loss);
    return 0;
  }
  if (inspectRun) {
    auto executor = loadCpuArtifact(artifactInput, "");
    if (!executor)
      return fail(executor.takeError());
    llvm::Expected<int64_t> measured =
        (*executor)->measureArenaHighWater();
    if (!measured)
      return fail(measured.takeError());
    llvm::outs() << "measured arena high-water mark: " << *measured
                 << " bytes (planned " << program->arenaBytes << ")\n";
    if (auto loss = (*executor)->scalarOutput(::llmc::kir::StepScalar::Loss))
      llvm::outs() << llvm::format("loss: %.6f\n", *loss);
    else
      llvm::consumeError(loss.takeError());
    return 0;
  }
  llvm::outs() << "\n";
  ::llmc::kir::printProgram(llvm::outs(), *program);
  if (contents->cuda)
    ::llmc::printCudaSection(*contents->cuda, llvm::outs());
  return 0;
}

using ::llmc::GeneratedText;
using ::llmc::printLogitsLine;

static ::llmc::runtime::SamplingOptions samplingOptions() {
  return generation.sampling(seed);
}

/// `llmc generate` with the KV-cache programs built from the artifact's
/// model config. Returns -1 when the artifact has none (a hand-written
/// model) and the recompute path should run instead.
static int runCachedGenerate(MLIRContext &context,
                             const ::llmc::data::Tokenizer &tok,
                             ::llmc::kir::DType weightType) {
  llvm::Expected<::llmc::kir::Program> artifact =
      ::llmc::kir::readArtifact(artifactInput);
  if (!artifact)
    return fail(artifact.takeError());
  if (artifact->modelJson.empty()) {
    llvm::errs() << "llmc: " << artifactInput
                 << " has no model config (a hand-written model): "
                    "generating by recomputing the forward per token\n";
    return -1;
  }
  ::llmc::InferenceExecutorFactory onDevice;
  if (device == "cuda") {
    if (weightType != ::llmc::kir::DType::F32)
      return fail("--precision " + generatePrecision +
                  " --device cuda: the 16-bit-weight GEMMs (f32 "
                  "activations x bf16/f16 weights) run on the CPU only");
#ifdef LLMC_HAVE_NVRTC
    // Both programs on the GPU, binding one device store.
    std::shared_ptr<::llmc::runtime::CudaPersistentStore> store;
    onDevice = [store](::llmc::kir::Program program, llvm::StringRef name)
        mutable -> llvm::Expected<std::unique_ptr<::llmc::runtime::Executor>> {
      if (!store) {
        auto created = ::llmc::runtime::CudaPersistentStore::create();
        if (!created)
          return created.takeError();
        store = *created;
      }
      ::llmc::runtime::CudaExecutorOptions options;
      options.store = store;
      auto executor = ::llmc::runtime::CudaExecutor::create(
          std::move(program), ::llmc::cuda::cudaCompiler(), options);
      if (!executor)
        return executor.takeError();
      const auto &info = (*executor)->info();
      llvm::errs() << "llmc: @" << name << " on the GPU (" << info.deviceName
                   << ", " << info.kernelImage << ")\n";
      return std::unique_ptr<::llmc::runtime::Executor>(std::move(*executor));
    };
#else
    return fail("--device=cuda: this llmc was built without the CUDA toolkit");
#endif
  } else if (device != "cpu") {
    return fail("unknown device '" + device + "' (cpu, cuda)");
  }
  auto config =
      ::mlir::llmc::parseModelConfigJson(artifact->modelJson, artifactInput);
  if (!config)
    return fail(config.takeError());
  ::mlir::llmc::InferenceShape shape;
  shape.maxContext = maxContext ? int64_t(maxContext) : config->seqLen;
  shape.prefillTokens = std::min<int64_t>(prefillChunk, shape.maxContext);
  auto session =
      ::llmc::loadInference(context, *config, shape, weightsPath, seed,
                            numThreads, "running " + artifactInput,
                            llvm::errs(),
                            weightType, onDevice);
  if (!session)
    return fail(session.takeError());
  for (::llmc::runtime::CpuExecutor *cpu :
       {session->cpuPrefill, session->cpuDecode})
    if (cpu) {
      cpu->setSparseMaxRows(sparseMaxRows);
      cpu->setSparseValues(*sparseValuesMode());
    }
  ::llmc::runtime::CachedGenerator &generator = session->generator;
  std::vector<int32_t> tokens = tok.encode(generation.prompt);
  if (tokens.empty())
    tokens = tok.encode("\n"); // the model needs one token to start from
  if (generation.printLogits) {
    if (llvm::Error error = ::llmc::printCachedLogits(generator, tokens))
      return fail(std::move(error));
    return 0;
  }
  ::llmc::runtime::GenerationStats stats;
  GeneratedText text(tok, generation.prompt, generation.maxTokens);
  if (llvm::Error error = text.finish(::llmc::runtime::generateCached(
          generator, tokens, generation.maxTokens, samplingOptions(),
          [&](int64_t id) { text.token(id); }, &stats)))
    return fail(std::move(error));
  ::llmc::printGenerationStats(stats, generator, *session->prefill,
                               *session->decode);
  return 0;
}

static int runGenerate(MLIRContext &mlirContext) {
  if (llvm::Error error = generation.check())
    return fail(std::move(error));
  if (!sparseValuesMode())
    return fail("--sparse-values: expected auto, f32 or bf16, got '" +
                sparseValues + "'");
  auto tokenizer = ::llmc::data::loadTokenizer(tokenizerSpec);
  if (!tokenizer)
    return fail(tokenizer.takeError());
  auto weightType = ::llmc::inferenceWeightType(generatePrecision);
  if (!weightType)
    return fail(weightType.takeError());
  if (*weightType != ::llmc::kir::DType::F32 && recompute)
    return fail("--precision " + generatePrecision +
                " runs the KV-cache programs; --recompute runs the "
                "artifact's own (fp32) forward");
  if (!recompute) {
    int result = runCachedGenerate(mlirContext, **tokenizer, *weightType);
    if (result >= 0)
      return result;
    if (*weightType != ::llmc::kir::DType::F32)
      return fail("--precision " + generatePrecision +
                  " needs the KV-cache programs (a model config)");
  }
  auto executor = loadArtifact(artifactInput, weightsPath);
  if (!executor)
    return fail(executor.takeError());
  const ::llmc::data::Tokenizer &tok = **tokenizer;
  std::vector<int32_t> context = tok.encode(generation.prompt);
  if (context.empty())
    context = tok.encode("\n"); // the model needs one token to start from
  if (generation.printLogits) {
    // One forward over the prompt (causal: the padding after it changes
    // nothing before it); a row of logits per position.
    const ::llmc::kir::Program &program = (*executor)->program();
    auto tokens = std::find_if(
        program.inputs.begin(), program.inputs.end(),
        [](const ::llmc::kir::Binding &b) { return b.name == "tokens"; });
    if (tokens == program.inputs.end())
      return fail("--print-logits: the program has no tokens input");
    std::vector<int64_t> shape = program.buffers[tokens->buffer].shape;
    if (shape.size() != 2 || int64_t(context.size()) > shape[1])
      return fail("--print-logits: the prompt is longer than the artifact's "
                  "sequence length");
    auto input = ::llmc::runtime::HostTensor::zeros(
        ::llmc::kir::DType::I32, shape);
    std::copy(context.begin(), context.end(), input.i32().begin());
    if (llvm::Error error = (*executor)->setTensor("tokens", input))
      return fail(std::move(error));
    if (llvm::Error error = (*executor)->run())
      return fail(std::move(error));
    auto logits = (*executor)->output("logits");
    if (!logits)
      return fail(logits.takeError());
    int64_t vocab = program.buffers[program.outputs.back().buffer].shape.back();
    for (const auto &output : program.outputs)
      if (output.name == "logits")
        vocab = program.buffers[output.buffer].shape.back();
    printLogitsLine("last",
                    logits->f32().slice((context.size() - 1) * vocab, vocab));
    for (size_t p = 0; p < context.size(); ++p)
      printLogitsLine(llvm::Twine(p), logits->f32().slice(p * vocab, vocab));
    return 0;
  }
  GeneratedText text(tok, generation.prompt, generation.maxTokens);
  if (llvm::Error error = text.finish(::llmc::runtime::generate(
          **executor, context, generation.maxTokens, samplingOptions(),
          [&](int64_t id) { text.token(id); })))
    return fail(std::move(error));
  std::string sparse = (*executor)->sparseSummary();
  if (!sparse.empty())
    llvm::errs() << "llmc: " << sparse << "\n";
  return 0;
}

static int runInfo(MLIRContext &context) {
  OwningOpRef<ModuleOp> module;
  if (llvm::StringRef(infoInput).ends_with(".mlir")) {
    module = loadModule(context, infoInput);
    if (!module)
      return 1;
  } else {
    auto built = buildFromConfig(context, infoInput);
    if (!built)
      return fail(built.takeError());
    module = std::move(*built);
  }
  printModelInfo(getModelInfo(*module), llvm::outs(), !summaryOnly);
  return 0;
}

int runTokenizerCommand(int argc, char **argv);
int runTrainCommand(int argc, char **argv);


int main(int argc, char **argv) {
  ::llmc::installCrashWatchdog(); // before InitLLVM's stack trace
  llvm::InitLLVM init(argc, argv);
  if (argc > 1 && llvm::StringRef(argv[1]) == "tokenizer")
    return runTokenizerCommand(argc - 1, argv + 1);
  if (argc > 1 && llvm::StringRef(argv[1]) == "run")
    return runTrainCommand(argc - 1, argv + 1);
  if (argc > 1 && llvm::StringRef(argv[1]) == "data")
    return ::llmc::runDataCommand(argc - 1, argv + 1);
  if (argc > 1 && llvm::StringRef(argv[1]) == "help")
    return ::llmc::runHelpCommand(argc - 1, argv + 1);
  if (argc > 1 && !::llmc::checkCommandName(argv[1]))
    return 1;
  // llmc plan's config-key flags go to the config parser, as llmc run's do.
  std::vector<char *> planArgs;
  if (argc > 1 && llvm::StringRef(argv[1]) == "plan") {
    planArgs = splitPlanArguments(argc, argv);
    argc = static_cast<int>(planArgs.size());
    argv = planArgs.data();
  }
  // The top level has no options of its own: hide the ones libLLVM and
  // libMLIR register there (hundreds of backend flags), so `llmc --help`
  // lists the subcommands and --help/--version only. Subcommands list only
  // their own options already.
  static cl::OptionCategory noCategory("llmc");
  cl::HideUnrelatedOptions(noCategory, cl::SubCommand::getTopLevel());
  cl::ParseCommandLineOptions(
      argc, argv,
      "llmc: a compiler from transformer models to fused kernels\n\n"
      "  llmc emit-model CONFIG -o model.mlir   config -> llmc IR\n"
      "  llmc compile MODEL -o model.llmc       model -> artifact\n"
      "  llmc inspect model.llmc                schedule, memory, kernels\n"
      "  llmc generate model.llmc               sample text\n"
      "  llmc export model.llmc -o NAME         a standalone inference binary\n"
      "  llmc convert CKPT -o OUT.safetensors   trained weights out (HF names; .bin: llm.c)\n"
      "  llmc info MODEL                        parameters and ops\n"
      "  llmc plan train.yaml | MODEL           memory, time, cost, layouts\n"
      "  llmc presets [NAME]                    built-in model configs\n"
      "  llmc tokenizer train|encode ...        BPE vocabularies, token shards\n"
      "  llmc data info FILES...                what token files hold\n"
      "  llmc run train.yaml                    train (config keys as --flags)\n"
      "  llmc help config [--markdown]          the config keys of run and plan\n\n"
      "Run 'llmc SUBCOMMAND --help' for a subcommand's options.\n");
  MLIRContext context;
  registerDialects(context);
  SourceMgrDiagnosticHandler diagnostics(*sourceMgr, &context);
  if (emitCmd)
    return runEmitModel(context);
  if (compileCmd)
    return runCompile(context);
  if (inspectCmd)
    return runInspect();
  if (generateCmd)
    return runGenerate(context);
  if (exportCmd) {
    ::llmc::ExportOptions options;
    options.model = artifactInput;
    options.weights = weightsPath;
    options.seed = seed;
    options.tokenizer = tokenizerSpec;
    options.precision = exportPrecision;
    options.target = exportTarget;
    options.cpu = exportCpu;
    options.batch = exportBatch;
    options.maxContext = maxContext;
    options.prefillChunk = prefillChunk;
    options.output = outputPath;
    if (llvm::Error error =
            ::llmc::exportBinary(context, options, llvm::errs()))
      return fail(std::move(error));
    return 0;
  }
  if (convertCmd) {
    if (outputPath.empty())
      return fail("convert: -o OUT is required (OUT.safetensors or OUT.bin)");
    ConvertOptions options{convertInput, outputPath, convertPrecision,
                           convertNames, convertSparse};
    if (llvm::Error error = convertCheckpoint(context, options, llvm::outs()))
      return fail(std::move(error));
    return 0;
  }
  if (sparsityCmd) {
    if (sparsityArgs.size() != 2 || sparsityArgs[0] != "check")
      return fail("usage: llmc sparsity check CKPT");
    llvm::Expected<bool> ok =
        ::llmc::checkSparsity(sparsityArgs[1], llvm::outs());
    if (!ok)
      return fail(ok.takeError());
    return *ok ? 0 : 1;
  }
  if (infoCmd)
    return runInfo(context);
  if (presetsCmd)
    return runPresets();
  if (planCmd)
    return runPlan(context);
  cl::PrintHelpMessage();
  return 1;
}
