// Every kernel of whole compiled programs (GPT-2, OPT and Llama style
// forward passes, a GPT-2 training step with dropout) through the CUDA
// emitter: the module compiled by NVRTC for sm_80 and sm_90 (and PTX), and
// each kernel step run under CPU emulation against the CPU backend's kernel
// on the same memory.
//
// The harness runs a program's schedule on host memory laid out like the
// runtime's (one arena at the planned offsets, separate parameter, state
// and input buffers). GEMM, attention and gradient steps are plain loops
// here; before each kernel step the memory is copied, the CPU kernel runs
// on the original and the emulated CUDA kernel on the copy, and the
// buffers the kernel stores to are compared (tolerance below), while every
// other byte must be unchanged (a stray write fails). The run continues
// from the CPU's result. The harness itself is checked against the CPU
// executor (loss and outputs), and a second run with every kernel emulated
// is compared end to end. Then the GEMM epilogues the CUDA executor hands
// to cuBLASLt (runtime::describeGemm) run as cuBLASLt computes them, on
// the f32 accumulator with one rounding to C's type (runGemm with a kind),
// instead of their kernels: each such GEMM against the GEMM and its kernel
// on the CPU from the same memory, and the fused program end to end (other
// kernels on the CPU, then emulated) against the CPU executor.
//
// Tolerances: per kernel |cpu - cuda| <= 2e-5 + 2e-5 |cpu| (reductions
// add in different orders, math functions differ by a few ulp); end to
// end (all kernels emulated vs the CPU kernels) 1e-4 relative. A fused
// GEMM's C within one unit of its type of the unfused one, relative to
// |product| + |bias| + |value| (the roundings skipped); the fused program
// end to end within ProgramCase::fusedRtol.
//
// To add a program: one line in kPrograms.
#include "test/unit/codegen/KernelToCpu/KernelTestUtil.h"
#include "test/unit/codegen/KernelToCuda/CudaTestUtil.h"
#include "test/unit/codegen/KernelToCuda/EmulationRunner.h"

#include "codegen/Inference.h"
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/KernelToCuda/KernelToCuda.h"
#include "codegen/KernelToCuda/MultiTensor.h"
#include "codegen/KernelToCuda/Nvrtc.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "passes/Pipelines.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Cuda/GemmDescription.h"
#include "runtime/Weights/Weights.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

using namespace llmc;
using namespace llmc::test;
using kir::DType;

namespace {

//===----------------------------------------------------------------------===//
// The programs
//===----------------------------------------------------------------------===//

using NamedPrograms = std::vector<std::pair<std::string, kir::Program>>;

/// The forward program of a YAML config at batch x seq.
llvm::Expected<NamedPrograms> forwardProgram(const char *yaml, int64_t batch,
                                             int64_t seq) {
  auto config = mlir::llmc::parseModelConfig(yaml, "test.yaml");
  if (!config)
    return config.takeError();
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, *config, {batch, seq});
  if (!module)
    return module.takeError();
  mlir::PassManager pm(&context);
  mlir::llmc::buildCompilePipeline(pm);
  if (mlir::failed(pm.run(**module)))
    return llvm::createStringError("the compile pipeline failed");
  auto forward = (*module)->lookupSymbol<mlir::func::FuncOp>("forward");
  auto program = mlir::llmc::lowerToProgram(forward);
  if (mlir::failed(program))
    return llvm::createStringError("lowering failed");
  return NamedPrograms{{"forward", std::move(*program)}};
}

/// The programs of a training step (compileTrainingStep, AdamW; with
/// `options`' tensor parallelism, one tp rank's programs): forward, grad
/// step, update step, and in mixed precision first @cast_weights.
llvm::Expected<NamedPrograms>
trainingPrograms(const char *yaml, int64_t batch, int64_t seq,
                 const TrainingStepOptions &options = TrainingStepOptions()) {
  auto config = mlir::llmc::parseModelConfig(yaml, "test.yaml");
  if (!config)
    return config.takeError();
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, *config, {batch, seq});
  if (!module)
    return module.takeError();
  TrainingStepOptions cuda = options;
  cuda.forCuda = true;
  auto programs = training::compileTrainingStep(**module, cuda);
  if (!programs)
    return programs.takeError();
  NamedPrograms named;
  // Mixed precision: the program that makes the 16-bit weight copies.
  if (programs->castWeights)
    named.push_back({"cast_weights", std::move(*programs->castWeights)});
  named.push_back({"forward", std::move(programs->forward)});
  named.push_back({"grad_step", std::move(programs->gradStep)});
  named.push_back({"update_step", std::move(programs->updateStep)});
  return named;
}

/// @prefill (of `prefill` tokens) and @decode of a YAML config at `batch`
/// sequences over a cache of `context` slots (compileInference).
llvm::Expected<NamedPrograms> inferencePrograms(const char *yaml,
                                                int64_t batch, int64_t context,
                                                int64_t prefill) {
  auto config = mlir::llmc::parseModelConfig(yaml, "test.yaml");
  if (!config)
    return config.takeError();
  mlir::MLIRContext context_;
  context_.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  mlir::llmc::InferenceShape shape;
  shape.batch = batch;
  shape.maxContext = context;
  shape.prefillTokens = prefill;
  auto module = mlir::llmc::buildInferenceModule(context_, *config, shape);
  if (!module)
    return module.takeError();
  auto programs = compileInference(**module);
  if (!programs)
    return programs.takeError();
  return NamedPrograms{{"prefill", std::move(programs->prefill)},
                       {"decode", std::move(programs->decode)}};
}

/// Mixed precision (llmc-amp; fp16 with loss scaling) for a training case.
TrainingStepOptions amp(PrecisionConfig::Kind kind) {
  TrainingStepOptions options;
  options.precision.kind = kind;
  return options;
}

struct ProgramCase {
  const char *name;
  std::function<llvm::Expected<NamedPrograms>()> make;
  /// End to end (the harness against the CPU executor, all kernels
  /// emulated against the CPU kernels): the largest difference relative to
  /// the largest |value| of a result. Narrow programs round activations to
  /// 8 (bf16) or 11 (f16) bits, so one rounding step landing differently
  /// (the library loops sum in double, the CPU executor in f32; libm's
  /// tanh against CUDA's) moves later values by up to a unit of the type
  /// (seen: bf16 1.5e-8, fp16 4.5e-4, from one f16 unit in the forward).
  double rtol = 1e-4;
  /// The same with the GEMM epilogues run as cuBLASLt runs them (0: rtol):
  /// each fused GEMM skips roundings to its narrow C, which moves an
  /// output by up to about a unit of that type, 2^-7 for bf16, relative to
  /// the largest |value| (seen: bf16 4.3e-3, one bf16 unit of a logit
  /// near 1.1; fp16 9.0e-4, within its rtol).
  double fusedRtol = 0;
};

// GPT-2 with a vocabulary past the warp-per-row limit (block-per-row
// softmax/cross-entropy, odd length: vector chunks and tails); OPT with odd
// widths (no vector accesses); Llama with RoPE, RMSNorm and SwiGLU; the
// GPT-2 training step with dropout (Random in real kernels).
const ProgramCase kPrograms[] = {
    {"gpt2", [] { return forwardProgram(
         "name: g\nn_layer: 2\nn_head: 4\nn_embd: 64\nseq_len: 16\n"
         "vocab_size: 2111\n", 2, 8); }},
    {"opt", [] { return forwardProgram(
         "name: o\nn_layer: 2\nn_head: 3\nn_embd: 39\nseq_len: 16\n"
         "vocab_size: 67\nactivation: relu\n", 2, 7); }},
    {"llama", [] { return forwardProgram(
         "name: l\nn_layer: 2\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
         "vocab_size: 97\nactivation: swiglu\nnorm: rmsnorm\n"
         "position: rope\nbias: false\ntie_embeddings: false\n", 2, 8); }},
    {"gpt2_train", [] { return trainingPrograms(
         "name: t\nn_layer: 1\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
         "vocab_size: 80\ndropout: 0.1\n", 2, 8); }},
    // The same step in mixed precision: bf16, and fp16 with loss scaling
    // (bf16/f16 activations and GEMM operands, f32 master weights, Adam
    // moments and gradients).
    {"gpt2_train_bf16", [] { return trainingPrograms(
         "name: t\nn_layer: 1\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
         "vocab_size: 80\ndropout: 0.1\n", 2, 8,
         amp(PrecisionConfig::Kind::BF16)); }, 1e-3, 0x1p-7},
    {"gpt2_train_fp16", [] { return trainingPrograms(
         "name: t\nn_layer: 1\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
         "vocab_size: 80\ndropout: 0.1\n", 2, 8,
         amp(PrecisionConfig::Kind::FP16)); }, 2e-3},
    {"opt_train", [] { return trainingPrograms(
         "name: ot\nn_layer: 1\nn_head: 3\nn_embd: 39\nseq_len: 16\n"
         "vocab_size: 67\nactivation: relu\ndropout: 0.1\n", 2, 7); }},
    // The KV-cache programs of `llmc generate` and `llmc export`: a cache
    // of 12 slots, prefill chunks of 5 (odd), decode of one token.
    {"gpt2_infer", [] { return inferencePrograms(
         "name: gi\nn_layer: 2\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
         "vocab_size: 80\n", 2, 12, 5); }},
    {"llama_infer", [] { return inferencePrograms(
         "name: li\nn_layer: 2\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
         "vocab_size: 97\nactivation: swiglu\nnorm: rmsnorm\n"
         "position: rope\nbias: false\ntie_embeddings: false\n", 2, 12, 5); }},
    {"llama_train", [] { return trainingPrograms(
         "name: lt\nn_layer: 1\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
         "vocab_size: 97\nactivation: swiglu\nnorm: rmsnorm\n"
         "position: rope\nbias: false\ntie_embeddings: false\n", 2, 8); }},
};

