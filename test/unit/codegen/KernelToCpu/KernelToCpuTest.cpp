// Hand-built kernels compiled by codegen/KernelToCpu, linked by
// runtime/Cpu and run on random inputs, against plain C++ written here.
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "runtime/Cpu/CpuKernels.h"
#include "runtime/Weights/Weights.h"
#include "test/unit/codegen/KernelToCpu/KernelTestUtil.h"

#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <memory>
#include <map>
#include <random>
#include <thread>

using namespace llmc;
using namespace llmc::test;
using kir::DType;
using kir::Op;

namespace {

std::vector<float> randomFloats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float &value : values)
    value = dist(rng);
  return values;
}

/// |got - want| <= atol + rtol * |want| everywhere; reports the first miss.
void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double rtol, double atol = 0.0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double error = std::fabs(double(got[i]) - want[i]);
    if (!(error <= atol + rtol * std::fabs(want[i]))) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want "
                    << want[i] << " (error " << error << ")";
      return;
    }
  }
}

//===----------------------------------------------------------------------===//
// Pointwise, broadcasts and odd row lengths
//===----------------------------------------------------------------------===//

class RowLengthTest : public ::testing::TestWithParam<int64_t> {};

// out[r, c] = x[r, c] + bias[c] * scale[r]: bias is broadcast along rows
// (stride 0 on dim 0), scale along the row (stride 0 on dim 1).
TEST_P(RowLengthTest, PointwiseWithBroadcasts) {
  const int64_t rows = 5, length = GetParam();
  KernelBuilder k("add_bias", {rows, length});
  int x = k.operand(0, DType::F32, {length, 1});
  int bias = k.operand(1, DType::F32, {0, 1});
  int scale = k.operand(2, DType::F32, {1, 0});
  int out = k.operand(3, DType::F32, {length, 1});
  k.store(out, k.binary(Op::Add, k.load(x),
                        k.binary(Op::Mul, k.load(bias), k.load(scale))));
  Compiled compiled = compileKernels({k.kernel});
  ASSERT_TRUE(compiled);

  std::vector<float> xs = randomFloats(rows * length, -2, 2, 1);
  std::vector<float> biases = randomFloats(length, -1, 1, 2);
  std::vector<float> scales = randomFloats(rows, 0.5, 2, 3);
  std::vector<float> outs(rows * length, NAN);
  compiled.run("add_bias", {xs.data(), biases.data(), scales.data(),
                            outs.data()}, 0, rows);
  std::vector<double> want(rows * length);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < length; ++c)
      want[r * length + c] =
          double(xs[r * length + c]) + double(biases[c]) * double(scales[r]);
  expectClose(outs, want, 1e-6, 1e-6);
}

// LayerNorm over rows: two reduction phases (mean, then variance), per-row
// stores of mean and rstd, a column loop for the output.
kir::Kernel layerNormKernel(int64_t rows, int64_t length) {
  KernelBuilder k("layer_norm", {rows, length});
  int x = k.operand(0, DType::F32, {length, 1});
  int weight = k.operand(1, DType::F32, {0, 1});
  int bias = k.operand(2, DType::F32, {0, 1});
  int out = k.operand(3, DType::F32, {length, 1});
  int meanOut = k.operand(4, DType::F32, {1, 0});
  int rstdOut = k.operand(5, DType::F32, {1, 0});
  int32_t xs = k.load(x);
  int32_t n = k.constant(float(length));
  int32_t mean = k.binary(Op::Div, k.unary(Op::ReduceSum, xs), n);
  int32_t centered = k.binary(Op::Sub, xs, mean);
  int32_t var = k.binary(
      Op::Div, k.unary(Op::ReduceSum, k.binary(Op::Mul, centered, centered)),
      n);
  int32_t rstd =
      k.unary(Op::Rsqrt, k.binary(Op::Add, var, k.constant(1e-5f)));
  int32_t y = k.binary(Op::Add,
                       k.binary(Op::Mul, k.binary(Op::Mul, centered, rstd),
                                k.load(weight)),
                       k.load(bias));
  k.store(out, y);
  k.store(meanOut, mean);
  k.store(rstdOut, rstd);
  return k.kernel;
}

struct LayerNormData {
  int64_t rows, length;
  std::vector<float> x, weight, bias, out, mean, rstd;
  LayerNormData(int64_t rows, int64_t length)
      : rows(rows), length(length), x(randomFloats(rows * length, -3, 5, 4)),
        weight(randomFloats(length, 0.5, 1.5, 5)),
        bias(randomFloats(length, -1, 1, 6)), out(rows * length, NAN),
        mean(rows, NAN), rstd(rows, NAN) {}
  std::vector<void *> operands() {
    return {x.data(), weight.data(), bias.data(),
            out.data(), mean.data(),   rstd.data()};
  }
};

TEST_P(RowLengthTest, LayerNorm) {
  const int64_t rows = 6, length = GetParam();
  Compiled compiled = compileKernels({layerNormKernel(rows, length)});
  ASSERT_TRUE(compiled);
  LayerNormData data(rows, length);
  compiled.run("layer_norm", data.operands(), 0, rows);

  std::vector<double> wantOut(rows * length), wantMean(rows), wantRstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = &data.x[r * length];
    double sum = 0;
    for (int64_t c = 0; c < length; ++c)
      sum += row[c];
    double mean = sum / length, var = 0;
    for (int64_t c = 0; c < length; ++c)
      var += (row[c] - mean) * (row[c] - mean);
    double rstd = 1 / std::sqrt(var / length + 1e-5);
    wantMean[r] = mean;
    wantRstd[r] = rstd;
    for (int64_t c = 0; c < length; ++c)
      wantOut[r * length + c] =
          (row[c] - mean) * rstd * data.weight[c] + data.bias[c];
  }
  // A row of one element has a mean equal to it: compare with an
  // absolute floor for values that cancel to about zero.
  expectClose(data.mean, wantMean, 1e-5, 1e-6);
  expectClose(data.rstd, wantRstd, 1e-5);
  expectClose(data.out, wantOut, 1e-5, 1e-5);
}

