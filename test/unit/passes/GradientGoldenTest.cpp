// The compiled gradient step (compileTrainingStep: llmc-autodiff, llmc-optimizer,
// fusion, the backward kernels, CPU execution) against PyTorch float64
// gradients of the same models, weights and tokens
// (scripts/make_golden.py writes test/golden/<case>.grads.safetensors).
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "runtime/Cpu/CpuExecutor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace llmc;

namespace {

std::string goldenDir() {
  return std::string(LLMC_SOURCE_DIR) + "/test/golden";
}

std::vector<std::string> gradientCases() {
  std::vector<std::string> cases;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(goldenDir(), ec), end;
       it != end && !ec; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (name.consume_back(".grads.safetensors"))
      cases.push_back(name.str());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

class GradientGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientGolden, GradStepMatchesPyTorchFloat64) {
  std::string base = goldenDir() + "/" + GetParam();
  auto file = runtime::readSafetensorsFile(base + ".safetensors");
  ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
  auto grads = runtime::readSafetensorsFile(base + ".grads.safetensors");
  ASSERT_TRUE(bool(grads)) << llvm::toString(grads.takeError());
  auto config = mlir::llmc::loadModelConfigFile(base + ".yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  int64_t batch = std::stoll(file->metadata.at("batch"));
  int64_t seq = std::stoll(file->metadata.at("seq_len"));

  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, *config, {batch, seq});
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  auto programs = training::compileTrainingStep(**module, TrainingStepOptions());
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  std::vector<kir::Kernel> kernels = programs->gradStep.kernels;
  auto executor = runtime::createCpuExecutor(
      programs->gradStep,
      [&]() { return cpu::compileKernelsToObject(kernels); }, 2);
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  runtime::CpuExecutor &exec = **executor;
  ASSERT_FALSE(bool(exec.setParams(file->tensors, base)));
  ASSERT_FALSE(bool(exec.setTensor("tokens", file->tensors.at("tokens"))));
  ASSERT_FALSE(bool(exec.setTensor("targets", file->tensors.at("targets"))));
  ASSERT_FALSE(
      bool(exec.setTensor("dloss", runtime::HostTensor::fromF32({1.0f}, {}))));
  // Twice: the gradient buffers accumulate, so after two micro-batches
  // they hold twice the gradient (what accumulation over 2 would give
  // with dloss = 1/2 each, up to one rounding).
  ASSERT_FALSE(bool(exec.run()));
  ASSERT_FALSE(bool(exec.run()));

  auto loss = exec.output("loss");
  ASSERT_TRUE(bool(loss)) << llvm::toString(loss.takeError());
  double wantLoss = file->f64Tensors.at("loss_f64").values[0];
  EXPECT_NEAR(loss->f32()[0], wantLoss, 1e-5 * std::fabs(wantLoss));

  size_t compared = 0;
  double worst = 0;
  std::string worstName;
  for (const kir::Binding &param : exec.program().params) {
    std::string name = "grad." + param.name;
    auto want = grads->f64Tensors.find(name);
    ASSERT_NE(want, grads->f64Tensors.end()) << "no golden " << name;
    auto got = exec.store()->get(name);
    ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
    llvm::ArrayRef<float> values = got->f32();
    ASSERT_EQ(values.size(), want->second.values.size()) << name;
    // f32 against float64: 2e-5 of the tensor's largest gradient (the
    // worst measured is about 2e-6). A gradient sums over every position,
    // so relative to one element it is judged against the tensor's scale.
    double scale = 0;
    for (double w : want->second.values)
      scale = std::max(scale, std::fabs(w));
    for (size_t i = 0; i < values.size(); ++i) {
      double err = std::fabs(values[i] - 2 * want->second.values[i]);
      double relative = err / std::max(2 * scale, 1e-30);
      if (relative > worst) {
        worst = relative;
        worstName = name;
      }
      ASSERT_LE(relative, 2e-5) << name << "[" << i << "]: " << values[i]
                                << " vs 2 x " << want->second.values[i];
    }
    ++compared;
  }
  EXPECT_EQ(compared, grads->f64Tensors.size());
  std::printf("%s: %zu gradients, worst error %.2e of the tensor's largest "
              "(%s)\n",
              GetParam().c_str(), compared, worst, worstName.c_str());
}

INSTANTIATE_TEST_SUITE_P(Models, GradientGolden,
                         ::testing::ValuesIn(gradientCases()),
                         [](const auto &info) { return info.param; });

} // namespace
