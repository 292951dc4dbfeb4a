// Unit tests for model config presets, YAML parsing, diagnostics and printing.
#include "frontend/ModelConfig.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <string>

namespace mlir {
namespace llmc {
// Lets gtest show a readable config when an equality check fails.
void PrintTo(const ModelConfig &config, std::ostream *os) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  printModelConfig(config, stream);
  *os << "\n" << text;
}
} // namespace llmc
} // namespace mlir

using namespace mlir::llmc;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

ModelConfig parseOk(llvm::StringRef text,
                    llvm::StringRef bufferName = "cfg.yaml") {
  llvm::Expected<ModelConfig> result = parseModelConfig(text, bufferName);
  if (!result) {
    ADD_FAILURE() << "unexpected error:\n"
                  << llvm::toString(result.takeError());
    return ModelConfig();
  }
  return *result;
}

std::string parseError(llvm::StringRef text,
                       llvm::StringRef bufferName = "cfg.yaml") {
  llvm::Expected<ModelConfig> result = parseModelConfig(text, bufferName);
  if (result) {
    ADD_FAILURE() << "expected an error for:\n" << text.str();
    return "";
  }
  return llvm::toString(result.takeError());
}

std::string print(const ModelConfig &config) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printModelConfig(config, os);
  return text;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

TEST(ModelConfigPresets, NamesAreComplete) {
  std::vector<std::string> names;
  for (llvm::StringRef name : getModelPresetNames())
    names.push_back(name.str());
  EXPECT_THAT(names, ::testing::ElementsAre("gpt2", "gpt2-medium", "gpt2-large",
                                            "gpt2-xl", "opt-125m", "opt-1.3b",
                                            "llama-7b"));
  EXPECT_FALSE(getModelPreset("gpt3").has_value());
  EXPECT_FALSE(getModelPreset("").has_value());
}

TEST(ModelConfigPresets, Gpt2Family) {
  struct Expect {
    const char *name;
    int64_t nLayer, nHead, nEmbd;
  } expected[] = {{"gpt2", 12, 12, 768},
                  {"gpt2-medium", 24, 16, 1024},
                  {"gpt2-large", 36, 20, 1280},
                  {"gpt2-xl", 48, 25, 1600}};
  for (const Expect &e : expected) {
    SCOPED_TRACE(e.name);
    std::optional<ModelConfig> c = getModelPreset(e.name);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->name, e.name);
    EXPECT_EQ(c->nLayer, e.nLayer);
    EXPECT_EQ(c->nHead, e.nHead);
    EXPECT_EQ(c->nEmbd, e.nEmbd);
    EXPECT_EQ(c->seqLen, 1024);
    EXPECT_EQ(c->vocabSize, 50257);
    EXPECT_EQ(c->ffnHidden, 4 * e.nEmbd);
    EXPECT_EQ(c->headDim(), 64);
    EXPECT_EQ(c->activation, Activation::Gelu);
    EXPECT_EQ(c->norm, Norm::LayerNorm);
    EXPECT_EQ(c->position, Position::Learned);
    EXPECT_TRUE(c->tieEmbeddings);
    EXPECT_TRUE(c->bias);
    EXPECT_EQ(c->dropout, 0.0);
    EXPECT_EQ(c->normEps, 1e-5);
  }
}

TEST(ModelConfigPresets, OptFamily) {
  std::optional<ModelConfig> small = getModelPreset("opt-125m");
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->nLayer, 12);
  EXPECT_EQ(small->nHead, 12);
  EXPECT_EQ(small->nEmbd, 768);
  EXPECT_EQ(small->seqLen, 2048);
  EXPECT_EQ(small->vocabSize, 50272);
  EXPECT_EQ(small->ffnHidden, 3072);
  EXPECT_EQ(small->activation, Activation::Relu);
  EXPECT_EQ(small->norm, Norm::LayerNorm);
  EXPECT_EQ(small->position, Position::Learned);
  EXPECT_TRUE(small->tieEmbeddings);
  EXPECT_TRUE(small->bias);

  std::optional<ModelConfig> large = getModelPreset("opt-1.3b");
  ASSERT_TRUE(large.has_value());
  EXPECT_EQ(large->nLayer, 24);
  EXPECT_EQ(large->nHead, 32);
  EXPECT_EQ(large->nEmbd, 2048);
  EXPECT_EQ(large->seqLen, 2048);
  EXPECT_EQ(large->vocabSize, 50272);
  EXPECT_EQ(large->ffnHidden, 8192);
  EXPECT_EQ(large->activation, Activation::Relu);
}