//===----------------------------------------------------------------------===//
// Host memory laid out like the runtime's
//===----------------------------------------------------------------------===//

/// The elements of a view's buffer from the view's offset on, of the
/// buffer's storage type: read widened to double, written rounded to
/// nearest even (f16, bf16) as the backends store.
struct Elements {
  char *data;
  DType dtype;
  double get(int64_t i) const { return elementAt(data, dtype, size_t(i)); }
  void set(int64_t i, double value) const {
    float narrow = float(value);
    if (dtype == DType::F32) {
      std::memcpy(data + 4 * i, &narrow, 4);
      return;
    }
    uint16_t bits = dtype == DType::BF16 ? runtime::floatToBFloat16(narrow)
                                         : runtime::floatToHalf(narrow);
    std::memcpy(data + 2 * i, &bits, 2);
  }
};

struct Memory {
  GuardedBuffer arena;
  std::vector<GuardedBuffer> owned; // per buffer; empty for arena buffers
  std::vector<char *> bases;
  std::vector<DType> dtypes;

  explicit Memory(const kir::Program &program)
      : arena(std::max<int64_t>(program.arenaBytes, 1)),
        owned(program.buffers.size()), bases(program.buffers.size()) {
    for (auto [index, buffer] : llvm::enumerate(program.buffers)) {
      dtypes.push_back(buffer.dtype);
      if (buffer.kind == kir::BufferKind::Arena) {
        bases[index] = arena.data() + buffer.offset;
      } else {
        owned[index] = GuardedBuffer(std::max<int64_t>(buffer.bytes(), 1));
        bases[index] = owned[index].data();
      }
    }
  }
  Memory(const Memory &other)
      : arena(other.arena), owned(other.owned), dtypes(other.dtypes) {
    // Same layout, pointers into this copy.
    bases.resize(other.bases.size());
    for (size_t i = 0; i < bases.size(); ++i)
      bases[i] = other.owned[i].bytes()
                     ? owned[i].data()
                     : arena.data() + (other.bases[i] - other.arena.data());
  }
  Elements elements(const kir::View &view) {
    DType dtype = dtypes[view.buffer];
    return {bases[view.buffer] + view.offset * kir::dtypeBytes(dtype), dtype};
  }
};

/// Parameters, states and inputs drawn from `seed` (ids within their
/// bounds, positive second moments, the scalar inputs of a training step at
/// plausible values).
void fillInputs(const kir::Program &program, Memory &memory, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (auto [index, buffer] : llvm::enumerate(program.buffers)) {
    if (buffer.kind == kir::BufferKind::Arena)
      continue;
    char *data = memory.bases[index];
    int64_t n = buffer.numElements();
    llvm::StringRef name = buffer.name;
    if (buffer.dtype == DType::I32 || buffer.dtype == DType::I64) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t value = buffer.idBound > 0 ? int64_t(rng() % buffer.idBound)
                                           : int64_t(rng() % 7);
        if (name == kir::stepScalarName(kir::StepScalar::Rng))
          value = i == 0 ? 0x5eed5eed1234 : 3; // seed, step
        // Positions [B, P] of a KV-cache program: distinct in a row (the
        // cache writes of a row must not collide), a different start per
        // row, all inside the cache.
        if (name == "positions" && buffer.shape.size() == 2) {
          int64_t row = i / buffer.shape[1], column = i % buffer.shape[1];
          int64_t slots = buffer.idBound > 0 ? buffer.idBound : 7;
          value = (3 * row + 2 + column) % slots;
        }
        if (buffer.dtype == DType::I32) {
          int32_t narrow = int32_t(value);
          std::memcpy(data + 4 * i, &narrow, 4);
        } else {
          std::memcpy(data + 8 * i, &value, 8);
        }
      }
      continue;
    }
    ASSERT_TRUE(kir::isFloat(buffer.dtype)) << buffer.name;
    Elements values{data, buffer.dtype};
    for (int64_t i = 0; i < n; ++i) {
      float value = 0.5f * uniform(rng);
      if (buffer.kind == kir::BufferKind::State)
        value = name.starts_with("adam_v") ? 1e-3f * std::fabs(value)
                                           : 1e-2f * value;
      values.set(i, value);
    }
    // The scalars of a training step (fp16's loss-scaling state: a scale
    // of 2^10, 3 clean steps, 2 overflows of hysteresis left).
    static const std::map<llvm::StringRef, float> kScalars = {
        {"dloss", 1.0f},
        {"lr", 1e-3f},
        {"bias_correction1", 10.0f},
        {"bias_correction2", 20.0f},
        {"loss_scale", 1024.0f},
        {"loss_scale.clean_steps", 3.0f},
        {"loss_scale.hysteresis", 2.0f},
        {"loss_scale.skipped_steps", 0.0f}};
    auto scalar = kScalars.find(name);
    if (scalar != kScalars.end())
      values.set(0, scalar->second);
  }
}

//===----------------------------------------------------------------------===//
// The library steps, as plain loops
//===----------------------------------------------------------------------===//

/// The tanh GELU and its derivative in f32, as LlmcToKernel expands
/// `llmc.gelu approximate = tanh` and its gradient, and as cuBLASLt's GELU
/// epilogues compute them.
float geluTanh(float x) {
  const float k = float(std::sqrt(2.0 / M_PI));
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
float geluTanhGrad(float x) {
  const float k = float(std::sqrt(2.0 / M_PI));
  float t = std::tanh(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * (k + float(k * 3.0 * 0.044715) * x * x);
}

/// C = op(A) op(B) summed in double and rounded once to C's type (f32
/// accumulation of narrow operands, as cuBLASLt and the CPU backend do).
/// With `fused`, the GEMM also runs that epilogue the way cuBLASLt does
/// (what the executor hands it: describeGemm), in place of the epilogue
/// kernel: on the f32 accumulator (the sum rounded to f32), the bias or
/// aux widened from C's type, the GELU in f32, one rounding to C's type at
/// the end; the kernel rounds the product to C's type first and, for bias
/// + GELU, the bias sum again. `magnitude`, if given, gets |acc| + |bias|
/// per element of C (batch, row, column order): the scale of the roundings
/// the fused epilogue skips.
void runGemm(const kir::GemmStep &g, Memory &memory,
             kir::EpilogueKind fused = kir::EpilogueKind::None,
             std::vector<double> *magnitude = nullptr) {
  Elements a = memory.elements(g.a), b = memory.elements(g.b),
           c = memory.elements(g.c);
  bool hasBias =
      fused == kir::EpilogueKind::Bias || fused == kir::EpilogueKind::GeluBias;
  Elements bias = hasBias ? memory.elements(g.epilogueBias) : c;
  Elements aux =
      fused == kir::EpilogueKind::DGelu ? memory.elements(g.epilogueAux) : c;
  if (magnitude)
    magnitude->clear();
  for (int64_t batch = 0; batch < g.batch; ++batch)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < g.k; ++k) {
          int64_t ai = batch * g.a.strides[0] +
                       (g.transA ? k * g.a.strides[1] + i * g.a.strides[2]
                                 : i * g.a.strides[1] + k * g.a.strides[2]);
          int64_t bi = batch * g.b.strides[0] +
                       (g.transB ? j * g.b.strides[1] + k * g.b.strides[2]
                                 : k * g.b.strides[1] + j * g.b.strides[2]);
          sum += a.get(ai) * b.get(bi);
        }
        int64_t ci =
            batch * g.c.strides[0] + i * g.c.strides[1] + j * g.c.strides[2];
        if (fused == kir::EpilogueKind::None) {
          c.set(ci, g.accumulate ? float(c.get(ci)) + float(sum) : sum);
          continue;
        }
        float acc = float(sum), term = hasBias ? float(bias.get(j)) : 0.0f;
        float value = acc;
        switch (fused) {
        case kir::EpilogueKind::Bias:
          value = acc + term;
          break;
        case kir::EpilogueKind::GeluBias:
          value = geluTanh(acc + term);
          break;
        case kir::EpilogueKind::Gelu:
          value = geluTanh(acc);
          break;
        case kir::EpilogueKind::DGelu:
          value = acc * geluTanhGrad(
                            float(aux.get(i * g.epilogueAux.strides[0] + j)));
          break;
        case kir::EpilogueKind::None:
          break;
        }
        c.set(ci, value);
        if (magnitude)
          magnitude->push_back(std::fabs(acc) + std::fabs(term));
      }
}

