// Numerical checks of llmc-autodiff, independent of code generation: the
// interpreted @grad_step against central differences of the interpreted
// @forward (every differentiable op, and whole GPT-2, OPT and Llama-style
// models), and against gradients PyTorch computed in float64
// (test/golden/<case>.grads.safetensors, written by scripts/make_golden.py).
//
// Tolerances. Everything runs in double. A central difference with step
// h = 1e-5 is off by about h^2 |f'''| / 6 + 1e-16 |loss| / h, below 1e-9
// here, so a gradient g must match the difference d to
//   |g - d| <= 1e-6 * max(|d|, 1e-2)
// (the floor keeps near-zero entries from asking for a relative accuracy
// no difference quotient has). A coordinate that fails is retried with
// h = 1e-6, then 1e-7, for kinks of ReLU and max closer than 1e-5 to the
// point (found in OPT at init std 0.02: the difference is off by 2e-3 at
// h = 1e-5 and agrees to 1e-9 at h = 1e-6). Against PyTorch, which differentiates the
// same float64 math exactly, every entry must match to 1e-9 of the largest
// entry of its tensor.
#include "Interpreter.h"

#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "passes/Passes.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace mlir;
using ::llmc::test::RngState;
using ::llmc::test::Tensor;

namespace {

constexpr double kStep = 1e-5;
constexpr double kFdTolerance = 1e-6;
constexpr double kFdFloor = 1e-2;
constexpr double kTorchTolerance = 1e-9;
// The seed of the reverse sweep; not 1, so that a sweep that ignores it
// fails.
constexpr double kDloss = 1.5;

void loadDialects(MLIRContext &context) {
  context.loadDialect<mlir::llmc::LlmcDialect, func::FuncDialect>();
}

LogicalResult differentiate(ModuleOp module) {
  PassManager pm(module.getContext());
  pm.addPass(mlir::llmc::createAutodiffPass());
  return pm.run(module);
}

func::FuncOp function(ModuleOp module, StringRef name) {
  return module.lookupSymbol<func::FuncOp>(name);
}

std::vector<int64_t> shapeOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return std::vector<int64_t>(tensor.getShape().begin(),
                              tensor.getShape().end());
}

bool isParam(func::FuncOp forward, unsigned index) {
  return bool(forward.getArgAttr(index, "llmc.param"));
}

std::string paramName(func::FuncOp forward, unsigned index) {
  return cast<StringAttr>(forward.getArgAttr(index, "llmc.param"))
      .getValue()
      .str();
}

// Floats uniform in [lo, hi]; ids uniform in [0, idLimit).
std::vector<Tensor> randomInputs(func::FuncOp forward, std::mt19937_64 &gen,
                                 double lo, double hi, int64_t idLimit) {
  std::vector<Tensor> inputs;
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int64_t> id(0, std::max<int64_t>(idLimit, 1) - 1);
  for (Type type : forward.getArgumentTypes()) {
    Tensor t = Tensor::zeros(shapeOf(type));
    bool isId = isa<IntegerType>(cast<RankedTensorType>(type).getElementType());
    for (double &v : t.data)
      v = isId ? double(id(gen)) : real(gen);
    inputs.push_back(std::move(t));
  }
  return inputs;
}

double forwardLoss(func::FuncOp forward, const std::vector<Tensor> &inputs,
                   RngState rng) {
  auto results = ::llmc::test::interpret(forward, inputs, rng);
  if (!results) {
    ADD_FAILURE() << llvm::toString(results.takeError());
    return NAN;
  }
  return (*results)[0].data[0];
}

// The gradients @grad_step returns for `inputs` (seeded with kDloss), one
// per parameter of @forward, checking the loss it returns on the way.
std::vector<Tensor> gradStep(ModuleOp module,
                             const std::vector<Tensor> &inputs, RngState rng) {
  func::FuncOp forward = function(module, "forward");
  func::FuncOp gradFn = function(module, "grad_step");
  std::vector<Tensor> args = inputs;
  args.push_back(Tensor{{}, {kDloss}});
  auto results = ::llmc::test::interpret(gradFn, args, rng);
  if (!results) {
    ADD_FAILURE() << llvm::toString(results.takeError());
    return {};
  }
  EXPECT_NEAR((*results)[0].data[0], forwardLoss(forward, inputs, rng), 1e-12)
      << "@grad_step's loss differs from @forward's";
  return std::vector<Tensor>(results->begin() + 1, results->end());
}

struct FdReport {
  double worst = 0; // max |g - d| / max(|d|, floor)
  int checked = 0;
  int retried = 0; // coordinates that needed the shorter step
};

