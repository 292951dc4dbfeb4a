// The ops of a training step lowered to programs and run on the CPU, each
// against a plain scalar reference in double precision: backward ops,
// attention and embedding gradients, dropout, reductions over leading dims
// and to scalars, `llmc.updates` written in place or copied, and State
// buffers shared between executors through one PersistentStore. Shapes are
// small and odd (not multiples of the vector width) so tail loops run too.
#include "CompileUtil.h"

#include "runtime/Weights/Weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace llmc;
using runtime::HostTensor;

namespace {

std::vector<float> randomValues(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(n);
  for (float &value : values)
    value = uniform(rng);
  return values;
}

HostTensor ids(std::vector<int32_t> values, std::vector<int64_t> shape) {
  HostTensor tensor = HostTensor::zeros(kir::DType::I32, std::move(shape));
  std::copy(values.begin(), values.end(), tensor.i32().begin());
  return tensor;
}

/// Compiles function `name` of `source` (fused or one kernel per op) and
/// loads it into an executor; fails the test and returns null on error.
std::unique_ptr<runtime::CpuExecutor>
compile(llvm::StringRef source, llvm::StringRef name, bool fuse = true,
        std::shared_ptr<runtime::PersistentStore> store = nullptr) {
  mlir::MLIRContext context;
  mlir::FailureOr<kir::Program> program =
      test::compileFunction(context, source, name, fuse);
  if (mlir::failed(program)) {
    ADD_FAILURE() << "cannot compile @" << name.str();
    return nullptr;
  }
  auto executor = test::makeExecutor(std::move(*program), 0, std::move(store));
  if (!executor) {
    ADD_FAILURE() << llvm::toString(executor.takeError());
    return nullptr;
  }
  return std::move(*executor);
}

void set(runtime::CpuExecutor &executor, llvm::StringRef name,
         const HostTensor &tensor) {
  llvm::Error error = executor.setTensor(name, tensor);
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

std::vector<float> get(runtime::CpuExecutor &executor, llvm::StringRef name) {
  auto tensor = executor.output(name);
  if (!tensor) {
    ADD_FAILURE() << llvm::toString(tensor.takeError());
    return {};
  }
  return tensor->toF32();
}

void run(runtime::CpuExecutor &executor) {
  llvm::Error error = executor.run();
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

void expectNear(llvm::ArrayRef<float> actual, llvm::ArrayRef<double> expected,
                double tolerance, const char *what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i],
                tolerance * (1.0 + std::fabs(expected[i])))
        << what << " element " << i;
}

int countSteps(const kir::Program &program, kir::StepKind kind) {
  return llvm::count_if(
      program.steps, [&](const kir::Step &step) { return step.kind == kind; });
}

//===----------------------------------------------------------------------===//
// Embedding gradient
//===----------------------------------------------------------------------===//

TEST(Training, EmbeddingGradSumsRepeatedIdsInOrder) {
  const char *source = R"mlir(
    func.func @f(%g: tensor<3x5x7xf32> {llmc.input = "g"},
                 %ids: tensor<3x5xi32> {llmc.input = "ids"})
        -> (tensor<11x7xf32> {llmc.output = "dwte"}) {
      %d = llmc.embedding_grad %g, %ids
          : tensor<3x5x7xf32>, tensor<3x5xi32> -> tensor<11x7xf32>
      return %d : tensor<11x7xf32>
    })mlir";
  auto executor = compile(source, "f");
  ASSERT_TRUE(executor);
  EXPECT_EQ(countSteps(executor->program(), kir::StepKind::EmbeddingGrad), 1);
  std::vector<int32_t> tokens = {3, 3, 0,  10, 3, 5, 0, 3,
                                 3, 7, 10, 10, 1, 3, 2};
  std::vector<float> g = randomValues(3 * 5 * 7, 1);
  set(*executor, "g", HostTensor::fromF32(g, {3, 5, 7}));
  set(*executor, "ids", ids(tokens, {3, 5}));
  run(*executor);
  // Positions in increasing order, in float: the result is bit-exact.
  std::vector<float> expected(11 * 7, 0.0f);
  for (size_t p = 0; p < tokens.size(); ++p)
    for (int c = 0; c < 7; ++c)
      expected[tokens[p] * 7 + c] += g[p * 7 + c];
  std::vector<float> actual = get(*executor, "dwte");
  EXPECT_EQ(actual, expected);

  // An id outside the table is a data error before anything runs.
  tokens[4] = 11;
  set(*executor, "ids", ids(tokens, {3, 5}));
  llvm::Error error = executor->run();
  EXPECT_TRUE(bool(error));
  llvm::consumeError(std::move(error));
}

