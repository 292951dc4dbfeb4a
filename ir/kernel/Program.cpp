// Program utilities: step-scalar bindings, the verifier, the printer and
// FLOP counts.
#include "ir/kernel/Program.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <optional>

using namespace llmc::kir;

namespace {
/// The lists of a program's bindings.
enum class BindingList { Params, Inputs, Outputs, States, Updates };

/// The step scalar a binding named `name` in `list` is, by the table.
StepScalar scalarFor(llvm::StringRef name, BindingList list) {
  std::optional<StepScalar> scalar = stepScalarNamed(name);
  if (!scalar)
    return StepScalar::None;
  StepScalarDirection direction = stepScalarInfo(*scalar).direction;
  bool fits = false;
  switch (list) {
  case BindingList::Inputs:
    fits = direction == StepScalarDirection::Input;
    break;
  case BindingList::Outputs:
    fits = direction != StepScalarDirection::Input;
    break;
  case BindingList::States:
    fits = direction == StepScalarDirection::State;
    break;
  case BindingList::Params:
  case BindingList::Updates:
    break;
  }
  return fits ? *scalar : StepScalar::None;
}

/// Each list of `program` with what it is, for walks over all bindings.
template <typename P> auto bindingLists(P &program) {
  using List = decltype(&program.params);
  return std::array<std::pair<List, BindingList>, 5>{
      {{&program.params, BindingList::Params},
       {&program.inputs, BindingList::Inputs},
       {&program.outputs, BindingList::Outputs},
       {&program.states, BindingList::States},
       {&program.updates, BindingList::Updates}}};
}
} // namespace

void llmc::kir::assignStepScalars(Program &program) {
  for (auto [list, which] : bindingLists(program))
    for (Binding &binding : *list)
      binding.scalar = scalarFor(binding.name, which);
}

const Binding *llmc::kir::findStepScalar(const std::vector<Binding> &list,
                                         StepScalar scalar) {
  for (const Binding &binding : list)
    if (binding.scalar == scalar)
      return &binding;
  return nullptr;
}

llvm::Expected<double> llmc::kir::biasCorrection(const Program &program,
                                                 StepScalar scalar, int64_t t) {
  size_t which = scalar == StepScalar::BiasCorrection1   ? 0
                 : scalar == StepScalar::BiasCorrection2 ? 1
                                                         : 2;
  if (which == 2)
    return llvm::createStringError(
        llvm::formatv("{0} is no bias correction", stepScalarName(scalar)));
  if (program.adamBetas.size() != 2)
    return llvm::createStringError(llvm::formatv(
        "program '{0}' takes {1} but records no AdamW betas: it was "
        "compiled without llmc-optimizer's `llmc.adam_betas`",
        program.function, stepScalarName(scalar)));
  return 1.0 / (1.0 - std::pow(program.adamBetas[which], double(t)));
}

int64_t Buffer::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}


