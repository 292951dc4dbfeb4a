// The trainer under pipeline parallelism: the 1F1B step, and the stages' tensors
// and pruned weights gathered over the stages.
#include "runtime/Train/Trainer.h"
#include "runtime/Train/TrainerSupport.h"
#include "runtime/Weights/Sparsity.h"

#include "ir/kernel/AtomicFile.h"
#include "ir/kernel/MemoryPlan.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Weights/Checkpoint.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>

using namespace llmc;
using namespace llmc::runtime;
using namespace llmc::runtime::trainer;

llvm::Error Trainer::runPipelineStep(
    const std::vector<std::vector<int32_t>> &tokens,
    const std::vector<std::vector<int32_t>> &targets, int64_t seqLen,
    int64_t first, int64_t maxMicroBatches, Executor &grad, Executor &noSync,
    std::vector<float> &losses) {
  const int64_t m = int64_t(tokens.size());
  const int64_t stage = ppStage(), stages = ppSize();
  // 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs
  // stages - s - 1 forwards ahead, then one forward and one backward in
  // turn, then the backwards left; at most stages - s micro-batches are
  // in flight, each kept as its stage input only.
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, m);
  Executor &forwardStep = *programs.pipelineForward;
  std::map<int64_t, HostTensor> stash;
  const int64_t batch = options.microBatch;
  auto setBatch = [&](Executor &e, int64_t i) -> llvm::Error {
    if (llvm::Error err =
            e.setTensor("tokens", tokenTensor(tokens[i], batch, seqLen)))
      return err;
    if (llvm::Error err =
            e.setTensor("targets", tokenTensor(targets[i], batch, seqLen)))
      return err;
    // The dropout masks of one process's micro-batch (numbered globally).
    e.setRng(options.seed,
             uint64_t(currentStep * maxMicroBatches + first + i));
    return llvm::Error::success();
  };
  auto forward = [&](int64_t i) -> llvm::Error {
    if (llvm::Error err = setBatch(forwardStep, i))
      return err;
    if (llvm::Error err = forwardStep.run())
      return err;
    if (stage == 0)
      return llvm::Error::success(); // its input is the tokens
    llvm::Expected<HostTensor> input = forwardStep.output("stage_input");
    if (!input)
      return input.takeError();
    stash[i] = std::move(*input);
    return llvm::Error::success();
  };
  auto backward = [&](int64_t i) -> llvm::Error {
    Executor &step = i == m - 1 ? grad : noSync;
    if (llvm::Error err = setBatch(step, i))
      return err;
    if (llvm::Error err = step.setScalar(kir::StepScalar::DLoss, 1.0 / double(m)))
      return err;
    if (stage > 0) {
      if (llvm::Error err = step.setTensor("stage_input", stash.at(i)))
        return err;
      stash.erase(i);
    }
    if (llvm::Error err = step.run())
      return err;
    if (stage != stages - 1)
      return llvm::Error::success();
    llvm::Expected<double> loss = step.scalarOutput(kir::StepScalar::Loss);
    if (!loss)
      return loss.takeError();
    losses.push_back(float(*loss));
    return llvm::Error::success();
  };
  for (int64_t i = 0; i < warmup; ++i)
    if (llvm::Error err = forward(i))
      return err;
  for (int64_t i = warmup; i < m; ++i) {
    if (llvm::Error err = forward(i))
      return err;
    if (llvm::Error err = backward(i - warmup))
      return err;
  }
  for (int64_t i = m - warmup; i < m; ++i)
    if (llvm::Error err = backward(i))
      return err;
  return llvm::Error::success();
}

