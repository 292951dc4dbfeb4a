// The double-precision reference interpreter of llmc functions: one plain
// loop nest per op, from the op descriptions in ir/LlmcOps.td.
#include "Interpreter.h"

#include "ir/LlmcOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <unordered_map>

using namespace mlir;
using namespace mlir::llmc;

namespace llmc::test {

Tensor Tensor::zeros(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return Tensor{std::move(shape), std::vector<double>(n, 0.0)};
}

double philoxUniform(uint64_t key, uint64_t counterHigh, uint64_t counterLow) {
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  uint32_t c[4] = {uint32_t(counterLow), uint32_t(counterLow >> 32),
                   uint32_t(counterHigh), uint32_t(counterHigh >> 32)};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0];
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c[2];
    uint32_t next[4] = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1),
                        uint32_t(p0 >> 32) ^ c[3] ^ k1, uint32_t(p0)};
    std::copy(next, next + 4, c);
  }
  return double(c[0] >> 8) * (1.0 / 16777216.0);
}

namespace {

std::vector<int64_t> shapeOf(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t> &shape) {
  std::vector<int64_t> index(shape.size());
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// The flat index in `shape` of the element that broadcasts to `outIndex`
// (shapes aligned at the last dimension; size-1 dimensions stretch).
int64_t broadcastSource(const std::vector<int64_t> &outIndex,
                        const std::vector<int64_t> &shape) {
  int64_t lead = int64_t(outIndex.size()) - int64_t(shape.size());
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + (shape[d] == 1 ? 0 : outIndex[lead + d]);
  return flat;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

constexpr double kSqrt2OverPi = 0.79788456080286535588;

double gelu(double x, GeluApproximation approx) {
  if (approx == GeluApproximation::Tanh)
    return 0.5 * x *
           (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

double geluDerivative(double x, GeluApproximation approx) {
  if (approx == GeluApproximation::Tanh) {
    double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * kSqrt2OverPi *
               (1.0 + 3.0 * 0.044715 * x * x);
  }
  double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * pdf;
}

// Rows of the last dimension: `rows` rows of `cols` elements.
struct Rows {
  int64_t rows, cols;
  explicit Rows(const std::vector<int64_t> &shape) {
    cols = shape.empty() ? 1 : shape.back();
    rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d)
      rows *= shape[d];
  }
};

// [B..., M, N] as (batch, m, n); the batch dims flattened.
struct Matrices {
  int64_t batch, rows, cols;
  explicit Matrices(const std::vector<int64_t> &shape) {
    size_t r = shape.size();
    rows = shape[r - 2];
    cols = shape[r - 1];
    batch = 1;
    for (size_t d = 0; d + 2 < r; ++d)
      batch *= shape[d];
  }
  // Element (b, i, j) of the matrix, read transposed when `t`.
  int64_t at(int64_t b, int64_t i, int64_t j, bool t) const {
    return t ? (b * rows + j) * cols + i : (b * rows + i) * cols + j;
  }
};

class Interpreter {
public:
  explicit Interpreter(RngState rng) : rng(rng) {}

  llvm::Expected<std::vector<Tensor>> run(func::FuncOp func,
                                          ArrayRef<Tensor> args) {
    if (args.size() != func.getNumArguments())
      return error("expected " + std::to_string(func.getNumArguments()) +
                   " arguments, got " + std::to_string(args.size()));
    for (auto [arg, tensor] : llvm::zip(func.getArguments(), args)) {
      if (shapeOf(arg) != tensor.shape)
        return error("argument #" + std::to_string(arg.getArgNumber()) +
                     " has the wrong shape");
      env[arg.getAsOpaquePointer()] = tensor;
    }
    for (Operation &op : func.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        std::vector<Tensor> results;
        for (Value v : ret.getOperands())
          results.push_back(in(v));
        return results;
      }
      if (llvm::Error err = step(&op))
        return err;
    }
    return error("function has no return");
  }

private:
  RngState rng;
  // unordered_map: references to values stay valid while results are added.
  std::unordered_map<const void *, Tensor> env;

  static llvm::Error error(const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                   message.c_str());
  }

  const Tensor &in(Value v) { return env.at(v.getAsOpaquePointer()); }
  Tensor &out(Value v) {
    return env[v.getAsOpaquePointer()] = Tensor::zeros(shapeOf(v));
  }

  llvm::Error step(Operation *op) {
    bool handled = llvm::TypeSwitch<Operation *, bool>(op)
        .Case<ConstantOp>([&](auto o) { constant(o); return true; })
        .Case<FillOp>([&](auto o) {
          Tensor &y = out(o.getResult());
          std::fill(y.data.begin(), y.data.end(),
                    o.getValue().convertToDouble());
          return true;
        })
        .Case<EmbeddingOp>([&](auto o) { embedding(o); return true; })
        .Case<EmbeddingGradOp>([&](auto o) { embeddingGrad(o); return true; })
        .Case<MatmulOp, BatchMatmulOp>([&](auto o) {
          matmul(o.getLhs(), o.getRhs(), o.getTransposeA(),
                 o.getTransposeB(), o.getResult());
          return true;
        })
        .Case<AddOp>([&](auto o) { binary(o, [](double a, double b) { return a + b; }); return true; })
        .Case<SubOp>([&](auto o) { binary(o, [](double a, double b) { return a - b; }); return true; })
        .Case<MulOp>([&](auto o) { binary(o, [](double a, double b) { return a * b; }); return true; })
        .Case<DivOp>([&](auto o) { binary(o, [](double a, double b) { return a / b; }); return true; })
        .Case<MaxOp>([&](auto o) { binary(o, [](double a, double b) { return std::max(a, b); }); return true; })
        .Case<NegOp>([&](auto o) { unary(o, [](double x) { return -x; }); return true; })
        .Case<ExpOp>([&](auto o) { unary(o, [](double x) { return std::exp(x); }); return true; })
        .Case<LogOp>([&](auto o) { unary(o, [](double x) { return std::log(x); }); return true; })
        .Case<TanhOp>([&](auto o) { unary(o, [](double x) { return std::tanh(x); }); return true; })
        .Case<SqrtOp>([&](auto o) { unary(o, [](double x) { return std::sqrt(x); }); return true; })
        .Case<RsqrtOp>([&](auto o) { unary(o, [](double x) { return 1.0 / std::sqrt(x); }); return true; })
        .Case<ReluOp>([&](auto o) { unary(o, [](double x) { return x > 0 ? x : 0.0; }); return true; })
        .Case<SiluOp>([&](auto o) { unary(o, [](double x) { return x * sigmoid(x); }); return true; })
        .Case<CastOp>([&](auto o) { unary(o, [](double x) { return x; }); return true; })
        .Case<GeluOp>([&](auto o) {
          GeluApproximation a = o.getApproximate();
          unary(o, [a](double x) { return gelu(x, a); });
          return true;
        })
        .Case<ReluGradOp>([&](auto o) { activationGrad(o, [](double x) { return x > 0 ? 1.0 : 0.0; }); return true; })
        .Case<SiluGradOp>([&](auto o) {
          activationGrad(o, [](double x) {
            double s = sigmoid(x);
            return s * (1.0 + x * (1.0 - s));
          });
          return true;
        })
        .Case<GeluGradOp>([&](auto o) {
          GeluApproximation a = o.getApproximate();
          activationGrad(o, [a](double x) { return geluDerivative(x, a); });
          return true;
        })
        .Case<DropoutOp>([&](auto o) { dropout(o); return true; })
        .Case<LayerNormOp>([&](auto o) { layerNorm(o); return true; })
        .Case<LayerNormGradOp>([&](auto o) { layerNormGrad(o); return true; })
        .Case<RmsNormOp>([&](auto o) { rmsNorm(o); return true; })
        .Case<RmsNormGradOp>([&](auto o) { rmsNormGrad(o); return true; })
        .Case<SoftmaxOp>([&](auto o) { softmax(o); return true; })
        .Case<SoftmaxGradOp>([&](auto o) { softmaxGrad(o); return true; })
        .Case<AttentionOp>([&](auto o) { attention(o); return true; })
        .Case<AttentionGradOp>([&](auto o) { attentionGrad(o); return true; })
        .Case<RotaryOp>([&](auto o) { rotary(o); return true; })
        .Case<CrossEntropyOp>([&](auto o) { crossEntropy(o); return true; })
        .Case<CrossEntropyGradOp>([&](auto o) { crossEntropyGrad(o); return true; })
        .Case<VocabShardMaxOp>([&](auto o) { vocabShardMax(o); return true; })
        .Case<VocabShardCrossEntropyOp>([&](auto o) { vocabShardCrossEntropy(o); return true; })
        .Case<VocabShardCrossEntropyGradOp>([&](auto o) { vocabShardCrossEntropyGrad(o); return true; })
        .Case<CrossEntropyCombineOp>([&](auto o) { crossEntropyCombine(o); return true; })
        .Case<ReshapeOp>([&](auto o) {
          out(o.getResult()).data = in(o.getInput()).data;
          return true;
        })
        .Case<TransposeOp>([&](auto o) { transpose(o); return true; })
        .Case<SliceOp>([&](auto o) { slice(o); return true; })
        .Case<ConcatOp>([&](auto o) { concat(o); return true; })
        .Case<BroadcastOp>([&](auto o) { broadcast(o); return true; })
        .Case<ReduceSumOp>([&](auto o) { reduce(o, "sum"); return true; })
        .Case<ReduceMeanOp>([&](auto o) { reduce(o, "mean"); return true; })
        .Case<ReduceMaxOp>([&](auto o) { reduce(o, "max"); return true; })
        .Default([](Operation *) { return false; });
    if (!handled)
      return error("the interpreter cannot run '" +
                   op->getName().getStringRef().str() + "'");
    return llvm::Error::success();
  }

  void constant(ConstantOp op) {
    Tensor &y = out(op.getResult());
    auto dense = cast<DenseElementsAttr>(op.getValue());
    int64_t i = 0;
    if (isa<FloatType>(dense.getElementType())) {
      for (APFloat v : dense.getValues<APFloat>())
        y.data[i++] = v.convertToDouble();
    } else {
      for (APInt v : dense.getValues<APInt>())
        y.data[i++] = double(v.getSExtValue());
    }
  }

  // A table that is a block of the vocabulary (vocab_start) holds rows
  // [start, start + rows): other ids select nothing (-1).
  static int64_t blockRow(Operation *op, double id, int64_t rows) {
    auto start = op->getAttrOfType<IntegerAttr>("vocab_start");
    int64_t row = int64_t(id) - (start ? start.getInt() : 0);
    return row >= 0 && row < rows ? row : -1;
  }

  void embedding(EmbeddingOp op) {
    const Tensor &table = in(op.getTable()), &ids = in(op.getIndices());
    Tensor &y = out(op.getResult());
    int64_t c = table.shape[1];
    for (int64_t i = 0; i < ids.numel(); ++i) {
      int64_t row = blockRow(op, ids.data[i], table.shape[0]);
      for (int64_t j = 0; j < c; ++j)
        y.data[i * c + j] = row < 0 ? 0.0 : table.data[row * c + j];
    }
  }

  void embeddingGrad(EmbeddingGradOp op) {
    const Tensor &g = in(op.getGrad()), &ids = in(op.getIndices());
    Tensor &y = out(op.getResult());
    int64_t c = y.shape[1];
    for (int64_t i = 0; i < ids.numel(); ++i) {
      int64_t row = blockRow(op, ids.data[i], y.shape[0]);
      for (int64_t j = 0; row >= 0 && j < c; ++j)
        y.data[row * c + j] += g.data[i * c + j];
    }
  }

  // result[b, m, n] = sum_k op(A)[b, m, k] op(B)[b', k, n], where a rank-2
  // rhs (matmul) is shared by every batch.
  void matmul(Value lhs, Value rhs, bool ta, bool tb, Value result) {
    const Tensor &a = in(lhs), &b = in(rhs);
    Tensor &y = out(result);
    Matrices ma(a.shape), mb(b.shape), my(y.shape);
    int64_t k = ta ? ma.rows : ma.cols;
    for (int64_t bi = 0; bi < my.batch; ++bi)
      for (int64_t m = 0; m < my.rows; ++m)
        for (int64_t n = 0; n < my.cols; ++n) {
          double sum = 0;
          for (int64_t kk = 0; kk < k; ++kk)
            sum += a.data[ma.at(bi, m, kk, ta)] *
                   b.data[mb.at(mb.batch == 1 ? 0 : bi, kk, n, tb)];
          y.data[(bi * my.rows + m) * my.cols + n] = sum;
        }
  }

  template <typename OpT, typename Fn> void binary(OpT op, Fn fn) {
    const Tensor &a = in(op.getLhs()), &b = in(op.getRhs());
    Tensor &y = out(op.getResult());
    for (int64_t i = 0; i < y.numel(); ++i) {
      std::vector<int64_t> index = unravel(i, y.shape);
      y.data[i] = fn(a.data[broadcastSource(index, a.shape)],
                     b.data[broadcastSource(index, b.shape)]);
    }
  }

  template <typename OpT, typename Fn> void unary(OpT op, Fn fn) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    for (int64_t i = 0; i < y.numel(); ++i)
      y.data[i] = fn(x.data[i]);
  }

  template <typename OpT, typename Fn> void activationGrad(OpT op, Fn fn) {
    const Tensor &g = in(op.getGrad()), &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    for (int64_t i = 0; i < y.numel(); ++i)
      y.data[i] = g.data[i] * fn(x.data[i]);
  }

  // Element i is kept iff Random(seed, (step << 32) | stream, i) >= rate.
  void dropout(DropoutOp op) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    double rate = op.getRate().convertToDouble();
    uint64_t stream = uint64_t(op.getStreamAttr().getInt());
    for (int64_t i = 0; i < y.numel(); ++i) {
      bool keep = rate == 0.0 ||
                  philoxUniform(rng.seed, (rng.step << 32) | stream,
                                uint64_t(i)) >= rate;
      y.data[i] = keep ? x.data[i] / (1.0 - rate) : 0.0;
    }
  }

