// llmc plan against published figures (GPT-2 sizes, the 104B wide GPT's
// 1872 GB of model states, OPT-175B at 180B tokens, ZeRO's and Korthikanti
// et al.'s memory figures, Chinchilla's 20 tokens per parameter), and its
// configs, data file, layout checks, --fit search and report.
#include "training/Plan/Goodput.h"
#include "training/Plan/Report.h"

#include "frontend/GptBuilder.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>

using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelConfig gptConfig(llvm::StringRef name, int64_t layers, int64_t heads,
                      int64_t embd, int64_t seq, int64_t vocab) {
  ModelConfig c;
  c.name = name.str();
  c.nLayer = layers;
  c.nHead = heads;
  c.nEmbd = embd;
  c.seqLen = seq;
  c.vocabSize = vocab;
  c.ffnHidden = getDefaultFfnHidden(embd, c.activation);
  return c;
}

PlanModel analyze(MLIRContext &context, const ModelConfig &config) {
  llvm::Expected<PlanModel> model = analyzeModel(context, config);
  if (!model) {
    ADD_FAILURE() << llvm::toString(model.takeError());
    return {};
  }
  return std::move(*model);
}

PlanModel preset(MLIRContext &context, llvm::StringRef name) {
  return analyze(context, *getModelPreset(name));
}

std::string errorText(llvm::Error error) {
  EXPECT_TRUE(static_cast<bool>(error)) << "expected an error";
  return llvm::toString(std::move(error));
}

template <typename T> std::string errorText(llvm::Expected<T> value) {
  EXPECT_FALSE(static_cast<bool>(value)) << "expected an error";
  return value ? std::string() : llvm::toString(value.takeError());
}

HardwareTable loadExampleHardware() {
  llvm::Expected<HardwareTable> table =
      loadHardwareFile(LLMC_SOURCE_DIR "/examples/hardware.yaml");
  if (!table) {
    ADD_FAILURE() << llvm::toString(table.takeError());
    return {};
  }
  return std::move(*table);
}

ClusterConfig cluster(llvm::StringRef gpu, int64_t gpusPerNode, int64_t nodes) {
  ClusterConfig c;
  c.gpu = gpu.str();
  c.gpusPerNode = gpusPerNode;
  c.nodes = nodes;
  return c;
}

//===----------------------------------------------------------------------===//
// Published figures
//===----------------------------------------------------------------------===//

// GPT-2 small/medium/large/XL: 124M, 355M, 774M and 1558M parameters (the
// sizes of OpenAI's released checkpoints), counted from the IR.
TEST(PlanPublished, Gpt2FamilySizes) {
  MLIRContext context;
  struct Case {
    llvm::StringRef preset;
    int64_t exact;
    double published;
  } cases[] = {{"gpt2", 124439808, 124e6},
               {"gpt2-medium", 354823168, 355e6},
               {"gpt2-large", 774030080, 774e6},
               {"gpt2-xl", 1557611200, 1558e6}};
  for (const Case &c : cases) {
    PlanModel model = preset(context, c.preset);
    EXPECT_EQ(model.numParameters, c.exact) << c.preset.str();
    EXPECT_NEAR(model.numParameters, c.published, 0.5e6) << c.preset.str();
    EXPECT_EQ(model.numBlocks, model.config.nLayer);
    // Blocks and the rest account for every parameter.
    EXPECT_EQ(model.numBlocks * model.blockParameters() + model.firstSplit +
                  model.firstReplicated + model.lastSplit +
                  model.lastReplicated,
              model.numParameters);
  }
}

// The 104B-parameter wide GPT (h = 16384, 32 layers, vocab 50257, seq 2048):
// mixed precision with fp32 master weights, fp32 gradients and AdamW needs
// 4 + 2 + 8 + 4 = 18 bytes per parameter, 1872 GB of model states.
TEST(PlanPublished, WideGpt104BModelStates) {
  MLIRContext context;
  PlanModel model =
      analyze(context, gptConfig("gpt-104b", 32, 128, 16384, 2048, 50257));
  EXPECT_NEAR(model.numParameters / 104e9, 1.0, 1e-3);
  StateBytes perParameter = getStateBytes(Precision::Bf16, Optimizer::AdamW,
                                          /*fp32Gradients=*/true);
  EXPECT_EQ(perParameter.master, 4);
  EXPECT_EQ(perParameter.weights, 2);
  EXPECT_EQ(perParameter.optimizer, 8);
  EXPECT_EQ(perParameter.gradients, 4);
  EXPECT_EQ(perParameter.total(), 18);
  StateBytes states = shardStates(perParameter, model.numParameters, 0, 1);
  EXPECT_NEAR(states.total() / 1872e9, 1.0, 1e-3);

  // The same through the whole plan of one device.
  TrainingFacts train;
  train.seqLen = 2048;
  Layout layout;
  Estimate est = estimate(model, train, cluster("", 1, 1), nullptr, layout);
  EXPECT_NEAR(est.memory.states.total() / 1872e9, 1.0, 1e-3);
}

// OPT-175B (Zhang et al. 2022): 175B parameters trained on 180B tokens on
// 992 A100 80GB at 147 TFLOP/s per GPU.
TEST(PlanPublished, Opt175BAt180BTokens) {
  MLIRContext context;
  ModelConfig config = gptConfig("opt-175b", 96, 96, 12288, 2048, 50272);
  config.activation = Activation::Relu;
  PlanModel model = analyze(context, config);
  EXPECT_NEAR(model.numParameters / 175e9, 1.0, 5e-3);

  TrainingFacts train;
  train.tokens = 180e9;
  train.globalBatch = 992;
  train.microBatch = 1;
  ClusterConfig c = cluster("a100-80gb", 8, 124);
  c.tensorParallel = 8;
  c.zero = 3;
  c.mfu = 147.0 / 312.0;
  HardwareTable hardware = loadExampleHardware();
  const GpuSpec *gpu = hardware.find("a100-80gb");
  ASSERT_TRUE(gpu);
  Layout layout = getConfiguredLayout(train, c);
  ASSERT_FALSE(static_cast<bool>(validateLayout(model, train, c, layout)));
  Estimate est = estimate(model, train, c, gpu, layout);
  EXPECT_EQ(est.tokens, 180e9);
  // 6 P D, plus 2.7% for attention's 12 L h s per token.
  EXPECT_NEAR(est.trainingFlops / (6 * 175e9 * 180e9), 1.027, 0.01);
  // At 147 TFLOP/s per GPU the compute alone takes the FLOPs' time.
  double seconds = est.trainingFlops / (992 * 147e12);
  EXPECT_NEAR(est.step.compute * est.steps / seconds, 1.0, 1e-3);
  EXPECT_NEAR(seconds / 86400, 15.4, 0.1); // days of pure compute
  // ZeRO-3 over 124 ranks and 8-way tensor parallelism fit in 80 GB.
  EXPECT_LT(est.memory.total(), gpu->memoryGiB * kGiB);
}

