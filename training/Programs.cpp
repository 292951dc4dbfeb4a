// A session's programs: the model built, the config mapped to the
// passes' options, the pipeline cut and the tensor-parallel shards read.
#include "training/Programs.h"

#include "frontend/GptBuilder.h"
#include "frontend/ModelInfo.h"
#include "ir/LlmcDialect.h"
#include "ir/ParseModule.h"
#include "ir/PipelineStages.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::llmc;
using ::llmc::TrainingStepOptions;
namespace training = ::llmc::training;

namespace {
/// llmc-amp's options for `precision`; none for fp32.
std::optional<mlir::llmc::AmpPassOptions>
ampOptions(const ::llmc::PrecisionConfig &precision) {
  if (precision.kind == ::llmc::PrecisionConfig::Kind::FP32)
    return std::nullopt;
  mlir::llmc::AmpPassOptions amp;
  amp.precision =
      precision.kind == ::llmc::PrecisionConfig::Kind::FP16 ? "fp16" : "bf16";
  amp.allow.assign(precision.allow.begin(), precision.allow.end());
  amp.deny.assign(precision.deny.begin(), precision.deny.end());
  return amp;
}
/// llmc-shard's options; none for one process.
std::optional<mlir::llmc::ShardPassOptions>
shardOptions(const ::llmc::ParallelConfig &parallel) {
  if (parallel.dp <= 1)
    return std::nullopt;
  mlir::llmc::ShardPassOptions shard;
  shard.dp = parallel.dp;
  shard.zero = parallel.zero;
  shard.bucketMb = parallel.bucketMb;
  return shard;
}
/// llmc-sparsify's options; none for a dense run.
std::optional<mlir::llmc::SparsifyPassOptions>
sparsifyOptions(const ::llmc::SparsityConfig &sparsity) {
  if (!sparsity.enabled)
    return std::nullopt;
  mlir::llmc::SparsifyPassOptions options;
  options.pattern = sparsity.pattern;
  options.params.assign(sparsity.params.begin(), sparsity.params.end());
  return options;
}

/// llmc-tensor-parallel's options; none without tensor parallelism.
std::optional<mlir::llmc::TensorParallelPassOptions>
tensorParallelOptions(const ::llmc::TrainingStepOptions &training) {
  if (training.parallel.tp <= 1)
    return std::nullopt;
  mlir::llmc::TensorParallelPassOptions options;
  options.tp = training.parallel.tp;
  options.rank = training.tpRank;
  options.sp = training.parallel.sp;
  return options;
}

/// llmc-pipeline-parallel's options; none without pipeline parallelism.
/// The cut is the one the caller chose (`llmc run` chooses it once, for
/// every program it compiles) or else the balanced cut of the whole model,
/// taken before llmc-tensor-parallel splits its parameters.
std::optional<mlir::llmc::PipelineParallelPassOptions>
pipelineParallelOptions(const ::llmc::TrainingStepOptions &training,
                        mlir::ModuleOp module) {
  if (training.parallel.pp <= 1)
    return std::nullopt;
  mlir::llmc::PipelineParallelPassOptions options;
  options.pp = training.parallel.pp;
  options.stage = training.ppStage;
  std::vector<int64_t> firstBlocks = training.ppStageBlocks;
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (firstBlocks.empty() && forward) {
    mlir::llmc::PipelineCosts costs = mlir::llmc::pipelineCostsOf(forward);
    // Too few blocks: the pass says so.
    if (static_cast<int64_t>(costs.blocks.size()) >= training.parallel.pp)
      firstBlocks =
          mlir::llmc::balancePipeline(costs, training.parallel.pp).firstBlocks;
  }
  options.stageBlocks.assign(firstBlocks.begin(), firstBlocks.end());
  return options;
}
} // namespace