// Softmax: a max phase, then a sum phase over exp(x - max), then the output.
TEST_P(RowLengthTest, Softmax) {
  const int64_t rows = 4, length = GetParam();
  KernelBuilder k("softmax", {rows, length});
  int x = k.operand(0, DType::F32, {length, 1});
  int out = k.operand(1, DType::F32, {length, 1});
  int32_t xs = k.load(x);
  int32_t max = k.unary(Op::ReduceMax, xs);
  int32_t e = k.unary(Op::Exp, k.binary(Op::Sub, xs, max));
  int32_t sum = k.unary(Op::ReduceSum, e);
  k.store(out, k.binary(Op::Div, e, sum));
  Compiled compiled = compileKernels({k.kernel});
  ASSERT_TRUE(compiled);

  std::vector<float> xs_ = randomFloats(rows * length, -20, 20, 7);
  std::vector<float> outs(rows * length, NAN);
  compiled.run("softmax", {xs_.data(), outs.data()}, 0, rows);
  std::vector<double> want(rows * length);
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < length; ++c)
      max = std::max(max, double(xs_[r * length + c]));
    for (int64_t c = 0; c < length; ++c)
      sum += std::exp(xs_[r * length + c] - max);
    for (int64_t c = 0; c < length; ++c)
      want[r * length + c] = std::exp(xs_[r * length + c] - max) / sum;
  }
  expectClose(outs, want, 1e-5, 1e-30);
}

INSTANTIATE_TEST_SUITE_P(Lengths, RowLengthTest,
                         ::testing::Values(1, 7, 8, 13, 16, 33, 100, 1000));