TEST(ModelConfigPresets, Llama7b) {
  std::optional<ModelConfig> c = getModelPreset("llama-7b");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->name, "llama-7b");
  EXPECT_EQ(c->nLayer, 32);
  EXPECT_EQ(c->nHead, 32);
  EXPECT_EQ(c->nEmbd, 4096);
  EXPECT_EQ(c->headDim(), 128);
  EXPECT_EQ(c->seqLen, 2048);
  EXPECT_EQ(c->vocabSize, 32000);
  EXPECT_EQ(c->ffnHidden, 11008);
  EXPECT_EQ(c->activation, Activation::SwiGlu);
  EXPECT_EQ(c->norm, Norm::RmsNorm);
  EXPECT_EQ(c->position, Position::Rope);
  EXPECT_FALSE(c->tieEmbeddings);
  EXPECT_FALSE(c->bias);
  EXPECT_EQ(c->normEps, 1e-6);
  EXPECT_EQ(c->ropeTheta, 10000.0);
}

TEST(ModelConfigPresets, EveryPresetParsesFromYaml) {
  for (llvm::StringRef name : getModelPresetNames()) {
    SCOPED_TRACE(name.str());
    ModelConfig parsed = parseOk(("preset: " + name + "\n").str());
    std::optional<ModelConfig> preset = getModelPreset(name);
    ASSERT_TRUE(preset.has_value());
    EXPECT_EQ(parsed, *preset);
    EXPECT_EQ(parsed.name, name.str());
  }
}

TEST(ModelConfigEnums, Stringify) {
  EXPECT_EQ(stringifyActivation(Activation::Gelu), "gelu");
  EXPECT_EQ(stringifyActivation(Activation::GeluExact), "gelu_exact");
  EXPECT_EQ(stringifyActivation(Activation::Relu), "relu");
  EXPECT_EQ(stringifyActivation(Activation::SwiGlu), "swiglu");
  EXPECT_EQ(stringifyNorm(Norm::LayerNorm), "layernorm");
  EXPECT_EQ(stringifyNorm(Norm::RmsNorm), "rmsnorm");
  EXPECT_EQ(stringifyPosition(Position::Learned), "learned");
  EXPECT_EQ(stringifyPosition(Position::Rope), "rope");
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

TEST(ModelConfigParse, FullConfigWithoutPresetUsesDefaults) {
  ModelConfig c = parseOk("n_layer: 2\n"
                          "n_head: 4\n"
                          "n_embd: 64\n"
                          "seq_len: 128\n"
                          "vocab_size: 1000\n",
                          "configs/tiny.yaml");
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.nLayer, 2);
  EXPECT_EQ(c.nHead, 4);
  EXPECT_EQ(c.nEmbd, 64);
  EXPECT_EQ(c.headDim(), 16);
  EXPECT_EQ(c.seqLen, 128);
  EXPECT_EQ(c.vocabSize, 1000);
  EXPECT_EQ(c.ffnHidden, 256);
  EXPECT_EQ(c.activation, Activation::Gelu);
  EXPECT_EQ(c.norm, Norm::LayerNorm);
  EXPECT_EQ(c.position, Position::Learned);
  EXPECT_TRUE(c.tieEmbeddings);
  EXPECT_TRUE(c.bias);
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_EQ(c.normEps, 1e-5);
  EXPECT_EQ(c.ropeTheta, 10000.0);
}

