// Program utilities: the verifier, the printer and FLOP counts.
#include "ir/kernel/Program.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <initializer_list>

using namespace llmc::kir;

int64_t Buffer::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}


namespace {
/// Bounds checks of accesses and views against their buffers.
class ProgramVerifier {
public:
  explicit ProgramVerifier(const Program &program) : program(program) {}

  std::string run();

private:
  /// A CollectiveStart or CollectiveWait at step `index`.
  bool checkCollective(size_t index, const std::string &what);
  bool checkBuffer(int32_t buffer, const llvm::Twine &what) {
    if (buffer >= 0 && size_t(buffer) < program.buffers.size())
      return true;
    os << what << " names buffer " << buffer << ", which does not exist";
    return false;
  }
  /// Every element offset + sum strides * index lies in the buffer.
  bool checkExtent(int32_t buffer, int64_t offset,
                   const std::vector<int64_t> &strides,
                   const std::vector<int64_t> &shape, const llvm::Twine &what) {
    if (!checkBuffer(buffer, what))
      return false;
    int64_t low = offset, high = offset;
    for (auto [stride, extent] : llvm::zip(strides, shape)) {
      if (stride > 0)
        high += stride * (extent - 1);
      else
        low += stride * (extent - 1);
    }
    int64_t size = program.buffers[buffer].numElements();
    if (low >= 0 && high < size)
      return true;
    os << what << " reaches elements [" << low << ", " << high
       << "] of buffer " << buffer << " ('" << program.buffers[buffer].name
       << "'), which has " << size;
    return false;
  }
  bool checkView(const View &view, const std::vector<int64_t> &shape,
                 const llvm::Twine &what) {
    if (view.strides.size() != shape.size()) {
      os << what << " needs " << shape.size() << " strides";
      return false;
    }
    return checkExtent(view.buffer, view.offset, view.strides, shape, what);
  }
  bool checkKernel(int32_t index, const llvm::Twine &what);
  /// Attention tensors share one float type (f32, f16 or bf16; computed
  /// in f32); lse is f32.
  bool checkAttentionTypes(std::initializer_list<const View *> tensors,
                           const View &lse, const llvm::Twine &what) {
    DType type = program.buffers[(*tensors.begin())->buffer].dtype;
    for (const View *view : tensors)
      if (program.buffers[view->buffer].dtype != type || !isFloat(type)) {
        os << what << ": the attention tensors must share one float type";
        return false;
      }
    if (program.buffers[lse.buffer].dtype != DType::F32) {
      os << what << ": lse must be f32";
      return false;
    }
    return true;
  }

  const Program &program;
  std::string message;
  llvm::raw_string_ostream os{message};
};
} // namespace

bool ProgramVerifier::checkKernel(int32_t index, const llvm::Twine &what) {
  if (index < 0 || size_t(index) >= program.kernels.size()) {
    os << what << " names kernel " << index << ", which does not exist";
    return false;
  }
  const Kernel &kernel = program.kernels[index];
  for (auto [n, access] : llvm::enumerate(kernel.operands)) {
    if (!checkExtent(access.buffer, access.offset, access.strides,
                     kernel.domain,
                     "kernel '" + kernel.name + "' operand " + llvm::Twine(n)))
      return false;
    if (program.buffers[access.buffer].dtype != access.dtype) {
      os << "kernel '" << kernel.name << "' operand " << n << " reads "
         << dtypeName(access.dtype) << " from a "
         << dtypeName(program.buffers[access.buffer].dtype) << " buffer";
      return false;
    }
  }
  return true;
}

/// Whether two steps describe the same collective (a wait's copy of its
/// start).
static bool sameCollective(const CollectiveStep &a, const CollectiveStep &b) {
  auto sameView = [](const View &x, const View &y) {
    return x.buffer == y.buffer && x.offset == y.offset &&
           x.strides == y.strides;
  };
  return a.kind == b.kind && a.reduction == b.reduction && a.axis == b.axis &&
         a.axisSize == b.axisSize && a.root == b.root && a.count == b.count &&
         sameView(a.input, b.input) && sameView(a.output, b.output);
}

