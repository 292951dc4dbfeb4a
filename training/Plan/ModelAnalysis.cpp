// `llmc plan`'s model analysis: parameters and the forward pass from the IR.
#include "training/Plan/ModelAnalysis.h"

#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "codegen/TrainingStep.h"
#include "frontend/ConfigYaml.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelInfo.h"
#include "ir/LlmcDialect.h"
#include "ir/ParseModule.h"
#include "ir/TensorParallelSplit.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>

using namespace llvm;
using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;
using mlir::llmc::config::makeError;
using mlir::llmc::config::readFile;

//===----------------------------------------------------------------------===//
// The model, from its IR
//===----------------------------------------------------------------------===//

namespace {
/// Puts each parameter where a layout holds it: split over tp as
/// llmc-tensor-parallel splits it (ir/TensorParallelSplit.h: the attention and
/// MLP projections, the column-parallel biases, and by vocabulary rows
/// the token embedding and an untied classifier), whole otherwise (norms,
/// row-parallel biases, the position embedding).
Error placeParameters(const ModelInfo &info, PlanModel &model) {
  const ModelConfig &config = model.config;
  bool swiglu = config.activation == Activation::SwiGlu;
  std::map<int64_t, std::pair<int64_t, int64_t>> blocks; // split, replicated
  for (const ParameterInfo &param : info.parameters) {
    StringRef name = param.name;
    bool split = tensorParallelSplit(name, swiglu).has_value();
    if (name.consume_front("h.")) {
      int64_t index = 0;
      if (name.consumeInteger(10, index) || !name.starts_with("."))
        return makeError("cannot place parameter '" + param.name +
                         "': expected h.<block>.<name>");
      (split ? blocks[index].first : blocks[index].second) += param.numElements;
      continue;
    }
    if (name == "wte" || name == "wpe") {
      (split ? model.firstSplit : model.firstReplicated) += param.numElements;
      if (name == "wte" && config.tieEmbeddings)
        model.tiedEmbedding = param.numElements;
      continue;
    }
    (split ? model.lastSplit : model.lastReplicated) += param.numElements;
  }
  model.numParameters = info.numParameters;
  model.numBlocks = static_cast<int64_t>(blocks.size());
  if (blocks.empty() || model.numBlocks != config.nLayer)
    return makeError(formatv("found {0} transformer blocks (parameters "
                             "h.<i>.*) in the IR of '{1}', its config says "
                             "n_layer {2}",
                             blocks.size(), model.input, config.nLayer));
  // Every block of these models has the same shapes; a block that differs
  // would make per-stage counts wrong, so the largest is used.
  for (const auto &entry : blocks) {
    model.blockSplit = std::max(model.blockSplit, entry.second.first);
    model.blockReplicated =
        std::max(model.blockReplicated, entry.second.second);
  }
  return Error::success();
}

/// Diagnostics of MLIR collected into a string instead of stderr.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext &context)
      : handler(&context, [this](Diagnostic &diag) {
          if (!text.empty())
            text += "\n";
          std::string loc;
          raw_string_ostream os(loc);
          diag.getLocation().print(os);
          text += loc + ": " + diag.str();
          return success();
        }) {}
  std::string text;

private:
  ScopedDiagnosticHandler handler;
};

