// Forward logits and loss of small GPT-2, OPT-style and Llama-style models
// against golden values computed by PyTorch in float64
// (scripts/make_golden.py writes test/golden/; the tests do not need torch).
#include "CompileUtil.h"

#include "frontend/ModelConfig.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Weights/Weights.h"


#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace llmc;

namespace {

std::string goldenDir() { return std::string(LLMC_SOURCE_DIR) + "/test/golden"; }

std::vector<std::string> goldenCases() {
  std::vector<std::string> cases;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(goldenDir(), ec), end;
       it != end && !ec; it.increment(ec))
    if (llvm::sys::path::extension(it->path()) == ".yaml")
      cases.push_back(llvm::sys::path::stem(it->path()).str());
  std::sort(cases.begin(), cases.end());
  return cases;
}

class Golden : public ::testing::TestWithParam<std::string> {};

/// The logits and loss `exec` computed against the golden's: each logit
/// within 1e-5 relative, with a floor of 1e-5 of the largest one for
/// logits near zero (whose relative error means nothing); the loss within
/// 1e-5 of the float64 one. Prints the worst logit error.
void expectGoldenOutputs(runtime::Executor &exec,
                         const runtime::SafetensorsFile &golden,
                         const std::string &label) {
  auto logits = exec.output("logits");
  ASSERT_TRUE(bool(logits));
  llvm::ArrayRef<float> got = logits->f32();
  llvm::ArrayRef<float> want = golden.tensors.at("logits").f32();
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (float w : want)
    scale = std::max(scale, double(std::fabs(w)));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - double(want[i]));
    double bound = 1e-5 * std::max(double(std::fabs(want[i])), scale);
    worst = std::max(worst, err / bound);
    ASSERT_LE(err, bound) << "logit " << i << ": " << got[i] << " vs "
                          << want[i];
  }
  auto loss = exec.output("loss");
  ASSERT_TRUE(bool(loss));
  double wantLoss = golden.f64Tensors.at("loss_f64").values[0];
  EXPECT_NEAR(loss->f32()[0], wantLoss, 1e-5 * std::fabs(wantLoss));
  std::printf("%s: loss %.7f (torch f64 %.7f), worst logit error %.3f of "
              "the bound\n",
              label.c_str(), loss->f32()[0], wantLoss, worst);
}

TEST_P(Golden, ForwardMatchesPyTorchFloat64) {
  std::string base = goldenDir() + "/" + GetParam();
  auto file = runtime::readSafetensorsFile(base + ".safetensors");
  ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
  auto config = mlir::llmc::loadModelConfigFile(base + ".yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  int64_t batch = std::stoll(file->metadata.at("batch"));
  int64_t seq = std::stoll(file->metadata.at("seq_len"));

  mlir::MLIRContext context;
  auto program = test::compileConfig(context, *config, {batch, seq});
  ASSERT_TRUE(mlir::succeeded(program));
  auto executor = test::makeExecutor(std::move(*program));
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  auto &exec = **executor;
  ASSERT_FALSE(bool(exec.setParams(file->tensors, base)));
  ASSERT_FALSE(bool(exec.setTensor("tokens", file->tensors.at("tokens"))));
  ASSERT_FALSE(bool(exec.setTensor("targets", file->tensors.at("targets"))));
  ASSERT_FALSE(bool(exec.run()));

  expectGoldenOutputs(exec, *file, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::ValuesIn(goldenCases()),
                         [](const auto &info) { return info.param; });

} // namespace

namespace {

// The same GPT-2 weights through an llm.c checkpoint (wte padded to a
// multiple of 128 rows in the file) give the golden logits: the loader maps
// llm.c's stacked layout to llmc's parameters.
TEST(LlmcCheckpoint, LoadsIntoTheCompiledModel) {
  std::string base = goldenDir() + "/gpt2_c36_h4_v101_b2_t13";
  auto file = runtime::readSafetensorsFile(base + ".safetensors");
  ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
  auto config = mlir::llmc::loadModelConfigFile(base + ".yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  mlir::MLIRContext context;
  auto program = test::compileConfig(context, *config, {2, 13});
  ASSERT_TRUE(mlir::succeeded(program));
  auto executor = test::makeExecutor(std::move(*program));
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());

  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("gpt2", "bin", path));
  auto dims = runtime::modelDims((*executor)->program());
  ASSERT_TRUE(bool(dims)) << llvm::toString(dims.takeError());
  runtime::TensorMap params;
  for (const runtime::ParamSpec &spec : runtime::llmcCheckpointParams(*dims))
    params[spec.name] = file->tensors.at(spec.name);
  ASSERT_FALSE(bool(runtime::writeLlmcCheckpoint(path, *dims, params)));
  llvm::Error loaded = runtime::loadWeights(**executor, path, 0);
  llvm::sys::fs::remove(path);
  ASSERT_FALSE(bool(loaded)) << llvm::toString(std::move(loaded));

  ASSERT_FALSE(bool((*executor)->setTensor("tokens", file->tensors.at("tokens"))));
  ASSERT_FALSE(bool((*executor)->setTensor("targets", file->tensors.at("targets"))));
  ASSERT_FALSE(bool((*executor)->run()));
  auto logits = (*executor)->output("logits");
  ASSERT_TRUE(bool(logits));
  llvm::ArrayRef<float> got = logits->f32();
  llvm::ArrayRef<float> want = file->tensors.at("logits").f32();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0f, std::fabs(want[i])));
}