/// The buffers a step reads and writes.
static void stepBuffers(const Program &program, const Step &step,
                        std::vector<int32_t> &reads,
                        std::vector<int32_t> &writes) {
  auto kernelBuffers = [&](int32_t index) {
    const Kernel &kernel = program.kernels[index];
    for (const Instr &instr : kernel.body) {
      if (instr.op == Op::Load)
        reads.push_back(kernel.operands[instr.operand].buffer);
      if (instr.op == Op::Store)
        writes.push_back(kernel.operands[instr.operand].buffer);
    }
  };
  if (step.kind == StepKind::Kernel)
    kernelBuffers(step.kernel);
  if (step.kind == StepKind::Gemm && step.gemm.epilogue >= 0)
    kernelBuffers(step.gemm.epilogue);
  forEachView(step, [&](const char *, const View &view, ViewRole role,
                        const std::vector<int64_t> &) {
    if (role != ViewRole::Written)
      reads.push_back(view.buffer);
    if (role != ViewRole::Read)
      writes.push_back(view.buffer);
  });
}

bool ProgramVerifier::checkCollective(size_t index, const std::string &what) {
  const Step &step = program.steps[index];
  const CollectiveStep &c = step.collective;
  if (c.axis.empty() || c.axisSize < 1 || c.count < 0 ||
      (c.kind == CollectiveKind::ReduceScatter && c.count % c.axisSize != 0) ||
      (c.kind == CollectiveKind::Broadcast &&
       (c.root < 0 || c.root >= c.axisSize))) {
    os << what << ": " << collectiveKindName(c.kind) << " of " << c.count
       << " elements on axis '" << c.axis << "' of size " << c.axisSize
       << " (root " << c.root << ") is malformed";
    return false;
  }
  if (c.input.strides != std::vector<int64_t>{1} ||
      c.output.strides != std::vector<int64_t>{1}) {
    os << what << ": a collective's input and output are contiguous";
    return false;
  }
  DType in = program.buffers[c.input.buffer].dtype;
  DType out = program.buffers[c.output.buffer].dtype;
  bool reduces = c.kind == CollectiveKind::AllReduce ||
                 c.kind == CollectiveKind::ReduceScatter;
  if (in != out || (reduces && !isFloat(in))) {
    os << what << ": " << collectiveKindName(c.kind) << " from "
       << dtypeName(in) << " to " << dtypeName(out)
       << " (one dtype, a float one to reduce)";
    return false;
  }
  if (c.input.buffer == c.output.buffer) {
    os << what << ": a collective's input and output are different buffers";
    return false;
  }
  if (step.kind == StepKind::CollectiveStart) {
    if (c.start != -1) {
      os << what << ": a collective start names a start step";
      return false;
    }
    // Exactly one wait completes it; between the two no step reads or
    // writes the output or writes the input.
    int waits = 0;
    for (size_t later = index + 1; later < program.steps.size(); ++later) {
      const Step &other = program.steps[later];
      if (other.kind == StepKind::CollectiveWait &&
          other.collective.start == int32_t(index)) {
        ++waits;
        continue;
      }
      if (waits > 0)
        continue;
      std::vector<int32_t> reads, writes;
      stepBuffers(program, other, reads, writes);
      auto touches = [](const std::vector<int32_t> &list, int32_t buffer) {
        return std::find(list.begin(), list.end(), buffer) != list.end();
      };
      if (touches(reads, c.output.buffer) || touches(writes, c.output.buffer) ||
          touches(writes, c.input.buffer)) {
        os << what << ": step " << later << " uses the buffers of the "
           << collectiveKindName(c.kind) << " in flight";
        return false;
      }
    }
    if (waits != 1) {
      os << what << ": a collective start needs exactly one wait after it, "
         << "it has " << waits;
      return false;
    }
    return true;
  }
  if (c.start < 0 || size_t(c.start) >= index ||
      program.steps[c.start].kind != StepKind::CollectiveStart ||
      !sameCollective(program.steps[c.start].collective, c)) {
    os << what << ": a collective wait must follow its start and repeat it "
       << "(start " << c.start << ")";
    return false;
  }
  return true;
}

