// H100 roofline of compiled programs: a MODEL, NOT A MEASUREMENT. For every
// kernel and every GEMM / attention / gradient step of GPT-2 124M and GPT-2
// 1.5B (preset gpt2-xl), forward and training step, it counts the FLOPs and
// the DRAM bytes from the program and prints the time a kernel needs at
// the H100 SXM's peaks, the predicted step time and the MFU that implies.
//
// The machine (H100 SXM5, dense, from NVIDIA's datasheet):
//   HBM3 bandwidth             3.35 TB/s
//   BF16 tensor cores          989 TFLOP/s  (the MFU denominator)
//   TF32 tensor cores          494 TFLOP/s  (the programs' GEMMs are f32:
//                                            cuBLASLt runs them as TF32)
//   FP32 CUDA cores             67 TFLOP/s  (fused elementwise kernels)
// A step takes max(FLOPs / peak, bytes / bandwidth): no launch overhead,
// no tail effects, perfect overlap of memory and math, every byte read
// from DRAM once per step (a kernel reading a row in several phases, or a
// broadcast operand, is counted once). GEMM bytes are A, B and C once;
// an epilogue's other operands (bias) are added to its GEMM, whose time it
// shares. Attention is flash attention: q, k, v, out and lse move once, the
// scores never reach DRAM, causal masking halves the products. A gather
// counts every element it reads.
//
//   build/bin/bench-roofline [--batch 8] [--seq 1024] [--verbose]
#include "bench/Roofline.h"
#include "bench/Options.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "ir/kernel/Program.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <tuple>

using namespace llmc;
using namespace llmc::bench;
namespace cl = llvm::cl;

static cl::opt<int64_t> batchSize("batch", cl::cat(llmc::bench::benchOptions()),
                                  cl::desc("Sequences per step"), cl::init(8));
static cl::opt<int64_t> seqLen("seq", cl::cat(llmc::bench::benchOptions()),
                               cl::desc("Tokens per sequence"), cl::init(1024));
static cl::opt<bool> verbose("verbose", cl::cat(llmc::bench::benchOptions()),
                             cl::desc("One line per step instead of per kind"));

namespace {

/// Prints a program's roofline; returns its predicted seconds and FLOPs.
std::pair<double, double> report(llvm::StringRef title,
                                 const kir::Program &program) {
  std::vector<Cost> costs = programCosts(program);
  llvm::outs() << "\n"
               << title << " (" << program.steps.size() << " steps, "
               << program.kernels.size() << " kernels)\n";
  llvm::outs() << llvm::format("  %-6s %10s %10s %7s %6s %10s  %s\n", "count",
                               "GFLOP", "MB", "FLOP/B", "bound", "time us",
                               "step");
  // Grouped by description, in order of first appearance.
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, Cost>> groups;
  for (const Cost &cost : costs) {
    std::string key =
        verbose ? std::to_string(order.size()) + " " + cost.what : cost.what;
    auto [it, inserted] = groups.try_emplace(key, 0, cost);
    if (inserted)
      order.push_back(key);
    ++it->second.first;
  }
  double total = 0, flops = 0;
  std::map<std::string, double> byKind;
  for (const Cost &cost : costs) {
    total += cost.seconds();
    flops += cost.flops;
    byKind[cost.what.substr(0, cost.what.find(' '))] += cost.seconds();
  }
  for (const std::string &key : order) {
    const auto &[count, cost] = groups[key];
    llvm::outs() << llvm::format(
        "  %5dx %10.3f %10.2f %7.1f %6s %10.1f  %s\n", count, cost.flops / 1e9,
        cost.bytes / 1e6, cost.bytes ? cost.flops / cost.bytes : 0.0,
        cost.memoryBound() ? "memory" : "math", cost.seconds() * 1e6,
        (cost.what.size() > 100 ? cost.what.substr(0, 97) + "..." : cost.what)
            .c_str());
  }
  llvm::outs() << "  time by kind:";
  for (const auto &[kind, seconds] : byKind)
    llvm::outs() << llvm::format(" %s %.2f ms (%.0f%%)", kind.c_str(),
                                 seconds * 1e3, 100 * seconds / total);
  llvm::outs() << "\n";
  llvm::outs() << llvm::format(
      "  predicted %.2f ms, %.1f TFLOP/s, MFU %.1f%% of the bf16 peak "
      "(%.1f%% of TF32), %.3f TFLOP in the program\n",
      total * 1e3, flops / total / 1e12, 100 * flops / total / kBf16Peak,
      100 * flops / total / kTf32Peak, flops / 1e12);
  return {total, flops};
}

std::unique_ptr<mlir::MLIRContext> newContext() {
  auto context = std::make_unique<mlir::MLIRContext>();
  context->loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  return context;
}

[[noreturn]] void die(const llvm::Twine &message) {
  llvm::errs() << "bench-roofline: " << message << "\n";
  std::exit(1);
}

} // namespace

int main(int argc, char **argv) {
  llmc::bench::parseOptions(argc, argv,
                            "H100 roofline model of llmc programs\n");
  llvm::outs() << "H100 SXM roofline -- a MODEL, NOT A MEASUREMENT: peaks "
                  "3.35 TB/s HBM3, 989 TFLOP/s bf16, 494 TFLOP/s TF32 (the f32 "
                  "GEMMs and attention), 67 TFLOP/s fp32 (kernels); B="
               << batchSize << " T=" << seqLen << "\n";
  for (const char *preset : {"gpt2", "gpt2-xl"}) {
    std::optional<mlir::llmc::ModelConfig> config =
        mlir::llmc::getModelPreset(preset);
    if (!config)
      die(llvm::Twine("no preset ") + preset);
    int64_t tokens = batchSize * seqLen;

    auto context = newContext();
    auto module =
        mlir::llmc::buildForwardModule(*context, *config, {batchSize, seqLen});
    if (!module)
      die(llvm::toString(module.takeError()));
    auto training = ::llmc::training::compileTrainingStep(**module, TrainingStepOptions());
    if (!training)
      die(llvm::toString(training.takeError()));

    std::string name = std::string(preset) + " (" + config->name + ")";
    auto [forward, forwardFlops] =
        report(name + ": forward", training->forward);
    auto [grad, gradFlops] = report(
        name + ": gradient step (forward + backward)", training->gradStep);
    auto [update, updateFlops] =
        report(name + ": optimizer step (AdamW)", training->updateStep);
    double step = grad + update;
    llvm::outs() << llvm::format(
        "%s summary: forward %.2f ms (%.0f tokens/s); training step "
        "(grad + update) %.2f ms = %.0f tokens/s, MFU %.1f%% (bf16 peak; "
        "program FLOPs %.3f TFLOP per step)\n",
        preset, forward * 1e3, tokens / forward, step * 1e3, tokens / step,
        100 * (gradFlops + updateFlops) / step / kBf16Peak,
        (gradFlops + updateFlops) / 1e12);
  }
  return 0;
}