/// Element (b, h, t, d) of a [batch, heads, seq, headDim] view.
struct View4 {
  Elements data;
  const kir::View &view;
  int64_t index(int64_t b, int64_t h, int64_t t, int64_t d) const {
    const std::vector<int64_t> &s = view.strides;
    return b * s[0] + h * s[1] + t * s[2] + (s.size() > 3 ? d * s[3] : 0);
  }
  double at(int64_t b, int64_t h, int64_t t, int64_t d = 0) const {
    return data.get(index(b, h, t, d));
  }
  void put(double value, int64_t b, int64_t h, int64_t t,
           int64_t d = 0) const {
    data.set(index(b, h, t, d), value);
  }
};

/// The probabilities p[t][s] of one (batch, head) and each row's lse.
std::vector<double> attentionProbabilities(const View4 &q, const View4 &k,
                                           int64_t b, int64_t h, int64_t seq,
                                           int64_t dim, float scale,
                                           bool causal,
                                           std::vector<double> &lse) {
  std::vector<double> p(seq * seq, 0.0);
  lse.assign(seq, 0.0);
  for (int64_t t = 0; t < seq; ++t) {
    int64_t visible = causal ? t + 1 : seq;
    double max = -INFINITY;
    for (int64_t s = 0; s < visible; ++s) {
      double dot = 0;
      for (int64_t d = 0; d < dim; ++d)
        dot += double(q.at(b, h, t, d)) * k.at(b, h, s, d);
      p[t * seq + s] = scale * dot;
      max = std::max(max, p[t * seq + s]);
    }
    double sum = 0;
    for (int64_t s = 0; s < visible; ++s)
      sum += (p[t * seq + s] = std::exp(p[t * seq + s] - max));
    for (int64_t s = 0; s < visible; ++s)
      p[t * seq + s] /= sum;
    lse[t] = max + std::log(sum);
  }
  return p;
}

/// Attention over a KV cache (kvSeq keys, optional positions), as
/// kir::AttentionStep defines it: query t of sequence b sees keys
/// s <= positions[b][t] (clamped to the cache), or s <= t + kvSeq - seq
/// without positions; a query that sees none gets out 0 and lse -inf.
void runCacheAttention(const kir::AttentionStep &a, Memory &memory) {
  View4 q{memory.elements(a.q), a.q}, k{memory.elements(a.k), a.k},
      v{memory.elements(a.v), a.v}, out{memory.elements(a.out), a.out},
      lse{memory.elements(a.lse), a.lse};
  int64_t keys = a.keys();
  const int32_t *positions =
      a.positioned() ? reinterpret_cast<const int32_t *>(
                           memory.bases[a.positions.buffer]) +
                           a.positions.offset
                     : nullptr;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t t = 0; t < a.seq; ++t) {
        int64_t last = keys - 1;
        if (a.causal)
          last = positions ? positions[b * a.positions.strides[0] +
                                       t * a.positions.strides[1]]
                           : t + keys - a.seq;
        int64_t visible = std::min(last, keys - 1) + 1;
        std::vector<double> p(std::max<int64_t>(visible, 0));
        double max = -INFINITY;
        for (int64_t s = 0; s < visible; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < a.headDim; ++d)
            dot += double(q.at(b, h, t, d)) * k.at(b, h, s, d);
          max = std::max(max, p[s] = a.scale * dot);
        }
        double sum = 0;
        for (double &value : p)
          sum += (value = std::exp(value - max));
        for (int64_t d = 0; d < a.headDim; ++d) {
          double acc = 0;
          for (int64_t s = 0; s < visible; ++s)
            acc += p[s] / sum * v.at(b, h, s, d);
          out.put(float(acc), b, h, t, d);
        }
        lse.put(visible > 0 ? float(max + std::log(sum)) : -INFINITY, b, h, t);
      }
}

void runAttention(const kir::AttentionStep &a, Memory &memory) {
  if (a.kvSeq > 0 || a.positioned())
    return runCacheAttention(a, memory);
  View4 q{memory.elements(a.q), a.q}, k{memory.elements(a.k), a.k},
      v{memory.elements(a.v), a.v}, out{memory.elements(a.out), a.out},
      lse{memory.elements(a.lse), a.lse};
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      std::vector<double> rowLse;
      std::vector<double> p = attentionProbabilities(
          q, k, b, h, a.seq, a.headDim, a.scale, a.causal, rowLse);
      for (int64_t t = 0; t < a.seq; ++t) {
        for (int64_t d = 0; d < a.headDim; ++d) {
          double sum = 0;
          for (int64_t s = 0; s < a.seq; ++s)
            sum += p[t * a.seq + s] * v.at(b, h, s, d);
          out.put(float(sum), b, h, t, d);
        }
        lse.put(float(rowLse[t]), b, h, t);
      }
    }
}

void runAttentionGrad(const kir::AttentionGradStep &a, Memory &memory) {
  View4 dout{memory.elements(a.dout), a.dout}, q{memory.elements(a.q), a.q},
      k{memory.elements(a.k), a.k}, v{memory.elements(a.v), a.v},
      out{memory.elements(a.out), a.out}, lse{memory.elements(a.lse), a.lse},
      dq{memory.elements(a.dq), a.dq}, dk{memory.elements(a.dk), a.dk},
      dv{memory.elements(a.dv), a.dv};
  int64_t T = a.seq, D = a.headDim;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      std::vector<double> p(T * T, 0.0), ds(T * T, 0.0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < T; ++s) {
          if (a.causal && s > t)
            continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(q.at(b, h, t, d)) * k.at(b, h, s, d);
          p[t * T + s] = std::exp(a.scale * dot - lse.at(b, h, t));
        }
      for (int64_t t = 0; t < T; ++t) {
        double delta = 0;
        for (int64_t d = 0; d < D; ++d)
          delta += double(dout.at(b, h, t, d)) * out.at(b, h, t, d);
        for (int64_t s = 0; s < T; ++s) {
          double dp = 0;
          for (int64_t d = 0; d < D; ++d)
            dp += double(dout.at(b, h, t, d)) * v.at(b, h, s, d);
          ds[t * T + s] = p[t * T + s] * (dp - delta);
        }
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          double gq = 0, gk = 0, gv = 0;
          for (int64_t j = 0; j < T; ++j) {
            gq += ds[i * T + j] * k.at(b, h, j, d);
            gk += ds[j * T + i] * q.at(b, h, j, d);
            gv += p[j * T + i] * dout.at(b, h, j, d);
          }
          dq.put(float(a.scale * gq), b, h, i, d);
          dk.put(float(a.scale * gk), b, h, i, d);
          dv.put(float(gv), b, h, i, d);
        }
    }
}

void runEmbeddingGrad(const kir::EmbeddingGradStep &e,
                      const kir::Program &program, Memory &memory) {
  const char *ids = memory.bases[e.ids.buffer];
  bool wide = program.buffers[e.ids.buffer].dtype == DType::I64;
  Elements grad = memory.elements(e.grad), out = memory.elements(e.out);
  for (int64_t r = 0; r < e.rows && !e.accumulate; ++r)
    for (int64_t c = 0; c < e.channels; ++c)
      out.set(r * e.out.strides[0] + c * e.out.strides[1], 0.0);
  for (int64_t p = 0; p < e.positions; ++p) {
    int64_t at = e.ids.offset + p * e.ids.strides[0], id;
    if (wide) {
      std::memcpy(&id, ids + 8 * at, 8);
    } else {
      int32_t narrow;
      std::memcpy(&narrow, ids + 4 * at, 4);
      id = narrow;
    }
    for (int64_t c = 0; c < e.channels; ++c) {
      int64_t o = id * e.out.strides[0] + c * e.out.strides[1];
      out.set(o, float(out.get(o)) +
                     float(grad.get(p * e.grad.strides[0] +
                                    c * e.grad.strides[1])));
    }
  }
}

//===----------------------------------------------------------------------===//
// The harness
//===----------------------------------------------------------------------===//

/// Runs the schedule. `kernel` runs kernel step `index` on `memory`;
/// `gemm`, if given, may run a GEMM step itself (it returns true), else
/// the GEMM loop and then its epilogue kernel run.
void runSchedule(
    const kir::Program &program, Memory &memory,
    const std::function<void(int32_t, Memory &)> &kernel,
    const std::function<bool(const kir::Step &, Memory &)> &gemm = nullptr) {
  for (const kir::Step &step : program.steps) {
    switch (step.kind) {
    case kir::StepKind::Kernel:
      kernel(step.kernel, memory);
      break;
    case kir::StepKind::Gemm:
      if (gemm && gemm(step, memory))
        break;
      runGemm(step.gemm, memory);
      if (step.gemm.epilogue >= 0)
        kernel(step.gemm.epilogue, memory);
      break;
    case kir::StepKind::Attention:
      runAttention(step.attention, memory);
      break;
    case kir::StepKind::AttentionGrad:
      runAttentionGrad(step.attentionGrad, memory);
      break;
    case kir::StepKind::EmbeddingGrad:
      runEmbeddingGrad(step.embeddingGrad, program, memory);
      break;
    case kir::StepKind::CollectiveStart:
    case kir::StepKind::CollectiveWait:
      ADD_FAILURE() << "a single-device program has no collectives";
      break;
    }
  }
}

