// A compiled program: buffers with their planned places, kernels in the
// kernel IR, and the schedule of steps that runs them. It is what an
// artifact stores and what a runtime executes; like the kernel IR it is
// target-neutral (a backend decides how a Gemm or Attention step runs).
#ifndef LLMC_IR_KERNEL_PROGRAM_H
#define LLMC_IR_KERNEL_PROGRAM_H

#include "ir/kernel/KernelIR.h"
#include "ir/kernel/StepScalar.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::kir {

/// Where a buffer lives. Parameters and inputs are supplied by the runtime
/// (one allocation each); every intermediate, outputs included, has a
/// planned byte offset in the one arena. State buffers are persistent
/// tensors that are not parameters (accumulated gradients, optimizer
/// moments): like parameters they outlive a run, are bound by name to the
/// runtime's persistent store (shared between programs) and start as zeros,
/// or as Buffer::initialValue (the loss scale of dynamic loss scaling).
enum class BufferKind : uint8_t { Param, Input, Arena, State };

/// Whether a buffer of this kind persists across runs (Param, State).
inline bool isPersistent(BufferKind kind) {
  return kind == BufferKind::Param || kind == BufferKind::State;
}

struct Buffer {
  std::string name; // parameter/input name, or the value it holds
  BufferKind kind = BufferKind::Arena;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t offset = 0; // Arena: byte offset, a multiple of kArenaAlignment
  int32_t firstStep = 0, lastStep = 0; // Arena: live range over steps
  int64_t idBound = 0; // Input ids: every id must lie in [0, idBound); 0: any
  // State: the value every element has when the store first creates the
  // buffer (`llmc.state_init`); a run resumed from a checkpoint overwrites it.
  double initialValue = 0.0;

  int64_t numElements() const;
  int64_t bytes() const { return numElements() * dtypeBytes(dtype); }
};

/// Arena offsets are aligned for 512-bit vector loads (and CUDA's 128-bit).
constexpr int64_t kArenaAlignment = 64;

/// One operand of a library call: elements of `buffer` from `offset` with
/// explicit strides (in elements), one per dimension of the call.
struct View {
  int32_t buffer = -1;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

/// What a GEMM's epilogue kernel computes, when it is one a GEMM library
/// (cuBLASLt) can run itself, in f32 on the f32 accumulator, C the
/// product, in place (bias and aux stored in C's type: f32, bf16 or f16):
///   Bias      C[r, j] = C[r, j] + bias[j]                 (EPILOGUE_BIAS)
///   GeluBias  C[r, j] = gelu(C[r, j] + bias[j])           (EPILOGUE_GELU_BIAS)
///   Gelu      C[r, j] = gelu(C[r, j])                     (EPILOGUE_GELU)
///   DGelu     C[r, j] = C[r, j] * gelu'(aux[r, j])        (EPILOGUE_DGELU)
/// gelu is the tanh approximation and gelu' its derivative. None: no
/// epilogue, or one of no such kind (the kernel runs).
enum class EpilogueKind : uint8_t { None, Bias, GeluBias, Gelu, DGelu };

/// "none", "bias", "gelu_bias", "gelu", "dgelu".
const char *epilogueKindName(EpilogueKind kind);

/// C[b] = A[b] x B[b] for b < batch, row-major views. A and B share one
/// float type (f32, f16 or bf16), C has any float type: the products
/// accumulate in f32 and a narrow C gets the result rounded to nearest
/// even (an accumulating C adds in f32 and rounds once). The buffers'
/// dtypes say which (no field here); the views:
///   A: [batch, m, k] (or [batch, k, m] if transA), B: [batch, k, n] (or
///   [batch, n, k] if transB), C: [batch, m, n] with unit column stride.
/// Each 2-D slice has one unit stride (a leading dimension for BLAS); the
/// batch stride may be 0 (a shared weight). `epilogue`, when set, is a
/// kernel index: a kernel without reductions that reads C, whose rows are
/// C's batch * m rows in order (row length n; its domain is the product's
/// shape, e.g. [B, T, N]); a backend runs it on each block of rows of C
/// as soon as the block is computed. `accumulate`: C[b] += A[b] x B[b]
/// (BLAS beta = 1) instead, for a gradient summed straight into its
/// persistent buffer; such a step has no epilogue.
///
/// `epilogueKind` says what the epilogue kernel computes when it is one a
/// GEMM library can run itself (codegen classifies it once, at lowering);
/// a backend may then run that instead of the kernel, or the kernel.
///
/// `sparseWeight`: B is a weight a backend may multiply from a 2:4
/// compressed copy (runtime/Cpu/SparseMatmul.h) when its values are 2:4: a
/// Param buffer read as [n, k] (transB, unit stride along k, one for the
/// whole batch), f32, k a multiple of 4, C written whole. Codegen marks
/// the steps that qualify; whether the values are 2:4 is known only when
/// weights are loaded, so the backend checks them once per load and runs
/// the dense product where they are not (or where dense is faster).
struct GemmStep {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  View a, b, c; // strides: [batch, rows, cols] of each operand as stored
  int32_t epilogue = -1;
  bool accumulate = false;
  EpilogueKind epilogueKind = EpilogueKind::None;
  View epilogueBias; // Bias, GeluBias: [n] of C's type, strides {1}
  View epilogueAux;  // DGelu: [m, n] of C's type, strides {ld, 1} (batch 1)
  bool sparseWeight = false;
};

/// Scaled dot-product attention per (batch, head):
///   out[t] = sum_s softmax_s(scale * q[t].k[s] (+ causal mask)) v[s]
///   lse[t] = log sum_s exp(scale * q[t].k[s])  (over unmasked s)
/// q, out: [batch, heads, seq, headDim] and k, v: [batch, heads, kvSeq,
/// headDim] views (strides per dim) of one float type (f32, f16 or bf16:
/// computed in f32, out rounded to nearest even); lse: [batch, heads, seq],
/// f32. The causal mask lets query t see keys s <= t + kvSeq - seq, or,
/// with `positions` (an i32 [batch, seq] view: each query's position in a
/// KV cache of kvSeq slots), keys s <= positions[b][t] (clamped to kvSeq -
/// 1): decoding reads only the cache's filled prefix, so its cost grows
/// with the position, not with kvSeq. kvSeq 0 means seq.
struct AttentionStep {
  int64_t batch = 0, heads = 0, seq = 0, headDim = 0;
  float scale = 1.0f;
  bool causal = true;
  View q, k, v, out, lse;
  int64_t kvSeq = 0;
  View positions; // buffer -1: none

