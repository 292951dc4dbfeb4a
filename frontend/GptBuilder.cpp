// Emits @forward for a ModelConfig: embeddings, pre-norm transformer blocks,
// final norm, classifier and the mean cross-entropy loss.
#include "frontend/GptBuilder.h"

#include "ir/LlmcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/Twine.h"

#include <cmath>

using namespace mlir;
using namespace mlir::llmc;

namespace {

class GptBuilder {
public:
  GptBuilder(MLIRContext &context, const ModelConfig &config,
             ForwardShape shape)
      : cfg(config), b(&context), batch(shape.batch), seq(shape.seqLen),
        elem(b.getF32Type()) {}

  OwningOpRef<ModuleOp> build();

private:
  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elem);
  }

  // Parameters become the function's leading arguments once the body is
  // complete; until then `param` adds an argument to the detached body.
  Value param(const Twine &name, ArrayRef<int64_t> shape) {
    paramNames.push_back(b.getStringAttr(name));
    return body->addArgument(tensor(shape), b.getUnknownLoc());
  }

  Location loc(const Twine &name) {
    return NameLoc::get(b.getStringAttr(name));
  }

  Value linear(Value x, const Twine &prefix, int64_t in, int64_t out);
  Value norm(Value x, const Twine &prefix);
  Value dropout(Value x);
  Value attention(Value x, const Twine &prefix);
  Value mlp(Value x, const Twine &prefix);
  DictionaryAttr configAttr();

  const ModelConfig &cfg;
  OpBuilder b;
  int64_t batch, seq;
  Type elem;
  Block *body = nullptr;
  SmallVector<Attribute> paramNames;
  int64_t nextDropoutStream = 0;
};

Value GptBuilder::linear(Value x, const Twine &prefix, int64_t in,
                         int64_t out) {
  Value w = param(prefix + ".weight", {out, in});
  Location l = loc(prefix);
  Value y = MatmulOp::create(b, l, x, w, /*transpose_a=*/false,
                             /*transpose_b=*/true);
  if (cfg.bias)
    y = AddOp::create(b, l, y, param(prefix + ".bias", {out}));
  return y;
}

Value GptBuilder::norm(Value x, const Twine &prefix) {
  Value w = param(prefix + ".weight", {cfg.nEmbd});
  FloatAttr eps = b.getF32FloatAttr(cfg.normEps);
  Location l = loc(prefix);
  if (cfg.norm == Norm::RmsNorm)
    return RmsNormOp::create(b, l, x, w, eps).getResult();
  Value bias = cfg.bias ? param(prefix + ".bias", {cfg.nEmbd}) : Value();
  return LayerNormOp::create(b, l, x, w, bias, eps).getResult();
}

Value GptBuilder::dropout(Value x) {
  if (cfg.dropout == 0.0)
    return x;
  return DropoutOp::create(b, x.getLoc(), x, b.getF32FloatAttr(cfg.dropout),
                           b.getI64IntegerAttr(nextDropoutStream++));
}

Value GptBuilder::attention(Value x, const Twine &prefix) {
  int64_t c = cfg.nEmbd, h = cfg.nHead, d = cfg.headDim();
  Value qkv = linear(x, prefix + ".c_attn", c, 3 * c); // [B, T, 3C]
  Location l = loc(prefix);
  // [B, T, 3C] -> three [B, H, T, D] heads.
  auto heads = [&](int64_t index) -> Value {
    Value part =
        SliceOp::create(b, l, qkv, b.getDenseI64ArrayAttr({0, 0, index * c}),
                        b.getDenseI64ArrayAttr({batch, seq, c}));
    Value split = ReshapeOp::create(b, l, tensor({batch, seq, h, d}), part);
    return TransposeOp::create(b, l, split,
                               b.getDenseI64ArrayAttr({0, 2, 1, 3}));
  };
  Value q = heads(0), k = heads(1), v = heads(2);
  if (cfg.position == Position::Rope) {
    FloatAttr theta = b.getF32FloatAttr(cfg.ropeTheta);
    q = RotaryOp::create(b, l, q, theta, /*inverse=*/UnitAttr());
    k = RotaryOp::create(b, l, k, theta, /*inverse=*/UnitAttr());
  }
  FloatAttr scale = b.getF32FloatAttr(1.0 / std::sqrt(double(d)));
  Value o =
      AttentionOp::create(b, l, q, k, v, scale, b.getUnitAttr()).getResult();
  o = TransposeOp::create(b, l, o, b.getDenseI64ArrayAttr({0, 2, 1, 3}));
  o = ReshapeOp::create(b, l, tensor({batch, seq, c}), o);
  return linear(o, prefix + ".c_proj", c, c);
}

