// Tests of the artifact format: a program using every field round trips
// through a file unchanged, and damaged, foreign, mismatched or invalid files
// are refused with a message naming the file and the problem.
#include "ir/kernel/Artifact.h"

#include "ir/kernel/llmc_artifact_generated.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <csignal>
#include <cstring>
#include <iterator>
#include <random>
#include <sys/resource.h>

using namespace llmc;
using namespace llmc::kir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

//===----------------------------------------------------------------------===//
// A program that uses every field
//===----------------------------------------------------------------------===//

/// Appends instructions to a kernel body and returns their value numbers.
struct Body {
  kir::Kernel &kernel;

  int32_t add(kir::Op op, kir::DType type, std::vector<int32_t> args = {}) {
    kir::Instr instr;
    instr.op = op;
    instr.type = type;
    instr.args = std::move(args);
    kernel.body.push_back(instr);
    return int32_t(kernel.body.size() - 1);
  }
  int32_t load(int32_t operand, kir::DType type,
               std::vector<int32_t> overrides = {}) {
    int32_t value = add(kir::Op::Load, type, std::move(overrides));
    kernel.body.back().operand = operand;
    return value;
  }
  int32_t constant(double imm, kir::DType type) {
    int32_t value = add(kir::Op::Const, type);
    kernel.body.back().imm = imm;
    return value;
  }
  int32_t index(int32_t dim) {
    int32_t value = add(kir::Op::Index, kir::DType::I64);
    kernel.body.back().dim = dim;
    return value;
  }
  void store(int32_t value, int32_t operand) {
    add(kir::Op::Store, kir::DType::F32, {value});
    kernel.body.back().operand = operand;
  }
};

kir::Buffer buffer(std::string name, kir::BufferKind kind, kir::DType dtype,
                   std::vector<int64_t> shape, int64_t offset = 0,
                   int32_t firstStep = 0, int32_t lastStep = 0) {
  kir::Buffer b;
  b.name = std::move(name);
  b.kind = kind;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.offset = offset;
  b.firstStep = firstStep;
  b.lastStep = lastStep;
  return b;
}

kir::Access access(int32_t buffer, kir::DType dtype,
                   std::vector<int64_t> strides, int64_t offset = 0) {
  kir::Access a;
  a.buffer = buffer;
  a.dtype = dtype;
  a.offset = offset;
  a.strides = std::move(strides);
  return a;
}

kir::View view(int32_t buffer, int64_t offset, std::vector<int64_t> strides) {
  kir::View v;
  v.buffer = buffer;
  v.offset = offset;
  v.strides = std::move(strides);
  return v;
}

// Buffer indices of the sample program.
enum : int32_t {
  kWte,
  kLnW,
  kTokens,
  kMask,
  kFlags,
  kX,
  kH,
  kRowSum,
  kQkv,
  kAtt,
  kLse,
  kLogits,
  kGradWte,
  kDqkv
};

