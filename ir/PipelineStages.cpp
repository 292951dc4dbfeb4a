// The pipeline cut: the planner's FLOPs per block and the balanced
// partition of the blocks into stages (see the header).
#include "ir/PipelineStages.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cassert>
#include <limits>

using namespace mlir;
using namespace mlir::llmc;

int64_t PipelineCosts::total() const {
  int64_t sum = first + last;
  for (int64_t block : blocks)
    sum += block;
  return sum;
}

PipelineCosts mlir::llmc::pipelineCosts(llvm::ArrayRef<int64_t> blockParameters,
                                        int64_t vocabSize, int64_t nEmbd,
                                        int64_t seqLen) {
  PipelineCosts costs;
  for (int64_t parameters : blockParameters)
    costs.blocks.push_back(6 * parameters + 12 * nEmbd * seqLen);
  costs.last = 6 * vocabSize * nEmbd;
  return costs;
}

PipelineCosts mlir::llmc::pipelineCostsOf(func::FuncOp forward) {
  std::vector<int64_t> parameters;
  int64_t vocab = 0, width = 0, seqLen = 0;
  for (BlockArgument arg : forward.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !type.hasStaticShape())
      continue;
    auto name = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                     "llmc.param");
    if (!name) {
      // The tokens [B, T]: the first integer input of rank 2.
      if (!seqLen && type.getRank() == 2 &&
          isa<IntegerType>(type.getElementType()))
        seqLen = type.getDimSize(1);
      continue;
    }
    llvm::StringRef rest = name.getValue();
    if (rest == "wte" && type.getRank() == 2) {
      vocab = type.getDimSize(0);
      width = type.getDimSize(1);
      continue;
    }
    int64_t index = -1;
    if (!rest.consume_front("h.") || rest.consumeInteger(10, index) ||
        index < 0 || !rest.starts_with("."))
      continue;
    if (static_cast<int64_t>(parameters.size()) <= index)
      parameters.resize(index + 1, 0);
    parameters[index] += type.getNumElements();
  }
  if (vocab && width && seqLen)
    return pipelineCosts(parameters, vocab, width, seqLen);
  PipelineCosts equal;
  equal.blocks.assign(parameters.size(), 1);
  equal.equalBlocks = true;
  return equal;
}

int64_t PipelineCut::blocksOf(int64_t stage) const {
  int64_t end = stage + 1 < stages() ? firstBlocks[stage + 1] : numBlocks;
  return end - firstBlocks[stage];
}

int64_t PipelineCut::stageOfBlock(int64_t block) const {
  int64_t stage = 0;
  while (stage + 1 < stages() && firstBlocks[stage + 1] <= block)
    ++stage;
  return stage;
}

int64_t PipelineCut::slowestCost() const {
  return stageCosts.empty()
             ? 0
             : *std::max_element(stageCosts.begin(), stageCosts.end());
}

double PipelineCut::imbalance() const {
  if (totalCost <= 0 || stageCosts.empty())
    return 1;
  return static_cast<double>(slowestCost()) * static_cast<double>(stages()) /
         static_cast<double>(totalCost);
}

namespace {
/// Stage `stage` of `pp` holding blocks [begin, end): their FLOPs, the
/// embedding's on the first stage and the classifier's on the last.
int64_t stageCost(const PipelineCosts &costs,
                  llvm::ArrayRef<int64_t> prefix, int64_t stage, int64_t pp,
                  int64_t begin, int64_t end) {
  return prefix[end] - prefix[begin] + (stage == 0 ? costs.first : 0) +
         (stage == pp - 1 ? costs.last : 0);
}

PipelineCut makeCut(const PipelineCosts &costs,
                    llvm::ArrayRef<int64_t> prefix,
                    std::vector<int64_t> firstBlocks) {
  PipelineCut cut;
  cut.numBlocks = static_cast<int64_t>(costs.blocks.size());
  cut.totalCost = costs.total();
  cut.equalBlocks = costs.equalBlocks;
  cut.firstBlocks = std::move(firstBlocks);
  int64_t pp = cut.stages();
  for (int64_t s = 0; s < pp; ++s) {
    int64_t begin = cut.firstBlocks[s];
    cut.stageCosts.push_back(
        stageCost(costs, prefix, s, pp, begin, begin + cut.blocksOf(s)));
  }
  return cut;
}

std::vector<int64_t> prefixSums(const PipelineCosts &costs) {
  std::vector<int64_t> prefix(costs.blocks.size() + 1, 0);
  for (size_t i = 0; i < costs.blocks.size(); ++i)
    prefix[i + 1] = prefix[i] + costs.blocks[i];
  return prefix;
}
} // namespace

