// Host tensors: 16-bit float conversions, HostTensor, tensor-parallel shares.
#include "runtime/Exec/HostTensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"

#include <cassert>
#include <cstring>

using namespace llvm;

namespace llmc::runtime {

using kir::DType;

// Tensor bytes are copied to and from files verbatim, and both formats are
// little-endian.
static_assert(llvm::endianness::native == llvm::endianness::little,
              "llmc's weight files assume a little-endian host");

//===----------------------------------------------------------------------===//
// Scalar conversions
//===----------------------------------------------------------------------===//

float halfToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  uint32_t result;
  if (exponent == 0x1f) {
    // Infinity or NaN: the payload moves to the top of float's mantissa, so
    // the quiet bit stays the quiet bit.
    result = sign | 0x7f800000 | (mantissa << 13);
  } else if (exponent != 0) {
    result = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    result = sign;
  } else {
    // Subnormal: mantissa * 2^-24. Normalize so the leading one becomes the
    // implicit bit; every half subnormal is a normal float.
    int shift = 0;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      ++shift;
    }
    result = sign | (uint32_t(127 - 15 + 1 - shift) << 23) |
             ((mantissa & 0x3ff) << 13);
  }
  return llvm::bit_cast<float>(result);
}

float bfloat16ToFloat(uint16_t bits) {
  return llvm::bit_cast<float>(uint32_t(bits) << 16);
}

/// Rounds `value >> shift` to nearest, ties to even.
static uint32_t shiftRightRoundEven(uint32_t value, unsigned shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1)))
    ++kept;
  return kept;
}

uint16_t floatToHalf(float value) {
  uint32_t bits = llvm::bit_cast<uint32_t>(value);
  uint16_t sign = (bits >> 16) & 0x8000;
  uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) // NaN: keep it quiet and its top payload bits.
    return sign | 0x7e00 | ((magnitude >> 13) & 0x3ff);
  // 65520 is halfway between the largest half (65504) and 2^16; ties to
  // even round it, and everything above, to infinity.
  if (magnitude >= 0x477ff000)
    return sign | 0x7c00;
  if (magnitude >= 0x38800000) {
    // A normal half. Rebias the exponent; a mantissa carry from rounding
    // correctly bumps the exponent (up to 65504 only, by the check above).
    uint32_t rebiased = magnitude - ((127u - 15u) << 23);
    return sign | uint16_t(shiftRightRoundEven(rebiased, 13));
  }
  // At most 2^-25, half of the smallest subnormal: ties to even give zero.
  if (magnitude <= 0x33000000)
    return sign;
  // A subnormal half, in units of 2^-24: (1.m * 2^(e-127)) / 2^-24
  // = (mantissa with implicit bit) >> (126 - e). Rounding up to 0x400
  // correctly yields the smallest normal.
  uint32_t exponent = magnitude >> 23;
  uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000;
  return sign | uint16_t(shiftRightRoundEven(mantissa, 126 - exponent));
}

uint16_t floatToBFloat16(float value) {
  uint32_t bits = llvm::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffff) > 0x7f800000) // NaN: quiet it, keep sign, payload.
    return uint16_t(bits >> 16) | 0x0040;
  // Rounding may carry into the exponent; from the largest finite values
  // it correctly reaches infinity.
  return uint16_t(shiftRightRoundEven(bits, 16));
}

//===----------------------------------------------------------------------===//
// HostTensor
//===----------------------------------------------------------------------===//

static int64_t productOf(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(size_t(t.numElements() * kir::dtypeBytes(dtype)), 0);
  return t;
}

HostTensor HostTensor::fromF32(ArrayRef<float> values,
                               std::vector<int64_t> shape, DType dtype) {
  HostTensor t = zeros(dtype, std::move(shape));
  assert(int64_t(values.size()) == t.numElements() &&
         "value count does not match the shape");
  switch (dtype) {
  case DType::F32:
    llvm::copy(values, t.f32().begin());
    break;
  case DType::F16:
    llvm::transform(values, t.u16().begin(), floatToHalf);
    break;
  case DType::BF16:
    llvm::transform(values, t.u16().begin(), floatToBFloat16);
    break;
  default:
    llvm_unreachable("HostTensor::fromF32 needs a float dtype");
  }
  return t;
}