// ZeRO (Rajbhandari et al. 2020), figure 1: a 7.5B model on 64 data-parallel
// GPUs with mixed-precision Adam (2 + 2 + 12 bytes per parameter) needs
// 120 GB per GPU, 31.4 GB with ZeRO-1, 16.6 GB with ZeRO-2, 1.9 GB with
// ZeRO-3. llmc's ZeRO-1 (as DeepSpeed's) also keeps the rank's averaged
// gradient partition next to the full gradients it accumulates
// micro-batches in: 2/64 bytes per parameter more, 31.64 GB.
TEST(PlanPublished, ZeroPaperFigure1) {
  StateBytes perParameter = getStateBytes(Precision::Fp16, Optimizer::AdamW,
                                          /*fp32Gradients=*/false);
  EXPECT_EQ(perParameter.total(), 16);
  double expected[] = {120, 31.64, 16.6, 1.9};
  for (int zero = 0; zero <= 3; ++zero)
    EXPECT_NEAR(shardStates(perParameter, 7.5e9, zero, 64).total() / 1e9,
                expected[zero], 0.05)
        << "ZeRO-" << zero;
}

// Korthikanti et al. 2022, sec. 4: a block keeps sbh(34 + 5as/h) bytes of
// 16-bit activations (with dropout, a 4h GELU MLP), 34sbh with their
// selective recompute (the planner's `attention`) and 2sbh with full
// recompute. Tensor parallelism over t ranks keeps sbh(10 + 24/t + 5as/ht)
// (their eq. 2); sequence parallelism splits the norms, dropout masks and
// residual stream too: their sbh(34 + 5as/h)/t where the backward gathers
// the column-parallel inputs again, llmc's sbh(4 + 30/t + 5as/ht) as it
// keeps the gathered inputs (2sbh each of QKV's and the MLP's). For
// GPT-3 175B, 5as/h = 80, so recomputing the attention core saves 70%.
TEST(PlanPublished, KorthikantiActivations) {
  ModelConfig c = gptConfig("gpt3-175b", 96, 96, 12288, 2048, 51200);
  c.dropout = 0.1;
  int64_t s = 2048, b = 1;
  double sbh = double(s) * b * c.nEmbd;
  double ratio = 5.0 * c.nHead * s / c.nEmbd;
  EXPECT_EQ(ratio, 80);
  BlockActivations act = getBlockActivations(c, b, s, 1, Precision::Bf16);
  EXPECT_DOUBLE_EQ(act.stored(Remat::None), sbh * (34 + ratio));
  EXPECT_DOUBLE_EQ(act.stored(Remat::Attention), sbh * 34);
  EXPECT_DOUBLE_EQ(act.stored(Remat::Full), sbh * 2);
  EXPECT_NEAR(1 - act.stored(Remat::Attention) / act.stored(Remat::None), 0.70,
              0.005);
  // llmc-remat's selective keeps the matmul and attention outputs and the
  // block input: 2 bytes x (7sbh + 4sbh) for a 4h GELU MLP.
  EXPECT_DOUBLE_EQ(act.stored(Remat::Selective), sbh * 22);
  BlockActivations tp8 = getBlockActivations(c, b, s, 8, Precision::Bf16);
  EXPECT_DOUBLE_EQ(tp8.stored(Remat::None), sbh * (10 + 24.0 / 8 + ratio / 8));
  EXPECT_DOUBLE_EQ(tp8.stored(Remat::Attention), sbh * (10 + 24.0 / 8));
  // Full recompute keeps the block input, whole under tp, a slice with sp.
  EXPECT_DOUBLE_EQ(tp8.stored(Remat::Full), sbh * 2);
  BlockActivations sp8 =
      getBlockActivations(c, b, s, 8, Precision::Bf16, /*sp=*/true);
  EXPECT_DOUBLE_EQ(sp8.stored(Remat::None), sbh * (4 + 30.0 / 8 + ratio / 8));
  EXPECT_DOUBLE_EQ(sp8.stored(Remat::Full), sbh * 2 / 8);
  // tp=1: sequence parallelism changes nothing.
  EXPECT_DOUBLE_EQ(
      getBlockActivations(c, b, s, 1, Precision::Bf16, true).stored(Remat::None),
      act.stored(Remat::None));
  // fp32 activations are twice the 16-bit ones, masks aside.
  BlockActivations fp32 = getBlockActivations(c, b, s, 1, Precision::Fp32);
  EXPECT_GT(fp32.stored(Remat::Attention), 1.9 * sbh * 34);
}

// Chinchilla (Hoffmann et al. 2022): 70B parameters, 1.4T tokens.
TEST(PlanPublished, ChinchillaTokens) {
  EXPECT_EQ(chinchillaTokens(70e9), 1.4e12);
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  Estimate est =
      estimate(model, TrainingFacts(), cluster("", 1, 1), nullptr, Layout());
  EXPECT_TRUE(est.tokensFromChinchilla);
  EXPECT_EQ(est.tokens, 20.0 * model.numParameters);
}