// `llmc convert`'s Hugging Face files (test/golden/hf/<case>.safetensors)
// loaded by the weights loader (names mapped back, GPT-2's Conv1D weights
// transposed, Llama's q/k/v and gate/up joined) give the logits PyTorch
// computes from the same file under Hugging Face semantics
// (scripts/make_hf_golden.py). The golden records the weights' sha256, so
// it is checked against exactly the file it was made from;
// test/tools/convert-golden.test checks that llmc still writes that file.
class HfGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGolden, ConvertedWeightsMatchPyTorch) {
  std::string dir = goldenDir() + "/hf/";
  auto golden = runtime::readSafetensorsFile(dir + GetParam() +
                                             ".golden.safetensors");
  ASSERT_TRUE(bool(golden)) << llvm::toString(golden.takeError());
  std::string weights = dir + golden->metadata.at("weights");
  auto bytes = llvm::MemoryBuffer::getFile(weights);
  ASSERT_TRUE(bool(bytes)) << weights;
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(
      (*bytes)->getBuffer()));
  ASSERT_EQ(llvm::toHex(digest, /*LowerCase=*/true),
            golden->metadata.at("weights_sha256"))
      << weights << " is not the file the golden was computed from; rerun "
                    "scripts/make_hf_golden.py";

  auto config =
      mlir::llmc::loadModelConfigFile(dir + golden->metadata.at("model"));
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  int64_t batch = std::stoll(golden->metadata.at("batch"));
  int64_t seq = std::stoll(golden->metadata.at("seq_len"));
  mlir::MLIRContext context;
  auto program = test::compileConfig(context, *config, {batch, seq});
  ASSERT_TRUE(mlir::succeeded(program));
  auto executor = test::makeExecutor(std::move(*program));
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  auto &exec = **executor;
  llvm::Error loaded = runtime::loadWeights(exec, weights, 0);
  ASSERT_FALSE(bool(loaded)) << llvm::toString(std::move(loaded));
  ASSERT_FALSE(bool(exec.setTensor("tokens", golden->tensors.at("tokens"))));
  ASSERT_FALSE(bool(exec.setTensor("targets", golden->tensors.at("targets"))));
  ASSERT_FALSE(bool(exec.run()));

  expectGoldenOutputs(exec, *golden, "hf/" + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Converted, HfGolden,
                         ::testing::Values("gpt2", "llama"),
                         [](const auto &info) { return info.param; });

/// A one-block model of 50 token ids at 1 x 8, compiled; failures are
/// reported by the caller's assertion on the result.
mlir::FailureOr<kir::Program> oneBlockProgram() {
  auto config = mlir::llmc::parseModelConfig(
      "name: t\nn_layer: 1\nn_head: 2\nn_embd: 16\nseq_len: 8\nvocab_size: 50\n",
      "t.yaml");
  if (!config) {
    llvm::consumeError(config.takeError());
    return mlir::failure();
  }
  mlir::MLIRContext context;
  return test::compileConfig(context, *config, {1, 8});
}

// Ids outside the embedding table are a data error reported before the
// step runs, not an out-of-bounds read.
TEST(Executor, RejectsOutOfRangeIds) {
  auto program = oneBlockProgram();
  ASSERT_TRUE(mlir::succeeded(program));
  auto executor = test::makeExecutor(std::move(*program));
  ASSERT_TRUE(bool(executor));
  runtime::HostTensor tokens = runtime::HostTensor::zeros(kir::DType::I32, {1, 8});
  tokens.i32()[5] = 50;
  ASSERT_FALSE(bool((*executor)->setTensor("tokens", tokens)));
  llvm::Error error = (*executor)->run();
  ASSERT_TRUE(bool(error));
  EXPECT_EQ(llvm::toString(std::move(error)),
            "input 'tokens' holds id 50 at position 5, outside [0, 50)");
}