std::string ProgramVerifier::run() {
  for (const Kernel &kernel : program.kernels) {
    std::string error = verifyKernel(kernel);
    if (!error.empty())
      return error;
  }
  for (const Buffer &buffer : program.buffers)
    if (buffer.kind == BufferKind::Arena &&
        (buffer.offset % kArenaAlignment != 0 || buffer.offset < 0 ||
         buffer.offset + buffer.bytes() > program.arenaBytes)) {
      os << "buffer '" << buffer.name << "' at offset " << buffer.offset
         << " is misaligned or outside the arena of " << program.arenaBytes
         << " bytes";
      return message;
    }
  for (const Buffer &buffer : program.buffers)
    if (buffer.initialValue != 0.0 && buffer.kind != BufferKind::State) {
      os << "buffer '" << buffer.name << "' has an initial value but is not "
         << "a state buffer";
      return message;
    }
  for (const std::vector<Binding> *list :
       {&program.params, &program.inputs, &program.outputs, &program.states,
        &program.updates})
    for (const Binding &binding : *list)
      if (!checkBuffer(binding.buffer, "'" + binding.name + "'"))
        return message;
  for (const Binding &binding : program.states)
    if (program.buffers[binding.buffer].kind != BufferKind::State) {
      os << "state '" << binding.name << "' is bound to a buffer that is not "
         << "a state buffer";
      return message;
    }
  for (const Binding &binding : program.updates)
    if (!isPersistent(program.buffers[binding.buffer].kind)) {
      os << "update of '" << binding.name << "' names buffer "
         << binding.buffer << ", which is not a parameter or state";
      return message;
    }
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    std::string what = "step " + std::to_string(index);
    bool viewsFit = true;
    forEachView(step, [&](const char *label, const View &view, ViewRole,
                          const std::vector<int64_t> &shape) {
      viewsFit = viewsFit && checkView(view, shape, what + " " + label);
    });
    if (!viewsFit)
      return message;
    switch (step.kind) {
    case StepKind::Kernel:
      if (!checkKernel(step.kernel, what))
        return message;
      break;
    case StepKind::Gemm: {
      const GemmStep &g = step.gemm;
      for (const View *view : {&g.a, &g.b, &g.c})
        if (view->strides[1] != 1 && view->strides[2] != 1) {
          os << what << ": a GEMM operand needs a unit stride";
          return message;
        }
      if (g.c.strides[2] != 1) {
        os << what << ": C needs unit column stride";
        return message;
      }
      DType aType = program.buffers[g.a.buffer].dtype;
      DType bType = program.buffers[g.b.buffer].dtype;
      DType cType = program.buffers[g.c.buffer].dtype;
      if (!isFloat(aType) || aType != bType || !isFloat(cType)) {
        os << what << ": A and B must share one float type and C be a float "
           << "(A " << dtypeName(aType) << ", B " << dtypeName(bType)
           << ", C " << dtypeName(cType) << ")";
        return message;
      }
      if (g.accumulate && g.epilogue >= 0) {
        os << what << ": an accumulating GEMM has no epilogue";
        return message;
      }
      if (g.epilogue >= 0) {
        if (!checkKernel(g.epilogue, what + " epilogue"))
          return message;
        const Kernel &epilogue = program.kernels[g.epilogue];
        if (epilogue.hasReduction() ||
            epilogue.numRows() != g.batch * g.m || epilogue.rowLength() != g.n) {
          os << what << ": the epilogue must be a kernel without reductions "
                        "whose rows are the batch * m rows of C";
          return message;
        }
      }
      // (The bias or aux view is checked with the others: forEachView.)
      if (g.epilogueKind != EpilogueKind::None &&
          (g.epilogue < 0 ||
           (g.epilogueKind == EpilogueKind::DGelu && g.batch != 1))) {
        os << what << ": epilogue kind " << epilogueKindName(g.epilogueKind)
           << " needs an epilogue kernel (and batch 1 with aux)";
        return message;
      }
      break;
    }
    case StepKind::Attention: {
      const AttentionStep &a = step.attention;
      if (!checkAttentionTypes({&a.q, &a.k, &a.v, &a.out}, a.lse, what))
        return message;
      break;
    }
    case StepKind::AttentionGrad: {
      const AttentionGradStep &a = step.attentionGrad;
      bool unitHeadDim = true;
      forEachAttentionGradView(a, [&](const char *label, const View &view,
                                      ViewRole,
                                      const std::vector<int64_t> &shape) {
        if (unitHeadDim && shape.size() == 4 && view.strides[3] != 1) {
          os << what << " " << label << " needs a unit head_dim stride";
          unitHeadDim = false;
        }
      });
      if (!unitHeadDim)
        return message;
      if (!checkAttentionTypes({&a.dout, &a.q, &a.k, &a.v, &a.out, &a.dq,
                                &a.dk, &a.dv},
                               a.lse, what))
        return message;
      break;
    }
    case StepKind::CollectiveStart:
    case StepKind::CollectiveWait:
      if (!checkCollective(index, what))
        return message;
      break;
    case StepKind::EmbeddingGrad: {
      const EmbeddingGradStep &e = step.embeddingGrad;
      DType ids = program.buffers[e.ids.buffer].dtype;
      if (ids != DType::I32 && ids != DType::I64) {
        os << what << ": ids must be i32 or i64, not " << dtypeName(ids);
        return message;
      }
      if (program.buffers[e.grad.buffer].dtype != DType::F32 ||
          program.buffers[e.out.buffer].dtype != DType::F32 ||
          e.out.strides[1] != 1) {
        os << what << ": grad and out must be f32, out with unit channel "
                      "stride";
        return message;
      }
      break;
    }
    }
  }
  return message;
}