TEST(PlanPublished, BytesPerParameter) {
  EXPECT_EQ(getStateBytes(Precision::Fp32, Optimizer::AdamW, true).total(), 16);
  EXPECT_EQ(getStateBytes(Precision::Tf32, Optimizer::AdamW, true).total(), 16);
  EXPECT_EQ(getStateBytes(Precision::Bf16, Optimizer::AdamW, true).total(), 18);
  EXPECT_EQ(getStateBytes(Precision::Bf16, Optimizer::AdamW, false).total(),
            16);
  // 8-bit Adam: one byte per moment plus a block-wise fp32 scale.
  EXPECT_NEAR(
      getStateBytes(Precision::Bf16, Optimizer::AdamW8bit, true).total(), 12,
      0.01);
  EXPECT_EQ(getStateBytes(Precision::Fp32, Optimizer::Sgd, true).total(), 12);
  // llmc run's SGD with momentum 0 keeps no buffer.
  EXPECT_EQ(getStateBytes(Precision::Fp32, Optimizer::Sgd, true, false).total(),
            8);
}

//===----------------------------------------------------------------------===//
// Checkpoints and goodput
//===----------------------------------------------------------------------===//

// A checkpoint holds what llmc run saves (runtime/Train/Trainer.cpp, checked
// against its files): the f32 weights (mixed precision's masters) and the
// optimizer states; not the gradients, the 16-bit copies or ZeRO's fp32
// partitions. 175B in fp16 with AdamW: 4 + 8 = 12 bytes per parameter,
// 2.1 TB. Under tensor or pipeline parallelism one rank writes it all
// (shares, stages and ZeRO blocks gathered); ZeRO over dp alone writes a
// file per rank.
TEST(PlanGoodput, CheckpointSize) {
  StateBytes mixed = getStateBytes(Precision::Fp16, Optimizer::AdamW, false);
  Layout layout;
  layout.tp = 8;
  layout.dp = 124;
  layout.zero = 3;
  CheckpointSize size = checkpointSize(mixed, 175e9, layout);
  EXPECT_EQ(size.bytesPerParameter, 12);
  EXPECT_DOUBLE_EQ(size.bytes, 175e9 * 12);
  EXPECT_DOUBLE_EQ(size.perRankBytes, 175e9 * 12);
  EXPECT_EQ(size.writers, 1);
  layout.zero = 0;
  size = checkpointSize(mixed, 175e9, layout);
  EXPECT_DOUBLE_EQ(size.perRankBytes, 175e9 * 12);
  EXPECT_EQ(size.writers, 1);
  // ZeRO over dp alone: ZeRO-3 a file of 12/dp per rank; ZeRO-1/2 the
  // rank files hold the optimizer states' blocks and rank 0 also writes
  // the full masters (the tiny model's bf16 ZeRO-1 over 2 ranks: files of
  // 4.07, 4.07 and 4.08 bytes per parameter).
  layout.tp = 1;
  layout.zero = 3;
  size = checkpointSize(mixed, 175e9, layout);
  EXPECT_DOUBLE_EQ(size.perRankBytes, 175e9 * 12 / 124);
  EXPECT_EQ(size.writers, 124);
  layout.zero = 1;
  size = checkpointSize(mixed, 175e9, layout);
  EXPECT_DOUBLE_EQ(size.perRankBytes, 175e9 * (4 + 8.0 / 124));
  // fp32: the weights and the moments, ZeRO or not (llmc-shard's fp32
  // partitions are cut again from the weights on resume).
  StateBytes fp32 = getStateBytes(Precision::Fp32, Optimizer::AdamW, true);
  Layout one;
  EXPECT_EQ(checkpointSize(fp32, 1, one).bytesPerParameter, 12);
  one.dp = 2;
  one.zero = 2;
  EXPECT_EQ(checkpointSize(fp32, 1, one).bytesPerParameter, 12);
  EXPECT_DOUBLE_EQ(checkpointSize(fp32, 1, one).perRankBytes, 4 + 8.0 / 2);
  // SGD with momentum: the weights and one state.
  StateBytes sgd = getStateBytes(Precision::Fp32, Optimizer::Sgd, true);
  EXPECT_EQ(checkpointSize(sgd, 1, Layout()).bytesPerParameter, 8);
}

TEST(PlanGoodput, CheckpointCount) {
  EXPECT_EQ(checkpointCount(1000, 100), 10);
  EXPECT_EQ(checkpointCount(1001, 100), 11); // and one at the end
  EXPECT_EQ(checkpointCount(50, 100), 1);
  EXPECT_EQ(checkpointCount(1000, 0), 1); // only at the end
  EXPECT_EQ(checkpointCount(0, 100), 0);
}

// Each term of the goodput model, by hand: 10,000 steps of 2 s, a 1 TB
// checkpoint every 500 steps at 10 GB/s write and 20 GB/s read, 4
// restarts of 5 minutes.
TEST(PlanGoodput, Terms) {
  GoodputInputs in;
  in.steps = 10000;
  in.stepSeconds = 2;
  in.checkpointBytes = 1e12;
  in.checkpointInterval = 500;
  in.writeBytesPerSecond = 10e9;
  in.readBytesPerSecond = 20e9;
  in.restarts = 4;
  in.relaunchSeconds = 300;
  Goodput g = computeGoodput(in);
  EXPECT_DOUBLE_EQ(g.trainingSeconds, 20000);
  EXPECT_EQ(g.checkpoints, 20);
  EXPECT_DOUBLE_EQ(g.checkpointWriteSeconds, 100);
  EXPECT_DOUBLE_EQ(g.checkpointSeconds, 2000);
  EXPECT_DOUBLE_EQ(g.relaunchSeconds, 1200);
  EXPECT_DOUBLE_EQ(g.reloadSeconds, 4 * 50);
  // Half an interval of work redone per failure: 4 x 250 x 2 s.
  EXPECT_DOUBLE_EQ(g.lostWorkSeconds, 2000);
  EXPECT_DOUBLE_EQ(g.overheadSeconds(), 2000 + 1200 + 200 + 2000);
  EXPECT_DOUBLE_EQ(g.wallSeconds(), 25400);
  EXPECT_DOUBLE_EQ(g.goodput(), 20000.0 / 25400);

  // Reading at the write bandwidth when no read bandwidth is given.
  in.readBytesPerSecond = 0;
  EXPECT_DOUBLE_EQ(computeGoodput(in).reloadSeconds, 4 * 100);
  // Without intermediate checkpoints a failure loses half the run.
  in.checkpointInterval = 0;
  Goodput none = computeGoodput(in);
  EXPECT_EQ(none.checkpoints, 1);
  EXPECT_DOUBLE_EQ(none.lostWorkSeconds, 4 * 5000 * 2);
  // No restarts, no checkpoint cost: goodput is what the writes leave.
  GoodputInputs clean;
  clean.steps = 100;
  clean.stepSeconds = 1;
  Goodput perfect = computeGoodput(clean);
  EXPECT_DOUBLE_EQ(perfect.goodput(), 1);
}