/// An embedding kernel that runs every instruction kind, a GEMM with an
/// epilogue, an attention step and the two gradient steps; buffers of every
/// kind and element type.
kir::Program makeProgram() {
  using kir::BufferKind;
  using kir::DType;
  using kir::Op;
  kir::Program p;
  p.function = "forward";
  p.modelJson = "{\"n_layer\": 2, \"name\": \"tiny \\\"gpt\\\" \xc3\xa9\",\n"
                " \"vocab_size\": 16}";
  p.buffers = {
      buffer("wte", BufferKind::Param, DType::F32, {16, 8}),
      buffer("ln_w", BufferKind::Param, DType::BF16, {8}),
      buffer("tokens", BufferKind::Input, DType::I32, {2, 4}),
      buffer("mask", BufferKind::Input, DType::I64, {2, 4}),
      buffer("flags", BufferKind::Input, DType::I1, {4}),
      buffer("x", BufferKind::Arena, DType::F32, {2, 4, 8}, 0, 0, 1),
      buffer("h", BufferKind::Arena, DType::F16, {2, 4, 8}, 256, 0, 2),
      buffer("row_sum", BufferKind::Arena, DType::F32, {2, 4}, 384, 0, 2),
      buffer("qkv", BufferKind::Arena, DType::F32, {2, 4, 24}, 448, 0, 2),
      buffer("att", BufferKind::Arena, DType::F32, {2, 4, 8}, 1216, 2, 2),
      buffer("lse", BufferKind::Arena, DType::F32, {2, 2, 4}, 1472, 2, 2),
      buffer("logits", BufferKind::Arena, DType::F32, {2, 4, 16}, 1536, 1, 2),
      buffer("grad.wte", BufferKind::State, DType::F32, {16, 8}),
      buffer("dqkv", BufferKind::Arena, DType::F32, {2, 4, 24}, 2048, 3, 3),
  };
  p.buffers[kTokens].idBound = 16;
  p.buffers[kGradWte].initialValue = 65536.0;
  p.arenaBytes = 2816;
  p.params = {{"wte", kWte}, {"ln_w", kLnW}};
  p.inputs = {{"tokens", kTokens}, {"mask", kMask}, {"flags", kFlags}};
  p.outputs = {{"logits", kLogits}, {"lse", kLse}};
  p.states = {{"grad.wte", kGradWte}};
  p.updates = {{"grad.wte", kGradWte}};

  // embed, domain [batch 2, seq 4, channels 8]:
  // x[b,t,c] = f(wte[tokens[b,t], c], ln_w[c], mask[b,t]) and h = x in f16.
  kir::Kernel embed;
  embed.name = "embed";
  embed.origin = "llmc.embedding, llmc.layer_norm";
  embed.domain = {2, 4, 8};
  embed.operands = {
      access(kTokens, DType::I32, {4, 1, 0}), // 0, row-level
      access(kWte, DType::F32, {8, 0, 1}),    // 1, dim 0 overridden
      access(kLnW, DType::BF16, {0, 0, 1}),   // 2
      access(kX, DType::F32, {32, 8, 1}),     // 3
      access(kH, DType::F16, {32, 8, 1}),     // 4
      access(kMask, DType::I64, {4, 1, 0}),   // 5, row-level
      access(kRowSum, DType::F32, {4, 1, 0}), // 6, row-level store
  };
  Body e{embed};
  int32_t token = e.load(0, DType::I64);
  int32_t w = e.load(1, DType::F32, {token, -1, -1});
  int32_t gamma = e.load(2, DType::F32);
  int32_t c = e.index(2);
  int32_t two = e.constant(2, DType::I64);
  int32_t rem = e.add(Op::Rem, DType::I64, {c, two});
  int32_t zero = e.constant(0, DType::I64);
  int32_t even = e.add(Op::CmpEq, DType::I1, {rem, zero});
  int32_t cf = e.add(Op::IToF, DType::F32, {c});
  int32_t half = e.constant(0.1, DType::F32);
  int32_t scaled = e.add(Op::Mul, DType::F32, {cf, half});
  int32_t v = e.add(Op::Select, DType::F32, {even, scaled, w});
  v = e.add(Op::Abs, DType::F32, {v});
  int32_t positive = e.add(Op::Add, DType::F32, {v, half});
  v = e.add(Op::Log, DType::F32, {positive});
  v = e.add(Op::Exp, DType::F32, {v});
  v = e.add(Op::Sqrt, DType::F32, {v});
  v = e.add(Op::Rsqrt, DType::F32, {v});
  v = e.add(Op::Tanh, DType::F32, {v});
  v = e.add(Op::Erf, DType::F32, {v});
  v = e.add(Op::Sin, DType::F32, {v});
  v = e.add(Op::Cos, DType::F32, {v});
  v = e.add(Op::Neg, DType::F32, {v});
  v = e.add(Op::Sub, DType::F32, {v, gamma});
  v = e.add(Op::Div, DType::F32, {v, positive});
  v = e.add(Op::Max, DType::F32, {v, half});
  int32_t clipped = e.add(Op::Min, DType::F32, {v, w});
  int32_t less = e.add(Op::CmpLt, DType::I1, {clipped, half});
  int32_t early = e.add(Op::CmpLe, DType::I1, {c, two});
  v = e.add(Op::Select, DType::F32, {less, clipped, gamma});
  v = e.add(Op::Select, DType::F32, {early, v, clipped});
  int32_t sum = e.add(Op::ReduceSum, DType::F32, {v});
  int32_t max = e.add(Op::ReduceMax, DType::F32, {v});
  int32_t mask = e.load(5, DType::I64);
  int32_t maskF = e.add(Op::IToF, DType::F32, {mask});
  int32_t rowValue = e.add(Op::Mul, DType::F32, {sum, maskF});
  v = e.add(Op::Sub, DType::F32, {v, max});
  v = e.add(Op::Add, DType::F32, {v, rowValue});
  int32_t t = e.index(1);
  int32_t big = e.constant(double(int64_t(1) << 40), DType::I64);
  int32_t tBig = e.add(Op::Add, DType::I64, {t, big});
  int32_t tSmall = e.add(Op::Rem, DType::I64, {tBig, two});
  int32_t wAgain = e.load(1, DType::F32, {token, tSmall, c});
  v = e.add(Op::Add, DType::F32, {v, wAgain});
  int32_t random = e.add(Op::Random, DType::F32, {mask, tBig, c});
  v = e.add(Op::Add, DType::F32, {v, random});
  e.store(v, 3);
  e.store(v, 4);
  e.store(rowValue, 6);

  // gelu-ish epilogue on the GEMM's C, domain [batch 1, m 8, n 16].
  kir::Kernel epilogue;
  epilogue.name = "logits_epilogue";
  epilogue.domain = {1, 8, 16};
  epilogue.operands = {access(kLogits, DType::F32, {0, 16, 1})};
  Body g{epilogue};
  int32_t y = g.load(0, DType::F32);
  int32_t k = g.constant(0.7978845608028654, DType::F32);
  int32_t t2 =
      g.add(Op::Tanh, DType::F32, {g.add(Op::Mul, DType::F32, {y, k})});
  g.store(g.add(Op::Add, DType::F32, {y, t2}), 0);

  p.kernels = {embed, epilogue};

  kir::Step embedStep;
  embedStep.kind = kir::StepKind::Kernel;
  embedStep.kernel = 0;
  embedStep.origin = embed.origin;

  // logits[8, 16] = x[8, 8] x wte^T, both operands stored transposed.
  kir::Step gemm;
  gemm.kind = kir::StepKind::Gemm;
  gemm.gemm.batch = 1;
  gemm.gemm.m = 8;
  gemm.gemm.n = 16;
  gemm.gemm.k = 8;
  gemm.gemm.transA = true;
  gemm.gemm.transB = true;
  gemm.gemm.a = view(kX, 0, {0, 8, 1});
  gemm.gemm.b = view(kWte, 0, {0, 8, 1});
  gemm.gemm.c = view(kLogits, 0, {0, 16, 1});
  gemm.gemm.epilogue = 1;
  gemm.gemm.epilogueKind = kir::EpilogueKind::Gelu;
  gemm.gemm.sparseWeight = true; // B (wte) is an f32 [N, K] parameter
  gemm.origin = "llmc.matmul";

  // q, k, v interleaved in qkv [2, 4, 3 * 2 heads * 4].
  kir::Step attention;
  attention.kind = kir::StepKind::Attention;
  kir::AttentionStep &a = attention.attention;
  a.batch = 2;
  a.heads = 2;
  a.seq = 4;
  a.headDim = 4;
  a.scale = 0.3f;
  a.causal = false;
  a.q = view(kQkv, 0, {96, 4, 24, 1});
  a.k = view(kQkv, 8, {96, 4, 24, 1});
  a.v = view(kQkv, 16, {96, 4, 24, 1});
  a.out = view(kAtt, 0, {32, 4, 8, 1});
  a.lse = view(kLse, 0, {8, 4, 1});

  // The gradients of that attention into dqkv, laid out like qkv.
  kir::Step attentionGrad;
  attentionGrad.kind = kir::StepKind::AttentionGrad;
  kir::AttentionGradStep &ag = attentionGrad.attentionGrad;
  ag.batch = 2;
  ag.heads = 2;
  ag.seq = 4;
  ag.headDim = 4;
  ag.scale = 0.3f;
  ag.causal = false;
  ag.dout = view(kAtt, 0, {32, 4, 8, 1});
  ag.q = view(kQkv, 0, {96, 4, 24, 1});
  ag.k = view(kQkv, 8, {96, 4, 24, 1});
  ag.v = view(kQkv, 16, {96, 4, 24, 1});
  ag.out = view(kAtt, 0, {32, 4, 8, 1});
  ag.lse = view(kLse, 0, {8, 4, 1});
  ag.dq = view(kDqkv, 0, {96, 4, 24, 1});
  ag.dk = view(kDqkv, 8, {96, 4, 24, 1});
  ag.dv = view(kDqkv, 16, {96, 4, 24, 1});
  attentionGrad.origin = "llmc.attention_grad";

  // grad.wte[16, 8] from x [8 positions, 8] by the tokens.
  kir::Step embeddingGrad;
  embeddingGrad.kind = kir::StepKind::EmbeddingGrad;
  kir::EmbeddingGradStep &eg = embeddingGrad.embeddingGrad;
  eg.positions = 8;
  eg.rows = 16;
  eg.channels = 8;
  eg.ids = view(kTokens, 0, {1});
  eg.grad = view(kX, 0, {8, 1});
  eg.out = view(kGradWte, 0, {8, 1});
  eg.accumulate = true;
  embeddingGrad.origin = "llmc.embedding_grad";

  // A reduce-scatter (avg) of the logits over 2 ranks of "tp" into the
  // first 64 elements of dqkv, issued and then completed. Every field has
  // a non-default value (root too, which a reduce-scatter does not read).
  kir::Step collective;
  collective.kind = kir::StepKind::CollectiveStart;
  kir::CollectiveStep &rs = collective.collective;
  rs.kind = kir::CollectiveKind::ReduceScatter;
  rs.reduction = kir::Reduction::Avg;
  rs.axis = "tp";
  rs.axisSize = 2;
  rs.root = 1;
  rs.count = 128;
  rs.input = view(kLogits, 0, {1});
  rs.output = view(kDqkv, 0, {1});
  collective.origin = "llmc.reduce_scatter";
  kir::Step wait = collective;
  wait.kind = kir::StepKind::CollectiveWait;
  wait.collective.start = 5;

  p.steps = {embedStep,     gemm,       attention, attentionGrad,
             embeddingGrad, collective, wait};
  return p;
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

// The comparisons take the expected side apart with structured bindings,
// which stop compiling when a kir struct gains a field: give the field a
// non-default value in makeProgram() and compare it here.

void expectSameView(const kir::View &x, const kir::View &y,
                    const std::string &what) {
  SCOPED_TRACE(what);
  const auto &[buffer, offset, strides] = x;
  EXPECT_EQ(buffer, y.buffer);
  EXPECT_EQ(offset, y.offset);
  EXPECT_EQ(strides, y.strides);
}

void expectSameBindings(const std::vector<kir::Binding> &x,
                        const std::vector<kir::Binding> &y) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const auto &[name, buffer, scalar] = x[i];
    EXPECT_EQ(name, y[i].name);
    EXPECT_EQ(buffer, y[i].buffer);
    EXPECT_EQ(scalar, y[i].scalar) << name;
  }
}