// Compares @grad_step with central differences of @forward on every
// coordinate of every parameter, or on `perParam` random ones.
FdReport checkAgainstDifferences(ModuleOp module, std::vector<Tensor> inputs,
                                 RngState rng, int perParam,
                                 std::mt19937_64 &gen) {
  func::FuncOp forward = function(module, "forward");
  std::vector<Tensor> grads = gradStep(module, inputs, rng);
  FdReport report;
  unsigned paramIndex = 0;
  for (unsigned arg = 0; arg < forward.getNumArguments(); ++arg) {
    if (!isParam(forward, arg))
      continue;
    if (paramIndex >= grads.size()) {
      ADD_FAILURE() << "@grad_step returns too few gradients";
      return report;
    }
    const Tensor &grad = grads[paramIndex++];
    std::vector<int64_t> coords(inputs[arg].numel());
    for (size_t i = 0; i < coords.size(); ++i)
      coords[i] = i;
    if (perParam >= 0 && size_t(perParam) < coords.size()) {
      std::shuffle(coords.begin(), coords.end(), gen);
      coords.resize(perParam);
    }
    for (int64_t c : coords) {
      double saved = inputs[arg].data[c];
      auto difference = [&](double h) {
        inputs[arg].data[c] = saved + h;
        double up = forwardLoss(forward, inputs, rng);
        inputs[arg].data[c] = saved - h;
        double down = forwardLoss(forward, inputs, rng);
        inputs[arg].data[c] = saved;
        return kDloss * (up - down) / (2 * h);
      };
      auto error = [&](double diff) {
        return std::fabs(grad.data[c] - diff) /
               std::max(std::fabs(diff), kFdFloor);
      };
      double diff = difference(kStep);
      double err = error(diff);
      // A ReLU or max kink closer than h to the point bends the difference
      // quotient (OPT's ReLU inputs crowd around 0 at init std 0.02); it
      // misleads only steps longer than its distance, so a failing
      // coordinate is retried with shorter steps.
      for (double h : {kStep / 10, kStep / 100}) {
        if (err <= kFdTolerance)
          break;
        double shortDiff = difference(h);
        double shortErr = error(shortDiff);
        if (shortErr <= kFdTolerance) {
          ++report.retried;
          diff = shortDiff;
          err = shortErr;
        }
      }
      report.worst = std::max(report.worst, err);
      ++report.checked;
      EXPECT_LE(err, kFdTolerance)
          << "gradient of " << paramName(forward, arg) << " at " << c << ": "
          << grad.data[c] << ", central difference " << diff;
    }
  }
  return report;
}

//===----------------------------------------------------------------------===//
// (a) every differentiable op
//===----------------------------------------------------------------------===//

// loss = sum(y * w) for the op's result %y of type `type` and random
// weights %w (an input, not a parameter), unless `function` gives the whole
// @forward.
struct OpCase {
  std::string name;
  std::string args; // parameters and other inputs of @forward
  std::string body; // defines %y
  std::string type; // of %y
  double lo = -1.0, hi = 1.0;
  int64_t idLimit = 0;
  RngState rng = {};
  std::string function = {};
};

std::string opFunction(const OpCase &c) {
  if (!c.function.empty())
    return c.function;
  int64_t rank = std::count(c.type.begin(), c.type.end(), 'x');
  std::string dims;
  for (int64_t d = 0; d < rank; ++d)
    dims += (d ? ", " : "") + std::to_string(d);
  return "func.func @forward(" + c.args + ", %w: " + c.type +
         " {llmc.input = \"weights\"}) -> tensor<f32> {\n" + c.body +
         "\n  %wy = llmc.mul %y, %w : " + c.type + ", " + c.type +
         "\n  %loss = llmc.reduce_sum %wy dims [" + dims + "] : " + c.type +
         "\n  return %loss : tensor<f32>\n}\n";
}

std::string param(const std::string &name, const std::string &type) {
  return "%" + name + ": " + type + " {llmc.param = \"" + name + "\"}";
}

