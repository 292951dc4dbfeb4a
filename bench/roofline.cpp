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
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "ir/kernel/Program.h"
#include "codegen/Training.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
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
namespace cl = llvm::cl;

static cl::opt<int64_t> batchSize("batch", cl::desc("Sequences per step"),
                                  cl::init(8));
static cl::opt<int64_t> seqLen("seq", cl::desc("Tokens per sequence"),
                               cl::init(1024));
static cl::opt<bool> verbose("verbose",
                             cl::desc("One line per step instead of per kind"));

namespace {

constexpr double kBandwidth = 3.35e12; // bytes/s
constexpr double kBf16Peak = 989e12;   // FLOP/s
constexpr double kTf32Peak = 494e12;
constexpr double kFp32Peak = 67e12;

/// One step's cost.
struct Cost {
  std::string what; // for grouping and printing
  double flops = 0, bytes = 0;
  double peak = kFp32Peak; // the compute peak that applies
  double seconds() const { return std::max(flops / peak, bytes / kBandwidth); }
  bool memoryBound() const { return bytes / kBandwidth >= flops / peak; }
};

double viewBytes(const std::vector<int64_t> &shape) {
  double n = 4;
  for (int64_t extent : shape)
    n *= double(extent);
  return n;
}

/// DRAM bytes of a kernel: each distinct (buffer, offset, strides) operand
/// once, its elements the product of the extents it varies over (all of
/// the domain for a gather), read and/or written.
double kernelBytes(const kir::Kernel &kernel, int32_t skipBuffer = -1) {
  std::set<std::tuple<int32_t, int64_t, std::vector<int64_t>>> seen;
  std::map<int32_t, std::pair<bool, bool>> use; // operand: loaded, stored
  std::map<int32_t, bool> gathered;
  for (const kir::Instr &instr : kernel.body) {
    if (instr.op == kir::Op::Load) {
      use[instr.operand].first = true;
      for (int32_t arg : instr.args)
        gathered[instr.operand] |= arg >= 0;
    } else if (instr.op == kir::Op::Store) {
      use[instr.operand].second = true;
    }
  }
  double total = 0;
  for (auto [index, access] : llvm::enumerate(kernel.operands)) {
    if (access.buffer == skipBuffer)
      continue;
    if (!seen.insert({access.buffer, access.offset, access.strides}).second)
      continue;
    double elements = 1;
    for (size_t d = 0; d < kernel.domain.size(); ++d)
      if (access.strides[d] != 0 || gathered[index])
        elements *= double(kernel.domain[d]);
    auto [loaded, stored] = use[index];
    total += elements * kir::dtypeBytes(access.dtype) * (loaded + stored);
  }
  return total;
}

/// A kernel's origin with layer numbers as '#' (h.3.attn -> h.#.attn), so
/// that the same kernel of every layer is one line, and its domain.
std::string kernelKind(const kir::Kernel &kernel) {
  std::string origin = kernel.origin.empty() ? kernel.name : kernel.origin;
  std::string kind;
  for (size_t i = 0; i < origin.size(); ++i) {
    bool digit = std::isdigit(static_cast<unsigned char>(origin[i]));
    if (!digit)
      kind += origin[i];
    else if (i == 0 || !std::isdigit(static_cast<unsigned char>(origin[i - 1])))
      kind += '#';
  }
  return kind + " " + kir::formatShape(kernel.domain);
}

std::vector<Cost> programCosts(const kir::Program &program) {
  std::vector<Cost> costs;
  for (const kir::Step &step : program.steps) {
    Cost cost;
    switch (step.kind) {
    case kir::StepKind::Kernel: {
      const kir::Kernel &kernel = program.kernels[step.kernel];
      cost.what = "kernel " + kernelKind(kernel);
      cost.flops = double(kir::countFlops(kernel));
      cost.bytes = kernelBytes(kernel);
      break;
    }
    case kir::StepKind::Gemm: {
      const kir::GemmStep &g = step.gemm;
      cost.what = llvm::formatv("gemm {0}x{1}x{2}{3}{4}", g.m, g.n, g.k,
                                g.batch > 1 ? " batch " + std::to_string(g.batch)
                                            : std::string(),
                                g.epilogue >= 0
                                    ? " + " + kernelKind(program.kernels[g.epilogue])
                                    : std::string())
                      .str();
      cost.flops = 2.0 * g.batch * g.m * g.n * g.k;
      double batchA = g.a.strides[0] ? g.batch : 1,
             batchB = g.b.strides[0] ? g.batch : 1;
      cost.bytes = 4.0 * (batchA * g.m * g.k + batchB * g.k * g.n +
                          double(g.batch) * g.m * g.n);
      if (g.epilogue >= 0) {
        const kir::Kernel &epilogue = program.kernels[g.epilogue];
        cost.flops += double(kir::countFlops(epilogue));
        cost.bytes += kernelBytes(epilogue, g.c.buffer);
      }
      cost.peak = kTf32Peak;
      break;
    }
    case kir::StepKind::Attention: {
      const kir::AttentionStep &a = step.attention;
      cost.what = llvm::formatv("attention B{0} H{1} T{2} D{3}", a.batch,
                                a.heads, a.seq, a.headDim)
                      .str();
      double products = 4.0 * a.batch * a.heads * a.seq * a.seq * a.headDim;
      cost.flops = a.causal ? products / 2 : products;
      cost.bytes = 4 * viewBytes({a.batch, a.heads, a.seq, a.headDim}) +
                   viewBytes({a.batch, a.heads, a.seq});
      cost.peak = kTf32Peak;
      break;
    }
    case kir::StepKind::AttentionGrad: {
      const kir::AttentionGradStep &a = step.attentionGrad;
      cost.what = llvm::formatv("attention grad B{0} H{1} T{2} D{3}", a.batch,
                                a.heads, a.seq, a.headDim)
                      .str();
      // Five products: the scores again, dV, dP, dQ, dK.
      double products = 10.0 * a.batch * a.heads * a.seq * a.seq * a.headDim;
      cost.flops = a.causal ? products / 2 : products;
      cost.bytes = 8 * viewBytes({a.batch, a.heads, a.seq, a.headDim}) +
                   viewBytes({a.batch, a.heads, a.seq});
      cost.peak = kTf32Peak;
      break;
    }
    case kir::StepKind::EmbeddingGrad: {
      const kir::EmbeddingGradStep &e = step.embeddingGrad;
      cost.what = llvm::formatv("embedding grad {0} ids -> [{1}, {2}]",
                                e.positions, e.rows, e.channels)
                      .str();
      cost.flops = double(e.positions) * e.channels;
      cost.bytes = 4.0 * (e.positions * (1.0 + e.channels) +
                          double(e.rows) * e.channels);
      break;
    }
    case kir::StepKind::CollectiveStart:
    case kir::StepKind::CollectiveWait:
      continue; // communication: not on the GPU's roofline
    }
    costs.push_back(cost);
  }
  return costs;
}

/// Prints a program's roofline; returns its predicted seconds and FLOPs.
std::pair<double, double> report(llvm::StringRef title,
                                 const kir::Program &program) {
  std::vector<Cost> costs = programCosts(program);
  llvm::outs() << "\n" << title << " (" << program.steps.size() << " steps, "
               << program.kernels.size() << " kernels)\n";
  llvm::outs() << llvm::format("  %-6s %10s %10s %7s %6s %10s  %s\n", "count",
                               "GFLOP", "MB", "FLOP/B", "bound", "time us",
                               "step");
  // Grouped by description, in order of first appearance.
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, Cost>> groups;
  for (const Cost &cost : costs) {
    std::string key = verbose ? std::to_string(order.size()) + " " + cost.what
                              : cost.what;
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
        "  %5dx %10.3f %10.2f %7.1f %6s %10.1f  %s\n", count,
        cost.flops / 1e9, cost.bytes / 1e6,
        cost.bytes ? cost.flops / cost.bytes : 0.0,
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
  cl::ParseCommandLineOptions(argc, argv, "H100 roofline model of llmc programs\n");
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
    auto training = compileTraining(**module, TrainingOptions());
    if (!training)
      die(llvm::toString(training.takeError()));

    std::string name = std::string(preset) + " (" + config->name + ")";
    auto [forward, forwardFlops] =
        report(name + ": forward", training->forward);
    auto [grad, gradFlops] =
        report(name + ": gradient step (forward + backward)",
               training->gradStep);
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