void expectSameBuffer(const kir::Buffer &x, const kir::Buffer &y) {
  const auto &[name, kind, dtype, shape, offset, firstStep, lastStep, idBound,
                initialValue] = x;
  EXPECT_EQ(name, y.name);
  EXPECT_EQ(kind, y.kind);
  EXPECT_EQ(dtype, y.dtype);
  EXPECT_EQ(shape, y.shape);
  EXPECT_EQ(offset, y.offset);
  EXPECT_EQ(firstStep, y.firstStep);
  EXPECT_EQ(lastStep, y.lastStep);
  EXPECT_EQ(idBound, y.idBound);
  EXPECT_EQ(initialValue, y.initialValue);
}

void expectSameKernel(const kir::Kernel &x, const kir::Kernel &y) {
  const auto &[name, origin, domain, operands, body] = x;
  EXPECT_EQ(name, y.name);
  EXPECT_EQ(origin, y.origin);
  EXPECT_EQ(domain, y.domain);
  ASSERT_EQ(operands.size(), y.operands.size());
  for (size_t n = 0; n < operands.size(); ++n) {
    SCOPED_TRACE("operand " + std::to_string(n));
    const auto &[buffer, dtype, offset, strides] = operands[n];
    EXPECT_EQ(buffer, y.operands[n].buffer);
    EXPECT_EQ(dtype, y.operands[n].dtype);
    EXPECT_EQ(offset, y.operands[n].offset);
    EXPECT_EQ(strides, y.operands[n].strides);
  }
  ASSERT_EQ(body.size(), y.body.size());
  for (size_t n = 0; n < body.size(); ++n) {
    SCOPED_TRACE("instruction %" + std::to_string(n));
    const auto &[op, type, args, operand, dim, imm] = body[n];
    EXPECT_EQ(op, y.body[n].op);
    EXPECT_EQ(type, y.body[n].type);
    EXPECT_EQ(args, y.body[n].args);
    EXPECT_EQ(operand, y.body[n].operand);
    EXPECT_EQ(dim, y.body[n].dim);
    EXPECT_EQ(imm, y.body[n].imm);
  }
}