std::vector<void *> operandBases(const kir::Kernel &kernel, Memory &memory) {
  std::vector<void *> bases;
  for (const kir::Access &access : kernel.operands)
    bases.push_back(memory.bases[access.buffer]);
  return bases;
}

/// Byte ranges of the memory a kernel may store to: [begin, end) within
/// the arena or an owned buffer (by buffer index; -1 for the arena).
struct StoredRange {
  int32_t owner;
  size_t begin, end;
};

/// Compares what the kernels stored and requires every other byte equal
/// (`kernels`: one kernel, or the members of a multi-tensor launch, which
/// `label` names).
ErrorStats compareAfterKernels(const kir::Program &program,
                               llvm::ArrayRef<const kir::Kernel *> kernels,
                               const std::string &label, Memory &cpu,
                               Memory &cuda) {
  ErrorStats stats;
  std::set<int32_t> stored;
  for (const kir::Kernel *kernel : kernels)
    for (const kir::Instr &instr : kernel->body)
      if (instr.op == kir::Op::Store)
        stored.insert(kernel->operands[instr.operand].buffer);
  std::vector<StoredRange> ranges;
  for (int32_t index : stored) {
    const kir::Buffer &buffer = program.buffers[index];
    // Both sides compute in f32 and round once to the storage type; a
    // narrow store may land one unit apart where f32 results differ in
    // their last bits (libm), so allow that unit.
    double unit = buffer.dtype == DType::BF16  ? 0x1p-7
                  : buffer.dtype == DType::F16 ? 0x1p-10
                                               : 2e-5;
    stats.merge(compareElements(
        cpu.bases[index], cuda.bases[index], buffer.dtype,
        buffer.numElements(), {unit, 2e-5},
        label + ", buffer '" + buffer.name + "'"));
    if (buffer.kind == kir::BufferKind::Arena)
      ranges.push_back({-1, size_t(buffer.offset),
                        size_t(buffer.offset + buffer.bytes())});
    else
      ranges.push_back({index, 0, size_t(buffer.bytes())});
  }
  auto unchanged = [&](int32_t owner, const char *a, const char *b,
                       size_t size) {
    for (size_t i = 0; i < size; ++i) {
      if (a[i] == b[i])
        continue;
      bool inside = false;
      for (const StoredRange &range : ranges)
        inside |= range.owner == owner && i >= range.begin && i < range.end;
      if (!inside) {
        ADD_FAILURE() << label << " wrote byte " << i
                      << " of " << (owner < 0 ? "the arena" : "a buffer")
                      << ", outside every buffer it stores to";
        return;
      }
    }
  };
  unchanged(-1, cpu.arena.data(), cuda.arena.data(), cpu.arena.bytes());
  EXPECT_EQ(cuda.arena.guardDamage(), "") << label;
  for (size_t i = 0; i < program.buffers.size(); ++i)
    if (cpu.owned[i].bytes()) {
      unchanged(int32_t(i), cpu.owned[i].data(), cuda.owned[i].data(),
                cpu.owned[i].bytes());
      EXPECT_EQ(cuda.owned[i].guardDamage(), "") << label;
    }
  return stats;
}

ErrorStats compareAfterKernel(const kir::Program &program,
                              const kir::Kernel &kernel, Memory &cpu,
                              Memory &cuda) {
  return compareAfterKernels(program, {&kernel}, "kernel " + kernel.name, cpu,
                             cuda);
}

/// The outputs and updated persistent buffers of a finished run.
std::vector<std::pair<std::string, std::vector<float>>>
results(const kir::Program &program, Memory &memory) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const std::vector<kir::Binding> *list :
       {&program.outputs, &program.updates})
    for (const kir::Binding &binding : *list) {
      const kir::Buffer &buffer = program.buffers[binding.buffer];
      std::vector<float> values(buffer.numElements());
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = float(elementAt(memory.bases[binding.buffer], buffer.dtype, i));
      out.push_back({binding.name, std::move(values)});
    }
  return out;
}

/// Checks every result within rtol of its largest |value| (at least 1);
/// returns the largest such relative difference seen.
double expectResultsClose(
    const std::vector<std::pair<std::string, std::vector<float>>> &want,
    const std::vector<std::pair<std::string, std::vector<float>>> &got,
    double rtol, const std::string &what) {
  double worst = 0;
  EXPECT_EQ(want.size(), got.size()) << what;
  if (want.size() != got.size())
    return INFINITY;
  for (size_t r = 0; r < want.size(); ++r) {
    const auto &[name, a] = want[r];
    const auto &b = got[r].second;
    EXPECT_EQ(a.size(), b.size()) << what << ": " << name;
    if (a.size() != b.size())
      return INFINITY;
    double scale = 0;
    for (float x : a)
      scale = std::max(scale, double(std::fabs(x)));
    for (size_t i = 0; i < a.size(); ++i) {
      double difference = std::fabs(double(a[i]) - b[i]);
      worst = std::max(worst, std::isnan(difference)
                                  ? INFINITY
                                  : difference / std::max(1.0, scale));
      if (!(difference <= rtol * std::max(1.0, scale))) {
        ADD_FAILURE() << what << ": '" << name << "' element " << i
                      << ": " << a[i] << " vs " << b[i];
        return INFINITY;
      }
    }
  }
  return worst;
}

/// The CPU executor's run of `program` from `initial`'s parameters, states
/// and inputs: the results named as in `like` (empty after a failure).
std::vector<std::pair<std::string, std::vector<float>>> cpuExecutorResults(
    const kir::Program &program, Memory &initial,
    const std::vector<std::pair<std::string, std::vector<float>>> &like) {
  auto executor = runtime::createCpuExecutor(
      program, [&] { return cpu::compileKernelsToObject(program.kernels); }, 1);
  if (!executor) {
    ADD_FAILURE() << llvm::toString(executor.takeError());
    return {};
  }
  for (auto [index, buffer] : llvm::enumerate(program.buffers)) {
    if (buffer.kind == kir::BufferKind::Arena)
      continue;
    runtime::HostTensor tensor =
        runtime::HostTensor::zeros(buffer.dtype, buffer.shape);
    std::memcpy(tensor.bytes.data(), initial.bases[index], buffer.bytes());
    if (llvm::Error error = (*executor)->setTensor(buffer.name, tensor)) {
      ADD_FAILURE() << buffer.name << ": " << llvm::toString(std::move(error));
      return {};
    }
  }
  if (llvm::Error error = (*executor)->run()) {
    ADD_FAILURE() << llvm::toString(std::move(error));
    return {};
  }
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto &[name, values] : like) {
    auto tensor = (*executor)->output(name);
    if (!tensor) {
      ADD_FAILURE() << name << ": " << llvm::toString(tensor.takeError());
      return {};
    }
    std::vector<float> widened(values.size());
    for (size_t i = 0; i < widened.size(); ++i)
      widened[i] = float(elementAt(tensor->bytes.data(), tensor->dtype, i));
    out.push_back({name, widened});
  }
  return out;
}

/// Per step of `program`: the epilogue the CUDA executor hands to
/// cuBLASLt (runtime::describeGemm at the executor's device-like
/// addresses, epilogues fused), None for every other step.
std::vector<kir::EpilogueKind> cublasLtEpilogues(const kir::Program &program) {
  std::vector<kir::EpilogueKind> kinds(program.steps.size(),
                                       kir::EpilogueKind::None);
  std::vector<uint64_t> bases = deviceBases(program);
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    if (step.kind != kir::StepKind::Gemm)
      continue;
    auto d = runtime::describeGemm(program, step, bases, false, true);
    if (!d) {
      ADD_FAILURE() << llvm::toString(d.takeError());
      continue;
    }
    kinds[index] = d->fused;
  }
  return kinds;
}

class CudaProgramTest : public ::testing::TestWithParam<ProgramCase> {};

