// llmc parameters <-> Hugging Face GPT-2 and Llama tensors, from one table.
#include "runtime/Weights/HuggingFace.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/JSON.h"

#include <cstring>
#include <map>

using namespace llmc;
using namespace llmc::runtime;
using llvm::createStringError;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

StringRef runtime::hfArchitectureName(HfArchitecture architecture) {
  return architecture == HfArchitecture::Gpt2 ? "Hugging Face GPT-2"
                                              : "Hugging Face Llama";
}

Expected<HfModel> runtime::hfModelOf(StringRef modelJson) {
  Expected<llvm::json::Value> json = llvm::json::parse(modelJson);
  if (!json) {
    llvm::consumeError(json.takeError());
    return createStringError("the model records no config (it was compiled "
                             "from a model.mlir without an llmc.model "
                             "attribute)");
  }
  const llvm::json::Object *object = json->getAsObject();
  if (!object)
    return createStringError("the model's config is not a JSON object");
  HfModel model;
  for (auto [key, field] : {std::pair<const char *, int64_t *>{
                                "n_layer", &model.nLayer},
                            {"n_head", &model.nHead},
                            {"n_embd", &model.nEmbd},
                            {"ffn_hidden", &model.ffnHidden},
                            {"vocab_size", &model.vocabSize},
                            {"seq_len", &model.seqLen}}) {
    std::optional<int64_t> value = object->getInteger(key);
    if (!value || *value <= 0)
      return createStringError(Twine("the model's config has no positive '") +
                               key + "'");
    *field = *value;
  }
  std::string norm, position;
  for (auto [key, field] : {std::pair<const char *, std::string *>{
                                "activation", &model.activation},
                            {"norm", &norm},
                            {"position", &position}}) {
    std::optional<StringRef> value = object->getString(key);
    if (!value)
      return createStringError(Twine("the model's config has no '") + key +
                               "'");
    *field = value->str();
  }
  for (auto [key, field] : {std::pair<const char *, bool *>{
                                "tie_embeddings", &model.tieEmbeddings},
                            {"bias", &model.bias}}) {
    std::optional<bool> value = object->getBoolean(key);
    if (!value)
      return createStringError(Twine("the model's config has no '") + key +
                               "'");
    *field = *value;
  }
  for (auto [key, field] : {std::pair<const char *, double *>{
                                "norm_eps", &model.normEps},
                            {"rope_theta", &model.ropeTheta},
                            {"dropout", &model.dropout}})
    if (std::optional<double> value = object->getNumber(key))
      *field = *value;

  std::string what = "norm " + norm + ", position " + position +
                     ", activation " + model.activation +
                     ", bias " + (model.bias ? "true" : "false");
  if (norm == "layernorm" && position == "learned" &&
      model.activation != "swiglu") {
    if (!model.bias)
      return createStringError(
          "the model (" + what +
          ") has no Hugging Face layout: GPT-2's linear layers and "
          "LayerNorms always carry a bias");
    model.architecture = HfArchitecture::Gpt2;
    return model;
  }
  if (norm == "rmsnorm" && position == "rope" &&
      model.activation == "swiglu") {
    model.architecture = HfArchitecture::Llama;
    return model;
  }
  return createStringError(
      "the model (" + what +
      ") has no Hugging Face layout: GPT-2 needs layernorm, learned "
      "positions and biases, Llama rmsnorm, rope and swiglu");
}