/// A step's payloads other than its kind's are not stored; the sample
/// leaves them at their defaults, so they compare too.
void expectSameStep(const kir::Step &x, const kir::Step &y) {
  const auto &[kind, kernel, gemm, attention, attentionGrad, embeddingGrad,
               collective, origin] = x;
  EXPECT_EQ(kind, y.kind);
  EXPECT_EQ(kernel, y.kernel);
  EXPECT_EQ(origin, y.origin);
  {
    const auto &[batch, m, n, k, transA, transB, a, b, c, epilogue,
                 accumulate, epilogueKind, epilogueBias, epilogueAux,
                 sparseWeight] = gemm;
    const kir::GemmStep &h = y.gemm;
    EXPECT_EQ(batch, h.batch);
    EXPECT_EQ(m, h.m);
    EXPECT_EQ(n, h.n);
    EXPECT_EQ(k, h.k);
    EXPECT_EQ(transA, h.transA);
    EXPECT_EQ(transB, h.transB);
    expectSameView(a, h.a, "gemm A");
    expectSameView(b, h.b, "gemm B");
    expectSameView(c, h.c, "gemm C");
    EXPECT_EQ(epilogue, h.epilogue);
    EXPECT_EQ(accumulate, h.accumulate);
    EXPECT_EQ(epilogueKind, h.epilogueKind);
    expectSameView(epilogueBias, h.epilogueBias, "gemm epilogue bias");
    expectSameView(epilogueAux, h.epilogueAux, "gemm epilogue aux");
    EXPECT_EQ(sparseWeight, h.sparseWeight);
  }
  {
    const auto &[batch, heads, seq, headDim, scale, causal, q, k, v, out, lse,
                 kvSeq, positions] = attention;
    const kir::AttentionStep &t = y.attention;
    EXPECT_EQ(attention.keys(), t.keys());
    expectSameView(positions, t.positions, "attention positions");
    EXPECT_EQ(batch, t.batch);
    EXPECT_EQ(heads, t.heads);
    EXPECT_EQ(seq, t.seq);
    EXPECT_EQ(headDim, t.headDim);
    EXPECT_EQ(scale, t.scale);
    EXPECT_EQ(causal, t.causal);
    expectSameView(q, t.q, "attention q");
    expectSameView(k, t.k, "attention k");
    expectSameView(v, t.v, "attention v");
    expectSameView(out, t.out, "attention out");
    expectSameView(lse, t.lse, "attention lse");
  }
  {
    const auto &[batch, heads, seq, headDim, scale, causal, dout, q, k, v, out,
                 lse, dq, dk, dv] = attentionGrad;
    const kir::AttentionGradStep &t = y.attentionGrad;
    EXPECT_EQ(batch, t.batch);
    EXPECT_EQ(heads, t.heads);
    EXPECT_EQ(seq, t.seq);
    EXPECT_EQ(headDim, t.headDim);
    EXPECT_EQ(scale, t.scale);
    EXPECT_EQ(causal, t.causal);
    expectSameView(dout, t.dout, "attention_grad dout");
    expectSameView(q, t.q, "attention_grad q");
    expectSameView(k, t.k, "attention_grad k");
    expectSameView(v, t.v, "attention_grad v");
    expectSameView(out, t.out, "attention_grad out");
    expectSameView(lse, t.lse, "attention_grad lse");
    expectSameView(dq, t.dq, "attention_grad dq");
    expectSameView(dk, t.dk, "attention_grad dk");
    expectSameView(dv, t.dv, "attention_grad dv");
  }
  {
    const auto &[positions, rows, channels, ids, grad, out, accumulate] =
        embeddingGrad;
    const kir::EmbeddingGradStep &t = y.embeddingGrad;
    EXPECT_EQ(positions, t.positions);
    EXPECT_EQ(rows, t.rows);
    EXPECT_EQ(channels, t.channels);
    expectSameView(ids, t.ids, "embedding_grad ids");
    expectSameView(grad, t.grad, "embedding_grad grad");
    expectSameView(out, t.out, "embedding_grad out");
    EXPECT_EQ(accumulate, t.accumulate);
  }
  {
    const auto &[collectiveKind, reduction, axis, axisSize, root, count, input,
                 output, start] = collective;
    const kir::CollectiveStep &t = y.collective;
    EXPECT_EQ(collectiveKind, t.kind);
    EXPECT_EQ(reduction, t.reduction);
    EXPECT_EQ(axis, t.axis);
    EXPECT_EQ(axisSize, t.axisSize);
    EXPECT_EQ(root, t.root);
    EXPECT_EQ(count, t.count);
    expectSameView(input, t.input, "collective input");
    expectSameView(output, t.output, "collective output");
    EXPECT_EQ(start, t.start);
  }
}

void expectSameProgram(const kir::Program &x, const kir::Program &y) {
  const auto &[function, modelJson, params, inputs, outputs, states, updates,
               buffers, kernels, steps, arenaBytes, adamBetas] = x;
  EXPECT_EQ(function, y.function);
  EXPECT_EQ(adamBetas, y.adamBetas);
  EXPECT_EQ(modelJson, y.modelJson);
  EXPECT_EQ(arenaBytes, y.arenaBytes);
  expectSameBindings(params, y.params);
  expectSameBindings(inputs, y.inputs);
  expectSameBindings(outputs, y.outputs);
  expectSameBindings(states, y.states);
  expectSameBindings(updates, y.updates);
  ASSERT_EQ(buffers.size(), y.buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    SCOPED_TRACE("buffer " + std::to_string(i));
    expectSameBuffer(buffers[i], y.buffers[i]);
  }
  ASSERT_EQ(kernels.size(), y.kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    SCOPED_TRACE("kernel " + std::to_string(i));
    expectSameKernel(kernels[i], y.kernels[i]);
  }
  ASSERT_EQ(steps.size(), y.steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    expectSameStep(steps[i], y.steps[i]);
  }
}

std::string printed(const kir::Program &program) {
  std::string text;
  llvm::raw_string_ostream os(text);
  kir::printProgram(os, program);
  return text;
}

//===----------------------------------------------------------------------===//
// Byte-level helpers
//===----------------------------------------------------------------------===//

/// Recomputes the checksum as llmc_artifact.fbs defines it (XXH3-64 of the
/// file with the checksum field zeroed), independently of the writer, so a
/// test can change a field and still get past the checksum.
void reseal(std::vector<uint8_t> &bytes) {
  fb::Artifact *artifact = fb::GetMutableSizePrefixedArtifact(bytes.data());
  ASSERT_TRUE(artifact->mutate_checksum(0));
  artifact->mutate_checksum(llvm::xxh3_64bits(bytes));
}

fb::ProgramDef *nestedProgram(std::vector<uint8_t> &bytes) {
  fb::Artifact *artifact = fb::GetMutableSizePrefixedArtifact(bytes.data());
  return flatbuffers::GetMutableRoot<fb::ProgramDef>(
      artifact->mutable_program()->data());
}

std::string messageOf(llvm::Error error) {
  return error ? llvm::toString(std::move(error)) : "";
}

std::string errorOf(llvm::Expected<kir::Program> result) {
  if (result)
    return "";
  return llvm::toString(result.takeError());
}

class ArtifactTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(
        llvm::sys::fs::createUniqueDirectory("llmc-artifact-test", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void writeBytes(llvm::StringRef file, llvm::ArrayRef<uint8_t> bytes) {
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    ASSERT_FALSE(ec) << ec.message();
    os.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  }
  std::string contents(llvm::StringRef file) {
    auto buffer = llvm::MemoryBuffer::getFile(file);
    return buffer ? (*buffer)->getBuffer().str() : "<unreadable>";
  }
  /// The names in `directory`, sorted.
  std::vector<std::string> entries(llvm::StringRef directory) {
    std::vector<std::string> names;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(directory, ec), end;
         !ec && it != end; it.increment(ec))
      names.push_back(llvm::sys::path::filename(it->path()).str());
    std::sort(names.begin(), names.end());
    return names;
  }

  llvm::SmallString<128> dir;
};

//===----------------------------------------------------------------------===//
// Round trips
//===----------------------------------------------------------------------===//

TEST_F(ArtifactTest, SampleProgramIsValid) {
  EXPECT_EQ(kir::verifyProgram(makeProgram()), "");
}

TEST_F(ArtifactTest, RoundTripThroughFile) {
  kir::Program program = makeProgram();
  std::string file = path("model.llmc");
  ASSERT_EQ(messageOf(writeArtifact(file, program)), "");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"model.llmc"});

  llvm::Expected<kir::Program> read = readArtifact(file);
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  expectSameProgram(program, *read);
  EXPECT_EQ(printed(program), printed(*read));
}

TEST_F(ArtifactTest, FileLayout) {
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  ASSERT_GT(bytes.size(), 12u);
  // Size prefix, then the identifier after the root offset.
  uint32_t size = bytes[0] | bytes[1] << 8 | bytes[2] << 16 | bytes[3] << 24;
  EXPECT_EQ(size + 4, bytes.size());
  EXPECT_EQ(std::string(bytes.begin() + 8, bytes.begin() + 12), "LLMC");
  EXPECT_TRUE(fb::SizePrefixedArtifactBufferHasIdentifier(bytes.data()));
  EXPECT_STREQ(fb::ArtifactExtension(), "llmc");
  const fb::Artifact *artifact = fb::GetSizePrefixedArtifact(bytes.data());
  EXPECT_EQ(artifact->format_version(), kArtifactFormatVersion);
  // The nested program is 8-byte aligned within the file.
  EXPECT_EQ((artifact->program()->data() - bytes.data()) % 8, 0);
  // The checksum follows the schema's definition.
  std::vector<uint8_t> copy = bytes;
  reseal(copy);
  EXPECT_EQ(copy, bytes);
}

TEST_F(ArtifactTest, SerializationIsDeterministic) {
  kir::Program program = makeProgram();
  std::vector<uint8_t> bytes = serializeProgram(program);
  EXPECT_EQ(bytes, serializeProgram(program));
  llvm::Expected<kir::Program> read = deserializeProgram(bytes);
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_EQ(serializeProgram(*read), bytes);
}

TEST_F(ArtifactTest, EmptyProgramRoundTrips) {
  kir::Program program;
  llvm::Expected<kir::Program> read =
      deserializeProgram(serializeProgram(program));
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  expectSameProgram(program, *read);
}

TEST_F(ArtifactTest, OverwritesAnExistingArtifact) {
  std::string file = path("model.llmc");
  writeBytes(file, {'o', 'l', 'd'});
  kir::Program program = makeProgram();
  ASSERT_EQ(messageOf(writeArtifact(file, program)), "");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"model.llmc"});
  llvm::Expected<kir::Program> read = readArtifact(file);
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_EQ(printed(program), printed(*read));
}

