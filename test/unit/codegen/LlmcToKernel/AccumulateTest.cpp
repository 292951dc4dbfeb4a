// Gradients accumulated straight into their persistent buffers: an
// `llmc.updates` result X + p, p a GEMM or an embedding gradient, lowers to
// that step adding into X (GemmStep/EmbeddingGradStep::accumulate), with
// and without fusion, and the CPU executor sums exactly what the add did
// (row- and column-split GEMMs included).
#include "CompileUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

using namespace llmc;

namespace {

// grad.w: dW = dY^T X over 8 rows, 256 x 8 (the CPU splits C by rows);
// grad.u: 8 x 256 (split by columns); grad.e: an embedding gradient, the
// add's operands swapped; grad.v: read after its add, so not accumulated.
constexpr const char *kSource = R"mlir(
func.func @grad(%gw: tensor<256x8xf32> {llmc.state = "grad.w"},
                %gu: tensor<8x256xf32> {llmc.state = "grad.u"},
                %ge: tensor<16x8xf32> {llmc.state = "grad.e"},
                %gv: tensor<8x8xf32> {llmc.state = "grad.v"},
                %dy: tensor<2x4x256xf32> {llmc.param = "dy"},
                %x: tensor<2x4x8xf32> {llmc.param = "x"},
                %tokens: tensor<2x4xi32> {llmc.input = "tokens"})
    -> (tensor<f32> {llmc.output = "sum_v"},
        tensor<256x8xf32> {llmc.updates = "grad.w"},
        tensor<8x256xf32> {llmc.updates = "grad.u"},
        tensor<16x8xf32> {llmc.updates = "grad.e"},
        tensor<8x8xf32> {llmc.updates = "grad.v"}) {
  %dy2 = llmc.reshape %dy : tensor<2x4x256xf32> -> tensor<8x256xf32>
  %x2 = llmc.reshape %x : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %dw = llmc.matmul %dy2, %x2 {transpose_a} : tensor<8x256xf32>, tensor<8x8xf32>
  %w1 = llmc.add %gw, %dw : tensor<256x8xf32>, tensor<256x8xf32>
  %du = llmc.matmul %x2, %dy2 {transpose_a} : tensor<8x8xf32>, tensor<8x256xf32>
  %u1 = llmc.add %du, %gu : tensor<8x256xf32>, tensor<8x256xf32>
  %de = llmc.embedding_grad %x, %tokens
      : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
  %e1 = llmc.add %de, %ge : tensor<16x8xf32>, tensor<16x8xf32>
  %dv = llmc.matmul %x2, %x2 {transpose_a} : tensor<8x8xf32>, tensor<8x8xf32>
  %v1 = llmc.add %gv, %dv : tensor<8x8xf32>, tensor<8x8xf32>
  %s = llmc.reduce_sum %gv dims [0, 1] : tensor<8x8xf32>
  return %s, %w1, %u1, %e1, %v1
      : tensor<f32>, tensor<256x8xf32>, tensor<8x256xf32>, tensor<16x8xf32>,
        tensor<8x8xf32>
}
)mlir";

/// The buffer index of state `name`.
int32_t stateBuffer(const kir::Program &program, llvm::StringRef name) {
  for (const kir::Binding &state : program.states)
    if (state.name == name)
      return state.buffer;
  return -1;
}

/// Whether some kernel step's origin is `origin`.
bool hasKernelStep(const kir::Program &program, llvm::StringRef origin) {
  return llvm::any_of(program.steps, [&](const kir::Step &step) {
    return step.kind == kir::StepKind::Kernel && step.origin == origin;
  });
}

class AccumulateTest : public ::testing::TestWithParam<bool> {};