//===----------------------------------------------------------------------===//
// Norm gradients
//===----------------------------------------------------------------------===//

struct NormReference {
  std::vector<double> dx, dw, db;
};

/// LayerNorm (rms = false) or RMSNorm backward over rows of length C.
NormReference normBackward(const std::vector<float> &x,
                           const std::vector<float> &dy,
                           const std::vector<float> &w, int64_t rows, int64_t C,
                           double eps, bool rms) {
  NormReference ref;
  ref.dx.assign(rows * C, 0.0);
  ref.dw.assign(C, 0.0);
  ref.db.assign(C, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &x[r * C], *dyr = &dy[r * C];
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t c = 0; c < C; ++c)
        mean += xr[c];
      mean /= C;
    }
    for (int64_t c = 0; c < C; ++c)
      var += (xr[c] - mean) * (xr[c] - mean);
    var /= C;
    double rstd = 1.0 / std::sqrt(var + eps);
    double sumG = 0, sumGX = 0;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (xr[c] - mean) * rstd, g = dyr[c] * double(w[c]);
      sumG += g;
      sumGX += g * xhat;
      ref.dw[c] += dyr[c] * xhat;
      ref.db[c] += dyr[c];
    }
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (xr[c] - mean) * rstd, g = dyr[c] * double(w[c]);
      double centered = g - xhat * sumGX / C - (rms ? 0.0 : sumG / C);
      ref.dx[r * C + c] = centered * rstd;
    }
  }
  return ref;
}

class NormGrad : public ::testing::TestWithParam<bool> {}; // fused?

TEST_P(NormGrad, LayerNormGradAllThreeOutputs) {
  // dx also gets a residual gradient added: fused into the row kernel.
  const char *source = R"mlir(
    func.func @f(%x: tensor<3x5x13xf32> {llmc.input = "x"},
                 %dy: tensor<3x5x13xf32> {llmc.input = "dy"},
                 %res: tensor<3x5x13xf32> {llmc.input = "res"},
                 %w: tensor<13xf32> {llmc.param = "w"},
                 %b: tensor<13xf32> {llmc.param = "b"})
        -> (tensor<3x5x13xf32> {llmc.output = "dx"},
            tensor<13xf32> {llmc.output = "dw"},
            tensor<13xf32> {llmc.output = "db"}) {
      %y, %mean, %rstd = llmc.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32}
          : tensor<3x5x13xf32>, tensor<13xf32>, tensor<13xf32>
      %dx, %dw, %db = llmc.layer_norm_grad %dy, %x, %w, %mean, %rstd
          : tensor<3x5x13xf32>, tensor<3x5x13xf32>, tensor<13xf32>,
            tensor<3x5xf32>, tensor<3x5xf32>
      %sum = llmc.add %dx, %res : tensor<3x5x13xf32>, tensor<3x5x13xf32>
      return %sum, %dw, %db : tensor<3x5x13xf32>, tensor<13xf32>, tensor<13xf32>
    })mlir";
  auto executor = compile(source, "f", GetParam());
  ASSERT_TRUE(executor);
  std::vector<float> x = randomValues(195, 2, 2.0f), dy = randomValues(195, 3),
                     res = randomValues(195, 4), w = randomValues(13, 5),
                     b = randomValues(13, 6);
  set(*executor, "x", HostTensor::fromF32(x, {3, 5, 13}));
  set(*executor, "dy", HostTensor::fromF32(dy, {3, 5, 13}));
  set(*executor, "res", HostTensor::fromF32(res, {3, 5, 13}));
  set(*executor, "w", HostTensor::fromF32(w, {13}));
  set(*executor, "b", HostTensor::fromF32(b, {13}));
  run(*executor);
  NormReference ref = normBackward(x, dy, w, 15, 13, 1e-5, /*rms=*/false);
  for (size_t i = 0; i < ref.dx.size(); ++i)
    ref.dx[i] += res[i];
  expectNear(get(*executor, "dx"), ref.dx, 2e-5, "dx");
  expectNear(get(*executor, "dw"), ref.dw, 2e-5, "dw");
  expectNear(get(*executor, "db"), ref.db, 2e-5, "db");
}