// Memory the executor cannot get is an error that names it, not a crash:
// an arena of 2^55 bytes, past any address space (allocateHostMemory).
TEST(Executor, ReportsAnArenaItCannotAllocate) {
  auto program = oneBlockProgram();
  ASSERT_TRUE(mlir::succeeded(program));
  program->arenaBytes = int64_t(1) << 55;
  auto executor = test::makeExecutor(std::move(*program));
  ASSERT_FALSE(bool(executor));
  EXPECT_EQ(llvm::toString(executor.takeError()),
            "cannot allocate the 36028797018963968-byte arena of the program");
}

} // namespace

namespace {

// A single row goes to BLAS's matrix-vector product, for both weight
// layouts ([N, K] with transpose_b, and [K, N]); checked against plain loops.
TEST(Executor, SingleRowProducts) {
  const char *source = R"mlir(
func.func @forward(%w: tensor<16x8xf32> {llmc.param = "w"}, %v: tensor<8x16xf32> {llmc.param = "v"},
                   %tokens: tensor<1x1xi32> {llmc.input = "tokens"},
                   %targets: tensor<1x1xi32> {llmc.input = "targets"}) -> (tensor<f32>, tensor<1x1x16xf32>) {
  %x = llmc.embedding %w, %tokens : tensor<16x8xf32>, tensor<1x1xi32>
  %l = llmc.matmul %x, %w {transpose_b} : tensor<1x1x8xf32>, tensor<16x8xf32>
  %y = llmc.embedding %w, %targets : tensor<16x8xf32>, tensor<1x1xi32>
  %l2 = llmc.matmul %y, %v : tensor<1x1x8xf32>, tensor<8x16xf32>
  %s = llmc.add %l, %l2 : tensor<1x1x16xf32>, tensor<1x1x16xf32>
  %loss, %lse = llmc.cross_entropy %s, %targets : tensor<1x1x16xf32>, tensor<1x1xi32>
  return %loss, %s : tensor<f32>, tensor<1x1x16xf32>
}
)mlir";
  auto executor = test::executorForSource(source);
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  std::vector<float> w(16 * 8), v(8 * 16);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = float((i * 37) % 11) / 11.0f - 0.5f;
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = float((i * 53) % 13) / 13.0f - 0.5f;
  ASSERT_FALSE(bool((*executor)->setTensor(
      "w", runtime::HostTensor::fromF32(w, {16, 8}))));
  ASSERT_FALSE(bool((*executor)->setTensor(
      "v", runtime::HostTensor::fromF32(v, {8, 16}))));
  runtime::HostTensor tokens = runtime::HostTensor::zeros(kir::DType::I32, {1, 1});
  runtime::HostTensor targets = tokens;
  tokens.i32()[0] = 3;
  targets.i32()[0] = 11;
  ASSERT_FALSE(bool((*executor)->setTensor("tokens", tokens)));
  ASSERT_FALSE(bool((*executor)->setTensor("targets", targets)));
  ASSERT_FALSE(bool((*executor)->run()));
  auto logits = (*executor)->output("logits");
  ASSERT_TRUE(bool(logits));
  for (int n = 0; n < 16; ++n) {
    double want = 0;
    for (int k = 0; k < 8; ++k)
      want += double(w[3 * 8 + k]) * w[n * 8 + k] +
              double(w[11 * 8 + k]) * v[k * 16 + n];
    EXPECT_NEAR(logits->f32()[n], want, 1e-5) << "logit " << n;
  }
}

} // namespace