const char *llmc::kir::collectiveKindName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::Broadcast:
    return "broadcast";
  }
  return "?";
}

const char *llmc::kir::reductionName(Reduction reduction) {
  switch (reduction) {
  case Reduction::Sum:
    return "sum";
  case Reduction::Avg:
    return "avg";
  case Reduction::Max:
    return "max";
  }
  return "?";
}

int64_t CollectiveStep::outputCount() const {
  switch (kind) {
  case CollectiveKind::ReduceScatter:
    return axisSize > 0 ? count / axisSize : 0;
  case CollectiveKind::AllGather:
    return count * axisSize;
  case CollectiveKind::AllReduce:
  case CollectiveKind::Broadcast:
    return count;
  }
  return count;
}

const char *llmc::kir::epilogueKindName(EpilogueKind kind) {
  switch (kind) {
  case EpilogueKind::None:
    return "none";
  case EpilogueKind::Bias:
    return "bias";
  case EpilogueKind::GeluBias:
    return "gelu_bias";
  case EpilogueKind::Gelu:
    return "gelu";
  case EpilogueKind::DGelu:
    return "dgelu";
  }
  return "none";
}

std::string llmc::kir::verifyProgram(const Program &program) {
  return ProgramVerifier(program).run();
}

static void printView(llvm::raw_ostream &os, const char *name,
                      const View &view) {
  os << " " << name << "=buffer " << view.buffer << "+" << view.offset << " "
     << formatShape(view.strides);
}

/// Every view of a library step, as forEachView lists them. (A GEMM prints
/// its epilogue operand after the epilogue's kind instead.)
static void printViews(llvm::raw_ostream &os, const Step &step) {
  forEachView(step, [&](const char *label, const View &view, ViewRole,
                        const std::vector<int64_t> &) {
    printView(os, label, view);
  });
}

static const char *kindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::Param:
    return "param";
  case BufferKind::Input:
    return "input";
  case BufferKind::Arena:
    return "arena";
  case BufferKind::State:
    return "state";
  }
  return "?";
}