TEST(ModelConfigParse, AllKeysExplicit) {
  ModelConfig c = parseOk("name: custom  # a comment\n"
                          "n_layer: 3\n"
                          "n_head: 2\n"
                          "n_embd: 32\n"
                          "seq_len: 16\n"
                          "vocab_size: 99\n"
                          "ffn_hidden: 100\n"
                          "activation: gelu_exact\n"
                          "norm: rmsnorm\n"
                          "norm_eps: 1e-6\n"
                          "position: rope\n"
                          "rope_theta: 500000.0\n"
                          "tie_embeddings: false\n"
                          "bias: false\n"
                          "dropout: 0.25\n");
  EXPECT_EQ(c.name, "custom");
  EXPECT_EQ(c.nLayer, 3);
  EXPECT_EQ(c.ffnHidden, 100);
  EXPECT_EQ(c.activation, Activation::GeluExact);
  EXPECT_EQ(c.norm, Norm::RmsNorm);
  EXPECT_EQ(c.normEps, 1e-6);
  EXPECT_EQ(c.position, Position::Rope);
  EXPECT_EQ(c.ropeTheta, 500000.0);
  EXPECT_FALSE(c.tieEmbeddings);
  EXPECT_FALSE(c.bias);
  EXPECT_EQ(c.dropout, 0.25);
}

TEST(ModelConfigParse, OverridesApplyOnTopOfPreset) {
  // Keys before the preset still override it.
  ModelConfig c = parseOk("n_layer: 6\n"
                          "preset: gpt2\n"
                          "name: gpt2-small-ctx\n"
                          "seq_len: 256\n"
                          "dropout: 0.1\n"
                          "tie_embeddings: false\n");
  ModelConfig expected = *getModelPreset("gpt2");
  expected.name = "gpt2-small-ctx";
  expected.nLayer = 6;
  expected.seqLen = 256;
  expected.dropout = 0.1;
  expected.tieEmbeddings = false;
  EXPECT_EQ(c, expected);
}

TEST(ModelConfigParse, OverridesKeepPresetFfnUnlessInputsChange) {
  ModelConfig shallow = parseOk("preset: llama-7b\nn_layer: 2\n");
  EXPECT_EQ(shallow.nLayer, 2);
  EXPECT_EQ(shallow.ffnHidden, 11008);
  EXPECT_EQ(shallow.name, "llama-7b");

  // Changing n_embd re-derives the width: 2*2048/3 = 1365 -> 1536.
  ModelConfig narrow = parseOk("preset: llama-7b\nn_embd: 512\nn_head: 8\n");
  EXPECT_EQ(narrow.ffnHidden, 1536);
  EXPECT_EQ(narrow.headDim(), 64);

  // An explicit value wins over the rule.
  ModelConfig explicitFfn =
      parseOk("preset: llama-7b\nffn_hidden: 1000\nn_embd: 512\n");
  EXPECT_EQ(explicitFfn.ffnHidden, 1000);

  // Switching GPT-2 to SwiGLU: 2*3072/3 = 2048, already a multiple of 256.
  ModelConfig gated = parseOk("preset: gpt2\nactivation: swiglu\n");
  EXPECT_EQ(gated.activation, Activation::SwiGlu);
  EXPECT_EQ(gated.ffnHidden, 2048);
}

TEST(ModelConfigParse, SwiGluFfnRule) {
  EXPECT_EQ(getDefaultFfnHidden(4096, Activation::SwiGlu), 11008);
  // 2*400/3 = 266, rounded up to 512.
  EXPECT_EQ(getDefaultFfnHidden(100, Activation::SwiGlu), 512);
  EXPECT_EQ(getDefaultFfnHidden(288, Activation::SwiGlu), 768);
  EXPECT_EQ(getDefaultFfnHidden(768, Activation::Gelu), 3072);
  EXPECT_EQ(getDefaultFfnHidden(768, Activation::GeluExact), 3072);
  EXPECT_EQ(getDefaultFfnHidden(768, Activation::Relu), 3072);

  ModelConfig c = parseOk("n_layer: 1\nn_head: 2\nn_embd: 4096\nseq_len: 8\n"
                          "vocab_size: 8\nactivation: swiglu\n");
  EXPECT_EQ(c.ffnHidden, 11008);
  // 2*256/3 = 170, rounded up to 256.
  ModelConfig small = parseOk("n_layer: 1\nn_head: 2\nn_embd: 64\nseq_len: 8\n"
                              "vocab_size: 8\nactivation: swiglu\n");
  EXPECT_EQ(small.ffnHidden, 256);
}

TEST(ModelConfigParse, AcceptsFlowMappingAndQuotedStrings) {
  ModelConfig c = parseOk("{preset: 'opt-125m', name: \"opt \\\"tiny\\\"\"}\n");
  EXPECT_EQ(c.name, "opt \"tiny\"");
  EXPECT_EQ(c.activation, Activation::Relu);
}