// An observed run: the implied MFU is model FLOPs over what the GPUs could
// have done in the observed time; the unexplained gap is what the
// overheads leave, negative when they explain more than the gap.
TEST(PlanGoodput, Observed) {
  // 1e21 FLOPs in 1 day on 8 GPUs of 312 TFLOP/s: 1e21 / 2.156e20.
  ObservedRun run =
      compareObserved(true, 86400, 1e21, 8, 312e12, 50000, 20000);
  EXPECT_NEAR(run.impliedMfu, 1e21 / (86400.0 * 8 * 312e12), 1e-12);
  EXPECT_DOUBLE_EQ(run.gap, 36400);
  EXPECT_DOUBLE_EQ(run.explained, 20000);
  EXPECT_DOUBLE_EQ(run.unexplained, 16400);
  ObservedRun over = compareObserved(true, 86400, 1e21, 8, 312e12, 50000,
                                     40000);
  EXPECT_DOUBLE_EQ(over.unexplained, -3600);
  // A step time: no wall-clock, nothing to explain.
  ObservedRun step = compareObserved(false, 2, 1e15, 8, 312e12, 1.5, 0);
  EXPECT_NEAR(step.impliedMfu, 1e15 / (2 * 8 * 312e12), 1e-12);
  EXPECT_DOUBLE_EQ(step.gap, 0.5);
  EXPECT_EQ(step.unexplained, 0);
}

// OPT-175B's observed run: 300B tokens on 992 A100s in 34 days implies
// 35.5% MFU (110.8 TFLOP/s per GPU against the paper's 147).
TEST(PlanGoodput, Opt175BImpliedMfu) {
  MLIRContext context;
  ModelConfig config = gptConfig("opt-175b", 96, 96, 12288, 2048, 50272);
  config.activation = Activation::Relu;
  PlanModel model = analyze(context, config);
  TrainingFacts train;
  train.tokens = 300e9;
  train.globalBatch = 992;
  train.microBatch = 8;
  ClusterConfig c = cluster("a100-80gb", 8, 124);
  c.tensorParallel = 8;
  c.zero = 3;
  Estimate est = estimate(model, train, c, nullptr, getConfiguredLayout(train, c));
  ObservedRun run = compareObserved(true, 34 * 86400.0, est.trainingFlops, 992,
                                    312e12, 0, 0);
  EXPECT_NEAR(run.impliedMfu, 0.355, 0.001);
  EXPECT_NEAR(run.impliedMfu * 312, 110.8, 0.1);
}

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

TEST(PlanLayout, TensorParallelSplitsMatrices) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  // Per block: 12h^2 of matrices and 3h + 4h of column-parallel biases are
  // split; 4 norm vectors and 2 row-parallel biases of h are replicated.
  int64_t h = 768;
  EXPECT_EQ(model.blockSplit, 12 * h * h + 7 * h);
  EXPECT_EQ(model.blockReplicated, 6 * h);
  // The token embedding is split by vocabulary rows (the tied classifier
  // with it), the position embedding whole, as llmc-tensor-parallel holds
  // them.
  EXPECT_EQ(model.firstSplit, 50257 * h);
  EXPECT_EQ(model.firstReplicated, 1024 * h);
  EXPECT_EQ(model.lastReplicated, 2 * h);
  EXPECT_EQ(model.tiedEmbedding, 50257 * h);
}

TEST(PlanLayout, TensorParallelPadsTheVocabulary) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  TrainingFacts train;
  int64_t h = 768;
  auto parameters = [&](int64_t tp) {
    Layout layout;
    layout.tp = tp;
    return estimate(model, train, cluster("", tp, 1), nullptr, layout)
        .memory.parameters;
  };
  // 50257 ids over 2 ranks: 25129 rows each (one of padding on rank 1).
  double blocks = model.numBlocks * (model.blockSplit / 2.0 +
                                     model.blockReplicated);
  EXPECT_DOUBLE_EQ(parameters(2),
                   blocks + 25129.0 * h + 1024.0 * h + 2.0 * h);
}

TEST(PlanLayout, PipelineFirstStageHoldsMicroBatchesInFlight) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  TrainingFacts train;
  Layout layout;
  layout.pp = 4;
  layout.dp = 2;
  Estimate est = estimate(model, train, cluster("", 8, 1), nullptr, layout);
  EXPECT_EQ(est.microBatchesPerStep, 256);
  // 1F1B: the first stage holds pp micro-batches of its 3 blocks.
  EXPECT_EQ(est.memory.stage, 0);
  EXPECT_EQ(est.memory.microBatchesInFlight, 4);
  EXPECT_DOUBLE_EQ(est.memory.activations,
                   3 * 4 * est.block.stored(Remat::None));
  // A tied classifier's embedding is also on the last stage.
  Layout one;
  Estimate single = estimate(model, train, cluster("", 1, 1), nullptr, one);
  EXPECT_EQ(single.memory.parameters, model.numParameters);
}

