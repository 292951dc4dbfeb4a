// Greedy-by-size static memory planning over buffer live ranges.
#include "ir/kernel/MemoryPlan.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <set>
#include <numeric>

using namespace llmc::kir;

std::vector<int32_t> llmc::kir::buffersOfStep(const Program &program,
                                              const Step &step) {
  std::vector<int32_t> buffers;
  auto addKernel = [&](int32_t index) {
    for (const Access &access : program.kernels[index].operands)
      buffers.push_back(access.buffer);
  };
  if (step.kind == StepKind::Kernel)
    addKernel(step.kernel);
  forEachView(step, [&](const char *, const View &view, ViewRole,
                        const std::vector<int64_t> &) {
    buffers.push_back(view.buffer);
  });
  if (step.kind == StepKind::Gemm && step.gemm.epilogue >= 0)
    addKernel(step.gemm.epilogue);
  return buffers;
}

static int64_t alignUp(int64_t value) {
  return (value + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

void llmc::kir::planMemory(Program &program) {
  int32_t numSteps = program.steps.size();
  std::vector<bool> seen(program.buffers.size(), false);
  for (int32_t step = 0; step < numSteps; ++step)
    for (int32_t buffer : buffersOfStep(program, program.steps[step])) {
      Buffer &b = program.buffers[buffer];
      if (!seen[buffer])
        b.firstStep = step;
      seen[buffer] = true;
      b.lastStep = step;
    }
  for (const Binding &output : program.outputs)
    program.buffers[output.buffer].lastStep = std::max(numSteps - 1, 0);

  std::vector<int32_t> arena;
  for (int32_t i = 0; i < int32_t(program.buffers.size()); ++i)
    if (program.buffers[i].kind == BufferKind::Arena)
      arena.push_back(i);
  // Largest first; ties by first use, then index, so plans are stable.
  std::sort(arena.begin(), arena.end(), [&](int32_t a, int32_t b) {
    const Buffer &x = program.buffers[a], &y = program.buffers[b];
    if (x.bytes() != y.bytes())
      return x.bytes() > y.bytes();
    if (x.firstStep != y.firstStep)
      return x.firstStep < y.firstStep;
    return a < b;
  });

  std::vector<int32_t> placed;
  int64_t peak = 0;
  for (int32_t index : arena) {
    Buffer &buffer = program.buffers[index];
    int64_t size = alignUp(std::max<int64_t>(buffer.bytes(), 1));
    // The intervals taken by placed buffers whose live range overlaps.
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (int32_t other : placed) {
      const Buffer &o = program.buffers[other];
      if (o.firstStep <= buffer.lastStep && buffer.firstStep <= o.lastStep)
        taken.push_back({o.offset, o.offset + alignUp(o.bytes())});
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (auto [begin, end] : taken) {
      if (offset + size <= begin)
        break;
      offset = std::max(offset, end);
    }
    buffer.offset = offset;
    placed.push_back(index);
    peak = std::max(peak, offset + buffer.bytes());
  }
  program.arenaBytes = peak;
}

MemoryPlanStats llmc::kir::memoryPlanStats(const Program &program) {
  MemoryPlanStats stats;
  int32_t numSteps = program.steps.size();
  std::vector<int64_t> live(std::max(numSteps, 1), 0);
  for (const Buffer &buffer : program.buffers) {
    if (buffer.kind != BufferKind::Arena)
      continue;
    stats.peakBytes = std::max(stats.peakBytes, buffer.offset + buffer.bytes());
    stats.totalBytes += buffer.bytes();
    // Clamped: an artifact's live ranges are data, not trusted indices.
    int32_t last = std::min<int32_t>(buffer.lastStep, live.size() - 1);
    for (int32_t step = std::max(buffer.firstStep, 0); step <= last; ++step)
      live[step] += buffer.bytes();
  }
  for (int64_t bytes : live)
    stats.liveLowerBound = std::max(stats.liveLowerBound, bytes);
  return stats;
}

llvm::StringRef llmc::kir::persistentKindName(PersistentKind kind) {
  switch (kind) {
  case PersistentKind::Parameters:
    return "parameters";
  case PersistentKind::Master:
    return "master partition";
  case PersistentKind::Gradients:
    return "gradients";
  case PersistentKind::Optimizer:
    return "optimizer state";
  case PersistentKind::Other:
    return "other persistent";
  }
  return "other persistent";
}

std::vector<PersistentKind>
llmc::kir::persistentKinds(const std::vector<PersistentTensor> &tensors) {
  std::set<std::string> params;
  for (const PersistentTensor &t : tensors)
    if (t.parameter)
      params.insert(t.name);
  auto startsWith = [](const std::string &name, const char *prefix) {
    return name.rfind(prefix, 0) == 0;
  };
  auto endsWith = [](const std::string &name, llvm::StringRef suffix) {
    return llvm::StringRef(name).ends_with(suffix);
  };
  std::vector<PersistentKind> kinds;
  for (const PersistentTensor &t : tensors) {
    PersistentKind kind = PersistentKind::Other;
    if (t.parameter)
      kind = PersistentKind::Parameters;
    else if (startsWith(t.name, "grad.") && endsWith(t.name, ".squares") &&
             t.bytes == 4)
      kind = PersistentKind::Other; // a gradient's sum of squares for the
                                    // norm (llmc-squares-in-grad-step)
    else if (startsWith(t.name, "grad."))
      kind = PersistentKind::Gradients;
    else if (startsWith(t.name, "shard.") && params.count(t.name.substr(6)))
      kind = PersistentKind::Master;
    else if (startsWith(t.name, "adam_m.") || startsWith(t.name, "adam_v.") ||
             startsWith(t.name, "momentum.") ||
             startsWith(t.name, "shard.adam_m.") ||
             startsWith(t.name, "shard.adam_v.") ||
             startsWith(t.name, "shard.momentum."))
      kind = PersistentKind::Optimizer;
    else if (startsWith(t.name, "shard."))
      kind = PersistentKind::Parameters; // ZeRO-3: the blocks are the weights
    else if (startsWith(t.name, "cast."))
      kind = PersistentKind::Parameters; // the 16-bit copies the steps read
    kinds.push_back(kind);
  }
  return kinds;
}

PersistentBytes
llmc::kir::classifyPersistent(const std::vector<PersistentTensor> &tensors) {
  std::vector<PersistentKind> kinds = persistentKinds(tensors);
  std::set<std::string> seen;
  PersistentBytes bytes;
  for (auto [t, kind] : llvm::zip_equal(tensors, kinds)) {
    if (!seen.insert(t.name).second)
      continue;
    int64_t *field[] = {&bytes.parameters, &bytes.master, &bytes.gradients,
                        &bytes.optimizer, &bytes.other};
    *field[int(kind)] += t.bytes;
  }
  return bytes;
}

std::vector<PersistentTensor>
llmc::kir::persistentTensors(const std::vector<const Program *> &programs) {
  std::vector<PersistentTensor> tensors;
  std::set<std::string> seen;
  for (const Program *program : programs)
    for (const Buffer &buffer : program->buffers)
      if (isPersistent(buffer.kind) && seen.insert(buffer.name).second)
        tensors.push_back({buffer.name, buffer.kind == BufferKind::Param,
                           buffer.bytes()});
  return tensors;
}