  int64_t keys() const { return kvSeq > 0 ? kvSeq : seq; }
  bool positioned() const { return positions.buffer >= 0; }
};

/// The gradients of AttentionStep per (batch, head), recomputing the
/// probabilities from q, k and the forward's lse instead of storing them
/// (flash attention's backward):
///   p[t][s] = exp(scale * q[t].k[s] - lse[t])   (0 where causal masks s > t)
///   dv[s]   = sum_t p[t][s] dout[t]
///   dp[t][s] = dout[t].v[s],  delta[t] = dout[t].out[t]
///   ds[t][s] = p[t][s] (dp[t][s] - delta[t])
///   dq[t]   = scale * sum_s ds[t][s] k[s],  dk[s] = scale * sum_t ds[t][s] q[t]
/// dout, q, k, v, out, dq, dk, dv: [batch, heads, seq, headDim] views of one
/// float type (computed in f32, dq, dk, dv rounded to nearest even) with
/// unit headDim stride; lse: [batch, heads, seq], f32. dq, dk and dv are
/// written whole (not accumulated) and overlap no input.
struct AttentionGradStep {
  int64_t batch = 0, heads = 0, seq = 0, headDim = 0;
  float scale = 1.0f;
  bool causal = true;
  View dout, q, k, v, out, lse;
  View dq, dk, dv;
};

/// The table gradient of an embedding lookup, a deterministic scatter-add:
///   out[r][c] = sum over positions p with ids[p] == r, in increasing p,
///               of grad[p][c]          (0 for rows no id selects)
/// ids: [positions] i32 or i64 (the buffer's dtype), each in [0, rows)
/// or negative, selecting no row (computed rows of a tp rank's block of
/// the vocabulary: -1 for the other ranks' ids);
/// grad: [positions, channels] f32; out: [rows, channels] f32, written
/// whole, unit channel stride. A backend may parallelize over rows and
/// channels but must sum each row's positions in increasing order (no
/// atomics), so results are bit-identical from run to run. `accumulate`:
/// the sums start from out's values instead of 0 (out += the scatter).
struct EmbeddingGradStep {
  int64_t positions = 0, rows = 0, channels = 0;
  View ids, grad, out;
  bool accumulate = false;
};

/// The collectives of the llmc dialect (llmc.all_reduce, reduce_scatter,
/// all_gather, broadcast_from) and its point-to-point transfers between
/// pipeline stages (llmc.pipeline_send, pipeline_recv).
enum class CollectiveKind : uint8_t { AllReduce, ReduceScatter, AllGather,
                                      Broadcast, Send, Recv };
enum class Reduction : uint8_t { Sum, Avg, Max };

/// "all_reduce", "reduce_scatter", "all_gather", "broadcast".
const char *collectiveKindName(CollectiveKind kind);
/// "sum", "avg", "max".
const char *reductionName(Reduction reduction);

/// Communication between the `axisSize` ranks of mesh axis `axis` ("dp",
/// "tp", "pp"), on contiguous elements of one dtype (the buffers'):
///   AllReduce      output[i] = reduce over ranks of input[i], i < count
///   ReduceScatter  output[i] = reduce over ranks of input[r*count/size + i]
///                  on rank r, i < count / axisSize
///   AllGather      output[s*count + i] = input[i] of rank s, i < count
///   Broadcast      output[i] = input[i] of rank `root`
///   Send           input goes to rank `root`; output (one f32) = 0, the
///                  placeholder loss of a stage before the last
///   Recv           output[i] = rank `root`'s Send input[i]; no input
/// (`count`: the input's elements; a Recv's output's). Send and Recv pair
/// up in program order between two ranks (one direction per pair of
/// stages: activations forward, gradients back), so they need no tag; a
/// send copies its input and never waits for the receiver. A collective is two steps: a
/// CollectiveStart issues it and returns, and a CollectiveWait (with a copy
/// of the start's fields and `start`, the start step's index) completes it.
/// The steps between them run while the data moves (the backward overlaps
/// the gradient all-reduce); both steps name the input and the output, so
/// the memory plan keeps the two alive, untouched, from start to wait.
struct CollectiveStep {
  CollectiveKind kind = CollectiveKind::AllReduce;
  Reduction reduction = Reduction::Sum; // AllReduce, ReduceScatter
  std::string axis;
  int64_t axisSize = 1;
  int64_t root = 0;  // Broadcast
  int64_t count = 0; // input elements
  View input, output; // strides {1}
  int32_t start = -1; // CollectiveWait: its CollectiveStart's step index

