// The step's interface table (ir/kernel/StepScalar.h): one row per
// StepScalar in its order, names unique and found again by name; bindings
// marked by it, stored in the artifact and checked on reading; AdamW's bias
// corrections from the betas a program records.
#include "ir/kernel/StepScalar.h"
#include "ir/kernel/Artifact.h"
#include "ir/kernel/Program.h"

#include "ir/kernel/llmc_artifact_generated.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <set>
#include <string>

using namespace llmc;
using kir::StepScalar;
using ::testing::HasSubstr;
namespace fb = llmc::kir::fb;

namespace {

TEST(StepScalarTable, OneRowPerScalarInOrder) {
  unsigned rows = 0;
  for (const kir::StepScalarInfo &row : kir::kStepScalars) {
    ++rows;
    EXPECT_EQ(unsigned(row.scalar), rows) << row.name;
    EXPECT_EQ(&kir::stepScalarInfo(row.scalar), &row);
    EXPECT_TRUE(kir::isStepScalar(unsigned(row.scalar)));
  }
  EXPECT_EQ(rows, unsigned(StepScalar::LossScaleSkippedSteps));
  EXPECT_FALSE(kir::isStepScalar(rows + 1));
}

TEST(StepScalarTable, NamesAreUniqueAndFoundByName) {
  std::set<std::string> names;
  for (const kir::StepScalarInfo &row : kir::kStepScalars) {
    ASSERT_NE(row.name, nullptr);
    EXPECT_FALSE(std::string(row.name).empty());
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " twice";
    EXPECT_EQ(kir::stepScalarNamed(row.name), row.scalar) << row.name;
    EXPECT_EQ(kir::stepScalarName(row.scalar), row.name);
  }
  EXPECT_EQ(kir::stepScalarNamed("tokens"), std::nullopt);
  EXPECT_EQ(kir::stepScalarNamed(""), std::nullopt);
  EXPECT_EQ(kir::stepScalarNamed("loss_scale.window"), std::nullopt);
}

TEST(StepScalarTable, EveryRowSaysWhereAndWhat) {
  for (const kir::StepScalarInfo &row : kir::kStepScalars) {
    EXPECT_NE(row.programs & kir::kEveryProgram, 0) << row.name;
    EXPECT_EQ(row.programs & ~kir::kEveryProgram, 0) << row.name;
    EXPECT_GE(row.elements, 1) << row.name;
    ASSERT_NE(row.meaning, nullptr);
    EXPECT_FALSE(std::string(row.meaning).empty()) << row.name;
  }
  // What the runtime relies on: the optimizer's inputs are the update's,
  // rng a pair of i64 that any program may take.
  EXPECT_EQ(kir::stepScalarInfo(StepScalar::Lr).direction,
            kir::StepScalarDirection::Input);
  EXPECT_EQ(kir::stepScalarInfo(StepScalar::Rng).type,
            kir::StepScalarType::I64);
  EXPECT_EQ(kir::stepScalarInfo(StepScalar::Rng).elements, 2);
  EXPECT_EQ(kir::stepScalarInfo(StepScalar::LossScale).direction,
            kir::StepScalarDirection::State);
}

TEST(StepScalarTable, AssignedByNameAndList) {
  kir::Program p;
  auto add = [&](std::vector<kir::Binding> &list, const char *name) {
    kir::Buffer buffer;
    buffer.name = name;
    p.buffers.push_back(buffer);
    list.push_back({name, int32_t(p.buffers.size() - 1)});
  };
  add(p.inputs, "lr");
  add(p.inputs, "tokens");
  add(p.inputs, "grad_norm"); // an output's name given as an input
  add(p.outputs, "grad_norm");
  add(p.outputs, "loss_scale");
  add(p.states, "loss_scale");
  add(p.params, "lr"); // a parameter is never a step scalar
  kir::assignStepScalars(p);
  EXPECT_EQ(p.inputs[0].scalar, StepScalar::Lr);
  EXPECT_EQ(p.inputs[1].scalar, StepScalar::None);
  EXPECT_EQ(p.inputs[2].scalar, StepScalar::None);
  EXPECT_EQ(p.outputs[0].scalar, StepScalar::GradNorm);
  EXPECT_EQ(p.outputs[1].scalar, StepScalar::LossScale);
  EXPECT_EQ(p.states[0].scalar, StepScalar::LossScale);
  EXPECT_EQ(p.params[0].scalar, StepScalar::None);
  EXPECT_EQ(kir::findStepScalar(p.outputs, StepScalar::GradNorm),
            &p.outputs[0]);
  EXPECT_EQ(kir::findStepScalar(p.outputs, StepScalar::Overflow), nullptr);
}

/// A program with step scalars and no schedule: the inputs tokens and lr,
/// the state loss_scale, also an output (as @update_step gives it), and
/// AdamW's betas.
kir::Program makeStepProgram() {
  kir::Program p;
  p.function = "update_step";
  auto add = [&](const char *name, kir::BufferKind kind, kir::DType dtype,
                 std::vector<int64_t> shape) {
    kir::Buffer buffer;
    buffer.name = name;
    buffer.kind = kind;
    buffer.dtype = dtype;
    buffer.shape = std::move(shape);
    p.buffers.push_back(buffer);
    return int32_t(p.buffers.size() - 1);
  };
  int32_t tokens = add("tokens", kir::BufferKind::Input, kir::DType::I32, {2});
  int32_t lr = add("lr", kir::BufferKind::Input, kir::DType::F32, {});
  int32_t scale =
      add("loss_scale", kir::BufferKind::State, kir::DType::F32, {});
  p.buffers[scale].initialValue = 65536.0;
  p.inputs = {{"tokens", tokens}, {"lr", lr}};
  p.states = {{"loss_scale", scale}};
  p.outputs = {{"loss_scale", scale}};
  p.adamBetas = {0.9, 0.95};
  kir::assignStepScalars(p);
  return p;
}

std::string errorOf(llvm::Expected<kir::Program> result) {
  return result ? "" : llvm::toString(result.takeError());
}

TEST(StepScalarArtifact, RoundTripsWithTheStoredRole) {
  kir::Program program = makeStepProgram();
  ASSERT_EQ(kir::verifyProgram(program), "");
  std::vector<uint8_t> bytes = kir::serializeProgram(program);
  llvm::Expected<kir::Program> read = kir::deserializeProgram(bytes, "a");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  for (auto [x, y] : {std::pair{&program.inputs, &read->inputs},
                      std::pair{&program.outputs, &read->outputs},
                      std::pair{&program.states, &read->states}}) {
    ASSERT_EQ(x->size(), y->size());
    for (size_t i = 0; i < x->size(); ++i) {
      EXPECT_EQ((*x)[i].name, (*y)[i].name);
      EXPECT_EQ((*x)[i].scalar, (*y)[i].scalar) << (*x)[i].name;
    }
  }
  EXPECT_EQ(read->inputs[0].scalar, StepScalar::None);
  EXPECT_EQ(read->inputs[1].scalar, StepScalar::Lr);
  EXPECT_EQ(read->states[0].scalar, StepScalar::LossScale);
  EXPECT_EQ(read->outputs[0].scalar, StepScalar::LossScale);
  EXPECT_EQ(read->adamBetas, (std::vector<double>{0.9, 0.95}));

  // The role is a field of the file, not derived again from the name.
  const fb::Artifact *artifact = fb::GetSizePrefixedArtifact(bytes.data());
  const auto *def =
      flatbuffers::GetRoot<fb::ProgramDef>(artifact->program()->data());
  ASSERT_NE(def->inputs(), nullptr);
  EXPECT_EQ(def->inputs()->Get(0)->step_scalar(), fb::StepScalar::None);
  EXPECT_EQ(def->inputs()->Get(1)->step_scalar(), fb::StepScalar::Lr);
  ASSERT_NE(def->adam_betas(), nullptr);
  EXPECT_EQ(def->adam_betas()->size(), 2u);

  // A program without betas stores none and reads back without.
  program.adamBetas.clear();
  read = kir::deserializeProgram(kir::serializeProgram(program), "b");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_TRUE(read->adamBetas.empty());
}

TEST(StepScalarArtifact, MislabelledBindingIsRefused) {
  auto refusal = [](const kir::Program &program) {
    return errorOf(
        kir::deserializeProgram(kir::serializeProgram(program), "a"));
  };
  kir::Program program = makeStepProgram();
  program.inputs[0].scalar = StepScalar::Lr; // tokens
  EXPECT_EQ(refusal(program),
            "a: invalid program: binding 'tokens' is marked as step scalar "
            "2, which its name and list are not (ir/kernel/StepScalar.h)");
  program = makeStepProgram();
  program.inputs[1].scalar = StepScalar(200); // unknown to this llmc
  EXPECT_EQ(refusal(program),
            "a: invalid program: binding 'lr' is marked as step scalar 200, "
            "which its name and list are not (ir/kernel/StepScalar.h)");
  program = makeStepProgram();
  program.inputs[1].scalar = StepScalar::None; // a writer that forgot it
  EXPECT_THAT(refusal(program),
              HasSubstr("binding 'lr' is marked as step scalar 0"));
  program = makeStepProgram();
  program.adamBetas = {0.9};
  EXPECT_THAT(refusal(program), HasSubstr("records 1 AdamW betas, not 2"));
}

TEST(StepScalarArtifact, BiasCorrectionsFromTheRecordedBetas) {
  kir::Program program = makeStepProgram();
  llvm::Expected<double> bc1 =
      kir::biasCorrection(program, StepScalar::BiasCorrection1, 1);
  ASSERT_TRUE(bool(bc1)) << llvm::toString(bc1.takeError());
  EXPECT_DOUBLE_EQ(*bc1, 1.0 / (1.0 - 0.9));
  llvm::Expected<double> bc2 =
      kir::biasCorrection(program, StepScalar::BiasCorrection2, 3);
  ASSERT_TRUE(bool(bc2)) << llvm::toString(bc2.takeError());
  EXPECT_DOUBLE_EQ(*bc2, 1.0 / (1.0 - std::pow(0.95, 3)));

  llvm::Expected<double> lr = kir::biasCorrection(program, StepScalar::Lr, 1);
  ASSERT_FALSE(bool(lr));
  EXPECT_EQ(llvm::toString(lr.takeError()), "lr is no bias correction");
  program.adamBetas.clear();
  llvm::Expected<double> none =
      kir::biasCorrection(program, StepScalar::BiasCorrection1, 1);
  ASSERT_FALSE(bool(none));
  EXPECT_EQ(llvm::toString(none.takeError()),
            "program 'update_step' takes bias_correction1 but records no "
            "AdamW betas: it was compiled without llmc-optimizer's "
            "`llmc.adam_betas`");
}

} // namespace
