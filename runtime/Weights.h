// Host-side weights: tensors in memory, safetensors and llm.c checkpoint
// files, float16/bfloat16 conversion, and the seeded GPT-2 initialization.
#ifndef LLMC_RUNTIME_WEIGHTS_H
#define LLMC_RUNTIME_WEIGHTS_H

#include "ir/kernel/KernelIR.h"

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
// Scalar conversions
//===----------------------------------------------------------------------===//

/// IEEE binary16 / bfloat16 bits to float: exact for every input, including
/// subnormals, infinities and NaN (the payload is kept, shifted up).
float halfToFloat(uint16_t bits);
float bfloat16ToFloat(uint16_t bits);
/// Float to binary16 / bfloat16 bits, rounding to nearest even. Overflow
/// gives infinity; NaN stays NaN (quiet, sign and top payload bits kept).
uint16_t floatToHalf(float value);
uint16_t floatToBFloat16(float value);

//===----------------------------------------------------------------------===//
// HostTensor
//===----------------------------------------------------------------------===//

/// A dense row-major tensor in host memory. `bytes` holds exactly
/// numElements() * kir::dtypeBytes(dtype) bytes in the host's (little-endian)
/// order; F16 and BF16 elements are raw 16-bit patterns. I1 is not a
/// storage type here.
struct HostTensor {
  kir::DType dtype = kir::DType::F32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;

  /// An all-zero tensor.
  static HostTensor zeros(kir::DType dtype, std::vector<int64_t> shape);
  /// `values` stored as `dtype` (F32, F16 or BF16; round to nearest even).
  static HostTensor fromF32(llvm::ArrayRef<float> values,
                            std::vector<int64_t> shape,
                            kir::DType dtype = kir::DType::F32);

  int64_t numElements() const;
  bool isFloat() const;

  /// Typed views; each asserts the dtype (u16 is F16 or BF16 bit patterns).
  llvm::ArrayRef<float> f32() const;
  llvm::MutableArrayRef<float> f32();
  llvm::ArrayRef<uint16_t> u16() const;
  llvm::MutableArrayRef<uint16_t> u16();
  llvm::ArrayRef<int32_t> i32() const;
  llvm::MutableArrayRef<int32_t> i32();
  llvm::ArrayRef<int64_t> i64() const;
  llvm::MutableArrayRef<int64_t> i64();

  /// The values widened to float (exact); asserts a float dtype.
  std::vector<float> toF32() const;
};

/// `tensor` (F32, F16 or BF16) as `dtype` (F32, F16 or BF16), rounding to
/// nearest even when narrowing; the same tensor when the dtypes agree.
HostTensor castFloatTensor(const HostTensor &tensor, kir::DType dtype);

bool operator==(const HostTensor &lhs, const HostTensor &rhs);
inline bool operator!=(const HostTensor &lhs, const HostTensor &rhs) {
  return !(lhs == rhs);
}

using TensorMap = std::map<std::string, HostTensor>;

/// How tensor parallelism splits a tensor over the `size` ranks of mesh
/// axis "tp" (llmc-tensor-parallel's llmc.tp_shard): dimension `dim` seen
/// as `groups` x `size` blocks of equal rows, rank r holding block r of
/// every group (Q, K and V each split by heads: groups 3). `pad`: zero
/// rows appended along dimension 0 before cutting (a vocabulary that `size`
/// does not divide; groups 1), and dropped again when joining.
struct TpShard {
  int64_t dim = 0, groups = 1, size = 1, pad = 0;
};

/// Rank `rank`'s share of `full`; an error when `full` does not split.
llvm::Expected<HostTensor> cutTpShard(const HostTensor &full,
                                      const TpShard &shard, int64_t rank);
/// The whole tensor from every rank's share, in rank order (the inverse
/// of cutTpShard).
llvm::Expected<HostTensor> joinTpShards(llvm::ArrayRef<HostTensor> parts,
                                        const TpShard &shard);

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

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_WEIGHTS_H