std::vector<OpCase> opCases() {
  const std::string t23 = "tensor<2x3xf32>", t4 = "tensor<4xf32>";
  std::vector<OpCase> cases = {
      {"embedding",
       param("t", "tensor<7x3xf32>") +
           ", %ids: tensor<2x4xi32> {llmc.input = \"tokens\"}",
       "%y = llmc.embedding %t, %ids : tensor<7x3xf32>, tensor<2x4xi32>",
       "tensor<2x4x3xf32>", -1, 1, 7},
      {"matmul_transpose_b_batched",
       param("x", "tensor<2x3x4xf32>") + ", " + param("v", "tensor<5x4xf32>"),
       "%y = llmc.matmul %x, %v {transpose_b} : tensor<2x3x4xf32>, tensor<5x4xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul",
       param("x", "tensor<3x4xf32>") + ", " + param("v", "tensor<4x5xf32>"),
       "%y = llmc.matmul %x, %v : tensor<3x4xf32>, tensor<4x5xf32>",
       "tensor<3x5xf32>"},
      {"matmul_transpose_a",
       param("x", "tensor<4x3xf32>") + ", " + param("v", "tensor<4x5xf32>"),
       "%y = llmc.matmul %x, %v {transpose_a} : tensor<4x3xf32>, tensor<4x5xf32>",
       "tensor<3x5xf32>"},
      {"matmul_transpose_a_batched",
       param("x", "tensor<2x4x3xf32>") + ", " + param("v", "tensor<4x5xf32>"),
       "%y = llmc.matmul %x, %v {transpose_a} : tensor<2x4x3xf32>, tensor<4x5xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul_both_transposed",
       param("x", "tensor<4x3xf32>") + ", " + param("v", "tensor<5x4xf32>"),
       "%y = llmc.matmul %x, %v {transpose_a, transpose_b} : tensor<4x3xf32>, tensor<5x4xf32>",
       "tensor<3x5xf32>"},
      {"matmul_both_transposed_batched",
       param("x", "tensor<2x2x4x3xf32>") + ", " + param("v", "tensor<5x4xf32>"),
       "%y = llmc.matmul %x, %v {transpose_a, transpose_b} : tensor<2x2x4x3xf32>, tensor<5x4xf32>",
       "tensor<2x2x3x5xf32>"},
      {"batch_matmul",
       param("a", "tensor<2x3x4xf32>") + ", " + param("b", "tensor<2x4x5xf32>"),
       "%y = llmc.batch_matmul %a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32>",
       "tensor<2x3x5xf32>"},
      {"batch_matmul_transpose_a",
       param("a", "tensor<2x4x3xf32>") + ", " + param("b", "tensor<2x4x5xf32>"),
       "%y = llmc.batch_matmul %a, %b {transpose_a} : tensor<2x4x3xf32>, tensor<2x4x5xf32>",
       "tensor<2x3x5xf32>"},
      {"batch_matmul_transpose_b",
       param("a", "tensor<2x2x3x4xf32>") + ", " + param("b", "tensor<2x2x5x4xf32>"),
       "%y = llmc.batch_matmul %a, %b {transpose_b} : tensor<2x2x3x4xf32>, tensor<2x2x5x4xf32>",
       "tensor<2x2x3x5xf32>"},
      {"batch_matmul_both_transposed",
       param("a", "tensor<2x4x3xf32>") + ", " + param("b", "tensor<2x5x4xf32>"),
       "%y = llmc.batch_matmul %a, %b {transpose_a, transpose_b} : tensor<2x4x3xf32>, tensor<2x5x4xf32>",
       "tensor<2x3x5xf32>"},
      {"add_broadcast", param("x", t23) + ", " + param("b", "tensor<3xf32>"),
       "%y = llmc.add %x, %b : tensor<2x3xf32>, tensor<3xf32>", t23},
      {"sub_broadcast_both",
       param("x", "tensor<2x1x3xf32>") + ", " + param("z", "tensor<4x1xf32>"),
       "%y = llmc.sub %x, %z : tensor<2x1x3xf32>, tensor<4x1xf32>",
       "tensor<2x4x3xf32>"},
      {"mul_broadcast", param("x", t23) + ", " + param("z", "tensor<2x1xf32>"),
       "%y = llmc.mul %x, %z : tensor<2x3xf32>, tensor<2x1xf32>", t23},
      {"div_broadcast", param("x", "tensor<3xf32>") + ", " + param("z", t23),
       "%y = llmc.div %x, %z : tensor<3xf32>, tensor<2x3xf32>", t23, 0.5, 2},
      {"max_broadcast", param("x", t23) + ", " + param("z", "tensor<3xf32>"),
       "%y = llmc.max %x, %z : tensor<2x3xf32>, tensor<3xf32>", t23},
      {"neg", param("x", t4), "%y = llmc.neg %x : tensor<4xf32>", t4},
      {"exp", param("x", t4), "%y = llmc.exp %x : tensor<4xf32>", t4},
      {"log", param("x", t4), "%y = llmc.log %x : tensor<4xf32>", t4, 0.5, 2},
      {"tanh", param("x", t4), "%y = llmc.tanh %x : tensor<4xf32>", t4},
      {"sqrt", param("x", t4), "%y = llmc.sqrt %x : tensor<4xf32>", t4, 0.5, 2},
      {"rsqrt", param("x", t4), "%y = llmc.rsqrt %x : tensor<4xf32>", t4, 0.5,
       2},
      {"relu", param("x", "tensor<8xf32>"),
       "%y = llmc.relu %x : tensor<8xf32>", "tensor<8xf32>"},
      {"silu", param("x", t4), "%y = llmc.silu %x : tensor<4xf32>", t4, -3, 3},
      {"gelu_tanh", param("x", t4),
       "%y = llmc.gelu %x approximate = tanh : tensor<4xf32>", t4, -3, 3},
      {"gelu_erf", param("x", t4),
       "%y = llmc.gelu %x approximate = none : tensor<4xf32>", t4, -3, 3},
      {"cast", param("x", t23),
       "%h = llmc.cast %x : tensor<2x3xf32> -> tensor<2x3xbf16>\n"
       "  %y = llmc.cast %h : tensor<2x3xbf16> -> tensor<2x3xf32>",
       t23},
      {"dropout", param("x", "tensor<4x8xf32>"),
       "%y = llmc.dropout %x {rate = 0.3 : f32, stream = 5 : i64} : tensor<4x8xf32>",
       "tensor<4x8xf32>", -1, 1, 0, RngState{1234, 7}},
      {"layer_norm",
       param("x", "tensor<2x3x5xf32>") + ", " + param("g", "tensor<5xf32>") +
           ", " + param("b", "tensor<5xf32>"),
       "%y, %mean, %rstd = llmc.layer_norm %x, %g, %b {epsilon = 1.0e-5 : f32} "
       ": tensor<2x3x5xf32>, tensor<5xf32>, tensor<5xf32>",
       "tensor<2x3x5xf32>"},
      {"layer_norm_no_bias",
       param("x", "tensor<3x5xf32>") + ", " + param("g", "tensor<5xf32>"),
       "%y, %mean, %rstd = llmc.layer_norm %x, %g {epsilon = 1.0e-5 : f32} "
       ": tensor<3x5xf32>, tensor<5xf32>",
       "tensor<3x5xf32>"},
      {"rms_norm",
       param("x", "tensor<2x3x5xf32>") + ", " + param("g", "tensor<5xf32>"),
       "%y, %rstd = llmc.rms_norm %x, %g {epsilon = 1.0e-6 : f32} "
       ": tensor<2x3x5xf32>, tensor<5xf32>",
       "tensor<2x3x5xf32>"},
      {"softmax", param("x", "tensor<2x3x5xf32>"),
       "%y = llmc.softmax %x : tensor<2x3x5xf32>", "tensor<2x3x5xf32>", -2, 2},
      {"attention_causal",
       param("q", "tensor<2x5x4xf32>") + ", " + param("k", "tensor<2x5x4xf32>") +
           ", " + param("v", "tensor<2x5x3xf32>"),
       "%y, %lse = llmc.attention %q, %k, %v {causal, scale = 0.5 : f32} "
       ": tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x3xf32>",
       "tensor<2x5x3xf32>", -2, 2},
      {"attention_full_cross",
       param("q", "tensor<2x2x3x4xf32>") + ", " +
           param("k", "tensor<2x2x5x4xf32>") + ", " +
           param("v", "tensor<2x2x5x3xf32>"),
       "%y, %lse = llmc.attention %q, %k, %v {scale = 0.5 : f32} "
       ": tensor<2x2x3x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x3xf32>",
       "tensor<2x2x3x3xf32>", -2, 2},
      {"attention_causal_decode",
       param("q", "tensor<2x3x4xf32>") + ", " + param("k", "tensor<2x5x4xf32>") +
           ", " + param("v", "tensor<2x5x3xf32>"),
       "%y, %lse = llmc.attention %q, %k, %v {causal, scale = 0.5 : f32} "
       ": tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2x5x3xf32>",
       "tensor<2x3x3xf32>", -2, 2},
      {"rotary", param("x", "tensor<2x5x6xf32>"),
       "%y = llmc.rotary %x {theta = 100.0 : f32} : tensor<2x5x6xf32>",
       "tensor<2x5x6xf32>"},
      {"rotary_inverse", param("x", "tensor<5x4xf32>"),
       "%y = llmc.rotary %x {theta = 10.0 : f32, inverse} : tensor<5x4xf32>",
       "tensor<5x4xf32>"},
      {"cross_entropy", "", "", "", -2, 2, 5, {},
       "func.func @forward(" + param("l", "tensor<2x3x5xf32>") +
           ", %t: tensor<2x3xi32> {llmc.input = \"targets\"}) -> tensor<f32> {\n"
           "  %loss, %lse = llmc.cross_entropy %l, %t : tensor<2x3x5xf32>, tensor<2x3xi32>\n"
           "  return %loss : tensor<f32>\n}\n"},
      {"reshape", param("x", "tensor<2x6xf32>"),
       "%y = llmc.reshape %x : tensor<2x6xf32> -> tensor<3x2x2xf32>",
       "tensor<3x2x2xf32>"},
      {"transpose", param("x", "tensor<2x3x4xf32>"),
       "%y = llmc.transpose %x, [2, 0, 1] : tensor<2x3x4xf32>",
       "tensor<4x2x3xf32>"},
      {"slice", param("x", "tensor<4x6x3xf32>"),
       "%y = llmc.slice %x offsets [1, 0, 1] sizes [2, 6, 1] : tensor<4x6x3xf32>",
       "tensor<2x6x1xf32>"},
      {"concat",
       param("a", "tensor<2x3xf32>") + ", " + param("b", "tensor<2x1xf32>") +
           ", " + param("c", "tensor<2x2xf32>"),
       "%y = llmc.concat %a, %b, %c dim 1 : tensor<2x3xf32>, tensor<2x1xf32>, "
       "tensor<2x2xf32>",
       "tensor<2x6xf32>"},
      {"broadcast", param("x", "tensor<3x1xf32>"),
       "%y = llmc.broadcast %x : tensor<3x1xf32> -> tensor<2x3x4xf32>",
       "tensor<2x3x4xf32>"},
      {"reduce_sum", param("x", "tensor<2x3x4xf32>"),
       "%y = llmc.reduce_sum %x dims [0, 2] : tensor<2x3x4xf32>",
       "tensor<3xf32>"},
      {"reduce_sum_keep_dims", param("x", "tensor<2x3x4xf32>"),
       "%y = llmc.reduce_sum %x dims [1] keep_dims : tensor<2x3x4xf32>",
       "tensor<2x1x4xf32>"},
      {"reduce_mean", param("x", "tensor<2x3x4xf32>"),
       "%y = llmc.reduce_mean %x dims [1, 2] : tensor<2x3x4xf32>",
       "tensor<2xf32>"},
      {"reduce_max", param("x", "tensor<2x3x4xf32>"),
       "%y = llmc.reduce_max %x dims [2] : tensor<2x3x4xf32>",
       "tensor<2x3xf32>"},
      {"reduce_max_keep_dims", param("x", "tensor<2x3x4xf32>"),
       "%y = llmc.reduce_max %x dims [0, 1] keep_dims : tensor<2x3x4xf32>",
       "tensor<1x1x4xf32>"},
      // One value read by several ops: the gradients add up.
      {"fan_out", param("x", t23),
       "%e = llmc.exp %x : tensor<2x3xf32>\n"
       "  %m = llmc.mul %e, %x : tensor<2x3xf32>, tensor<2x3xf32>\n"
       "  %y = llmc.add %m, %e : tensor<2x3xf32>, tensor<2x3xf32>",
       t23},
  };
  return cases;
}