namespace {
/// The values an index takes: [low, high], both included.
struct IndexRange {
  int64_t low, high;
};

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
  /// Every element offset + sum strides * index lies in the buffer, index d
  /// ranging over [0, shape[d]).
  bool checkExtent(int32_t buffer, int64_t offset,
                   const std::vector<int64_t> &strides,
                   const std::vector<int64_t> &shape, const llvm::Twine &what) {
    std::vector<IndexRange> ranges;
    for (int64_t extent : shape)
      ranges.push_back({0, extent - 1});
    return checkReach(buffer, offset, strides, ranges, what);
  }
  /// Every element offset + sum strides * index lies in the buffer, index d
  /// ranging over ranges[d].
  bool checkReach(int32_t buffer, int64_t offset,
                  const std::vector<int64_t> &strides,
                  const std::vector<IndexRange> &ranges,
                  const llvm::Twine &what) {
    if (!checkBuffer(buffer, what))
      return false;
    if (llvm::any_of(ranges, [](IndexRange r) { return r.high < r.low; }))
      return true; // an empty domain touches nothing
    std::optional<int64_t> low = offset, high = offset;
    for (auto [stride, range] : llvm::zip(strides, ranges)) {
      std::optional<int64_t> first = llvm::checkedMul(stride, range.low);
      std::optional<int64_t> last = llvm::checkedMul(stride, range.high);
      if (!first || !last) {
        low = high = std::nullopt;
        break;
      }
      low = low ? llvm::checkedAdd(*low, std::min(*first, *last)) : low;
      high = high ? llvm::checkedAdd(*high, std::max(*first, *last)) : high;
    }
    if (!low || !high) {
      os << what << " reaches elements beyond the 64-bit range of buffer "
         << buffer << " ('" << program.buffers[buffer].name << "')";
      return false;
    }
    int64_t size = program.buffers[buffer].numElements();
    if (*low >= 0 && *high < size)
      return true;
    os << what << " reaches elements [" << *low << ", " << *high
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

/// The range of each I64 value of a well-formed kernel body, where it has a
/// known one: constants, domain indices, ids loaded from an input with an
/// id bound (the runtime checks them before a run) and integer arithmetic
/// on those. Overflow, or anything else, is unknown.
static std::vector<std::optional<IndexRange>>
valueRanges(const Program &program, const Kernel &kernel) {
  std::vector<std::optional<IndexRange>> ranges(kernel.body.size());
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    if (instr.type != DType::I64 && instr.type != DType::I1)
      continue;
    auto arg = [&](size_t n) { return ranges[instr.args[n]]; };
    std::optional<IndexRange> &out = ranges[i];
    switch (instr.op) {
    case Op::Const:
      if (std::abs(instr.imm) < 0x1p62) // (a crafted artifact's may not fit)
        out = IndexRange{int64_t(instr.imm), int64_t(instr.imm)};
      break;
    case Op::Index:
      out = IndexRange{0, kernel.domain[instr.dim] - 1};
      break;
    case Op::Load: {
      const Buffer &buffer =
          program.buffers[kernel.operands[instr.operand].buffer];
      if (buffer.dtype == DType::I1)
        out = IndexRange{0, 1};
      else if (buffer.kind == BufferKind::Input && buffer.idBound > 0)
        out = IndexRange{0, buffer.idBound - 1};
      break;
    }
    case Op::CmpLt: case Op::CmpLe: case Op::CmpEq:
      out = IndexRange{0, 1};
      break;
    case Op::Select:
      if (arg(1) && arg(2))
        out = IndexRange{std::min(arg(1)->low, arg(2)->low),
                         std::max(arg(1)->high, arg(2)->high)};
      break;
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Min: case Op::Max:
    case Op::Div: case Op::Rem: {
      std::optional<IndexRange> a = arg(0), b = arg(1);
      if (!a || !b)
        break;
      if (instr.op == Op::Min || instr.op == Op::Max) {
        auto pick = [&](int64_t x, int64_t y) {
          return instr.op == Op::Min ? std::min(x, y) : std::max(x, y);
        };
        out = IndexRange{pick(a->low, b->low), pick(a->high, b->high)};
        break;
      }
      if (instr.op == Op::Rem || instr.op == Op::Div) {
        // Non-negative operands (Rem's contract; Div only when so).
        if (a->low < 0 || b->low < 1)
          break;
        out = instr.op == Op::Rem
                  ? IndexRange{0, std::min(a->high, b->high - 1)}
                  : IndexRange{a->low / b->high, a->high / b->low};
        break;
      }
      // The extremes of a monotone (Add, Sub) or bilinear (Mul) function
      // lie at the corners.
      std::optional<int64_t> low, high;
      bool overflow = false;
      for (int64_t x : {a->low, a->high})
        for (int64_t y : {b->low, b->high}) {
          std::optional<int64_t> v =
              instr.op == Op::Add   ? llvm::checkedAdd(x, y)
              : instr.op == Op::Sub ? llvm::checkedSub(x, y)
                                    : llvm::checkedMul(x, y);
          if (!v) {
            overflow = true;
            continue;
          }
          low = low ? std::min(*low, *v) : *v;
          high = high ? std::max(*high, *v) : *v;
        }
      if (!overflow)
        out = IndexRange{*low, *high};
      break;
    }
    default:
      break;
    }
  }
  return ranges;
}

bool ProgramVerifier::checkKernel(int32_t index, const llvm::Twine &what) {
  if (index < 0 || size_t(index) >= program.kernels.size()) {
    os << what << " names kernel " << index << ", which does not exist";
    return false;
  }
  const Kernel &kernel = program.kernels[index];
  for (auto [n, access] : llvm::enumerate(kernel.operands))
    if (!checkBuffer(access.buffer, "kernel '" + kernel.name + "' operand " +
                                        llvm::Twine(n)))
      return false;
  // The indices each operand is accessed at: the domain's, except along a
  // dimension that a load replaces by a value (a gather: an embedding row
  // picked by a token id), where they are that value's range. Every operand
  // spans the whole domain until an instruction says otherwise.
  std::vector<std::optional<IndexRange>> values = valueRanges(program, kernel);
  std::vector<std::vector<IndexRange>> reach(kernel.operands.size());
  std::vector<bool> used(kernel.operands.size(), false);
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    if (instr.op != Op::Load && instr.op != Op::Store)
      continue;
    std::vector<IndexRange> &ranges = reach[instr.operand];
    for (size_t d = 0; d < kernel.domain.size(); ++d) {
      IndexRange range{0, kernel.domain[d] - 1};
      llvm::ArrayRef<int32_t> at = indexOverrides(instr);
      if (!at.empty() && at[d] >= 0) {
        if (!values[at[d]]) {
          os << "kernel '" << kernel.name << "' operand " << instr.operand
             << " is indexed along dimension " << d << " by %" << at[d]
             << ", whose range is unknown (a gather's or scatter's ids "
             << "must come from an input with an id bound)";
          return false;
        }
        range = *values[at[d]];
      }
      if (!used[instr.operand])
        ranges.push_back(range);
      else
        ranges[d] = {std::min(ranges[d].low, range.low),
                     std::max(ranges[d].high, range.high)};
    }
    used[instr.operand] = true;
  }
  for (auto [n, access] : llvm::enumerate(kernel.operands)) {
    std::string what = "kernel '" + kernel.name + "' operand " +
                       std::to_string(n);
    if (!(used[n] ? checkReach(access.buffer, access.offset, access.strides,
                               reach[n], what)
                  : checkExtent(access.buffer, access.offset, access.strides,
                                kernel.domain, what)))
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
      ((c.kind == CollectiveKind::Broadcast ||
        c.kind == CollectiveKind::Send || c.kind == CollectiveKind::Recv) &&
       (c.root < 0 || c.root >= c.axisSize))) {
    os << what << ": " << collectiveKindName(c.kind) << " of " << c.count
       << " elements on axis '" << c.axis << "' of size " << c.axisSize
       << " (root " << c.root << ") is malformed";
    return false;
  }
  bool hasInput = c.kind != CollectiveKind::Recv;
  if ((hasInput && c.input.strides != std::vector<int64_t>{1}) ||
      c.output.strides != std::vector<int64_t>{1}) {
    os << what << ": a collective's input and output are contiguous";
    return false;
  }
  DType out = program.buffers[c.output.buffer].dtype;
  DType in = hasInput ? program.buffers[c.input.buffer].dtype : out;
  if (c.kind == CollectiveKind::Send && out != DType::F32) {
    os << what << ": a send's output is its f32 placeholder loss";
    return false;
  }
  if (c.kind == CollectiveKind::Send)
    out = in; // the placeholder is f32 whatever the input's dtype
  bool reduces = c.kind == CollectiveKind::AllReduce ||
                 c.kind == CollectiveKind::ReduceScatter;
  if (in != out || (reduces && !isFloat(in))) {
    os << what << ": " << collectiveKindName(c.kind) << " from "
       << dtypeName(in) << " to " << dtypeName(out)
       << " (one dtype, a float one to reduce)";
    return false;
  }
  if (hasInput && c.input.buffer == c.output.buffer) {
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
  for (auto [list, which] : bindingLists(program))
    for (const Binding &binding : *list)
      if (binding.scalar != scalarFor(binding.name, which)) {
        os << "binding '" << binding.name << "' is marked as step scalar "
           << unsigned(binding.scalar) << ", which its name and list are not "
           << "(ir/kernel/StepScalar.h)";
        return message;
      }
  if (!program.adamBetas.empty() && program.adamBetas.size() != 2) {
    os << "the program records " << program.adamBetas.size()
       << " AdamW betas, not 2";
    return message;
  }
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
      // One exception to one type: f32 A times a parameter stored narrow
      // (llmc export --precision bf16, codegen/Inference.h's
      // storeParametersAs); the CPU executor widens B in registers or tiles.
      bool narrowWeight = aType == DType::F32 && isFloat(bType) &&
                          program.buffers[g.b.buffer].kind == BufferKind::Param;
      if (!isFloat(aType) || (aType != bType && !narrowWeight) ||
          !isFloat(cType)) {
        os << what << ": A and B must share one float type (or B be a "
           << "parameter stored narrow, A f32) and C be a float "
           << "(A " << dtypeName(aType) << ", B " << dtypeName(bType)
           << ", C " << dtypeName(cType) << ")";
        return message;
      }
      if (g.accumulate && g.epilogue >= 0) {
        os << what << ": an accumulating GEMM has no epilogue";
        return message;
      }
      if (g.sparseWeight &&
          (!g.transB || g.accumulate || g.k % 4 != 0 || bType != DType::F32 ||
           g.b.strides[0] != 0 || g.b.strides[2] != 1 ||
           program.buffers[g.b.buffer].kind != BufferKind::Param)) {
        os << what << ": a sparse_weight GEMM needs B an f32 Param read as "
           << "[n, k] (transB, unit k stride, shared by the batch), k a "
           << "multiple of 4, and C written whole";
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
      if (a.kvSeq < 0) {
        os << what << ": kv_seq must be >= 0 (0: seq), got " << a.kvSeq;
        return message;
      }
      if (a.positioned() &&
          program.buffers[a.positions.buffer].dtype != DType::I32) {
        os << what << ": positions must be i32";
        return message;
      }
      if (!a.positioned() && a.causal && a.keys() < a.seq) {
        os << what << ": causal attention without positions needs at least "
                      "as many keys as queries";
        return message;
      }
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
  case CollectiveKind::Send:
    return "send";
  case CollectiveKind::Recv:
    return "recv";
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
  case CollectiveKind::Recv:
    return count;
  case CollectiveKind::Send:
    return 1;
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
      if (g.sparseWeight)
        os << " sparse_weight";
      break;
    }
    case StepKind::Attention: {
      const AttentionStep &a = step.attention;
      os << "attention batch " << a.batch << " heads " << a.heads << " seq "
         << a.seq;
      if (a.keys() != a.seq)
        os << " kv_seq " << a.keys();
      os << " head_dim " << a.headDim << " scale " << a.scale
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
      if (c.kind == CollectiveKind::Send)
        os << " to " << c.root;
      if (c.kind == CollectiveKind::Recv)
        os << " from " << c.root;
      os << " on " << c.axis << " size " << c.axisSize << " count " << c.count
         << " bytes "
         << c.count * dtypeBytes(program.buffers[c.kind == CollectiveKind::Recv
                                                     ? c.output.buffer
                                                     : c.input.buffer]
                                     .dtype);
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
      int64_t full = 4 * a.batch * a.heads * a.seq * a.keys() * a.headDim;
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
