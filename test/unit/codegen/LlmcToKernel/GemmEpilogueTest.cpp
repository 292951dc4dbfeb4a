// Which GEMM epilogue kernels codegen classifies as ones the CUDA executor
// hands to cuBLASLt (llmc::matchGemmEpilogue, recorded at lowering as
// kir::GemmStep::epilogueKind), on programs compiled from GPT-2 style
// configs: the forward pass (bias on c_attn, bias + tanh GELU on c_fc), the
// training step (bias in its forward, the GELU gradient in its backward),
// the same in the bf16 and fp16 programs of llmc-amp (narrow C, bias and
// aux), a GELU MLP without biases, and what must not match (the erf GELU,
// ReLU, a constant or an operation changed, a rounding other than the bias
// sum's to C's type). No GPU needed: matching reads the kernel IR only.
#include "codegen/LlmcToKernel/GemmEpilogue.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "passes/Pipelines.h"
#include "test/unit/codegen/LlmcToKernel/AmpEpilogues.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <map>

using namespace llmc;
using llmc::FusedEpilogue;
using FusedEpilogueKind = kir::EpilogueKind;

namespace {

/// A GPT-2 style config (2 layers, width 64) with `extra` YAML lines.
std::string config(const std::string &extra = "") {
  return test::kGpt2TwoLayers + extra;
}

/// The forward program of `yaml` at batch 2, sequence 8.
kir::Program forwardProgram(const std::string &yaml) {
  auto parsed = mlir::llmc::parseModelConfig(yaml, "test.yaml");
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, *parsed, {2, 8});
  EXPECT_TRUE(bool(module));
  mlir::PassManager pm(&context);
  mlir::llmc::buildCompilePipeline(pm);
  EXPECT_TRUE(mlir::succeeded(pm.run(**module)));
  auto forward = (*module)->lookupSymbol<mlir::func::FuncOp>("forward");
  auto program = mlir::llmc::lowerToProgram(forward);
  EXPECT_TRUE(mlir::succeeded(program));
  return std::move(*program);
}

/// The forward and grad_step programs of `yaml` at batch 2, sequence 8
/// (AdamW) in `precision`: f32, or llmc-amp's bf16, or fp16 with loss
/// scaling.
std::pair<kir::Program, kir::Program>
trainingPrograms(const std::string &yaml, PrecisionConfig::Kind precision) {
  auto parsed = mlir::llmc::parseModelConfig(yaml, "test.yaml");
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, *parsed, {2, 8});
  EXPECT_TRUE(bool(module));
  TrainingStepOptions options;
  options.precision.kind = precision;
  options.forCuda = true;
  auto programs = training::compileTrainingStep(**module, options);
  EXPECT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  return {std::move(programs->forward), std::move(programs->gradStep)};
}

/// The f32 grad_step program of `yaml`.
kir::Program gradProgram(const std::string &yaml) {
  return trainingPrograms(yaml, PrecisionConfig::Kind::FP32).second;
}

/// Per GEMM step with an epilogue, in schedule order: the step's origin
/// and the matched kind.
std::vector<std::pair<std::string, FusedEpilogueKind>>
matches(const kir::Program &program) {
  std::vector<std::pair<std::string, FusedEpilogueKind>> result;
  for (const kir::Step &step : program.steps)
    if (step.kind == kir::StepKind::Gemm && step.gemm.epilogue >= 0)
      result.push_back(
          {step.origin,
           llmc::matchGemmEpilogue(program.kernels[step.gemm.epilogue],
                                      step.gemm, program)
               .kind});
  return result;
}

std::map<FusedEpilogueKind, int>
countKinds(const std::vector<std::pair<std::string, FusedEpilogueKind>> &m) {
  std::map<FusedEpilogueKind, int> counts;
  for (const auto &[origin, kind] : m)
    ++counts[kind];
  return counts;
}

/// The first GEMM step whose epilogue matches `kind`.
const kir::Step *findStep(const kir::Program &program,
                          FusedEpilogueKind kind) {
  for (const kir::Step &step : program.steps)
    if (step.kind == kir::StepKind::Gemm && step.gemm.epilogue >= 0 &&
        llmc::matchGemmEpilogue(program.kernels[step.gemm.epilogue],
                                   step.gemm, program)
                .kind == kind)
      return &step;
  return nullptr;
}