namespace {

// batch_matmul over two batch dims with a transposed right operand, and a
// matmul whose left operand is a transposed view (transpose_a), against
// plain loops.
TEST(Executor, BatchedAndTransposedProducts) {
  const char *source = R"mlir(
func.func @forward(%a: tensor<2x3x5x4xf32> {llmc.param = "a"},
                   %b: tensor<2x3x6x4xf32> {llmc.param = "b"},
                   %w: tensor<5x7xf32> {llmc.param = "w"},
                   %tokens: tensor<2x3xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x3xi32> {llmc.input = "targets"})
    -> (tensor<f32>, tensor<2x3x6xf32>) {
  %p = llmc.batch_matmul %a, %b {transpose_b} : tensor<2x3x5x4xf32>, tensor<2x3x6x4xf32>
  %t = llmc.matmul %a, %w {transpose_a} : tensor<2x3x5x4xf32>, tensor<5x7xf32>
  %ps = llmc.reduce_sum %p dims [2] : tensor<2x3x5x6xf32>
  %ts = llmc.reduce_sum %t dims [2, 3] : tensor<2x3x4x7xf32>
  %tb = llmc.broadcast %ts : tensor<2x3xf32> -> tensor<6x2x3xf32>
  %tt = llmc.transpose %tb, [1, 2, 0] : tensor<6x2x3xf32>
  %s = llmc.add %ps, %tt : tensor<2x3x6xf32>, tensor<2x3x6xf32>
  %loss, %lse = llmc.cross_entropy %s, %targets : tensor<2x3x6xf32>, tensor<2x3xi32>
  return %loss, %s : tensor<f32>, tensor<2x3x6xf32>
}
)mlir";
  auto executor = test::executorForSource(source);
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  auto fill = [](size_t n, int salt) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] = float((i * 31 + salt) % 17) / 17.0f - 0.5f;
    return v;
  };
  std::vector<float> a = fill(2 * 3 * 5 * 4, 1), b = fill(2 * 3 * 6 * 4, 2),
                     w = fill(5 * 7, 3);
  ASSERT_FALSE(bool((*executor)->setTensor("a", runtime::HostTensor::fromF32(a, {2, 3, 5, 4}))));
  ASSERT_FALSE(bool((*executor)->setTensor("b", runtime::HostTensor::fromF32(b, {2, 3, 6, 4}))));
  ASSERT_FALSE(bool((*executor)->setTensor("w", runtime::HostTensor::fromF32(w, {5, 7}))));
  ASSERT_FALSE(bool((*executor)->run()));
  auto logits = (*executor)->output("logits");
  ASSERT_TRUE(bool(logits));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      int bj = i * 3 + j;
      // sum over m of a[m] . b[n], plus sum over (k, n') of (a^T w)[k, n'].
      double t = 0;
      for (int k = 0; k < 4; ++k)
        for (int n = 0; n < 7; ++n)
          for (int m = 0; m < 5; ++m)
            t += double(a[(bj * 5 + m) * 4 + k]) * w[m * 7 + n];
      for (int n = 0; n < 6; ++n) {
        double p = 0;
        for (int m = 0; m < 5; ++m)
          for (int k = 0; k < 4; ++k)
            p += double(a[(bj * 5 + m) * 4 + k]) * b[(bj * 6 + n) * 4 + k];
        EXPECT_NEAR(logits->f32()[bj * 6 + n], p + t, 1e-4)
            << "batch " << i << ", " << j << ", column " << n;
      }
    }
}

} // namespace