void llmc::kir::printProgram(llvm::raw_ostream &os, const Program &program) {
  os << "program @" << program.function << ": " << program.buffers.size()
     << " buffers, " << program.kernels.size() << " kernels, "
     << program.steps.size() << " steps, arena " << program.arenaBytes
     << " bytes (planned peak)\n";
  if (!program.modelJson.empty())
    os << "model " << program.modelJson << "\n";
  auto printBindings = [&](const char *title,
                           const std::vector<Binding> &list) {
    for (const Binding &binding : list)
      os << title << " " << binding.name << ": buffer " << binding.buffer
         << "\n";
  };
  printBindings("param", program.params);
  printBindings("input", program.inputs);
  printBindings("output", program.outputs);
  printBindings("state", program.states);
  printBindings("update", program.updates);
  os << "\nbuffers:\n";
  for (auto [index, buffer] : llvm::enumerate(program.buffers)) {
    os << "  " << index << ": " << kindName(buffer.kind) << " "
       << dtypeName(buffer.dtype) << formatShape(buffer.shape) << " "
       << buffer.bytes() << " B";
    if (buffer.kind == BufferKind::Arena)
      os << " @" << buffer.offset << " live steps " << buffer.firstStep << ".."
         << buffer.lastStep;
    if (buffer.initialValue != 0.0)
      os << " init " << buffer.initialValue;
    os << "  " << buffer.name << "\n";
  }
  os << "\nschedule:\n";
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    os << "  " << index << ": ";
    switch (step.kind) {
    case StepKind::Kernel:
      os << "kernel @" << program.kernels[step.kernel].name;
      break;
    case StepKind::Gemm: {
      const GemmStep &g = step.gemm;
      os << "gemm batch " << g.batch << " m " << g.m << " n " << g.n << " k "
         << g.k << (g.transA ? " transA" : "") << (g.transB ? " transB" : "");
      printView(os, "A", g.a);
      printView(os, "B", g.b);
      printView(os, "C", g.c);
      if (g.epilogue >= 0)
        os << " epilogue @" << program.kernels[g.epilogue].name;
      if (g.epilogueKind != EpilogueKind::None) {
        os << " " << epilogueKindName(g.epilogueKind);
        if (g.epilogueKind == EpilogueKind::DGelu)
          printView(os, "aux", g.epilogueAux);
        else if (g.epilogueKind != EpilogueKind::Gelu)
          printView(os, "bias", g.epilogueBias);
      }
      if (g.accumulate)
        os << " accumulate";
      break;
    }
    case StepKind::Attention: {
      const AttentionStep &a = step.attention;
      os << "attention batch " << a.batch << " heads " << a.heads << " seq "
         << a.seq << " head_dim " << a.headDim << " scale " << a.scale
         << (a.causal ? " causal" : "");
      printViews(os, step);
      break;
    }
    case StepKind::AttentionGrad: {
      const AttentionGradStep &a = step.attentionGrad;
      os << "attention_grad batch " << a.batch << " heads " << a.heads
         << " seq " << a.seq << " head_dim " << a.headDim << " scale "
         << a.scale << (a.causal ? " causal" : "");
      printViews(os, step);
      break;
    }
    case StepKind::CollectiveStart:
    case StepKind::CollectiveWait: {
      const CollectiveStep &c = step.collective;
      if (step.kind == StepKind::CollectiveStart)
        os << "start ";
      else
        os << "wait (step " << c.start << ") ";
      os << collectiveKindName(c.kind);
      if (c.kind == CollectiveKind::AllReduce ||
          c.kind == CollectiveKind::ReduceScatter)
        os << " " << reductionName(c.reduction);
      if (c.kind == CollectiveKind::Broadcast)
        os << " root " << c.root;
      os << " on " << c.axis << " size " << c.axisSize << " count " << c.count
         << " bytes " << c.count * dtypeBytes(program.buffers[c.input.buffer].dtype);
      printViews(os, step);
      break;
    }
    case StepKind::EmbeddingGrad: {
      const EmbeddingGradStep &e = step.embeddingGrad;
      os << "embedding_grad positions " << e.positions << " rows " << e.rows
         << " channels " << e.channels;
      printViews(os, step);
      if (e.accumulate)
        os << " accumulate";
      break;
    }
    }
    if (!step.origin.empty())
      os << "  // " << step.origin;
    os << "\n";
  }
  os << "\nkernels:\n";
  for (const Kernel &kernel : program.kernels)
    printKernel(os, kernel);
}

int64_t llmc::kir::countFlops(const Program &program) {
  int64_t flops = 0;
  for (const Step &step : program.steps) {
    switch (step.kind) {
    case StepKind::Kernel:
      flops += countFlops(program.kernels[step.kernel]);
      break;
    case StepKind::Gemm:
      flops += 2 * step.gemm.batch * step.gemm.m * step.gemm.n * step.gemm.k;
      if (step.gemm.epilogue >= 0)
        flops += countFlops(program.kernels[step.gemm.epilogue]);
      break;
    case StepKind::Attention: {
      const AttentionStep &a = step.attention;
      // QK^T and PV; causal attention computes about half of each.
      int64_t full = 4 * a.batch * a.heads * a.seq * a.seq * a.headDim;
      flops += a.causal ? full / 2 : full;
      break;
    }
    case StepKind::AttentionGrad: {
      // Recomputed QK^T, then dV, dP, dQ and dK: five products.
      const AttentionGradStep &a = step.attentionGrad;
      int64_t full = 10 * a.batch * a.heads * a.seq * a.seq * a.headDim;
      flops += a.causal ? full / 2 : full;
      break;
    }
    case StepKind::EmbeddingGrad:
      flops += step.embeddingGrad.positions * step.embeddingGrad.channels;
      break;
    case StepKind::CollectiveStart:
    case StepKind::CollectiveWait:
      break; // communication, not arithmetic
    }
  }
  return flops;
}