TEST(PlanLayout, InvalidLayoutsNameTheirOrigin) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2"); // 12 heads, 12 layers
  ClusterConfig eight = cluster("", 8, 1);
  TrainingFacts train;
  Layout layout = getConfiguredLayout(train, eight);
  EXPECT_FALSE(static_cast<bool>(validateLayout(model, train, eight, layout)));

  ClusterConfig tp = eight;
  tp.tensorParallel = 5;
  tp.origins["parallel.tp"] = "train.yaml:3:7";
  EXPECT_EQ(errorText(validateLayout(model, train, tp,
                                     getConfiguredLayout(train, tp))),
            "train.yaml:3:7: error: parallel.tp: 5 does not divide "
            "n_head (12) of model 'gpt2': each rank needs whole heads");
  tp.origins.clear();
  EXPECT_THAT(errorText(validateLayout(model, train, tp,
                                       getConfiguredLayout(train, tp))),
              StartsWith("--tp: 5 does not divide n_head (12)"));

  ClusterConfig pp = eight;
  pp.pipelineParallel = 16;
  pp.gpusPerNode = 16;
  EXPECT_THAT(errorText(validateLayout(model, train, pp,
                                       getConfiguredLayout(train, pp))),
              StartsWith("--pp: 16 is more than n_layer (12)"));

  ClusterConfig three = eight;
  three.tensorParallel = 3;
  EXPECT_THAT(errorText(validateLayout(model, train, three,
                                       getConfiguredLayout(train, three))),
              HasSubstr("= 3 does not divide the cluster's 8 GPUs"));

  // ZeRO-2/3 with pp is a layout llmc runs (each stage's dp group
  // shards its own state), not an error.
  ClusterConfig zero = eight;
  zero.zero = 2;
  zero.pipelineParallel = 2;
  llvm::Error zeroWithPp =
      validateLayout(model, train, zero, getConfiguredLayout(train, zero));
  EXPECT_FALSE(static_cast<bool>(zeroWithPp))
      << llvm::toString(std::move(zeroWithPp));

  TrainingFacts batch = train;
  batch.microBatch = 3;
  EXPECT_THAT(errorText(validateLayout(model, batch, eight,
                                       getConfiguredLayout(batch, eight))),
              HasSubstr("global batch 512 is not a multiple of micro-batch x "
                        "data-parallel size = 3 x 8 = 24"));

  TrainingFacts seq = train;
  seq.seqLen = 4096;
  EXPECT_THAT(errorText(validateLayout(model, seq, eight,
                                       getConfiguredLayout(seq, eight))),
              HasSubstr("4096 is longer than the model's seq_len 1024"));
}

TEST(PlanLayout, ZeroShardsStates) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  TrainingFacts train;
  double previous = INFINITY;
  for (int zero = 0; zero <= 3; ++zero) {
    Layout layout;
    layout.dp = 8;
    layout.zero = zero;
    Estimate est = estimate(model, train, cluster("", 8, 1), nullptr, layout);
    EXPECT_LT(est.memory.states.total(), previous);
    previous = est.memory.states.total();
  }
  EXPECT_NEAR(previous, 18.0 * model.numParameters / 8, 1);
}

// Bytes per step and device on each axis, by hand for GPT-2 124M in bf16
// (2-byte activations, fp32 gradients and 2-byte weights), seq 1024,
// micro-batch 1, global batch 512; B x T x h = 786432 elements.
TEST(PlanLayout, TrafficPerAxis) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  TrainingFacts train;
  const double bth = 1024.0 * 768;
  auto traffic = [&](Layout layout, int64_t gpus) {
    return estimate(model, train, cluster("", gpus, 1), nullptr, layout)
        .traffic;
  };
  // tp=4 x dp=2: 256 micro-batches per pipeline, 12 blocks of 4
  // all-reduces, the embedding's and the classifier's input gradient (2
  // bytes an element) and the loss's 3 f32 sums over the 1024 tokens,
  // each sending 2 x 3/4 of its elements.
  Layout tp;
  tp.tp = 4;
  tp.dp = 2;
  StepTraffic t = traffic(tp, 8);
  EXPECT_DOUBLE_EQ(t.tp, 256 * 1.5 * ((12 * 4 + 2) * 2 * bth + 3 * 4 * 1024));
  EXPECT_EQ(t.pp, 0);
  EXPECT_EQ(t.ppTied, 0);
  // With sequence parallelism each backward also sums the f32 gradients
  // of the parameters used on the sequence slice: per block 2 layer norms
  // (weight, bias) and 2 row-parallel biases, the final norm, and the
  // 1024 positions' rows of wpe.
  Layout sp = tp;
  sp.sp = true;
  t = traffic(sp, 8);
  EXPECT_DOUBLE_EQ(t.tp, 256 * 1.5 *
                             ((12 * 4 + 2) * 2 * bth + 3 * 4 * 1024 +
                              4 * (12 * 6 * 768 + 2 * 768 + 1024 * 768)));
  // pp=4 x dp=2: a boundary carries each micro-batch's activation forward
  // and its gradient back; no tp. The slowest stage is the last (the
  // classifier), which sums the tied wte's f32 gradient with the first
  // stage's; ZeRO-1 sums only the dp block.
  Layout pp;
  pp.pp = 4;
  pp.dp = 2;
  t = traffic(pp, 8);
  EXPECT_DOUBLE_EQ(t.pp, 2 * 256 * 2 * bth);
  EXPECT_EQ(t.tp, 0);
  EXPECT_DOUBLE_EQ(t.ppTied, 50257.0 * 768 * 4);
  pp.zero = 1;
  EXPECT_DOUBLE_EQ(traffic(pp, 8).ppTied, 50257.0 * 768 * 4 / 2);
  // dp=8: DDP all-reduces the fp32 gradients once per step (2 x 7/8 of
  // them); ZeRO-3 reduce-scatters them every micro-batch (64 of them) and
  // gathers the 2-byte weights twice in each.
  double p = model.numParameters;
  Layout ddp;
  ddp.dp = 8;
  t = traffic(ddp, 8);
  EXPECT_DOUBLE_EQ(t.dp(), 2 * 7.0 / 8 * 4 * p);
  EXPECT_EQ(t.dpWeights, 0);
  Layout zero3 = ddp;
  zero3.zero = 3;
  t = traffic(zero3, 8);
  EXPECT_NEAR(t.dpGradients, 64 * 7.0 / 8 * 4 * p, 1e-6 * p);
  EXPECT_NEAR(t.dpWeights, 64 * 2 * 7.0 / 8 * 2 * p, 1e-6 * p);
  // The step time divides them by the link: tp within a node at NVLink's
  // one direction.
  HardwareTable hardware = loadExampleHardware();
  const GpuSpec *a100 = hardware.find("a100-80gb");
  ASSERT_NE(a100, nullptr);
  Estimate est = estimate(model, train, cluster("a100-80gb", 8, 1), a100, tp);
  EXPECT_DOUBLE_EQ(est.step.tpComm,
                   est.traffic.tp / (a100->nvlinkGBps / 2 * 1e9));
}