std::vector<HfTensor> runtime::hfTensors(const HfModel &m) {
  int64_t c = m.nEmbd, f = m.ffnHidden, v = m.vocabSize;
  std::vector<HfTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape,
                 std::string llmcName, HfTensor::Kind kind = HfTensor::Same,
                 int64_t rowBegin = 0) {
    out.push_back({std::move(name), std::move(shape), std::move(llmcName),
                   kind, rowBegin});
  };
  if (m.architecture == HfArchitecture::Gpt2) {
    add("wte.weight", {v, c}, "wte");
    add("wpe.weight", {m.seqLen, c}, "wpe");
    for (int64_t i = 0; i < m.nLayer; ++i) {
      std::string h = "h." + std::to_string(i);
      // Conv1D stores [in, out]: each llmc [out, in] weight transposed.
      auto linear = [&](const std::string &prefix, int64_t in, int64_t o) {
        add(prefix + ".weight", {in, o}, prefix + ".weight",
            HfTensor::Transposed);
        add(prefix + ".bias", {o}, prefix + ".bias");
      };
      auto norm = [&](const std::string &prefix) {
        add(prefix + ".weight", {c}, prefix + ".weight");
        add(prefix + ".bias", {c}, prefix + ".bias");
      };
      norm(h + ".ln_1");
      linear(h + ".attn.c_attn", c, 3 * c);
      linear(h + ".attn.c_proj", c, c);
      norm(h + ".ln_2");
      linear(h + ".mlp.c_fc", c, f);
      linear(h + ".mlp.c_proj", f, c);
    }
    add("ln_f.weight", {c}, "ln_f.weight");
    add("ln_f.bias", {c}, "ln_f.bias");
  } else {
    add("model.embed_tokens.weight", {v, c}, "wte");
    for (int64_t i = 0; i < m.nLayer; ++i) {
      std::string h = "h." + std::to_string(i);
      std::string l = "model.layers." + std::to_string(i);
      // One Hugging Face projection: rows [begin, begin + out) of an llmc
      // weight (and bias), or the whole of it.
      auto proj = [&](const std::string &name, const std::string &llmc,
                      int64_t in, int64_t o, int64_t begin, bool whole) {
        HfTensor::Kind kind = whole ? HfTensor::Same : HfTensor::Rows;
        add(name + ".weight", {o, in}, llmc + ".weight", kind, begin);
        if (m.bias)
          add(name + ".bias", {o}, llmc + ".bias", kind, begin);
      };
      add(l + ".input_layernorm.weight", {c}, h + ".ln_1.weight");
      proj(l + ".self_attn.q_proj", h + ".attn.c_attn", c, c, 0, false);
      proj(l + ".self_attn.k_proj", h + ".attn.c_attn", c, c, c, false);
      proj(l + ".self_attn.v_proj", h + ".attn.c_attn", c, c, 2 * c, false);
      proj(l + ".self_attn.o_proj", h + ".attn.c_proj", c, c, 0, true);
      add(l + ".post_attention_layernorm.weight", {c}, h + ".ln_2.weight");
      proj(l + ".mlp.gate_proj", h + ".mlp.c_fc", c, f, 0, false);
      proj(l + ".mlp.up_proj", h + ".mlp.c_fc", c, f, f, false);
      proj(l + ".mlp.down_proj", h + ".mlp.c_proj", f, c, 0, true);
    }
    add("model.norm.weight", {c}, "ln_f.weight");
  }
  if (!m.tieEmbeddings)
    add("lm_head.weight", {v, c}, "lm_head.weight");
  return out;
}

static int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The [rows, cols] matrix `t` as [cols, rows], for any element size.
static HostTensor transposed(const HostTensor &t) {
  int64_t rows = t.shape[0], cols = t.shape[1];
  size_t size = kir::dtypeBytes(t.dtype);
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = {cols, rows};
  out.bytes.resize(t.bytes.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col)
      std::memcpy(&out.bytes[(col * rows + r) * size],
                  &t.bytes[(r * cols + col) * size], size);
  return out;
}

/// The shape of the llmc tensor an entry lives in: reversed for a
/// transpose; for rows, the first dimension is that of all the entries of
/// the same llmc tensor together.
static std::map<std::string, std::vector<int64_t>>
llmcShapes(llvm::ArrayRef<HfTensor> table) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const HfTensor &t : table) {
    std::vector<int64_t> shape = t.shape;
    if (t.kind == HfTensor::Transposed)
      std::reverse(shape.begin(), shape.end());
    auto [it, inserted] = shapes.emplace(t.llmcName, shape);
    if (!inserted && t.kind == HfTensor::Rows)
      it->second[0] = std::max(it->second[0], t.rowBegin + t.shape[0]);
  }
  return shapes;
}

Expected<TensorMap> runtime::toHuggingFace(const TensorMap &params,
                                           const HfModel &model) {
  std::vector<HfTensor> table = hfTensors(model);
  std::map<std::string, std::vector<int64_t>> shapes = llmcShapes(table);
  for (const auto &[name, shape] : shapes) {
    auto it = params.find(name);
    if (it == params.end())
      return createStringError("no parameter '" + name + "' (" +
                               hfArchitectureName(model.architecture) +
                               " needs it)");
    if (it->second.shape != shape)
      return createStringError("parameter '" + name + "' has shape " +
                               kir::formatShape(it->second.shape) +
                               ", expected " + kir::formatShape(shape));
  }
  TensorMap out;
  for (const HfTensor &t : table) {
    const HostTensor &source = params.at(t.llmcName);
    HostTensor tensor;
    switch (t.kind) {
    case HfTensor::Same:
      tensor = source;
      break;
    case HfTensor::Transposed:
      tensor = transposed(source);
      break;
    case HfTensor::Rows: {
      size_t rowBytes =
          product(llvm::ArrayRef(source.shape).drop_front()) *
          kir::dtypeBytes(source.dtype);
      tensor.dtype = source.dtype;
      tensor.shape = t.shape;
      auto begin = source.bytes.begin() + t.rowBegin * rowBytes;
      tensor.bytes.assign(begin, begin + t.shape[0] * rowBytes);
      break;
    }
    }
    out[t.name] = std::move(tensor);
  }
  return out;
}

