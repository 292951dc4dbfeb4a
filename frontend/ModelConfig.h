// Transformer model configuration: presets, YAML parsing and printing.
#ifndef LLMC_FRONTEND_MODELCONFIG_H
#define LLMC_FRONTEND_MODELCONFIG_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir {

/// Sequences per forward call (the micro-batch) when none is given: the
/// training config's micro_batch_size, the compiled model's batch
/// (ForwardShape) and `llmc emit|info|compile --batch` all start here.
constexpr int64_t kDefaultMicroBatchSize = 4;
namespace llmc {

enum class Activation {
  Gelu,      // tanh approximation, as in GPT-2.
  GeluExact, // erf-based GELU.
  Relu,      // OPT.
  SwiGlu,    // Llama: gated, so the MLP has three projections.
};

enum class Norm { LayerNorm, RmsNorm };

enum class Position { Learned, Rope };

struct ModelConfig {
  std::string name;
  int64_t nLayer = 0;
  int64_t nHead = 0;
  int64_t nEmbd = 0;
  int64_t seqLen = 0;
  int64_t vocabSize = 0;
  /// MLP hidden width; always resolved (non-zero) after parsing.
  int64_t ffnHidden = 0;
  Activation activation = Activation::Gelu;
  Norm norm = Norm::LayerNorm;
  Position position = Position::Learned;
  bool tieEmbeddings = true;
  /// Whether linear layers and norms carry a bias (Llama has none).
  bool bias = true;
  double dropout = 0.0;
  double normEps = 1e-5;
  double ropeTheta = 10000.0;

  int64_t headDim() const { return nEmbd / nHead; }
};

/// Spellings used in the YAML format: "gelu", "gelu_exact", "relu", "swiglu".
llvm::StringRef stringifyActivation(Activation activation);
/// "layernorm", "rmsnorm".
llvm::StringRef stringifyNorm(Norm norm);
/// "learned", "rope".
llvm::StringRef stringifyPosition(Position position);

/// Returns the named preset (e.g. "gpt2", "llama-7b"), or std::nullopt.
std::optional<ModelConfig> getModelPreset(llvm::StringRef name);
/// All preset names, in a stable order.
llvm::ArrayRef<llvm::StringRef> getModelPresetNames();
/// What an error about an unknown preset `name` ends with: "did you mean
/// 'gpt2'? presets: gpt2, ..." for a near miss, else "presets: gpt2, ...".
std::string describePresetsFor(llvm::StringRef name);

/// Default MLP width: 4*nEmbd, or for SwiGLU the Llama rule 2/3 of that
/// rounded up to a multiple of 256.
int64_t getDefaultFfnHidden(int64_t nEmbd, Activation activation);

/// Parses a YAML model config. `bufferName` (normally the file path) prefixes
/// every diagnostic, which is returned fully formatted as the Error message.
llvm::Expected<ModelConfig> parseModelConfig(llvm::StringRef text,
                                             llvm::StringRef bufferName);

/// Parses the `llmc.model` config a compiled program records
/// (kir::Program::modelJson: the config's keys and the batch it was built
/// for, which is not part of the model and is ignored). `what` names the
/// source in errors.
llvm::Expected<ModelConfig> parseModelConfigJson(llvm::StringRef json,
                                                 llvm::StringRef what);

/// Reads and parses `path`; an unreadable file is an Error naming the path
/// and the OS reason.
llvm::Expected<ModelConfig> loadModelConfigFile(llvm::StringRef path);

/// Writes `config` as YAML with every key explicit (no preset), such that
/// parseModelConfig reads back an equal config.
void printModelConfig(const ModelConfig &config, llvm::raw_ostream &os);

bool operator==(const ModelConfig &lhs, const ModelConfig &rhs);
inline bool operator!=(const ModelConfig &lhs, const ModelConfig &rhs) {
  return !(lhs == rhs);
}

} // namespace llmc
} // namespace mlir

#endif // LLMC_FRONTEND_MODELCONFIG_H