PipelineCut mlir::llmc::balancePipeline(const PipelineCosts &costs,
                                        int64_t pp) {
  const int64_t n = static_cast<int64_t>(costs.blocks.size());
  assert(pp >= 1 && pp <= n && "every stage needs a block");
  std::vector<int64_t> prefix = prefixSums(costs);
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  // slowest[k][j]: the least slowest stage of blocks [0, j) on stages
  // 0 .. k (each non-empty). Exact: the costs are integers.
  std::vector<std::vector<int64_t>> slowest(
      pp, std::vector<int64_t>(n + 1, kNone));
  for (int64_t j = 1; j <= n; ++j)
    slowest[0][j] = stageCost(costs, prefix, 0, pp, 0, j);
  for (int64_t k = 1; k < pp; ++k)
    for (int64_t j = k + 1; j <= n; ++j)
      for (int64_t i = k; i < j; ++i)
        if (slowest[k - 1][i] != kNone)
          slowest[k][j] =
              std::min(slowest[k][j],
                       std::max(slowest[k - 1][i],
                                stageCost(costs, prefix, k, pp, i, j)));
  const int64_t bound = slowest[pp - 1][n];

  // Among the cuts whose slowest stage is `bound`: the least sum of
  // squared stage costs (the other stages as even as they can be), the
  // first found with ascending boundaries on ties.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> squares(pp,
                                           std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int64_t>> start(pp, std::vector<int64_t>(n + 1, 0));
  for (int64_t j = 1; j <= n; ++j) {
    int64_t cost = stageCost(costs, prefix, 0, pp, 0, j);
    if (cost <= bound)
      squares[0][j] = double(cost) * double(cost);
  }
  for (int64_t k = 1; k < pp; ++k)
    for (int64_t j = k + 1; j <= n; ++j)
      for (int64_t i = k; i < j; ++i) {
        int64_t cost = stageCost(costs, prefix, k, pp, i, j);
        if (squares[k - 1][i] == kInf || cost > bound)
          continue;
        double sum = squares[k - 1][i] + double(cost) * double(cost);
        if (sum < squares[k][j]) {
          squares[k][j] = sum;
          start[k][j] = i;
        }
      }
  std::vector<int64_t> firstBlocks(pp, 0);
  for (int64_t k = pp - 1, j = n; k > 0; --k) {
    firstBlocks[k] = start[k][j];
    j = start[k][j];
  }
  return makeCut(costs, prefix, std::move(firstBlocks));
}

llvm::Expected<PipelineCut>
mlir::llmc::pipelineCutAt(const PipelineCosts &costs,
                          llvm::ArrayRef<int64_t> firstBlocks) {
  const int64_t n = static_cast<int64_t>(costs.blocks.size());
  if (firstBlocks.empty() || firstBlocks.front() != 0)
    return llvm::createStringError(
        "the first stage must start at block 0 (stage-blocks lists the "
        "first block of every stage)");
  for (size_t s = 1; s < firstBlocks.size(); ++s)
    if (firstBlocks[s] <= firstBlocks[s - 1] || firstBlocks[s] >= n)
      return llvm::createStringError(llvm::formatv(
          "stage {0} starts at block {1}: the first blocks must increase and "
          "lie below the model's {2} blocks, so that every stage holds one",
          s, firstBlocks[s], n));
  return makeCut(costs, prefixSums(costs),
                 std::vector<int64_t>(firstBlocks.begin(), firstBlocks.end()));
}

std::string mlir::llmc::describePipelineCut(const PipelineCut &cut) {
  std::string text;
  llvm::raw_string_ostream os(text);
  double total = static_cast<double>(std::max<int64_t>(cut.totalCost, 1));
  for (int64_t s = 0; s < cut.stages(); ++s) {
    int64_t first = cut.firstBlocks[s], count = cut.blocksOf(s);
    os << (s ? "; " : "") << "stage " << s << ": ";
    if (s == 0)
      os << "embedding, ";
    os << "h." << first;
    if (count > 1)
      os << "-h." << first + count - 1;
    if (s == cut.stages() - 1)
      os << ", classifier";
    os << llvm::formatv(" ({0} block{1}, {2:f1}%{3})", count,
                        count == 1 ? "" : "s",
                        100.0 * double(cut.stageCosts[s]) / total,
                        s == 0 ? (cut.equalBlocks ? " of the blocks"
                                                  : " of the FLOPs")
                               : "");
  }
  if (cut.equalBlocks)
    os << " (blocks counted equal: the IR has no token embedding wte to "
          "size the FLOPs by)";
  return text;
}
