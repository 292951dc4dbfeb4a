// Multi-tensor launches: which kernel steps form batches (windows of
// independent elementwise steps and per-tensor sums, grouped by body) and
// their kernels.
#include "codegen/KernelToCuda/MultiTensor.h"

#include "codegen/KernelToCuda/KernelToCuda.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

using namespace llmc;
using namespace llmc::cuda;
using kir::DType;

namespace {

constexpr int64_t kMaxGridBlocks = 65535;

/// What a batchable kernel step touches: per operand its element range in
/// its buffer and whether it is written.
struct Member {
  int32_t step = -1;
  std::string key; // body and operand types: equal keys batch together
  std::vector<uint8_t> contiguous;
  struct Range {
    int32_t buffer;
    int64_t begin, end;
    bool written;
  };
  std::vector<Range> ranges;
  // A sum member (CudaKernelBatch::Kind::Sum): `step` reads the tensor,
  // `totalStep` stores its total; -1 while the reading kernel sums rows
  // into `rows` (a temporary range) that a later step has yet to total.
  bool sum = false;
  int32_t totalStep = -1;
  Range rows{-1, 0, 0, false};
  DType totalType = DType::F32;
};

/// Whether `access` reads element i of the flattened domain at offset + i
/// (dims of extent 1 may have any stride).
bool isFlat(const kir::Kernel &kernel, const kir::Access &access) {
  int64_t expected = 1;
  for (size_t d = kernel.domain.size(); d-- > 0;) {
    if (kernel.domain[d] != 1 && access.strides[d] != expected)
      return false;
    expected *= kernel.domain[d];
  }
  return true;
}

bool isBroadcast(const kir::Kernel &kernel, const kir::Access &access) {
  for (size_t d = 0; d < kernel.domain.size(); ++d)
    if (kernel.domain[d] != 1 && access.strides[d] != 0)
      return false;
  return true;
}

/// Appends `kernel`'s body to `key` and marks the stored operands; false
/// for bodies no multi-tensor kernel runs (index arithmetic, random
/// numbers, loads or stores at computed indices).
bool bodyKey(const kir::Kernel &kernel, std::string &key,
             std::vector<bool> &stored) {
  for (const kir::Instr &instr : kernel.body) {
    if (instr.op == kir::Op::Index || instr.op == kir::Op::Random)
      return false;
    if (instr.op == kir::Op::Load || instr.op == kir::Op::Store) {
      for (int32_t arg : kir::indexOverrides(instr))
        if (arg >= 0)
          return false;
      if (instr.op == kir::Op::Store)
        stored[instr.operand] = true;
    }
    key += std::to_string(int(instr.op)) + ":" +
           std::to_string(int(instr.type)) + ":" +
           std::to_string(instr.operand) + ":" + std::to_string(instr.dim);
    uint64_t bits;
    std::memcpy(&bits, &instr.imm, sizeof(bits));
    key += ":" + std::to_string(bits) + "(";
    for (int32_t arg : instr.args)
      key += std::to_string(arg) + ",";
    key += ");";
  }
  return true;
}

int64_t domainElements(const kir::Kernel &kernel) {
  int64_t elements = 1;
  for (int64_t extent : kernel.domain)
    elements *= extent;
  return elements;
}

/// The member a kernel step would be, if its kernel qualifies.
std::optional<Member> asMember(const kir::Program &program, int32_t index) {
  const kir::Kernel &kernel = program.kernels[program.steps[index].kernel];
  if (kernel.hasReduction())
    return std::nullopt;
  int64_t elements = domainElements(kernel);
  Member member;
  member.step = index;
  std::vector<bool> stored(kernel.operands.size(), false);
  std::string &key = member.key;
  if (!bodyKey(kernel, key, stored))
    return std::nullopt;
  for (auto [operand, access] : llvm::enumerate(kernel.operands)) {
    // A one-element domain is contiguous (element 0 at the offset).
    bool contiguous = isFlat(kernel, access);
    if (!contiguous && (!isBroadcast(kernel, access) || stored[operand]))
      return std::nullopt;
    member.contiguous.push_back(contiguous);
    key += std::string(kir::dtypeName(access.dtype)) +
           (contiguous ? "c;" : "b;");
    member.ranges.push_back({access.buffer, access.offset,
                             access.offset + (contiguous ? elements : 1),
                             bool(stored[operand])});
  }
  // Operands of one buffer must be the same elements (in place), or one
  // element of the batch kernel could read what another just wrote.
  for (const Member::Range &a : member.ranges)
    for (const Member::Range &b : member.ranges)
      if (a.buffer == b.buffer && (a.written || b.written) &&
          (a.begin != b.begin || a.end != b.end))
        return std::nullopt;
  return member;
}

/// The sum member a kernel step would start, if its kernel qualifies: one
/// f32 ReduceSum over the last dim of an elementwise function of operands
/// read at the flat element index or broadcast, whose value is the one
/// store. Stored to one element (numRows 1): a complete member. Stored per
/// row to an f32 temporary at consecutive elements: a member waiting for
/// the kernel that totals the rows (`rows`).
std::optional<Member> asSumMember(const kir::Program &program,
                                  int32_t index) {
  const kir::Kernel &kernel = program.kernels[program.steps[index].kernel];
  int32_t reduction = -1, store = -1;
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    bool isSum = instr.op == kir::Op::ReduceSum;
    if ((isSum && reduction >= 0) || instr.op == kir::Op::ReduceMax ||
        (instr.op == kir::Op::Store && store >= 0))
      return std::nullopt;
    if (isSum)
      reduction = int32_t(i);
    if (instr.op == kir::Op::Store)
      store = int32_t(i);
    // The reduced value feeds the store and nothing else.
    if (reduction >= 0 && int32_t(i) != store &&
        llvm::is_contained(instr.args, reduction))
      return std::nullopt;
  }
  if (reduction < 0 || store < 0 ||
      kernel.body[reduction].type != DType::F32 ||
      kernel.body[store].args[0] != reduction)
    return std::nullopt;
  Member member;
  member.step = index;
  member.sum = true;
  std::vector<bool> stored(kernel.operands.size(), false);
  if (!bodyKey(kernel, member.key, stored))
    return std::nullopt;
  int32_t total = kernel.body[store].operand;
  const kir::Access &out = kernel.operands[total];
  for (const kir::Instr &instr : kernel.body)
    if (instr.op == kir::Op::Load && instr.operand == total)
      return std::nullopt; // the batch kernel has no pointer to it
  int64_t elements = domainElements(kernel), rows = kernel.numRows();
  for (auto [operand, access] : llvm::enumerate(kernel.operands)) {
    if (int32_t(operand) == total) {
      member.contiguous.push_back(0);
      continue;
    }
    bool contiguous = isFlat(kernel, access);
    if (!contiguous && !isBroadcast(kernel, access))
      return std::nullopt;
    if (access.buffer == out.buffer)
      return std::nullopt; // a total stored over what is read
    member.contiguous.push_back(contiguous);
    member.key += std::string(kir::dtypeName(access.dtype)) +
                  (contiguous ? "c;" : "b;");
    member.ranges.push_back({access.buffer, access.offset,
                             access.offset + (contiguous ? elements : 1),
                             false});
  }
  // Rows stored at consecutive elements: the store's strides over the
  // outer dims are the row-major ones, 0 along the reduced dim.
  int64_t expected = 1;
  for (size_t d = kernel.domain.size(); d-- > 0;) {
    bool last = d + 1 == kernel.domain.size();
    if (kernel.domain[d] != 1 && out.strides[d] != (last ? 0 : expected))
      return std::nullopt;
    if (!last)
      expected *= kernel.domain[d];
  }
  if (rows > 1) {
    if (out.dtype != DType::F32)
      return std::nullopt;
    member.rows = {out.buffer, out.offset, out.offset + rows, true};
    member.ranges.push_back(member.rows);
  } else {
    member.totalStep = index;
    member.totalType = out.dtype;
    member.ranges.push_back({out.buffer, out.offset, out.offset + 1, true});
  }
  return member;
}