TEST(GemmEpilogueTest, Gpt2ForwardFusesBiasAndGeluBias) {
  kir::Program program = forwardProgram(config());
  auto m = matches(program);
  // Per layer: c_attn (+ bias) and c_fc (+ bias + GELU); c_proj and the LM
  // head have no epilogue (their bias goes into the next kernel).
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].second, FusedEpilogueKind::Bias) << m[0].first;
  EXPECT_EQ(m[1].second, FusedEpilogueKind::GeluBias) << m[1].first;
  EXPECT_EQ(m[2].second, FusedEpilogueKind::Bias) << m[2].first;
  EXPECT_EQ(m[3].second, FusedEpilogueKind::GeluBias) << m[3].first;

  const kir::Step *step = findStep(program, FusedEpilogueKind::GeluBias);
  ASSERT_NE(step, nullptr);
  FusedEpilogue fused = llmc::matchGemmEpilogue(
      program.kernels[step->gemm.epilogue], step->gemm, program);
  const kir::Buffer &bias = program.buffers[fused.bias.buffer];
  EXPECT_EQ(bias.kind, kir::BufferKind::Param);
  EXPECT_NE(bias.name.find("c_fc"), std::string::npos) << bias.name;
  EXPECT_EQ(bias.shape, std::vector<int64_t>{256});
  EXPECT_STREQ(kir::epilogueKindName(fused.kind), "gelu_bias");
}

TEST(GemmEpilogueTest, Gpt2GradStepFusesBiasAndGeluGradient) {
  kir::Program program = gradProgram(config());
  auto counts = countKinds(matches(program));
  // Forward: c_attn and c_fc with their bias (GELU is its own kernel: the
  // pre-activation is kept for the backward). Backward: the GELU gradient
  // on the product dY W_proj of each layer's MLP.
  EXPECT_EQ(counts[FusedEpilogueKind::Bias], 4);
  EXPECT_EQ(counts[FusedEpilogueKind::DGelu], 2);
  EXPECT_EQ(counts[FusedEpilogueKind::GeluBias], 0);
  EXPECT_EQ(counts[FusedEpilogueKind::Gelu], 0);

  const kir::Step *step = findStep(program, FusedEpilogueKind::DGelu);
  ASSERT_NE(step, nullptr);
  FusedEpilogue fused = llmc::matchGemmEpilogue(
      program.kernels[step->gemm.epilogue], step->gemm, program);
  // The GELU input is the forward's c_fc pre-activation: [B*T, 4C] rows.
  EXPECT_EQ(step->gemm.n, 256);
  EXPECT_EQ(fused.auxLd, 256);
  EXPECT_NE(fused.aux.buffer, step->gemm.c.buffer);
  EXPECT_EQ(program.buffers[fused.aux.buffer].numElements(), 2 * 8 * 256);
}

TEST(GemmEpilogueTest, GeluWithoutBias) {
  kir::Program program = forwardProgram(config("bias: false\n"));
  auto counts = countKinds(matches(program));
  EXPECT_EQ(counts[FusedEpilogueKind::Gelu], 2);
  EXPECT_EQ(counts[FusedEpilogueKind::GeluBias], 0);
  EXPECT_EQ(counts[FusedEpilogueKind::Bias], 0);
}

TEST(GemmEpilogueTest, ErfGeluAndReluAreNotFused) {
  // The erf GELU is not what cuBLASLt computes; ReLU + bias could be, but
  // is not matched (OPT style): both keep their kernel, the bias-only
  // epilogues still fuse.
  for (const char *activation : {"gelu_exact", "relu"}) {
    kir::Program program =
        forwardProgram(config(std::string("activation: ") + activation + "\n"));
    auto counts = countKinds(matches(program));
    EXPECT_EQ(counts[FusedEpilogueKind::Bias], 2) << activation;
    EXPECT_EQ(counts[FusedEpilogueKind::None], 2) << activation;
    EXPECT_EQ(counts[FusedEpilogueKind::GeluBias], 0) << activation;
  }
  kir::Program grad = gradProgram(config("activation: gelu_exact\n"));
  EXPECT_EQ(countKinds(matches(grad))[FusedEpilogueKind::DGelu], 0);
}