TEST_F(ArtifactTest, SchemaEnumNamesMatchKir) {
  // Artifact.cpp checks the values at compile time; this checks the names
  // line up too (kir "reduce_sum" and schema "ReduceSum").
  auto normalize = [](std::string name) {
    std::string out;
    for (char c : name)
      if (c != '_')
        out += char(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  for (int op = 0; op <= int(kir::Op::Store); ++op)
    EXPECT_EQ(normalize(fb::EnumNameOp(fb::Op(op))),
              normalize(kir::opName(kir::Op(op))));
  for (int type = 0; type <= int(kir::DType::I1); ++type)
    EXPECT_EQ(normalize(fb::EnumNameDType(fb::DType(type))),
              normalize(kir::dtypeName(kir::DType(type))));
}

//===----------------------------------------------------------------------===//
// Damaged and foreign files
//===----------------------------------------------------------------------===//

TEST_F(ArtifactTest, MissingFile) {
  std::string file = path("absent.llmc");
  std::string error = errorOf(readArtifact(file));
  EXPECT_THAT(error, StartsWith(file + ": cannot read"));
  EXPECT_THAT(error, HasSubstr("No such file"));
}

TEST_F(ArtifactTest, EmptyFile) {
  std::string file = path("empty.llmc");
  writeBytes(file, {});
  EXPECT_THAT(errorOf(readArtifact(file)),
              StartsWith(file + ": the file is empty, not an llmc artifact"));
}

TEST_F(ArtifactTest, TruncatedFiles) {
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  std::string file = path("cut.llmc");
  for (size_t length : {size_t(1), size_t(11), size_t(12), size_t(40),
                        bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE("length " + std::to_string(length));
    writeBytes(file, llvm::ArrayRef(bytes).take_front(length));
    std::string error = errorOf(readArtifact(file));
    EXPECT_THAT(error, StartsWith(file + ": truncated"));
  }
  // Every other length too, in memory.
  for (size_t length = 1; length < bytes.size(); ++length) {
    std::string error = errorOf(
        deserializeProgram(llvm::ArrayRef(bytes).take_front(length), "cut"));
    EXPECT_THAT(error, StartsWith("cut: truncated")) << "length " << length;
  }
}

TEST_F(ArtifactTest, TrailingBytes) {
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  bytes.push_back(0);
  EXPECT_THAT(errorOf(deserializeProgram(bytes, "long")),
              StartsWith("long: corrupt: the file has"));
}

TEST_F(ArtifactTest, WrongIdentifier) {
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  std::memcpy(bytes.data() + 8, "ABC\x01", 4);
  std::string file = path("other.bin");
  writeBytes(file, bytes);
  EXPECT_EQ(errorOf(readArtifact(file)),
            file + ": not an llmc artifact: bytes 8-11 are \"ABC\\01\", an "
                   "artifact has \"LLMC\"");

  std::string text = "a text file, certainly not an artifact\n";
  writeBytes(file, llvm::arrayRefFromStringRef(text));
  EXPECT_THAT(errorOf(readArtifact(file)),
              StartsWith(file + ": not an llmc artifact"));
}

TEST_F(ArtifactTest, EveryFlippedByteIsDetected) {
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  const fb::Artifact *artifact = fb::GetSizePrefixedArtifact(bytes.data());
  size_t programBegin = artifact->program()->data() - bytes.data();
  size_t programEnd = programBegin + artifact->program()->size();
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> damaged = bytes;
      damaged[at] ^= mask;
      std::string error = errorOf(deserializeProgram(damaged, "flipped"));
      ASSERT_THAT(error, StartsWith("flipped: "))
          << "byte " << at << " ^ " << int(mask) << " went undetected";
      // The program bytes are only ever looked at after the checksum.
      if (at >= programBegin && at < programEnd) {
        EXPECT_THAT(error, HasSubstr("checksum mismatch"))
            << "byte " << at << " ^ " << int(mask);
      }
    }
  }
  // One through a file, for the message.
  std::vector<uint8_t> damaged = bytes;
  damaged[(programBegin + programEnd) / 2] ^= 0x10;
  std::string file = path("flipped.llmc");
  writeBytes(file, damaged);
  EXPECT_THAT(errorOf(readArtifact(file)),
              ::testing::MatchesRegex(".*flipped.llmc: checksum mismatch "
                                      "\\(stored 0x[0-9a-f]{16}, computed "
                                      "0x[0-9a-f]{16}\\): the file is "
                                      "damaged"));
}

TEST_F(ArtifactTest, SealedRandomDamageNeverCrashes) {
  // Damage the checksum does not catch (a crafted file): whatever the
  // FlatBuffers verifier, the enum checks and kir::verifyProgram let
  // through must be safe to use.
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  const fb::Artifact *artifact = fb::GetSizePrefixedArtifact(bytes.data());
  size_t programBegin = artifact->program()->data() - bytes.data();
  size_t programSize = artifact->program()->size();
  std::mt19937 random(1234);
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> damaged = bytes;
    for (int n = 1 + round % 4; n > 0; --n)
      damaged[programBegin + random() % programSize] ^=
          uint8_t(1 + random() % 255);
    reseal(damaged);
    llvm::Expected<kir::Program> read = deserializeProgram(damaged, "sealed");
    if (!read) {
      EXPECT_THAT(llvm::toString(read.takeError()), StartsWith("sealed: "));
      continue;
    }
    ++accepted;
    printed(*read);
  }
  // Most damage to string and number bytes still gives a valid program.
  EXPECT_GT(accepted, 0);
}

TEST_F(ArtifactTest, RandomFieldValuesNeverCrash) {
  // Well-formed FlatBuffers with nonsense in the indices and extents: the
  // checks before and in kir::verifyProgram must refuse them cleanly.
  std::mt19937_64 random(99);
  const int64_t extremes[] = {
      -1, 0, 1, 3, 1000, INT32_MAX, INT64_MAX, INT64_MIN, int64_t(1) << 40};
  auto pick = [&](int64_t small) -> int64_t {
    return random() % 3 ? int64_t(random() % (small + 4)) - 2
                        : extremes[random() % std::size(extremes)];
  };
  int accepted = 0;
  for (int round = 0; round < 5000; ++round) {
    kir::Program program = makeProgram();
    kir::Kernel &kernel = program.kernels[random() % 2];
    kir::Instr &instr = kernel.body[random() % kernel.body.size()];
    switch (random() % 8) {
    case 0:
      instr.args.resize(random() % 4);
      for (int32_t &arg : instr.args)
        arg = int32_t(pick(kernel.body.size()));
      break;
    case 1:
      instr.operand = int32_t(pick(kernel.operands.size()));
      break;
    case 2:
      instr.dim = int32_t(pick(3));
      break;
    case 3:
      kernel.domain[random() % kernel.domain.size()] = pick(8);
      break;
    case 4: {
      kir::Access &access = kernel.operands[random() % kernel.operands.size()];
      access.strides[random() % access.strides.size()] = pick(64);
      access.buffer = random() % 2 ? access.buffer : int32_t(pick(12));
      break;
    }
    case 5: {
      kir::Buffer &buffer = program.buffers[random() % program.buffers.size()];
      buffer.shape[random() % buffer.shape.size()] = pick(16);
      buffer.offset = random() % 2 ? buffer.offset : pick(4096);
      break;
    }
    case 6: {
      kir::GemmStep &gemm = program.steps[1].gemm;
      int64_t *fields[] = {&gemm.batch, &gemm.m,        &gemm.n,
                           &gemm.k,     &gemm.c.offset, &gemm.a.strides[1]};
      *fields[random() % std::size(fields)] = pick(16);
      gemm.epilogue = random() % 2 ? gemm.epilogue : int32_t(pick(2));
      break;
    }
    case 7: {
      kir::AttentionStep &attention = program.steps[2].attention;
      int64_t *fields[] = {&attention.batch, &attention.seq, &attention.headDim,
                           &attention.q.strides[3], &attention.lse.offset};
      *fields[random() % std::size(fields)] = pick(8);
      program.steps[random() % 3].kernel = int32_t(pick(2));
      break;
    }
    }
    llvm::Expected<kir::Program> read =
        deserializeProgram(serializeProgram(program), "random");
    if (!read) {
      EXPECT_THAT(llvm::toString(read.takeError()),
                  StartsWith("random: invalid program: "));
      continue;
    }
    ++accepted;
    printed(*read);
  }
  EXPECT_GT(accepted, 0);
}