TEST_P(NormGrad, RmsNormGradBothOutputs) {
  const char *source = R"mlir(
    func.func @f(%x: tensor<5x3x11xf32> {llmc.input = "x"},
                 %dy: tensor<5x3x11xf32> {llmc.input = "dy"},
                 %w: tensor<11xf32> {llmc.param = "w"})
        -> (tensor<5x3x11xf32> {llmc.output = "dx"},
            tensor<11xf32> {llmc.output = "dw"}) {
      %y, %rstd = llmc.rms_norm %x, %w {epsilon = 1.0e-6 : f32}
          : tensor<5x3x11xf32>, tensor<11xf32>
      %dx, %dw = llmc.rms_norm_grad %dy, %x, %w, %rstd
          : tensor<5x3x11xf32>, tensor<5x3x11xf32>, tensor<11xf32>,
            tensor<5x3xf32>
      return %dx, %dw : tensor<5x3x11xf32>, tensor<11xf32>
    })mlir";
  auto executor = compile(source, "f", GetParam());
  ASSERT_TRUE(executor);
  std::vector<float> x = randomValues(165, 7, 2.0f), dy = randomValues(165, 8),
                     w = randomValues(11, 9);
  set(*executor, "x", HostTensor::fromF32(x, {5, 3, 11}));
  set(*executor, "dy", HostTensor::fromF32(dy, {5, 3, 11}));
  set(*executor, "w", HostTensor::fromF32(w, {11}));
  run(*executor);
  NormReference ref = normBackward(x, dy, w, 15, 11, 1e-6, /*rms=*/true);
  expectNear(get(*executor, "dx"), ref.dx, 2e-5, "dx");
  expectNear(get(*executor, "dw"), ref.dw, 2e-5, "dw");
}

INSTANTIATE_TEST_SUITE_P(FusedAndUnfused, NormGrad, ::testing::Bool());

//===----------------------------------------------------------------------===//
// Softmax and cross-entropy gradients
//===----------------------------------------------------------------------===//

TEST(Training, SoftmaxGrad) {
  const char *source = R"mlir(
    func.func @f(%x: tensor<4x3x11xf32> {llmc.input = "x"},
                 %g: tensor<4x3x11xf32> {llmc.input = "g"})
        -> (tensor<4x3x11xf32> {llmc.output = "dx"}) {
      %y = llmc.softmax %x : tensor<4x3x11xf32>
      %d = llmc.softmax_grad %g, %y : tensor<4x3x11xf32>
      return %d : tensor<4x3x11xf32>
    })mlir";
  auto executor = compile(source, "f");
  ASSERT_TRUE(executor);
  std::vector<float> x = randomValues(132, 10, 3.0f), g = randomValues(132, 11);
  set(*executor, "x", HostTensor::fromF32(x, {4, 3, 11}));
  set(*executor, "g", HostTensor::fromF32(g, {4, 3, 11}));
  run(*executor);
  std::vector<double> expected(132);
  for (int r = 0; r < 12; ++r) {
    double max = -INFINITY, sum = 0, dot = 0;
    for (int c = 0; c < 11; ++c)
      max = std::max(max, double(x[r * 11 + c]));
    std::vector<double> y(11);
    for (int c = 0; c < 11; ++c)
      sum += y[c] = std::exp(x[r * 11 + c] - max);
    for (int c = 0; c < 11; ++c)
      dot += (y[c] /= sum) * g[r * 11 + c];
    for (int c = 0; c < 11; ++c)
      expected[r * 11 + c] = y[c] * (g[r * 11 + c] - dot);
  }
  expectNear(get(*executor, "dx"), expected, 1e-5, "softmax_grad");
}

TEST(Training, CrossEntropyGradFromForwardLse) {
  const char *source = R"mlir(
    func.func @f(%logits: tensor<3x5x17xf32> {llmc.input = "logits"},
                 %targets: tensor<3x5xi32> {llmc.input = "targets"},
                 %dloss: tensor<f32> {llmc.input = "dloss"})
        -> (tensor<f32> {llmc.output = "loss"},
            tensor<3x5x17xf32> {llmc.output = "dlogits"}) {
      %loss, %lse = llmc.cross_entropy %logits, %targets
          : tensor<3x5x17xf32>, tensor<3x5xi32>
      %d = llmc.cross_entropy_grad %dloss, %logits, %targets, %lse
          : tensor<f32>, tensor<3x5x17xf32>, tensor<3x5xi32>, tensor<3x5xf32>
      return %loss, %d : tensor<f32>, tensor<3x5x17xf32>
    })mlir";
  auto executor = compile(source, "f");
  ASSERT_TRUE(executor);
  std::vector<float> logits = randomValues(255, 12, 4.0f);
  std::vector<int32_t> targets = {0, 16, 3, 3,  9, 1,  12, 5,
                                  0, 7,  8, 16, 2, 11, 4};
  set(*executor, "logits", HostTensor::fromF32(logits, {3, 5, 17}));
  set(*executor, "targets", ids(targets, {3, 5}));
  set(*executor, "dloss", HostTensor::fromF32({0.75f}, {}));
  run(*executor);
  std::vector<double> expected(255);
  double loss = 0;
  for (int r = 0; r < 15; ++r) {
    double max = -INFINITY, sum = 0;
    for (int v = 0; v < 17; ++v)
      max = std::max(max, double(logits[r * 17 + v]));
    for (int v = 0; v < 17; ++v)
      sum += std::exp(logits[r * 17 + v] - max);
    double lse = max + std::log(sum);
    loss += (lse - logits[r * 17 + targets[r]]) / 15;
    for (int v = 0; v < 17; ++v)
      expected[r * 17 + v] =
          0.75 *
          (std::exp(logits[r * 17 + v] - lse) - (v == targets[r] ? 1.0 : 0.0)) /
          15;
  }
  expectNear(get(*executor, "loss"), {loss}, 1e-5, "loss");
  expectNear(get(*executor, "dlogits"), expected, 1e-5, "dlogits");
}