TEST(ModelConfigParse, LargestAllowedDimension) {
  ModelConfig c = parseOk("preset: gpt2\nvocab_size: 2147483647\n");
  EXPECT_EQ(c.vocabSize, 2147483647);
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

TEST(ModelConfigPrint, RoundTripsEveryPreset) {
  for (llvm::StringRef name : getModelPresetNames()) {
    SCOPED_TRACE(name.str());
    ModelConfig preset = *getModelPreset(name);
    std::string text = print(preset);
    EXPECT_THAT(text, Not(HasSubstr("preset")));
    EXPECT_THAT(text, HasSubstr("ffn_hidden: "));
    EXPECT_EQ(parseOk(text, "roundtrip.yaml"), preset);
  }
}

TEST(ModelConfigPrint, Gpt2Text) {
  EXPECT_EQ(print(*getModelPreset("gpt2")), "name: \"gpt2\"\n"
                                            "n_layer: 12\n"
                                            "n_head: 12\n"
                                            "n_embd: 768\n"
                                            "seq_len: 1024\n"
                                            "vocab_size: 50257\n"
                                            "ffn_hidden: 3072\n"
                                            "activation: gelu\n"
                                            "norm: layernorm\n"
                                            "norm_eps: 1e-05\n"
                                            "position: learned\n"
                                            "rope_theta: 10000\n"
                                            "tie_embeddings: true\n"
                                            "bias: true\n"
                                            "dropout: 0\n");
}

TEST(ModelConfigPrint, RoundTripsCustomConfig) {
  ModelConfig c;
  c.name = "my \"odd\" model\\v2: #1";
  c.nLayer = 7;
  c.nHead = 6;
  c.nEmbd = 384;
  c.seqLen = 333;
  c.vocabSize = 12345;
  c.ffnHidden = 1234; // Deliberately not what the rule would give.
  c.activation = Activation::GeluExact;
  c.norm = Norm::RmsNorm;
  c.position = Position::Rope;
  c.tieEmbeddings = false;
  c.bias = false;
  c.dropout = 0.1;
  c.normEps = 3.14159e-7;
  c.ropeTheta = 500000.0;
  std::string text = print(c);
  EXPECT_THAT(text, HasSubstr("rope_theta: 500000\n"));
  EXPECT_THAT(text, HasSubstr("dropout: 0.1\n"));
  EXPECT_EQ(parseOk(text), c);

  // Values that need all 17 significant digits survive too.
  c.dropout = 1.0 / 3.0;
  c.normEps = 1.0 / 7.0 * 1e-5;
  EXPECT_EQ(parseOk(print(c)), c);
}

TEST(ModelConfigPrint, EqualityComparesEveryField) {
  ModelConfig base = *getModelPreset("gpt2");
  EXPECT_EQ(base, *getModelPreset("gpt2"));
  ModelConfig other = base;
  other.ropeTheta = 20000;
  EXPECT_NE(base, other);
  other = base;
  other.bias = false;
  EXPECT_NE(base, other);
  other = base;
  other.name = "x";
  EXPECT_NE(base, other);
}

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

TEST(ModelConfigErrors, FullyFormattedWithSourceLineAndCaret) {
  std::string err = parseError("preset: gpt2\n"
                               "n_layer: 12\n"
                               "n_embd: 770\n",
                               "path/to/file.yaml");
  EXPECT_EQ(err, "path/to/file.yaml:3:9: error: n_embd: 770 is not divisible "
                 "by n_head (12)\n"
                 "n_embd: 770\n"
                 "        ^~~");
}

TEST(ModelConfigErrors, UnknownKeySuggestsClosest) {
  std::string err = parseError("preset: gpt2\nn_layers: 6\n");
  EXPECT_THAT(err, HasSubstr("cfg.yaml:2:1: error: unknown key 'n_layers' "
                             "(did you mean 'n_layer'?)"));
}

TEST(ModelConfigErrors, UnknownKeyWithoutCloseMatchListsKeys) {
  std::string err = parseError("preset: gpt2\nlearning_rate: 3e-4\n");
  EXPECT_THAT(err, HasSubstr("cfg.yaml:2:1: error: unknown key "
                             "'learning_rate'; known keys: preset, name, "));
  EXPECT_THAT(err, Not(HasSubstr("did you mean")));
}

TEST(ModelConfigErrors, DuplicateKey) {
  std::string err = parseError("preset: gpt2\nn_layer: 6\nn_layer: 8\n");
  EXPECT_THAT(err, HasSubstr("cfg.yaml:3:1: error: duplicate key 'n_layer' "
                             "(first given on line 2)"));
}

TEST(ModelConfigErrors, WrongScalarTypes) {
  EXPECT_THAT(parseError("preset: gpt2\nn_layer: twelve\n"),
              HasSubstr("cfg.yaml:2:10: error: n_layer: expected a positive "
                        "integer, got 'twelve'"));
  EXPECT_THAT(parseError("preset: gpt2\nn_head: 12.0\n"),
              HasSubstr("cfg.yaml:2:9: error: n_head: expected a positive "
                        "integer, got '12.0'"));
  EXPECT_THAT(parseError("preset: gpt2\ntie_embeddings: maybe\n"),
              HasSubstr("cfg.yaml:2:17: error: tie_embeddings: expected true "
                        "or false, got 'maybe'"));
  EXPECT_THAT(parseError("preset: gpt2\nbias: 1\n"),
              HasSubstr("cfg.yaml:2:7: error: bias: expected true or false, "
                        "got '1'"));
  EXPECT_THAT(parseError("preset: gpt2\ndropout: lots\n"),
              HasSubstr("cfg.yaml:2:10: error: dropout: expected a finite "
                        "number, got 'lots'"));
}

TEST(ModelConfigErrors, NonScalarValues) {
  EXPECT_THAT(parseError("preset: gpt2\nn_embd:\n  width: 1\n"),
              HasSubstr("cfg.yaml:3:3: error: n_embd: expected a positive "
                        "integer, got a mapping"));
  EXPECT_THAT(parseError("preset: gpt2\nactivation: [gelu, relu]\n"),
              HasSubstr("cfg.yaml:2:14: error: activation: expected one of "
                        "gelu, gelu_exact, relu, swiglu, got a sequence"));
  EXPECT_THAT(parseError("preset: gpt2\nn_layer:\n"),
              HasSubstr("cfg.yaml:2:1: error: n_layer: expected a positive "
                        "integer, got an empty value"));
  EXPECT_THAT(parseError("preset: gpt2\nn_layer: &n 3\nn_head: *n\n"),
              HasSubstr("cfg.yaml:3:1: error: n_head: expected a positive "
                        "integer, got an alias"));
  EXPECT_THAT(parseError("preset:\n  - gpt2\n"),
              HasSubstr("cfg.yaml:2:3: error: preset: expected a preset name, "
                        "got a sequence"));
}

TEST(ModelConfigErrors, NonScalarKey) {
  EXPECT_THAT(parseError("? [a, b]\n: 1\n"),
              HasSubstr("cfg.yaml:1:4: error: expected a scalar key"));
}

TEST(ModelConfigErrors, OutOfRangeIntegers) {
  EXPECT_THAT(parseError("preset: gpt2\nn_layer: 0\n"),
              HasSubstr("cfg.yaml:2:10: error: n_layer: expected a positive "
                        "integer, got '0'"));
  EXPECT_THAT(parseError("preset: gpt2\nseq_len: -5\n"),
              HasSubstr("cfg.yaml:2:10: error: seq_len: expected a positive "
                        "integer, got '-5'"));
  EXPECT_THAT(parseError("preset: gpt2\nvocab_size: 2147483648\n"),
              HasSubstr("cfg.yaml:2:13: error: vocab_size: 2147483648 is out "
                        "of range (maximum 2147483647)"));
  EXPECT_THAT(parseError("preset: gpt2\nffn_hidden: 99999999999999999999999\n"),
              HasSubstr("cfg.yaml:2:13: error: ffn_hidden: "
                        "99999999999999999999999 is out of range"));
}

TEST(ModelConfigErrors, OutOfRangeFloats) {
  EXPECT_THAT(parseError("preset: gpt2\ndropout: 1.0\n"),
              HasSubstr("cfg.yaml:2:10: error: dropout: 1.0 is out of range; "
                        "expected a value in [0, 1)"));
  EXPECT_THAT(parseError("preset: gpt2\ndropout: -0.5\n"),
              HasSubstr("cfg.yaml:2:10: error: dropout: -0.5 is out of range"));
  EXPECT_THAT(parseError("preset: gpt2\nnorm_eps: 0\n"),
              HasSubstr("cfg.yaml:2:11: error: norm_eps: 0 is out of range; "
                        "expected a value > 0"));
  EXPECT_THAT(parseError("preset: gpt2\nrope_theta: -1\n"),
              HasSubstr("cfg.yaml:2:13: error: rope_theta: -1 is out of "
                        "range; expected a value > 0"));
  EXPECT_THAT(parseError("preset: gpt2\nrope_theta: nan\n"),
              HasSubstr("cfg.yaml:2:13: error: rope_theta: expected a finite "
                        "number, got 'nan'"));
  EXPECT_THAT(parseError("preset: gpt2\nnorm_eps: 1e999\n"),
              HasSubstr("cfg.yaml:2:11: error: norm_eps: expected a finite "
                        "number, got '1e999'"));
}

TEST(ModelConfigErrors, InvalidEnumValues) {
  EXPECT_THAT(parseError("preset: gpt2\nactivation: silu\n"),
              HasSubstr("cfg.yaml:2:13: error: activation: unknown value "
                        "'silu'; expected one of gelu, gelu_exact, relu, "
                        "swiglu"));
  EXPECT_THAT(parseError("preset: gpt2\nnorm: batchnorm\n"),
              HasSubstr("cfg.yaml:2:7: error: norm: unknown value "
                        "'batchnorm'; expected one of layernorm, rmsnorm"));
  EXPECT_THAT(parseError("preset: gpt2\nposition: alibi\n"),
              HasSubstr("cfg.yaml:2:11: error: position: unknown value "
                        "'alibi'; expected one of learned, rope"));
}

TEST(ModelConfigErrors, UnknownPresetListsKnownNames) {
  EXPECT_THAT(parseError("preset: gpt3\n"),
              HasSubstr("cfg.yaml:1:9: error: preset: unknown preset 'gpt3'; "
                        "did you mean 'gpt2'? presets: gpt2, gpt2-medium, "
                        "gpt2-large, gpt2-xl, opt-125m, opt-1.3b, llama-7b"));
  // No near miss: the list alone. Case differences are near misses.
  EXPECT_THAT(parseError("preset: falcon-40b\n"),
              HasSubstr("unknown preset 'falcon-40b'; presets: gpt2,"));
  EXPECT_THAT(parseError("preset: GPT2-XL\n"),
              HasSubstr("did you mean 'gpt2-xl'?"));
}

TEST(ModelConfigErrors, EmptyDocument) {
  EXPECT_THAT(parseError(""), HasSubstr("cfg.yaml:1:1: error: empty document"));
  EXPECT_THAT(parseError("# nothing but a comment\n"),
              HasSubstr("cfg.yaml:1:1: error: empty document"));
}

TEST(ModelConfigErrors, TopLevelNotAMapping) {
  EXPECT_THAT(parseError("- n_layer\n- n_head\n"),
              HasSubstr("cfg.yaml:1:1: error: expected a mapping of model "
                        "config keys at the top level, got a sequence"));
  EXPECT_THAT(parseError("\ngpt2\n"),
              HasSubstr("cfg.yaml:2:1: error: expected a mapping of model "
                        "config keys at the top level, got a scalar"));
}

TEST(ModelConfigErrors, MultipleDocuments) {
  EXPECT_THAT(parseError("preset: gpt2\n---\npreset: opt-125m\n"),
              HasSubstr("cfg.yaml:3:1: error: expected a single YAML "
                        "document"));
  // A trailing empty document is not a second config.
  EXPECT_EQ(parseOk("preset: gpt2\n---\n"), *getModelPreset("gpt2"));
}

TEST(ModelConfigErrors, YamlSyntaxErrorsAreCapturedNotPrinted) {
  ::testing::internal::CaptureStderr();
  std::string unterminated = parseError("preset: gpt2\nname: 'oops\n");
  std::string badFlow = parseError("preset: gpt2\nn_layer: [1, 2\n");
  std::string badIndent = parseError("preset: gpt2\n  n_layer: 3\n");
  std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "");
  EXPECT_THAT(unterminated, HasSubstr("cfg.yaml:2:"));
  EXPECT_THAT(unterminated, HasSubstr("error: "));
  EXPECT_THAT(badFlow, HasSubstr("cfg.yaml:"));
  EXPECT_THAT(badFlow, HasSubstr("error: "));
  EXPECT_THAT(badIndent, HasSubstr("cfg.yaml:2:"));
  EXPECT_THAT(badIndent, HasSubstr("error: "));
}