llvm::Error Trainer::gatherStages(std::vector<std::string> &names,
                                  TensorMap &tensors) {
  // Each later stage sends its tensors (the tied copies aside: stage 0
  // holds them) to stage 0 in stage order: a count, then per tensor a
  // header (name length, dtype, rank, 8 dims, bytes), its name and data.
  auto tied = [&](llvm::StringRef name) {
    for (const std::string &param : options.ppTiedParams)
      if (name == param || name.ends_with("." + param))
        return true;
    return false;
  };
  comm::Communicator &pp = *options.pp;
  auto waitFor = [&](comm::Ticket ticket) { return pp.wait(ticket); };
  if (ppStage() > 0) {
    std::vector<std::pair<std::string, HostTensor>> mine;
    for (const std::string &name : names)
      if (!tied(name)) {
        llvm::Expected<HostTensor> value = store->get(name);
        if (!value)
          return value.takeError();
        mine.push_back({name, std::move(*value)});
      }
    for (auto &entry : tensors)
      if (!tied(entry.first))
        mine.push_back(entry);
    int64_t count = int64_t(mine.size());
    if (llvm::Error err = waitFor(pp.send(&count, 1, kir::DType::I64, 0)))
      return err;
    for (auto &[name, value] : mine) {
      int64_t header[12] = {int64_t(name.size()), int64_t(value.dtype),
                            int64_t(value.shape.size())};
      if (value.shape.size() > 8)
        return llvm::createStringError("checkpoint: '" + name +
                                       "' has more than 8 dimensions");
      for (size_t d = 0; d < value.shape.size(); ++d)
        header[3 + d] = value.shape[d];
      header[11] = int64_t(value.bytes.size());
      if (llvm::Error err = waitFor(pp.send(header, 12, kir::DType::I64, 0)))
        return err;
      if (llvm::Error err =
              waitFor(pp.send(name.data(), int64_t(name.size()),
                              kir::DType::I1, 0)))
        return err;
      if (llvm::Error err =
              waitFor(pp.send(value.bytes.data(), int64_t(value.bytes.size()),
                              kir::DType::I1, 0)))
        return err;
    }
    return llvm::Error::success();
  }
  for (int from = 1; from < ppSize(); ++from) {
    int64_t count = 0;
    if (llvm::Error err = waitFor(pp.recv(&count, 1, kir::DType::I64, from)))
      return err;
    for (int64_t t = 0; t < count; ++t) {
      int64_t header[12] = {};
      if (llvm::Error err =
              waitFor(pp.recv(header, 12, kir::DType::I64, from)))
        return err;
      std::string name(size_t(header[0]), '\0');
      if (llvm::Error err = waitFor(
              pp.recv(name.data(), header[0], kir::DType::I1, from)))
        return err;
      HostTensor value;
      value.dtype = kir::DType(header[1]);
      value.shape.assign(header + 3, header + 3 + header[2]);
      value.bytes.resize(size_t(header[11]));
      if (llvm::Error err = waitFor(pp.recv(value.bytes.data(), header[11],
                                            kir::DType::I1, from)))
        return err;
      // Scalars every stage keeps (the loss scale) are stage 0's.
      if (store->contains(name) || tensors.count(name))
        continue;
      tensors[name] = std::move(value);
    }
  }
  return llvm::Error::success();
}

llvm::Error Trainer::gatherPrunedOverStages(
    std::vector<PrunedTensor> &pruned) {
  // Each stage's list as "name=fraction" lines, padded to the longest and
  // all-gathered over pp.
  std::string mine;
  llvm::raw_string_ostream os(mine);
  for (const PrunedTensor &t : pruned)
    os << t.name << "=" << llvm::format("%.17g", t.zeroFraction) << "\n";
  comm::Communicator &pp = *options.pp;
  int64_t length = int64_t(mine.size());
  std::vector<int64_t> lengths(ppSize());
  if (llvm::Error err = pp.wait(
          pp.allGather(&length, lengths.data(), 1, kir::DType::I64)))
    return err;
  int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  mine.resize(size_t(longest), '\0');
  std::string all(size_t(longest) * lengths.size(), '\0');
  if (longest > 0)
    if (llvm::Error err = pp.wait(pp.allGather(mine.data(), all.data(),
                                               longest, kir::DType::I1)))
      return err;
  pruned.clear();
  for (size_t stage = 0; stage < lengths.size(); ++stage) {
    llvm::StringRef text(all.data() + stage * longest, size_t(lengths[stage]));
    while (!text.empty()) {
      auto [line, rest] = text.split('\n');
      text = rest;
      auto [name, fraction] = line.rsplit('=');
      PrunedTensor t;
      t.name = name.str();
      if (fraction.getAsDouble(t.zeroFraction))
        return llvm::createStringError("pipeline stage " +
                                       llvm::Twine(stage) +
                                       ": unreadable prune report '" + line +
                                       "'");
      pruned.push_back(std::move(t));
    }
  }
  return llvm::Error::success();
}