//===----------------------------------------------------------------------===//
// Activation gradients
//===----------------------------------------------------------------------===//

TEST(Training, ActivationGradsMatchDerivatives) {
  const char *source = R"mlir(
    func.func @f(%x: tensor<7x19xf32> {llmc.input = "x"},
                 %g: tensor<7x19xf32> {llmc.input = "g"})
        -> (tensor<7x19xf32> {llmc.output = "relu"},
            tensor<7x19xf32> {llmc.output = "silu"},
            tensor<7x19xf32> {llmc.output = "gelu_tanh"},
            tensor<7x19xf32> {llmc.output = "gelu_erf"}) {
      %r = llmc.relu_grad %g, %x : tensor<7x19xf32>
      %s = llmc.silu_grad %g, %x : tensor<7x19xf32>
      %t = llmc.gelu_grad %g, %x approximate = tanh : tensor<7x19xf32>
      %e = llmc.gelu_grad %g, %x approximate = none : tensor<7x19xf32>
      return %r, %s, %t, %e
          : tensor<7x19xf32>, tensor<7x19xf32>, tensor<7x19xf32>, tensor<7x19xf32>
    })mlir";
  auto executor = compile(source, "f");
  ASSERT_TRUE(executor);
  std::vector<float> x = randomValues(133, 13, 4.0f), g = randomValues(133, 14);
  set(*executor, "x", HostTensor::fromF32(x, {7, 19}));
  set(*executor, "g", HostTensor::fromF32(g, {7, 19}));
  run(*executor);
  // Central differences of the forward functions (an independent check of
  // the closed forms the lowering uses).
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  auto geluTanh = [](double v) {
    return 0.5 * v *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  auto geluErf = [](double v) { return 0.5 * v * (1 + std::erf(v / M_SQRT2)); };
  auto derivative = [](auto f, double v) {
    double h = 1e-5;
    return (f(v + h) - f(v - h)) / (2 * h);
  };
  std::vector<double> relu(133), siluRef(133), tanhRef(133), erfRef(133);
  for (int i = 0; i < 133; ++i) {
    relu[i] = x[i] > 0 ? g[i] : 0.0;
    siluRef[i] = g[i] * derivative(silu, x[i]);
    tanhRef[i] = g[i] * derivative(geluTanh, x[i]);
    erfRef[i] = g[i] * derivative(geluErf, x[i]);
  }
  expectNear(get(*executor, "relu"), relu, 0, "relu_grad");
  expectNear(get(*executor, "silu"), siluRef, 1e-5, "silu_grad");
  expectNear(get(*executor, "gelu_tanh"), tanhRef, 1e-5, "gelu_grad tanh");
  expectNear(get(*executor, "gelu_erf"), erfRef, 1e-5, "gelu_grad erf");
}

//===----------------------------------------------------------------------===//
// Attention gradient
//===----------------------------------------------------------------------===//

struct AttentionReference {
  std::vector<double> out, dq, dk, dv;
};