TEST(ModelConfigErrors, MissingRequiredKeys) {
  EXPECT_THAT(parseError("n_layer: 2\nn_head: 2\nn_embd: 8\nvocab_size: 10\n",
                         "models/small.yaml"),
              HasSubstr("models/small.yaml:1:1: error: missing required key "
                        "'seq_len' (no preset given)"));
  EXPECT_THAT(parseError("\nname: x\nn_layer: 2\n"),
              HasSubstr("cfg.yaml:2:1: error: missing required keys 'n_head', "
                        "'n_embd', 'seq_len', 'vocab_size' (no preset given)"));
}

TEST(ModelConfigErrors, DivisibilityBlamesTheKeyInTheFile) {
  // Only n_head was written, so the caret goes there.
  EXPECT_THAT(parseError("preset: gpt2\nn_head: 10\n"),
              HasSubstr("cfg.yaml:2:9: error: n_head: n_embd (768) is not "
                        "divisible by 10"));
  // Both written: n_embd wins.
  EXPECT_THAT(parseError("n_layer: 1\nn_head: 3\nn_embd: 8\nseq_len: 4\n"
                         "vocab_size: 4\n"),
              HasSubstr("cfg.yaml:3:9: error: n_embd: 8 is not divisible by "
                        "n_head (3)"));
}