class OpGradient : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpGradient, MatchesCentralDifferences) {
  const OpCase &c = GetParam();
  MLIRContext context;
  loadDialects(context);
  std::string source = opFunction(c);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  ASSERT_TRUE(module) << source;
  ASSERT_TRUE(succeeded(differentiate(*module)));
  std::mt19937_64 gen(std::hash<std::string>()(c.name));
  std::vector<Tensor> inputs = randomInputs(function(*module, "forward"), gen,
                                            c.lo, c.hi, c.idLimit);
  FdReport report = checkAgainstDifferences(*module, inputs, c.rng, -1, gen);
  EXPECT_GT(report.checked, 0);
  std::printf("%-32s %3d coordinates, max relative error %.2e\n",
              c.name.c_str(), report.checked, report.worst);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpGradient, ::testing::ValuesIn(opCases()),
                         [](const auto &info) { return info.param.name; });

// Reduce_max with a tie: the two maxima share the gradient equally (the
// one-sided differences at a tie are 0 and 1, their mean 1/2).
TEST(OpGradientTies, ReduceMaxSplitsBetweenEqualMaxima) {
  MLIRContext context;
  loadDialects(context);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      "func.func @forward(" + param("x", "tensor<4xf32>") +
          ") -> tensor<f32> {\n"
          "  %loss = llmc.reduce_max %x dims [0] : tensor<4xf32>\n"
          "  return %loss : tensor<f32>\n}\n",
      &context);
  ASSERT_TRUE(module && succeeded(differentiate(*module)));
  std::vector<Tensor> grads =
      gradStep(*module, {Tensor{{4}, {0.5, 2.0, -1.0, 2.0}}}, {});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0].data, (std::vector<double>{0, kDloss / 2, 0, kDloss / 2}));
}