  /// The output's elements.
  int64_t outputCount() const;
};

enum class StepKind : uint8_t { Kernel, Gemm, Attention, AttentionGrad,
                                EmbeddingGrad, CollectiveStart,
                                CollectiveWait };

struct Step {
  StepKind kind = StepKind::Kernel;
  int32_t kernel = -1; // Kernel: index into Program::kernels
  GemmStep gemm;
  AttentionStep attention;
  AttentionGradStep attentionGrad;
  EmbeddingGradStep embeddingGrad;
  CollectiveStep collective; // CollectiveStart, CollectiveWait
  std::string origin; // the llmc ops this step runs, for people
};

/// How a library step uses one of its views' buffer.
enum class ViewRole : uint8_t { Read, Written, ReadWritten };

/// The one list of a library step's views: calls
/// fn(label, view, role, shape) for each view the step uses, in the order
/// the step declares them. `label` is how the printer and the verifier name
/// it; `shape` holds the dims its strides index. Epilogue operands are
/// visited only for the epilogue kinds that read them. The memory plan,
/// the verifiers (program and artifact) and the printer walk views only
/// through these, so a new view is added here once. `View` is deduced so
/// that a const step gives const views.
template <typename G, typename Fn>
void forEachGemmView(G &g, Fn &&fn) {
  fn("A", g.a, ViewRole::Read,
     std::vector<int64_t>{g.batch, g.transA ? g.k : g.m,
                          g.transA ? g.m : g.k});
  fn("B", g.b, ViewRole::Read,
     std::vector<int64_t>{g.batch, g.transB ? g.n : g.k,
                          g.transB ? g.k : g.n});
  fn("C", g.c, g.accumulate ? ViewRole::ReadWritten : ViewRole::Written,
     std::vector<int64_t>{g.batch, g.m, g.n});
  if (g.epilogueKind == EpilogueKind::Bias ||
      g.epilogueKind == EpilogueKind::GeluBias)
    fn("bias", g.epilogueBias, ViewRole::Read, std::vector<int64_t>{g.n});
  if (g.epilogueKind == EpilogueKind::DGelu)
    fn("aux", g.epilogueAux, ViewRole::Read, std::vector<int64_t>{g.m, g.n});
}

template <typename A, typename Fn>
void forEachAttentionView(A &a, Fn &&fn) {
  std::vector<int64_t> shape = {a.batch, a.heads, a.seq, a.headDim};
  std::vector<int64_t> keys = {a.batch, a.heads, a.keys(), a.headDim};
  fn("q", a.q, ViewRole::Read, shape);
  fn("k", a.k, ViewRole::Read, keys);
  fn("v", a.v, ViewRole::Read, keys);
  fn("out", a.out, ViewRole::Written, shape);
  fn("lse", a.lse, ViewRole::Written,
     std::vector<int64_t>{a.batch, a.heads, a.seq});
  if (a.positioned())
    fn("positions", a.positions, ViewRole::Read,
       std::vector<int64_t>{a.batch, a.seq});
}

template <typename A, typename Fn>
void forEachAttentionGradView(A &a, Fn &&fn) {
  std::vector<int64_t> shape = {a.batch, a.heads, a.seq, a.headDim};
  fn("dout", a.dout, ViewRole::Read, shape);
  fn("q", a.q, ViewRole::Read, shape);
  fn("k", a.k, ViewRole::Read, shape);
  fn("v", a.v, ViewRole::Read, shape);
  fn("out", a.out, ViewRole::Read, shape);
  fn("lse", a.lse, ViewRole::Read,
     std::vector<int64_t>{a.batch, a.heads, a.seq});
  fn("dq", a.dq, ViewRole::Written, shape);
  fn("dk", a.dk, ViewRole::Written, shape);
  fn("dv", a.dv, ViewRole::Written, shape);
}

template <typename E, typename Fn>
void forEachEmbeddingGradView(E &e, Fn &&fn) {
  fn("ids", e.ids, ViewRole::Read, std::vector<int64_t>{e.positions});
  fn("grad", e.grad, ViewRole::Read,
     std::vector<int64_t>{e.positions, e.channels});
  fn("out", e.out, e.accumulate ? ViewRole::ReadWritten : ViewRole::Written,
     std::vector<int64_t>{e.rows, e.channels});
}

template <typename C, typename Fn>
void forEachCollectiveView(C &c, Fn &&fn) {
  if (c.kind != CollectiveKind::Recv)
    fn("input", c.input, ViewRole::Read, std::vector<int64_t>{c.count});
  fn("output", c.output, ViewRole::Written,
     std::vector<int64_t>{c.outputCount()});
}

/// The views of `step`'s library call (none for a kernel step).
template <typename S, typename Fn> void forEachView(S &step, Fn &&fn) {
  switch (step.kind) {
  case StepKind::Kernel:
    break;
  case StepKind::Gemm:
    forEachGemmView(step.gemm, fn);
    break;
  case StepKind::Attention:
    forEachAttentionView(step.attention, fn);
    break;
  case StepKind::AttentionGrad:
    forEachAttentionGradView(step.attentionGrad, fn);
    break;
  case StepKind::EmbeddingGrad:
    forEachEmbeddingGradView(step.embeddingGrad, fn);
    break;
  case StepKind::CollectiveStart:
  case StepKind::CollectiveWait:
    forEachCollectiveView(step.collective, fn);
    break;
  }
}

/// A named program argument or result and the buffer that holds it.
struct Binding {
  std::string name;
  int32_t buffer = -1;
  // The step scalar it is (ir/kernel/StepScalar.h), None for the others;
  // assignStepScalars sets it from the name.
  StepScalar scalar = StepScalar::None;
};

struct Program {
  std::string function;   // the MLIR function it was compiled from
  std::string modelJson;  // the `llmc.model` config, as JSON (may be empty)
  std::vector<Binding> params;  // in function argument order
  std::vector<Binding> inputs;  // tokens, targets, step scalars (rng, ...)
  std::vector<Binding> outputs; // loss, logits, ...
  // Persistent non-parameter buffers (BufferKind::State), in argument order.
  std::vector<Binding> states;
  // Param and State buffers a run writes in place (`llmc.updates` results):
  // after a run, buffer `buffer` holds the new value of `name`.
  std::vector<Binding> updates;
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<Step> steps;
  int64_t arenaBytes = 0; // the planned peak: max over buffers of offset+bytes
  // AdamW's (beta1, beta2) that the update's kernels were compiled with,
  // recorded when the program takes bias corrections (the runtime derives
  // them from these: biasCorrection); empty otherwise.
  std::vector<double> adamBetas;
};

/// Sets each binding's `scalar` from its name and list (inputs: the
/// table's Input rows; outputs: Output and State rows; states: State
/// rows). The one place that tells a step scalar by its name: the lowering
/// calls it on every program it builds.
void assignStepScalars(Program &program);

/// The binding of `scalar` in `list`, or null when the program lacks it.
const Binding *findStepScalar(const std::vector<Binding> &list,
                              StepScalar scalar);

/// The value of the bias-correction input `scalar` (BiasCorrection1 or 2)
/// at step `t` (1-based): 1 / (1 - beta^t) with the beta `program` records.
/// An error when the program records no betas.
llvm::Expected<double> biasCorrection(const Program &program, StepScalar scalar,
                                      int64_t t);

/// Checks every index, shape and view against its buffer bounds and every
/// kernel with verifyKernel. Empty when well formed, else what is wrong.
std::string verifyProgram(const Program &program);

/// The readable form `llmc inspect` prints.
void printProgram(llvm::raw_ostream &os, const Program &program);

/// FLOPs of one execution of the schedule (2mnk per GEMM, attention's two
/// products and its gradient's five, an embedding gradient's adds, kernels
/// by countFlops).
int64_t countFlops(const Program &program);

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_PROGRAM_H