/// The gradients of softmax(scale q k^T + mask) v for one [T, D] head
/// each, straight from the definition.
AttentionReference attentionBackward(const float *q, const float *k,
                                     const float *v, const float *dout,
                                     int64_t T, int64_t D, double scale,
                                     bool causal) {
  AttentionReference ref;
  ref.dq.assign(T * D, 0);
  ref.dk.assign(T * D, 0);
  ref.dv.assign(T * D, 0);
  ref.out.assign(T * D, 0);
  std::vector<double> p(T * T, 0), dp(T * T, 0);
  for (int64_t t = 0; t < T; ++t) {
    int64_t visible = causal ? t + 1 : T;
    double max = -INFINITY, sum = 0;
    for (int64_t s = 0; s < visible; ++s) {
      double score = 0;
      for (int64_t d = 0; d < D; ++d)
        score += double(q[t * D + d]) * k[s * D + d];
      p[t * T + s] = scale * score;
      max = std::max(max, p[t * T + s]);
    }
    for (int64_t s = 0; s < visible; ++s)
      sum += p[t * T + s] = std::exp(p[t * T + s] - max);
    for (int64_t s = 0; s < visible; ++s)
      p[t * T + s] /= sum;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < T; ++s) {
      for (int64_t d = 0; d < D; ++d) {
        ref.out[t * D + d] += p[t * T + s] * v[s * D + d];
        ref.dv[s * D + d] += p[t * T + s] * dout[t * D + d];
        dp[t * T + s] += double(dout[t * D + d]) * v[s * D + d];
      }
    }
  for (int64_t t = 0; t < T; ++t) {
    double dot = 0; // sum_s p dp = dout . out
    for (int64_t s = 0; s < T; ++s)
      dot += p[t * T + s] * dp[t * T + s];
    for (int64_t s = 0; s < T; ++s) {
      double ds = p[t * T + s] * (dp[t * T + s] - dot) * scale;
      for (int64_t d = 0; d < D; ++d) {
        ref.dq[t * D + d] += ds * k[s * D + d];
        ref.dk[s * D + d] += ds * q[t * D + d];
      }
    }
  }
  return ref;
}

// (causal?, T): T = 7 is one block of query rows; T = 150 is three under
// a causal mask (64, 64 and 22 rows, runtime/Cpu/CpuExecutor.cpp's blocks), each
// multiplying only the keys its rows see.
class AttentionGrad
    : public ::testing::TestWithParam<std::tuple<bool, int64_t>> {};

TEST_P(AttentionGrad, MatchesDefinition) {
  auto [causal, T] = GetParam();
  std::string source = R"mlir(
    func.func @f(%q: tensor<2x3xTx5xf32> {llmc.input = "q"},
                 %k: tensor<2x3xTx5xf32> {llmc.input = "k"},
                 %v: tensor<2x3xTx5xf32> {llmc.input = "v"},
                 %do: tensor<2x3xTx5xf32> {llmc.input = "do"})
        -> (tensor<2x3xTx5xf32> {llmc.output = "o"},
            tensor<2x3xTx5xf32> {llmc.output = "dq"},
            tensor<2x3xTx5xf32> {llmc.output = "dk"},
            tensor<2x3xTx5xf32> {llmc.output = "dv"}) {
      %o, %lse = llmc.attention %q, %k, %v {CAUSAL scale = 0.4 : f32}
          : tensor<2x3xTx5xf32>, tensor<2x3xTx5xf32>, tensor<2x3xTx5xf32>
      %dq, %dk, %dv = llmc.attention_grad %do, %q, %k, %v, %o, %lse
          {CAUSAL scale = 0.4 : f32}
          : tensor<2x3xTx5xf32>, tensor<2x3xTx5xf32>, tensor<2x3xTx5xf32>,
            tensor<2x3xTx5xf32>, tensor<2x3xTx5xf32>, tensor<2x3xTxf32>
      return %o, %dq, %dk, %dv : tensor<2x3xTx5xf32>, tensor<2x3xTx5xf32>,
          tensor<2x3xTx5xf32>, tensor<2x3xTx5xf32>
    })mlir";
  for (size_t at; (at = source.find("CAUSAL")) != std::string::npos;)
    source.replace(at, 6, causal ? "causal," : "");
  for (size_t at; (at = source.find("xTx")) != std::string::npos;)
    source.replace(at, 3, "x" + std::to_string(T) + "x");
  auto executor = compile(source, "f");
  ASSERT_TRUE(executor);
  EXPECT_EQ(countSteps(executor->program(), kir::StepKind::AttentionGrad), 1);
  const int64_t n = 2 * 3 * T * 5;
  std::vector<float> q = randomValues(n, 15), k = randomValues(n, 16),
                     v = randomValues(n, 17), dout = randomValues(n, 18);
  for (auto [name, values] : {std::pair{"q", &q}, std::pair{"k", &k},
                              std::pair{"v", &v}, std::pair{"do", &dout}})
    set(*executor, name, HostTensor::fromF32(*values, {2, 3, T, 5}));
  run(*executor);
  std::vector<double> out, dq, dk, dv;
  for (int64_t head = 0; head < 6; ++head) {
    int64_t at = head * T * 5;
    AttentionReference ref = attentionBackward(
        &q[at], &k[at], &v[at], &dout[at], T, 5, double(0.4f), causal);
    out.insert(out.end(), ref.out.begin(), ref.out.end());
    dq.insert(dq.end(), ref.dq.begin(), ref.dq.end());
    dk.insert(dk.end(), ref.dk.begin(), ref.dk.end());
    dv.insert(dv.end(), ref.dv.begin(), ref.dv.end());
  }
  expectNear(get(*executor, "o"), out, 1e-5, "o");
  expectNear(get(*executor, "dq"), dq, 1e-5, "dq");
  expectNear(get(*executor, "dk"), dk, 1e-5, "dk");
  expectNear(get(*executor, "dv"), dv, 1e-5, "dv");
}