// The vocabulary-parallel embedding and cross-entropy of two tp ranks,
// written in one function: V = 5 ids in 2 blocks of 3 rows (the last row
// of block 1 padding), the all-reduces as the max and sums they compute.
// The loss and the gradient of wte match one whole embedding, classifier
// and llmc.cross_entropy (so the padding counts for nothing, and the rules
// that give the shared max no gradient are right), and central
// differences.
TEST(VocabParallel, TwoBlocksMatchTheWholeVocabulary) {
  const std::string blocks =
      "func.func @forward(" + param("wte", "tensor<5x4xf32>") +
      ", %tokens: tensor<2x3xi32> {llmc.input = \"tokens\"}"
      ", %targets: tensor<2x3xi32> {llmc.input = \"targets\"}) -> tensor<f32> {\n"
      "  %zero = llmc.fill 0.0 : tensor<1x4xf32>\n"
      "  %padded = llmc.concat %wte, %zero dim 0 : tensor<5x4xf32>, tensor<1x4xf32>\n"
      "  %b0 = llmc.slice %padded offsets [0, 0] sizes [3, 4] : tensor<6x4xf32>\n"
      "  %b1 = llmc.slice %padded offsets [3, 0] sizes [3, 4] : tensor<6x4xf32>\n"
      "  %e0 = llmc.embedding %b0, %tokens vocab_start 0 vocab_size 5 : tensor<3x4xf32>, tensor<2x3xi32>\n"
      "  %e1 = llmc.embedding %b1, %tokens vocab_start 3 vocab_size 5 : tensor<3x4xf32>, tensor<2x3xi32>\n"
      "  %x = llmc.add %e0, %e1 : tensor<2x3x4xf32>, tensor<2x3x4xf32>\n"
      "  %l0 = llmc.matmul %x, %b0 {transpose_b} : tensor<2x3x4xf32>, tensor<3x4xf32>\n"
      "  %l1 = llmc.matmul %x, %b1 {transpose_b} : tensor<2x3x4xf32>, tensor<3x4xf32>\n"
      "  %m0 = llmc.vocab_shard_max %l0 vocab_start 0 vocab_size 5 : tensor<2x3x3xf32>\n"
      "  %m1 = llmc.vocab_shard_max %l1 vocab_start 3 vocab_size 5 : tensor<2x3x3xf32>\n"
      "  %m = llmc.max %m0, %m1 : tensor<2x3xf32>, tensor<2x3xf32>\n"
      "  %s0, %t0 = llmc.vocab_shard_cross_entropy %l0, %targets, %m vocab_start 0 vocab_size 5 : tensor<2x3x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>\n"
      "  %s1, %t1 = llmc.vocab_shard_cross_entropy %l1, %targets, %m vocab_start 3 vocab_size 5 : tensor<2x3x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>\n"
      "  %s = llmc.add %s0, %s1 : tensor<2x3xf32>, tensor<2x3xf32>\n"
      "  %t = llmc.add %t0, %t1 : tensor<2x3xf32>, tensor<2x3xf32>\n"
      "  %loss, %lse = llmc.cross_entropy_combine %m, %s, %t : tensor<2x3xf32>\n"
      "  return %loss : tensor<f32>\n}\n";
  const std::string whole =
      "func.func @forward(" + param("wte", "tensor<5x4xf32>") +
      ", %tokens: tensor<2x3xi32> {llmc.input = \"tokens\"}"
      ", %targets: tensor<2x3xi32> {llmc.input = \"targets\"}) -> tensor<f32> {\n"
      "  %x = llmc.embedding %wte, %tokens : tensor<5x4xf32>, tensor<2x3xi32>\n"
      "  %l = llmc.matmul %x, %wte {transpose_b} : tensor<2x3x4xf32>, tensor<5x4xf32>\n"
      "  %loss, %lse = llmc.cross_entropy %l, %targets : tensor<2x3x5xf32>, tensor<2x3xi32>\n"
      "  return %loss : tensor<f32>\n}\n";
  MLIRContext context;
  loadDialects(context);
  OwningOpRef<ModuleOp> split = parseSourceString<ModuleOp>(blocks, &context);
  OwningOpRef<ModuleOp> reference = parseSourceString<ModuleOp>(whole, &context);
  ASSERT_TRUE(split && reference);
  ASSERT_TRUE(succeeded(differentiate(*split)));
  ASSERT_TRUE(succeeded(differentiate(*reference)));
  std::mt19937_64 gen(15);
  // Ids of both blocks, the last real one (4) included.
  std::vector<Tensor> inputs =
      randomInputs(function(*split, "forward"), gen, -2.0, 2.0, 5);
  inputs[1].data = {0, 4, 3, 2, 4, 1};
  inputs[2].data = {4, 0, 3, 4, 2, 1};
  double loss = forwardLoss(function(*split, "forward"), inputs, {});
  double expected = forwardLoss(function(*reference, "forward"), inputs, {});
  EXPECT_NEAR(loss, expected, 1e-12 * std::fabs(expected));
  std::vector<Tensor> grads = gradStep(*split, inputs, {});
  std::vector<Tensor> wanted = gradStep(*reference, inputs, {});
  ASSERT_EQ(grads.size(), 1u);
  ASSERT_EQ(wanted.size(), 1u);
  for (size_t i = 0; i < wanted[0].data.size(); ++i)
    EXPECT_NEAR(grads[0].data[i], wanted[0].data[i], 1e-12) << "wte " << i;
  FdReport report = checkAgainstDifferences(*split, inputs, {}, -1, gen);
  EXPECT_EQ(report.checked, 20);
}

