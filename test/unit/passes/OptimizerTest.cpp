// The compiled optimizer step (llmc-optimizer -> fusion -> kernels -> CPU)
// against a plain double-precision transcription of PyTorch's
// clip_grad_norm_ + AdamW and SGD, over several steps with fresh gradients,
// clipping active and inactive, on shapes that are not multiples of 8.
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "ir/LlmcDialect.h"
#include "passes/Passes.h"
#include "runtime/Cpu/CpuExecutor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

using namespace llmc;

namespace {

// @grad_step as llmc-autodiff leaves it: parameters first, gradients
// returned after the loss. Its body does not matter to the update.
constexpr const char *kGradStep = R"mlir(
func.func @grad_step(%w: tensor<5x7xf32> {llmc.param = "w"},
                     %b: tensor<7xf32> {llmc.param = "b"},
                     %tokens: tensor<2xi32> {llmc.input = "tokens"},
                     %targets: tensor<2xi32> {llmc.input = "targets"},
                     %dloss: tensor<f32> {llmc.input = "dloss"})
    -> (tensor<f32> {llmc.output = "loss"}, tensor<5x7xf32>, tensor<7xf32>) {
  %loss = llmc.fill 1.0 : tensor<f32>
  %dw = llmc.mul %w, %dloss : tensor<5x7xf32>, tensor<f32>
  %db = llmc.mul %b, %dloss : tensor<7xf32>, tensor<f32>
  return %loss, %dw, %db : tensor<f32>, tensor<5x7xf32>, tensor<7xf32>
}
)mlir";

const std::map<std::string, std::vector<int64_t>> kShapes = {
    {"w", {5, 7}}, {"b", {7}}};

std::unique_ptr<runtime::CpuExecutor>
compileUpdateStep(const mlir::llmc::OptimizerPassOptions &options) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kGradStep, &context);
  EXPECT_TRUE(module);
  mlir::PassManager pm(&context);
  pm.addPass(mlir::llmc::createOptimizerPass(options));
  pm.addPass(mlir::llmc::createFusionPass());
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  auto update = module->lookupSymbol<mlir::func::FuncOp>("update_step");
  mlir::FailureOr<kir::Program> program = mlir::llmc::lowerToProgram(update);
  EXPECT_TRUE(mlir::succeeded(program));
  std::vector<kir::Kernel> kernels = program->kernels;
  auto executor = runtime::createCpuExecutor(
      std::move(*program),
      [&]() { return cpu::compileKernelsToObject(kernels); }, 2);
  EXPECT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  return std::move(*executor);
}

using Tensors = std::map<std::string, std::vector<double>>;

std::vector<double> read(runtime::CpuExecutor &executor,
                         const std::string &name) {
  llvm::Expected<runtime::HostTensor> tensor =
      executor.store()->get(name);
  EXPECT_TRUE(bool(tensor)) << llvm::toString(tensor.takeError());
  llvm::ArrayRef<float> values = tensor->f32();
  return std::vector<double>(values.begin(), values.end());
}

void write(runtime::CpuExecutor &executor, const std::string &name,
           const std::vector<double> &values) {
  std::vector<float> narrow(values.begin(), values.end());
  llvm::Error error = executor.store()->set(
      name, runtime::HostTensor::fromF32(narrow, kShapes.at(
                                                     name.substr(
                                                         name.rfind('.') + 1))));
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

void setScalar(runtime::CpuExecutor &executor, const std::string &name,
               double value) {
  float narrow = float(value);
  llvm::Error error = executor.setTensor(
      name, runtime::HostTensor::fromF32({narrow}, {}));
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

std::vector<double> randomValues(std::mt19937 &rng, size_t n, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> values(n);
  for (double &v : values)
    v = double(float(normal(rng))); // what the f32 buffers hold
  return values;
}

void expectClose(const std::vector<double> &actual,
                 const std::vector<double> &expected, double tolerance,
                 const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i],
                tolerance * std::max(1.0, std::abs(expected[i])))
        << what << "[" << i << "]";
}

struct Hyper {
  double lr, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1, maxNorm = 0;
};

// PyTorch: clip_grad_norm_ then AdamW, in double.
double referenceAdamW(Tensors &p, Tensors &m, Tensors &v, Tensors g,
                      const Hyper &h, int t) {
  double sum = 0;
  for (auto &[name, grad] : g)
    for (double x : grad)
      sum += x * x;
  double norm = std::sqrt(sum);
  double coef = std::min(1.0, h.maxNorm / (norm + 1e-6));
  double bc1 = 1 - std::pow(h.beta1, t), bc2 = 1 - std::pow(h.beta2, t);
  for (auto &[name, grad] : g) {
    bool decay = kShapes.at(name).size() >= 2;
    for (size_t i = 0; i < grad.size(); ++i) {
      double gi = grad[i] * coef;
      if (decay)
        p[name][i] *= 1 - h.lr * h.wd;
      m[name][i] = h.beta1 * m[name][i] + (1 - h.beta1) * gi;
      v[name][i] = h.beta2 * v[name][i] + (1 - h.beta2) * gi * gi;
      double denom = std::sqrt(v[name][i]) / std::sqrt(bc2) + h.eps;
      p[name][i] -= h.lr / bc1 * m[name][i] / denom;
    }
  }
  return norm;
}