/// The config recorded in a module's `llmc.model` attribute.
Expected<ModelConfig> configFromModule(ModuleOp module, StringRef path) {
  auto dict = module->getAttrOfType<DictionaryAttr>("llmc.model");
  auto missing = [&](StringRef key) {
    return makeError(path + ": the module has no llmc.model attribute with '" +
                     key +
                     "' (llmc emit-model writes it); llmc plan reads "
                     "the model's layers, heads and widths from it");
  };
  if (!dict)
    return missing("n_layer");
  ModelConfig config;
  for (auto [key, field] :
       {std::pair<StringRef, int64_t *>{"n_layer", &config.nLayer},
        {"n_head", &config.nHead},
        {"n_embd", &config.nEmbd},
        {"seq_len", &config.seqLen},
        {"vocab_size", &config.vocabSize},
        {"ffn_hidden", &config.ffnHidden}}) {
    auto attr = dict.getAs<IntegerAttr>(key);
    if (!attr || attr.getInt() < 1)
      return missing(key);
    *field = attr.getInt();
  }
  if (auto name = dict.getAs<StringAttr>("name"))
    config.name = name.str();
  if (auto act = dict.getAs<StringAttr>("activation"))
    for (Activation a : {Activation::Gelu, Activation::GeluExact,
                         Activation::Relu, Activation::SwiGlu})
      if (stringifyActivation(a) == act.getValue())
        config.activation = a;
  if (auto norm = dict.getAs<StringAttr>("norm"))
    config.norm =
        norm.getValue() == "rmsnorm" ? Norm::RmsNorm : Norm::LayerNorm;
  if (auto pos = dict.getAs<StringAttr>("position"))
    config.position =
        pos.getValue() == "rope" ? Position::Rope : Position::Learned;
  if (auto tie = dict.getAs<BoolAttr>("tie_embeddings"))
    config.tieEmbeddings = tie.getValue();
  if (auto bias = dict.getAs<BoolAttr>("bias"))
    config.bias = bias.getValue();
  if (auto dropout = dict.getAs<FloatAttr>("dropout"))
    config.dropout = dropout.getValueAsDouble();
  if (config.nEmbd % config.nHead)
    return makeError(path + ": llmc.model has n_embd " + Twine(config.nEmbd) +
                     " not divisible by n_head " + Twine(config.nHead));
  return config;
}

void registerPlanDialects(MLIRContext &context) {
  context.loadDialect<LlmcDialect, func::FuncDialect>();
}

/// Parses model.mlir text and checks it is a legal llmc model.
Expected<OwningOpRef<ModuleOp>> parseModel(MLIRContext &context, StringRef text,
                                           StringRef path) {
  registerPlanDialects(context);
  auto sourceMgr = std::make_shared<SourceMgr>();
  sourceMgr->AddNewSourceBuffer(MemoryBuffer::getMemBufferCopy(text, path),
                                SMLoc());
  std::string diagnostics;
  raw_string_ostream os(diagnostics);
  SourceMgrDiagnosticHandler handler(*sourceMgr, &context, os);
  OwningOpRef<ModuleOp> module =
      parseModuleSource(sourceMgr, &context);
  if (module) {
    PassManager pm(&context);
    pm.addPass(createVerifyLegalityPass());
    if (succeeded(pm.run(*module)))
      return module;
  }
  return makeError(StringRef(diagnostics).rtrim());
}
} // namespace

Expected<PlanModel> plan::analyzeModel(MLIRContext &context,
                                       const ModelConfig &config) {
  // Parameter shapes do not depend on the token shape; one token builds
  // the smallest IR.
  auto module = buildForwardModule(context, config, {1, 1});
  if (!module)
    return module.takeError();
  PlanModel model;
  model.config = config;
  model.input = config.name;
  ModelInfo info = getModelInfo(**module);
  if (Error err = placeParameters(info, model))
    return err;
  return model;
}

Expected<PlanModel> plan::loadPlanModel(MLIRContext &context, StringRef input) {
  registerPlanDialects(context);
  if (input.ends_with(".mlir")) {
    auto buffer = readFile(input, "model");
    if (!buffer)
      return buffer.takeError();
    auto module = parseModel(context, (*buffer)->getBuffer(), input);
    if (!module)
      return module.takeError();
    Expected<ModelConfig> config = configFromModule(**module, input);
    if (!config)
      return config.takeError();
    PlanModel model;
    model.config = *config;
    model.input = input.str();
    model.irSource = "IR of " + sys::path::filename(input).str();
    ModelInfo info = getModelInfo(**module);
    if (Error err = placeParameters(info, model))
      return err;
    model.mlirBatch = info.tokens.getDimSize(0);
    model.mlirSeqLen = info.tokens.getDimSize(1);
    model.mlirText = (*buffer)->getBuffer().str();
    return model;
  }
  ModelConfig config;
  std::string how;
  if (sys::fs::exists(input) || input.ends_with(".yaml") ||
      input.ends_with(".yml")) {
    Expected<ModelConfig> loaded = loadModelConfigFile(input);
    if (!loaded)
      return loaded.takeError();
    config = *loaded;
    how = "config " + sys::path::filename(input).str();
  } else if (std::optional<ModelConfig> preset = getModelPreset(input)) {
    config = *preset;
    how = "preset " + input.str();
  } else {
    return makeError("'" + input +
                     "' is neither a model.mlir, a config file nor a "
                     "preset; " +
                     describePresetsFor(input));
  }
  Expected<PlanModel> model = analyzeModel(context, config);
  if (!model)
    return model.takeError();
  model->input = input.str();
  model->irSource = "IR of @forward built from " + how;
  return model;
}

