// The step's interface: the named scalars a training program takes and
// gives (lr, bias corrections, loss scale, overflow, grad norm, ...), one
// table row each. The passes name function arguments and results by it,
// the lowering records each binding's row in the kir::Program (and so in
// the artifact), and the runtime binds by it; no other file spells these
// names.
#ifndef LLMC_IR_KERNEL_STEPSCALAR_H
#define LLMC_IR_KERNEL_STEPSCALAR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace llmc::kir {

/// A named scalar of a training program. The values are stored in
/// artifacts (Binding.step_scalar): append new ones, never renumber.
enum class StepScalar : uint8_t {
  None = 0, // a binding that is no step scalar (tokens, a parameter, ...)
  DLoss,
  Lr,
  BiasCorrection1,
  BiasCorrection2,
  Rng,
  Loss,
  GradNorm,
  Overflow,
  UsedLossScale,
  LossScale,
  LossScaleCleanSteps,
  LossScaleHysteresis,
  LossScaleSkippedSteps,
};

/// How a program sees a step scalar.
enum class StepScalarDirection : uint8_t {
  Input,  // set by the runtime before each run (`llmc.input`)
  Output, // read by the runtime after a run (`llmc.output`)
  State,  // persistent in the store (`llmc.state`); a program that updates
          // it also outputs the new value under the same name
};

/// The programs of a training step (codegen/TrainingStep.h), as bits.
enum StepProgramBits : uint8_t {
  kForwardProgram = 1,    // @forward: evaluation
  kGradStepProgram = 2,   // @grad_step (and @grad_step_no_sync)
  kUpdateStepProgram = 4, // @update_step
  kEveryProgram = 7,
};

/// The element type of a step scalar (kir::DType's subset that they use).
enum class StepScalarType : uint8_t { F32, I64 };

/// One row of the table.
struct StepScalarInfo {
  StepScalar scalar;
  const char *name; // in the IR (llmc.input/output/state) and the artifact
  StepScalarDirection direction;
  uint8_t programs; // StepProgramBits: the programs that may have it
  StepScalarType type;
  int64_t elements;    // 1 for a scalar; rng is a pair
  const char *meaning; // one line, for people
};

/// The table, in StepScalar's order (row i describes StepScalar(i + 1)).
inline constexpr StepScalarInfo kStepScalars[] = {
    {StepScalar::DLoss, "dloss", StepScalarDirection::Input, kGradStepProgram,
     StepScalarType::F32, 1,
     "seed of the backward sweep: 1 / micro-batches of the step"},
    {StepScalar::Lr, "lr", StepScalarDirection::Input, kUpdateStepProgram,
     StepScalarType::F32, 1, "the learning rate of this step (schedule)"},
    {StepScalar::BiasCorrection1, "bias_correction1",
     StepScalarDirection::Input, kUpdateStepProgram, StepScalarType::F32, 1,
     "AdamW: 1 / (1 - beta1^t) at step t (kir::biasCorrection)"},
    {StepScalar::BiasCorrection2, "bias_correction2",
     StepScalarDirection::Input, kUpdateStepProgram, StepScalarType::F32, 1,
     "AdamW: 1 / (1 - beta2^t) at step t (kir::biasCorrection)"},
    {StepScalar::Rng, "rng", StepScalarDirection::Input, kEveryProgram,
     StepScalarType::I64, 2,
     "the run's seed and step, for programs with random ops (dropout)"},
    {StepScalar::Loss, "loss", StepScalarDirection::Output,
     kForwardProgram | kGradStepProgram, StepScalarType::F32, 1,
     "the mean loss of the batch"},
    {StepScalar::GradNorm, "grad_norm", StepScalarDirection::Output,
     kUpdateStepProgram, StepScalarType::F32, 1,
     "the global gradient norm, before clipping"},
    {StepScalar::Overflow, "overflow", StepScalarDirection::Output,
     kUpdateStepProgram, StepScalarType::F32, 1,
     "loss scaling: 1 when a gradient was not finite and the update skipped"},
    {StepScalar::UsedLossScale, "used_loss_scale", StepScalarDirection::Output,
     kUpdateStepProgram, StepScalarType::F32, 1,
     "loss scaling: the scale this step's gradients carried"},
    {StepScalar::LossScale, "loss_scale", StepScalarDirection::State,
     kGradStepProgram | kUpdateStepProgram, StepScalarType::F32, 1,
     "loss scaling: the scale of the next step's loss"},
    {StepScalar::LossScaleCleanSteps, "loss_scale.clean_steps",
     StepScalarDirection::State, kUpdateStepProgram, StepScalarType::F32, 1,
     "loss scaling: finite steps since the scale last changed"},
    {StepScalar::LossScaleHysteresis, "loss_scale.hysteresis",
     StepScalarDirection::State, kUpdateStepProgram, StepScalarType::F32, 1,
     "loss scaling: overflows left before the scale is lowered"},
    {StepScalar::LossScaleSkippedSteps, "loss_scale.skipped_steps",
     StepScalarDirection::State, kUpdateStepProgram, StepScalarType::F32, 1,
     "loss scaling: updates skipped for overflow so far"},
};

/// The row of `scalar` (not None).
inline const StepScalarInfo &stepScalarInfo(StepScalar scalar) {
  return kStepScalars[unsigned(scalar) - 1];
}

/// The name of `scalar` in the IR and the artifact.
inline llvm::StringRef stepScalarName(StepScalar scalar) {
  return stepScalarInfo(scalar).name;
}

/// The step scalar named `name`, if any.
inline std::optional<StepScalar> stepScalarNamed(llvm::StringRef name) {
  for (const StepScalarInfo &row : kStepScalars)
    if (name == row.name)
      return row.scalar;
  return std::nullopt;
}

/// Whether `value` (from a file) is a StepScalar.
inline bool isStepScalar(unsigned value) {
  return value <= unsigned(StepScalar::LossScaleSkippedSteps);
}

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_STEPSCALAR_H