/// Whether buffer `buffer` is an arena temporary that only steps `a` and
/// `b` touch (so a batch that runs both may leave it unwritten).
bool onlyUsedBy(const kir::Program &program, int32_t buffer, int32_t a,
                int32_t b) {
  if (program.buffers[buffer].kind != kir::BufferKind::Arena)
    return false;
  for (const std::vector<kir::Binding> *list :
       {&program.outputs, &program.updates})
    for (const kir::Binding &binding : *list)
      if (binding.buffer == buffer)
        return false;
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    if (int32_t(index) == a || int32_t(index) == b)
      continue;
    bool used = false;
    auto kernelUses = [&](int32_t kernel) {
      if (kernel >= 0)
        for (const kir::Access &access : program.kernels[kernel].operands)
          used |= access.buffer == buffer;
    };
    if (step.kind == kir::StepKind::Kernel)
      kernelUses(step.kernel);
    if (step.kind == kir::StepKind::Gemm)
      kernelUses(step.gemm.epilogue);
    kir::forEachView(step, [&](auto &&, const kir::View &view, auto &&...) {
      used |= view.buffer == buffer;
    });
    if (used)
      return false;
  }
  return true;
}

/// Joins `total`, a complete sum member summing its one loaded operand
/// (load, ReduceSum, store), to `reader`, a member waiting for its rows'
/// total, if `total` reads exactly those rows and nothing else uses them.
bool joinRows(const kir::Program &program, Member &reader,
              const Member &total) {
  if (!reader.sum || reader.totalStep >= 0 || !total.sum ||
      total.totalStep != total.step)
    return false;
  const kir::Kernel &kernel = program.kernels[program.steps[total.step].kernel];
  if (kernel.body.size() != 3 || kernel.body[0].op != kir::Op::Load ||
      kernel.body[1].op != kir::Op::ReduceSum ||
      kernel.body[1].args[0] != 0)
    return false;
  const kir::Access &in = kernel.operands[kernel.body[0].operand];
  if (in.dtype != DType::F32 || !isFlat(kernel, in) ||
      in.buffer != reader.rows.buffer || in.offset != reader.rows.begin ||
      domainElements(kernel) != reader.rows.end - reader.rows.begin ||
      !onlyUsedBy(program, in.buffer, reader.step, total.step))
    return false;
  reader.totalStep = total.step;
  reader.totalType = total.totalType;
  reader.ranges.push_back(total.ranges.back()); // the total, written
  return true;
}

