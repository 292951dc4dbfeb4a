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
  DictionaryAttr configAttrFor() { return configAttr(); }
  /// Adds @`name`, an inference step over `seq` tokens per sequence with a
  /// KV cache of `cacheSlots` (see buildInferenceModule), to `module`.
  void buildInferenceStep(ModuleOp module, StringRef name,
                          int64_t cacheSlots);

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

  /// The transformer between the embeddings and the final norm.
  Value blocks(Value x);
  /// Makes @`name` of the body built in `body`: parameters in the order
  /// they were asked for, then `inputs` (llmc.input), then `states`
  /// (llmc.state); `results` named by `resultNames` (llmc.output), the
  /// last `states.size()` of them updating the states in order.
  func::FuncOp finish(ModuleOp module, StringRef name,
                      ArrayRef<std::pair<BlockArgument, StringRef>> inputs,
                      ArrayRef<std::pair<BlockArgument, std::string>> states,
                      ValueRange results, ArrayRef<StringRef> resultNames);
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
  // Inference steps: the tokens' positions [B, T] and, per layer, the
  // cache states asked for and the caches written.
  Value positions;
  int64_t cacheSlots = 0;
  SmallVector<std::pair<BlockArgument, std::string>> cacheStates;
  SmallVector<Value> cacheUpdates;
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
  if (cfg.dropout == 0.0 || positions) // inference: no dropout
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
    q = RotaryOp::create(b, l, q, positions, theta, /*inverse=*/UnitAttr());
    k = RotaryOp::create(b, l, k, positions, theta, /*inverse=*/UnitAttr());
  }
  if (positions) {
    // Inference: this step's keys and values join the layer's cache at
    // their positions, and the queries attend over the cache.
    auto cacheType = tensor({batch, h, cacheSlots, d});
    auto cached = [&](Value fresh, StringRef which) -> Value {
      std::string name = ("cache." + prefix + "." + which).str();
      BlockArgument state = body->addArgument(cacheType, loc(name));
      cacheStates.push_back({state, name});
      Value written = CacheWriteOp::create(b, l, cacheType, fresh, state,
                                           positions);
      cacheUpdates.push_back(written);
      return written;
    };
    k = cached(k, "k");
    v = cached(v, "v");
  }
  FloatAttr scale = b.getF32FloatAttr(1.0 / std::sqrt(double(d)));
  Value o = AttentionOp::create(b, l, q, k, v, positions, scale,
                                b.getUnitAttr())
                .getResult();
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

Value GptBuilder::blocks(Value x) {
  x = dropout(x);
  for (int64_t i = 0; i < cfg.nLayer; ++i) {
    std::string layer = ("h." + Twine(i)).str();
    Value a = attention(norm(x, layer + ".ln_1"), layer + ".attn");
    x = AddOp::create(b, loc(layer), x, dropout(a));
    Value m = mlp(norm(x, layer + ".ln_2"), layer + ".mlp");
    x = AddOp::create(b, loc(layer), x, dropout(m));
  }
  return x;
}

func::FuncOp GptBuilder::finish(
    ModuleOp module, StringRef name,
    ArrayRef<std::pair<BlockArgument, StringRef>> inputs,
    ArrayRef<std::pair<BlockArgument, std::string>> states, ValueRange results,
    ArrayRef<StringRef> resultNames) {
  func::ReturnOp::create(b, loc(name), results);
  // The signature: parameters in the order they were asked for, then the
  // inputs and the states.
  llvm::DenseSet<BlockArgument> named;
  for (auto &[arg, _] : inputs)
    named.insert(arg);
  for (auto &[arg, _] : states)
    named.insert(arg);
  SmallVector<BlockArgument> order;
  for (BlockArgument arg : body->getArguments())
    if (!named.contains(arg))
      order.push_back(arg);
  size_t numParams = order.size();
  for (auto &[arg, _] : inputs)
    order.push_back(arg);
  for (auto &[arg, _] : states)
    order.push_back(arg);
  SmallVector<Type> argTypes;
  for (BlockArgument arg : order)
    argTypes.push_back(arg.getType());
  auto funcType = b.getFunctionType(argTypes, results.getTypes());
  b.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(b, loc(name), name, funcType);
  Block *entry = func.addEntryBlock();
  for (auto [index, arg] : llvm::enumerate(order))
    arg.replaceAllUsesWith(entry->getArgument(index));
  entry->getOperations().splice(entry->end(), body->getOperations());

  for (auto [index, paramName] : llvm::enumerate(paramNames))
    func.setArgAttr(index, "llmc.param", paramName);
  for (auto [index, input] : llvm::enumerate(inputs))
    func.setArgAttr(numParams + index, "llmc.input",
                    b.getStringAttr(input.second));
  for (auto [index, state] : llvm::enumerate(states))
    func.setArgAttr(numParams + inputs.size() + index, "llmc.state",
                    b.getStringAttr(state.second));
  size_t firstUpdate = results.size() - states.size();
  for (auto [index, resultName] : llvm::enumerate(resultNames))
    func.setResultAttr(index, "llmc.output", b.getStringAttr(resultName));
  for (auto [index, state] : llvm::enumerate(states))
    func.setResultAttr(firstUpdate + index, "llmc.updates",
                       b.getStringAttr(state.second));
  return func;
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
  BlockArgument tokens = body->addArgument(ids, loc("tokens"));
  BlockArgument targets = body->addArgument(ids, loc("targets"));

  Value x = EmbeddingOp::create(b, loc("wte"), wte, tokens);
  if (wpe) {
    Value pos =
        SliceOp::create(b, loc("wpe"), wpe, b.getDenseI64ArrayAttr({0, 0}),
                        b.getDenseI64ArrayAttr({seq, c}));
    x = AddOp::create(b, loc("wpe"), x, pos);
  }
  x = norm(blocks(x), "ln_f");
  Value classifier =
      cfg.tieEmbeddings ? wte : param("lm_head.weight", {cfg.vocabSize, c});
  Value logits = MatmulOp::create(b, loc("lm_head"), x, classifier,
                                  /*transpose_a=*/false, /*transpose_b=*/true);
  Value loss =
      CrossEntropyOp::create(b, loc("loss"), logits, targets).getLoss();
  finish(*module, "forward", {{tokens, "tokens"}, {targets, "targets"}}, {},
         ValueRange{loss, logits}, {});
  return module;
}

