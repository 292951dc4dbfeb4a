// The Hugging Face name and layout mapping of runtime/HuggingFace: which
// models have a layout, the tensors of each, round trips both ways, and the
// errors a foreign or mismatched file gets.
#include "runtime/Weights/HuggingFace.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace llmc;
using namespace llmc::runtime;

namespace {

std::string configJson(const std::string &overrides) {
  return "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 4, \"ffn_hidden\": 6, "
         "\"vocab_size\": 5, \"seq_len\": 3, " +
         overrides + "}";
}

const std::string kGpt2 = configJson(
    "\"activation\": \"gelu\", \"norm\": \"layernorm\", \"position\": "
    "\"learned\", \"tie_embeddings\": true, \"bias\": true");
const std::string kLlamaBias = configJson(
    "\"activation\": \"swiglu\", \"norm\": \"rmsnorm\", \"position\": "
    "\"rope\", \"tie_embeddings\": false, \"bias\": true, \"rope_theta\": "
    "500000.0");

/// llmc's parameters of `model`, every element distinct.
TensorMap llmcParams(const HfModel &model) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const HfTensor &t : hfTensors(model)) {
    std::vector<int64_t> shape = t.shape;
    if (t.kind == HfTensor::Transposed)
      std::reverse(shape.begin(), shape.end());
    auto [it, fresh] = shapes.emplace(t.llmcName, shape);
    if (!fresh)
      it->second[0] += t.shape[0];
  }
  TensorMap params;
  float next = 0;
  for (const auto &[name, shape] : shapes) {
    int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1),
                                std::multiplies<int64_t>());
    std::vector<float> values(n);
    for (float &v : values)
      v = next++;
    params[name] = HostTensor::fromF32(values, shape);
  }
  return params;
}

TEST(HuggingFace, WhichModelsHaveALayout) {
  auto gpt2 = hfModelOf(kGpt2);
  ASSERT_TRUE(bool(gpt2)) << llvm::toString(gpt2.takeError());
  EXPECT_EQ(gpt2->architecture, HfArchitecture::Gpt2);
  auto llama = hfModelOf(kLlamaBias);
  ASSERT_TRUE(bool(llama)) << llvm::toString(llama.takeError());
  EXPECT_EQ(llama->architecture, HfArchitecture::Llama);
  EXPECT_EQ(llama->ropeTheta, 500000.0);

  // RMSNorm with learned positions is neither.
  auto mixed = hfModelOf(configJson(
      "\"activation\": \"relu\", \"norm\": \"rmsnorm\", \"position\": "
      "\"learned\", \"tie_embeddings\": true, \"bias\": true"));
  ASSERT_FALSE(bool(mixed));
  EXPECT_EQ(llvm::toString(mixed.takeError()),
            "the model (norm rmsnorm, position learned, activation relu, "
            "bias true) has no Hugging Face layout: GPT-2 needs layernorm, "
            "learned positions and biases, Llama rmsnorm, rope and swiglu");
  auto noBias = hfModelOf(configJson(
      "\"activation\": \"gelu\", \"norm\": \"layernorm\", \"position\": "
      "\"learned\", \"tie_embeddings\": true, \"bias\": false"));
  ASSERT_FALSE(bool(noBias));
  EXPECT_NE(llvm::toString(noBias.takeError()).find("always carry a bias"),
            std::string::npos);
  auto none = hfModelOf("");
  ASSERT_FALSE(bool(none));
  llvm::consumeError(none.takeError());
}