//===----------------------------------------------------------------------===//
// Configs and the data file
//===----------------------------------------------------------------------===//

TEST(PlanConfig, HardwareDataFile) {
  HardwareTable table = loadExampleHardware();
  for (llvm::StringRef name :
       {"v100-32gb", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200",
        "l4", "mi250x", "mi300x"})
    EXPECT_TRUE(table.find(name)) << name.str();
  const GpuSpec *a100 = table.find("A100-80GB"); // case-insensitive
  ASSERT_TRUE(a100);
  EXPECT_EQ(a100->peakFlops(Precision::Bf16), 312e12);
  EXPECT_EQ(a100->peakFlops(Precision::Tf32), 156e12);
  EXPECT_EQ(a100->peakFlops(Precision::Fp8), 0);
  EXPECT_EQ(a100->memoryGiB, 80);
  EXPECT_EQ(table.find("h100-sxm")->peakFlops(Precision::Fp8), 1979e12);
  EXPECT_EQ(table.find("v100-32gb")->peakFlops(Precision::Bf16), 0);

  EXPECT_THAT(errorText(lookupGpu(table, "b200")),
              HasSubstr("unknown GPU 'b200': add it to the hardware data "
                        "file " LLMC_SOURCE_DIR "/examples/hardware.yaml"));
}

TEST(PlanConfig, HardwareErrors) {
  EXPECT_THAT(errorText(parseHardware("x:\n  memory_gib: 80\n", "hw.yaml")),
              StartsWith("hw.yaml:1:1: error: x: missing key 'hbm_tbps'"));
  EXPECT_THAT(errorText(parseHardware("x:\n  memory_gib: 80\n  hbm_tbps: 1\n"
                                      "  nvlink_gbps: 1\n  ib_gbps: 1\n"
                                      "  tflops:\n    bf17: 3\n",
                                      "hw.yaml")),
              StartsWith("hw.yaml:7:5: error: unknown key 'bf17' (did you mean "
                         "'bf16'?)"));
  EXPECT_THAT(
      errorText(parseHardware("x:\n  memory_gib: -1\n  hbm_tbps: 1\n"
                              "  nvlink_gbps: 1\n  ib_gbps: 1\n"
                              "  tflops: {bf16: 3}\n",
                              "hw.yaml")),
      StartsWith("hw.yaml:2:15: error: memory_gib: -1 is out of range"));
  EXPECT_THAT(errorText(parseHardware("x: [1,\n", "hw.yaml")),
              StartsWith("hw.yaml:1:7: error: Could not find closing ]"));
}