INSTANTIATE_TEST_SUITE_P(CausalAndNot, AttentionGrad,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(7, 150)));

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// kir::Op::Random's definition, from the Philox of runtime/Weights.
float referenceRandom(uint64_t key, uint64_t high, uint64_t low) {
  std::array<uint32_t, 4> block =
      runtime::philox4x32({uint32_t(low), uint32_t(low >> 32), uint32_t(high),
                           uint32_t(high >> 32)},
                          {uint32_t(key), uint32_t(key >> 32)});
  return float(block[0] >> 8) * 0x1p-24f;
}

TEST(Training, DropoutMaskIsPhiloxOfSeedStepStreamAndIndex) {
  // 3 x 33343 = 100029 elements.
  const char *source = R"mlir(
    func.func @f(%x: tensor<3x33343xf32> {llmc.input = "x"})
        -> (tensor<3x33343xf32> {llmc.output = "y"}) {
      %y = llmc.dropout %x {rate = 0.3 : f32, stream = 5 : i64}
          : tensor<3x33343xf32>
      return %y : tensor<3x33343xf32>
    })mlir";
  auto executor = compile(source, "f");
  ASSERT_TRUE(executor);
  const int64_t n = 3 * 33343;
  std::vector<float> ones(n, 1.0f);
  set(*executor, "x", HostTensor::fromF32(ones, {3, 33343}));
  const uint64_t seed = 0x0123456789abcdefull;
  auto maskAt = [&](uint64_t step) {
    executor->setRng(seed, step);
    run(*executor);
    return get(*executor, "y");
  };
  std::vector<float> first = maskAt(7), again = maskAt(7), other = maskAt(8);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  float kept = 1.0f / (1.0f - 0.3f);
  int64_t keptCount = 0;
  for (int64_t i = 0; i < n; ++i) {
    float r = referenceRandom(seed, (uint64_t(7) << 32) | 5, i);
    ASSERT_EQ(first[i], r >= 0.3f ? kept : 0.0f) << "element " << i;
    keptCount += first[i] != 0.0f;
  }
  // 1e5 Bernoulli(0.7) draws: the standard deviation of the rate is 0.0015.
  EXPECT_NEAR(double(keptCount) / n, 0.7, 0.01);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(Training, SumOfSquaresToScalarRunsInTwoStages) {
  const char *source = R"mlir(
    func.func @f(%g: tensor<301x67xf32> {llmc.input = "g"})
        -> (tensor<f32> {llmc.output = "sum"}) {
      %sq = llmc.mul %g, %g : tensor<301x67xf32>, tensor<301x67xf32>
      %s = llmc.reduce_sum %sq dims [0, 1] : tensor<301x67xf32>
      return %s : tensor<f32>
    })mlir";
  auto executor = compile(source, "f");
  ASSERT_TRUE(executor);
  // The square is fused into a kernel of 301 rows; the second stage sums
  // the 301 partial sums.
  const kir::Program &program = executor->program();
  ASSERT_EQ(program.kernels.size(), 2u);
  EXPECT_EQ(program.kernels[0].numRows(), 301);
  EXPECT_EQ(program.kernels[1].rowLength(), 301);
  std::vector<float> g = randomValues(301 * 67, 19);
  set(*executor, "g", HostTensor::fromF32(g, {301, 67}));
  run(*executor);
  double expected = 0;
  for (float value : g)
    expected += double(value) * value;
  expectNear(get(*executor, "sum"), {expected}, 1e-5, "sum of squares");
}