int64_t HostTensor::numElements() const { return productOf(shape); }

bool HostTensor::isFloat() const { return kir::isFloat(dtype); }

// The views reinterpret `bytes`: std::vector<char> storage comes from
// operator new, aligned for any fundamental type.
template <typename T>
static ArrayRef<T> viewAs(const HostTensor &t, bool dtypeMatches) {
  assert(dtypeMatches && "HostTensor viewed as the wrong element type");
  assert(t.bytes.size() == size_t(t.numElements()) * sizeof(T) &&
         "HostTensor bytes do not match its shape");
  (void)dtypeMatches;
  return ArrayRef<T>(reinterpret_cast<const T *>(t.bytes.data()),
                     t.bytes.size() / sizeof(T));
}

template <typename T>
static MutableArrayRef<T> viewAs(HostTensor &t, bool dtypeMatches) {
  ArrayRef<T> view =
      viewAs<T>(static_cast<const HostTensor &>(t), dtypeMatches);
  return MutableArrayRef<T>(const_cast<T *>(view.data()), view.size());
}

ArrayRef<float> HostTensor::f32() const {
  return viewAs<float>(*this, dtype == DType::F32);
}
MutableArrayRef<float> HostTensor::f32() {
  return viewAs<float>(*this, dtype == DType::F32);
}
ArrayRef<uint16_t> HostTensor::u16() const {
  return viewAs<uint16_t>(*this, dtype == DType::F16 || dtype == DType::BF16);
}
MutableArrayRef<uint16_t> HostTensor::u16() {
  return viewAs<uint16_t>(*this, dtype == DType::F16 || dtype == DType::BF16);
}
ArrayRef<int32_t> HostTensor::i32() const {
  return viewAs<int32_t>(*this, dtype == DType::I32);
}
MutableArrayRef<int32_t> HostTensor::i32() {
  return viewAs<int32_t>(*this, dtype == DType::I32);
}
ArrayRef<int64_t> HostTensor::i64() const {
  return viewAs<int64_t>(*this, dtype == DType::I64);
}
MutableArrayRef<int64_t> HostTensor::i64() {
  return viewAs<int64_t>(*this, dtype == DType::I64);
}

std::vector<float> HostTensor::toF32() const {
  switch (dtype) {
  case DType::F32:
    return std::vector<float>(f32().begin(), f32().end());
  case DType::F16:
  case DType::BF16: {
    auto widen = dtype == DType::F16 ? halfToFloat : bfloat16ToFloat;
    std::vector<float> values(u16().size());
    llvm::transform(u16(), values.begin(), widen);
    return values;
  }
  default:
    llvm_unreachable("HostTensor::toF32 needs a float dtype");
  }
}

HostTensor castFloatTensor(const HostTensor &tensor, DType dtype) {
  if (tensor.dtype == dtype)
    return tensor;
  return HostTensor::fromF32(tensor.toF32(), tensor.shape, dtype);
}

bool operator==(const HostTensor &lhs, const HostTensor &rhs) {
  return lhs.dtype == rhs.dtype && lhs.shape == rhs.shape &&
         lhs.bytes == rhs.bytes;
}

namespace {
/// The blocks of a tensor split as `shard`: `outer` x `groups` x `size`
/// blocks of `block` bytes (the rows of one rank in one group, with every
/// dimension after them).
struct TpBlocks {
  int64_t outer = 1, block = 0;
};

llvm::Expected<TpBlocks> tpBlocks(llvm::ArrayRef<int64_t> shape,
                                  kir::DType dtype, const TpShard &shard) {
  int64_t parts = shard.groups * shard.size;
  if (shard.dim < 0 || shard.dim >= int64_t(shape.size()) || parts < 1 ||
      shape[shard.dim] % parts != 0)
    return llvm::createStringError(llvm::formatv(
        "a tensor of {0} dimension(s) does not split into {1} x {2} blocks "
        "along dimension {3}",
        shape.size(), shard.groups, shard.size, shard.dim).str());
  TpBlocks b;
  for (int64_t i = 0; i < shard.dim; ++i)
    b.outer *= shape[i];
  b.block = shape[shard.dim] / parts * int64_t(kir::dtypeBytes(dtype));
  for (size_t i = shard.dim + 1; i < shape.size(); ++i)
    b.block *= shape[i];
  return b;
}
} // namespace