// The dropout mask is a function of (seed, step, stream, index): another
// step gives another mask, and the gradient follows the forward's mask.
TEST(OpGradientDropout, GradientUsesTheForwardMask) {
  MLIRContext context;
  loadDialects(context);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      "func.func @forward(" + param("x", "tensor<64xf32>") +
          ") -> tensor<f32> {\n"
          "  %y = llmc.dropout %x {rate = 0.5 : f32, stream = 3 : i64} : tensor<64xf32>\n"
          "  %loss = llmc.reduce_sum %y dims [0] : tensor<64xf32>\n"
          "  return %loss : tensor<f32>\n}\n",
      &context);
  ASSERT_TRUE(module && succeeded(differentiate(*module)));
  Tensor ones{{64}, std::vector<double>(64, 1.0)};
  std::vector<Tensor> a = gradStep(*module, {ones}, RngState{7, 1});
  std::vector<Tensor> b = gradStep(*module, {ones}, RngState{7, 2});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  int kept = 0;
  for (double g : a[0].data) {
    EXPECT_TRUE(g == 0.0 || g == kDloss * 2.0) << g;
    kept += g != 0.0;
  }
  EXPECT_GT(kept, 16);
  EXPECT_LT(kept, 48);
  EXPECT_NE(a[0].data, b[0].data);
}

