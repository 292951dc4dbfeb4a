// llmc-squares-in-grad-step end to end on the CPU: a GPT whose weight
// gradients are over the pass's 64 Ki elements trains the same with the
// norm's sums of squares taken in @grad_step (the CPU default) as with them
// in @update_step (as for CUDA), bit for bit: the norm every step, and the
// parameters and moments after three steps of AdamW with clipping active,
// one of them of two micro-batches (the last micro-batch's sums are the
// ones the update reads).
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "test/unit/codegen/LlmcToKernel/CompileUtil.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace llmc;
using runtime::HostTensor;

namespace {

// 1 layer, 256 wide: every weight matrix (and the tied wte, 300 x 256) has
// 64 Ki elements or more; biases, norms and wpe stay under.
constexpr const char *kConfig = "name: squares\nn_layer: 1\nn_head: 4\n"
                                "n_embd: 256\nseq_len: 16\nvocab_size: 300\n";
constexpr int64_t kBatch = 2, kSeq = 16;

struct Trained {
  int64_t movedSums = 0;     // grad.<p>.squares states @grad_step writes
  int64_t updateKernels = 0; // the update step's kernels
  std::vector<double> norms; // grad_norm, step by step
  std::map<std::string, HostTensor> state; // every tensor after training
};

llvm::Expected<Trained> train(bool forCuda) {
  auto config = mlir::llmc::parseModelConfig(kConfig, "squares.yaml");
  if (!config)
    return config.takeError();
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module =
      mlir::llmc::buildForwardModule(context, *config, {kBatch, kSeq});
  if (!module)
    return module.takeError();
  TrainingStepOptions options;
  options.forCuda = forCuda;
  auto programs = training::compileTrainingStep(**module, options);
  if (!programs)
    return programs.takeError();
  Trained result;
  for (const kir::Binding &state : programs->gradStep.states)
    result.movedSums += llvm::StringRef(state.name).ends_with(".squares");
  result.updateKernels = int64_t(programs->updateStep.kernels.size());

  auto grad = test::makeExecutor(programs->gradStep, 2);
  if (!grad)
    return grad.takeError();
  auto update = test::makeExecutor(programs->updateStep, 2, (*grad)->store());
  if (!update)
    return update.takeError();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-0.6f, 0.6f);
  for (const kir::Binding &param : (*grad)->program().params) {
    const kir::Buffer &buffer = (*grad)->program().buffers[param.buffer];
    HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
    for (float &value : tensor.f32())
      value = uniform(rng);
    if (llvm::Error error = (*grad)->setTensor(param.name, tensor))
      return error;
  }
  auto set = [](runtime::CpuExecutor &e, const char *name, float value) {
    return e.setTensor(name, HostTensor::fromF32({value}, {}));
  };
  for (int step = 0; step < 3; ++step) {
    int microBatches = step == 1 ? 2 : 1;
    for (int m = 0; m < microBatches; ++m) {
      for (const char *name : {"tokens", "targets"}) {
        HostTensor ids = HostTensor::zeros(kir::DType::I32, {kBatch, kSeq});
        for (int32_t &id : ids.i32())
          id = int32_t(rng() % 300);
        if (llvm::Error error = (*grad)->setTensor(name, ids))
          return error;
      }
      if (llvm::Error error = set(**grad, "dloss", 1.0f / float(microBatches)))
        return error;
      if (llvm::Error error = (*grad)->run())
        return error;
    }
    double t = step + 1;
    if (llvm::Error error = set(**update, "lr", 1e-3f))
      return error;
    if (llvm::Error error = set(**update, "bias_correction1",
                                float(1 / (1 - std::pow(0.9, t)))))
      return error;
    if (llvm::Error error = set(**update, "bias_correction2",
                                float(1 / (1 - std::pow(0.95, t)))))
      return error;
    if (llvm::Error error = (*update)->run())
      return error;
    llvm::Expected<HostTensor> norm = (*update)->output("grad_norm");
    if (!norm)
      return norm.takeError();
    result.norms.push_back(norm->toF32()[0]);
  }
  for (const std::string &name : (*grad)->store()->names()) {
    if (llvm::StringRef(name).ends_with(".squares"))
      continue; // only the moved run has them
    llvm::Expected<HostTensor> tensor = (*grad)->store()->get(name);
    if (!tensor)
      return tensor.takeError();
    result.state[name] = std::move(*tensor);
  }
  return result;
}

TEST(SquaresInGradStep, TrainsBitwiseAsTheUpdateStepsSums) {
  llvm::Expected<Trained> moved = train(/*forCuda=*/false);
  ASSERT_TRUE(bool(moved)) << llvm::toString(moved.takeError());
  llvm::Expected<Trained> kept = train(/*forCuda=*/true);
  ASSERT_TRUE(bool(kept)) << llvm::toString(kept.takeError());
  // The four weight matrices and wte move; nothing moves with the pass off.
  EXPECT_EQ(moved->movedSums, 5);
  EXPECT_EQ(kept->movedSums, 0);
  EXPECT_LT(moved->updateKernels, kept->updateKernels);
  // Clipping was active (max norm 1): the norm scaled every update.
  ASSERT_EQ(moved->norms.size(), 3u);
  EXPECT_GT(kept->norms[0], 1.0);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(moved->norms[i], kept->norms[i]) << "step " << i;
  ASSERT_EQ(moved->state.size(), kept->state.size());
  for (const auto &[name, tensor] : kept->state) {
    ASSERT_TRUE(moved->state.count(name)) << name;
    const HostTensor &other = moved->state.at(name);
    EXPECT_TRUE(tensor.bytes.size() == other.bytes.size() &&
                std::memcmp(tensor.bytes.data(), other.bytes.data(),
                            tensor.bytes.size()) == 0)
        << name << " differs";
  }
}

} // namespace
