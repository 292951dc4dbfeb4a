// Helpers of the f16/bf16 tests: IR written once for an element type,
// random narrow tensors, units in the last place, program queries.
#ifndef LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_LOWPRECISIONTESTUTIL_H
#define LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_LOWPRECISIONTESTUTIL_H

#include "ir/kernel/Program.h"
#include "runtime/Weights/Weights.h"

#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace llmc::test {

/// `source` with every "xFT>" (the element type of a tensor type) made
/// `type`: one IR text serves f16, bf16 and the f32 reference.
inline std::string instantiate(std::string source, kir::DType type) {
  std::string with = std::string("x") + kir::dtypeName(type) + ">";
  for (size_t at = source.find("xFT>"); at != std::string::npos;
       at = source.find("xFT>", at + with.size()))
    source.replace(at, 4, with);
  return source;
}

/// Uniform values in [-scale, scale), stored as `type` (rounded to nearest
/// even).
inline runtime::HostTensor randomTensor(kir::DType type,
                                        std::vector<int64_t> shape,
                                        std::mt19937 &rng,
                                        float scale = 1.0f) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> values(n);
  for (float &value : values)
    value = uniform(rng);
  return runtime::HostTensor::fromF32(values, std::move(shape), type);
}

/// The same values as f32 (exact).
inline runtime::HostTensor widened(const runtime::HostTensor &tensor) {
  return runtime::HostTensor::fromF32(tensor.toF32(), tensor.shape);
}

/// The values of `tensor`, widened to double.
inline std::vector<double> valuesOf(const runtime::HostTensor &tensor) {
  std::vector<float> f = tensor.toF32();
  return std::vector<double>(f.begin(), f.end());
}

/// The spacing of `type`'s values at magnitude |x| (subnormal spacing
/// below the smallest normal).
inline double ulpOf(kir::DType type, double x) {
  int mantissaBits = type == kir::DType::F16    ? 10
                     : type == kir::DType::BF16 ? 7
                                                : 23;
  int minExponent = type == kir::DType::F16 ? -14 : -126;
  int exponent = x == 0 ? minExponent : std::ilogb(x);
  return std::ldexp(1.0, std::max(exponent, minExponent) - mantissaBits);
}

/// Rounds `x` (as an f32) to `type` and back.
inline float roundTo(kir::DType type, float x) {
  switch (type) {
  case kir::DType::F16:
    return runtime::halfToFloat(runtime::floatToHalf(x));
  case kir::DType::BF16:
    return runtime::bfloat16ToFloat(runtime::floatToBFloat16(x));
  default:
    return x;
  }
}

inline int countOps(const kir::Program &program, kir::Op op) {
  int count = 0;
  for (const kir::Kernel &kernel : program.kernels)
    for (const kir::Instr &instr : kernel.body)
      count += instr.op == op;
  return count;
}

inline std::vector<const kir::Step *> stepsOf(const kir::Program &program,
                                              kir::StepKind kind) {
  std::vector<const kir::Step *> steps;
  for (const kir::Step &step : program.steps)
    if (step.kind == kind)
      steps.push_back(&step);
  return steps;
}

inline kir::DType dtypeOf(const kir::Program &program, const kir::View &view) {
  return program.buffers[view.buffer].dtype;
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_LOWPRECISIONTESTUTIL_H
