// Host-side weights: safetensors and llm.c checkpoint files, the seeded
// GPT-2 initialization, and weights for a program (tensors: HostTensor.h).
#ifndef LLMC_RUNTIME_WEIGHTS_WEIGHTS_H
#define LLMC_RUNTIME_WEIGHTS_WEIGHTS_H

#include "ir/kernel/KernelIR.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Exec/HostTensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llmc::runtime {

//===----------------------------------------------------------------------===//
// safetensors
//===----------------------------------------------------------------------===//

/// kir::DType has no F64 (no kernel computes in it), yet goldens such as
/// `loss_f64` are stored as F64. Rather than give HostTensor a type that
/// code written against kir::DType would silently misread, F64 tensors live
/// in their own map as doubles.
struct F64Tensor {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

struct SafetensorsFile {
  TensorMap tensors;                           // F32, F16, BF16, I32, I64
  std::map<std::string, F64Tensor> f64Tensors; // F64
  std::map<std::string, std::string> metadata; // the `__metadata__` entry
};

/// Reads and validates a whole safetensors file. Every error names the file
/// and, where there is one, the tensor.
llvm::Expected<SafetensorsFile> readSafetensorsFile(llvm::StringRef path);
/// The same from a file's bytes in memory; `name` starts every error.
llvm::Expected<SafetensorsFile> parseSafetensors(llvm::StringRef bytes,
                                                 llvm::StringRef name);
/// The tensors only; a file holding an F64 tensor is an error (read it with
/// readSafetensorsFile).
llvm::Expected<TensorMap> readSafetensors(llvm::StringRef path);

/// Writes atomically: a temporary file next to `path` is written, fsynced
/// and renamed over it; on failure nothing is left behind and an existing
/// `path` is untouched. Tensors are laid out in name order, the header is
/// padded with spaces so the data starts 8-byte aligned.
llvm::Error writeSafetensors(llvm::StringRef path, const SafetensorsFile &file);
llvm::Error
writeSafetensors(llvm::StringRef path, const TensorMap &tensors,
                 const std::map<std::string, std::string> &metadata = {});

//===----------------------------------------------------------------------===//
// llm.c checkpoints
//===----------------------------------------------------------------------===//

/// The GPT-2 dimensions an llm.c checkpoint header records.
struct Gpt2Dims {
  int64_t nLayer = 0;
  int64_t nHead = 0;
  int64_t nEmbd = 0;
  int64_t seqLen = 0;    // llm.c's maxT
  int64_t vocabSize = 0; // V, unpadded
};

/// A parameter's name and shape.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
};

/// The parameters an llm.c checkpoint holds, under llmc's names, in the
/// file's order: wte ([V, C], unpadded), wpe, then each per-layer kind for
/// every layer (h.0.ln_1.weight, h.1.ln_1.weight, ..., h.0.ln_1.bias, ...),
/// then ln_f.weight and ln_f.bias.
std::vector<ParamSpec> llmcCheckpointParams(const Gpt2Dims &dims);

/// llm.c pads the vocabulary of wte to a multiple of 128 rows.
int64_t llmcPaddedVocab(int64_t vocabSize);

/// Element type of the parameters in the file: version 3 stores float32,
/// version 5 bfloat16.
enum class LlmcCheckpointFormat { F32 = 3, BF16 = 5 };

/// Reads an llm.c checkpoint (version 3, or 5 converted to F32), checks its
/// header against `expected` and its size exactly, drops wte's padding rows
/// and returns the F32 tensors of llmcCheckpointParams(expected).
llvm::Expected<TensorMap> readLlmcCheckpoint(llvm::StringRef path,
                                             const Gpt2Dims &expected);
/// The same from a file's bytes in memory; `name` starts every error.
llvm::Expected<TensorMap> parseLlmcCheckpoint(llvm::StringRef bytes,
                                              llvm::StringRef name,
                                              const Gpt2Dims &expected);