Value GptBuilder::mlp(Value x, const Twine &prefix) {
  int64_t c = cfg.nEmbd, f = cfg.ffnHidden;
  Location l = loc(prefix);
  Value hidden;
  switch (cfg.activation) {
  case Activation::SwiGlu: {
    // Gate and up projections as one [2F, C] GEMM, then split.
    Value gu = linear(x, prefix + ".c_fc", c, 2 * f);
    Value gate = SliceOp::create(b, l, gu, b.getDenseI64ArrayAttr({0, 0, 0}),
                                 b.getDenseI64ArrayAttr({batch, seq, f}));
    Value up = SliceOp::create(b, l, gu, b.getDenseI64ArrayAttr({0, 0, f}),
                               b.getDenseI64ArrayAttr({batch, seq, f}));
    hidden = MulOp::create(b, l, SiluOp::create(b, l, gate), up);
    break;
  }
  case Activation::Gelu:
  case Activation::GeluExact: {
    auto approx = cfg.activation == Activation::Gelu ? GeluApproximation::Tanh
                                                     : GeluApproximation::None;
    hidden = GeluOp::create(b, l, linear(x, prefix + ".c_fc", c, f),
                            GeluApproximationAttr::get(b.getContext(), approx));
    break;
  }
  case Activation::Relu:
    hidden = ReluOp::create(b, l, linear(x, prefix + ".c_fc", c, f));
    break;
  }
  return linear(hidden, prefix + ".c_proj", f, c);
}

DictionaryAttr GptBuilder::configAttr() {
  SmallVector<NamedAttribute> fields = {
      b.getNamedAttr("name", b.getStringAttr(cfg.name)),
      b.getNamedAttr("n_layer", b.getI64IntegerAttr(cfg.nLayer)),
      b.getNamedAttr("n_head", b.getI64IntegerAttr(cfg.nHead)),
      b.getNamedAttr("n_embd", b.getI64IntegerAttr(cfg.nEmbd)),
      b.getNamedAttr("seq_len", b.getI64IntegerAttr(cfg.seqLen)),
      b.getNamedAttr("vocab_size", b.getI64IntegerAttr(cfg.vocabSize)),
      b.getNamedAttr("ffn_hidden", b.getI64IntegerAttr(cfg.ffnHidden)),
      b.getNamedAttr("activation",
                     b.getStringAttr(stringifyActivation(cfg.activation))),
      b.getNamedAttr("norm", b.getStringAttr(stringifyNorm(cfg.norm))),
      b.getNamedAttr("position",
                     b.getStringAttr(stringifyPosition(cfg.position))),
      b.getNamedAttr("tie_embeddings", b.getBoolAttr(cfg.tieEmbeddings)),
      b.getNamedAttr("bias", b.getBoolAttr(cfg.bias)),
      b.getNamedAttr("dropout", b.getF64FloatAttr(cfg.dropout)),
      b.getNamedAttr("norm_eps", b.getF64FloatAttr(cfg.normEps)),
      b.getNamedAttr("rope_theta", b.getF64FloatAttr(cfg.ropeTheta)),
      b.getNamedAttr("batch", b.getI64IntegerAttr(batch)),
  };
  return b.getDictionaryAttr(fields);
}