// Rows split in two disjoint ranges (run by two threads, as the executor
// does) give the same bits as one call over all rows.
TEST(KernelToCpu, DisjointRowRangesMatchOneRange) {
  const int64_t rows = 37, length = 45;
  Compiled compiled = compileKernels({layerNormKernel(rows, length)});
  ASSERT_TRUE(compiled);
  LayerNormData whole(rows, length), split(rows, length);
  compiled.run("layer_norm", whole.operands(), 0, rows);
  std::vector<void *> operands = split.operands();
  std::thread first([&] { compiled.run("layer_norm", operands, 0, 20); });
  std::thread second([&] { compiled.run("layer_norm", operands, 20, rows); });
  first.join();
  second.join();
  EXPECT_EQ(0, std::memcmp(whole.out.data(), split.out.data(),
                           whole.out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(whole.mean.data(), split.mean.data(),
                           rows * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(whole.rstd.data(), split.rstd.data(),
                           rows * sizeof(float)));
}

// A kernel that only reduces: row-level stores, no column loop after.
TEST(KernelToCpu, RowLevelStoresOnly) {
  const int64_t rows = 9, length = 100;
  KernelBuilder k("row_stats", {rows, length});
  int x = k.operand(0, DType::F32, {length, 1});
  int sums = k.operand(1, DType::F32, {1, 0});
  int maxes = k.operand(2, DType::F32, {1, 0});
  int32_t xs = k.load(x);
  k.store(sums, k.unary(Op::ReduceSum, xs));
  k.store(maxes, k.unary(Op::ReduceMax, xs));
  Compiled compiled = compileKernels({k.kernel});
  ASSERT_TRUE(compiled);
  std::vector<float> in = randomFloats(rows * length, -1, 1, 8);
  std::vector<float> gotSums(rows), gotMaxes(rows);
  compiled.run("row_stats", {in.data(), gotSums.data(), gotMaxes.data()}, 0,
               rows);
  std::vector<double> wantSums(rows, 0.0), wantMaxes(rows, -INFINITY);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < length; ++c) {
      wantSums[r] += in[r * length + c];
      wantMaxes[r] = std::max(wantMaxes[r], double(in[r * length + c]));
    }
  expectClose(gotSums, wantSums, 0, 1e-5);
  expectClose(gotMaxes, wantMaxes, 0);
}

// A scatter store (a KV-cache write): row (b, t) of the update lands in
// slot positions[b][t] of the cache; the other slots keep their values.
// The verifier rejects overriding the row index and column-level indices.
TEST(KernelToCpu, ScatterStore) {
  const int64_t batch = 2, tokens = 3, slots = 8, dim = 20;
  KernelBuilder k("scatter", {batch, tokens, dim});
  int update = k.operand(0, DType::F32, {tokens * dim, dim, 1});
  int positions = k.operand(1, DType::I32, {tokens, 1, 0});
  int cache = k.operand(2, DType::F32, {slots * dim, dim, 1});
  int32_t at = k.load(positions);
  k.store(cache, k.load(update), {-1, at, -1});
  ASSERT_EQ(kir::verifyKernel(k.kernel), "");
  Compiled compiled = compileKernels({k.kernel});
  ASSERT_TRUE(compiled);
  std::vector<float> in = randomFloats(batch * tokens * dim, -1, 1, 3);
  std::vector<int32_t> ids = {5, 0, 7, 2, 3, 1};
  std::vector<float> got(batch * slots * dim, 42.0f);
  compiled.run("scatter", {in.data(), ids.data(), got.data()}, 0,
               batch * tokens);
  std::vector<double> want(got.size(), 42.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t c = 0; c < dim; ++c)
        want[(b * slots + ids[b * tokens + t]) * dim + c] =
            in[(b * tokens + t) * dim + c];
  expectClose(got, want, 0);

  kir::Kernel rowDim = k.kernel;
  rowDim.body.back().args = {rowDim.body.back().args[0], -1, -1, at};
  EXPECT_NE(kir::verifyKernel(rowDim).find("overrides the row dimension"),
            std::string::npos);
  KernelBuilder column("scatter_column", {batch, tokens, dim});
  int colUpdate = column.operand(0, DType::F32, {tokens * dim, dim, 1});
  int colCache = column.operand(1, DType::F32, {slots * dim, dim, 1});
  column.store(colCache, column.load(colUpdate), {-1, column.index(2), -1});
  EXPECT_NE(kir::verifyKernel(column.kernel).find("is not a row-level i64"),
            std::string::npos);
  kir::Kernel count = k.kernel;
  count.body.back().args.pop_back();
  EXPECT_NE(kir::verifyKernel(count).find("no index overrides or one per"),
            std::string::npos);
}

// An epilogue reads and writes one buffer at the same index (operands 0
// and 1 are buffer 0): each element is read before it is overwritten.
TEST(KernelToCpu, InPlaceEpilogue) {
  const int64_t rows = 3, length = 37;
  KernelBuilder k("in_place", {rows, length});
  int in = k.operand(0, DType::F32, {length, 1});
  int out = k.operand(1, DType::F32, {length, 1});
  int32_t xs = k.load(in);
  k.store(out, k.binary(Op::Mul, xs, k.unary(Op::Tanh, xs)));
  Compiled compiled = compileKernels({k.kernel});
  ASSERT_TRUE(compiled);
  std::vector<float> data = randomFloats(rows * length, -3, 3, 9);
  std::vector<double> want(data.size());
  for (size_t i = 0; i < data.size(); ++i)
    want[i] = data[i] * std::tanh(double(data[i]));
  compiled.run("in_place", {data.data(), data.data()}, 0, rows);
  expectClose(data, want, 1e-6, 1e-7);
}

//===----------------------------------------------------------------------===//
// Index arithmetic and gathers
//===----------------------------------------------------------------------===//

// Rotary embedding (the half-split form): column c pairs with
// (c + D/2) % D; the sin/cos tables are indexed by c % (D/2). Index math
// with Rem, CmpLt and Select, and column-level gathers through overrides.
TEST(KernelToCpu, RotaryPartnerIndex) {
  for (int64_t dim : {6, 64}) {
    const int64_t positions = 5, half = dim / 2;
    KernelBuilder k("rotary", {positions, dim});
    int x = k.operand(0, DType::F32, {dim, 1});
    int cosTable = k.operand(1, DType::F32, {half, 1});
    int sinTable = k.operand(2, DType::F32, {half, 1});
    int out = k.operand(3, DType::F32, {dim, 1});
    int32_t c = k.index(1);
    int32_t halfValue = k.intConstant(half);
    int32_t partner = k.binary(Op::Rem, k.binary(Op::Add, c, halfValue),
                               k.intConstant(dim));
    int32_t column = k.binary(Op::Rem, c, halfValue);
    int32_t sign = k.select(k.binary(Op::CmpLt, c, halfValue),
                            k.constant(-1), k.constant(1));
    int32_t rotated = k.binary(
        Op::Mul, sign,
        k.binary(Op::Mul, k.load(x, {-1, partner}),
                 k.load(sinTable, {-1, column})));
    k.store(out, k.binary(Op::Add,
                          k.binary(Op::Mul, k.load(x),
                                   k.load(cosTable, {-1, column})),
                          rotated));
    Compiled compiled = compileKernels({k.kernel});
    ASSERT_TRUE(compiled);

    std::vector<float> xs = randomFloats(positions * dim, -1, 1, 10);
    std::vector<float> coss(positions * half), sins(positions * half);
    for (int64_t t = 0; t < positions; ++t)
      for (int64_t i = 0; i < half; ++i) {
        double angle = t * std::pow(10000.0, -2.0 * i / dim);
        coss[t * half + i] = float(std::cos(angle));
        sins[t * half + i] = float(std::sin(angle));
      }
    std::vector<float> outs(positions * dim, NAN);
    compiled.run("rotary", {xs.data(), coss.data(), sins.data(), outs.data()},
                 0, positions);
    std::vector<double> want(positions * dim);
    for (int64_t t = 0; t < positions; ++t)
      for (int64_t i = 0; i < half; ++i) {
        double a = xs[t * dim + i], b = xs[t * dim + i + half];
        double co = coss[t * half + i], si = sins[t * half + i];
        want[t * dim + i] = a * co - b * si;
        want[t * dim + i + half] = b * co + a * si;
      }
    expectClose(outs, want, 1e-6, 1e-6);
  }
}

// Integer ops in vector lanes and scalars: Div and Rem truncate like C++,
// Max/Min, CmpLe and CmpEq (on i64 and f32), IToF, and integer stores to
// i32 and i64 buffers.
TEST(KernelToCpu, IntegerIndexMath) {
  const int64_t rows = 6, length = 29;
  KernelBuilder k("index_math", {rows, length});
  int outF = k.operand(0, DType::F32, {length, 1});
  int outI32 = k.operand(1, DType::I32, {length, 1});
  int outI64 = k.operand(2, DType::I64, {length, 1});
  int32_t i = k.index(0), c = k.index(1);
  int32_t a = k.binary(Op::Sub, k.binary(Op::Mul, c, k.intConstant(3)),
                       k.binary(Op::Mul, i, k.intConstant(11)));
  int32_t q = k.binary(Op::Div, a, k.intConstant(4));
  int32_t m = k.binary(Op::Max, q, k.binary(Op::Min, c, k.intConstant(5)));
  int32_t r = k.binary(Op::Rem, k.binary(Op::Add, c, i), k.intConstant(7));
  int32_t sum = k.binary(Op::Add, m, r);
  int32_t le = k.select(k.binary(Op::CmpLe, c, i), k.constant(100),
                        k.constant(0));
  int32_t eq = k.select(k.binary(Op::CmpEq, k.unary(Op::IToF, c),
                                 k.unary(Op::IToF, i)),
                        k.constant(1000), k.constant(0));
  k.store(outF, k.binary(Op::Add, k.unary(Op::IToF, sum),
                         k.binary(Op::Add, le, eq)));
  k.store(outI32, sum);
  k.store(outI64, k.binary(Op::Mul, sum, k.intConstant(1LL << 33)));
  Compiled compiled = compileKernels({k.kernel});
  ASSERT_TRUE(compiled);

  std::vector<float> gotF(rows * length);
  std::vector<int32_t> got32(rows * length);
  std::vector<int64_t> got64(rows * length);
  compiled.run("index_math", {gotF.data(), got32.data(), got64.data()}, 0,
               rows);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = 0; col < length; ++col) {
      int64_t want = std::max((col * 3 - row * 11) / 4, std::min<int64_t>(
                                                            col, 5)) +
                     (col + row) % 7;
      float wantF = float(want) + (col <= row ? 100.0f : 0.0f) +
                    (col == row ? 1000.0f : 0.0f);
      size_t at = row * length + col;
      ASSERT_EQ(gotF[at], wantF) << "row " << row << " col " << col;
      ASSERT_EQ(got32[at], int32_t(want)) << "row " << row << " col " << col;
      ASSERT_EQ(got64[at], want * (1LL << 33))
          << "row " << row << " col " << col;
    }
}

