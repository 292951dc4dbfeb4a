// Parameter counts of built models against closed forms and published sizes.
#include "frontend/GptBuilder.h"
#include "frontend/ModelInfo.h"
#include "ir/LlmcOps.h"
#include "passes/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <set>

using namespace mlir;
using namespace mlir::llmc;

namespace {

ModelInfo infoOf(MLIRContext &context, const ModelConfig &config,
                 ForwardShape shape = {2, 0}) {
  auto module = buildForwardModule(context, config, shape);
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return {};
  }
  PassManager pm(&context);
  pm.addPass(createVerifyLegalityPass());
  EXPECT_TRUE(succeeded(pm.run(**module)));
  return getModelInfo(**module);
}

// The GPT-2 closed form: n*(12h^2 + 13h) + v*h + s*h + 2h (tied embeddings,
// LayerNorm with bias, a 4h MLP, learned positions).
int64_t gptFormula(const ModelConfig &c) {
  int64_t n = c.nLayer, h = c.nEmbd, v = c.vocabSize, s = c.seqLen;
  return n * (12 * h * h + 13 * h) + v * h + s * h + 2 * h;
}

ModelConfig gptConfig(int64_t layers, int64_t heads, int64_t embd, int64_t seq,
                      int64_t vocab) {
  ModelConfig c = *getModelPreset("gpt2");
  c.name = "test";
  c.nLayer = layers;
  c.nHead = heads;
  c.nEmbd = embd;
  c.seqLen = seq;
  c.vocabSize = vocab;
  c.ffnHidden = 4 * embd;
  return c;
}

TEST(ModelParameters, Gpt2PresetsHaveTheirPublishedSizes) {
  MLIRContext context;
  const std::pair<const char *, int64_t> published[] = {
      {"gpt2", 124439808},
      {"gpt2-medium", 354823168},
      {"gpt2-large", 774030080},
      {"gpt2-xl", 1557611200},
  };
  for (auto [name, size] : published) {
    ModelConfig config = *getModelPreset(name);
    ModelInfo info = infoOf(context, config, {1, 8});
    EXPECT_EQ(info.numParameters, size) << name;
    EXPECT_EQ(info.numParameters, gptFormula(config)) << name;
    // 12 tensors per layer, plus wte, wpe and ln_f weight and bias.
    EXPECT_EQ(info.parameters.size(), size_t(12 * config.nLayer + 4)) << name;
  }
}

TEST(ModelParameters, GptFormulaHoldsForOddShapes) {
  MLIRContext context;
  const int64_t shapes[][5] = {{1, 1, 8, 4, 3},
                               {3, 6, 48, 32, 100},
                               {5, 5, 40, 17, 257},
                               {2, 4, 64, 64, 256}};
  for (const auto &s : shapes) {
    ModelConfig config = gptConfig(s[0], s[1], s[2], s[3], s[4]);
    EXPECT_EQ(infoOf(context, config).numParameters, gptFormula(config))
        << "n_layer=" << s[0] << " n_embd=" << s[2] << " vocab=" << s[4];
  }
}

TEST(ModelParameters, UntiedEmbeddingsAddAClassifier) {
  MLIRContext context;
  ModelConfig config = gptConfig(2, 4, 64, 64, 256);
  config.tieEmbeddings = false;
  ModelInfo info = infoOf(context, config);
  EXPECT_EQ(info.numParameters, gptFormula(config) + 256 * 64);
  EXPECT_EQ(info.parameters.back().name, "lm_head.weight");
}

TEST(ModelParameters, Llama7bHasItsPublishedSize) {
  MLIRContext context;
  ModelConfig config = *getModelPreset("llama-7b");
  ModelInfo info = infoOf(context, config, {1, 16});
  EXPECT_EQ(info.numParameters, 6738415616);
  // n*(4h^2 + 3hF + 2h) + 2vh + h: no biases, RMSNorm, SwiGLU, untied.
  int64_t n = 32, h = 4096, f = 11008, v = 32000;
  EXPECT_EQ(info.numParameters,
            n * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h);
  for (const ParameterInfo &p : info.parameters)
    EXPECT_EQ(llvm::StringRef(p.name).ends_with(".bias"), false) << p.name;
}

