// 2:4 sparse products on the CPU, forward only (inference): y = x · Wᵀ with
// W [n, k] 2:4 along k and stored packed (the kept values, f32 or bf16, and
// their 2-bit positions), for the matrix-vector products of batch-1
// decoding and the GEMMs of a prefill. Scalar, AVX2 and AVX-512 paths live
// in one binary (each compiled with its own target attribute) and are
// chosen at run time by the CPU's features. x, y and the accumulation are
// f32 in both value types; bf16 values are widened in registers.
#ifndef LLMC_RUNTIME_CPU_SPARSEMATMUL_H
#define LLMC_RUNTIME_CPU_SPARSEMATMUL_H

#include "runtime/Cpu/CpuIsa.h"
#include "runtime/Weights/Sparsity.h"

#include <cstdint>
#include <vector>

namespace llmc::cpu {

/// How the kept values of a packed weight are stored. BF16 halves their
/// bytes: a group of 4 weights is 2 * 2 value bytes + half a metadata byte,
/// 28% of dense f32's 16 bytes instead of F32's 53%. The kernels widen bf16
/// to f32 by a 16-bit shift in registers.
enum class SparseValues : uint8_t { F32, BF16 };

/// "f32", "bf16".
const char *sparseValuesName(SparseValues values);

/// A 2:4 weight [n, k] (k a multiple of 4) packed for the CPU kernels: per
/// row, the 2 kept values of each of its k/4 groups in order, and per 8
/// groups one 32-bit metadata word with group g's nibble in bits 4g..4g+3:
/// its two kept positions in the group (2 bits each, the lower position in
/// the low bits). That is runtime/Weights/Sparsity.h's CompressedTwoOfFour (the
/// nibbles mma.sp takes) with each row starting on a whole word. Rows are
/// padded to `paddedK` (a multiple of 32: one AVX-512 step) with groups of
/// zero values at positions 0 and 1, so the kernels have no group tail.
struct PackedTwoOfFour {
  int64_t n = 0, k = 0, paddedK = 0;
  SparseValues valueType = SparseValues::F32;
  std::vector<float> values;        // [n, paddedK / 2] when F32
  std::vector<uint16_t> bf16Values; // [n, paddedK / 2] when BF16 (bits)
  std::vector<uint32_t> meta;       // [n, paddedK / 32]

  int64_t valuesPerRow() const { return paddedK / 2; }
  int64_t wordsPerRow() const { return paddedK / 32; }
  /// The bytes a product reads of W (values and metadata, padding included).
  int64_t bytes() const {
    return int64_t(values.size() * sizeof(float) +
                   bf16Values.size() * sizeof(uint16_t) +
                   meta.size() * sizeof(uint32_t));
  }
  /// Kept value i (index into values / bf16Values) as f32.
  float value(int64_t i) const;
  /// An empty [n, k] weight (zero values at positions 0, 1 of every group),
  /// for a packer to fill: value j of group g of row r is at
  /// values[r * valuesPerRow() + 2 * g + j].
  static PackedTwoOfFour zeros(int64_t n, int64_t k);
  /// Sets group g of row r's two kept positions (p0 < p1, both < 4).
  void setPositions(int64_t r, int64_t g, int p0, int p1);
};

/// `c` in the kernels' layout: the same values and nibbles, each row
/// starting on a word, padded.
PackedTwoOfFour packForCpu(const runtime::CompressedTwoOfFour &c);

/// `w` (F32 values) with its values rounded to bf16 (nearest even): the
/// same metadata, half the value bytes. Lossy unless every kept value is
/// already a bf16 (exactlyBf16).
PackedTwoOfFour toBf16Values(const PackedTwoOfFour &w);
/// Whether every kept value of F32 `w` is a bf16 exactly (its low 16 bits
/// zero, as for weights loaded from a bf16 file): then toBf16Values loses
/// nothing.
bool exactlyBf16(const PackedTwoOfFour &w);

/// y[i * ldy + j] = sum_c x[i * ldx + c] * W[j, c] for i < m and
/// n0 <= j < n1 (W's rows n0..n1: a thread's share), in f32. x's rows have
/// W.k valid elements (nothing past them is read). `isa` must be one this
/// CPU runs. Each product sums its kept values in a fixed order (lanes,
/// then a tree), so results are deterministic but not the bits of a dense
/// BLAS product. W's values may be F32 or BF16 (x, y and the sums are f32
/// either way).
void sparseMatmulF32(CpuIsa isa, const PackedTwoOfFour &w, const float *x,
                     int64_t m, int64_t ldx, float *y, int64_t ldy, int64_t n0,
                     int64_t n1);

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_SPARSEMATMUL_H