TEST(Training, ReductionsOverLeadingDims) {
  const char *source = R"mlir(
    func.func @f(%x: tensor<3x5x7xf32> {llmc.input = "x"},
                 %big: tensor<131072xf32> {llmc.input = "big"})
        -> (tensor<7xf32> {llmc.output = "sum01"},
            tensor<1x5x1xf32> {llmc.output = "mean02"},
            tensor<5xf32> {llmc.output = "max02"},
            tensor<f32> {llmc.output = "big"}) {
      %a = llmc.reduce_sum %x dims [0, 1] : tensor<3x5x7xf32>
      %b = llmc.reduce_mean %x dims [0, 2] keep_dims : tensor<3x5x7xf32>
      %c = llmc.reduce_max %x dims [0, 2] : tensor<3x5x7xf32>
      %d = llmc.reduce_sum %big dims [0] : tensor<131072xf32>
      return %a, %b, %c, %d
          : tensor<7xf32>, tensor<1x5x1xf32>, tensor<5xf32>, tensor<f32>
    })mlir";
  for (bool fuse : {true, false}) {
    auto executor = compile(source, "f", fuse);
    ASSERT_TRUE(executor);
    // Unfused, the long sum is split into blocks, so that its first stage
    // has rows for every thread (fused, a rank-1 tensor is one row).
    bool split = llvm::any_of(
        executor->program().kernels, [](const kir::Kernel &kernel) {
          return kernel.numRows() >= 64 &&
                 kernel.numRows() * kernel.rowLength() == 131072;
        });
    EXPECT_EQ(split, !fuse);
    std::vector<float> x = randomValues(105, 20),
                       big = randomValues(131072, 21);
    set(*executor, "x", HostTensor::fromF32(x, {3, 5, 7}));
    set(*executor, "big", HostTensor::fromF32(big, {131072}));
    run(*executor);
    std::vector<double> sum(7, 0), mean(5, 0), max(5, -INFINITY);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        for (int c = 0; c < 7; ++c) {
          double value = x[(i * 5 + j) * 7 + c];
          sum[c] += value;
          mean[j] += value / 21;
          max[j] = std::max(max[j], value);
        }
    double total = 0;
    for (float value : big)
      total += value;
    expectNear(get(*executor, "sum01"), sum, 1e-6, "sum over [0, 1]");
    expectNear(get(*executor, "mean02"), mean, 1e-6, "mean over [0, 2]");
    expectNear(get(*executor, "max02"), max, 0, "max over [0, 2]");
    expectNear(get(*executor, "big"), {total}, 1e-5, "sum of 131072");
  }
}

//===----------------------------------------------------------------------===//
// In-place updates and persistent state
//===----------------------------------------------------------------------===//

bool hasKernelFrom(const kir::Program &program, llvm::StringRef origin) {
  return llvm::any_of(program.kernels, [&](const kir::Kernel &kernel) {
    return llvm::StringRef(kernel.origin).starts_with(origin);
  });
}

TEST(Training, UpdatesStoredInPlaceOrCopied) {
  // w' = w - lr * g is stored straight into w by its kernel (it is w's
  // last reader and reads it at the element it writes); the zeroed
  // gradient is a fill copied into grad.w at the end.
  const char *source = R"mlir(
    func.func @step(%w: tensor<5x7xf32> {llmc.param = "w"},
                    %g: tensor<5x7xf32> {llmc.state = "grad.w"},
                    %lr: tensor<f32> {llmc.input = "lr"})
        -> (tensor<f32> {llmc.output = "norm"},
            tensor<5x7xf32> {llmc.updates = "w"},
            tensor<5x7xf32> {llmc.updates = "grad.w"}) {
      %sq = llmc.mul %g, %g : tensor<5x7xf32>, tensor<5x7xf32>
      %n = llmc.reduce_sum %sq dims [0, 1] : tensor<5x7xf32>
      %d = llmc.mul %g, %lr : tensor<5x7xf32>, tensor<f32>
      %w2 = llmc.sub %w, %d : tensor<5x7xf32>, tensor<5x7xf32>
      %z = llmc.fill 0.0 : tensor<5x7xf32>
      return %n, %w2, %z : tensor<f32>, tensor<5x7xf32>, tensor<5x7xf32>
    })mlir";
  auto executor = compile(source, "step");
  ASSERT_TRUE(executor);
  const kir::Program &program = executor->program();
  EXPECT_FALSE(hasKernelFrom(program, "update w"));
  EXPECT_TRUE(hasKernelFrom(program, "update grad.w"));
  ASSERT_EQ(program.updates.size(), 2u);
  std::vector<float> w = randomValues(35, 22), g = randomValues(35, 23);
  set(*executor, "w", HostTensor::fromF32(w, {5, 7}));
  set(*executor, "grad.w", HostTensor::fromF32(g, {5, 7}));
  set(*executor, "lr", HostTensor::fromF32({0.5f}, {}));
  run(*executor);
  std::vector<double> expected(35);
  double norm = 0;
  for (int i = 0; i < 35; ++i) {
    expected[i] = w[i] - 0.5f * g[i];
    norm += double(g[i]) * g[i];
  }
  expectNear(get(*executor, "norm"), {norm}, 1e-6, "norm");
  expectNear(get(*executor, "w"), expected, 1e-7, "w updated");
  expectNear(get(*executor, "grad.w"), std::vector<double>(35, 0.0), 0,
             "grad.w zeroed");
}

