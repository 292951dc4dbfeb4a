// A smoke test of the whole training path on the CPU: a tiny GPT's
// @forward through llmc-autodiff and llmc-fusion, @forward and @grad_step
// lowered and run with parameters shared through one PersistentStore, the
// gradients checked against central differences of the forward loss. It
// depends on the autodiff pass; the op-level tests are in TrainingTest.cpp.
#include "test/unit/codegen/LlmcToKernel/CompileUtil.h"

#include "frontend/ModelConfig.h"

#include <gtest/gtest.h>

#include <random>

using namespace llmc;
using runtime::HostTensor;

namespace {

std::unique_ptr<runtime::CpuExecutor>
lower(mlir::ModuleOp module, llvm::StringRef name,
      std::shared_ptr<runtime::PersistentStore> store) {
  auto func = module.lookupSymbol<mlir::func::FuncOp>(name);
  if (!func) {
    ADD_FAILURE() << "no @" << name.str();
    return nullptr;
  }
  mlir::FailureOr<kir::Program> program = mlir::llmc::lowerToProgram(func);
  if (mlir::failed(program)) {
    ADD_FAILURE() << "cannot lower @" << name.str();
    return nullptr;
  }
  auto executor = test::makeExecutor(std::move(*program), 0, std::move(store));
  if (!executor) {
    ADD_FAILURE() << llvm::toString(executor.takeError());
    return nullptr;
  }
  return std::move(*executor);
}

void checkGradients(const char *yaml) {
  auto config = mlir::llmc::parseModelConfig(yaml, "smoke.yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  mlir::MLIRContext context;
  auto module = mlir::llmc::buildForwardModule(context, *config, {2, 7});
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  mlir::PassManager pm(&context);
  pm.addPass(mlir::llmc::createAutodiffPass());
  pm.addPass(mlir::llmc::createFusionPass());
  ASSERT_TRUE(mlir::succeeded(pm.run(**module)));

  auto store = std::make_shared<runtime::PersistentStore>();
  auto forward = lower(**module, "forward", store);
  auto grad = lower(**module, "grad_step", store);
  ASSERT_TRUE(forward && grad);

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-0.3f, 0.3f);
  for (const kir::Binding &param : forward->program().params) {
    const kir::Buffer &buffer = forward->program().buffers[param.buffer];
    HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
    for (float &value : tensor.f32())
      value = uniform(rng);
    ASSERT_FALSE(bool(store->set(param.name, tensor)));
  }
  HostTensor tokens = HostTensor::zeros(kir::DType::I32, {2, 7});
  HostTensor targets = HostTensor::zeros(kir::DType::I32, {2, 7});
  for (int32_t &id : tokens.i32())
    id = int32_t(rng() % 37);
  for (int32_t &id : targets.i32())
    id = int32_t(rng() % 37);
  for (runtime::CpuExecutor *executor : {forward.get(), grad.get()}) {
    ASSERT_FALSE(bool(executor->setTensor("tokens", tokens)));
    ASSERT_FALSE(bool(executor->setTensor("targets", targets)));
  }
  ASSERT_FALSE(bool(grad->setTensor("dloss", HostTensor::fromF32({1.0f}, {}))));
  ASSERT_FALSE(bool(grad->run()));
  ASSERT_FALSE(bool(forward->run()));
  float loss = forward->output("loss")->f32()[0];
  EXPECT_NEAR(grad->output("loss")->f32()[0], loss, 1e-5);

  auto lossAt = [&](const std::string &name, int64_t index, float value) {
    HostTensor tensor = *store->get(name);
    tensor.f32()[index] = value;
    EXPECT_FALSE(bool(store->set(name, tensor)));
    EXPECT_FALSE(bool(forward->run()));
    return double(forward->output("loss")->f32()[0]);
  };
  int checked = 0;
  for (const kir::Binding &param : forward->program().params) {
    auto gradient = grad->output("grad." + param.name);
    ASSERT_TRUE(bool(gradient)) << llvm::toString(gradient.takeError());
    int64_t n = gradient->numElements();
    for (int64_t index : {int64_t(0), n / 2, n - 1}) {
      float original = store->get(param.name)->f32()[index];
      const float h = 1e-2f;
      double plus = lossAt(param.name, index, original + h);
      double minus = lossAt(param.name, index, original - h);
      lossAt(param.name, index, original);
      double numeric = (plus - minus) / (2.0 * double(h));
      EXPECT_NEAR(gradient->f32()[index], numeric,
                  2e-3 + 3e-2 * std::fabs(numeric))
          << param.name << "[" << index << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(AutodiffSmoke, Gpt2GradientsMatchFiniteDifferences) {
  checkGradients("name: s\nn_layer: 1\nn_head: 3\nn_embd: 15\nseq_len: 7\n"
                 "vocab_size: 37\n");
}

} // namespace