TEST(GemmEpilogueTest, LoweringRecordsTheKinds) {
  // The kinds the executor reads are the classifier's, set at lowering.
  for (const kir::Program &program :
       {forwardProgram(config()), gradProgram(config())})
    for (const kir::Step &step : program.steps) {
      if (step.kind != kir::StepKind::Gemm || step.gemm.epilogue < 0)
        continue;
      FusedEpilogue fused = llmc::matchGemmEpilogue(
          program.kernels[step.gemm.epilogue], step.gemm, program);
      EXPECT_EQ(step.gemm.epilogueKind, fused.kind) << step.origin;
      if (fused.kind == FusedEpilogueKind::DGelu) {
        EXPECT_EQ(step.gemm.epilogueAux.buffer, fused.aux.buffer);
        EXPECT_EQ(step.gemm.epilogueAux.strides,
                  (std::vector<int64_t>{fused.auxLd, 1}));
      } else if (fused.kind != FusedEpilogueKind::None &&
                 fused.kind != FusedEpilogueKind::Gelu) {
        EXPECT_EQ(step.gemm.epilogueBias.buffer, fused.bias.buffer);
        EXPECT_EQ(step.gemm.epilogueBias.offset, fused.bias.offset);
      }
    }
}

TEST(GemmEpilogueTest, ChangedKernelsAreNotFused) {
  kir::Program program = forwardProgram(config());
  const kir::Step *step = findStep(program, FusedEpilogueKind::GeluBias);
  ASSERT_NE(step, nullptr);
  const kir::Kernel &original = program.kernels[step->gemm.epilogue];
  auto kindOf = [&](const kir::Kernel &kernel) {
    return llmc::matchGemmEpilogue(kernel, step->gemm, program).kind;
  };
  ASSERT_EQ(kindOf(original), FusedEpilogueKind::GeluBias);

  // Sums and products in the other operand order still match.
  kir::Kernel swapped = original;
  for (kir::Instr &instr : swapped.body)
    if (instr.op == kir::Op::Add || instr.op == kir::Op::Mul)
      std::swap(instr.args[0], instr.args[1]);
  EXPECT_EQ(kindOf(swapped), FusedEpilogueKind::GeluBias);

  // A constant off in f32, tanh turned into erf, an add into a sub.
  int changes = 0;
  for (size_t i = 0; i < original.body.size(); ++i) {
    kir::Kernel changed = original;
    kir::Instr &instr = changed.body[i];
    if (instr.op == kir::Op::Const)
      instr.imm = float(instr.imm) * (1.0f + 1e-6f) + 1e-7f;
    else if (instr.op == kir::Op::Tanh)
      instr.op = kir::Op::Erf;
    else if (instr.op == kir::Op::Add)
      instr.op = kir::Op::Sub;
    else
      continue;
    ++changes;
    EXPECT_EQ(kindOf(changed), FusedEpilogueKind::None) << "instruction " << i;
  }
  EXPECT_GE(changes, 7);

  // Stored somewhere other than C, or a second store: not an epilogue
  // cuBLASLt runs.
  kir::Kernel elsewhere = original;
  for (kir::Instr &instr : elsewhere.body)
    if (instr.op == kir::Op::Store) {
      elsewhere.operands.push_back(elsewhere.operands[instr.operand]);
      elsewhere.operands.back().offset += 1;
      instr.operand = elsewhere.operands.size() - 1;
    }
  EXPECT_EQ(kindOf(elsewhere), FusedEpilogueKind::None);
  kir::Kernel twice = original;
  twice.body.push_back(twice.body.back());
  EXPECT_EQ(kindOf(twice), FusedEpilogueKind::None);
}

