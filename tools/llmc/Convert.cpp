// `llmc convert`: checkpoint -> safetensors (Hugging Face or llmc names) or
// llm.c checkpoint. The parameter set comes from the model the checkpoint's
// config describes, built by GptBuilder; the names from runtime/HuggingFace.
#include "tools/llmc/Convert.h"

#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "frontend/ModelInfo.h"
#include "runtime/Weights/Checkpoint.h"
#include "runtime/Weights/HuggingFace.h"
#include "runtime/Weights/Sparsity.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::llmc;
namespace rt = ::llmc::runtime;
using ::llmc::kir::DType;
using llvm::createStringError;

namespace {
/// The parameters of a checkpoint with the model they belong to.
struct TrainedModel {
  rt::TensorMap params;
  std::string modelJson; // the llmc.model config, without name and batch
  int64_t step = 0;
  int64_t numParameters = 0;
  std::vector<std::string> sparseSelected; // weights with a sparsity mask
};
} // namespace

/// Reads `path` (its ZeRO rank files joined) and picks out the parameters
/// of the model its config section records.
static llvm::Expected<TrainedModel> readTrainedModel(MLIRContext &context,
                                                     llvm::StringRef path) {
  llvm::Expected<rt::Checkpoint> checkpoint = rt::readFullCheckpoint(path);
  if (!checkpoint)
    return checkpoint.takeError();
  auto section = checkpoint->config.find("model");
  if (section == checkpoint->config.end())
    return createStringError("'" + path +
                             "' records no model config (no 'model' section)");
  if (llvm::StringRef(section->second).starts_with("mlir_bytes:"))
    return createStringError(
        "'" + path +
        "' is a checkpoint of a model given as .mlir, whose config it does "
        "not record (only a hash of the file); convert needs a model from a "
        "preset or a YAML config");
  // Checkpoints record the model with an empty name (a renamed model is
  // the same model), which a config may not have; the name is not written.
  std::string text = section->second;
  if (llvm::StringRef(text).starts_with("name: \"\"\n"))
    text.replace(0, llvm::StringRef("name: \"\"").size(), "name: model");
  llvm::Expected<ModelConfig> config =
      parseModelConfig(text, (path + " (model section)").str());
  if (!config)
    return config.takeError();
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      buildForwardModule(context, *config, {1, config->seqLen});
  if (!module)
    return createStringError("'" + path + "': " +
                             llvm::toString(module.takeError()));

  TrainedModel model;
  model.step = checkpoint->step;
  ModelInfo info = getModelInfo(**module);
  for (const ParameterInfo &param : info.parameters) {
    auto it = checkpoint->tensors.find(param.name);
    if (it == checkpoint->tensors.end())
      return createStringError("'" + path + "' has no parameter '" +
                               param.name + "' of the model it records");
    std::vector<int64_t> shape(param.type.getShape());
    if (it->second.shape != shape)
      return createStringError(
          "'" + path + "': parameter '" + param.name + "' has shape " +
          ::llmc::kir::formatShape(it->second.shape) + ", its model expects " +
          ::llmc::kir::formatShape(shape));
    model.params[param.name] = std::move(it->second);
    if (checkpoint->tensors.count(
            (llvm::Twine(rt::kSparsityMaskPrefix) + param.name).str()))
      model.sparseSelected.push_back(param.name);
  }
  model.numParameters = info.numParameters;
  // The name is not kept in checkpoints and the batch is a compile shape:
  // neither is a property of the weights.
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse(modelConfigJson(**module));
  if (!json)
    return json.takeError();
  json->getAsObject()->erase("name");
  json->getAsObject()->erase("batch");
  llvm::raw_string_ostream(model.modelJson) << *json;
  return model;
}

static llvm::StringRef dtypeLabel(DType dtype) {
  return dtype == DType::BF16 ? "bf16" : dtype == DType::F16 ? "fp16" : "fp32";
}