TEST_P(CudaProgramTest, EveryKernelCompilesAndMatchesTheCpu) {
  auto programs = GetParam().make();
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  for (auto &[function, program] : *programs) {
    SCOPED_TRACE(std::string(GetParam().name) + " @" + function);
    ASSERT_EQ(kir::verifyProgram(program), "");

    // NVRTC: the whole module for sm_80, sm_90 and compute_80 PTX.
    std::string why;
    if (cuda::nvrtcAvailable(&why)) {
      cuda::NvrtcOptions options;
      options.cacheEnabled = false;
      cuda::NvrtcStats nvrtc;
      auto binaries = cuda::compileCuda(cuda::emitCudaModule(program),
                                        function + ".cu", options, &nvrtc);
      ASSERT_TRUE(bool(binaries)) << llvm::toString(binaries.takeError());
      EXPECT_EQ(nvrtc.compilations, 3);
      for (const kir::Kernel &kernel : program.kernels)
        EXPECT_NE(binaries->ptx.find(".entry " + kernel.name),
                  std::string::npos) << kernel.name;
      std::printf("[ nvrtc    ] %s @%s: %zu kernels, sm_80 + sm_90 cubins "
                  "(%zu + %zu bytes) + PTX in %.2f s\n",
                  GetParam().name, function.c_str(), program.kernels.size(),
                  binaries->cubins[0].bytes.size(),
                  binaries->cubins[1].bytes.size(), nvrtc.compileSeconds);
    } else {
      std::printf("[ nvrtc    ] skipped: %s\n", why.c_str());
    }

    // The CPU kernels and the emulated CUDA kernels.
    Compiled cpu = compileKernels(program.kernels);
    ASSERT_TRUE(cpu);
    std::string error;
    auto emulated = EmulatedModule::build(program.kernels, error);
    ASSERT_TRUE(emulated) << error;

    // Kernel by kernel.
    Memory memory(program);
    fillInputs(program, memory, 11);
    Memory initial = memory;
    ErrorStats total;
    runSchedule(program, memory, [&](int32_t index, Memory &m) {
      const kir::Kernel &kernel = program.kernels[index];
      Memory copy = m;
      cpu.run(kernel.name, operandBases(kernel, m), 0, kernel.numRows());
      emulated->run(kernel.name, operandBases(kernel, copy));
      total.merge(compareAfterKernel(program, kernel, m, copy));
    });
    int schedules[3] = {0, 0, 0};
    for (const kir::Kernel &kernel : program.kernels)
      ++schedules[int(cuda::emitCudaKernel(kernel).schedule)];
    std::printf("[ emulated ] %s @%s: %zu kernels (%d pointwise, %d "
                "warp-per-row, %d block-per-row), %lld elements compared, "
                "max abs error %.3g, max error relative to max(1, |x|) %.3g\n",
                GetParam().name, function.c_str(), program.kernels.size(),
                schedules[0], schedules[1], schedules[2],
                (long long)total.elements, total.maxAbs, total.maxRel);
    auto cpuResults = results(program, memory);

    // The harness against the CPU executor (its GEMMs and attention).
    auto executorResults = cpuExecutorResults(program, initial, cpuResults);
    ASSERT_FALSE(executorResults.empty());
    {
      double worst = expectResultsClose(executorResults, cpuResults,
                                        GetParam().rtol,
                                        "harness vs CPU executor");
      std::printf("[ results  ] %s @%s: harness vs CPU executor within "
                  "%.3g of the largest |value|\n",
                  GetParam().name, function.c_str(), worst);
    }

    // Every kernel emulated, end to end.
    Memory cudaMemory = initial;
    runSchedule(program, cudaMemory, [&](int32_t index, Memory &m) {
      const kir::Kernel &kernel = program.kernels[index];
      emulated->run(kernel.name, operandBases(kernel, m));
    });
    double worst =
        expectResultsClose(cpuResults, results(program, cudaMemory),
                           GetParam().rtol,
                           "all kernels emulated vs CPU kernels");
    std::printf("[ results  ] %s @%s: all kernels emulated vs CPU kernels "
                "within %.3g of the largest |value|\n",
                GetParam().name, function.c_str(), worst);

    // The epilogues the executor hands to cuBLASLt, run as cuBLASLt
    // computes them (runGemm with the kind; their kernels not run).
    std::vector<kir::EpilogueKind> fused = cublasLtEpilogues(program);
    int fusedGemms = 0;
    for (kir::EpilogueKind kind : fused)
      fusedGemms += kind != kir::EpilogueKind::None;
    if (fusedGemms == 0)
      continue;
    auto fusedGemm = [&](const kir::Step &step, Memory &m) {
      kir::EpilogueKind kind = fused[&step - program.steps.data()];
      if (kind == kir::EpilogueKind::None)
        return false;
      runGemm(step.gemm, m, kind);
      return true;
    };

    // GEMM by GEMM, from the same memory: the fused GEMM against the GEMM
    // and its epilogue kernel on the CPU. They differ by the roundings to
    // C's type the fused epilogue skips (of the product, and of the bias
    // sum before a GELU; GemmEpilogue.cpp), so per element |fused -
    // unfused| <= unit (|acc| + |bias| + |unfused|) + 1e-5 (1 + |unfused|),
    // unit = 2^-7 bf16, 2^-10 f16, 2^-23 f32; the 1e-5 is for libm's tanh
    // against the CPU kernel's. The run goes on from the fused result, the
    // other kernels on the CPU.
    Memory fusedMemory = initial;
    double worstRatio = 0, worstError = 0;
    int64_t fusedElements = 0;
    runSchedule(
        program, fusedMemory,
        [&](int32_t index, Memory &m) {
          const kir::Kernel &kernel = program.kernels[index];
          cpu.run(kernel.name, operandBases(kernel, m), 0, kernel.numRows());
        },
        [&](const kir::Step &step, Memory &m) {
          kir::EpilogueKind kind = fused[&step - program.steps.data()];
          if (kind == kir::EpilogueKind::None)
            return false;
          const kir::GemmStep &g = step.gemm;
          Memory unfused = m;
          runGemm(g, unfused);
          const kir::Kernel &kernel = program.kernels[g.epilogue];
          cpu.run(kernel.name, operandBases(kernel, unfused), 0,
                  kernel.numRows());
          std::vector<double> magnitude;
          runGemm(g, m, kind, &magnitude);
          DType dtype = program.buffers[g.c.buffer].dtype;
          double unit = dtype == DType::BF16  ? 0x1p-7
                        : dtype == DType::F16 ? 0x1p-10
                                              : 0x1p-23;
          Elements want = unfused.elements(g.c), got = m.elements(g.c);
          size_t e = 0;
          for (int64_t batch = 0; batch < g.batch; ++batch)
            for (int64_t i = 0; i < g.m; ++i)
              for (int64_t j = 0; j < g.n; ++j, ++e) {
                int64_t ci = batch * g.c.strides[0] + i * g.c.strides[1] +
                             j * g.c.strides[2];
                double u = want.get(ci), f = got.get(ci);
                double error = std::fabs(u - f);
                double bound = unit * (magnitude[e] + std::fabs(u)) +
                               1e-5 * (1 + std::fabs(u));
                worstRatio = std::max(worstRatio, error / bound);
                worstError = std::max(worstError, error);
                ++fusedElements;
                if (!(error <= bound)) {
                  ADD_FAILURE()
                      << step.origin << " (" << kir::epilogueKindName(kind)
                      << "): element " << ci << ": unfused " << u << ", fused "
                      << f << ", bound " << bound;
                  return true;
                }
              }
          return true;
        });
    std::printf("[ cuBLASLt ] %s @%s: %d GEMMs with their epilogue as "
                "cuBLASLt runs it, %lld elements: max |fused - unfused| "
                "%.3g, at most %.3g of the bound\n",
                GetParam().name, function.c_str(), fusedGemms,
                (long long)fusedElements, worstError, worstRatio);
    double fusedRtol =
        GetParam().fusedRtol > 0 ? GetParam().fusedRtol : GetParam().rtol;
    double fusedWorst = expectResultsClose(
        executorResults, results(program, fusedMemory), fusedRtol,
        "cuBLASLt epilogues, CPU kernels vs CPU executor");

    // The fused program with every other kernel emulated, end to end.
    Memory fusedCuda = initial;
    runSchedule(
        program, fusedCuda,
        [&](int32_t index, Memory &m) {
          const kir::Kernel &kernel = program.kernels[index];
          emulated->run(kernel.name, operandBases(kernel, m));
        },
        fusedGemm);
    double fusedCudaWorst = expectResultsClose(
        executorResults, results(program, fusedCuda), fusedRtol,
        "cuBLASLt epilogues, kernels emulated vs CPU executor");
    std::printf("[ results  ] %s @%s: with cuBLASLt epilogues vs CPU "
                "executor within %.3g (CPU kernels), %.3g (emulated "
                "kernels) of the largest |value|\n",
                GetParam().name, function.c_str(), fusedWorst, fusedCudaWorst);
  }
}

//===----------------------------------------------------------------------===//
// Multi-tensor launches of the update step
//===----------------------------------------------------------------------===//

/// The batches' kernels compiled for emulation, each behind a wrapper
/// llmc_emu_batch_<name>(table, members, chunks, grid, block, partials,
/// total grid): a Sum batch launches both its kernels (the second with its
/// emitted block), others ignore the last two arguments.
struct EmulatedBatches {
  using RunFn = void (*)(const long long *, long long, long long,
                         const long long *, const int *, float *,
                         const long long *);
  std::unique_ptr<EmulatedLibrary> library;
  std::vector<RunFn> functions;