bool conflicts(const Member &a, const Member &b) {
  for (const Member::Range &x : a.ranges)
    for (const Member::Range &y : b.ranges)
      if (x.buffer == y.buffer && (x.written || y.written) &&
          x.begin < y.end && y.begin < x.end)
        return true;
  return false;
}

/// The kernel a batch's members share, over a one-dimensional domain of
/// one chunk: contiguous operands at stride 1, broadcast ones at stride 0,
/// every offset 0 (the table's addresses hold them).
kir::Kernel flatKernel(const kir::Kernel &member,
                       llvm::ArrayRef<uint8_t> contiguous) {
  kir::Kernel flat = member;
  flat.domain = {kMultiTensorChunk};
  for (auto [operand, access] : llvm::enumerate(flat.operands)) {
    access.offset = 0;
    access.strides = {contiguous[operand] ? 1 : 0};
  }
  return flat;
}

} // namespace

KernelBatches llmc::cuda::planKernelBatches(const kir::Program &program) {
  KernelBatches result;
  std::vector<Member> window;
  auto flush = [&] {
    std::map<std::string, std::vector<const Member *>> groups;
    std::vector<std::string> order; // first appearance: stable names
    for (const Member &member : window) {
      if (member.sum && member.totalStep < 0)
        continue; // rows never totalled here: the kernel runs alone
      std::string key = member.sum ? std::string("sum ") +
                                         kir::dtypeName(member.totalType) +
                                         ";" + member.key
                                   : member.key;
      std::vector<const Member *> &group = groups[key];
      if (group.empty())
        order.push_back(key);
      group.push_back(&member);
    }
    for (const std::string &key : order) {
      const std::vector<const Member *> &group = groups[key];
      if (group.size() < 2)
        continue;
      CudaKernelBatch batch;
      const kir::Kernel &first =
          program.kernels[program.steps[group.front()->step].kernel];
      batch.name = "llmc_batch" + std::to_string(result.batches.size()) +
                   "_" + first.name;
      batch.contiguous = group.front()->contiguous;
      int64_t chunks = 0;
      for (const Member *member : group) {
        batch.steps.push_back(member->step);
        if (member->sum) {
          if (member->totalStep != member->step)
            batch.steps.push_back(member->totalStep);
          batch.memberSteps.push_back({member->step, member->totalStep});
        }
        const kir::Kernel &kernel =
            program.kernels[program.steps[member->step].kernel];
        chunks += (domainElements(kernel) + kMultiTensorChunk - 1) /
                  kMultiTensorChunk;
      }
      llvm::sort(batch.steps);
      batch.launch.grid[0] = std::clamp<int64_t>(chunks, 1, kMaxGridBlocks);
      std::string origin = first.origin;
      kir::Kernel flat = flatKernel(first, batch.contiguous);
      flat.origin = std::to_string(group.size()) + " x " + origin;
      result.source += "\n";
      if (group.front()->sum) {
        batch.kind = CudaKernelBatch::Kind::Sum;
        batch.totalName = batch.name + "_total";
        // The flat kernel's store: the member's total, of its type.
        for (const kir::Instr &instr : flat.body)
          if (instr.op == kir::Op::Store)
            flat.operands[instr.operand].dtype = group.front()->totalType;
        batch.totalLaunch.grid[0] = std::clamp<int64_t>(
            int64_t(group.size()), 1, kMaxGridBlocks);
        result.source += emitMultiTensorSumKernels(
            flat, batch.name, batch.totalName, batch.launch,
            batch.vectorWidth, batch.totalLaunch);
      } else {
        result.source += emitMultiTensorKernel(flat, batch.name, batch.launch,
                                               batch.vectorWidth);
      }
      result.batches.push_back(std::move(batch));
    }
    window.clear();
  };
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    std::optional<Member> member;
    if (step.kind == kir::StepKind::Kernel) {
      member = asMember(program, int32_t(index));
      if (!member)
        member = asSumMember(program, int32_t(index));
    }
    if (!member) {
      flush();
      continue;
    }
    // The total of a waiting member's rows completes it.
    Member *reader = nullptr;
    for (Member &other : window)
      if (joinRows(program, other, *member)) {
        reader = &other;
        break;
      }
    if (reader) {
      if (llvm::any_of(window, [&](const Member &other) {
            return &other != reader && conflicts(*reader, other);
          })) {
        // Undo: the reader runs alone, the total starts a new window.
        reader->totalStep = -1;
        flush();
        window.push_back(std::move(*member));
      }
      continue;
    }
    if (llvm::any_of(window, [&](const Member &other) {
          return conflicts(*member, other);
        }))
      flush();
    window.push_back(std::move(*member));
  }
  flush();
  return result;
}

int64_t llmc::cuda::countKernelLaunches(const kir::Program &program,
                                        llvm::ArrayRef<CudaKernelBatch> batches) {
  int64_t launches = 0;
  for (const kir::Step &step : program.steps)
    launches += step.kind == kir::StepKind::Kernel ||
                (step.kind == kir::StepKind::Gemm && step.gemm.epilogue >= 0);
  for (const CudaKernelBatch &batch : batches)
    launches -= int64_t(batch.steps.size()) -
                (batch.kind == CudaKernelBatch::Kind::Sum ? 2 : 1);
  return launches;
}
