// llmc: the driver. Subcommands emit-model, compile, info and presets.
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "frontend/ModelInfo.h"
#include "ir/LlmcDialect.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
using namespace mlir::llmc;
namespace cl = llvm::cl;

static cl::SubCommand emitCmd(
    "emit-model",
    "Write the @forward function of a model config (YAML file or preset "
    "name) as llmc IR");
static cl::SubCommand
    compileCmd("compile",
               "Parse and verify a model in llmc IR (model.mlir): the ops' "
               "verifiers and the compile pipeline (llmc-compile-pipeline)");
static cl::SubCommand
    infoCmd("info",
            "Print the parameters (per tensor and total, counted from the "
            "IR) and the op counts of a model: model.mlir, a YAML config or "
            "a preset name");

static cl::SubCommand
    presetsCmd("presets", "List the built-in model presets, or print one as a "
                          "complete YAML config to start from");

static cl::opt<std::string> emitInput(cl::Positional, cl::Required,
                                      cl::desc("<config.yaml | preset>"),
                                      cl::sub(emitCmd));
static cl::opt<std::string> compileInput(cl::Positional, cl::Required,
                                         cl::desc("<model.mlir>"),
                                         cl::sub(compileCmd));
static cl::opt<std::string>
    infoInput(cl::Positional, cl::Required,
              cl::desc("<model.mlir | config.yaml | preset>"),
              cl::sub(infoCmd));
static cl::opt<std::string> presetName(cl::Positional, cl::Optional,
                                       cl::desc("[preset]"),
                                       cl::sub(presetsCmd));
static cl::opt<std::string> outputPath("o",
                                       cl::desc("Output file ('-': stdout)"),
                                       cl::value_desc("path"), cl::init("-"),
                                       cl::sub(emitCmd));
static cl::opt<int64_t> batchSize("batch",
                                  cl::desc("Sequences per forward call"),
                                  cl::init(4), cl::sub(emitCmd),
                                  cl::sub(infoCmd));
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("Tokens per sequence (default: the config's seq_len)"),
           cl::init(0), cl::sub(emitCmd), cl::sub(infoCmd));
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
  std::string known;
  llvm::raw_string_ostream os(known);
  llvm::interleave(getModelPresetNames(), os, ", ");
  return llvm::createStringError("'" + name + "' is " + what +
                                 " (presets: " + known + ")");
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

/// Parses model.mlir, runs the op verifiers and the compile pipeline.
/// Diagnostics print as file:line:col.
static OwningOpRef<ModuleOp> loadModule(MLIRContext &context,
                                        llvm::StringRef path) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer = openInputFile(path, &error);
  if (!buffer) {
    fail("cannot read '" + path + "': " + error);
    return nullptr;
  }
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(*sourceMgr, &context);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&context));
  if (!module)
    return nullptr;
  PassManager pm(&context);
  buildCompilePipeline(pm);
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
  // Written to a temporary file and renamed into place, so a failed run
  // leaves no partial model.mlir behind.
  if (outputPath == "-") {
    (*module)->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  llvm::Expected<llvm::sys::fs::TempFile> temp =
      llvm::sys::fs::TempFile::create(outputPath + "-%%%%%%.tmp");
  if (!temp)
    return fail("cannot create '" + outputPath +
                "': " + llvm::toString(temp.takeError()));
  {
    llvm::raw_fd_ostream os(temp->FD, /*shouldClose=*/false);
    (*module)->print(os);
    os << "\n";
    os.flush();
    if (os.has_error()) {
      std::string reason = os.error().message();
      os.clear_error();
      llvm::consumeError(temp->discard());
      return fail("cannot write '" + outputPath + "': " + reason);
    }
  }
  if (llvm::Error error = temp->keep(outputPath))
    return fail("cannot write '" + outputPath +
                "': " + llvm::toString(std::move(error)));
  return 0;
}

static int runCompile(MLIRContext &context) {
  OwningOpRef<ModuleOp> module = loadModule(context, compileInput);
  if (!module)
    return 1;
  ModelInfo info = getModelInfo(*module);
  int64_t numOps = 0;
  for (const auto &entry : info.opCounts)
    numOps += entry.second;
  llvm::outs() << compileInput << ": ok: " << numOps << " ops, "
               << info.parameters.size() << " parameter tensors, "
               << info.numParameters << " parameters\n";
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

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(
      argc, argv,
      "llmc: a compiler from transformer models to fused kernels\n\n"
      "  llmc emit-model CONFIG -o model.mlir   config -> llmc IR\n"
      "  llmc compile model.mlir                parse and verify\n"
      "  llmc info MODEL                        parameters and ops\n"
      "  llmc presets [NAME]                    built-in model configs\n\n"
      "Run 'llmc SUBCOMMAND --help' for a subcommand's options.\n");
  MLIRContext context;
  registerDialects(context);
  if (emitCmd)
    return runEmitModel(context);
  if (compileCmd)
    return runCompile(context);
  if (infoCmd)
    return runInfo(context);
  if (presetsCmd)
    return runPresets();
  cl::PrintHelpMessage();
  return 1;
}