// Token + position embedding: the token table row is chosen by an i32 id
// (a row-level index override), the position row by the domain index.
TEST(KernelToCpu, EmbeddingGather) {
  const int64_t batch = 2, seq = 5, channels = 19, vocab = 11;
  KernelBuilder k("embedding", {batch, seq, channels});
  int ids = k.operand(0, DType::I32, {seq, 1, 0});
  int wte = k.operand(1, DType::F32, {channels, 0, 1});
  int wpe = k.operand(2, DType::F32, {0, channels, 1});
  int out = k.operand(3, DType::F32, {seq * channels, channels, 1});
  int32_t id = k.load(ids);
  k.store(out, k.binary(Op::Add, k.load(wte, {id, -1, -1}), k.load(wpe)));
  Compiled compiled = compileKernels({k.kernel});
  ASSERT_TRUE(compiled);

  std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 1, 1, 9, 2, 5};
  std::vector<float> tokenTable = randomFloats(vocab * channels, -1, 1, 11);
  std::vector<float> positionTable = randomFloats(seq * channels, -1, 1, 12);
  std::vector<float> outs(batch * seq * channels, NAN);
  compiled.run("embedding",
               {tokens.data(), tokenTable.data(), positionTable.data(),
                outs.data()},
               0, batch * seq);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t c = 0; c < channels; ++c)
        ASSERT_EQ(outs[(b * seq + t) * channels + c],
                  tokenTable[tokens[b * seq + t] * channels + c] +
                      positionTable[t * channels + c]);
}

// A 3-D domain whose input is stored [C, A, B] (strided gathers along the
// row), reduced along the row, and stored both contiguous and as [C, B, A]
// (a scatter).
TEST(KernelToCpu, TransposedStrides) {
  for (int64_t C : {7, 19}) {
    const int64_t A = 3, B = 5;
    KernelBuilder k("transposed", {A, B, C});
    int in = k.operand(0, DType::F32, {B, 1, A * B});
    int out = k.operand(1, DType::F32, {B * C, C, 1});
    int outT = k.operand(2, DType::F32, {1, A, A * B});
    int sums = k.operand(3, DType::F32, {B, 1, 0});
    int32_t xs = k.load(in);
    int32_t shifted =
        k.binary(Op::Add, xs, k.unary(Op::IToF, k.index(0)));
    k.store(out, shifted);
    k.store(outT, k.binary(Op::Mul, xs, k.constant(2)));
    k.store(sums, k.unary(Op::ReduceSum, shifted));
    Compiled compiled = compileKernels({k.kernel});
    ASSERT_TRUE(compiled);

    std::vector<float> ins = randomFloats(A * B * C, -1, 1, 13);
    std::vector<float> outs(A * B * C, NAN), outsT(A * B * C, NAN),
        gotSums(A * B, NAN);
    compiled.run("transposed",
                 {ins.data(), outs.data(), outsT.data(), gotSums.data()}, 0,
                 A * B);
    std::vector<double> wantSums(A * B, 0.0);
    for (int64_t a = 0; a < A; ++a)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) {
          float x = ins[c * A * B + a * B + b];
          ASSERT_EQ(outs[(a * B + b) * C + c], x + float(a));
          ASSERT_EQ(outsT[c * A * B + b * A + a], x * 2);
          wantSums[a * B + b] += double(x) + a;
        }
    expectClose(gotSums, wantSums, 0, 1e-5);
  }
}

// Column sums as the norm and bias gradients lower them: rows are the
// channels c of a row-major [n, C] matrix, each walking down its column
// (stride C along the row dim), so the emitter runs them lanes over rows.
// sum_n dy[n, c], max_n dy[n, c] and sum_n dy[n, c] * (x[n, c] - mean[n])
// * rstd[n] (mean and rstd: one value per n for every lane), the first
// scaled by 1/n after the reduction; against double sums. The channel
// counts reach every path (blocks of vectors, single vectors, single
// rows) and the sums every chunk split (a partial last chunk or none).
// Any split of the rows (threads) and any vector width give the same bits.
kir::Kernel columnSumKernel(int64_t n, int64_t channels) {
  KernelBuilder k("column_sums", {channels, n});
  int dy = k.operand(0, DType::F32, {1, channels});
  int x = k.operand(1, DType::F32, {1, channels});
  int mean = k.operand(2, DType::F32, {0, 1});
  int rstd = k.operand(3, DType::F32, {0, 1});
  int sums = k.operand(4, DType::F32, {1, 0});
  int maxes = k.operand(5, DType::F32, {1, 0});
  int weighted = k.operand(6, DType::F32, {1, 0});
  int32_t g = k.load(dy);
  int32_t xhat = k.binary(Op::Mul, k.binary(Op::Sub, k.load(x), k.load(mean)),
                          k.load(rstd));
  int32_t sum = k.unary(Op::ReduceSum, g);
  k.store(sums, k.binary(Op::Mul, sum, k.constant(1.0f / float(n))));
  k.store(maxes, k.unary(Op::ReduceMax, g));
  k.store(weighted, k.unary(Op::ReduceSum, k.binary(Op::Mul, g, xhat)));
  return k.kernel;
}