namespace {

// Splat constants and fills read as constants, concat as copies into slices
// of one buffer, broadcast and slice as strides, against plain loops.
TEST(Executor, ConstantsConcatAndViews) {
  const char *source = R"mlir(
func.func @forward(%x: tensor<3x4xf32> {llmc.param = "x"},
                   %b: tensor<4xf32> {llmc.param = "b"},
                   %tokens: tensor<2xi32> {llmc.input = "tokens"},
                   %targets: tensor<2xi32> {llmc.input = "targets"})
    -> (tensor<f32>, tensor<2x8xf32>) {
  %c = llmc.constant dense<2.000000e+00> : tensor<4xf32>
  %f = llmc.fill 5.000000e-01 : tensor<3x4xf32>
  %a = llmc.add %x, %c : tensor<3x4xf32>, tensor<4xf32>
  %cat = llmc.concat %a, %f dim 0 : tensor<3x4xf32>, tensor<3x4xf32>
  %bt = llmc.broadcast %b : tensor<4xf32> -> tensor<6x4xf32>
  %s = llmc.mul %cat, %bt : tensor<6x4xf32>, tensor<6x4xf32>
  %sl = llmc.slice %s offsets [1, 0] sizes [4, 4] : tensor<6x4xf32>
  %r = llmc.reshape %sl : tensor<4x4xf32> -> tensor<2x8xf32>
  %loss, %lse = llmc.cross_entropy %r, %targets : tensor<2x8xf32>, tensor<2xi32>
  return %loss, %r : tensor<f32>, tensor<2x8xf32>
}
)mlir";
  auto executor = test::executorForSource(source);
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> b = {1, -1, 0.5f, 2};
  ASSERT_FALSE(bool((*executor)->setTensor("x", runtime::HostTensor::fromF32(x, {3, 4}))));
  ASSERT_FALSE(bool((*executor)->setTensor("b", runtime::HostTensor::fromF32(b, {4}))));
  runtime::HostTensor targets = runtime::HostTensor::zeros(kir::DType::I32, {2});
  targets.i32()[0] = 3;
  targets.i32()[1] = 6;
  ASSERT_FALSE(bool((*executor)->setTensor("targets", targets)));
  ASSERT_FALSE(bool((*executor)->run()));
  // Rows 1..4 of [x + 2; 0.5] * b, flattened into two rows of 8.
  std::vector<double> want;
  for (int row = 1; row < 5; ++row)
    for (int col = 0; col < 4; ++col)
      want.push_back((row < 3 ? x[row * 4 + col] + 2.0 : 0.5) * b[col]);
  auto logits = (*executor)->output("logits");
  ASSERT_TRUE(bool(logits));
  for (int i = 0; i < 16; ++i)
    EXPECT_NEAR(logits->f32()[i], want[i], 1e-6) << "element " << i;
  double loss = 0;
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int v = 0; v < 8; ++v)
      sum += std::exp(want[r * 8 + v]);
    loss += std::log(sum) - want[r * 8 + targets.i32()[r]];
  }
  auto got = (*executor)->output("loss");
  ASSERT_TRUE(bool(got));
  EXPECT_NEAR(got->f32()[0], loss / 2, 1e-5);
}

} // namespace

namespace {

// `llmc run` writes the seeded initialization into the CPU store in place
// (loadWeights through CpuExecutor::writeTensor, split over the hardware
// threads); `llmc export` gets it as host tensors (readProgramWeights).
// Both are the same bits. The vocabulary is large enough for wte's fill to
// be split (more than 2^16 normal pairs).
TEST(SeededInit, InPlaceEqualsTheHostTensors) {
  auto config = mlir::llmc::loadModelConfigFile(
      goldenDir() + "/gpt2_c36_h4_v101_b2_t13.yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  config->vocabSize = 4099;
  mlir::MLIRContext context;
  auto program = test::compileConfig(context, *config, {1, 8});
  ASSERT_TRUE(mlir::succeeded(program));
  kir::Program copy = *program;
  auto executor = test::makeExecutor(std::move(*program));
  ASSERT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  runtime::CpuExecutor &exec = **executor;
  ASSERT_FALSE(bool(runtime::loadWeights(exec, "", 42)));

  size_t checked = 0;
  llvm::Error error = runtime::readProgramWeights(
      copy, "", 42,
      [&](const std::string &name,
          const runtime::HostTensor &want) -> llvm::Error {
        llvm::Expected<runtime::HostTensor> got = exec.output(name);
        if (!got)
          return got.takeError();
        EXPECT_TRUE(*got == want) << "parameter " << name;
        ++checked;
        return llvm::Error::success();
      });
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_EQ(checked, copy.params.size());
  // A different seed gives different weights (the seed reaches the fill).
  auto wte42 = exec.output("wte");
  ASSERT_TRUE(bool(wte42));
  ASSERT_FALSE(bool(runtime::loadWeights(exec, "", 43)));
  auto wte43 = exec.output("wte");
  ASSERT_TRUE(bool(wte43));
  EXPECT_FALSE(*wte42 == *wte43);

  // The staging default of Executor::writeTensor (other backends) sets
  // what `fill` wrote; an unknown name is an error naming it.
  ASSERT_FALSE(bool(exec.Executor::writeTensor(
      "wpe", [](llvm::MutableArrayRef<char> memory) {
        auto *values = reinterpret_cast<float *>(memory.data());
        for (size_t i = 0; i < memory.size() / sizeof(float); ++i)
          values[i] = float(i);
      })));
  auto wpe = exec.output("wpe");
  ASSERT_TRUE(bool(wpe));
  for (size_t i = 0; i < wpe->f32().size(); ++i)
    ASSERT_EQ(wpe->f32()[i], float(i));
  llvm::Error unknown = exec.writeTensor(
      "nope", [](llvm::MutableArrayRef<char>) {});
  EXPECT_EQ(llvm::toString(std::move(unknown)),
            "the model has no parameter or state 'nope'");
}

} // namespace