TEST_P(AccumulateTest, GradientsAddIntoTheirStates) {
  bool fuse = GetParam();
  mlir::MLIRContext context;
  auto program = test::compileFunction(context, kSource, "grad", fuse);
  ASSERT_TRUE(mlir::succeeded(program));

  // The schedule: the three products write into their states.
  int32_t gw = stateBuffer(*program, "grad.w"),
          gu = stateBuffer(*program, "grad.u"),
          ge = stateBuffer(*program, "grad.e"),
          gv = stateBuffer(*program, "grad.v");
  int accumulating = 0;
  for (const kir::Step &step : program->steps) {
    if (step.kind == kir::StepKind::Gemm) {
      const kir::GemmStep &g = step.gemm;
      bool intoState = g.c.buffer == gw || g.c.buffer == gu;
      EXPECT_EQ(g.accumulate, intoState) << step.origin;
      EXPECT_NE(g.c.buffer, gv) << step.origin;
      if (g.accumulate) {
        EXPECT_EQ(g.epilogue, -1);
        ++accumulating;
      }
    } else if (step.kind == kir::StepKind::EmbeddingGrad) {
      EXPECT_TRUE(step.embeddingGrad.accumulate);
      EXPECT_EQ(step.embeddingGrad.out.buffer, ge);
      ++accumulating;
    }
  }
  EXPECT_EQ(accumulating, 3);
  for (const char *name : {"grad.w", "grad.u", "grad.e"})
    EXPECT_FALSE(hasKernelStep(*program, std::string("update ") + name))
        << name;
  EXPECT_TRUE(hasKernelStep(*program, "update grad.v"));

  // Numbers: from random states, two runs add each gradient twice.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto random = [&](std::vector<int64_t> shape) {
    runtime::HostTensor tensor =
        runtime::HostTensor::zeros(kir::DType::F32, std::move(shape));
    for (float &value : tensor.f32())
      value = uniform(rng);
    return tensor;
  };
  auto executor = test::makeExecutor(*program, 2);
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  runtime::CpuExecutor &exec = **executor;
  std::map<std::string, runtime::HostTensor> initial = {
      {"grad.w", random({256, 8})},
      {"grad.u", random({8, 256})},
      {"grad.e", random({16, 8})},
      {"grad.v", random({8, 8})}};
  runtime::HostTensor dy = random({2, 4, 256}), x = random({2, 4, 8});
  runtime::HostTensor tokens =
      runtime::HostTensor::zeros(kir::DType::I32, {2, 4});
  for (int32_t p = 0; p < 8; ++p) // repeated ids: rows sum positions
    tokens.i32()[p] = (5 * p) % 3 + 2 * (p % 2);
  for (auto &[name, tensor] : initial)
    ASSERT_FALSE(bool(exec.setTensor(name, tensor))) << name;
  ASSERT_FALSE(bool(exec.setTensor("dy", dy)));
  ASSERT_FALSE(bool(exec.setTensor("x", x)));
  ASSERT_FALSE(bool(exec.setTensor("tokens", tokens)));
  ASSERT_FALSE(bool(exec.run()));
  ASSERT_FALSE(bool(exec.run()));

  // References in double: dY and X as [8 rows, ...].
  llvm::ArrayRef<float> d = dy.f32(), xs = x.f32();
  auto expectState = [&](llvm::StringRef name, int64_t rows, int64_t cols,
                         auto gradient) {
    auto got = exec.store()->get(name);
    ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
    llvm::ArrayRef<float> values = got->f32(),
                          start = initial.at(name.str()).f32();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        double want = start[i * cols + j] + 2 * gradient(i, j);
        EXPECT_NEAR(values[i * cols + j], want, 1e-4 * (1 + std::fabs(want)))
            << name.str() << " [" << i << ", " << j << "]";
      }
  };
  expectState("grad.w", 256, 8, [&](int64_t i, int64_t j) {
    double sum = 0;
    for (int64_t r = 0; r < 8; ++r)
      sum += double(d[r * 256 + i]) * xs[r * 8 + j];
    return sum;
  });
  expectState("grad.u", 8, 256, [&](int64_t i, int64_t j) {
    double sum = 0;
    for (int64_t r = 0; r < 8; ++r)
      sum += double(xs[r * 8 + i]) * d[r * 256 + j];
    return sum;
  });
  expectState("grad.e", 16, 8, [&](int64_t i, int64_t j) {
    double sum = 0;
    for (int64_t p = 0; p < 8; ++p)
      if (tokens.i32()[p] == i)
        sum += xs[p * 8 + j];
    return sum;
  });
  expectState("grad.v", 8, 8, [&](int64_t i, int64_t j) {
    double sum = 0;
    for (int64_t r = 0; r < 8; ++r)
      sum += double(xs[r * 8 + i]) * xs[r * 8 + j];
    return sum;
  });
}

INSTANTIATE_TEST_SUITE_P(FusedAndUnfused, AccumulateTest,
                         ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? "Fused" : "Unfused";
                         });

} // namespace
