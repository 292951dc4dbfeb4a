// llmc-remat end to end on the CPU: for each policy (full, selective, budget
// at two budgets) the compiled gradient step of a tiny GPT-2, the same with
// dropout, a Llama-style model and the tiny GPT-2 in bf16 and in fp16 with
// dropout (bitwise because fused kernels round every narrow value to its
// type where it is computed, however fusion groups the recomputed ops)
// gives bitwise the gradients and loss of the step without remat, and the
// arena high-water mark the executor measures is the peak the memory plan
// promised (Program::arenaBytes).
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "passes/Remat.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "test/unit/codegen/LlmcToKernel/CompileUtil.h"

#include "llvm/Support/MemoryBuffer.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace llmc;
using runtime::HostTensor;

namespace {

/// One gradient step, compiled with a remat policy and run once.
struct StepRun {
  int64_t plannedPeak = 0;  // the program's arena (planned peak)
  int64_t measuredPeak = 0; // the executor's arena high-water mark
  std::optional<mlir::llmc::RematSummary> summary;
  HostTensor loss;
  runtime::TensorMap grads; // grad.<p> after the step
};

/// Compiles the gradient step of `config` at [batch, seq] with `remat` and
/// runs it once, the arena filled with a canary, on parameters and tokens
/// drawn from a fixed seed (so every policy sees the same inputs).
llvm::Expected<StepRun>
runGradStep(const mlir::llmc::ModelConfig &config, int64_t batch, int64_t seq,
            RematConfig remat,
            PrecisionConfig::Kind precision = PrecisionConfig::Kind::FP32) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, config, {batch, seq});
  if (!module)
    return module.takeError();
  TrainingStepOptions options;
  options.remat = remat;
  options.precision.kind = precision;
  auto programs = training::compileTrainingStep(**module, options);
  if (!programs)
    return programs.takeError();

  StepRun run;
  run.summary = mlir::llmc::getRematSummary(
      (*module)->lookupSymbol<mlir::func::FuncOp>("grad_step"));
  run.plannedPeak = programs->gradStep.arenaBytes;
  auto executor = test::makeExecutor(programs->gradStep, 2);
  if (!executor)
    return executor.takeError();
  runtime::CpuExecutor &exec = **executor;

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  for (const kir::Binding &param : exec.program().params) {
    const kir::Buffer &buffer = exec.program().buffers[param.buffer];
    HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
    for (float &value : tensor.f32())
      value = uniform(rng);
    if (llvm::Error error = exec.setTensor(param.name, tensor))
      return error;
  }
  // Mixed precision: the 16-bit weight copies the step reads.
  if (programs->castWeights) {
    auto casts = test::makeExecutor(*programs->castWeights, 2, exec.store());
    if (!casts)
      return casts.takeError();
    if (llvm::Error error = (*casts)->run())
      return error;
  }
  for (const char *name : {"tokens", "targets"}) {
    HostTensor ids = HostTensor::zeros(kir::DType::I32, {batch, seq});
    for (int32_t &id : ids.i32())
      id = int32_t(rng() % config.vocabSize);
    if (llvm::Error error = exec.setTensor(name, ids))
      return error;
  }
  if (llvm::Error error =
          exec.setTensor("dloss", HostTensor::fromF32({1.0f}, {})))
    return error;
  exec.setRng(1234, 5);

  llvm::Expected<int64_t> measured = exec.measureArenaHighWater();
  if (!measured)
    return measured.takeError();
  run.measuredPeak = *measured;
  llvm::Expected<HostTensor> loss = exec.output("loss");
  if (!loss)
    return loss.takeError();
  run.loss = std::move(*loss);
  for (const kir::Binding &state : exec.program().states) {
    if (!llvm::StringRef(state.name).starts_with("grad."))
      continue; // the weight copies
    llvm::Expected<HostTensor> grad = exec.store()->get(state.name);
    if (!grad)
      return grad.takeError();
    run.grads[state.name] = std::move(*grad);
  }
  return run;
}