  static std::unique_ptr<EmulatedBatches>
  build(const cuda::KernelBatches &batches, std::string &error) {
    auto result = std::make_unique<EmulatedBatches>();
    std::string source = cuda::cudaPrelude() + batches.source;
    for (const cuda::CudaKernelBatch &batch : batches.batches) {
      bool sum = batch.kind == cuda::CudaKernelBatch::Kind::Sum;
      source += "extern \"C\" void llmc_emu_batch_" + batch.name +
                "(const long long *table, long long members, long long "
                "chunks, const long long *grid, const int *block, float "
                "*partials, const long long *totalGrid) {\n"
                "  llmc_emu::launch(grid, block, [&] { " + batch.name +
                "(table, members, chunks" + (sum ? ", partials" : "") +
                "); });\n";
      if (sum)
        source += "  const int totalBlock[3] = {" +
                  std::to_string(batch.totalLaunch.block[0]) +
                  ", 1, 1};\n  llmc_emu::launch(totalGrid, totalBlock, [&] "
                  "{ " + batch.totalName +
                  "(table, members, chunks, partials); });\n";
      source += "}\n";
    }
    result->library = EmulatedLibrary::build(source, error);
    if (!result->library)
      return nullptr;
    for (const cuda::CudaKernelBatch &batch : batches.batches) {
      void *fn = result->library->lookup("llmc_emu_batch_" + batch.name);
      if (!fn) {
        error = "no wrapper for " + batch.name;
        return nullptr;
      }
      result->functions.push_back(reinterpret_cast<RunFn>(fn));
    }
    return result;
  }

  /// Runs batch `index` over `table` (chunks of it in `chunks`) with
  /// `grid` blocks for the first kernel and `totalGrid` for a Sum's second
  /// (0: the emitted grids).
  void run(const cuda::CudaKernelBatch &batch, size_t index,
           std::vector<int64_t> &table, int64_t chunks, long long grid = 0,
           long long totalGrid = 0) const {
    std::vector<float> partials(std::max<int64_t>(chunks, 1), NAN);
    long long grids[3] = {grid > 0 ? grid : batch.launch.grid[0], 1, 1};
    long long totalGrids[3] = {
        totalGrid > 0 ? totalGrid : batch.totalLaunch.grid[0], 1, 1};
    functions[index](reinterpret_cast<const long long *>(table.data()),
                     (long long)batch.members(), chunks, grids,
                     batch.launch.block, partials.data(), totalGrids);
  }
};

/// The table of `batch` over `memory`'s host buffers.
std::vector<int64_t> hostTable(const kir::Program &program,
                               const cuda::CudaKernelBatch &batch,
                               Memory &memory, int64_t &chunks) {
  std::vector<uint64_t> bases;
  for (char *base : memory.bases)
    bases.push_back(reinterpret_cast<uint64_t>(base));
  return cuda::multiTensorTable(program, batch, bases, chunks);
}