/// Writes `tensors` (exactly the names and shapes of llmcCheckpointParams;
/// F32, F16 or BF16) as an llm.c checkpoint, padding wte with zero rows to
/// llmcPaddedVocab(V). Atomic like writeSafetensors.
llvm::Error
writeLlmcCheckpoint(llvm::StringRef path, const Gpt2Dims &dims,
                    const TensorMap &tensors,
                    LlmcCheckpointFormat format = LlmcCheckpointFormat::F32);

//===----------------------------------------------------------------------===//
// Initialization
//===----------------------------------------------------------------------===//

/// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
/// 3", SC 2011): the block of four 32-bit words for `counter` under `key`.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter,
                                   std::array<uint32_t, 2> key);

/// The Philox key of tensor `name` under `seed`: SplitMix64 of the seed
/// combined with the FNV-1a-64 hash of the name.
uint64_t tensorStreamKey(uint64_t seed, llvm::StringRef name);

/// Standard normal number `index` of the stream `key`. Philox block
/// index / 2 (64-bit counter in the first two words) gives two 53-bit
/// uniforms in (0, 1); Box-Muller turns them into the normals of elements
/// 2k (cosine) and 2k+1 (sine). Depends on nothing but (key, index).
double philoxNormal(uint64_t key, uint64_t index);

/// How GPT-2 initializes one parameter.
struct InitRule {
  enum Kind { Zeros, Ones, Normal };
  Kind kind = Zeros;
  double stddev = 0.0; // Normal only
};

/// The GPT-2 scheme: names ending in `.bias` are zero; wte, wpe,
/// lm_head.weight and every 2-D `.weight` are normal(0, 0.02), the residual
/// projections (`.attn.c_proj.weight`, `.mlp.c_proj.weight`) with stddev
/// 0.02 / sqrt(2 * nLayer); 1-D `.weight`s (layer and RMS norm gains) are
/// one. Any other name or rank is an error naming the tensor.
llvm::Expected<InitRule> gpt2InitRule(llvm::StringRef name,
                                      llvm::ArrayRef<int64_t> shape,
                                      int64_t nLayer);

/// New tensors of `dtype` (F32, F16 or BF16) initialized by gpt2InitRule.
/// Element i of a normal tensor is stddev * philoxNormal(
/// tensorStreamKey(seed, name), i), so it depends only on (seed, name, i):
/// adding, removing or reordering other tensors changes nothing.
llvm::Expected<TensorMap> initGpt2(llvm::ArrayRef<ParamSpec> params,
                                   int64_t nLayer, uint64_t seed,
                                   kir::DType dtype = kir::DType::F32);
/// Re-initializes `params` in place, keeping each tensor's shape and dtype.
llvm::Error initGpt2(TensorMap &params, int64_t nLayer, uint64_t seed);

//===----------------------------------------------------------------------===//
// Weights for a program
//===----------------------------------------------------------------------===//

/// The model's dimensions, read from the program's config (Program::modelJson).
llvm::Expected<Gpt2Dims> modelDims(const kir::Program &program);

/// Sets the executor's parameters, on any backend: from `path` (a
/// safetensors file, an llm.c checkpoint or a checkpoint of `llmc run`, told
/// apart by their first bytes) or, if `path` is empty, by the seeded GPT-2
/// initialization. Errors name the file and tensor.
llvm::Error loadWeights(Executor &executor, llvm::StringRef path,
                        uint64_t seed);

/// The parameters of `program` as loadWeights sets them (converted to the
/// program's float types), handed to `set` one at a time, with the same
/// errors: what `llmc export` writes into a binary's payload.
llvm::Error readProgramWeights(
    const kir::Program &program, llvm::StringRef path, uint64_t seed,
    llvm::function_ref<llvm::Error(const std::string &name,
                                   const HostTensor &tensor)>
        set);

/// The weights loadWeights sets, as host tensors, for the parameters
/// `specs` of the model of `program` (its config gives the layer count):
/// what a ZeRO-3 run cuts each rank's blocks from.
llvm::Expected<TensorMap> readWeights(llvm::ArrayRef<ParamSpec> specs,
                                      const kir::Program &program,
                                      llvm::StringRef path, uint64_t seed);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_WEIGHTS_WEIGHTS_H