struct ColumnSumData {
  std::vector<float> dy, x, mean, rstd, sums, maxes, weighted;
  ColumnSumData(int64_t n, int64_t channels, unsigned seed)
      : dy(randomFloats(n * channels, -1, 1, seed)),
        x(randomFloats(n * channels, -2, 2, seed + 1)),
        mean(randomFloats(n, -0.5, 0.5, seed + 2)),
        rstd(randomFloats(n, 0.5, 2, seed + 3)), sums(channels, NAN),
        maxes(channels, NAN), weighted(channels, NAN) {}
  std::vector<void *> operands() {
    return {dy.data(),   x.data(),     mean.data(),    rstd.data(),
            sums.data(), maxes.data(), weighted.data()};
  }
};

TEST(KernelToCpu, ColumnSumsRunLanesOverRows) {
  for (auto [n, channels] : {std::pair<int64_t, int64_t>{300, 85},
                             {64, 133}, {37, 16}, {1000, 29}}) {
    SCOPED_TRACE("n " + std::to_string(n) + ", channels " +
                 std::to_string(channels));
    kir::Kernel kernel = columnSumKernel(n, channels);
    Compiled compiled = compileKernels({kernel});
    ASSERT_TRUE(compiled);
    ColumnSumData whole(n, channels, 21);
    compiled.run("column_sums", whole.operands(), 0, channels);
    std::vector<double> wantSums(channels), wantMaxes(channels, -INFINITY),
        wantWeighted(channels);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        double g = whole.dy[r * channels + c];
        wantSums[c] += g / double(n);
        wantMaxes[c] = std::max(wantMaxes[c], g);
        wantWeighted[c] += g * ((double(whole.x[r * channels + c]) -
                                 whole.mean[r]) *
                                whole.rstd[r]);
      }
    expectClose(whole.sums, wantSums, 1e-5, 1e-6);
    expectClose(whole.maxes, wantMaxes, 0);
    expectClose(whole.weighted, wantWeighted, 1e-5, 1e-4);

    // Two threads over rows split off the vector blocks.
    ColumnSumData split(n, channels, 21);
    std::vector<void *> operands = split.operands();
    int64_t cut = std::min<int64_t>(channels, 19);
    std::thread first([&] { compiled.run("column_sums", operands, 0, cut); });
    std::thread second(
        [&] { compiled.run("column_sums", operands, cut, channels); });
    first.join();
    second.join();
    for (auto [got, want] : {std::pair{&split.sums, &whole.sums},
                             {&split.maxes, &whole.maxes},
                             {&split.weighted, &whole.weighted}})
      EXPECT_EQ(0, std::memcmp(got->data(), want->data(),
                               channels * sizeof(float)));

    // A narrower vector gives the same bits.
    cpu::CpuTargetOptions options;
    options.vectorWidth = 4;
    Compiled narrow = compileKernels({kernel}, options);
    ASSERT_TRUE(narrow);
    ColumnSumData four(n, channels, 21);
    narrow.run("column_sums", four.operands(), 0, channels);
    EXPECT_EQ(0, std::memcmp(four.sums.data(), whole.sums.data(),
                             channels * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(four.weighted.data(), whole.weighted.data(),
                             channels * sizeof(float)));
  }
  // Whole vectors, not gathers: the schedule that reads each matrix row
  // contiguously.
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::Error error =
      cpu::printCpuPhase(os, {columnSumKernel(300, 85)}, "cpu-llvm-ir");
  ASSERT_FALSE(error) << llvm::toString(std::move(error));
  EXPECT_EQ(text.find("masked.gather"), std::string::npos);
  EXPECT_NE(text.find("define void @column_sums"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Half-precision storage
//===----------------------------------------------------------------------===//

uint16_t halfBits(float value) {
  _Float16 half = _Float16(value); // GCC rounds to nearest even
  uint16_t bits;
  std::memcpy(&bits, &half, 2);
  return bits;
}

float halfToFloat(uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, 2);
  return float(half);
}

/// f32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
uint16_t bfloat16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value))
    return uint16_t((bits >> 16) | 0x40);
  uint32_t lsb = (bits >> 16) & 1;
  return uint16_t((bits + 0x7fff + lsb) >> 16);
}

