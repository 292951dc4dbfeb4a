// What llmc-cpu-reference and llmc-cuda-run agree on when they compare K
// training steps: the names in the training inputs file (one batch and one
// set of optimizer scalars per step) and the reduced form in which final
// parameters and optimizer state are compared (an evenly strided sample of
// each tensor plus its sum and sum of magnitudes), so a 124M-parameter model
// is compared without shipping its weights.
#ifndef LLMC_TOOLS_LLMC_CUDA_RUN_TRAININGCHECK_H
#define LLMC_TOOLS_LLMC_CUDA_RUN_TRAININGCHECK_H

#include "ir/kernel/StepScalar.h"
#include "runtime/Weights/Weights.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::runtime::training_check {

/// The per-step entry of the training inputs file: "tokens.3", "lr.3", ...
/// (the step's value of the program input `input`).
inline std::string stepInputName(const std::string &input, int64_t step) {
  return input + "." + std::to_string(step);
}

/// The update step's scalar inputs (AdamW's).
inline const kir::StepScalar updateScalarInputs[] = {
    kir::StepScalar::Lr, kir::StepScalar::BiasCorrection1,
    kir::StepScalar::BiasCorrection2};

/// `count` elements of `tensor` (widened to f32) at flat indices
/// i * n / count, i < count: the whole tensor when it has no more.
inline HostTensor sampleEvenly(const HostTensor &tensor, int64_t count) {
  std::vector<float> values = tensor.toF32();
  int64_t n = int64_t(values.size());
  if (count <= 0 || count >= n)
    return HostTensor::fromF32(values, {n});
  std::vector<float> sample(count);
  for (int64_t i = 0; i < count; ++i)
    sample[i] = values[i * n / count];
  return HostTensor::fromF32(sample, {count});
}

/// {sum, sum of |x|} over the whole tensor, accumulated in double, stored
/// as f32 [2].
inline HostTensor checksum(const HostTensor &tensor) {
  double sum = 0, sumAbs = 0;
  for (float value : tensor.toF32()) {
    sum += value;
    sumAbs += std::fabs(value);
  }
  return HostTensor::fromF32({float(sum), float(sumAbs)}, {2});
}

/// The reduced form of a final tensor `name` (a parameter, or "adam_m.<p>"
/// and the like) under its comparison names: "sample.<name>" and
/// "sum.<name>".
inline void addReduced(TensorMap &out, const std::string &name,
                       const HostTensor &tensor, int64_t sampleCount) {
  out["sample." + name] = sampleEvenly(tensor, sampleCount);
  out["sum." + name] = checksum(tensor);
}

} // namespace llmc::runtime::training_check

#endif // LLMC_TOOLS_LLMC_CUDA_RUN_TRAININGCHECK_H
