// The pipeline cut (ir/PipelineStages.h) against brute force over every
// cut, and the planner's costs of a model against those read from its IR.
#include "training/Plan/Estimate.h"
#include "frontend/GptBuilder.h"
#include "ir/PipelineStages.h"

#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

#include <functional>
#include <limits>
#include <random>

using namespace mlir;
using namespace mlir::llmc;

namespace {

/// Calls `visit` with the first blocks of every cut of `n` blocks into `pp`
/// non-empty runs.
void forEachCut(int64_t n, int64_t pp,
                const std::function<void(const std::vector<int64_t> &)> &visit) {
  std::vector<int64_t> firsts{0};
  std::function<void()> extend = [&] {
    if (static_cast<int64_t>(firsts.size()) == pp) {
      visit(firsts);
      return;
    }
    int64_t left = pp - static_cast<int64_t>(firsts.size());
    for (int64_t b = firsts.back() + 1; b + left <= n; ++b) {
      firsts.push_back(b);
      extend();
      firsts.pop_back();
    }
  };
  extend();
}

/// The stage costs of a cut, summed here from the definition.
std::vector<int64_t> stageCostsOf(const PipelineCosts &costs,
                                  const std::vector<int64_t> &firsts) {
  int64_t n = static_cast<int64_t>(costs.blocks.size());
  int64_t pp = static_cast<int64_t>(firsts.size());
  std::vector<int64_t> result;
  for (int64_t s = 0; s < pp; ++s) {
    int64_t end = s + 1 < pp ? firsts[s + 1] : n, sum = 0;
    for (int64_t b = firsts[s]; b < end; ++b)
      sum += costs.blocks[b];
    if (s == 0)
      sum += costs.first;
    if (s == pp - 1)
      sum += costs.last;
    result.push_back(sum);
  }
  return result;
}

double squares(const std::vector<int64_t> &stageCosts) {
  double sum = 0;
  for (int64_t cost : stageCosts)
    sum += double(cost) * double(cost);
  return sum;
}

} // namespace