// The update step of a GPT-2 whose embedding (2111 x 64 = 16.5 chunks) spans
// several chunks with a ragged last one, f32 and bf16 (AMP: f32 master
// weights, moments and gradients): the AdamW updates and the gradient
// zeroing run as a few multi-tensor launches instead of one launch per
// parameter, and the gradient norm's per-tensor sums of squares (a kernel
// per bias, row sums then their total per matrix) as one Sum batch of two
// launches. Every batch kernel compiles with NVRTC for sm_80 and sm_90;
// under emulation each launch matches the CPU kernels of its members
// (every other byte unchanged), and a run with every batch emulated matches
// the CPU end to end, through the 128-bit path (aligned members) and the
// scalar one (the table's aligned word cleared), with the emitted grid and
// with 3 blocks; its norm matches a double-precision reference and its
// parameters the CPU executor's.
TEST(CudaProgramTest, UpdateStepRunsAsFewMultiTensorLaunches) {
  const char *yaml = "name: mt\nn_layer: 1\nn_head: 2\nn_embd: 64\n"
                     "seq_len: 16\nvocab_size: 2111\n";
  for (PrecisionConfig::Kind kind :
       {PrecisionConfig::Kind::FP32, PrecisionConfig::Kind::BF16, PrecisionConfig::Kind::FP16}) {
    bool bf16 = kind == PrecisionConfig::Kind::BF16,
         fp16 = kind == PrecisionConfig::Kind::FP16;
    const char *label = bf16 ? "bf16" : fp16 ? "fp16" : "f32";
    SCOPED_TRACE(label);
    auto programs = trainingPrograms(yaml, 2, 8, amp(kind));
    ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
    const kir::Program &program = programs->back().second;
    ASSERT_EQ(programs->back().first, "update_step");

    cuda::KernelBatches batches = cuda::planKernelBatches(program);
    int64_t before = cuda::countKernelLaunches(program, {});
    int64_t after = cuda::countKernelLaunches(program, batches.batches);
    int64_t params = int64_t(program.params.size());
    std::printf("[ batches  ] %s @update_step: %lld parameters, %lld kernel "
                "launches -> %lld (%zu multi-tensor batches of",
                label, (long long)params, (long long)before,
                (long long)after, batches.batches.size());
    for (auto [index, batch] : llvm::enumerate(batches.batches))
      std::printf("%s %zu", index ? "," : "", batch.steps.size());
    std::printf(" steps)\n");
    std::set<int32_t> batched;
    const cuda::CudaKernelBatch *sum = nullptr;
    size_t sumIndex = 0;
    for (auto [index, batch] : llvm::enumerate(batches.batches)) {
      EXPECT_GE(batch.members(), 2u);
      for (int32_t step : batch.steps)
        EXPECT_TRUE(batched.insert(step).second) << "step " << step;
      if (batch.kind == cuda::CudaKernelBatch::Kind::Sum) {
        EXPECT_EQ(sum, nullptr) << "one Sum batch";
        sum = &batch;
        sumIndex = index;
      }
    }
    ASSERT_NE(sum, nullptr) << "the gradient norm's sums as a Sum batch";
    // Every gradient's sum of squares is a member; every kernel with a
    // reduction is in the batch; what runs alone is scalar arithmetic (the
    // norm from the totals, the clip factor, the step's scalars), and in
    // mixed precision one parameter's update: wpe's, the only decayed
    // parameter the step reads in f32 (no 16-bit copy to write), whose
    // kernel no other parameter's matches.
    EXPECT_EQ(int64_t(sum->members()), params);
    int64_t zeroings = 0, alone = 0, aloneUpdates = 0;
    for (auto [index, step] : llvm::enumerate(program.steps)) {
      const kir::Kernel &kernel = program.kernels[step.kernel];
      zeroings += batched.count(index) &&
                  llvm::StringRef(kernel.origin).starts_with("update grad.");
      if (!batched.count(index)) {
        ++alone;
        EXPECT_FALSE(kernel.hasReduction()) << kernel.name;
        if (kernel.numRows() * kernel.rowLength() == 1)
          continue;
        ++aloneUpdates;
        bool writesWpe = false;
        for (const kir::Access &access : kernel.operands)
          writesWpe = writesWpe || program.buffers[access.buffer].name == "wpe";
        EXPECT_TRUE(writesWpe) << kernel.name;
      }
    }
    EXPECT_EQ(aloneUpdates, bf16 || fp16 ? 1 : 0);
    EXPECT_EQ(zeroings, params) << "every gradient zeroed in a batch";
    // AdamW with and without weight decay and the zeroing (a launch each;
    // in bf16 the AdamW kernels that also write a weight's bf16 copy are
    // one more batch, and wpe's update runs alone), the sums (two
    // launches), and the scalar kernels: 4 (fp16: more, the loss scale's
    // bookkeeping).
    int64_t batchLaunches = 0;
    for (const cuda::CudaKernelBatch &batch : batches.batches)
      batchLaunches += batch.kind == cuda::CudaKernelBatch::Kind::Sum ? 2 : 1;
    EXPECT_EQ(after, batchLaunches + alone);
    if (!fp16) {
      EXPECT_EQ(after, (bf16 ? 5 : 3) + 2 + 4);
    }

    // NVRTC: the module as the CUDA compiler builds it.
    std::string why;
    if (cuda::nvrtcAvailable(&why)) {
      cuda::NvrtcOptions options;
      options.cacheEnabled = false;
      auto binaries =
          cuda::compileCuda(cuda::emitCudaModule(program) + batches.source,
                            "update_step.cu", options);
      ASSERT_TRUE(bool(binaries)) << llvm::toString(binaries.takeError());
      ASSERT_EQ(binaries->cubins.size(), 2u);
      for (const cuda::CudaKernelBatch &batch : batches.batches) {
        EXPECT_NE(binaries->ptx.find(".entry " + batch.name),
                  std::string::npos) << batch.name;
        if (!batch.totalName.empty()) {
          EXPECT_NE(binaries->ptx.find(".entry " + batch.totalName),
                    std::string::npos) << batch.totalName;
        }
      }
      std::printf("[ nvrtc    ] %s @update_step with its multi-tensor "
                  "kernels: sm_80 + sm_90 cubins + PTX\n", label);
    } else {
      std::printf("[ nvrtc    ] skipped: %s\n", why.c_str());
    }

    Compiled cpu = compileKernels(program.kernels);
    ASSERT_TRUE(cpu);
    std::string error;
    auto emulated = EmulatedBatches::build(batches, error);
    ASSERT_TRUE(emulated) << error;
    std::vector<int32_t> stepBatch(program.steps.size(), -1);
    for (auto [index, batch] : llvm::enumerate(batches.batches))
      for (int32_t step : batch.steps)
        stepBatch[step] = step == batch.steps.front() ? int32_t(index) : -2;
    auto runCpu = [&](const kir::Step &step, Memory &m) {
      const kir::Kernel &kernel = program.kernels[step.kernel];
      cpu.run(kernel.name, operandBases(kernel, m), 0, kernel.numRows());
    };
    auto runBatch = [&](size_t index, Memory &m, bool aligned,
                        long long grid) {
      const cuda::CudaKernelBatch &batch = batches.batches[index];
      int64_t chunks = 0;
      std::vector<int64_t> table = hostTable(program, batch, m, chunks);
      size_t stride = batch.contiguous.size() + 3;
      for (size_t member = 0; member < batch.members(); ++member) {
        EXPECT_EQ(table[member * stride + stride - 1], 1)
            << batch.name << ": host buffers are 16-byte aligned";
        if (!aligned)
          table[member * stride + stride - 1] = 0;
      }
      emulated->run(batch, index, table, chunks, grid, grid);
    };
    for (const kir::Step &step : program.steps)
      ASSERT_EQ(step.kind, kir::StepKind::Kernel) << "an update step of "
                                                     "kernel steps";

    // Launch by launch against the members' CPU kernels. A Sum batch
    // stores the members' totals only: the row sums of a two-kernel member
    // are a temporary nothing else reads, copied over from the CPU's run.
    Memory memory(program);
    fillInputs(program, memory, 11);
    Memory initial = memory;
    ErrorStats total;
    for (auto [index, step] : llvm::enumerate(program.steps)) {
      if (stepBatch[index] == -2)
        continue;
      if (stepBatch[index] < 0) {
        runCpu(step, memory);
        continue;
      }
      const cuda::CudaKernelBatch &batch = batches.batches[stepBatch[index]];
      Memory copy = memory;
      std::vector<const kir::Kernel *> members;
      for (int32_t member : batch.steps)
        runCpu(program.steps[member], memory);
      runBatch(stepBatch[index], copy, true, 0);
      if (batch.kind == cuda::CudaKernelBatch::Kind::Sum) {
        for (auto [reader, totaller] : batch.memberSteps) {
          members.push_back(&program.kernels[program.steps[totaller].kernel]);
          if (reader == totaller)
            continue;
          const kir::Kernel &rows = program.kernels[program.steps[reader].kernel];
          for (const kir::Instr &instr : rows.body)
            if (instr.op == kir::Op::Store) {
              int32_t buffer = rows.operands[instr.operand].buffer;
              std::memcpy(copy.bases[buffer], memory.bases[buffer],
                          program.buffers[buffer].bytes());
            }
        }
      } else {
        for (int32_t member : batch.steps)
          members.push_back(&program.kernels[program.steps[member].kernel]);
      }
      total.merge(compareAfterKernels(program, members, batch.name, memory,
                                      copy));
    }
    std::printf("[ batches  ] %s: %lld elements compared, max abs error "
                "%.3g, max error relative to max(1, |x|) %.3g\n",
                label, (long long)total.elements, total.maxAbs, total.maxRel);
    EXPECT_GT(total.elements, 3 * 2111 * 64) << "wte, its moments and grad";
    auto cpuResults = results(program, memory);
    auto executorResults = cpuExecutorResults(program, initial, cpuResults);
    ASSERT_FALSE(executorResults.empty());

    // The global norm in double from the initial gradients.
    double squares = 0;
    for (auto [index, buffer] : llvm::enumerate(program.buffers))
      if (buffer.kind == kir::BufferKind::State &&
          llvm::StringRef(buffer.name).starts_with("grad."))
        for (int64_t i = 0; i < buffer.numElements(); ++i) {
          double g = elementAt(initial.bases[index], buffer.dtype, i);
          squares += g * g;
        }
    // fp16's gradients are scaled by the loss scale, its norm is not.
    double lossScale = 1;
    for (auto [index, buffer] : llvm::enumerate(program.buffers))
      if (buffer.name == "loss_scale" &&
          buffer.kind != kir::BufferKind::Arena)
        lossScale = elementAt(initial.bases[index], buffer.dtype, 0);
    EXPECT_EQ(lossScale, fp16 ? 1024.0 : 1.0);
    double reference = std::sqrt(squares) / lossScale;
    // The bound: a sum of positive f32 terms added along a path of at most
    // k additions is within k·u of the exact sum (u = 2^-24); the square
    // root halves that and adds u. Here: per thread over a chunk
    // (8192 / block), a block's two 32-way trees (10), then per member its
    // chunks per thread (<= 1 here: 17 chunks, 256 threads) and the trees
    // (10), then the totals one after another (one per parameter).
    const double u = 0x1p-24;
    double k = double(cuda::kMultiTensorChunk / sum->launch.block[0]) + 10 +
               1 + 10 + double(params);
    double bound = 0.5 * k * u + u;
    auto normOf = [](const std::vector<std::pair<std::string,
                                                 std::vector<float>>> &r) {
      for (const auto &[name, values] : r)
        if (name == "grad_norm")
          return double(values.at(0));
      ADD_FAILURE() << "no grad_norm result";
      return double(NAN);
    };
    if (!fp16) {
      EXPECT_GT(reference, 1.0) << "the clip factor takes part";
    }

    // End to end: 128-bit path and emitted grid, scalar path and 3 blocks.
    for (bool aligned : {true, false}) {
      Memory run = initial;
      for (auto [index, step] : llvm::enumerate(program.steps)) {
        if (stepBatch[index] == -1)
          runCpu(step, run);
        else if (stepBatch[index] >= 0)
          runBatch(stepBatch[index], run, aligned, aligned ? 0 : 3);
      }
      std::string what = std::string("multi-tensor run, ") +
                         (aligned ? "128-bit accesses"
                                  : "scalar accesses, 3 blocks");
      auto runResults = results(program, run);
      double worst =
          expectResultsClose(cpuResults, runResults, 1e-6, what + " vs CPU kernels");
      double worstExecutor = expectResultsClose(
          executorResults, runResults, 1e-6, what + " vs CPU executor");
      double norm = normOf(runResults);
      double normError = std::fabs(norm - reference) / reference;
      double cpuNormError =
          std::fabs(normOf(executorResults) - reference) / reference;
      EXPECT_LE(normError, bound) << what << ": norm " << norm
                                  << " vs double " << reference;
      std::printf("[ results  ] %s: multi-tensor run (%s) vs CPU kernels "
                  "within %.3g, vs CPU executor within %.3g of the largest "
                  "|value|; grad norm %.9g: %.3g from the double reference "
                  "(relative; bound %.3g), the CPU executor's %.3g\n",
                  label, aligned ? "128-bit" : "scalar, 3 blocks", worst,
                  worstExecutor, norm, normError, bound, cpuNormError);
    }

    // The Sum batch alone, on the initial gradients, member by member
    // against double: through the emitted table (128-bit path), the
    // largest member 3 elements short (its last chunk ends inside a
    // 128-bit access: the tail loop), and that member's gradient copied
    // 4 bytes past a 16-byte boundary (not aligned: the scalar path). The
    // same table gives the same bits with any grid, run after run.
    const kir::Kernel &reader =
        program.kernels[program.steps[sum->memberSteps[0].first].kernel];
    ASSERT_EQ(std::count(sum->contiguous.begin(), sum->contiguous.end(), 1), 1);
    size_t input = std::find(sum->contiguous.begin(), sum->contiguous.end(),
                             1) - sum->contiguous.begin();
    size_t output = 0;
    for (const kir::Instr &instr : reader.body)
      if (instr.op == kir::Op::Store)
        output = size_t(instr.operand);
    // A member's total in double: the reading kernel's body evaluated per
    // element over the table's operands (f32: the square, fp16: the square
    // of the gradient times the inverse loss scale).
    auto memberInDouble = [&](const int64_t *entry, int64_t count) {
      double acc = 0;
      std::vector<double> v(reader.body.size());
      for (int64_t i = 0; i < count; ++i)
        for (auto [j, instr] : llvm::enumerate(reader.body)) {
          auto arg = [&](size_t n) { return v[instr.args[n]]; };
          switch (instr.op) {
          case kir::Op::Load:
            v[j] = elementAt(reinterpret_cast<const char *>(
                                 entry[instr.operand]),
                             reader.operands[instr.operand].dtype,
                             sum->contiguous[instr.operand] ? i : 0);
            break;
          case kir::Op::Const:
            v[j] = instr.imm;
            break;
          case kir::Op::Mul:
            v[j] = arg(0) * arg(1);
            break;
          case kir::Op::Div:
            v[j] = arg(0) / arg(1);
            break;
          case kir::Op::ReduceSum:
            acc += arg(0);
            break;
          case kir::Op::Store:
            break;
          default:
            ADD_FAILURE() << "op " << int(instr.op) << " not evaluated here";
            return double(NAN);
          }
        }
      return acc;
    };
    size_t stride = sum->contiguous.size() + 3;
    std::vector<uint64_t> bases;
    for (char *base : initial.bases)
      bases.push_back(reinterpret_cast<uint64_t>(base));
    size_t largest = 0;
    int64_t largestCount = 0, smallestCount = INT64_MAX, chunks = 0;
    std::vector<int64_t> table =
        cuda::multiTensorTable(program, *sum, bases, chunks);
    for (size_t m = 0; m < sum->members(); ++m) {
      int64_t count = table[m * stride + stride - 3];
      smallestCount = std::min(smallestCount, count);
      if (count > largestCount) {
        largest = m;
        largestCount = count;
      }
    }
    EXPECT_GT(largestCount, 16 * cuda::kMultiTensorChunk) << "a long member";
    EXPECT_LT(smallestCount, cuda::kMultiTensorChunk) << "a short one";
    // The largest member's gradient, 4 bytes off alignment.
    const kir::Kernel &largestReader = program.kernels
        [program.steps[sum->memberSteps[largest].first].kernel];
    int32_t largestBuffer = largestReader.operands[input].buffer;
    std::vector<char> shifted(program.buffers[largestBuffer].bytes() + 32);
    char *moved = shifted.data() +
                  (16 - reinterpret_cast<uintptr_t>(shifted.data()) % 16) + 4;
    std::memcpy(moved, initial.bases[largestBuffer],
                program.buffers[largestBuffer].bytes());

    auto totals = [&](const std::vector<int64_t> &t) {
      std::vector<uint32_t> bits;
      for (size_t m = 0; m < sum->members(); ++m) {
        float value;
        std::memcpy(&value, reinterpret_cast<const void *>(t[m * stride + output]),
                    4);
        uint32_t word;
        std::memcpy(&word, &value, 4);
        bits.push_back(word);
      }
      return bits;
    };
    struct Variant {
      const char *name;
      int64_t shortBy;
      bool unaligned;
    };
    double worstRelative = 0, worstBound = 0;
    for (Variant variant : {Variant{"emitted table", 0, false},
                            Variant{"largest member 3 short", 3, false},
                            Variant{"largest member unaligned", 0, true}}) {
      SCOPED_TRACE(variant.name);
      std::vector<uint64_t> variantBases = bases;
      if (variant.unaligned)
        variantBases[largestBuffer] = reinterpret_cast<uint64_t>(moved);
      int64_t variantChunks = 0;
      std::vector<int64_t> t =
          cuda::multiTensorTable(program, *sum, variantBases, variantChunks);
      ASSERT_EQ(variantChunks, chunks);
      for (size_t m = 0; m < sum->members(); ++m)
        EXPECT_EQ(t[m * stride + stride - 1],
                  variant.unaligned && m == largest ? 0 : 1) << "member " << m;
      t[largest * stride + stride - 3] -= variant.shortBy;
      emulated->run(*sum, sumIndex, t, chunks);
      std::vector<uint32_t> first = totals(t);
      for (size_t m = 0; m < sum->members(); ++m) {
        int64_t count = t[m * stride + stride - 3];
        double want = memberInDouble(t.data() + m * stride, count);
        float got;
        std::memcpy(&got, &first[m], 4);
        // As above, per member: per thread, two trees, its chunks, two trees.
        int64_t memberChunks =
            (count + cuda::kMultiTensorChunk - 1) / cuda::kMultiTensorChunk;
        double memberBound =
            (double(cuda::kMultiTensorChunk / sum->launch.block[0]) + 10 +
             double((memberChunks + sum->totalLaunch.block[0] - 1) /
                    sum->totalLaunch.block[0]) +
             10) *
            u;
        double relative = std::fabs(got - want) / want;
        EXPECT_LE(relative, memberBound)
            << "member " << m << ": " << got << " vs double " << want;
        worstRelative = std::max(worstRelative, relative);
        worstBound = std::max(worstBound, memberBound);
      }
      // Any grid: one block, 3 and 2, 7 and 1; and the emitted one again.
      for (auto [grid, totalGrid] :
           {std::pair<long long, long long>{1, 1}, {3, 2}, {7, 1}, {0, 0}}) {
        emulated->run(*sum, sumIndex, t, chunks, grid, totalGrid);
        EXPECT_EQ(totals(t), first) << "grids " << grid << ", " << totalGrid;
      }
    }
    std::printf("[ sums     ] %s: %zu members in %lld chunks (%lld elements "
                "the longest): every total within %.3g of double (relative; "
                "bound %.3g), emitted table, a ragged tail, an unaligned "
                "member; the same bits with grids 1/1, 3/2, 7/1 and the "
                "emitted one\n",
                label, sum->members(), (long long)chunks,
                (long long)largestCount, worstRelative, worstBound);
  }
}