float bfloat16ToFloat(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

bool sameHalf(uint16_t got, uint16_t want, bool bfloat) {
  float g = bfloat ? bfloat16ToFloat(got) : halfToFloat(got);
  float w = bfloat ? bfloat16ToFloat(want) : halfToFloat(want);
  return std::isnan(w) ? std::isnan(g) : got == want;
}

// f32 -> f16/bf16 stores round to nearest even (ties, overflow to inf,
// f16 subnormals, NaN), and f16/bf16 loads widen exactly.
TEST(KernelToCpu, HalfPrecisionRoundTrips) {
  std::vector<float> values = {
      0.0f, -0.0f, 1.0f, -2.5f,
      1.0f + 0x1p-11f,      // f16 tie: to even (1.0)
      1.0f + 3 * 0x1p-11f,  // f16 tie: to even (up)
      1.0f + 0x1p-8f,       // bf16 tie: to even (1.0)
      1.0f + 3 * 0x1p-8f,   // bf16 tie: to even (up)
      65504.0f, 65519.0f, 65520.0f, 1e6f, // f16 max, below/at overflow
      3.0e-8f, 6.0e-5f, 1e-10f,           // f16 subnormal, tiny
      3.4e38f, -3.4e38f, 1e-40f,          // bf16 overflow, f32 subnormal
      INFINITY, -INFINITY, NAN};
  std::vector<float> random = randomFloats(61, -300, 300, 14);
  values.insert(values.end(), random.begin(), random.end());
  const int64_t n = values.size();

  KernelBuilder narrow("narrow", {n});
  int in = narrow.operand(0, DType::F32, {1});
  int toHalf = narrow.operand(1, DType::F16, {1});
  int toBfloat = narrow.operand(2, DType::BF16, {1});
  int32_t x = narrow.load(in);
  narrow.store(toHalf, x);
  narrow.store(toBfloat, x);

  // Widen, compute in f32 (exact here: a scale by 2), narrow again.
  KernelBuilder widen("widen", {3, n / 3});
  int fromHalf = widen.operand(0, DType::F16, {n / 3, 1});
  int fromBfloat = widen.operand(1, DType::BF16, {n / 3, 1});
  int halfOut = widen.operand(2, DType::F32, {n / 3, 1});
  int bfloatOut = widen.operand(3, DType::F32, {n / 3, 1});
  int halfTwice = widen.operand(4, DType::F16, {n / 3, 1});
  int32_t h = widen.load(fromHalf), bf = widen.load(fromBfloat);
  widen.store(halfOut, h);
  widen.store(bfloatOut, bf);
  widen.store(halfTwice, widen.binary(Op::Mul, h, widen.constant(2)));

  Compiled compiled = compileKernels({narrow.kernel, widen.kernel});
  ASSERT_TRUE(compiled);
  std::vector<uint16_t> halves(n), bfloats(n);
  compiled.run("narrow", {values.data(), halves.data(), bfloats.data()}, 0,
               1);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(sameHalf(halves[i], halfBits(values[i]), false))
        << values[i] << " -> f16 " << std::hex << halves[i] << ", want "
        << halfBits(values[i]);
    EXPECT_TRUE(sameHalf(bfloats[i], bfloat16Bits(values[i]), true))
        << values[i] << " -> bf16 " << std::hex << bfloats[i] << ", want "
        << bfloat16Bits(values[i]);
  }

  const int64_t m = 3 * (n / 3);
  std::vector<float> halfWide(m), bfloatWide(m);
  std::vector<uint16_t> twice(m);
  compiled.run("widen",
               {halves.data(), bfloats.data(), halfWide.data(),
                bfloatWide.data(), twice.data()},
               0, 3);
  for (int64_t i = 0; i < m; ++i) {
    float wantHalf = halfToFloat(halves[i]);
    float wantBfloat = bfloat16ToFloat(bfloats[i]);
    EXPECT_TRUE(std::isnan(wantHalf) ? std::isnan(halfWide[i])
                                     : halfWide[i] == wantHalf);
    EXPECT_TRUE(std::isnan(wantBfloat) ? std::isnan(bfloatWide[i])
                                       : bfloatWide[i] == wantBfloat);
    EXPECT_TRUE(sameHalf(twice[i], halfBits(wantHalf * 2), false));
  }
}

//===----------------------------------------------------------------------===//
// Targets, phases and errors
//===----------------------------------------------------------------------===//

// The emitter is generic in the vector width: scalar code, SSE-sized and
// AVX-512-sized vectors all give the host's results (legalized as needed).
TEST(KernelToCpu, VectorWidthsAgree) {
  const int64_t rows = 4, length = 77;
  LayerNormData reference(rows, length);
  Compiled host = compileKernels({layerNormKernel(rows, length)});
  ASSERT_TRUE(host);
  host.run("layer_norm", reference.operands(), 0, rows);
  for (int width : {1, 4, 16}) {
    cpu::CpuTargetOptions options;
    options.vectorWidth = width;
    Compiled compiled = compileKernels({layerNormKernel(rows, length)},
                                       options);
    ASSERT_TRUE(compiled);
    LayerNormData data(rows, length);
    compiled.run("layer_norm", data.operands(), 0, rows);
    std::vector<double> want(reference.out.begin(), reference.out.end());
    expectClose(data.out, want, 1e-5, 1e-5);
  }
}

// Op::Random is Philox4x32-10 as runtime/Weights implements it, bit for
// bit, at every vector width: column-level counters (vector lanes and the
// scalar tail) and row-level ones (one draw per row).
TEST(KernelToCpu, RandomIsPhilox) {
  const int64_t rows = 3, length = 37;
  KernelBuilder k("random", {rows, length});
  int words = k.operand(0, DType::I64, {0, 0});
  int step = k.operand(0, DType::I64, {0, 0}, 1);
  int out = k.operand(1, DType::F32, {length, 1});
  int perRow = k.operand(2, DType::F32, {1, 0});
  int32_t key = k.load(words);
  int32_t high = k.load(step);
  int32_t flat = k.binary(
      Op::Add, k.binary(Op::Mul, k.index(0), k.intConstant(length)),
      k.index(1));
  kir::Instr random;
  random.op = Op::Random;
  random.type = DType::F32;
  random.args = {key, high, flat};
  k.store(out, k.add(random));
  random.args = {key, high, k.index(0)};
  k.store(perRow, k.add(random));

  uint64_t rng[2] = {0xfedcba9876543210ull, (uint64_t(3) << 32) | 9};
  auto reference = [&](uint64_t low) {
    std::array<uint32_t, 4> block = runtime::philox4x32(
        {uint32_t(low), uint32_t(low >> 32), uint32_t(rng[1]),
         uint32_t(rng[1] >> 32)},
        {uint32_t(rng[0]), uint32_t(rng[0] >> 32)});
    return float(block[0] >> 8) * 0x1p-24f;
  };
  for (int width : {1, 4, 8, 16}) {
    cpu::CpuTargetOptions options;
    options.vectorWidth = width;
    Compiled compiled = compileKernels({k.kernel}, options);
    ASSERT_TRUE(compiled);
    std::vector<float> values(rows * length, -1.0f), rowValues(rows, -1.0f);
    compiled.run("random", {rng, rng, values.data(), rowValues.data()}, 0,
                 rows);
    for (int64_t i = 0; i < rows * length; ++i)
      ASSERT_EQ(values[i], reference(i)) << "width " << width << ", " << i;
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(rowValues[r], reference(r)) << "width " << width << ", row "
                                            << r;
  }
}