Expected<TensorMap> runtime::fromHuggingFace(const TensorMap &tensors,
                                             const HfModel &model,
                                             StringRef source) {
  std::vector<HfTensor> table = hfTensors(model);
  std::map<std::string, std::vector<int64_t>> shapes = llmcShapes(table);
  StringRef arch = hfArchitectureName(model.architecture);
  TensorMap out;
  for (const HfTensor &t : table) {
    auto it = tensors.find(t.name);
    if (it == tensors.end() && model.architecture == HfArchitecture::Gpt2)
      it = tensors.find("transformer." + t.name);
    if (it == tensors.end())
      return createStringError(source + ": no tensor '" + t.name + "' (the " +
                               arch + " name of llmc's '" + t.llmcName +
                               "')");
    const HostTensor &tensor = it->second;
    if (tensor.shape != t.shape)
      return createStringError(
          source + ": tensor '" + it->first + "' has shape " +
          kir::formatShape(tensor.shape) + ", the model expects " +
          kir::formatShape(t.shape) +
          (t.kind == HfTensor::Transposed ? " (Conv1D's [in, out])" : ""));
    if (!tensor.isFloat())
      return createStringError(source + ": tensor '" + it->first +
                               "' is not F32, F16 or BF16");
    switch (t.kind) {
    case HfTensor::Same:
      out[t.llmcName] = tensor;
      break;
    case HfTensor::Transposed:
      out[t.llmcName] = transposed(tensor);
      break;
    case HfTensor::Rows: {
      // The table lists the parts of one llmc tensor in row order.
      auto [slot, first] = out.try_emplace(t.llmcName);
      HostTensor &joined = slot->second;
      if (first) {
        joined.dtype = tensor.dtype;
        joined.shape = shapes.at(t.llmcName);
      } else if (joined.dtype != tensor.dtype) {
        return createStringError(source + ": tensor '" + it->first +
                                 "' is " + kir::dtypeName(tensor.dtype) +
                                 ", the other parts of llmc's '" +
                                 t.llmcName + "' are " +
                                 kir::dtypeName(joined.dtype));
      }
      joined.bytes.insert(joined.bytes.end(), tensor.bytes.begin(),
                          tensor.bytes.end());
      break;
    }
    }
  }
  return out;
}

std::optional<HfArchitecture>
runtime::detectHuggingFace(const TensorMap &tensors) {
  if (tensors.count("wte.weight") || tensors.count("transformer.wte.weight"))
    return HfArchitecture::Gpt2;
  if (tensors.count("model.embed_tokens.weight"))
    return HfArchitecture::Llama;
  return std::nullopt;
}

std::string runtime::hfConfigJson(const HfModel &m, StringRef dtype) {
  llvm::json::Object config;
  if (m.architecture == HfArchitecture::Gpt2) {
    // GPT-2's activation_function names: gelu_new is the tanh form.
    StringRef act = m.activation == "gelu"         ? "gelu_new"
                    : m.activation == "gelu_exact" ? "gelu"
                                                   : StringRef(m.activation);
    config = llvm::json::Object{
        {"architectures", llvm::json::Array{"GPT2LMHeadModel"}},
        {"model_type", "gpt2"},
        {"vocab_size", m.vocabSize},
        {"n_positions", m.seqLen},
        {"n_embd", m.nEmbd},
        {"n_layer", m.nLayer},
        {"n_head", m.nHead},
        {"n_inner", m.ffnHidden},
        {"activation_function", act},
        {"layer_norm_epsilon", m.normEps},
        {"resid_pdrop", m.dropout},
        {"embd_pdrop", m.dropout},
        {"attn_pdrop", 0.0},
        {"tie_word_embeddings", m.tieEmbeddings},
        {"torch_dtype", dtype}};
  } else {
    config = llvm::json::Object{
        {"architectures", llvm::json::Array{"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"vocab_size", m.vocabSize},
        {"max_position_embeddings", m.seqLen},
        {"hidden_size", m.nEmbd},
        {"intermediate_size", m.ffnHidden},
        {"num_hidden_layers", m.nLayer},
        {"num_attention_heads", m.nHead},
        {"num_key_value_heads", m.nHead},
        {"hidden_act", "silu"},
        {"rms_norm_eps", m.normEps},
        {"rope_theta", m.ropeTheta},
        {"attention_bias", m.bias},
        {"mlp_bias", m.bias},
        {"tie_word_embeddings", m.tieEmbeddings},
        {"torch_dtype", dtype}};
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(config));
  return text;
}