// On random models of up to 9 blocks (few distinct block costs, so that
// ties are common), every pp: the cut's slowest stage is the least over
// all cuts, and among the cuts as slow its squares are the least.
TEST(PipelineStages, BalancedCutIsOptimal) {
  std::mt19937_64 rng(15);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    PipelineCosts costs;
    int64_t n = 1 + static_cast<int64_t>(rng() % 9);
    for (int64_t i = 0; i < n; ++i)
      costs.blocks.push_back(10 * (1 + static_cast<int64_t>(rng() % 3)));
    costs.first = static_cast<int64_t>(rng() % 20);
    costs.last = static_cast<int64_t>(rng() % 120);
    for (int64_t pp = 1; pp <= n; ++pp) {
      int64_t bestSlowest = std::numeric_limits<int64_t>::max();
      forEachCut(n, pp, [&](const std::vector<int64_t> &firsts) {
        std::vector<int64_t> stage = stageCostsOf(costs, firsts);
        bestSlowest =
            std::min(bestSlowest, *std::max_element(stage.begin(), stage.end()));
      });
      double bestSquares = std::numeric_limits<double>::infinity();
      forEachCut(n, pp, [&](const std::vector<int64_t> &firsts) {
        std::vector<int64_t> stage = stageCostsOf(costs, firsts);
        if (*std::max_element(stage.begin(), stage.end()) == bestSlowest)
          bestSquares = std::min(bestSquares, squares(stage));
      });
      PipelineCut cut = balancePipeline(costs, pp);
      ASSERT_EQ(cut.stages(), pp);
      EXPECT_EQ(cut.stageCosts, stageCostsOf(costs, cut.firstBlocks));
      EXPECT_EQ(cut.slowestCost(), bestSlowest) << "n=" << n << " pp=" << pp;
      EXPECT_EQ(squares(cut.stageCosts), bestSquares)
          << "n=" << n << " pp=" << pp;
      for (int64_t s = 0; s < pp; ++s)
        EXPECT_GE(cut.blocksOf(s), 1);
      EXPECT_EQ(cut.totalCost, costs.total());
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

// The GPT of test/passes/shard-pp-balanced.mlir: 5 blocks of 3280
// parameters, h 16, T 8, so 6 * 3280 + 12 * 16 * 8 = 21216 FLOPs a block.
// With a vocabulary of 32 the classifier (3072) is small and the cut is
// 3 | 2; with 4096 it is 393216, and 4 | 1 makes the slowest stage the
// last's 414432 instead of 435648.
TEST(PipelineStages, ClassifierMovesTheCut) {
  std::vector<int64_t> blocks(5, 3280);
  PipelineCosts small = pipelineCosts(blocks, 32, 16, 8);
  EXPECT_EQ(small.blocks[0], 21216);
  EXPECT_EQ(small.last, 3072);
  EXPECT_EQ(balancePipeline(small, 2).firstBlocks,
            (std::vector<int64_t>{0, 3}));
  PipelineCosts big = pipelineCosts(blocks, 4096, 16, 8);
  PipelineCut cut = balancePipeline(big, 2);
  EXPECT_EQ(cut.firstBlocks, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(cut.stageCosts, (std::vector<int64_t>{84864, 414432}));
  EXPECT_EQ(describePipelineCut(cut),
            "stage 0: embedding, h.0-h.3 (4 blocks, 17.0% of the FLOPs); "
            "stage 1: h.4, classifier (1 block, 83.0%)");
  // At pp=3 the last stage (h.4 and the classifier) is the slowest
  // whatever the other two hold; the even 2 | 2 beats 1 | 3 and 3 | 1.
  EXPECT_EQ(balancePipeline(big, 3).firstBlocks,
            (std::vector<int64_t>{0, 2, 4}));
  // One stage: everything; as many stages as blocks: one each.
  EXPECT_EQ(balancePipeline(big, 1).stageCosts,
            (std::vector<int64_t>{big.total()}));
  EXPECT_EQ(balancePipeline(big, 5).firstBlocks,
            (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Equal blocks and no classifier: equal runs.
  PipelineCosts even;
  even.blocks.assign(12, 7);
  EXPECT_EQ(balancePipeline(even, 4).firstBlocks,
            (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_DOUBLE_EQ(balancePipeline(even, 4).imbalance(), 1.0);
  EXPECT_NEAR(cut.imbalance(), 2 * 414432.0 / (84864 + 414432), 1e-12);
}

TEST(PipelineStages, GivenCut) {
  PipelineCosts costs = pipelineCosts(std::vector<int64_t>(5, 3280), 4096, 16,
                                      8);
  llvm::Expected<PipelineCut> cut = pipelineCutAt(costs, {0, 3});
  ASSERT_TRUE(static_cast<bool>(cut));
  EXPECT_EQ(cut->stageCosts, (std::vector<int64_t>{3 * 21216,
                                                   2 * 21216 + 393216}));
  EXPECT_EQ(cut->stageOfBlock(-1), 0);
  EXPECT_EQ(cut->stageOfBlock(2), 0);
  EXPECT_EQ(cut->stageOfBlock(3), 1);
  EXPECT_EQ(cut->stageOfBlock(4), 1);
  for (std::vector<int64_t> bad :
       {std::vector<int64_t>{}, {1, 3}, {0, 0}, {0, 3, 2}, {0, 5}}) {
    llvm::Expected<PipelineCut> error = pipelineCutAt(costs, bad);
    EXPECT_FALSE(static_cast<bool>(error));
    llvm::consumeError(error.takeError());
  }
}

// What the planner counts (its model FLOPs per token, by part) equals what
// the pass and `llmc run` read from the IR of the same model, so the three
// cut alike: GPT-2 (tied classifier) and Llama 7B (untied, SwiGLU), at a
// sequence shorter than the config's.
TEST(PipelineStages, PlannerAndIrAgree) {
  MLIRContext context;
  for (llvm::StringRef name : {"gpt2", "llama-7b"}) {
    std::optional<ModelConfig> config = getModelPreset(name);
    ASSERT_TRUE(config.has_value());
    llvm::Expected<plan::PlanModel> model =
        plan::analyzeModel(context, *config);
    ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
    const int64_t seqLen = 256;
    PipelineCosts planned = plan::pipelineCostsOf(*model, seqLen);
    EXPECT_EQ(static_cast<double>(planned.total()),
              plan::modelFlopsPerToken(*model, seqLen));
    llvm::Expected<OwningOpRef<ModuleOp>> module =
        buildForwardModule(context, *config, {1, seqLen});
    ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
    auto forward = (**module).lookupSymbol<func::FuncOp>("forward");
    PipelineCosts read = pipelineCostsOf(forward);
    EXPECT_FALSE(read.equalBlocks);
    EXPECT_EQ(read.blocks, planned.blocks) << name.str();
    EXPECT_EQ(read.first, planned.first);
    EXPECT_EQ(read.last, planned.last) << name.str();
    EXPECT_EQ(balancePipeline(read, 4).firstBlocks,
              plan::pipelineCutOf(*model, seqLen, 4).firstBlocks);
  }
}