TEST_F(ArtifactTest, WrongFormatVersion) {
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  std::string file = path("versioned.llmc");

  fb::GetMutableSizePrefixedArtifact(bytes.data())
      ->mutate_format_version(kArtifactFormatVersion + 1);
  reseal(bytes);
  writeBytes(file, bytes);
  std::string error = errorOf(readArtifact(file));
  EXPECT_THAT(error, StartsWith(file + ": the artifact has format version " +
                                std::to_string(kArtifactFormatVersion + 1) +
                                ", this llmc reads format version " +
                                std::to_string(kArtifactFormatVersion)));
  EXPECT_THAT(error, HasSubstr("newer llmc"));

  fb::GetMutableSizePrefixedArtifact(bytes.data())->mutate_format_version(0);
  reseal(bytes);
  error = errorOf(deserializeProgram(bytes, "old"));
  EXPECT_THAT(error, StartsWith("old: the artifact has format version 0, "));
  EXPECT_THAT(error, HasSubstr("older llmc: recompile the model"));

  // The format before bindings' step_scalar: read as None, its bindings
  // would not bind, so it is refused by its version too.
  fb::GetMutableSizePrefixedArtifact(bytes.data())
      ->mutate_format_version(kArtifactFormatVersion - 1);
  reseal(bytes);
  EXPECT_EQ(errorOf(deserializeProgram(bytes, "v10")),
            "v10: the artifact has format version 10, this llmc reads format "
            "version 11; it was written by an older llmc: recompile the model");
}

TEST_F(ArtifactTest, SealedButMalformedProgram) {
  // A writer bug, not damage: the checksum matches but the nested buffer's
  // root offset points outside it.
  std::vector<uint8_t> bytes = serializeProgram(makeProgram());
  uint8_t *nested = fb::GetMutableSizePrefixedArtifact(bytes.data())
                        ->mutable_program()
                        ->data();
  std::memset(nested, 0x7f, 4);
  reseal(bytes);
  EXPECT_EQ(errorOf(deserializeProgram(bytes, "bad")),
            "bad: malformed: the program does not verify as a FlatBuffer "
            "ProgramDef");
}

//===----------------------------------------------------------------------===//
// Values this llmc does not know, and invalid programs
//===----------------------------------------------------------------------===//

TEST_F(ArtifactTest, UnknownEnumValues) {
  {
    kir::Program program = makeProgram();
    program.buffers[kX].dtype = kir::DType(42);
    EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
              "a: buffer 5 ('x') has element type 42, which this llmc does "
              "not know");
  }
  {
    kir::Program program = makeProgram();
    program.buffers[kWte].kind = kir::BufferKind(4);
    EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
              "a: buffer 0 ('wte') has kind 4, which this llmc does not know");
  }
  {
    kir::Program program = makeProgram();
    program.kernels[0].operands[2].dtype = kir::DType(6);
    EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
              "a: kernel 0 ('embed'), operand 2: element type 6 is not one "
              "this llmc knows");
  }
  {
    kir::Program program = makeProgram();
    program.kernels[1].body[1].op = kir::Op(200);
    EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
              "a: kernel 1 ('logits_epilogue'), instruction %1: op 200 is not "
              "one this llmc knows");
  }
  {
    kir::Program program = makeProgram();
    program.kernels[1].body[2].type = kir::DType(255);
    EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
              "a: kernel 1 ('logits_epilogue'), instruction %2: result type "
              "255 is not one this llmc knows");
  }
  {
    // The writer cannot express an unknown step kind; it writes NONE.
    kir::Program program = makeProgram();
    program.steps[2].kind = kir::StepKind(7);
    EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
              "a: step 2 has no operation");
  }
  {
    // A union type from a future schema, with a valid checksum.
    std::vector<uint8_t> bytes = serializeProgram(makeProgram());
    auto *step = reinterpret_cast<flatbuffers::Table *>(
        nestedProgram(bytes)->mutable_steps()->GetMutableObject(1));
    uint8_t *type = step->GetAddressOf(fb::Step::VT_OP_TYPE);
    ASSERT_NE(type, nullptr);
    *type = 9;
    reseal(bytes);
    EXPECT_EQ(errorOf(deserializeProgram(bytes, "a")),
              "a: step 1 has kind 9, which this llmc does not know");
  }
  {
    // A GEMM step that stores fewer views than forEachGemmView lists (the
    // vector's length shortened in place, with a valid checksum).
    std::vector<uint8_t> bytes = serializeProgram(makeProgram());
    auto *gemm = const_cast<fb::GemmStep *>(
        nestedProgram(bytes)->mutable_steps()->GetMutableObject(1)
            ->op_as_GemmStep());
    ASSERT_NE(gemm, nullptr);
    auto *views = gemm->mutable_views();
    ASSERT_EQ(views->size(), 3u);
    uint8_t *length = const_cast<uint8_t *>(views->Data()) - sizeof(uint32_t);
    flatbuffers::WriteScalar<uint32_t>(length, 2);
    reseal(bytes);
    EXPECT_EQ(errorOf(deserializeProgram(bytes, "a")),
              "a: step 1 stores 2 views, its kind has 3");
  }
}

TEST_F(ArtifactTest, InvalidProgramIsRefusedWithTheVerifierMessage) {
  // A view past the end of its buffer.
  kir::Program program = makeProgram();
  program.steps[1].gemm.c.offset = 64;
  std::string problem = kir::verifyProgram(program);
  ASSERT_THAT(problem, HasSubstr("step 1 C reaches elements"));

  std::string file = path("invalid.llmc");
  writeBytes(file, serializeProgram(program));
  EXPECT_EQ(errorOf(readArtifact(file)),
            file + ": invalid program: " + problem);

  // writeArtifact refuses it before touching the file system.
  std::string target = path("never.llmc");
  llvm::Error error = writeArtifact(target, program);
  EXPECT_EQ(llvm::toString(std::move(error)),
            target + ": refusing to write an invalid program: " + problem);
  EXPECT_FALSE(llvm::sys::fs::exists(target));
}

