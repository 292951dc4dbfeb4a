// Multi-tensor launches: which kernel steps form batches (windows of
// independent elementwise steps, grouped by body) and their kernels.
#include "codegen/KernelToCuda/MultiTensor.h"

#include "codegen/KernelToCuda/KernelToCuda.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

using namespace llmc;
using namespace llmc::cuda;

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

/// The member a kernel step would be, if its kernel qualifies.
std::optional<Member> asMember(const kir::Program &program, int32_t index) {
  const kir::Kernel &kernel = program.kernels[program.steps[index].kernel];
  if (kernel.hasReduction())
    return std::nullopt;
  int64_t elements = 1;
  for (int64_t extent : kernel.domain)
    elements *= extent;
  Member member;
  member.step = index;
  std::vector<bool> stored(kernel.operands.size(), false);
  std::string &key = member.key;
  for (const kir::Instr &instr : kernel.body) {
    if (instr.op == kir::Op::Index || instr.op == kir::Op::Random)
      return std::nullopt;
    if (instr.op == kir::Op::Load || instr.op == kir::Op::Store) {
      for (int32_t arg : kir::indexOverrides(instr))
        if (arg >= 0)
          return std::nullopt;
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
      std::vector<const Member *> &group = groups[member.key];
      if (group.empty())
        order.push_back(member.key);
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
        const kir::Kernel &kernel =
            program.kernels[program.steps[member->step].kernel];
        int64_t elements = 1;
        for (int64_t extent : kernel.domain)
          elements *= extent;
        chunks += (elements + kMultiTensorChunk - 1) / kMultiTensorChunk;
      }
      batch.launch.grid[0] = std::clamp<int64_t>(chunks, 1, kMaxGridBlocks);
      std::string origin = first.origin;
      kir::Kernel flat = flatKernel(first, batch.contiguous);
      flat.origin = std::to_string(group.size()) + " x " + origin;
      result.source += "\n";
      result.source += emitMultiTensorKernel(flat, batch.name, batch.launch,
                                             batch.vectorWidth);
      result.batches.push_back(std::move(batch));
    }
    window.clear();
  };
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    std::optional<Member> member;
    if (step.kind == kir::StepKind::Kernel)
      member = asMember(program, int32_t(index));
    if (!member) {
      flush();
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
    launches -= int64_t(batch.steps.size()) - 1;
  return launches;
}