TEST(ModelConfigErrors, RopeNeedsEvenHeadDim) {
  EXPECT_THAT(parseError("n_layer: 1\nn_head: 2\nn_embd: 6\nseq_len: 8\n"
                         "vocab_size: 16\nposition: rope\n"),
              HasSubstr("cfg.yaml:3:9: error: n_embd: head dimension "
                        "n_embd/n_head = 6/2 = 3 must be even for position "
                        "'rope'"));
  EXPECT_THAT(parseError("preset: gpt2\nposition: rope\nn_head: 256\n"),
              HasSubstr("cfg.yaml:3:9: error: n_head: head dimension "
                        "n_embd/n_head = 768/256 = 3 must be even"));
  // The same head count is fine with learned positions.
  EXPECT_EQ(parseOk("preset: gpt2\nn_head: 256\n").headDim(), 3);
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

TEST(ModelConfigFile, MissingFileNamesPathAndReason) {
  llvm::Expected<ModelConfig> result =
      loadModelConfigFile("/nonexistent/llmc/model.yaml");
  ASSERT_FALSE(static_cast<bool>(result));
  std::string err = llvm::toString(result.takeError());
  EXPECT_THAT(err, HasSubstr("/nonexistent/llmc/model.yaml"));
  EXPECT_THAT(err, HasSubstr("No such file or directory"));
}

TEST(ModelConfigFile, LoadsAndReportsErrorsWithPath) {
  llvm::SmallString<128> path;
  int fd = -1;
  ASSERT_FALSE(
      llvm::sys::fs::createTemporaryFile("llmc-tiny", "yaml", fd, path));
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << "n_layer: 2\nn_head: 2\nn_embd: 16\nseq_len: 32\nvocab_size: 64\n";
  }
  llvm::Expected<ModelConfig> loaded = loadModelConfigFile(path);
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->name, llvm::sys::path::stem(path).str());
  EXPECT_EQ(loaded->nEmbd, 16);
  EXPECT_EQ(loaded->ffnHidden, 64);

  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << "preset: gpt2\nn_layer: many\n";
  }
  llvm::Expected<ModelConfig> bad = loadModelConfigFile(path);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_THAT(llvm::toString(bad.takeError()),
              HasSubstr((path + ":2:10: error: n_layer").str()));
  llvm::sys::fs::remove(path);
}

} // namespace
