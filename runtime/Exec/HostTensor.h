// Tensors in host memory: float16/bfloat16 conversion, HostTensor and its
// name-to-tensor map, and tensor parallelism's shares of a tensor. The
// common currency of executors, stores, weights files and checkpoints.
#ifndef LLMC_RUNTIME_EXEC_HOSTTENSOR_H
#define LLMC_RUNTIME_EXEC_HOSTTENSOR_H

#include "ir/kernel/KernelIR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

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

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_EXEC_HOSTTENSOR_H