// llmc-amp programs: the same kinds as in f32, on bf16/f16 C with the
// bias (the parameter's persistent 16-bit copy) and aux of C's type, GEMM
// by GEMM as AmpEpilogues.h (beside this file) lists them (the products
// cast back up to f32 are not fused: cuBLASLt would not round them).
TEST(GemmEpilogueTest, AmpProgramsFuseBiasGeluBiasAndGeluGradient) {
  using K = FusedEpilogueKind;
  const test::EpilogueTable &forward = test::ampForwardEpilogues();
  const test::EpilogueTable &grad = test::ampGradStepEpilogues();
  for (auto [precision, narrow] :
       {std::pair{PrecisionConfig::Kind::BF16, kir::DType::BF16},
        std::pair{PrecisionConfig::Kind::FP16, kir::DType::F16}}) {
    SCOPED_TRACE(kir::dtypeName(narrow));
    auto [forwardProgram, gradProgram] = trainingPrograms(config(), precision);
    for (auto [program, expected] : {std::pair{&forwardProgram, &forward},
                                     std::pair{&gradProgram, &grad}}) {
      auto got = matches(*program);
      EXPECT_EQ(got, *expected);
      for (const kir::Step &step : program->steps) {
        if (step.kind != kir::StepKind::Gemm || step.gemm.epilogue < 0)
          continue;
        const kir::GemmStep &g = step.gemm;
        FusedEpilogue fused =
            llmc::matchGemmEpilogue(program->kernels[g.epilogue], g, *program);
        EXPECT_EQ(g.epilogueKind, fused.kind) << step.origin;
        if (fused.kind == K::None)
          continue;
        // Narrow operands, narrow C, and bias or aux of C's type.
        EXPECT_EQ(program->buffers[g.a.buffer].dtype, narrow) << step.origin;
        EXPECT_EQ(program->buffers[g.c.buffer].dtype, narrow) << step.origin;
        const kir::View &vector =
            fused.kind == K::DGelu ? g.epilogueAux : g.epilogueBias;
        const kir::Buffer &buffer = program->buffers[vector.buffer];
        EXPECT_EQ(buffer.dtype, narrow) << step.origin;
        if (fused.kind == K::DGelu) {
          // The c_fc pre-activation the forward kept, [B*T, 4C].
          EXPECT_EQ(g.epilogueAux.strides, (std::vector<int64_t>{256, 1}));
          EXPECT_EQ(buffer.numElements(), 2 * 8 * 256);
        } else {
          EXPECT_EQ(buffer.numElements(), g.n) << step.origin;
        }
      }
    }
  }
}

// The narrow kernels' roundings: only the bias sum's, to C's type, before
// the GELU reads it, is one cuBLASLt may skip. A rounding to the other
// narrow type, or of the product as it is loaded, keeps the kernel.
TEST(GemmEpilogueTest, OtherRoundingsAreNotFused) {
  auto [program, grad] = trainingPrograms(config(), PrecisionConfig::Kind::BF16);
  const kir::Step *step = findStep(program, FusedEpilogueKind::GeluBias);
  ASSERT_NE(step, nullptr);
  const kir::Kernel &original = program.kernels[step->gemm.epilogue];
  auto kindOf = [&](const kir::Kernel &kernel) {
    return llmc::matchGemmEpilogue(kernel, step->gemm, program).kind;
  };
  int rounds = 0;
  for (const kir::Instr &instr : original.body)
    rounds += instr.op == kir::Op::RoundBF16;
  ASSERT_EQ(rounds, 1); // round_bf16(C + bias)

  kir::Kernel f16 = original;
  for (kir::Instr &instr : f16.body)
    if (instr.op == kir::Op::RoundBF16)
      instr.op = kir::Op::RoundF16;
  EXPECT_EQ(kindOf(f16), FusedEpilogueKind::None);

  // The round moved onto the loaded product: round(C) + bias, then GELU
  // (%2 = add %0, %1; %3 = round %2 becomes %2 = round %0; %3 = add %2, %1).
  kir::Kernel onLoad = original;
  int32_t round = -1;
  for (auto [i, instr] : llvm::enumerate(onLoad.body))
    if (instr.op == kir::Op::RoundBF16)
      round = int32_t(i);
  ASSERT_GE(round, 1);
  int32_t sum = onLoad.body[round].args[0];
  ASSERT_EQ(sum, round - 1);
  ASSERT_EQ(onLoad.body[sum].op, kir::Op::Add);
  kir::Instr add = onLoad.body[sum], rounding = onLoad.body[round];
  int32_t product = -1, bias = -1;
  for (int32_t a : add.args)
    (onLoad.operands[onLoad.body[a].operand].buffer == step->gemm.c.buffer
         ? product
         : bias) = a;
  ASSERT_GE(product, 0);
  ASSERT_GE(bias, 0);
  rounding.args = {product};
  add.args = {sum, bias};
  onLoad.body[sum] = rounding;
  onLoad.body[round] = add;
  EXPECT_EQ(kindOf(onLoad), FusedEpilogueKind::None);
}

} // namespace
