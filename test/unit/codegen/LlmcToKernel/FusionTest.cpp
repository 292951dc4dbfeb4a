// Every kind of fused kernel against its unfused composition: the same
// model compiled with llmc-fusion and without it (each op then a kernel of
// its own) gives the same loss and logits.
#include "CompileUtil.h"

#include "frontend/ModelConfig.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace llmc;

namespace {

/// Runs `program` on parameters and ids drawn from `seed`; returns the
/// loss followed by the logits.
std::vector<float> runWithRandomInputs(kir::Program program, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto executor = test::makeExecutor(program);
  EXPECT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  if (!executor)
    return {};
  for (const std::vector<kir::Binding> *list :
       {&program.params, &program.inputs})
    for (const kir::Binding &binding : *list) {
      const kir::Buffer &buffer = program.buffers[binding.buffer];
      runtime::HostTensor tensor =
          runtime::HostTensor::zeros(buffer.dtype, buffer.shape);
      if (buffer.dtype == kir::DType::I32) {
        int64_t bound = buffer.idBound > 0 ? buffer.idBound : 7;
        for (int32_t &id : tensor.i32())
          id = int32_t(rng() % bound);
      } else {
        for (float &value : tensor.f32())
          value = 0.5f * uniform(rng);
      }
      EXPECT_FALSE(bool((*executor)->setTensor(binding.name, tensor)));
    }
  EXPECT_FALSE(bool((*executor)->run()));
  std::vector<float> result;
  for (const kir::Binding &output : program.outputs) {
    auto tensor = (*executor)->output(output.name);
    EXPECT_TRUE(bool(tensor));
    for (float value : tensor->f32())
      result.push_back(value);
  }
  return result;
}

std::set<std::string> kernelKinds(const kir::Program &program) {
  std::set<std::string> kinds;
  for (const kir::Kernel &kernel : program.kernels)
    kinds.insert(kernel.origin);
  return kinds;
}

void expectFusedMatchesUnfused(mlir::ModuleOp fusedModule,
                               mlir::ModuleOp unfusedModule,
                               const std::vector<std::string> &kinds) {
  auto fused = test::compileModule(fusedModule, /*fuse=*/true);
  auto unfused = test::compileModule(unfusedModule, /*fuse=*/false);
  ASSERT_TRUE(mlir::succeeded(fused) && mlir::succeeded(unfused));
  std::set<std::string> present = kernelKinds(*fused);
  for (const std::string &kind : kinds)
    EXPECT_TRUE(present.count(kind)) << "no fused kernel '" << kind << "'";
  EXPECT_LT(fused->steps.size(), unfused->steps.size());
  std::vector<float> a = runWithRandomInputs(*fused, 7);
  std::vector<float> b = runWithRandomInputs(*unfused, 7);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 2e-6 * std::max(1.0f, std::fabs(b[i])))
        << "element " << i;
}