mlir::llmc::TrainingPipelineOptions
training::trainingPipelineOptions(const TrainingStepOptions &training,
                                  mlir::ModuleOp module) {
  using namespace ::llmc;
  mlir::llmc::TrainingPipelineOptions pipeline;
  mlir::llmc::OptimizerPassOptions &options = pipeline.optimizer;
  const OptimizerConfig &optimizer = training.optimizer;
  options.optimizer =
      optimizer.kind == OptimizerConfig::Kind::AdamW ? "adamw" : "sgd";
  options.beta1 = optimizer.beta1;
  options.beta2 = optimizer.beta2;
  options.epsilon = optimizer.epsilon;
  options.weightDecay = optimizer.weightDecay;
  options.momentum = optimizer.momentum;
  options.nesterov = optimizer.nesterov;
  options.maxGradNorm = optimizer.maxGradNorm;
  options.decayNormsAndBiases = optimizer.decayNormsAndBiases;

  const PrecisionConfig &precision = training.precision;
  pipeline.amp = ampOptions(precision);
  // fp16 needs dynamic loss scaling; bf16 has f32's exponent range.
  if (precision.kind == PrecisionConfig::Kind::FP16) {
    const LossScaleConfig &lossScale = training.lossScale;
    mlir::llmc::LossScalingPassOptions &scaling =
        pipeline.lossScaling.emplace();
    scaling.initialScalePower = lossScale.initialScalePower;
    scaling.window = lossScale.window;
    scaling.hysteresis = lossScale.hysteresis;
    scaling.minScale = lossScale.minScale;
    scaling.factor = lossScale.factor;
    scaling.consecutiveHysteresis = lossScale.consecutiveHysteresis;
  }

  pipeline.shard = shardOptions(training.parallel);
  pipeline.sparsify = sparsifyOptions(training.sparsity);
  pipeline.tensorParallel = tensorParallelOptions(training);
  pipeline.pipelineParallel = pipelineParallelOptions(training, module);

  const RematConfig &remat = training.remat;
  if (remat.policy != RematConfig::Policy::None) {
    mlir::llmc::RematPassOptions &rematOptions = pipeline.remat.emplace();
    rematOptions.policy = stringifyRematPolicy(remat.policy).str();
    rematOptions.budgetBytes = remat.budgetBytes;
  }
  pipeline.forCuda = training.forCuda;
  return pipeline;
}

::llmc::ForwardPipelineOptions
training::forwardPipelineOptions(const TrainingStepOptions &training,
                                 mlir::ModuleOp module) {
  ::llmc::ForwardPipelineOptions options;
  options.amp = ampOptions(training.precision);
  // Only ZeRO-3 changes the forward (its parameters are blocks).
  if (training.parallel.zero == 3)
    options.shard = shardOptions(training.parallel);
  options.sparsify = sparsifyOptions(training.sparsity);
  options.tensorParallel = tensorParallelOptions(training);
  options.pipelineParallel = pipelineParallelOptions(training, module);
  return options;
}

llvm::Expected<::llmc::TrainingStepPrograms>
training::compileTrainingStep(mlir::ModuleOp module,
                              const TrainingStepOptions &training) {
  return ::llmc::compileTrainingStep(module,
                                     trainingPipelineOptions(training, module));
}

llvm::Expected<::llmc::kir::Program>
training::compileForward(mlir::ModuleOp module,
                         const TrainingStepOptions &training) {
  return ::llmc::compileForward(module,
                                forwardPipelineOptions(training, module));
}