// A kernel that only stores a constant over 1 MiB or more (the update
// step zeroing a gradient) streams its vector stores past the caches, then
// fences them; one that loads, one under 1 MiB and one whose vectors would
// not be aligned store as usual. Every one of them zeroes what it should,
// its rows split over two threads.
TEST(KernelToCpu, LargeFillsStreamTheirStores) {
  const int64_t rows = 64, length = 4096; // 1 MiB of f32
  auto fill = [](std::string name, int64_t rows, int64_t length,
                 int64_t offset, bool loads) {
    KernelBuilder k(std::move(name), {rows, length});
    int out = k.operand(0, DType::F32, {length, 1}, offset);
    int32_t zero = k.constant(0.0f);
    if (loads) // out = out * 0: reads the lines it overwrites
      zero = k.binary(Op::Mul, k.load(out), zero);
    k.store(out, zero);
    return k.kernel;
  };
  struct Case {
    kir::Kernel kernel;
    bool streams;
  };
  std::vector<Case> cases = {
      {fill("streamed", rows, length, 0, false), true},
      {fill("loads", rows, length, 0, true), false},
      {fill("small", rows / 2, length, 0, false), false},
      {fill("misaligned", rows, length, 1, false), false}};
  int width = cpu::resolveTarget({}).vectorWidth;
  bool x86 = llvm::Triple(llvm::sys::getProcessTriple()).isX86();
  for (const Case &c : cases) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    llvm::Error error = cpu::printCpuPhase(os, {c.kernel}, "cpu-llvm-ir");
    ASSERT_FALSE(error) << llvm::toString(std::move(error));
    bool streams = c.streams && x86 && width > 1;
    EXPECT_EQ(streams, ir.find("!nontemporal") != std::string::npos)
        << c.kernel.name;
    EXPECT_EQ(streams, ir.find("llvm.x86.sse.sfence") != std::string::npos)
        << c.kernel.name;

    Compiled compiled = compileKernels({c.kernel});
    ASSERT_TRUE(compiled);
    int64_t kernelRows = c.kernel.domain[0];
    int64_t offset = c.kernel.operands[0].offset;
    // 64-byte aligned, as every buffer of a program is.
    const int64_t size = kernelRows * length + 16;
    std::unique_ptr<float, decltype(&std::free)> storage(
        static_cast<float *>(std::aligned_alloc(64, size * sizeof(float))),
        &std::free);
    float *buffer = storage.get();
    std::fill(buffer, buffer + size, 1.0f);
    std::vector<void *> operands = {buffer};
    std::thread first([&] { compiled.run(c.kernel.name, operands, 0, 5); });
    compiled.run(c.kernel.name, operands, 5, kernelRows);
    first.join();
    for (int64_t i = 0; i < size; ++i) {
      bool written = i >= offset && i < offset + kernelRows * length;
      if (buffer[i] != (written ? 0.0f : 1.0f)) {
        ADD_FAILURE() << c.kernel.name << ": element " << i << " is "
                      << buffer[i];
        break;
      }
    }
  }
}

TEST(KernelToCpu, PrintsEveryPhase) {
  kir::Kernel kernel = layerNormKernel(2, 40);
  int width = cpu::resolveTarget({}).vectorWidth;
  std::map<std::string, std::vector<std::string>> expected = {
      {"cpu-mlir",
       {"func.func @layer_norm", "scf.for",
        "vector<" + std::to_string(width) + "xf32>", "vector.reduction"}},
      {"cpu-llvm-dialect", {"llvm.func @layer_norm", "llvm.intr.vector.reduce"}},
      {"cpu-llvm-ir", {"define void @layer_norm(ptr", "<" + std::to_string(width) + " x float>"}},
      {"cpu-asm", {"layer_norm:"}},
  };
  if (width >= 8)
    expected["cpu-asm"].push_back(width == 16 ? "zmm" : "ymm");
  for (llvm::StringRef phase : cpu::cpuPhaseNames()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::Error error = cpu::printCpuPhase(os, {kernel}, phase);
    ASSERT_FALSE(error) << llvm::toString(std::move(error));
    for (const std::string &needle : expected.at(phase.str()))
      EXPECT_NE(text.find(needle), std::string::npos)
          << phase.str() << " lacks '" << needle << "'";
  }
}