TEST(Training, UpdateCopiedWhenOldValueIsStillRead) {
  // w' = w + w^T reads w at another element than it writes, and the old w
  // is read again after w' is computed (the mean): both need the copy.
  const char *source = R"mlir(
    func.func @step(%w: tensor<7x7xf32> {llmc.param = "w"},
                    %s: tensor<7x7xf32> {llmc.state = "s"})
        -> (tensor<7x7xf32> {llmc.updates = "w"},
            tensor<7x7xf32> {llmc.updates = "s"},
            tensor<7xf32> {llmc.output = "old_mean"}) {
      %t = llmc.transpose %w, [1, 0] : tensor<7x7xf32>
      %w2 = llmc.add %w, %t : tensor<7x7xf32>, tensor<7x7xf32>
      %s2 = llmc.mul %s, %s : tensor<7x7xf32>, tensor<7x7xf32>
      %m = llmc.reduce_mean %s dims [1] : tensor<7x7xf32>
      return %w2, %s2, %m : tensor<7x7xf32>, tensor<7x7xf32>, tensor<7xf32>
    })mlir";
  auto executor = compile(source, "step");
  ASSERT_TRUE(executor);
  EXPECT_TRUE(hasKernelFrom(executor->program(), "update w"));
  EXPECT_TRUE(hasKernelFrom(executor->program(), "update s"));
  std::vector<float> w = randomValues(49, 24), s = randomValues(49, 25);
  set(*executor, "w", HostTensor::fromF32(w, {7, 7}));
  set(*executor, "s", HostTensor::fromF32(s, {7, 7}));
  run(*executor);
  std::vector<double> w2(49), s2(49), mean(7, 0);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) {
      w2[i * 7 + j] = w[i * 7 + j] + w[j * 7 + i];
      s2[i * 7 + j] = double(s[i * 7 + j]) * s[i * 7 + j];
      mean[i] += s[i * 7 + j] / 7.0;
    }
  expectNear(get(*executor, "w"), w2, 1e-7, "w");
  expectNear(get(*executor, "s"), s2, 1e-7, "s");
  expectNear(get(*executor, "old_mean"), mean, 1e-6, "mean of the old s");
}

TEST(Training, StateIsSharedThroughOnePersistentStore) {
  // One program accumulates into grad.w, another reads it: both bind the
  // same memory by name.
  const char *accumulate = R"mlir(
    func.func @acc(%g: tensor<3x5xf32> {llmc.state = "grad.w"},
                   %x: tensor<3x5xf32> {llmc.input = "x"})
        -> (tensor<3x5xf32> {llmc.updates = "grad.w"}) {
      %s = llmc.add %g, %x : tensor<3x5xf32>, tensor<3x5xf32>
      return %s : tensor<3x5xf32>
    })mlir";
  const char *read = R"mlir(
    func.func @read(%g: tensor<3x5xf32> {llmc.state = "grad.w"})
        -> (tensor<f32> {llmc.output = "total"}) {
      %s = llmc.reduce_sum %g dims [0, 1] : tensor<3x5xf32>
      return %s : tensor<f32>
    })mlir";
  auto store = std::make_shared<runtime::PersistentStore>();
  auto acc = compile(accumulate, "acc", true, store);
  auto reader = compile(read, "read", true, store);
  ASSERT_TRUE(acc && reader);
  // Zero-initialized by the store.
  run(*reader);
  expectNear(get(*reader, "total"), {0.0}, 0, "fresh state");
  std::vector<float> x = randomValues(15, 26);
  set(*acc, "x", HostTensor::fromF32(x, {3, 5}));
  run(*acc);
  run(*acc);
  run(*reader);
  double total = 0;
  for (float value : x)
    total += 2.0 * value;
  expectNear(get(*reader, "total"), {total}, 1e-6, "accumulated twice");
  EXPECT_EQ(acc->states().at("grad.w"), *store->get("grad.w"));

  // A program that binds the name with another shape is refused.
  const char *other = R"mlir(
    func.func @bad(%g: tensor<5x3xf32> {llmc.state = "grad.w"})
        -> (tensor<f32> {llmc.output = "total"}) {
      %s = llmc.reduce_sum %g dims [0, 1] : tensor<5x3xf32>
      return %s : tensor<f32>
    })mlir";
  mlir::MLIRContext context;
  auto program = test::compileFunction(context, other, "bad");
  ASSERT_TRUE(mlir::succeeded(program));
  auto bad = test::makeExecutor(std::move(*program), 0, store);
  ASSERT_FALSE(bool(bad));
  std::string message = llvm::toString(bad.takeError());
  EXPECT_NE(message.find("'grad.w' is f32[3, 5]"), std::string::npos)
      << message;
}

} // namespace