llvm::Error mlir::llmc::convertCheckpoint(MLIRContext &context,
                                          const ConvertOptions &options,
                                          llvm::raw_ostream &os) {
  // Everything about the output is checked before the input is read.
  llvm::StringRef out = options.output;
  llvm::StringRef ext = llvm::sys::path::extension(out);
  bool bin = ext == ".bin";
  if (ext != ".safetensors" && !bin)
    return createStringError(
        "'" + out + "': unknown output extension '" + ext +
        "' (.safetensors: the parameters under Hugging Face names; .bin: an "
        "llm.c checkpoint)");
  std::optional<DType> dtype =
      options.precision == "fp32"   ? std::optional(DType::F32)
      : options.precision == "bf16" ? std::optional(DType::BF16)
      : options.precision == "fp16" ? std::optional(DType::F16)
                                    : std::nullopt;
  if (!dtype)
    return createStringError("--precision: unknown precision '" +
                             options.precision + "' (fp32, bf16, fp16)");
  if (options.names != "hf" && options.names != "llmc")
    return createStringError("--names: unknown naming '" + options.names +
                             "' (hf, llmc)");
  if (bin && *dtype == DType::F16)
    return createStringError("'" + out +
                             "': llm.c checkpoints are fp32 (version 3) or "
                             "bf16 (version 5), not fp16");
  if (bin && options.names != "hf")
    return createStringError("--names applies to .safetensors output; an "
                             "llm.c checkpoint has its own layout");
  if (options.sparse && (bin || options.names != "llmc" || *dtype != DType::F32))
    return createStringError("--sparse writes the compressed 2:4 layout into "
                             "a .safetensors file with --names llmc and "
                             "--precision fp32");

  llvm::Expected<TrainedModel> model =
      readTrainedModel(context, options.input);
  if (!model)
    return model.takeError();
  llvm::StringRef in = options.input;
  // A model without a Hugging Face layout is not a GPT-2 either.
  llvm::Expected<rt::HfModel> hf = rt::hfModelOf(model->modelJson);

  if (bin) {
    bool gpt2 = hf && hf->architecture == rt::HfArchitecture::Gpt2 &&
                hf->activation == "gelu" && hf->tieEmbeddings &&
                hf->ffnHidden == 4 * hf->nEmbd;
    if (!gpt2) {
      if (!hf)
        llvm::consumeError(hf.takeError());
      return createStringError(
          "'" + in +
          "': llm.c checkpoints hold GPT-2 only (layernorm, tanh GELU, "
          "learned positions, biases, tied embeddings, ffn_hidden = "
          "4*n_embd), and this model is not one (its config: " +
          model->modelJson + "); write a .safetensors file instead");
    }
    rt::Gpt2Dims dims{hf->nLayer, hf->nHead, hf->nEmbd, hf->seqLen,
                      hf->vocabSize};
    if (llvm::Error error = rt::writeLlmcCheckpoint(
            out, dims, model->params,
            *dtype == DType::BF16 ? rt::LlmcCheckpointFormat::BF16
                                  : rt::LlmcCheckpointFormat::F32))
      return error;
    os << llvm::formatv("wrote {0}: llm.c GPT-2 checkpoint (version {1}, "
                        "{2}), {3} parameters, step {4} of {5}\n",
                        out, *dtype == DType::BF16 ? 5 : 3, dtypeLabel(*dtype),
                        model->numParameters, model->step, in);
    return llvm::Error::success();
  }

  rt::SafetensorsFile file;
  file.metadata["format"] = "pt"; // what transformers' loader asks for
  file.metadata["llmc.model"] = model->modelJson;
  file.metadata["llmc.step"] = std::to_string(model->step);
  std::string naming;
  if (options.names == "hf") {
    if (!hf)
      return createStringError("'" + in + "': " +
                               llvm::toString(hf.takeError()) +
                               "; --names llmc writes llmc's own names");
    llvm::Expected<rt::TensorMap> renamed =
        rt::toHuggingFace(model->params, *hf);
    if (!renamed)
      return createStringError("'" + in + "': " +
                               llvm::toString(renamed.takeError()));
    file.tensors = std::move(*renamed);
    naming = hf->architecture == rt::HfArchitecture::Gpt2 ? "hf-gpt2"
                                                          : "hf-llama";
    file.metadata["hf_config"] = rt::hfConfigJson(
        *hf, *dtype == DType::F32    ? "float32"
             : *dtype == DType::BF16 ? "bfloat16"
                                     : "float16");
  } else {
    if (!hf)
      llvm::consumeError(hf.takeError());
    file.tensors = std::move(model->params);
    naming = "llmc";
  }
  file.metadata["llmc.names"] = naming;
  for (auto &entry : file.tensors)
    entry.second = rt::castFloatTensor(entry.second, *dtype);
  if (options.sparse) {
    if (model->sparseSelected.empty())
      return createStringError(
          "--sparse: '" + in + "' has no weight selected for 2:4 (no " +
          rt::kSparsityMaskPrefix + " state: a dense run)");
    for (const std::string &name : model->sparseSelected)
      if (llvm::Error error = rt::compressTensorTwoOfFour(file.tensors, name))
        return createStringError("--sparse: '" + in + "': " +
                                 llvm::toString(std::move(error)));
  }
  if (llvm::Error error = rt::writeSafetensors(out, file))
    return error;
  if (options.sparse)
    os << llvm::formatv("2:4 compressed: {0} weights\n",
                        model->sparseSelected.size());
  os << llvm::formatv("wrote {0}: {1} tensors, {2} parameters, {3} names, "
                      "{4}, step {5} of {6}\n",
                      out, file.tensors.size(), model->numParameters,
                      naming == "hf-gpt2"    ? "Hugging Face GPT-2"
                      : naming == "hf-llama" ? "Hugging Face Llama"
                                             : "llmc",
                      dtypeLabel(*dtype), model->step, in);
  return llvm::Error::success();
}