TEST(KernelToCpu, ErrorsNameTheProblem) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::Error unknown =
      cpu::printCpuPhase(os, {layerNormKernel(2, 4)}, "cpu-bogus");
  EXPECT_NE(llvm::toString(std::move(unknown)).find("unknown CPU phase"),
            std::string::npos);

  KernelBuilder bad("bad", {4, 4});
  int x = bad.operand(0, DType::F32, {4, 1});
  bad.store(x, 7); // not a value yet
  auto object = cpu::compileKernelsToObject({bad.kernel});
  ASSERT_FALSE(object);
  std::string message = llvm::toString(object.takeError());
  EXPECT_NE(message.find("kernel 'bad'"), std::string::npos) << message;

  auto loaded = cpu::CpuKernels::load(llvm::ArrayRef<char>("not an object", 13));
  ASSERT_FALSE(loaded);
  EXPECT_NE(llvm::toString(loaded.takeError()).find("cannot load CPU kernels"),
            std::string::npos);

  Compiled compiled = compileKernels({layerNormKernel(2, 4)});
  ASSERT_TRUE(compiled);
  auto missing = compiled.kernels->lookup("no_such_kernel");
  ASSERT_FALSE(missing);
  EXPECT_NE(llvm::toString(missing.takeError()).find("no_such_kernel"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Transcendentals and other unary ops against std:: in double
//===----------------------------------------------------------------------===//

struct UnaryCase {
  Op op;
  std::function<double(double)> reference;
  std::vector<float> inputs;
  double maxUlps; // the bound this test holds the op to
};

std::vector<float> linspace(double lo, double hi, int n) {
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i)
    values[i] = float(lo + (hi - lo) * i / (n - 1));
  return values;
}

std::vector<float> logspace(double lo, double hi, int n, bool bothSigns) {
  std::vector<float> values;
  for (int i = 0; i < n; ++i) {
    float value = float(std::exp(std::log(lo) +
                                 (std::log(hi) - std::log(lo)) * i / (n - 1)));
    values.push_back(value);
    if (bothSigns)
      values.push_back(-value);
  }
  return values;
}

std::vector<float> concat(std::vector<std::vector<float>> parts) {
  std::vector<float> all;
  for (auto &part : parts)
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

/// Rotary angles reach position x frequency, so sweep far, and hit the
/// floats nearest to multiples of pi/2 where the result cancels.
std::vector<float> trigInputs() {
  std::vector<float> inputs = concat({linspace(-10, 10, 200001),
                                      linspace(-1e5, 1e5, 200001),
                                      linspace(-0x1p22, 0x1p22, 200001),
                                      logspace(1e-8, 1, 2001, true)});
  for (int k = -20000; k <= 20000; ++k) {
    float nearest = float(k * M_PI / 2);
    inputs.push_back(nearest);
    inputs.push_back(std::nextafter(nearest, INFINITY));
  }
  return inputs;
}

/// The error of `got` in units in the last place of the float nearest to
/// `want` (a float's spacing at that magnitude; subnormals use the least).
double ulpError(float got, double want) {
  if (std::isnan(want) || std::isinf(want))
    return (std::isnan(want) ? std::isnan(got) : got == want) ? 0 : INFINITY;
  float nearest = float(want);
  double ulp = std::max(double(std::nextafter(std::fabs(nearest), INFINITY)) -
                            std::fabs(nearest),
                        double(std::numeric_limits<float>::denorm_min()));
  return std::fabs(double(got) - want) / ulp;
}

TEST(KernelToCpu, UnaryOpsAccuracy) {
  std::vector<UnaryCase> cases = {
      {Op::Neg, [](double x) { return -x; }, linspace(-10, 10, 1001), 0},
      {Op::Abs, [](double x) { return std::fabs(x); }, linspace(-10, 10, 1001),
       0},
      {Op::Sqrt, [](double x) { return std::sqrt(x); },
       logspace(1e-37, 1e38, 20001, false), 0.5},
      {Op::Rsqrt, [](double x) { return 1 / std::sqrt(x); },
       logspace(1e-37, 1e37, 20001, false), 2},
      {Op::Exp, [](double x) { return std::exp(x); },
       concat({linspace(-103, 88.5, 200001), logspace(1e-8, 1, 2001, true)}),
       4},
      {Op::Log, [](double x) { return std::log(x); },
       concat({logspace(1e-45, 1e38, 100001, false),
               linspace(0.5, 2, 100001)}),
       4},
      {Op::Tanh, [](double x) { return std::tanh(x); },
       concat({linspace(-10, 10, 200001), logspace(1e-8, 1, 2001, true)}), 5},
      {Op::Erf, [](double x) { return std::erf(x); },
       concat({linspace(-6, 6, 200001), logspace(1e-8, 1, 2001, true)}), 4},
      // Accurate up to |x| = 2^22, NaN beyond (see emitSinCos).
      {Op::Sin, [](double x) { return std::fabs(x) > 0x1p22 ? NAN : std::sin(x); },
       trigInputs(), 4},
      {Op::Cos, [](double x) { return std::fabs(x) > 0x1p22 ? NAN : std::cos(x); },
       trigInputs(), 4},
  };
  // Limits and special values, as std:: gives them (softmax relies on
  // exp(-inf) = 0 for masked entries).
  const float inf = INFINITY, nan = NAN;
  std::vector<float> specials = {-inf, -1000, -104, -100, -88, 88.8f, 100,
                                 1000, inf,   nan,   0,    -0.0f, -1,
                                 1e-40f, 1e30f};
  // Kernel 2i sweeps op i, kernel 2i+1 runs it on the specials.
  std::vector<kir::Kernel> kernels;
  for (const UnaryCase &c : cases)
    for (int64_t n : {int64_t(c.inputs.size()), int64_t(specials.size())}) {
      KernelBuilder k(std::string("unary_") + kir::opName(c.op) + "_" +
                          std::to_string(n),
                      {n});
      int x = k.operand(0, DType::F32, {1});
      int y = k.operand(1, DType::F32, {1});
      k.store(y, k.unary(c.op, k.load(x)));
      kernels.push_back(k.kernel);
    }
  Compiled compiled = compileKernels(kernels);
  ASSERT_TRUE(compiled);
  for (size_t i = 0; i < cases.size(); ++i) {
    const UnaryCase &c = cases[i];
    std::vector<float> inputs = c.inputs, outputs(inputs.size(), NAN);
    compiled.run(kernels[2 * i].name, {inputs.data(), outputs.data()}, 0, 1);
    double worstUlps = 0, worstRel = 0, worstAt = 0;
    for (size_t j = 0; j < inputs.size(); ++j) {
      double want = c.reference(inputs[j]);
      double ulps = ulpError(outputs[j], want);
      if (ulps > worstUlps)
        worstUlps = ulps, worstAt = inputs[j];
      if (std::fabs(want) >= std::numeric_limits<float>::min())
        worstRel = std::max(worstRel,
                            std::fabs(outputs[j] - want) / std::fabs(want));
    }
    llvm::outs() << llvm::format("%-6s max error %6.2f ulp (at %.9g), max "
                                 "relative error %.3g\n",
                                 kir::opName(c.op), worstUlps, worstAt,
                                 worstRel);
    llvm::outs().flush();
    EXPECT_LE(worstUlps, c.maxUlps) << kir::opName(c.op);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<float> outputs(specials.size());
    compiled.run(kernels[2 * i + 1].name, {specials.data(), outputs.data()}, 0, 1);
    for (size_t j = 0; j < specials.size(); ++j) {
      float want = float(cases[i].reference(specials[j]));
      bool same = std::isnan(want) ? std::isnan(outputs[j])
                                   : outputs[j] == want ||
                                         ulpError(outputs[j], want) <=
                                             cases[i].maxUlps;
      EXPECT_TRUE(same) << kir::opName(cases[i].op) << "(" << specials[j]
                        << ") = " << outputs[j] << ", want " << want;
    }
  }
}

} // namespace
