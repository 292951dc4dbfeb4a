// Model config presets, YAML parsing (via frontend/ConfigYaml.h) and printing.
#include "frontend/ModelConfig.h"

#include "frontend/ConfigYaml.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

using namespace llvm;

namespace mlir {
namespace llmc {

StringRef stringifyActivation(Activation activation) {
  switch (activation) {
  case Activation::Gelu:
    return "gelu";
  case Activation::GeluExact:
    return "gelu_exact";
  case Activation::Relu:
    return "relu";
  case Activation::SwiGlu:
    return "swiglu";
  }
  llvm_unreachable("unknown activation");
}

StringRef stringifyNorm(Norm norm) {
  switch (norm) {
  case Norm::LayerNorm:
    return "layernorm";
  case Norm::RmsNorm:
    return "rmsnorm";
  }
  llvm_unreachable("unknown norm");
}

StringRef stringifyPosition(Position position) {
  switch (position) {
  case Position::Learned:
    return "learned";
  case Position::Rope:
    return "rope";
  }
  llvm_unreachable("unknown position");
}

int64_t getDefaultFfnHidden(int64_t nEmbd, Activation activation) {
  if (activation != Activation::SwiGlu)
    return 4 * nEmbd;
  // SwiGLU has three projections instead of two, so Llama shrinks the width
  // by 2/3 to keep the parameter count, then rounds up for efficient tiling.
  int64_t hidden = (2 * (4 * nEmbd)) / 3;
  return alignTo(hidden, 256);
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

namespace {
enum class Family { Gpt2, Opt, Llama };

struct PresetSpec {
  StringRef name;
  int64_t nLayer, nHead, nEmbd, seqLen, vocabSize;
  Family family;
};

constexpr PresetSpec kPresets[] = {
    {"gpt2", 12, 12, 768, 1024, 50257, Family::Gpt2},
    {"gpt2-medium", 24, 16, 1024, 1024, 50257, Family::Gpt2},
    {"gpt2-large", 36, 20, 1280, 1024, 50257, Family::Gpt2},
    {"gpt2-xl", 48, 25, 1600, 1024, 50257, Family::Gpt2},
    {"opt-125m", 12, 12, 768, 2048, 50272, Family::Opt},
    {"opt-1.3b", 24, 32, 2048, 2048, 50272, Family::Opt},
    {"llama-7b", 32, 32, 4096, 2048, 32000, Family::Llama},
};

ModelConfig buildPreset(const PresetSpec &spec) {
  ModelConfig config;
  config.name = spec.name.str();
  config.nLayer = spec.nLayer;
  config.nHead = spec.nHead;
  config.nEmbd = spec.nEmbd;
  config.seqLen = spec.seqLen;
  config.vocabSize = spec.vocabSize;
  switch (spec.family) {
  case Family::Gpt2:
    break;
  case Family::Opt:
    config.activation = Activation::Relu;
    break;
  case Family::Llama:
    config.activation = Activation::SwiGlu;
    config.norm = Norm::RmsNorm;
    config.position = Position::Rope;
    config.tieEmbeddings = false;
    config.bias = false;
    config.normEps = 1e-6;
    break;
  }
  config.ffnHidden = getDefaultFfnHidden(config.nEmbd, config.activation);
  return config;
}
} // namespace

std::optional<ModelConfig> getModelPreset(StringRef name) {
  for (const PresetSpec &spec : kPresets)
    if (spec.name == name)
      return buildPreset(spec);
  return std::nullopt;
}

std::string describePresetsFor(StringRef name) {
  std::string list = "presets: " + join(getModelPresetNames(), ", ");
  StringRef best = closestName(name, getModelPresetNames());
  return best.empty() ? list : "did you mean '" + best.str() + "'? " + list;
}

ArrayRef<StringRef> getModelPresetNames() {
  static const auto names = [] {
    std::array<StringRef, std::size(kPresets)> result;
    for (auto [i, spec] : enumerate(kPresets))
      result[i] = spec.name;
    return result;
  }();
  return names;
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {
// Bounding every dimension at int32 keeps products such as
// vocab_size * n_embd and derived widths well inside int64.
constexpr uint64_t kMaxDim = 2147483647;

enum class Key {
  Preset,
  Name,
  NLayer,
  NHead,
  NEmbd,
  SeqLen,
  VocabSize,
  FfnHidden,
  Activation,
  Norm,
  NormEps,
  Position,
  RopeTheta,
  TieEmbeddings,
  Bias,
  Dropout,
};

// Enum values are dense from 0, so the last enumerator gives the count.
constexpr unsigned kNumActivations =
    static_cast<unsigned>(Activation::SwiGlu) + 1;
constexpr unsigned kNumNorms = static_cast<unsigned>(Norm::RmsNorm) + 1;
constexpr unsigned kNumPositions = static_cast<unsigned>(Position::Rope) + 1;

constexpr StringRef kKeyNames[] = {
    "preset",     "name",           "n_layer",    "n_head",
    "n_embd",     "seq_len",        "vocab_size", "ffn_hidden",
    "activation", "norm",           "norm_eps",   "position",
    "rope_theta", "tie_embeddings", "bias",       "dropout",
};
constexpr size_t kNumKeys = std::size(kKeyNames);

StringRef keyName(Key key) { return kKeyNames[static_cast<size_t>(key)]; }

std::optional<Key> lookupKey(StringRef name) {
  for (auto [i, known] : enumerate(kKeyNames))
    if (known == name)
      return static_cast<Key>(i);
  return std::nullopt;
}

/// One key given in the file.
struct Entry {
  const config::YNode *key = nullptr;
  const config::YNode *value = nullptr;
  /// Where an error about this key points; a key not given points at the
  /// start of the file.
  SMRange valueRange() const {
    return key ? config::valueRange(*key, *value) : SMRange();
  }
};

class ConfigParser {
public:
  explicit ConfigParser(const config::YamlFile &file) : file(file) {}

  Expected<ModelConfig> parse(const config::YNode &mapping);

private:
  Error error(SMRange range, const Twine &message) const {
    return file.error(range, message);
  }
  Error applyKey(Key key, ModelConfig &config);
  Error validate(const ModelConfig &config) const;

  Expected<StringRef> getScalar(Key key, const Twine &expected) const {
    return config::getScalar(file, keyName(key), *entry(key).key,
                             *entry(key).value, expected);
  }
  Expected<int64_t> getPositiveInt(Key key);
  Expected<double> getNumber(Key key, bool (*inRange)(double),
                             StringRef rangeDescription);
  Expected<bool> getBool(Key key);
  template <typename E>
  Expected<E> getEnum(Key key, StringRef (*stringify)(E), unsigned count);

  bool given(Key key) const { return entries[static_cast<size_t>(key)].value; }
  const Entry &entry(Key key) const {
    return entries[static_cast<size_t>(key)];
  }

  const config::YamlFile &file;
  std::array<Entry, kNumKeys> entries;
};

Expected<int64_t> ConfigParser::getPositiveInt(Key key) {
  Expected<StringRef> text = getScalar(key, "a positive integer");
  if (!text)
    return text.takeError();
  SMRange range = entry(key).valueRange();
  std::string notPositive =
      (keyName(key) + ": expected a positive integer, got '" + *text + "'")
          .str();
  if (text->empty() || !all_of(*text, isDigit))
    return error(range, notPositive);
  // All digits yet unparseable means it overflowed uint64.
  uint64_t value = 0;
  if (text->getAsInteger(10, value) || value > kMaxDim)
    return error(range, keyName(key) + ": " + *text +
                            " is out of range (maximum " + Twine(kMaxDim) +
                            ")");
  if (value == 0)
    return error(range, notPositive);
  return static_cast<int64_t>(value);
}

Expected<double> ConfigParser::getNumber(Key key, bool (*inRange)(double),
                                         StringRef rangeDescription) {
  Expected<StringRef> text = getScalar(key, "a number");
  if (!text)
    return text.takeError();
  SMRange range = entry(key).valueRange();
  double value = 0;
  if (text->trim().empty() || text->getAsDouble(value) || !std::isfinite(value))
    return error(range, keyName(key) + ": expected a finite number, got '" +
                            *text + "'");
  if (!inRange(value))
    return error(range, keyName(key) + ": " + *text +
                            " is out of range; expected a value " +
                            rangeDescription);
  return value;
}

Expected<bool> ConfigParser::getBool(Key key) {
  Expected<StringRef> text = getScalar(key, "true or false");
  if (!text)
    return text.takeError();
  if (*text == "true")
    return true;
  if (*text == "false")
    return false;
  return error(entry(key).valueRange(),
               keyName(key) + ": expected true or false, got '" + *text + "'");
}

template <typename E>
Expected<E> ConfigParser::getEnum(Key key, StringRef (*stringify)(E),
                                  unsigned count) {
  std::string allowed = listEnumNames(stringify, count);
  Expected<StringRef> text = getScalar(key, "one of " + allowed);
  if (!text)
    return text.takeError();
  if (std::optional<E> value = config::parseEnumName(*text, stringify, count))
    return *value;
  return error(entry(key).valueRange(), keyName(key) + ": unknown value '" +
                                            *text + "'; expected one of " +
                                            allowed);
}

Error ConfigParser::applyKey(Key key, ModelConfig &config) {
  SMRange range = entry(key).valueRange();
  auto assignInt = [&](int64_t &field) -> Error {
    Expected<int64_t> value = getPositiveInt(key);
    if (!value)
      return value.takeError();
    field = *value;
    return Error::success();
  };

  switch (key) {
  case Key::Preset: {
    Expected<StringRef> text = getScalar(key, "a preset name");
    if (!text)
      return text.takeError();
    std::optional<ModelConfig> preset = getModelPreset(*text);
    if (!preset)
      return error(
          range, "preset: unknown preset '" + *text + "'; " +
                     describePresetsFor(*text));
    config = std::move(*preset);
    return Error::success();
  }
  case Key::Name: {
    Expected<StringRef> text = getScalar(key, "a string");
    if (!text)
      return text.takeError();
    if (text->empty())
      return error(range, "name: must not be empty");
    config.name = text->str();
    return Error::success();
  }
  case Key::NLayer:
    return assignInt(config.nLayer);
  case Key::NHead:
    return assignInt(config.nHead);
  case Key::NEmbd:
    return assignInt(config.nEmbd);
  case Key::SeqLen:
    return assignInt(config.seqLen);
  case Key::VocabSize:
    return assignInt(config.vocabSize);
  case Key::FfnHidden:
    return assignInt(config.ffnHidden);
  case Key::Activation: {
    Expected<Activation> value =
        getEnum(key, stringifyActivation, kNumActivations);
    if (!value)
      return value.takeError();
    config.activation = *value;
    return Error::success();
  }
  case Key::Norm: {
    Expected<Norm> value = getEnum(key, stringifyNorm, kNumNorms);
    if (!value)
      return value.takeError();
    config.norm = *value;
    return Error::success();
  }
  case Key::Position: {
    Expected<Position> value = getEnum(key, stringifyPosition, kNumPositions);
    if (!value)
      return value.takeError();
    config.position = *value;
    return Error::success();
  }
  case Key::NormEps:
  case Key::RopeTheta: {
    Expected<double> value = getNumber(
        key, [](double v) { return v > 0; }, "> 0");
    if (!value)
      return value.takeError();
    (key == Key::NormEps ? config.normEps : config.ropeTheta) = *value;
    return Error::success();
  }
  case Key::Dropout: {
    Expected<double> value = getNumber(
        key, [](double v) { return v >= 0 && v < 1; }, "in [0, 1)");
    if (!value)
      return value.takeError();
    config.dropout = *value;
    return Error::success();
  }
  case Key::TieEmbeddings:
  case Key::Bias: {
    Expected<bool> value = getBool(key);
    if (!value)
      return value.takeError();
    (key == Key::Bias ? config.bias : config.tieEmbeddings) = *value;
    return Error::success();
  }
  }
  llvm_unreachable("unknown key");
}

Error ConfigParser::validate(const ModelConfig &config) const {
  // Blame the first key the user actually wrote, so the caret lands on
  // something they can edit.
  auto blame = [&](ArrayRef<Key> candidates) -> Key {
    for (Key key : candidates)
      if (given(key))
        return key;
    return candidates.back();
  };

  if (config.nEmbd % config.nHead != 0) {
    Key key = blame({Key::NEmbd, Key::NHead, Key::Preset});
    std::string message;
    if (key == Key::NEmbd)
      message = formatv("n_embd: {0} is not divisible by n_head ({1})",
                        config.nEmbd, config.nHead)
                    .str();
    else if (key == Key::NHead)
      message = formatv("n_head: n_embd ({0}) is not divisible by {1}",
                        config.nEmbd, config.nHead)
                    .str();
    else
      message = formatv("preset: n_embd ({0}) is not divisible by n_head ({1})",
                        config.nEmbd, config.nHead)
                    .str();
    return error(entry(key).valueRange(), message);
  }

  if (config.position == Position::Rope && config.headDim() % 2 != 0) {
    // RoPE rotates pairs of channels, so each head needs an even width.
    Key key = blame({Key::NEmbd, Key::NHead, Key::Position, Key::Preset});
    return error(entry(key).valueRange(),
                 formatv("{0}: head dimension n_embd/n_head = {1}/{2} = {3} "
                         "must be even for position 'rope'",
                         keyName(key), config.nEmbd, config.nHead,
                         config.headDim()));
  }
  return Error::success();
}

Expected<ModelConfig> ConfigParser::parse(const config::YNode &mapping) {
  config::KeyRules rules;
  rules.known = kKeyNames;
  if (Error err = config::forEachKey(
          file, mapping, rules,
          [&](StringRef name, const config::YNode &key,
              const config::YNode &value) -> Error {
            entries[static_cast<size_t>(*lookupKey(name))] = {&key, &value};
            return Error::success();
          }))
    return err;

  // The preset is the base that every other key overrides, whatever the
  // order in the file: Key::Preset comes first, so it is applied first.
  ModelConfig config;
  for (size_t i = 0; i < kNumKeys; ++i)
    if (entries[i].value)
      if (Error err = applyKey(static_cast<Key>(i), config))
        return err;

  if (!given(Key::Preset)) {
    SmallVector<StringRef> missing;
    for (Key key :
         {Key::NLayer, Key::NHead, Key::NEmbd, Key::SeqLen, Key::VocabSize})
      if (!given(key))
        missing.push_back(keyName(key));
    if (!missing.empty())
      return error(mapping.range,
                   Twine("missing required key") +
                       (missing.size() > 1 ? "s " : " ") + "'" +
                       join(missing, "', '") + "' (no preset given)");
    StringRef stem = sys::path::stem(file.bufferName());
    if (!given(Key::Name))
      config.name = stem.empty() ? "model" : stem.str();
  }

  // An explicit ffn_hidden wins; otherwise derive it whenever the inputs of
  // the rule may have changed from the preset's.
  if (!given(Key::FfnHidden) &&
      (!given(Key::Preset) || given(Key::NEmbd) || given(Key::Activation)))
    config.ffnHidden = getDefaultFfnHidden(config.nEmbd, config.activation);

  if (Error err = validate(config))
    return err;
  if (Error err = file.singleDocument())
    return err;
  return config;
}
} // namespace

Expected<ModelConfig> parseModelConfig(StringRef text, StringRef bufferName) {
  config::YamlFile file(text, bufferName);
  Expected<const config::YNode *> root = file.root("model config keys");
  if (!root)
    return root.takeError();
  return ConfigParser(file).parse(**root);
}

Expected<ModelConfig> loadModelConfigFile(StringRef path) {
  Expected<std::unique_ptr<MemoryBuffer>> file =
      config::readFile(path, "model config");
  if (!file)
    return file.takeError();
  return parseModelConfig((*file)->getBuffer(), path);
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {
/// Shortest decimal form that reads back to exactly `value`.
std::string formatDouble(double value) {
  char buf[40];
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  return buf;
}
} // namespace

void printModelConfig(const ModelConfig &config, raw_ostream &os) {
  os << "name: \"" << yaml::escape(config.name) << "\"\n";
  os << "n_layer: " << config.nLayer << "\n";
  os << "n_head: " << config.nHead << "\n";
  os << "n_embd: " << config.nEmbd << "\n";
  os << "seq_len: " << config.seqLen << "\n";
  os << "vocab_size: " << config.vocabSize << "\n";
  os << "ffn_hidden: " << config.ffnHidden << "\n";
  os << "activation: " << stringifyActivation(config.activation) << "\n";
  os << "norm: " << stringifyNorm(config.norm) << "\n";
  os << "norm_eps: " << formatDouble(config.normEps) << "\n";
  os << "position: " << stringifyPosition(config.position) << "\n";
  os << "rope_theta: " << formatDouble(config.ropeTheta) << "\n";
  os << "tie_embeddings: " << (config.tieEmbeddings ? "true" : "false") << "\n";
  os << "bias: " << (config.bias ? "true" : "false") << "\n";
  os << "dropout: " << formatDouble(config.dropout) << "\n";
}

bool operator==(const ModelConfig &lhs, const ModelConfig &rhs) {
  return lhs.name == rhs.name && lhs.nLayer == rhs.nLayer &&
         lhs.nHead == rhs.nHead && lhs.nEmbd == rhs.nEmbd &&
         lhs.seqLen == rhs.seqLen && lhs.vocabSize == rhs.vocabSize &&
         lhs.ffnHidden == rhs.ffnHidden && lhs.activation == rhs.activation &&
         lhs.norm == rhs.norm && lhs.position == rhs.position &&
         lhs.tieEmbeddings == rhs.tieEmbeddings && lhs.bias == rhs.bias &&
         lhs.dropout == rhs.dropout && lhs.normEps == rhs.normEps &&
         lhs.ropeTheta == rhs.ropeTheta;
}

} // namespace llmc
} // namespace mlir

llvm::Expected<mlir::llmc::ModelConfig>
mlir::llmc::parseModelConfigJson(llvm::StringRef json, llvm::StringRef what) {
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(json);
  if (!value)
    return llvm::createStringError(what + ": the model config is not JSON: " +
                                   llvm::toString(value.takeError()));
  llvm::json::Object *object = value->getAsObject();
  if (!object)
    return llvm::createStringError(what +
                                   ": the model config is not a JSON object");
  object->erase("batch");
  // JSON is YAML (flow style): the one schema reads it.
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(*object));
  return parseModelConfig(os.str(), what);
}