Expected<ForwardMemory> plan::compileForwardMemory(MLIRContext &context,
                                        const PlanModel &model, int64_t batch,
                                        int64_t seqLen) {
  registerPlanDialects(context);
  OwningOpRef<ModuleOp> module;
  ForwardMemory result;
  result.batch = batch;
  result.seqLen = seqLen;
  if (!model.mlirText.empty() && batch == model.mlirBatch &&
      seqLen == model.mlirSeqLen) {
    auto parsed = parseModel(context, model.mlirText, model.input);
    if (!parsed)
      return parsed.takeError();
    module = std::move(*parsed);
    result.source = "IR: memory plan of " +
                    sys::path::filename(model.input).str() + "'s @forward";
  } else {
    auto built = buildForwardModule(context, model.config, {batch, seqLen});
    if (!built)
      return built.takeError();
    module = std::move(*built);
    result.source = "IR: memory plan of the compiled @forward";
    if (!model.mlirText.empty())
      result.source += " (rebuilt from its llmc.model at this shape)";
  }
  DiagnosticCollector diagnostics(context);
  PassManager pm(&context);
  buildCompilePipeline(pm);
  if (failed(pm.run(*module)))
    return makeError("compiling the forward pass of '" + model.input +
                     "' failed: " + diagnostics.text);
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  FailureOr<::llmc::kir::Program> program = lowerToProgram(forward);
  if (failed(program))
    return makeError("lowering the forward pass of '" + model.input +
                     "' failed: " + diagnostics.text);
  result.arenaBytes = program->arenaBytes;
  result.flops = ::llmc::kir::countFlops(*program);
  return result;
}

bool plan::canCompileStep(Precision precision, int64_t tp, int64_t pp) {
  return tp == 1 && pp == 1 && precision != Precision::Fp8;
}

Expected<StepMemory> plan::compileStepMemory(MLIRContext &context,
                                          const PlanModel &model,
                                          int64_t batch, int64_t seqLen,
                                          Precision precision,
                                          Optimizer optimizer, int64_t dp,
                                          int zero) {
  registerPlanDialects(context);
  auto module = buildForwardModule(context, model.config, {batch, seqLen});
  if (!module)
    return module.takeError();
  StepMemory step;
  step.batch = batch;
  step.seqLen = seqLen;
  step.dp = dp;
  step.zero = zero;
  step.precision = precision;
  TrainingPipelineOptions options;
  // The step's activations do not depend on the optimizer; 8-bit AdamW,
  // which llmc has not, compiles as AdamW.
  options.optimizer.optimizer = optimizer == Optimizer::Sgd ? "sgd" : "adamw";
  if (precision == Precision::Fp16 || precision == Precision::Bf16) {
    AmpPassOptions &amp = options.amp.emplace();
    amp.precision = stringifyPrecision(precision).str();
  }
  if (dp > 1) {
    ShardPassOptions &shard = options.shard.emplace();
    shard.dp = dp;
    shard.zero = zero;
  }
  SmallVector<RematPassOptions> policies;
  for (Remat remat : {Remat::None, Remat::Selective, Remat::Full}) {
    RematPassOptions &policy = policies.emplace_back();
    policy.policy = stringifyRemat(remat).str();
  }
  DiagnosticCollector diagnostics(context);
  SmallVector<RematPolicyFigures> rows =
      compareRematPolicies(**module, options, policies);
  for (auto [remat, row] :
       llvm::zip(std::array<Remat, 3>{Remat::None, Remat::Selective,
                                      Remat::Full},
                 rows)) {
    unsigned i = static_cast<unsigned>(remat);
    step.compiled[i] = row.compiled;
    step.arenaBytes[i] = row.plannedPeak;
    step.storedBytes[i] = row.summary.storedBytes;
  }
  if (!step.compiled[static_cast<unsigned>(Remat::None)])
    return makeError("compiling the training step of '" + model.input +
                     "' failed: " + diagnostics.text);
  step.source = formatv("IR: memory plan of the compiled @grad_step ({0}{1})",
                        stringifyPrecision(precision),
                        dp > 1 ? formatv(", dp {0}, ZeRO-{1}", dp, zero).str()
                               : std::string())
                    .str();
  return step;
}