/// x[b, :] = wte[f(tokens[b]), :] for a table of `rows` x 4 and `batch` ids
/// below `idBound` (0: unbounded); f adds `shift` to the id.
kir::Program gatherProgram(int64_t batch, int64_t rows, int64_t idBound,
                           int64_t shift = 0) {
  using kir::BufferKind;
  using kir::DType;
  kir::Program p;
  p.function = "forward";
  p.buffers = {buffer("wte", BufferKind::Param, DType::F32, {rows, 4}),
               buffer("tokens", BufferKind::Input, DType::I32, {batch}),
               buffer("x", BufferKind::Arena, DType::F32, {batch, 4})};
  p.buffers[1].idBound = idBound;
  p.arenaBytes = (batch * 16 + 63) / 64 * 64;
  p.params = {{"wte", 0}};
  p.inputs = {{"tokens", 1}};
  p.outputs = {{"x", 2}};
  kir::Kernel gather;
  gather.name = "gather";
  gather.domain = {batch, 4};
  gather.operands = {access(1, DType::I32, {1, 0}),
                     access(0, DType::F32, {4, 1}), // dim 0 overridden
                     access(2, DType::F32, {4, 1})};
  Body b{gather};
  int32_t id = b.load(0, DType::I64);
  if (shift != 0)
    id = b.add(kir::Op::Add, DType::I64, {id, b.constant(shift, DType::I64)});
  b.store(b.load(1, DType::F32, {id, -1}), 2);
  p.kernels = {gather};
  kir::Step step;
  step.kind = kir::StepKind::Kernel;
  step.kernel = 0;
  p.steps = {step};
  return p;
}

TEST_F(ArtifactTest, GatherReachIsTheIdRangeNotTheBatch) {
  // More positions than table rows (issue 18): the rows read are the ids'.
  EXPECT_EQ(kir::verifyProgram(gatherProgram(300, 256, 256)), "");
  EXPECT_EQ(kir::verifyProgram(gatherProgram(2, 256, 256)), "");
  // Ids that may pass the table's end, directly or after arithmetic.
  EXPECT_EQ(kir::verifyProgram(gatherProgram(2, 256, 257)),
            "kernel 'gather' operand 1 reaches elements [0, 1027] of buffer "
            "0 ('wte'), which has 1024");
  EXPECT_EQ(kir::verifyProgram(gatherProgram(2, 256, 256, 1)),
            "kernel 'gather' operand 1 reaches elements [4, 1027] of buffer "
            "0 ('wte'), which has 1024");
  EXPECT_EQ(kir::verifyProgram(gatherProgram(2, 256, 256, -1)),
            "kernel 'gather' operand 1 reaches elements [-4, 1019] of buffer "
            "0 ('wte'), which has 1024");
  // Ids nothing bounds: no bounds check could hold.
  EXPECT_EQ(kir::verifyProgram(gatherProgram(2, 256, 0)),
            "kernel 'gather' operand 1 is indexed along dimension 0 by %0, "
            "whose range is unknown (a gather's or scatter's ids must come "
            "from an input with an id bound)");
}

TEST_F(ArtifactTest, LoadOverrideCountIsCheckedBeforeTheVerifier) {
  // kir::computeLevels indexes a load's overrides by the row dimension, so
  // a short list must be refused before kir::verifyProgram looks at it.
  kir::Program program = makeProgram();
  program.kernels[0].body[1].args = {0};
  EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
            "a: invalid program: kernel 'embed', instruction %1 (load): has "
            "1 index overrides, needs none or one per domain dimension (3)");
}

TEST_F(ArtifactTest, StoreWithoutAValueIsRefusedBeforeTheVerifier) {
  // A store's first argument is its value and the rest its index
  // overrides: one with no arguments at all has neither, and taking the
  // overrides must not step past the empty list (UBSan found it).
  kir::Program program = makeProgram();
  for (kir::Instr &instr : program.kernels[0].body)
    if (instr.op == kir::Op::Store)
      instr.args.clear();
  EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
            "a: invalid program: kernel 'embed', instruction %46 (store): has "
            "no value to store");
}

TEST_F(ArtifactTest, OverflowingExtentsAreRefusedBeforeTheVerifier) {
  // kir::verifyProgram would compute stride * (extent - 1) in int64_t.
  kir::Program program = makeProgram();
  program.kernels[0].operands[1].strides[2] = INT64_MAX / 2;
  EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
            "a: invalid program: kernel 'embed' operand 1: its element range "
            "overflows 64 bits");

  program = makeProgram();
  program.buffers[kWte].shape = {int64_t(1) << 32, int64_t(1) << 31};
  EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
            "a: invalid program: buffer 0 ('wte'): its size or offset "
            "overflows 64 bits");

  program = makeProgram();
  program.steps[2].attention.seq = INT64_MAX;
  EXPECT_EQ(errorOf(deserializeProgram(serializeProgram(program), "a")),
            "a: invalid program: step 2: an operand's element range "
            "overflows 64 bits");
}

//===----------------------------------------------------------------------===//
// Atomic writes
//===----------------------------------------------------------------------===//

TEST_F(ArtifactTest, WriteIntoMissingDirectoryFails) {
  std::string file = path("no-such-dir/model.llmc");
  std::string error = messageOf(writeArtifact(file, makeProgram()));
  EXPECT_THAT(error, StartsWith(file + ": cannot create a temporary file"));
  EXPECT_THAT(error, HasSubstr("No such file or directory"));
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(ArtifactTest, FailedRenameLeavesNothingBehind) {
  // The target is a directory: the temporary file is written, then the
  // rename fails and the temporary file must go.
  std::string target = path("model.llmc");
  ASSERT_FALSE(llvm::sys::fs::create_directory(target));
  std::string error = messageOf(writeArtifact(target, makeProgram()));
  EXPECT_THAT(error, StartsWith(target + ": cannot rename"));
  EXPECT_EQ(entries(dir), std::vector<std::string>{"model.llmc"});
  EXPECT_TRUE(entries(target).empty());
}

TEST_F(ArtifactTest, FailedWriteLeavesTheOldFileAlone) {
  std::string file = path("model.llmc");
  writeBytes(file, llvm::arrayRefFromStringRef(llvm::StringRef("previous")));

  // The file size limit makes the write fail halfway (EFBIG instead of
  // SIGXFSZ while the signal is ignored), after the temporary file exists.
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 100;
  auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  llvm::Error error = writeArtifact(file, makeProgram());
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previousHandler);

  std::string message = llvm::toString(std::move(error));
  EXPECT_THAT(message, StartsWith(file + ": cannot write '" + file + ".tmp-"));
  EXPECT_THAT(message, HasSubstr("too large"));
  EXPECT_EQ(contents(file), "previous");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"model.llmc"});
}

} // namespace