void checkConfig(const char *yaml, const std::vector<std::string> &kinds) {
  auto config = mlir::llmc::parseModelConfig(yaml, "test.yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  mlir::MLIRContext context;
  auto a = mlir::llmc::buildForwardModule(context, *config, {2, 11});
  auto b = mlir::llmc::buildForwardModule(context, *config, {2, 11});
  ASSERT_TRUE(a && b);
  expectFusedMatchesUnfused(**a, **b, kinds);
}

TEST(Fusion, Gpt2Kernels) {
  checkConfig("name: f\nn_layer: 2\nn_head: 3\nn_embd: 39\nseq_len: 16\n"
              "vocab_size: 67\n",
              {"embedding_add_layer_norm", "matmul_add", "add_add_layer_norm",
               "matmul_add_gelu", "cross_entropy"});
}

TEST(Fusion, OptKernels) {
  checkConfig("name: f\nn_layer: 2\nn_head: 3\nn_embd: 39\nseq_len: 16\n"
              "vocab_size: 67\nactivation: relu\n",
              {"matmul_add_relu", "add_add_layer_norm"});
}

TEST(Fusion, LlamaKernels) {
  checkConfig("name: f\nn_layer: 2\nn_head: 2\nn_embd: 20\nseq_len: 16\n"
              "vocab_size: 67\nactivation: swiglu\nnorm: rmsnorm\n"
              "position: rope\nbias: false\ntie_embeddings: false\n",
              {"embedding_rms_norm", "rotary", "silu_mul", "add_rms_norm"});
}

// Softmax with fused producer and consumer, a reduction over the last dim
// with its producers, and a reduction over another dim (unfusable), each
// against its unfused composition.
TEST(Fusion, SoftmaxAndReductions) {
  const char *source = R"mlir(
func.func @forward(%x: tensor<2x5x24xf32> {llmc.param = "x"},
                   %b: tensor<24xf32> {llmc.param = "b"},
                   %w: tensor<24x24xf32> {llmc.param = "w"},
                   %tokens: tensor<2x5xi32>, %targets: tensor<2x5xi32>)
    -> (tensor<f32>, tensor<2x5x24xf32>) {
  %0 = llmc.add %x, %b : tensor<2x5x24xf32>, tensor<24xf32>
  %1 = llmc.softmax %0 : tensor<2x5x24xf32>
  %2 = llmc.mul %1, %x : tensor<2x5x24xf32>, tensor<2x5x24xf32>
  %3 = llmc.exp %2 : tensor<2x5x24xf32>
  %s = llmc.reduce_mean %3 dims [2] keep_dims : tensor<2x5x24xf32>
  %c = llmc.reduce_max %x dims [0] keep_dims : tensor<2x5x24xf32>
  %4 = llmc.sub %2, %s : tensor<2x5x24xf32>, tensor<2x5x1xf32>
  %5 = llmc.add %4, %c : tensor<2x5x24xf32>, tensor<1x5x24xf32>
  %6 = llmc.matmul %5, %w {transpose_b} : tensor<2x5x24xf32>, tensor<24x24xf32>
  %7 = llmc.tanh %6 : tensor<2x5x24xf32>
  %loss, %lse = llmc.cross_entropy %7, %targets : tensor<2x5x24xf32>, tensor<2x5xi32>
  return %loss, %7 : tensor<f32>, tensor<2x5x24xf32>
}
)mlir";
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto a = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  auto b = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  ASSERT_TRUE(a && b);
  expectFusedMatchesUnfused(*a, *b,
                            {"add_softmax_mul_exp", "reduce_mean",
                             "reduce_max", "sub_add", "matmul_tanh"});
}

} // namespace

namespace {

// Random small models of every family and option, fused against unfused:
// shapes, activations, norms, biases, tying and position encodings mix in
// ways the hand-written cases do not.
TEST(Fusion, RandomConfigs) {
  std::mt19937 rng(2026);
  const char *activations[] = {"gelu", "gelu_exact", "relu", "swiglu"};
  const char *norms[] = {"layernorm", "rmsnorm"};
  for (int trial = 0; trial < 6; ++trial) {
    int64_t heads = 1 + rng() % 3, headDim = 2 * (1 + rng() % 5);
    std::string yaml =
        "name: r\nn_layer: " + std::to_string(1 + rng() % 2) +
        "\nn_head: " + std::to_string(heads) +
        "\nn_embd: " + std::to_string(heads * headDim) +
        "\nseq_len: 12\nvocab_size: " + std::to_string(20 + rng() % 60) +
        "\nactivation: " + activations[rng() % 4] +
        "\nnorm: " + norms[rng() % 2] +
        "\nposition: " + (rng() % 2 ? "rope" : "learned") +
        "\nbias: " + (rng() % 2 ? "true" : "false") +
        "\ntie_embeddings: " + (rng() % 2 ? "true" : "false") + "\n";
    SCOPED_TRACE(yaml);
    auto config = mlir::llmc::parseModelConfig(yaml, "random.yaml");
    ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
    mlir::MLIRContext context;
    int64_t batch = 1 + rng() % 3, seq = 1 + rng() % 12;
    auto a = mlir::llmc::buildForwardModule(context, *config, {batch, seq});
    auto b = mlir::llmc::buildForwardModule(context, *config, {batch, seq});
    ASSERT_TRUE(a && b);
    expectFusedMatchesUnfused(**a, **b, {});
  }
}

} // namespace