//===----------------------------------------------------------------------===//
// (b) whole models against central differences, (c) against PyTorch
//===----------------------------------------------------------------------===//

std::string goldenDir() {
  return std::string(LLMC_SOURCE_DIR) + "/test/golden";
}

// The golden cases with gradients: <case>.grads.safetensors next to
// <case>.yaml and <case>.safetensors.
std::vector<std::string> goldenCases() {
  std::vector<std::string> cases;
  std::error_code ec;
  StringRef suffix = ".grads.safetensors";
  for (llvm::sys::fs::directory_iterator it(goldenDir(), ec), end;
       it != end && !ec; it.increment(ec)) {
    StringRef file = llvm::sys::path::filename(it->path());
    if (file.ends_with(suffix))
      cases.push_back(file.drop_back(suffix.size()).str());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

Tensor fromHost(const ::llmc::runtime::HostTensor &host) {
  Tensor t;
  t.shape.assign(host.shape.begin(), host.shape.end());
  if (host.dtype == ::llmc::kir::DType::I32) {
    for (int32_t v : host.i32())
      t.data.push_back(v);
  } else {
    for (float v : host.toF32())
      t.data.push_back(v);
  }
  return t;
}

// A golden case: its config built and differentiated, and the inputs of
// @forward (parameters, tokens, targets) from its safetensors file.
struct ModelCase {
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::vector<Tensor> inputs;
  ::llmc::runtime::SafetensorsFile file;
};

::testing::AssertionResult loadModelCase(const std::string &name,
                                         ModelCase &c) {
  std::string base = goldenDir() + "/" + name;
  auto file = ::llmc::runtime::readSafetensorsFile(base + ".safetensors");
  if (!file)
    return ::testing::AssertionFailure() << llvm::toString(file.takeError());
  c.file = std::move(*file);
  auto config = mlir::llmc::loadModelConfigFile(base + ".yaml");
  if (!config)
    return ::testing::AssertionFailure() << llvm::toString(config.takeError());
  loadDialects(c.context);
  mlir::llmc::ForwardShape shape{std::stoll(c.file.metadata.at("batch")),
                           std::stoll(c.file.metadata.at("seq_len"))};
  auto module = mlir::llmc::buildForwardModule(c.context, *config, shape);
  if (!module)
    return ::testing::AssertionFailure() << llvm::toString(module.takeError());
  c.module = std::move(*module);
  if (failed(differentiate(*c.module)))
    return ::testing::AssertionFailure() << "llmc-autodiff failed";
  func::FuncOp forward = function(*c.module, "forward");
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    std::string key =
        isParam(forward, i)
            ? paramName(forward, i)
            : cast<StringAttr>(forward.getArgAttr(i, "llmc.input")).str();
    auto it = c.file.tensors.find(key);
    if (it == c.file.tensors.end())
      return ::testing::AssertionFailure() << name << ": no tensor " << key;
    c.inputs.push_back(fromHost(it->second));
  }
  return ::testing::AssertionSuccess();
}

class ModelGradient : public ::testing::TestWithParam<std::string> {};

// Four random coordinates of every parameter.
TEST_P(ModelGradient, MatchesCentralDifferences) {
  ModelCase c;
  ASSERT_TRUE(loadModelCase(GetParam(), c));
  std::mt19937_64 gen(std::hash<std::string>()(GetParam()));
  FdReport report = checkAgainstDifferences(*c.module, c.inputs, {}, 4, gen);
  std::printf("%-36s %4d coordinates (%d with the short step), max "
              "relative error %.2e\n",
              GetParam().c_str(), report.checked, report.retried,
              report.worst);
}

TEST_P(ModelGradient, MatchesPyTorchFloat64) {
  ModelCase c;
  ASSERT_TRUE(loadModelCase(GetParam(), c));
  std::string path = goldenDir() + "/" + GetParam() + ".grads.safetensors";
  auto golden = ::llmc::runtime::readSafetensorsFile(path);
  ASSERT_TRUE(bool(golden)) << llvm::toString(golden.takeError());
  func::FuncOp forward = function(*c.module, "forward");
  std::vector<Tensor> grads = gradStep(*c.module, c.inputs, {});
  double worst = 0;
  unsigned index = 0;
  for (unsigned arg = 0; arg < forward.getNumArguments(); ++arg) {
    if (!isParam(forward, arg))
      continue;
    std::string name = "grad." + paramName(forward, arg);
    ASSERT_LT(index, grads.size());
    const Tensor &got = grads[index++];
    auto it = golden->f64Tensors.find(name);
    ASSERT_NE(it, golden->f64Tensors.end()) << path << " has no " << name;
    const std::vector<double> &want = it->second.values;
    ASSERT_EQ(got.data.size(), want.size()) << name;
    double scale = 0;
    for (double w : want)
      scale = std::max(scale, std::fabs(w));
    // The golden gradients are of the loss itself; @grad_step scales them
    // by the seed.
    for (size_t i = 0; i < want.size(); ++i) {
      double err = std::fabs(got.data[i] / kDloss - want[i]) / scale;
      worst = std::max(worst, err);
      ASSERT_LE(err, kTorchTolerance)
          << name << "[" << i << "]: " << got.data[i] / kDloss
          << ", PyTorch " << want[i];
    }
  }
  EXPECT_EQ(index, golden->f64Tensors.size())
      << "the golden file has gradients of parameters @forward lacks";
  std::printf("%-36s max error %.2e of the largest gradient entry\n",
              GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGradient,
                         ::testing::ValuesIn(goldenCases()),
                         [](const auto &info) { return info.param; });

// A GPT-2 with dropout: the backward applies the forward's masks, so the
// gradient of one step (one seed and step) matches differences taken with
// those masks fixed.
TEST(ModelGradientDropout, MatchesCentralDifferences) {
  auto config = mlir::llmc::parseModelConfig(
      "name: d\nn_layer: 1\nn_head: 2\nn_embd: 12\nseq_len: 5\n"
      "vocab_size: 11\ndropout: 0.2\n",
      "d.yaml");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  MLIRContext context;
  loadDialects(context);
  auto module = mlir::llmc::buildForwardModule(context, *config, {2, 5});
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  ASSERT_TRUE(succeeded(differentiate(**module)));
  std::mt19937_64 gen(42);
  std::vector<Tensor> inputs =
      randomInputs(function(**module, "forward"), gen, -0.5, 0.5, 11);
  FdReport report =
      checkAgainstDifferences(**module, inputs, RngState{99, 3}, 4, gen);
  std::printf("gpt2 with dropout 0.2 %4d coordinates, max relative error "
              "%.2e\n",
              report.checked, report.worst);
}

} // namespace
