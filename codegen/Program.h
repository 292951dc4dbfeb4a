// A compiled program: buffers with their planned places, kernels in the
// kernel IR, and the schedule of steps that runs them. It is what an
// artifact stores and what a runtime executes; like the kernel IR it is
// target-neutral (a backend decides how a Gemm or Attention step runs).
#ifndef LLMC_CODEGEN_PROGRAM_H
#define LLMC_CODEGEN_PROGRAM_H

#include "codegen/KernelIR.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::kir {

/// Where a buffer lives. Parameters and inputs are supplied by the runtime
/// (one allocation each); every intermediate, outputs included, has a
/// planned byte offset in the one arena.
enum class BufferKind : uint8_t { Param, Input, Arena };

struct Buffer {
  std::string name; // parameter/input name, or the value it holds
  BufferKind kind = BufferKind::Arena;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t offset = 0; // Arena: byte offset, a multiple of kArenaAlignment
  int32_t firstStep = 0, lastStep = 0; // Arena: live range over steps
  int64_t idBound = 0; // Input ids: every id must lie in [0, idBound); 0: any

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

/// C[b] = A[b] x B[b] for b < batch, all f32 row-major views:
///   A: [batch, m, k] (or [batch, k, m] if transA), B: [batch, k, n] (or
///   [batch, n, k] if transB), C: [batch, m, n] with unit column stride.
/// Each 2-D slice has one unit stride (a leading dimension for BLAS); the
/// batch stride may be 0 (a shared weight). `epilogue`, when set, is a
/// kernel index: a kernel without reductions that reads C, whose rows are
/// C's batch * m rows in order (row length n; its domain is the product's
/// shape, e.g. [B, T, N]); a backend runs it on each block of rows of C
/// as soon as the block is computed.
struct GemmStep {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  View a, b, c; // strides: [batch, rows, cols] of each operand as stored
  int32_t epilogue = -1;
};

/// Scaled dot-product attention per (batch, head):
///   out[t] = sum_s softmax_s(scale * q[t].k[s] (+ causal mask)) v[s]
///   lse[t] = log sum_s exp(scale * q[t].k[s])  (over unmasked s)
/// q, k, v, out: [batch, heads, seq, headDim] views (strides per dim);
/// lse: [batch, heads, seq].
struct AttentionStep {
  int64_t batch = 0, heads = 0, seq = 0, headDim = 0;
  float scale = 1.0f;
  bool causal = true;
  View q, k, v, out, lse;
};

enum class StepKind : uint8_t { Kernel, Gemm, Attention };

struct Step {
  StepKind kind = StepKind::Kernel;
  int32_t kernel = -1; // Kernel: index into Program::kernels
  GemmStep gemm;
  AttentionStep attention;
  std::string origin; // the llmc ops this step runs, for people
};

/// A named program argument or result and the buffer that holds it.
struct Binding {
  std::string name;
  int32_t buffer = -1;
};

struct Program {
  std::string function;   // the MLIR function it was compiled from
  std::string modelJson;  // the `llmc.model` config, as JSON (may be empty)
  std::vector<Binding> params;  // in function argument order
  std::vector<Binding> inputs;  // tokens, targets, ...
  std::vector<Binding> outputs; // loss, logits, ...
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<Step> steps;
  int64_t arenaBytes = 0; // the planned peak: max over buffers of offset+bytes
};

/// Checks every index, shape and view against its buffer bounds and every
/// kernel with verifyKernel. Empty when well formed, else what is wrong.
std::string verifyProgram(const Program &program);

/// The readable form `llmc inspect` prints.
void printProgram(llvm::raw_ostream &os, const Program &program);

/// FLOPs of one execution of the schedule (2mnk per GEMM, attention's two
/// products, kernels by countFlops).
int64_t countFlops(const Program &program);

} // namespace llmc::kir

#endif // LLMC_CODEGEN_PROGRAM_H