void GptBuilder::buildInferenceStep(ModuleOp module, StringRef name,
                                    int64_t slots) {
  int64_t c = cfg.nEmbd;
  auto ids = RankedTensorType::get({batch, seq}, b.getI32Type());
  Block block;
  body = &block;
  b.setInsertionPointToEnd(body);
  paramNames.clear();
  cacheStates.clear();
  cacheUpdates.clear();
  cacheSlots = slots;

  Value wte = param("wte", {cfg.vocabSize, c});
  Value wpe = cfg.position == Position::Learned ? param("wpe", {cfg.seqLen, c})
                                                : Value();
  BlockArgument tokens = body->addArgument(ids, loc("tokens"));
  BlockArgument positionsArg = body->addArgument(ids, loc("positions"));
  positions = positionsArg;

  Value x = EmbeddingOp::create(b, loc("wte"), wte, tokens);
  if (wpe)
    x = AddOp::create(b, loc("wpe"), x,
                      EmbeddingOp::create(b, loc("wpe"), wpe, positions));
  x = blocks(x);
  // Only the last token's logits are wanted (the next token's
  // distribution): the final norm and the classifier run on that row alone.
  Value last = SliceOp::create(b, loc("ln_f"), x,
                               b.getDenseI64ArrayAttr({0, seq - 1, 0}),
                               b.getDenseI64ArrayAttr({batch, 1, c}));
  last = ReshapeOp::create(b, loc("ln_f"), tensor({batch, c}), last);
  last = norm(last, "ln_f");
  Value classifier =
      cfg.tieEmbeddings ? wte : param("lm_head.weight", {cfg.vocabSize, c});
  Value logits = MatmulOp::create(b, loc("lm_head"), last, classifier,
                                  /*transpose_a=*/false, /*transpose_b=*/true);
  SmallVector<Value> results = {logits};
  results.append(cacheUpdates.begin(), cacheUpdates.end());
  finish(module, name, {{tokens, "tokens"}, {positionsArg, "positions"}},
         cacheStates, results, {"logits"});
  positions = Value();
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

llvm::Expected<OwningOpRef<ModuleOp>>
mlir::llmc::buildInferenceModule(MLIRContext &context,
                                 const ModelConfig &config,
                                 InferenceShape shape) {
  context.loadDialect<LlmcDialect, func::FuncDialect>();
  if (shape.maxContext == 0)
    shape.maxContext = config.seqLen;
  if (shape.batch < 1)
    return llvm::createStringError("batch size must be positive, got " +
                                   Twine(shape.batch));
  if (shape.maxContext < 1 || shape.maxContext > config.seqLen)
    return llvm::createStringError(
        "max context must be in [1, seq_len = " + Twine(config.seqLen) +
        "] of model '" + config.name + "', got " + Twine(shape.maxContext));
  if (shape.prefillTokens < 1 || shape.prefillTokens > shape.maxContext)
    return llvm::createStringError(
        "prefill chunk must be in [1, max context = " +
        Twine(shape.maxContext) + "], got " + Twine(shape.prefillTokens));
  OwningOpRef<ModuleOp> module = ModuleOp::create(NameLoc::get(
      StringAttr::get(&context, config.name)));
  GptBuilder prefill(context, config, {shape.batch, shape.prefillTokens});
  module->getOperation()->setAttr("llmc.model", prefill.configAttrFor());
  prefill.buildInferenceStep(*module, "prefill", shape.maxContext);
  GptBuilder decode(context, config, {shape.batch, 1});
  decode.buildInferenceStep(*module, "decode", shape.maxContext);
  if (failed(verify(*module)))
    return llvm::createStringError("internal error: the inference IR built "
                                   "for model '" +
                                   config.name + "' does not verify");
  return module;
}