void runAdamW(double gradScale, double maxNorm) {
  mlir::llmc::OptimizerPassOptions options;
  options.maxGradNorm = maxNorm;
  auto executor = compileUpdateStep(options);
  std::mt19937 rng(7);
  Tensors p, m, v;
  for (auto &[name, shape] : kShapes) {
    size_t n = 1;
    for (int64_t d : shape)
      n *= d;
    p[name] = randomValues(rng, n, 0.5);
    m[name].assign(n, 0.0);
    v[name].assign(n, 0.0);
    write(*executor, name, p[name]);
  }
  Hyper h{/*lr=*/3e-3};
  h.maxNorm = maxNorm;
  for (int t = 1; t <= 4; ++t) {
    Tensors g;
    for (auto &[name, values] : p) {
      g[name] = randomValues(rng, values.size(), gradScale);
      write(*executor, "grad." + name, g[name]);
    }
    h.lr = 3e-3 * t; // a schedule: a new rate each step
    setScalar(*executor, "lr", h.lr);
    setScalar(*executor, "bias_correction1", 1 / (1 - std::pow(h.beta1, t)));
    setScalar(*executor, "bias_correction2", 1 / (1 - std::pow(h.beta2, t)));
    ASSERT_FALSE(bool(executor->run()));
    double norm = referenceAdamW(p, m, v, g, h, t);
    llvm::Expected<runtime::HostTensor> gradNorm =
        executor->output("grad_norm");
    ASSERT_TRUE(bool(gradNorm)) << llvm::toString(gradNorm.takeError());
    EXPECT_NEAR(gradNorm->f32()[0], norm, 1e-5 * norm) << "step " << t;
    for (auto &[name, values] : p) {
      std::string step = " after step " + std::to_string(t);
      // f32 arithmetic against double: a few ulp of each quantity.
      expectClose(read(*executor, name), values, 2e-6, name + step);
      expectClose(read(*executor, "adam_m." + name), m[name], 2e-6,
                  "adam_m." + name + step);
      expectClose(read(*executor, "adam_v." + name), v[name], 2e-6,
                  "adam_v." + name + step);
      for (double x : read(*executor, "grad." + name))
        ASSERT_EQ(x, 0.0) << "grad." << name << " is zeroed" << step;
    }
  }
}

TEST(OptimizerTest, AdamWMatchesPyTorchWithoutClipping) {
  // Gradients of norm ~0.4, under the max norm of 1: no clipping.
  runAdamW(/*gradScale=*/0.05, /*maxNorm=*/1.0);
}

TEST(OptimizerTest, AdamWMatchesPyTorchWithClipping) {
  // Gradients of norm ~16, clipped to 1.
  runAdamW(/*gradScale=*/2.0, /*maxNorm=*/1.0);
}

TEST(OptimizerTest, NesterovSgdMatchesPyTorch) {
  mlir::llmc::OptimizerPassOptions options;
  options.optimizer = "sgd";
  options.momentum = 0.8;
  options.nesterov = true;
  options.weightDecay = 0.01;
  options.maxGradNorm = 0;
  auto executor = compileUpdateStep(options);
  std::mt19937 rng(11);
  Tensors p, buf;
  for (auto &[name, shape] : kShapes) {
    size_t n = 1;
    for (int64_t d : shape)
      n *= d;
    p[name] = randomValues(rng, n, 0.5);
    buf[name].assign(n, 0.0);
    write(*executor, name, p[name]);
  }
  double lr = 0.05, momentum = 0.8, wd = 0.01;
  for (int t = 1; t <= 3; ++t) {
    setScalar(*executor, "lr", lr);
    Tensors g;
    for (auto &[name, values] : p) {
      g[name] = randomValues(rng, values.size(), 1.0);
      write(*executor, "grad." + name, g[name]);
    }
    ASSERT_FALSE(bool(executor->run()));
    // torch.optim.SGD(momentum, nesterov, weight_decay), dampening 0; the
    // first step's buffer is d itself, which momentum * 0 + d also gives.
    for (auto &[name, values] : p) {
      bool decay = kShapes.at(name).size() >= 2;
      for (size_t i = 0; i < values.size(); ++i) {
        double d = g[name][i] + (decay ? wd * values[i] : 0.0);
        buf[name][i] = momentum * buf[name][i] + d;
        d += momentum * buf[name][i];
        values[i] -= lr * d;
      }
      expectClose(read(*executor, name), values, 2e-6, name);
      expectClose(read(*executor, "momentum." + name), buf[name], 2e-6,
                  "momentum." + name);
    }
  }
}

} // namespace