llvm::Expected<OwningOpRef<ModuleOp>>
training::ModelSource::build(int64_t seqLen, bool withDropout, int64_t batch) {
  if (config.modelMlirPath.empty()) {
    ModelConfig model = config.model;
    if (!withDropout)
      model.dropout = 0;
    return buildForwardModule(context, model,
                              {batch ? batch : config.microBatchSize, seqLen});
  }
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      openInputFile(config.modelMlirPath, &error);
  if (!buffer)
    return llvm::createStringError("cannot read '" + config.modelMlirPath +
                                   "': " + error);
  sourceMgr->AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseModuleSource(sourceMgr, &context);
  if (!module)
    return llvm::createStringError(config.modelMlirPath +
                                   ": cannot parse the model");
  PassManager pm(&context);
  pm.addPass(createVerifyLegalityPass());
  if (failed(pm.run(*module)))
    return llvm::createStringError(config.modelMlirPath +
                                   ": not a valid llmc model");
  ModelInfo info = getModelInfo(*module);
  llvm::ArrayRef<int64_t> shape = info.tokens.getShape();
  if (shape.size() != 2 || shape[0] != config.microBatchSize ||
      shape[1] != seqLen)
    return llvm::createStringError(llvm::formatv(
        "{0}: @forward takes tokens [{1}], the config trains [{2}, {3}] "
        "(micro_batch_size, seq_len)",
        config.modelMlirPath, llvm::make_range(shape.begin(), shape.end()),
        config.microBatchSize, seqLen));
  return module;
}

void training::registerDialects(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<LlmcDialect, func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
}

llvm::Expected<std::vector<std::string>>
training::cutPipeline(ModuleOp module, const TrainingConfig &config,
                      TrainingStepOptions &training, llvm::raw_ostream &out) {
  const int64_t ppSize = config.parallel.pp;
  std::vector<std::string> ppTiedParams;
  // The cut, once for every program of the run (its FLOPs per block
  // depend on the sequence length): the one `llmc plan` counts.
  auto whole = module.lookupSymbol<func::FuncOp>("forward");
  mlir::llmc::PipelineCosts costs = mlir::llmc::pipelineCostsOf(whole);
  int64_t blocks = static_cast<int64_t>(costs.blocks.size());
  if (blocks < ppSize)
    return llvm::createStringError(
        llvm::formatv(
            "--pp {0} is more than the {1} transformer blocks (parameters "
            "h.<i>.*) of {2}: every pipeline stage needs at least one",
            ppSize, blocks,
            config.modelMlirPath.empty() ? "the model" : config.modelMlirPath)
            .str());
  mlir::llmc::PipelineCut cut = mlir::llmc::balancePipeline(costs, ppSize);
  training.ppStageBlocks = cut.firstBlocks;
  out << "llmc run: pipeline cut by FLOPs per token: "
      << mlir::llmc::describePipelineCut(cut) << "\n";
  OwningOpRef<ModuleOp> last = module.clone();
  PassManager pm(module.getContext());
  mlir::llmc::PipelineParallelPassOptions lastStage;
  lastStage.pp = ppSize;
  lastStage.stage = ppSize - 1;
  lastStage.stageBlocks.assign(cut.firstBlocks.begin(), cut.firstBlocks.end());
  pm.addPass(mlir::llmc::createPipelineParallelPass(lastStage));
  if (failed(pm.run(*last)))
    return llvm::createStringError(
        "cutting the model into pipeline stages failed (see the "
        "diagnostics above)");
  auto forward = last.get().lookupSymbol<func::FuncOp>("forward");
  for (unsigned i = 0; i < forward.getNumArguments(); ++i)
    if (forward.getArgAttr(i, "llmc.pp_tied"))
      ppTiedParams.push_back(
          forward.getArgAttrOfType<StringAttr>(i, "llmc.param").str());
  return ppTiedParams;
}

std::map<std::string, ::llmc::runtime::TpShard>
training::tpShardsOf(ModuleOp module) {
  std::map<std::string, ::llmc::runtime::TpShard> tpShards;
  if (auto forward = module.lookupSymbol<func::FuncOp>("forward"))
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      auto name = forward.getArgAttrOfType<StringAttr>(i, "llmc.param");
      auto shard = forward.getArgAttrOfType<DictionaryAttr>(i, "llmc.tp_shard");
      if (!name || !shard)
        continue;
      auto field = [&](StringRef key, int64_t absent) {
        auto value = shard.getAs<IntegerAttr>(key);
        return value ? value.getInt() : absent;
      };
      tpShards[name.str()] = {field("dim", 1), field("groups", 1),
                              field("size", 1), field("pad", 0)};
    }
  return tpShards;
}