OwningOpRef<ModuleOp> GptBuilder::build() {
  int64_t c = cfg.nEmbd;
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc(cfg.name));
  module->getOperation()->setAttr("llmc.model", configAttr());

  // Build the body in a detached block first: the parameter list is only
  // known once every layer has asked for its weights.
  auto ids = RankedTensorType::get({batch, seq}, b.getI32Type());
  Block block;
  body = &block;
  b.setInsertionPointToEnd(body);

  Value wte = param("wte", {cfg.vocabSize, c});
  Value wpe = cfg.position == Position::Learned ? param("wpe", {cfg.seqLen, c})
                                                : Value();
  // tokens and targets end the signature; the final argument order is fixed
  // when the function is created below.
  Value tokens = body->addArgument(ids, loc("tokens"));
  Value targets = body->addArgument(ids, loc("targets"));

  Value x = EmbeddingOp::create(b, loc("wte"), wte, tokens);
  if (wpe) {
    Value pos =
        SliceOp::create(b, loc("wpe"), wpe, b.getDenseI64ArrayAttr({0, 0}),
                        b.getDenseI64ArrayAttr({seq, c}));
    x = AddOp::create(b, loc("wpe"), x, pos);
  }
  x = dropout(x);
  for (int64_t i = 0; i < cfg.nLayer; ++i) {
    std::string layer = ("h." + Twine(i)).str();
    Value a = attention(norm(x, layer + ".ln_1"), layer + ".attn");
    x = AddOp::create(b, loc(layer), x, dropout(a));
    Value m = mlp(norm(x, layer + ".ln_2"), layer + ".mlp");
    x = AddOp::create(b, loc(layer), x, dropout(m));
  }
  x = norm(x, "ln_f");
  Value classifier =
      cfg.tieEmbeddings ? wte : param("lm_head.weight", {cfg.vocabSize, c});
  Value logits = MatmulOp::create(b, loc("lm_head"), x, classifier,
                                  /*transpose_a=*/false, /*transpose_b=*/true);
  Value loss =
      CrossEntropyOp::create(b, loc("loss"), logits, targets).getLoss();
  func::ReturnOp::create(b, loc("loss"), ValueRange{loss, logits});

  // The signature: parameters in the order they were asked for, then tokens
  // and targets.
  SmallVector<Type> inputs;
  SmallVector<BlockArgument> params;
  for (BlockArgument arg : body->getArguments())
    if (arg != tokens && arg != targets)
      params.push_back(arg);
  for (BlockArgument arg : params)
    inputs.push_back(arg.getType());
  inputs.append({ids, ids});
  auto funcType =
      b.getFunctionType(inputs, {loss.getType(), logits.getType()});
  b.setInsertionPointToEnd(module->getBody());
  auto forward = func::FuncOp::create(b, loc("forward"), "forward", funcType);
  Block *entry = forward.addEntryBlock();
  for (auto [index, arg] : llvm::enumerate(params))
    arg.replaceAllUsesWith(entry->getArgument(index));
  tokens.replaceAllUsesWith(entry->getArgument(params.size()));
  targets.replaceAllUsesWith(entry->getArgument(params.size() + 1));
  entry->getOperations().splice(entry->end(), body->getOperations());

  for (auto [index, name] : llvm::enumerate(paramNames))
    forward.setArgAttr(index, "llmc.param", name);
  forward.setArgAttr(params.size(), "llmc.input", b.getStringAttr("tokens"));
  forward.setArgAttr(params.size() + 1, "llmc.input",
                     b.getStringAttr("targets"));
  return module;
}

} // namespace

llvm::Expected<OwningOpRef<ModuleOp>>
mlir::llmc::buildForwardModule(MLIRContext &context, const ModelConfig &config,
                               ForwardShape shape) {
  context.loadDialect<LlmcDialect, func::FuncDialect>();
  if (shape.seqLen == 0)
    shape.seqLen = config.seqLen;
  if (shape.batch < 1)
    return llvm::createStringError("batch size must be positive, got " +
                                   Twine(shape.batch));
  if (shape.seqLen < 1 || shape.seqLen > config.seqLen)
    return llvm::createStringError(
        "sequence length must be in [1, seq_len = " + Twine(config.seqLen) +
        "] of model '" + config.name + "', got " + Twine(shape.seqLen));
  OwningOpRef<ModuleOp> module = GptBuilder(context, config, shape).build();
  if (failed(verify(*module)))
    return llvm::createStringError("internal error: the IR built for model '" +
                                   config.name + "' does not verify");
  return module;
}
