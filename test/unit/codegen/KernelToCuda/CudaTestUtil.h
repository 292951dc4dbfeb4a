// Test helpers for the CUDA emitter: guarded host buffers and comparisons
// of what a kernel wrote, CPU backend against emulated CUDA.
#ifndef LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_CUDATESTUTIL_H
#define LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_CUDATESTUTIL_H

#include "ir/kernel/KernelIR.h"
#include "ir/kernel/Program.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace llmc::test {

/// A host allocation, 64-byte aligned (like the arena and cuMemAlloc),
/// between two guard zones that must still hold their pattern after a
/// kernel ran: a write outside the buffer is caught, not silently absorbed.
class GuardedBuffer {
public:
  static constexpr size_t kGuard = 256;
  static constexpr unsigned char kPattern = 0xA5;

  GuardedBuffer() = default;
  explicit GuardedBuffer(size_t bytes) : size(bytes) {
    storage.assign(bytes + 2 * kGuard + 64, kPattern);
    size_t misalignment = reinterpret_cast<uintptr_t>(storage.data()) % 64;
    start = (64 - misalignment) % 64 + kGuard;
  }
  GuardedBuffer(const GuardedBuffer &other) : GuardedBuffer(other.size) {
    if (size) // an empty (default) buffer has no storage: data() is null
      std::memcpy(data(), other.data(), size);
  }
  GuardedBuffer &operator=(const GuardedBuffer &other) {
    GuardedBuffer copy(other);
    std::swap(storage, copy.storage);
    std::swap(start, copy.start);
    std::swap(size, copy.size);
    return *this;
  }
  GuardedBuffer(GuardedBuffer &&) = default;
  GuardedBuffer &operator=(GuardedBuffer &&) = default;

  char *data() { return storage.data() + start; }
  const char *data() const { return storage.data() + start; }
  size_t bytes() const { return size; }
  /// The guard bytes that changed, as a description; empty if none.
  std::string guardDamage() const {
    for (size_t i = start - kGuard; i < start; ++i)
      if (static_cast<unsigned char>(storage[i]) != kPattern)
        return "a write " + std::to_string(start - i) + " bytes before it";
    for (size_t i = start + size; i < start + size + kGuard; ++i)
      if (static_cast<unsigned char>(storage[i]) != kPattern)
        return "a write " + std::to_string(i - start - size) +
               " bytes past its end";
    return "";
  }

private:
  std::vector<char> storage;
  size_t start = 0, size = 0;
};

/// An element of `bytes` of type `dtype` widened to double.
inline double elementAt(const char *bytes, kir::DType dtype, size_t i) {
  switch (dtype) {
  case kir::DType::F32: {
    float value;
    std::memcpy(&value, bytes + 4 * i, 4);
    return value;
  }
  case kir::DType::F16: {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f,
             mantissa = h & 0x3ff;
    double magnitude =
        exponent == 0    ? std::ldexp(double(mantissa), -24)
        : exponent == 31 ? (mantissa ? NAN : INFINITY)
                         : std::ldexp(double(mantissa | 0x400), int(exponent) - 25);
    return sign ? -magnitude : magnitude;
  }
  case kir::DType::BF16: {
    uint16_t b;
    std::memcpy(&b, bytes + 2 * i, 2);
    uint32_t bits = uint32_t(b) << 16;
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  }
  case kir::DType::I32: {
    int32_t value;
    std::memcpy(&value, bytes + 4 * i, 4);
    return value;
  }
  case kir::DType::I64: {
    int64_t value;
    std::memcpy(&value, bytes + 8 * i, 8);
    return double(value);
  }
  case kir::DType::I1:
    return bytes[i];
  }
  return 0;
}

/// Tolerances of a comparison: |got - want| <= atol + rtol * |want|, NaN
/// matching NaN. Integers are compared exactly.
struct Tolerance {
  double rtol = 0, atol = 0;
};

/// The largest errors seen, for reports: absolute, and relative to
/// max(1, |want|) (plain relative errors of values near zero say little).
struct ErrorStats {
  double maxAbs = 0, maxRel = 0;
  int64_t elements = 0;
  void merge(const ErrorStats &other) {
    maxAbs = std::max(maxAbs, other.maxAbs);
    maxRel = std::max(maxRel, other.maxRel);
    elements += other.elements;
  }
};

/// Compares `count` elements of two buffers of type `dtype`; a mismatch
/// fails the test with `what` and the first bad element.
inline ErrorStats compareElements(const char *want, const char *got,
                                  kir::DType dtype, size_t count,
                                  Tolerance tolerance, const std::string &what) {
  ErrorStats stats;
  stats.elements = count;
  bool integer = !kir::isFloat(dtype);
  for (size_t i = 0; i < count; ++i) {
    double a = elementAt(want, dtype, i), b = elementAt(got, dtype, i);
    if (std::isnan(a) && std::isnan(b))
      continue;
    double error = std::fabs(a - b);
    if (std::isinf(a) && a == b)
      error = 0;
    stats.maxAbs = std::max(stats.maxAbs, error);
    stats.maxRel = std::max(stats.maxRel, error / std::max(1.0, std::fabs(a)));
    bool ok = integer ? a == b
                      : error <= tolerance.atol + tolerance.rtol * std::fabs(a);
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << ": CPU " << a
                    << ", emulated CUDA " << b << " (error " << error << ")";
      return stats;
    }
  }
  return stats;
}

/// Device addresses as the CUDA executor gives them, for what depends on
/// alignment (describeGemm's epilogues, cuBLASLt's alignment preferences):
/// the arena at a 256-byte aligned base (cuMemAlloc's), buffers at their
/// planned offsets in it, every other buffer in its own 256-byte aligned
/// block.
inline std::vector<uint64_t> deviceBases(const kir::Program &program) {
  std::vector<uint64_t> bases(program.buffers.size());
  uint64_t arena = 0x7f0000000000, next = arena + program.arenaBytes;
  for (size_t index = 0; index < program.buffers.size(); ++index) {
    const kir::Buffer &buffer = program.buffers[index];
    if (buffer.kind == kir::BufferKind::Arena) {
      bases[index] = arena + buffer.offset;
    } else {
      next = (next + 255) / 256 * 256;
      bases[index] = next;
      next += std::max<int64_t>(buffer.bytes(), 1);
    }
  }
  return bases;
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_CUDATESTUTIL_H