// The table of a multi-tensor launch (ir/kernel/CudaModule.h): per member
// its operands' addresses, count, first chunk and alignment, from the
// bases the executor passes.
TEST(CudaProgramTest, MultiTensorTableAddressesAndChunks) {
  auto programs = trainingPrograms(
      "name: mt\nn_layer: 1\nn_head: 2\nn_embd: 64\nseq_len: 16\n"
      "vocab_size: 2111\n", 2, 8);
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  const kir::Program &program = programs->back().second;
  cuda::KernelBatches batches = cuda::planKernelBatches(program);
  ASSERT_FALSE(batches.batches.empty());
  // Buffer b at 0x100000 * (b + 1), one of them 8 bytes off.
  const cuda::CudaKernelBatch &batch = batches.batches.back();
  const kir::Kernel &first = program.kernels[program.steps[batch.steps[0]].kernel];
  ASSERT_TRUE(batch.contiguous[0]);
  int32_t shifted = first.operands[0].buffer;
  std::vector<uint64_t> bases;
  for (size_t b = 0; b < program.buffers.size(); ++b)
    bases.push_back(0x100000ull * (b + 1) + (int32_t(b) == shifted ? 8 : 0));
  int64_t chunks = 0;
  std::vector<int64_t> table =
      cuda::multiTensorTable(program, batch, bases, chunks);
  size_t stride = first.operands.size() + 3;
  ASSERT_EQ(table.size(), stride * batch.steps.size());
  int64_t expectedChunks = 0;
  for (size_t m = 0; m < batch.steps.size(); ++m) {
    const kir::Kernel &kernel =
        program.kernels[program.steps[batch.steps[m]].kernel];
    const int64_t *entry = table.data() + m * stride;
    bool aligned = true;
    for (size_t o = 0; o < kernel.operands.size(); ++o) {
      const kir::Access &access = kernel.operands[o];
      uint64_t address = bases[access.buffer] +
                         access.offset * kir::dtypeBytes(access.dtype);
      EXPECT_EQ(uint64_t(entry[o]), address) << "member " << m;
      aligned &= !batch.contiguous[o] || address % 16 == 0;
    }
    EXPECT_EQ(entry[stride - 3], kernel.numRows() * kernel.rowLength());
    EXPECT_EQ(entry[stride - 2], expectedChunks);
    EXPECT_EQ(entry[stride - 1], aligned ? 1 : 0);
    expectedChunks += (entry[stride - 3] + cuda::kMultiTensorChunk - 1) /
                      cuda::kMultiTensorChunk;
  }
  EXPECT_EQ(table[stride - 1], 0) << "the member on the shifted buffer";
  EXPECT_EQ(chunks, expectedChunks);
}

// Tensor parallelism (tp = 2, the last rank, V = 97 padded to 2 x 49):
// the vocabulary-parallel lookup, cross-entropy statistics and their
// gradients are kernels of the CUDA module like any other, so NVRTC must
// compile them. The programs hold collectives, which the single-device
// comparison above cannot run; the CPU side of the same programs is
// checked against one process by test/dist/tp.test.
TEST(CudaProgramTest, TensorParallelProgramsCompileWithNvrtc) {
  std::string why;
  if (!cuda::nvrtcAvailable(&why))
    GTEST_SKIP() << why;
  TrainingStepOptions options;
  options.parallel.tp = 2;
  options.tpRank = 1;
  auto programs = trainingPrograms(
      "name: tp\nn_layer: 1\nn_head: 2\nn_embd: 32\nseq_len: 16\n"
      "vocab_size: 97\n", 2, 8, options);
  ASSERT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  for (auto &[function, program] : *programs) {
    SCOPED_TRACE("@" + function);
    ASSERT_EQ(kir::verifyProgram(program), "");
    int collectives = 0;
    for (const kir::Step &step : program.steps)
      collectives += step.kind == kir::StepKind::CollectiveStart;
    if (function != "update_step") {
      EXPECT_GT(collectives, 0) << "no tp all-reduce: not a tp program";
    }
    std::string source = cuda::emitCudaModule(program);
    cuda::NvrtcOptions nvrtc;
    nvrtc.cacheEnabled = false;
    auto binaries = cuda::compileCuda(source, function + ".cu", nvrtc);
    ASSERT_TRUE(bool(binaries)) << llvm::toString(binaries.takeError());
    for (const kir::Kernel &kernel : program.kernels)
      EXPECT_NE(binaries->ptx.find(".entry " + kernel.name), std::string::npos)
          << kernel.name;
    std::printf("[ nvrtc    ] tp rank 1 of 2 @%s: %zu kernels, %d "
                "collectives\n",
                function.c_str(), program.kernels.size(), collectives);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Programs, CudaProgramTest, ::testing::ValuesIn(kPrograms),
    [](const ::testing::TestParamInfo<ProgramCase> &info) {
      return std::string(info.param.name);
    });

} // namespace
