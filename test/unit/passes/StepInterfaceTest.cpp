// The step's interface in compiled training programs: every binding the
// table names carries its StepScalar, in a program the table allows, with
// the table's element type and count; AdamW's betas reach the update
// program and the executor derives the bias corrections from them.
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "ir/kernel/StepScalar.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "test/unit/codegen/LlmcToKernel/CompileUtil.h"
#include "training/Programs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace llmc;
using kir::StepScalar;

namespace {

constexpr const char *kConfig = "name: interface\nn_layer: 1\nn_head: 2\n"
                                "n_embd: 16\nseq_len: 8\nvocab_size: 32\n";

llvm::Expected<TrainingStepPrograms> compile(const TrainingStepOptions &options) {
  auto config = mlir::llmc::parseModelConfig(kConfig, "interface.yaml");
  if (!config)
    return config.takeError();
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, *config, {2, 8});
  if (!module)
    return module.takeError();
  return training::compileTrainingStep(**module, options);
}

/// Checks every binding of `program` against the table; `bit` is the
/// program's StepProgramBits.
void expectResolved(const kir::Program &program, uint8_t bit) {
  SCOPED_TRACE(program.function);
  EXPECT_EQ(kir::verifyProgram(program), "");
  for (const std::vector<kir::Binding> *list :
       {&program.inputs, &program.outputs, &program.states})
    for (const kir::Binding &binding : *list) {
      std::optional<StepScalar> named = kir::stepScalarNamed(binding.name);
      if (binding.scalar == StepScalar::None) {
        EXPECT_FALSE(named)
            << binding.name << ": a step scalar's name in the wrong list";
        continue;
      }
      const kir::StepScalarInfo &row = kir::stepScalarInfo(binding.scalar);
      EXPECT_EQ(binding.name, row.name);
      EXPECT_NE(row.programs & bit, 0)
          << binding.name << " in a program the table does not give it";
      const kir::Buffer &buffer = program.buffers[binding.buffer];
      EXPECT_EQ(buffer.numElements(), row.elements) << binding.name;
      EXPECT_EQ(buffer.dtype, row.type == kir::StepScalarType::I64
                                  ? kir::DType::I64
                                  : kir::DType::F32)
          << binding.name;
    }
}

bool hasInput(const kir::Program &program, StepScalar scalar) {
  return kir::findStepScalar(program.inputs, scalar) != nullptr;
}
bool hasOutput(const kir::Program &program, StepScalar scalar) {
  return kir::findStepScalar(program.outputs, scalar) != nullptr;
}

TEST(StepInterface, AdamWProgramsBindByTheTable) {
  TrainingStepOptions options;
  options.optimizer.beta1 = 0.8;
  options.optimizer.beta2 = 0.99;
  llvm::Expected<TrainingStepPrograms> programs = compile(options);
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  expectResolved(programs->forward, kir::kForwardProgram);
  expectResolved(programs->gradStep, kir::kGradStepProgram);
  expectResolved(programs->updateStep, kir::kUpdateStepProgram);

  EXPECT_TRUE(hasOutput(programs->forward, StepScalar::Loss));
  EXPECT_TRUE(hasInput(programs->gradStep, StepScalar::DLoss));
  EXPECT_TRUE(hasOutput(programs->gradStep, StepScalar::Loss));
  const kir::Program &update = programs->updateStep;
  for (StepScalar input : {StepScalar::Lr, StepScalar::BiasCorrection1,
                           StepScalar::BiasCorrection2})
    EXPECT_TRUE(hasInput(update, input)) << kir::stepScalarName(input).str();
  EXPECT_TRUE(hasOutput(update, StepScalar::GradNorm));
  EXPECT_FALSE(hasOutput(update, StepScalar::Overflow));
  // The betas the kernels were built with travel in the program.
  EXPECT_EQ(update.adamBetas, (std::vector<double>{0.8, 0.99}));
  EXPECT_TRUE(programs->gradStep.adamBetas.empty());

  // The executor sets the bias corrections from them, by role.
  auto executor = test::makeExecutor(update);
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  ASSERT_FALSE(bool((*executor)->setBiasCorrections(3)));
  for (auto [scalar, beta] : {std::pair{StepScalar::BiasCorrection1, 0.8},
                              std::pair{StepScalar::BiasCorrection2, 0.99}}) {
    llvm::Expected<runtime::HostTensor> value =
        (*executor)->output(kir::findStepScalar(update.inputs, scalar)->name);
    ASSERT_TRUE(bool(value)) << llvm::toString(value.takeError());
    EXPECT_FLOAT_EQ(value->f32()[0], float(1.0 / (1.0 - std::pow(beta, 3))));
  }
}

TEST(StepInterface, SgdHasNoBiasCorrections) {
  TrainingStepOptions options;
  options.optimizer.kind = OptimizerConfig::Kind::SGD;
  llvm::Expected<TrainingStepPrograms> programs = compile(options);
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  const kir::Program &update = programs->updateStep;
  expectResolved(update, kir::kUpdateStepProgram);
  EXPECT_TRUE(hasInput(update, StepScalar::Lr));
  EXPECT_FALSE(hasInput(update, StepScalar::BiasCorrection1));
  EXPECT_TRUE(update.adamBetas.empty());
  // Nothing to set, and no error for it.
  auto executor = test::makeExecutor(update);
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  EXPECT_FALSE(bool((*executor)->setBiasCorrections(1)));
  EXPECT_FALSE(bool((*executor)->setScalar(StepScalar::BiasCorrection1, 2)));
  llvm::Expected<double> missing =
      (*executor)->scalarOutput(StepScalar::Overflow);
  ASSERT_FALSE(bool(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()),
            "program 'update_step' has no output overflow");
}

TEST(StepInterface, LossScalingScalarsInFp16Programs) {
  TrainingStepOptions options;
  options.precision.kind = PrecisionConfig::Kind::FP16;
  llvm::Expected<TrainingStepPrograms> programs = compile(options);
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  expectResolved(programs->gradStep, kir::kGradStepProgram);
  expectResolved(programs->updateStep, kir::kUpdateStepProgram);
  if (programs->castWeights)
    expectResolved(*programs->castWeights, kir::kEveryProgram);
  const kir::Program &update = programs->updateStep;
  for (StepScalar output :
       {StepScalar::Overflow, StepScalar::UsedLossScale, StepScalar::LossScale,
        StepScalar::LossScaleHysteresis})
    EXPECT_TRUE(hasOutput(update, output)) << kir::stepScalarName(output).str();
  for (StepScalar state :
       {StepScalar::LossScale, StepScalar::LossScaleCleanSteps,
        StepScalar::LossScaleHysteresis, StepScalar::LossScaleSkippedSteps})
    EXPECT_NE(kir::findStepScalar(update.states, state), nullptr)
        << kir::stepScalarName(state).str();
  EXPECT_NE(
      kir::findStepScalar(programs->gradStep.states, StepScalar::LossScale),
      nullptr);
}

} // namespace