TEST(PlanConfig, TrainAndClusterFiles) {
  // The training facts come from an `llmc run` config, read as llmc run
  // reads it (without its model, data and step count, which llmc plan does
  // not need).
  llvm::Expected<TrainingConfig> run = parseTrainingConfig(
      "precision: fp16\noptimizer: sgd\nmicro_batch_size: 8\nremat: "
      "selective\nmax_tokens: 300e9\nglobal_batch_size: 64\n",
      "train.yaml", "", {}, TrainingConfigUse::Plan);
  ASSERT_TRUE(static_cast<bool>(run)) << llvm::toString(run.takeError());
  llvm::Expected<TrainingFacts> facts = trainingFactsFromRun(*run);
  ASSERT_TRUE(static_cast<bool>(facts)) << llvm::toString(facts.takeError());
  TrainingFacts train = *facts;
  EXPECT_EQ(train.precision, Precision::Fp16);
  EXPECT_EQ(train.optimizer, Optimizer::Sgd);
  EXPECT_EQ(train.microBatch, 8);
  EXPECT_EQ(train.globalBatch, 64);
  EXPECT_EQ(train.remat, Remat::Selective);
  EXPECT_EQ(train.tokens, 300e9);
  EXPECT_TRUE(train.fp32Gradients);
  EXPECT_EQ(train.origins["micro_batch_size"], "train.yaml:3:19");

  // llmc run's defaults: micro-batch 4, global batch = micro-batch.
  llvm::Expected<TrainingConfig> bare = parseTrainingConfig(
      "max_steps: 10\n", "t.yaml", "", {}, TrainingConfigUse::Plan);
  ASSERT_TRUE(static_cast<bool>(bare));
  llvm::Expected<TrainingFacts> defaults = trainingFactsFromRun(*bare);
  ASSERT_TRUE(static_cast<bool>(defaults));
  EXPECT_EQ(defaults->microBatch, 4);
  EXPECT_EQ(defaults->globalBatch, 4);
  EXPECT_EQ(defaults->steps, 10);

  // The budget policy has no estimate; the layout is the cluster's.
  llvm::Expected<TrainingConfig> budget = parseTrainingConfig(
      "remat: budget\nremat_budget: 1GiB\n", "t.yaml", "", {},
      TrainingConfigUse::Plan);
  ASSERT_TRUE(static_cast<bool>(budget));
  EXPECT_THAT(errorText(trainingFactsFromRun(*budget)),
              StartsWith("t.yaml:1:8: error: remat: llmc plan has no "
                         "estimate of the budget policy"));
  EXPECT_THAT(errorText(parseTrainingConfig("tensor_parallel: 2\n", "t.yaml",
                                            "", {}, TrainingConfigUse::Plan)),
              StartsWith("t.yaml:1:1: error: 'tensor_parallel' is now "
                         "'parallel.tp'"));

  // The cluster: the config's parallel layout and its plan: section.
  llvm::Expected<TrainingConfig> mesh = parseTrainingConfig(
      "parallel: {zero: 2, tp: 2, pp: 4}\n", "c.yaml", "", {},
      TrainingConfigUse::Plan);
  ASSERT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  llvm::Expected<ClusterConfig> layout = clusterConfigFromRun(*mesh);
  ASSERT_TRUE(static_cast<bool>(layout));
  EXPECT_EQ(layout->zero, 2);
  EXPECT_EQ(layout->tensorParallel, 2);
  EXPECT_EQ(layout->pipelineParallel, 4);
  EXPECT_EQ(layout->origins["parallel.tp"], "c.yaml:1:25");

  EXPECT_THAT(errorText(parseTrainingConfig("parallel: {zero: 5}\n", "t.yaml",
                                            "", {}, TrainingConfigUse::Plan)),
              StartsWith("t.yaml:1:18: error: parallel.zero: ZeRO stage 5 "
                         "does not exist"));
  EXPECT_THAT(errorText(parseTrainingConfig("plan: {gpus: 4}\n", "t.yaml",
                                            "", {}, TrainingConfigUse::Plan)),
              StartsWith("t.yaml:1:8: error: plan: unknown key 'gpus' (did "
                         "you mean 'gpu'?)"));
  EXPECT_THAT(errorText(parseTrainingConfig("zero: 1\n", "t.yaml", "", {},
                                            TrainingConfigUse::Plan)),
              StartsWith("t.yaml:1:1: error: 'zero' is now 'parallel.zero'"));

  llvm::Expected<TrainingConfig> machines = parseTrainingConfig(
      "plan:\n  gpu: h100-sxm\n  gpus_per_node: 4\n  nodes: 2\n"
      "  price_per_gpu_hour: 2.5\n  mfu: 0.5\n",
      "c.yaml", "", {}, TrainingConfigUse::Plan);
  ASSERT_TRUE(static_cast<bool>(machines));
  llvm::Expected<ClusterConfig> c = clusterConfigFromRun(*machines);
  ASSERT_TRUE(static_cast<bool>(c));
  EXPECT_EQ(c->gpu, "h100-sxm");
  EXPECT_EQ(c->numGpus(), 8);
  EXPECT_EQ(c->pricePerGpuHour, 2.5);
  EXPECT_EQ(c->mfu, 0.5);
  EXPECT_THAT(errorText(parseTrainingConfig("plan: {mfu: 1.5}\n", "c.yaml",
                                            "", {}, TrainingConfigUse::Plan)),
              StartsWith("c.yaml:1:13: error: plan.mfu: 1.5 is out of range; "
                         "expected a value > 0 and <= 1"));
  // llmc run reads the plan section and ignores it; it has no fp8.
  EXPECT_TRUE(static_cast<bool>(parseTrainingConfig(
      "plan: {gpu: a100-80gb}\nprecision: fp8\n", "c.yaml", "", {},
      TrainingConfigUse::Plan)));
  EXPECT_THAT(errorText(parseTrainingConfig("precision: fp8\n", "c.yaml", "",
                                            {}, TrainingConfigUse::Run)),
              StartsWith("c.yaml:1:12: error: precision: unknown precision "
                         "'fp8'; expected fp32, fp16 or bf16"));
}

TEST(PlanConfig, Units) {
  EXPECT_EQ(*parseMemorySize("80GB"), 80e9);
  EXPECT_EQ(*parseMemorySize("80GiB"), 80 * kGiB);
  EXPECT_EQ(*parseMemorySize("81920MiB"), 80 * kGiB);
  EXPECT_EQ(*parseMemorySize("80"), 80 * kGiB);
  EXPECT_EQ(*parseMemorySize("0.5 TB"), 0.5e12);
  EXPECT_THAT(errorText(parseMemorySize("lots")),
              HasSubstr("is not a memory size"));
  EXPECT_THAT(errorText(parseMemorySize("-1GB")),
              HasSubstr("is not a memory size"));
  EXPECT_EQ(*parseCount("180B"), 180e9);
  EXPECT_EQ(*parseCount("1.4T"), 1.4e12);
  EXPECT_EQ(*parseCount("10e9"), 10e9);
  EXPECT_EQ(*parseCount("300M"), 300e6);
  EXPECT_THAT(errorText(parseCount("3X")), HasSubstr("not a positive count"));
}

//===----------------------------------------------------------------------===//
// The IR: model.mlir inputs and the forward memory plan
//===----------------------------------------------------------------------===//

TEST(PlanIR, ForwardArenaOfConfigAndModuleAgree) {
  MLIRContext context;
  llvm::Expected<ModelConfig> tiny =
      loadModelConfigFile(LLMC_SOURCE_DIR "/examples/tiny.yaml");
  ASSERT_TRUE(static_cast<bool>(tiny)) << llvm::toString(tiny.takeError());
  PlanModel model = analyze(context, *tiny);
  llvm::Expected<ForwardMemory> forward = compileForwardMemory(context, model, 2, 32);
  ASSERT_TRUE(static_cast<bool>(forward))
      << llvm::toString(forward.takeError());
  // The logits (B, T, V) in f32 are an output, alive at the end.
  EXPECT_GE(forward->arenaBytes, 2 * 32 * 256 * 4);
  EXPECT_GT(forward->flops, 0);

  // The same model written as model.mlir at that shape.
  auto module = buildForwardModule(context, *tiny, {2, 32});
  ASSERT_TRUE(static_cast<bool>(module));
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("plan-tiny", "mlir", path));
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    (*module)->print(os);
  }
  llvm::Expected<PlanModel> fromMlir = loadPlanModel(context, path);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(static_cast<bool>(fromMlir))
      << llvm::toString(fromMlir.takeError());
  EXPECT_EQ(fromMlir->numParameters, model.numParameters);
  EXPECT_EQ(fromMlir->mlirBatch, 2);
  EXPECT_EQ(fromMlir->mlirSeqLen, 32);
  llvm::Expected<ForwardMemory> again = compileForwardMemory(context, *fromMlir, 2, 32);
  ASSERT_TRUE(static_cast<bool>(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->arenaBytes, forward->arenaBytes);
  EXPECT_THAT(again->source, HasSubstr("'s @forward"));
}

