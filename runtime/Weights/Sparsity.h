// 2:4 structured sparsity on the host: the masks llmc-sparsify's states hold
// (computed once, at the prune step), the check of a tensor, and the
// compressed form NVIDIA's sparse tensor cores read.
//
// A 2:4 tensor is [rows, K] with K a multiple of 4, and at most 2 non-zeros
// in every group of 4 consecutive elements of a row (K is the reduction
// dimension of the matmul that reads it: the [N, K] nn.Linear layout).
#ifndef LLMC_RUNTIME_SPARSITY_H
#define LLMC_RUNTIME_SPARSITY_H

#include "runtime/Exec/Executor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::runtime {

/// The prefix of the state that holds the mask of weight W
/// (`sparsity_mask.W`), as llmc-sparsify (passes/Sparsify.cpp) names it.
constexpr llvm::StringLiteral kSparsityMaskPrefix = "sparsity_mask.";

/// ASP's m4n2_1d mask of `weights` ([rows, k], row-major, k % 4 == 0): 1 for
/// the 2 largest magnitudes of every group of 4 along k, 0 for the others.
/// Ties keep the lower index (so the mask of a tensor is one function of
/// its values); NaNs count as largest.
void maskTwoOfFour(llvm::ArrayRef<float> weights, int64_t k,
                   llvm::MutableArrayRef<float> mask);

/// How far a [rows, k] tensor is from 2:4.
struct TwoOfFourCheck {
  int64_t groups = 0;      // groups of 4 along k
  int64_t denseGroups = 0; // groups with more than 2 non-zeros
  int64_t zeros = 0;       // elements exactly 0
  int64_t elements = 0;
  bool ok() const { return groups > 0 && denseGroups == 0; }
  double zeroFraction() const {
    return elements ? double(zeros) / double(elements) : 0.0;
  }
};
/// `k` must divide the element count and be a multiple of 4.
TwoOfFourCheck checkTwoOfFour(llvm::ArrayRef<float> values, int64_t k);

/// A 2:4 [rows, k] matrix compressed as the sparse tensor cores take it
/// (mma.sp, cuSPARSELt): per row, the k/2 kept values in order, and per
/// group of 4 one 4-bit metadata nibble, the two kept positions (2 bits
/// each, the lower position in the low bits); a group with fewer than 2
/// non-zeros keeps zeros at the first free positions. Nibbles are packed
/// low first, 2 per byte: half the values' bytes plus k/8 bytes a row.
struct CompressedTwoOfFour {
  int64_t rows = 0, k = 0;
  std::vector<float> values;   // [rows, k / 2]
  std::vector<uint8_t> meta;   // [rows, k / 8] (k / 4 nibbles a row)
  /// The two kept positions of group `g` of row `r`.
  std::pair<int, int> positions(int64_t r, int64_t g) const {
    uint8_t nibble = meta[(r * (k / 4) + g) / 2] >> (((r * (k / 4) + g) & 1) * 4);
    return {nibble & 3, (nibble >> 2) & 3};
  }
};
/// Fails, naming `name`, when the tensor is not 2:4.
llvm::Expected<CompressedTwoOfFour>
compressTwoOfFour(llvm::StringRef name, llvm::ArrayRef<float> values,
                  int64_t rows, int64_t k);
/// The dense [rows, k] matrix back.
std::vector<float> decompressTwoOfFour(const CompressedTwoOfFour &c);

/// A 2:4 [n, k] weight in the order the sparse tensor cores' warp-level
/// instruction mma.sp.sync.aligned.m16n8k32.row.col.f32.{bf16,f16} reads
/// it as its sparse A operand (PTX ISA 9.7.14.6, "Matrix fragments for
/// sparse mma.m16n8k32 with .f16 and .bf16 types"), so that each lane of a
/// warp loads its fragment with one 16-byte load and its metadata with one
/// 4-byte load. The matrix is cut into tiles of 16 rows x 32 columns
/// (rowTiles x kTiles, the last ones padded with zero values kept at
/// positions 0 and 1, a valid metadata nibble); tile (rt, kt) is
///   values[((rt * kTiles + kt) * 32 + lane) * 4 + r], r = 0..3: lane
///     L = 4 * g + t (g = L / 4, t = L % 4) register r holds the two kept
///     values of row 16 rt + g + 8 (r % 2), group t + 4 (r / 2) of the
///     tile (columns 4 (t + 4 (r / 2)) .. + 3), the lower position's value
///     in the low 16 bits (the ISA's a_{2r}, a_{2r+1});
///   meta[(rt * kTiles + kt) * 16 + 2 * g + h], h = 0, 1: the nibbles of
///     groups 4 h .. 4 h + 3 of row 16 rt + g in bits 0..15 (group 4 h + j
///     at bits 4 j) and of row 16 rt + g + 8 in bits 16..31; a nibble is
///     CompressedTwoOfFour's (lower position in its low 2 bits). Lane
///     4 g + h passes this word with sparsity selector 0 (the threads with
///     threadID_in_group 0 and 1 supply a group of four's metadata).
/// 2 bytes a kept value plus 2 bits: 28% of the dense f32 bytes.
struct TensorCoreTwoOfFour {
  int64_t n = 0, k = 0, rowTiles = 0, kTiles = 0;
  bool f16 = false; // values are f16 (else bf16) bit patterns
  std::vector<uint32_t> values; // [rowTiles, kTiles, 32 lanes, 4 registers]
  std::vector<uint32_t> meta;   // [rowTiles, kTiles, 16]

  int64_t bytes() const {
    return int64_t((values.size() + meta.size()) * sizeof(uint32_t));
  }
};
/// `c` in the tensor cores' order, its values rounded to bf16 (or f16 with
/// `f16`) to nearest even.
TensorCoreTwoOfFour packForTensorCores(const CompressedTwoOfFour &c,
                                       bool f16 = false);

/// How a safetensors file stores 2:4 weight W compressed: W itself is
/// absent; `W.values_2of4` is F32 [N, K/2] (CompressedTwoOfFour::values)
/// and `W.meta_2of4` I32 [ceil(N * K / 32)], the metadata bytes
/// (CompressedTwoOfFour::meta) little-endian, zero-padded to whole words.
constexpr llvm::StringLiteral kTwoOfFourValuesSuffix = ".values_2of4";
constexpr llvm::StringLiteral kTwoOfFourMetaSuffix = ".meta_2of4";

/// Replaces f32 [N, K] tensor `name` of `tensors` by its compressed pair;
/// fails, naming it, when it is not 2:4.
llvm::Error compressTensorTwoOfFour(TensorMap &tensors, llvm::StringRef name);
/// Replaces every compressed pair of `tensors` by the dense tensor; errors
/// name `path`, the tensor and what is wrong (a missing half, shapes that
/// disagree, positions that are not two increasing ones of 0..3).
llvm::Error expandTwoOfFour(TensorMap &tensors, llvm::StringRef path);

/// One pruned weight: its name and the fraction of its elements now zero.
struct PrunedTensor {
  std::string name;
  double zeroFraction = 0;
};
/// Prunes every weight that has a `sparsity_mask.W` state in `store`: the
/// mask from W's magnitudes, then W *= mask. The f32 master weights are
/// pruned (the low-precision copies are made from them each step).
llvm::Expected<std::vector<PrunedTensor>> pruneTwoOfFour(TensorStore &store);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_SPARSITY_H