TEST(ModelParameters, OptPresetMatchesItsFormula) {
  MLIRContext context;
  ModelConfig config = *getModelPreset("opt-125m");
  // OPT-125m is GPT-shaped with ReLU; Hugging Face counts 2 more position
  // rows (OPT's offset of 2), 125,239,296 - 2 * 768.
  EXPECT_EQ(infoOf(context, config, {1, 8}).numParameters, 125239296 - 1536);
  EXPECT_EQ(infoOf(context, config, {1, 8}).numParameters, gptFormula(config));
}

TEST(ModelParameters, ParametersComeInLlmcOrderWithUniqueNames) {
  MLIRContext context;
  ModelInfo info = infoOf(context, gptConfig(2, 4, 64, 64, 256));
  std::vector<std::string> first;
  for (size_t i = 0; i < 4; ++i)
    first.push_back(info.parameters[i].name);
  EXPECT_EQ(first, (std::vector<std::string>{"wte", "wpe", "h.0.ln_1.weight",
                                             "h.0.ln_1.bias"}));
  EXPECT_EQ(info.parameters.back().name, "ln_f.bias");
  std::set<std::string> names;
  for (const ParameterInfo &p : info.parameters)
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
}

TEST(ModelBuilder, RejectsShapesTheConfigCannotRun) {
  MLIRContext context;
  ModelConfig config = gptConfig(1, 2, 16, 32, 50);
  auto tooLong = buildForwardModule(context, config, {1, 33});
  ASSERT_FALSE(bool(tooLong));
  EXPECT_NE(llvm::toString(tooLong.takeError()).find("seq_len = 32"),
            std::string::npos);
  auto noBatch = buildForwardModule(context, config, {0, 8});
  ASSERT_FALSE(bool(noBatch));
  EXPECT_NE(llvm::toString(noBatch.takeError()).find("batch size"),
            std::string::npos);
}

TEST(ModelBuilder, DropoutSitesGetDistinctStreams) {
  MLIRContext context;
  ModelConfig config = gptConfig(3, 2, 16, 8, 50);
  config.dropout = 0.1;
  auto module = buildForwardModule(context, config, {1, 8});
  ASSERT_TRUE(bool(module));
  std::vector<int64_t> streams;
  (*module)->walk([&](DropoutOp op) { streams.push_back(op.getStream()); });
  // Embeddings, then attention and MLP outputs of every layer.
  ASSERT_EQ(streams.size(), size_t(1 + 2 * 3));
  for (size_t i = 0; i < streams.size(); ++i)
    EXPECT_EQ(streams[i], int64_t(i));
}

// Every op a forward pass uses is differentiable, and integer inputs are
// not: autodiff relies on both.
TEST(DifferentiableOpInterface, CoversEveryForwardOp) {
  MLIRContext context;
  for (llvm::StringRef preset : {"gpt2", "opt-125m", "llama-7b"}) {
    ModelConfig config = *getModelPreset(preset);
    config.nLayer = 1;
    config.dropout = 0.1;
    auto module = buildForwardModule(context, config, {1, 8});
    ASSERT_TRUE(bool(module));
    (*module)->walk([&](Operation *op) {
      if (!isa<LlmcDialect>(op->getDialect()))
        return;
      auto diff = dyn_cast<DifferentiableOpInterface>(op);
      ASSERT_TRUE(diff) << op->getName().getStringRef().str();
      for (unsigned i = 0; i < op->getNumOperands(); ++i) {
        bool isFloat =
            isa<FloatType>(cast<RankedTensorType>(op->getOperand(i).getType())
                               .getElementType());
        EXPECT_EQ(diff.isDifferentiableOperand(i), isFloat)
            << op->getName().getStringRef().str() << " operand " << i;
      }
    });
  }
}

} // namespace