TEST(HuggingFace, Gpt2TransposesConv1DWeights) {
  HfModel model = *hfModelOf(kGpt2);
  TensorMap params = llmcParams(model);
  auto hf = toHuggingFace(params, model);
  ASSERT_TRUE(bool(hf)) << llvm::toString(hf.takeError());
  EXPECT_EQ(hf->size(), 2u + 2 * 12 + 2);
  EXPECT_FALSE(hf->count("lm_head.weight")); // tied
  const HostTensor &w = hf->at("h.1.attn.c_attn.weight");
  const HostTensor &src = params.at("h.1.attn.c_attn.weight");
  ASSERT_EQ(w.shape, (std::vector<int64_t>{4, 12}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t o = 0; o < 12; ++o)
      EXPECT_EQ(w.f32()[i * 12 + o], src.f32()[o * 4 + i]);
  EXPECT_EQ(hf->at("wte.weight"), params.at("wte"));
  EXPECT_EQ(hf->at("h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{4, 6}));

  // Back, also under GPT2LMHeadModel's "transformer." prefix, with a
  // buffer the model does not use.
  auto back = fromHuggingFace(*hf, model, "w.safetensors");
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(*back, params);
  TensorMap prefixed;
  for (auto &[name, tensor] : *hf)
    prefixed["transformer." + name] = tensor;
  prefixed["transformer.h.0.attn.bias"] = HostTensor::zeros(kir::DType::F32, {1});
  EXPECT_EQ(detectHuggingFace(prefixed), HfArchitecture::Gpt2);
  auto fromPrefixed = fromHuggingFace(prefixed, model, "w.safetensors");
  ASSERT_TRUE(bool(fromPrefixed)) << llvm::toString(fromPrefixed.takeError());
  EXPECT_EQ(*fromPrefixed, params);
}

TEST(HuggingFace, LlamaSplitsQkvAndGateUp) {
  HfModel model = *hfModelOf(kLlamaBias);
  TensorMap params = llmcParams(model);
  auto hf = toHuggingFace(params, model);
  ASSERT_TRUE(bool(hf)) << llvm::toString(hf.takeError());
  // embed, norm, lm_head; per layer 2 norms and 7 projections with biases.
  EXPECT_EQ(hf->size(), 3u + 2 * (2 + 7 * 2));
  EXPECT_EQ(detectHuggingFace(*hf), HfArchitecture::Llama);
  const HostTensor &qkv = params.at("h.0.attn.c_attn.weight");
  const HostTensor &k = hf->at("model.layers.0.self_attn.k_proj.weight");
  ASSERT_EQ(k.shape, (std::vector<int64_t>{4, 4}));
  for (int64_t i = 0; i < 16; ++i) // rows 4..7 of [12, 4]: no transpose
    EXPECT_EQ(k.f32()[i], qkv.f32()[16 + i]);
  const HostTensor &upBias = hf->at("model.layers.1.mlp.up_proj.bias");
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(upBias.f32()[i], params.at("h.1.mlp.c_fc.bias").f32()[6 + i]);
  EXPECT_EQ(hf->at("model.layers.1.mlp.down_proj.weight"),
            params.at("h.1.mlp.c_proj.weight"));
  EXPECT_EQ(hf->at("lm_head.weight"), params.at("lm_head.weight"));

  auto back = fromHuggingFace(*hf, model, "w.safetensors");
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(*back, params);

  // The config.json transformers would read.
  std::string config = hfConfigJson(model, "float32");
  for (const char *field :
       {"\"model_type\":\"llama\"", "\"rope_theta\":500000",
        "\"attention_bias\":true", "\"num_key_value_heads\":2",
        "\"intermediate_size\":6", "\"tie_word_embeddings\":false"})
    EXPECT_NE(config.find(field), std::string::npos) << field << " in " << config;
}

TEST(HuggingFace, ErrorsNameTheTensor) {
  HfModel model = *hfModelOf(kLlamaBias);
  auto hf = toHuggingFace(llmcParams(model), model);
  ASSERT_TRUE(bool(hf));
  TensorMap missing = *hf;
  missing.erase("model.layers.1.self_attn.v_proj.weight");
  auto error = fromHuggingFace(missing, model, "m.safetensors");
  ASSERT_FALSE(bool(error));
  EXPECT_EQ(llvm::toString(error.takeError()),
            "m.safetensors: no tensor 'model.layers.1.self_attn.v_proj.weight' "
            "(the Hugging Face Llama name of llmc's 'h.1.attn.c_attn.weight')");

  HfModel gpt2 = *hfModelOf(kGpt2);
  auto gpt2Tensors = toHuggingFace(llmcParams(gpt2), gpt2);
  ASSERT_TRUE(bool(gpt2Tensors));
  // An [out, in] weight where Conv1D's [in, out] belongs.
  HostTensor &fc = (*gpt2Tensors)["h.0.mlp.c_fc.weight"];
  fc.shape = {6, 4};
  auto wrongShape = fromHuggingFace(*gpt2Tensors, gpt2, "g.safetensors");
  ASSERT_FALSE(bool(wrongShape));
  EXPECT_EQ(llvm::toString(wrongShape.takeError()),
            "g.safetensors: tensor 'h.0.mlp.c_fc.weight' has shape [6, 4], "
            "the model expects [4, 6] (Conv1D's [in, out])");

  TensorMap params = llmcParams(gpt2);
  params.erase("ln_f.bias");
  auto noParam = toHuggingFace(params, gpt2);
  ASSERT_FALSE(bool(noParam));
  EXPECT_EQ(llvm::toString(noParam.takeError()),
            "no parameter 'ln_f.bias' (Hugging Face GPT-2 needs it)");
}

} // namespace