/// A vocabulary's padding rows: only along dimension 0 of one group.
llvm::Error checkTpPad(const TpShard &shard) {
  if (shard.pad < 0 || (shard.pad > 0 && (shard.dim != 0 || shard.groups != 1)))
    return llvm::createStringError(llvm::formatv(
        "{0} padding rows along dimension {1} of {2} groups: only dimension "
        "0 of one group is padded",
        shard.pad, shard.dim, shard.groups).str());
  return llvm::Error::success();
}

llvm::Expected<HostTensor> cutTpShard(const HostTensor &full,
                                                     const TpShard &shard,
                                                     int64_t rank) {
  if (llvm::Error error = checkTpPad(shard))
    return error;
  if (shard.pad > 0 && !full.shape.empty()) {
    // Rows are contiguous along dimension 0: the padding is zero bytes at
    // the end.
    HostTensor padded = full;
    int64_t rowBytes = full.bytes.size() / std::max<int64_t>(full.shape[0], 1);
    padded.shape[0] += shard.pad;
    padded.bytes.resize(full.bytes.size() + shard.pad * rowBytes, 0);
    TpShard whole = shard;
    whole.pad = 0;
    return cutTpShard(padded, whole, rank);
  }
  llvm::Expected<TpBlocks> b = tpBlocks(full.shape, full.dtype, shard);
  if (!b)
    return b.takeError();
  if (rank < 0 || rank >= shard.size)
    return llvm::createStringError("tp rank out of range");
  HostTensor part;
  part.dtype = full.dtype;
  part.shape = full.shape;
  part.shape[shard.dim] /= shard.size;
  part.bytes.resize(full.bytes.size() / shard.size);
  char *to = part.bytes.data();
  for (int64_t o = 0; o < b->outer; ++o)
    for (int64_t g = 0; g < shard.groups; ++g) {
      const char *from =
          full.bytes.data() +
          ((o * shard.groups + g) * shard.size + rank) * b->block;
      std::memcpy(to, from, b->block);
      to += b->block;
    }
  return part;
}

llvm::Expected<HostTensor>
joinTpShards(llvm::ArrayRef<HostTensor> parts,
                            const TpShard &shard) {
  if (parts.empty() || int64_t(parts.size()) != shard.size)
    return llvm::createStringError(llvm::formatv(
        "{0} shares for a tensor split over {1} ranks", parts.size(),
        shard.size).str());
  HostTensor full;
  full.dtype = parts[0].dtype;
  full.shape = parts[0].shape;
  if (shard.dim < 0 || shard.dim >= int64_t(full.shape.size()))
    return llvm::createStringError("dimension out of range");
  full.shape[shard.dim] *= shard.size;
  for (const HostTensor &part : parts)
    if (part.shape != parts[0].shape || part.dtype != full.dtype)
      return llvm::createStringError("the ranks' shares differ in shape");
  llvm::Expected<TpBlocks> b = tpBlocks(full.shape, full.dtype, shard);
  if (!b)
    return b.takeError();
  full.bytes.resize(parts[0].bytes.size() * shard.size);
  for (int64_t r = 0; r < shard.size; ++r) {
    const char *from = parts[r].bytes.data();
    for (int64_t o = 0; o < b->outer; ++o)
      for (int64_t g = 0; g < shard.groups; ++g) {
        std::memcpy(full.bytes.data() +
                        ((o * shard.groups + g) * shard.size + r) * b->block,
                    from, b->block);
        from += b->block;
      }
  }
  if (llvm::Error error = checkTpPad(shard))
    return error;
  if (shard.pad > 0) {
    if (shard.pad >= full.shape[0])
      return llvm::createStringError("more padding rows than rows");
    int64_t rowBytes = full.bytes.size() / full.shape[0];
    full.shape[0] -= shard.pad;
    full.bytes.resize(full.shape[0] * rowBytes);
  }
  return full;
}

} // namespace llmc::runtime