bool sameBits(const HostTensor &a, const HostTensor &b) {
  return a.dtype == b.dtype && a.shape == b.shape &&
         a.bytes.size() == b.bytes.size() &&
         std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

struct Model {
  const char *name;
  std::string yaml;
  int64_t batch, seq;
  PrecisionConfig::Kind precision = PrecisionConfig::Kind::FP32;
};

std::string tinyYaml(const char *extra = "") {
  auto file = llvm::MemoryBuffer::getFile(std::string(LLMC_SOURCE_DIR) +
                                          "/examples/tiny.yaml");
  if (!file)
    return "";
  return (*file)->getBuffer().str() + extra;
}

std::vector<Model> models() {
  return {
      {"tiny", tinyYaml(), 2, 16},
      {"tiny_dropout", tinyYaml("dropout: 0.1\n"), 2, 16},
      {"llama", "name: llama\nn_layer: 3\nn_head: 4\nn_embd: 40\n"
                "seq_len: 13\nvocab_size: 101\nffn_hidden: 92\n"
                "activation: swiglu\nnorm: rmsnorm\nposition: rope\n"
                "tie_embeddings: false\nbias: false\n",
       2, 13},
      {"tiny_bf16", tinyYaml(), 2, 16, PrecisionConfig::Kind::BF16},
      {"tiny_fp16_dropout", tinyYaml("dropout: 0.1\n"), 2, 16,
       PrecisionConfig::Kind::FP16},
  };
}

class RematPolicies : public ::testing::TestWithParam<Model> {};

TEST_P(RematPolicies, GradientsBitwiseAndPeakAsPlanned) {
  const Model &model = GetParam();
  auto config = mlir::llmc::parseModelConfig(model.yaml, "model.yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  auto run = [&](RematConfig::Policy policy, int64_t budget = 0) {
    RematConfig remat;
    remat.policy = policy;
    remat.budgetBytes = budget;
    return runGradStep(*config, model.batch, model.seq, remat,
                       model.precision);
  };
  auto none = run(RematConfig::Policy::None);
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_FALSE(none->summary) << "llmc-remat ran for policy none";
  EXPECT_EQ(none->measuredPeak, none->plannedPeak);

  auto full = run(RematConfig::Policy::Full);
  ASSERT_TRUE(bool(full)) << llvm::toString(full.takeError());
  auto selective = run(RematConfig::Policy::Selective);
  ASSERT_TRUE(bool(selective)) << llvm::toString(selective.takeError());
  // Both recompute something and plan a smaller arena; full recomputes
  // the matmuls too, so it costs more FLOPs.
  ASSERT_TRUE(full->summary && selective->summary);
  EXPECT_GT(selective->summary->clonedOps, 0);
  EXPECT_LT(full->plannedPeak, none->plannedPeak);
  EXPECT_LT(selective->plannedPeak, none->plannedPeak);
  EXPECT_GT(full->summary->extraFlops, selective->summary->extraFlops);
  EXPECT_LT(full->summary->storedBytes, selective->summary->storedBytes);

  // Budgets: half-way between full and none, and exactly full's peak.
  int64_t between = (none->plannedPeak + full->plannedPeak) / 2;
  auto budgetBetween = run(RematConfig::Policy::Budget, between);
  ASSERT_TRUE(bool(budgetBetween))
      << llvm::toString(budgetBetween.takeError());
  auto budgetFull = run(RematConfig::Policy::Budget, full->plannedPeak);
  ASSERT_TRUE(bool(budgetFull)) << llvm::toString(budgetFull.takeError());
  for (auto [budget, step] : {std::pair{between, &*budgetBetween},
                              std::pair{full->plannedPeak, &*budgetFull}}) {
    ASSERT_TRUE(step->summary);
    EXPECT_LE(step->plannedPeak, budget);
    EXPECT_EQ(step->summary->plannedPeak, step->plannedPeak)
        << "the pass's plan differs from the pipeline's";
    EXPECT_EQ(step->summary->budgetBytes, budget);
  }
  // Fitting a looser budget takes no more recomputation.
  EXPECT_LE(budgetBetween->summary->extraFlops,
            budgetFull->summary->extraFlops);

  for (auto [label, step] :
       {std::pair{"full", &*full}, std::pair{"selective", &*selective},
        std::pair{"budget half-way", &*budgetBetween},
        std::pair{"budget = full's peak", &*budgetFull}}) {
    EXPECT_EQ(step->measuredPeak, step->plannedPeak) << label;
    EXPECT_TRUE(sameBits(step->loss, none->loss)) << label << ": loss";
    ASSERT_EQ(step->grads.size(), none->grads.size()) << label;
    for (const auto &[name, grad] : none->grads)
      EXPECT_TRUE(sameBits(step->grads.at(name), grad))
          << label << ": " << name << " differs from the step without remat";
  }
  std::printf("%s: planned peak none %lld, full %lld, selective %lld, "
              "budget %lld -> %lld, budget %lld -> %lld bytes\n",
              model.name, (long long)none->plannedPeak,
              (long long)full->plannedPeak, (long long)selective->plannedPeak,
              (long long)between, (long long)budgetBetween->plannedPeak,
              (long long)full->plannedPeak, (long long)budgetFull->plannedPeak);
}

INSTANTIATE_TEST_SUITE_P(Models, RematPolicies, ::testing::ValuesIn(models()),
                         [](const auto &info) { return info.param.name; });

TEST(RematBudget, BelowEveryPolicyIsAnErrorNamingTheSmallestPeak) {
  auto config = mlir::llmc::parseModelConfig(tinyYaml(), "tiny.yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  RematConfig full;
  full.policy = RematConfig::Policy::Full;
  auto fullRun = runGradStep(*config, 2, 16, full);
  ASSERT_TRUE(bool(fullRun)) << llvm::toString(fullRun.takeError());

  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  std::string messages;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    messages += d.str() + "\n";
    return mlir::success();
  });
  auto module = mlir::llmc::buildForwardModule(context, *config, {2, 16});
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  TrainingStepOptions options;
  options.remat.policy = RematConfig::Policy::Budget;
  options.remat.budgetBytes = 100000; // below the logits and their gradient
  auto programs = training::compileTrainingStep(**module, options);
  ASSERT_FALSE(bool(programs));
  llvm::consumeError(programs.takeError());
  EXPECT_NE(messages.find("a budget of 100000 bytes is below the smallest "
                          "planned peak of @grad_step"),
            std::string::npos)
      << messages;
  EXPECT_NE(messages.find("policy full: " +
                          std::to_string(fullRun->plannedPeak) + " bytes"),
            std::string::npos)
      << messages;
}

} // namespace