TEST(PlanIR, UnknownModel) {
  MLIRContext context;
  EXPECT_THAT(errorText(loadPlanModel(context, "gpt5")),
              HasSubstr("'gpt5' is neither a model.mlir, a config file nor "
                        "a preset"));
}

//===----------------------------------------------------------------------===//
// --fit and the report
//===----------------------------------------------------------------------===//

TEST(PlanFit, FastestFirstAndWithinBudget) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  HardwareTable hardware = loadExampleHardware();
  const GpuSpec *gpu = hardware.find("a100-80gb");
  ASSERT_TRUE(gpu);
  TrainingFacts train;
  ClusterConfig eight = cluster("a100-80gb", 8, 1);
  FitResult fit = searchFit(model, train, eight, *gpu, 80e9);
  ASSERT_FALSE(fit.fitting.empty());
  EXPECT_EQ(fit.candidates,
            fit.invalid + fit.tooBig + (int64_t)fit.fitting.size());
  for (size_t i = 0; i < fit.fitting.size(); ++i) {
    EXPECT_LE(fit.fitting[i].memory.total(), 80e9);
    if (i) {
      EXPECT_LE(fit.fitting[i - 1].step.total(),
                fit.fitting[i].step.total() * (1 + 1e-9));
    }
  }
  // GPT-2 fits plain data parallelism: no recompute, no pipeline bubble.
  const Estimate &best = fit.fitting.front();
  EXPECT_EQ(best.layout.pp, 1);
  EXPECT_EQ(best.layout.remat, Remat::None);
  // Full recompute runs every block's forward again: 2 P_blocks + 4 L h s
  // FLOPs per token on top of 6 N + 12 L h s (N with the classifier).
  double blocks = double(model.numBlocks) * model.blockParameters();
  double lhs = 12.0 * 768 * 1024, vh = 50257.0 * 768;
  double expected = (2 * blocks + 4 * lhs) / (6 * (blocks + vh) + 12 * lhs);
  bool sawFull = false;
  for (const Estimate &e : fit.fitting)
    if (e.layout.remat == Remat::Full && e.layout.tp == 1 && e.layout.pp == 1 &&
        e.layout.zero == best.layout.zero) {
      EXPECT_NEAR(e.step.recompute / e.step.compute, expected, 1e-9);
      EXPECT_THAT(explainLoss(best, e), StartsWith("recompute +"));
      sawFull = true;
      break;
    }
  EXPECT_TRUE(sawFull);

  FitResult none = searchFit(model, train, eight, *gpu, 0.5 * kGiB);
  EXPECT_TRUE(none.fitting.empty());
  EXPECT_TRUE(none.smallestTooBig.has_value());
}

TEST(PlanReport, JsonLabelsEveryNumber) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  HardwareTable hardware = loadExampleHardware();
  PlanRequest request;
  request.model = &model;
  request.cluster = cluster("a100-80gb", 8, 1);
  request.cluster.pricePerGpuHour = 2;
  request.gpu = hardware.find("a100-80gb");
  request.hardwarePath = hardware.path;
  request.train.microBatch = 16;
  llvm::Expected<ForwardMemory> forward = compileForwardMemory(context, model, 16, 1024);
  ASSERT_TRUE(static_cast<bool>(forward));
  request.forward = *forward;
  llvm::Expected<Report> report = buildReport(request);
  ASSERT_TRUE(static_cast<bool>(report)) << llvm::toString(report.takeError());

  std::string text;
  llvm::raw_string_ostream os(text);
  printReportJson(*report, os);
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  ASSERT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
  llvm::json::Object *root = json->getAsObject();
  ASSERT_TRUE(root);
  for (llvm::StringRef section : {"memory", "activations", "compute", "time"}) {
    llvm::json::Object *rows = root->getObject(section);
    ASSERT_TRUE(rows) << section.str();
    for (auto &[key, value] : *rows) {
      llvm::json::Object *q = value.getAsObject();
      ASSERT_TRUE(q) << key.str();
      EXPECT_TRUE(q->get("value")) << key.str();
      EXPECT_TRUE(q->getString("unit")) << key.str();
      EXPECT_TRUE(q->getString("source")) << key.str();
    }
  }
  llvm::json::Object *forwardArena =
      root->getObject("activations")->getObject("forward_arena");
  ASSERT_TRUE(forwardArena);
  EXPECT_EQ(forwardArena->getInteger("value"), forward->arenaBytes);
  EXPECT_EQ(*forwardArena->getString("source"),
            "IR: memory plan of the compiled @forward");
  EXPECT_EQ(*root->getObject("memory")->getObject("total")->getString("unit"),
            "bytes");
  EXPECT_TRUE(root->getArray("layouts"));
  EXPECT_EQ(*root->getString("fits"), "yes");

  // The table prints the same rows.
  std::string table;
  llvm::raw_string_ostream tableOs(table);
  printReportTable(*report, tableOs);
  EXPECT_THAT(table, HasSubstr("Memory per device"));
  EXPECT_THAT(table, HasSubstr("IR: memory plan of the compiled @forward"));
  EXPECT_THAT(table, HasSubstr("formula: Korthikanti et al. 2022"));
  EXPECT_THAT(table, HasSubstr("data file hardware.yaml"));
}

TEST(PlanReport, UnsupportedPrecisionNamesTheDataFile) {
  MLIRContext context;
  PlanModel model = preset(context, "gpt2");
  HardwareTable hardware = loadExampleHardware();
  PlanRequest request;
  request.model = &model;
  request.cluster = cluster("v100-32gb", 8, 1);
  request.gpu = hardware.find("v100-32gb");
  request.hardwarePath = hardware.path;
  EXPECT_THAT(errorText(buildReport(request)),
              HasSubstr("GPU 'v100-32gb' has no bf16 peak in " LLMC_SOURCE_DIR
                        "/examples/hardware.yaml"));
}

} // namespace
