// llmc's parameters under Hugging Face names and layouts (GPT-2 and Llama),
// both ways: what `llmc convert` writes and what the weights loader reads.
//
// llmc names every model's parameters GPT-2 style in nn.Linear layout
// ([out, in]): h.N.attn.c_attn.weight [3C, C] holds q, k and v; a SwiGLU
// model's h.N.mlp.c_fc.weight [2F, C] holds the gate and up projections.
//
//   Hugging Face GPT-2 (GPT2Model names, no "transformer." prefix, as in the
//   hub's gpt2/model.safetensors; GPT2LMHeadModel.from_pretrained adds the
//   prefix and ties lm_head): the same names plus ".weight" on wte and wpe,
//   and every linear weight transposed to Conv1D's [in, out].
//   Hugging Face Llama (LlamaForCausalLM): q/k/v and gate/up split into their
//   own [out, in] tensors, no transposes. llmc's RoPE rotates the half-split
//   pairs (x[i], x[i + D/2]) by t * theta^(-2i/D), which is Hugging Face's
//   rotate_half convention, so q_proj and k_proj need no permutation (the
//   permutation Hugging Face's conversion script applies is for Meta's
//   interleaved-pair checkpoints, not for these).
#ifndef LLMC_RUNTIME_HUGGINGFACE_H
#define LLMC_RUNTIME_HUGGINGFACE_H

#include "runtime/Weights/Weights.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace llmc::runtime {

enum class HfArchitecture { Gpt2, Llama };

/// "Hugging Face GPT-2", "Hugging Face Llama".
llvm::StringRef hfArchitectureName(HfArchitecture architecture);

/// What the naming needs of a model: read from the `llmc.model` config as
/// JSON (kir::Program::modelJson, or a converted file's metadata).
struct HfModel {
  HfArchitecture architecture = HfArchitecture::Gpt2;
  int64_t nLayer = 0, nHead = 0, nEmbd = 0, ffnHidden = 0, vocabSize = 0,
          seqLen = 0;
  std::string activation; // llmc's spelling: gelu, gelu_exact, relu, swiglu
  bool tieEmbeddings = true;
  bool bias = true;
  double normEps = 1e-5, ropeTheta = 10000.0, dropout = 0.0;
};

/// The Hugging Face architecture that holds the model of `modelJson`
/// exactly, or an error saying what keeps it from both: GPT-2 needs
/// layernorm, learned positions, biases and a non-gated activation; Llama
/// rmsnorm, rope and swiglu.
llvm::Expected<HfModel> hfModelOf(llvm::StringRef modelJson);

/// One Hugging Face tensor and where it lives among llmc's parameters.
struct HfTensor {
  enum Kind {
    Same,       // the llmc tensor as it is
    Transposed, // the llmc [out, in] matrix as [in, out] (GPT-2's Conv1D)
    Rows,       // rows [rowBegin, rowBegin + shape[0]) of the llmc tensor
  };
  std::string name; // Hugging Face's
  std::vector<int64_t> shape;
  std::string llmcName;
  Kind kind = Same;
  int64_t rowBegin = 0;
};

/// Every tensor of the Hugging Face file of `model`, in the model's order.
/// The single table both directions read.
std::vector<HfTensor> hfTensors(const HfModel &model);

/// llmc's parameters (every one the table names must be in `params`, with
/// its shape) under Hugging Face names. Errors name the parameter.
llvm::Expected<TensorMap> toHuggingFace(const TensorMap &params,
                                        const HfModel &model);

/// The llmc parameters of `model` from a file's tensors under Hugging Face
/// names. GPT-2 names may carry GPT2LMHeadModel's "transformer." prefix;
/// tensors the model does not use (GPT-2's attn.bias masks) are ignored.
/// Errors start with `source` and name the Hugging Face tensor.
llvm::Expected<TensorMap> fromHuggingFace(const TensorMap &tensors,
                                          const HfModel &model,
                                          llvm::StringRef source);

/// Which Hugging Face naming `tensors` use, told by the token embedding's
/// name; none if neither.
std::optional<HfArchitecture> detectHuggingFace(const TensorMap &tensors);

/// The Hugging Face config.json of `model` (GPT2Config or LlamaConfig) as
/// JSON text; `dtype` is its torch_dtype ("float32", "bfloat16", ...).
std::string hfConfigJson(const HfModel &model, llvm::StringRef dtype);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_HUGGINGFACE_H