  void layerNorm(LayerNormOp op) {
    const Tensor &x = in(op.getInput()), &w = in(op.getWeight());
    const Tensor *bias = op.getBias() ? &in(op.getBias()) : nullptr;
    Tensor &y = out(op.getResult()), &mean = out(op.getMean()),
           &rstd = out(op.getRstd());
    double eps = op.getEpsilon().convertToDouble();
    Rows r(x.shape);
    for (int64_t i = 0; i < r.rows; ++i) {
      const double *row = &x.data[i * r.cols];
      double m = 0, v = 0;
      for (int64_t j = 0; j < r.cols; ++j)
        m += row[j];
      m /= r.cols;
      for (int64_t j = 0; j < r.cols; ++j)
        v += (row[j] - m) * (row[j] - m);
      v /= r.cols;
      double s = 1.0 / std::sqrt(v + eps);
      mean.data[i] = m;
      rstd.data[i] = s;
      for (int64_t j = 0; j < r.cols; ++j)
        y.data[i * r.cols + j] =
            (row[j] - m) * s * w.data[j] + (bias ? bias->data[j] : 0.0);
    }
  }

  // With xhat = (x - mean) rstd and dxhat = g w:
  //   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
  //   dw = sum over rows of g xhat, db = sum over rows of g.
  void layerNormGrad(LayerNormGradOp op) {
    const Tensor &g = in(op.getGrad()), &x = in(op.getInput()),
                 &w = in(op.getWeight()), &mean = in(op.getMean()),
                 &rstd = in(op.getRstd());
    Tensor &dx = out(op.getInputGrad()), &dw = out(op.getWeightGrad()),
           &db = out(op.getBiasGrad());
    Rows r(x.shape);
    for (int64_t i = 0; i < r.rows; ++i) {
      double meanD = 0, meanDX = 0;
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t e = i * r.cols + j;
        double xhat = (x.data[e] - mean.data[i]) * rstd.data[i];
        double d = g.data[e] * w.data[j];
        meanD += d;
        meanDX += d * xhat;
        dw.data[j] += g.data[e] * xhat;
        db.data[j] += g.data[e];
      }
      meanD /= r.cols;
      meanDX /= r.cols;
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t e = i * r.cols + j;
        double xhat = (x.data[e] - mean.data[i]) * rstd.data[i];
        dx.data[e] =
            rstd.data[i] * (g.data[e] * w.data[j] - meanD - xhat * meanDX);
      }
    }
  }

  void rmsNorm(RmsNormOp op) {
    const Tensor &x = in(op.getInput()), &w = in(op.getWeight());
    Tensor &y = out(op.getResult()), &rstd = out(op.getRstd());
    double eps = op.getEpsilon().convertToDouble();
    Rows r(x.shape);
    for (int64_t i = 0; i < r.rows; ++i) {
      double ms = 0;
      for (int64_t j = 0; j < r.cols; ++j)
        ms += x.data[i * r.cols + j] * x.data[i * r.cols + j];
      double s = 1.0 / std::sqrt(ms / r.cols + eps);
      rstd.data[i] = s;
      for (int64_t j = 0; j < r.cols; ++j)
        y.data[i * r.cols + j] = x.data[i * r.cols + j] * s * w.data[j];
    }
  }

  // y_j = x_j r w_j with r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / C:
  //   dx_j = r g_j w_j - r^3 x_j / C * sum_i g_i w_i x_i,  dw_j = sum g_j x_j r.
  void rmsNormGrad(RmsNormGradOp op) {
    const Tensor &g = in(op.getGrad()), &x = in(op.getInput()),
                 &w = in(op.getWeight()), &rstd = in(op.getRstd());
    Tensor &dx = out(op.getInputGrad()), &dw = out(op.getWeightGrad());
    Rows r(x.shape);
    for (int64_t i = 0; i < r.rows; ++i) {
      double s = rstd.data[i], dot = 0;
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t e = i * r.cols + j;
        dot += g.data[e] * w.data[j] * x.data[e];
        dw.data[j] += g.data[e] * x.data[e] * s;
      }
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t e = i * r.cols + j;
        dx.data[e] = s * g.data[e] * w.data[j] -
                     s * s * s * x.data[e] * dot / r.cols;
      }
    }
  }

  void softmax(SoftmaxOp op) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    Rows r(x.shape);
    for (int64_t i = 0; i < r.rows; ++i) {
      const double *row = &x.data[i * r.cols];
      double m = *std::max_element(row, row + r.cols), sum = 0;
      for (int64_t j = 0; j < r.cols; ++j)
        sum += std::exp(row[j] - m);
      for (int64_t j = 0; j < r.cols; ++j)
        y.data[i * r.cols + j] = std::exp(row[j] - m) / sum;
    }
  }

  void softmaxGrad(SoftmaxGradOp op) {
    const Tensor &g = in(op.getGrad()), &y = in(op.getOutput());
    Tensor &dx = out(op.getResult());
    Rows r(y.shape);
    for (int64_t i = 0; i < r.rows; ++i) {
      double dot = 0;
      for (int64_t j = 0; j < r.cols; ++j)
        dot += g.data[i * r.cols + j] * y.data[i * r.cols + j];
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t e = i * r.cols + j;
        dx.data[e] = y.data[e] * (g.data[e] - dot);
      }
    }
  }

  // Query i sees key j when not causal, or when j <= i + Tk - Tq.
  static bool visible(bool causal, int64_t i, int64_t j, int64_t tq,
                      int64_t tk) {
    return !causal || j <= i + tk - tq;
  }

  // Scores s[i, j] = scale q_i . k_j of one batch.
  static double score(const Tensor &q, const Tensor &k, int64_t b, int64_t i,
                      int64_t j, int64_t tq, int64_t tk, int64_t d,
                      double scale) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c)
      s += q.data[(b * tq + i) * d + c] * k.data[(b * tk + j) * d + c];
    return scale * s;
  }

  void attention(AttentionOp op) {
    const Tensor &q = in(op.getQuery()), &k = in(op.getKey()),
                 &v = in(op.getValue());
    Tensor &o = out(op.getResult()), &lse = out(op.getLse());
    Matrices mq(q.shape), mk(k.shape), mv(v.shape);
    int64_t tq = mq.rows, tk = mk.rows, d = mq.cols, dv = mv.cols;
    double scale = op.getScale().convertToDouble();
    bool causal = op.getCausal();
    for (int64_t b = 0; b < mq.batch; ++b)
      for (int64_t i = 0; i < tq; ++i) {
        std::vector<double> s(tk);
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < tk; ++j)
          if (visible(causal, i, j, tq, tk)) {
            s[j] = score(q, k, b, i, j, tq, tk, d, scale);
            m = std::max(m, s[j]);
          }
        for (int64_t j = 0; j < tk; ++j)
          if (visible(causal, i, j, tq, tk))
            sum += std::exp(s[j] - m);
        double l = m + std::log(sum);
        lse.data[b * tq + i] = l;
        for (int64_t j = 0; j < tk; ++j) {
          if (!visible(causal, i, j, tq, tk))
            continue;
          double p = std::exp(s[j] - l);
          for (int64_t c = 0; c < dv; ++c)
            o.data[(b * tq + i) * dv + c] += p * v.data[(b * tk + j) * dv + c];
        }
      }
  }

  // With P = exp(S - lse): dV = P^T dO, dP = dO V^T,
  // dS = P (dP - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q.
  void attentionGrad(AttentionGradOp op) {
    const Tensor &go = in(op.getGrad()), &q = in(op.getQuery()),
                 &k = in(op.getKey()), &v = in(op.getValue()),
                 &o = in(op.getOutput()), &lse = in(op.getLse());
    Tensor &dq = out(op.getQueryGrad()), &dk = out(op.getKeyGrad()),
           &dvv = out(op.getValueGrad());
    Matrices mq(q.shape), mk(k.shape), mv(v.shape);
    int64_t tq = mq.rows, tk = mk.rows, d = mq.cols, dv = mv.cols;
    double scale = op.getScale().convertToDouble();
    bool causal = op.getCausal();
    for (int64_t b = 0; b < mq.batch; ++b)
      for (int64_t i = 0; i < tq; ++i) {
        double delta = 0;
        for (int64_t c = 0; c < dv; ++c)
          delta += go.data[(b * tq + i) * dv + c] * o.data[(b * tq + i) * dv + c];
        for (int64_t j = 0; j < tk; ++j) {
          if (!visible(causal, i, j, tq, tk))
            continue;
          double p = std::exp(score(q, k, b, i, j, tq, tk, d, scale) -
                              lse.data[b * tq + i]);
          double dp = 0;
          for (int64_t c = 0; c < dv; ++c) {
            dp += go.data[(b * tq + i) * dv + c] * v.data[(b * tk + j) * dv + c];
            dvv.data[(b * tk + j) * dv + c] += p * go.data[(b * tq + i) * dv + c];
          }
          double ds = p * (dp - delta);
          for (int64_t c = 0; c < d; ++c) {
            dq.data[(b * tq + i) * d + c] += scale * ds * k.data[(b * tk + j) * d + c];
            dk.data[(b * tk + j) * d + c] += scale * ds * q.data[(b * tq + i) * d + c];
          }
        }
      }
  }

  // Pairs (x[t, i], x[t, i + D/2]) rotated by t * theta^(-2i/D), negated
  // with `inverse`.
  void rotary(RotaryOp op) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    Matrices m(x.shape);
    int64_t t = m.rows, d = m.cols, half = d / 2;
    double theta = op.getTheta().convertToDouble();
    double sign = op.getInverse() ? -1.0 : 1.0;
    for (int64_t b = 0; b < m.batch; ++b)
      for (int64_t pos = 0; pos < t; ++pos)
        for (int64_t i = 0; i < half; ++i) {
          double angle = sign * double(pos) * std::pow(theta, -2.0 * i / d);
          double c = std::cos(angle), s = std::sin(angle);
          int64_t e = (b * t + pos) * d;
          double x1 = x.data[e + i], x2 = x.data[e + i + half];
          y.data[e + i] = x1 * c - x2 * s;
          y.data[e + i + half] = x1 * s + x2 * c;
        }
  }

  void crossEntropy(CrossEntropyOp op) {
    const Tensor &logits = in(op.getLogits()), &targets = in(op.getTargets());
    Tensor &loss = out(op.getLoss()), &lse = out(op.getLse());
    Rows r(logits.shape);
    double total = 0;
    for (int64_t i = 0; i < r.rows; ++i) {
      const double *row = &logits.data[i * r.cols];
      double m = *std::max_element(row, row + r.cols), sum = 0;
      for (int64_t j = 0; j < r.cols; ++j)
        sum += std::exp(row[j] - m);
      lse.data[i] = m + std::log(sum);
      total += lse.data[i] - row[int64_t(targets.data[i])];
    }
    loss.data[0] = total / r.rows;
  }

  // The vocabulary-parallel cross-entropy, written from its definitions:
  // column j of a block is the id vocab_start + j, real below vocab_size.
  void vocabShardMax(VocabShardMaxOp op) {
    const Tensor &logits = in(op.getLogits());
    Tensor &y = out(op.getMax());
    Rows r(logits.shape);
    for (int64_t i = 0; i < r.rows; ++i) {
      double m = -INFINITY;
      for (int64_t j = 0; j < r.cols; ++j)
        if (int64_t(op.getVocabStart() + j) < int64_t(op.getVocabSize()))
          m = std::max(m, logits.data[i * r.cols + j]);
      y.data[i] = m;
    }
  }

  void vocabShardCrossEntropy(VocabShardCrossEntropyOp op) {
    const Tensor &logits = in(op.getLogits()), &targets = in(op.getTargets()),
                 &max = in(op.getMax());
    Tensor &sum = out(op.getSumExp()), &target = out(op.getTargetLogit());
    Rows r(logits.shape);
    for (int64_t i = 0; i < r.rows; ++i)
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t id = op.getVocabStart() + j;
        double l = logits.data[i * r.cols + j];
        if (id < int64_t(op.getVocabSize()))
          sum.data[i] += std::exp(l - max.data[i]);
        if (id == int64_t(targets.data[i]))
          target.data[i] = l;
      }
  }

  void vocabShardCrossEntropyGrad(VocabShardCrossEntropyGradOp op) {
    const Tensor &ds = in(op.getSumExpGrad()), &dt = in(op.getTargetLogitGrad()),
                 &logits = in(op.getLogits()), &targets = in(op.getTargets()),
                 &max = in(op.getMax());
    Tensor &y = out(op.getResult());
    Rows r(logits.shape);
    for (int64_t i = 0; i < r.rows; ++i)
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t e = i * r.cols + j, id = op.getVocabStart() + j;
        if (id < int64_t(op.getVocabSize()))
          y.data[e] = ds.data[i] * std::exp(logits.data[e] - max.data[i]);
        if (id == int64_t(targets.data[i]))
          y.data[e] += dt.data[i];
      }
  }

  void crossEntropyCombine(CrossEntropyCombineOp op) {
    const Tensor &max = in(op.getMax()), &sum = in(op.getSumExp()),
                 &target = in(op.getTargetLogit());
    Tensor &loss = out(op.getLoss()), &lse = out(op.getLse());
    double total = 0;
    for (int64_t i = 0; i < max.numel(); ++i) {
      lse.data[i] = max.data[i] + std::log(sum.data[i]);
      total += lse.data[i] - target.data[i];
    }
    loss.data[0] = total / double(max.numel());
  }

  void crossEntropyGrad(CrossEntropyGradOp op) {
    const Tensor &g = in(op.getGrad()), &logits = in(op.getLogits()),
                 &targets = in(op.getTargets()), &lse = in(op.getLse());
    Tensor &y = out(op.getResult());
    Rows r(logits.shape);
    for (int64_t i = 0; i < r.rows; ++i)
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t e = i * r.cols + j;
        double onehot = j == int64_t(targets.data[i]) ? 1.0 : 0.0;
        y.data[e] =
            g.data[0] * (std::exp(logits.data[e] - lse.data[i]) - onehot) /
            r.rows;
      }
  }

  void transpose(TransposeOp op) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    ArrayRef<int64_t> perm = op.getPermutation();
    std::vector<int64_t> xs = stridesOf(x.shape);
    for (int64_t i = 0; i < y.numel(); ++i) {
      std::vector<int64_t> index = unravel(i, y.shape);
      int64_t src = 0;
      for (size_t d = 0; d < perm.size(); ++d)
        src += index[d] * xs[perm[d]];
      y.data[i] = x.data[src];
    }
  }

  void slice(SliceOp op) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    ArrayRef<int64_t> offsets = op.getOffsets();
    std::vector<int64_t> xs = stridesOf(x.shape);
    for (int64_t i = 0; i < y.numel(); ++i) {
      std::vector<int64_t> index = unravel(i, y.shape);
      int64_t src = 0;
      for (size_t d = 0; d < index.size(); ++d)
        src += (index[d] + offsets[d]) * xs[d];
      y.data[i] = x.data[src];
    }
  }

  void concat(ConcatOp op) {
    Tensor &y = out(op.getResult());
    int64_t dim = op.getDim();
    std::vector<int64_t> ys = stridesOf(y.shape);
    int64_t offset = 0;
    for (Value input : op.getInputs()) {
      const Tensor &x = in(input);
      for (int64_t i = 0; i < x.numel(); ++i) {
        std::vector<int64_t> index = unravel(i, x.shape);
        index[dim] += offset;
        int64_t dst = 0;
        for (size_t d = 0; d < index.size(); ++d)
          dst += index[d] * ys[d];
        y.data[dst] = x.data[i];
      }
      offset += x.shape[dim];
    }
  }

  void broadcast(BroadcastOp op) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    for (int64_t i = 0; i < y.numel(); ++i)
      y.data[i] = x.data[broadcastSource(unravel(i, y.shape), x.shape)];
  }

  template <typename OpT> void reduce(OpT op, StringRef kind) {
    const Tensor &x = in(op.getInput());
    Tensor &y = out(op.getResult());
    ArrayRef<int64_t> dims = op.getDims();
    // The result index of an input element: the kept dimensions' indices.
    std::vector<int64_t> keptShape = x.shape;
    int64_t count = 1;
    for (int64_t d : dims) {
      keptShape[d] = 1;
      count *= x.shape[d];
    }
    if (kind == "max")
      std::fill(y.data.begin(), y.data.end(), -INFINITY);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t dst = broadcastSource(unravel(i, x.shape), keptShape);
      if (kind == "max")
        y.data[dst] = std::max(y.data[dst], x.data[i]);
      else
        y.data[dst] += x.data[i];
    }
    if (kind == "mean")
      for (double &v : y.data)
        v /= count;
  }
};

} // namespace

llvm::Expected<std::vector<Tensor>> interpret(func::FuncOp func,
                                              ArrayRef<Tensor> args,
                                              RngState rng) {
  if (!func.getBody().hasOneBlock())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "function must have one block");
  return Interpreter(rng).run(func, args);
}

} // namespace llmc::test
