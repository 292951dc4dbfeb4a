// bench-gpu: a GPT-2 training step on the GPU, measured. Compiles the
// grad and update programs of a preset (llmc's training pipeline, bf16 AMP
// by default), runs them on one CudaPersistentStore and one stream with no
// host wait inside a step (CudaExecutor::enqueue, CudaStepReadback), and
// prints tokens/s and MFU (model FLOPs 6N + 12 L h s per token, llmc plan's
// count, against the GPU's bf16 dense peak from the table below), then one
// profiled run per program (CUDA events around each step): device time by
// class (GEMMs, attention, fused elementwise/row kernels, optimizer) and
// the top 5 kernels, each next to the roofline model's prediction
// (bench/Roofline.h: a model at the H100 SXM's peaks). Without a GPU it
// says so and exits 0.
//
//   build/bin/bench-gpu [--model gpt2] [--batch 16] [--seq 1024]
//                       [--precision bf16|fp32] [--steps 20]
#include "bench/CudaBench.h"
#include "bench/Options.h"
#include "bench/Roofline.h"
#include "codegen/KernelToCuda/CudaCompiler.h"
#include "training/Plan/Estimate.h"
#include "training/Plan/ModelAnalysis.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "runtime/Cuda/CudaExecutor.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <map>
#include <random>

using namespace llmc;
using namespace llmc::runtime;
namespace cl = llvm::cl;

static cl::opt<std::string> modelName("model",
                                      cl::cat(llmc::bench::benchOptions()),
                                      cl::desc("Model preset"),
                                      cl::init("gpt2"));
static cl::opt<int64_t> batchSize("batch", cl::cat(llmc::bench::benchOptions()),
                                  cl::desc("Sequences per step"), cl::init(16));
static cl::opt<int64_t> seqLen("seq", cl::cat(llmc::bench::benchOptions()),
                               cl::desc("Tokens per sequence"), cl::init(1024));
static cl::opt<std::string> precision("precision",
                                      cl::cat(llmc::bench::benchOptions()),
                                      cl::desc("bf16 (AMP) or fp32"),
                                      cl::init("bf16"));
static cl::opt<int> steps("steps", cl::cat(llmc::bench::benchOptions()),
                          cl::desc("Timed training steps"), cl::init(20));

namespace {

/// Dense bf16 tensor-core peaks by device name (NVIDIA's datasheets);
/// 0 for a GPU the table does not know.
double bf16Peak(llvm::StringRef device) {
  if (device.contains("H100") && device.contains("PCIe"))
    return 756e12;
  if (device.contains("H100") || device.contains("H200"))
    return 989e12; // SXM (and GH200)
  if (device.contains("A100"))
    return 312e12;
  return 0;
}

/// The class of a profiled kernel or step, by its executor name and the
/// program it ran in.
std::string classOf(llvm::StringRef name, bool update) {
  if (name.starts_with("gemm "))
    return "GEMMs";
  if (name.starts_with("llmc_flash"))
    return "attention";
  if (update)
    return "optimizer";
  if (name.starts_with("llmc_embedding"))
    return "embedding grad";
  return "fused elementwise/row";
}

/// The roofline's prediction per executor name (kernel steps by kernel or
/// batch name, GEMMs by "gemm MxNxK", attention by its flash kernel) and
/// per class, summed over the program's steps.
struct Predictions {
  std::map<std::string, double> byName, byClass;
};

Predictions predict(const kir::Program &program,
                    const cuda::CudaModules &modules, bool update) {
  Predictions p;
  std::vector<size_t> stepOf;
  std::vector<bench::Cost> costs = bench::programCosts(program, &stepOf);
  std::map<int32_t, std::string> batchOf; // step -> its batch's name
  for (const cuda::CudaKernelBatch &batch : modules.batches)
    for (int32_t step : batch.steps)
      batchOf[step] = batch.name;
  for (size_t i = 0; i < costs.size(); ++i) {
    const kir::Step &step = program.steps[stepOf[i]];
    std::string name;
    switch (step.kind) {
    case kir::StepKind::Kernel:
      name = batchOf.count(stepOf[i]) ? batchOf[stepOf[i]]
                                      : program.kernels[step.kernel].name;
      break;
    case kir::StepKind::Gemm: {
      const kir::GemmStep &g = step.gemm;
      name = llvm::formatv("gemm {0}x{1}x{2}{3}", g.m, g.n, g.k,
                           g.batch > 1 ? llvm::formatv(" b{0}", g.batch).str()
                                       : std::string())
                 .str();
      break;
    }
    default:
      name = modules.stepKernels[stepOf[i]].empty()
                 ? "llmc_embedding_grad"
                 : modules.stepKernels[stepOf[i]].front().name;
    }
    double seconds = costs[i].seconds();
    p.byName[name] += seconds;
    p.byClass[classOf(name, update)] += seconds;
  }
  return p;
}

/// The profiled run of one program: classes and top 5 kernels, measured
/// against predicted.
void printProfile(const char *title, const CudaExecutor &executor,
                  const Predictions &predicted, bool update) {
  const CudaStepProfile &profile = executor.profile();
  std::map<std::string, double> measured;
  std::vector<std::pair<std::string, CudaStepProfile::Entry>> entries;
  for (const auto &[name, entry] : profile.perKernel) {
    // A GEMM with its epilogue is named "gemm ... +epilogue": one GEMM.
    std::string base = name.substr(0, name.find(" +"));
    measured[classOf(base, update)] += entry.seconds;
    entries.push_back({name, entry});
  }
  llvm::outs() << llvm::format("%s: profiled run %.3f ms (eager, an event "
                               "pair around each step)\n",
                               title, executor.lastRunMilliseconds());
  llvm::outs() << "  class                   measured ms   roofline ms\n";
  for (const auto &[cls, seconds] : measured) {
    auto it = predicted.byClass.find(cls);
    llvm::outs() << llvm::format(
        "  %-22s %11.3f %13.3f\n", cls.c_str(), seconds * 1e3,
        it == predicted.byClass.end() ? 0.0 : it->second * 1e3);
  }
  std::sort(entries.begin(), entries.end(), [](auto &a, auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  llvm::outs() << "  top 5:    measured us  roofline us  launches  kernel\n";
  for (size_t i = 0; i < entries.size() && i < 5; ++i) {
    const auto &[name, entry] = entries[i];
    auto it = predicted.byName.find(name.substr(0, name.find(" +")));
    std::string model =
        it == predicted.byName.end()
            ? std::string("          -")
            : llvm::formatv("{0,11:F1}", it->second * 1e6).str();
    llvm::outs() << llvm::format("          %11.1f  %s  %8lld  %s\n",
                                 entry.seconds * 1e6, model.c_str(),
                                 (long long)entry.launches, name.c_str());
  }
}

} // namespace

int main(int argc, char **argv) {
  llmc::bench::parseOptions(argc, argv,
                            "bench-gpu: a training step on the GPU\n");
  bench::cudaBenchName() = "bench-gpu";
  std::optional<bench::CudaBenchGpu> gpu =
      bench::CudaBenchGpu::open("has no bf16 tensor cores");
  if (!gpu)
    return 0;
  if (precision != "bf16" && precision != "fp32") {
    llvm::errs() << "bench-gpu: --precision must be bf16 or fp32, not '"
                 << precision << "'\n";
    return 1;
  }
  std::optional<mlir::llmc::ModelConfig> config =
      mlir::llmc::getModelPreset(modelName);
  if (!config) {
    llvm::errs() << "bench-gpu: no model preset '" << modelName << "'\n";
    return 1;
  }
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = bench::orDie(
      mlir::llmc::buildForwardModule(context, *config, {batchSize, seqLen}),
      "building the model");
  TrainingStepOptions options;
  options.forCuda = true;
  if (precision == "bf16")
    options.precision.kind = PrecisionConfig::Kind::BF16;
  TrainingStepPrograms programs =
      bench::orDie(training::compileTrainingStep(*module, options), "compiling");
  mlir::llmc::plan::PlanModel planModel = bench::orDie(
      mlir::llmc::plan::analyzeModel(context, *config), "counting FLOPs");
  int64_t tokens = batchSize * seqLen;
  double flopsPerStep =
      mlir::llmc::plan::modelFlopsPerToken(planModel, seqLen) * tokens;

  // Modules compiled once, for the executors and the predictions.
  cuda::CudaModules gradModules = bench::orDie(
      cuda::compileCudaModules(programs.gradStep), "NVRTC (grad step)");
  cuda::CudaModules updateModules = bench::orDie(
      cuda::compileCudaModules(programs.updateStep), "NVRTC (update step)");
  Predictions gradPredicted = predict(programs.gradStep, gradModules, false);
  Predictions updatePredicted =
      predict(programs.updateStep, updateModules, true);
  auto fixed = [](cuda::CudaModules modules) -> cuda::CudaCompileFn {
    return
        [modules](const kir::Program &) -> llvm::Expected<cuda::CudaModules> {
          return modules;
        };
  };
  auto store = bench::orDie(CudaPersistentStore::create(), "device store");
  CudaExecutorOptions gradOptions;
  gradOptions.store = store;
  auto grad = bench::orDie(
      CudaExecutor::create(programs.gradStep, fixed(gradModules), gradOptions),
      "grad executor");
  bench::orDie(loadWeights(*grad, "", 1337), "weights");
  // Mixed precision: the 16-bit weight copies the steps read.
  if (programs.castWeights) {
    CudaExecutorOptions castOptions;
    castOptions.store = store;
    castOptions.shareStreamOf = grad.get();
    auto casts = bench::orDie(
        CudaExecutor::create(*programs.castWeights,
                             fixed(bench::orDie(cuda::compileCudaModules(
                                                    *programs.castWeights),
                                                "NVRTC (weight casts)")),
                             castOptions),
        "weight casts executor");
    bench::orDie(casts->run(), "weight casts");
  }
  CudaExecutorOptions updateOptions;
  updateOptions.store = store;
  updateOptions.shareStreamOf = grad.get();
  auto update =
      bench::orDie(CudaExecutor::create(programs.updateStep,
                                        fixed(updateModules), updateOptions),
                   "update executor");

  // Inputs: seeded tokens, d(loss) = 1, AdamW's scalars at step 1.
  std::mt19937 rng(7);
  HostTensor ids = HostTensor::zeros(kir::DType::I32, {batchSize, seqLen});
  for (int64_t i = 0; i < tokens; ++i)
    ids.i32()[i] = int32_t(rng() % config->vocabSize);
  bench::orDie(grad->setTensor("tokens", ids), "tokens");
  bench::orDie(grad->setTensor("targets", ids), "targets");
  bench::orDie(grad->setScalar(kir::StepScalar::DLoss, 1.0),
               kir::stepScalarName(kir::StepScalar::DLoss).data());
  for (auto [scalar, value] :
       {std::pair<kir::StepScalar, double>{kir::StepScalar::Lr, 3e-4},
        {kir::StepScalar::BiasCorrection1, 10.0},
        {kir::StepScalar::BiasCorrection2, 20.0}})
    bench::orDie(update->setScalar(scalar, value),
                 kir::stepScalarName(scalar).data());

  const CudaExecutorInfo &info = grad->info();
  double peak = bf16Peak(info.deviceName);
  llvm::outs() << llvm::format(
      "bench-gpu: %s (sm_%d), %s B=%lld T=%lld %s; %.1fM parameters, "
      "%.3f TFLOP per step (6N + 12 L h s); update step %d kernel steps in "
      "%d multi-tensor launches\n",
      info.deviceName.c_str(), info.computeCapability, modelName.c_str(),
      (long long)batchSize.getValue(), (long long)seqLen.getValue(),
      precision.c_str(), planModel.numParameters / 1e6, flopsPerStep / 1e12,
      update->info().multiTensorSteps, update->info().multiTensorLaunches);

  // Timed steps: both programs enqueued, no host wait, losses read back
  // one step late; step 0 runs eagerly and captures the graphs.
  auto readback = bench::orDie(
      CudaStepReadback::create(
          {{grad.get(), kir::stepScalarName(kir::StepScalar::Loss).str()},
           {update.get(),
            kir::stepScalarName(kir::StepScalar::GradNorm).str()}}),
      "read-back");
  std::vector<double> stepMs;
  float firstLoss = 0, lastLoss = 0;
  auto readOne = [&] {
    auto landed = bench::orDie(readback->pop(), "step");
    if (landed.step == 0)
      firstLoss = landed.values[0];
    else
      stepMs.push_back(landed.deviceMilliseconds);
    lastLoss = landed.values[0];
  };
  for (int64_t step = 0; step <= steps; ++step) {
    bench::orDie(readback->beginStep(step), "step start");
    bench::orDie(grad->enqueue(), "grad step");
    bench::orDie(update->enqueue(), "update step");
    bench::orDie(readback->push(step), "read-back");
    if (readback->inFlight() == 2)
      readOne();
  }
  while (readback->inFlight())
    readOne();
  std::sort(stepMs.begin(), stepMs.end());
  double median = stepMs.empty() ? 0 : stepMs[stepMs.size() / 2];
  llvm::outs() << llvm::format(
      "steps: %zu timed, device time per step median %.3f ms, min %.3f ms "
      "(loss %.4f -> %.4f); %.0f tokens/s\n",
      stepMs.size(), median, stepMs.empty() ? 0.0 : stepMs.front(), firstLoss,
      lastLoss, median > 0 ? tokens / (median * 1e-3) : 0.0);
  if (peak > 0)
    llvm::outs() << llvm::format(
        "MFU %.1f%% of %.0f TFLOP/s (bf16 dense peak of %s)\n",
        median > 0 ? 100 * flopsPerStep / (median * 1e-3) / peak : 0.0,
        peak / 1e12, info.deviceName.c_str());
  else
    llvm::outs() << "MFU: unknown GPU '" << info.deviceName
                 << "' (bf16 peak table: H100 SXM / H200 989, A100 312 "
                    "TFLOP/s); "
                 << llvm::format("%.1f TFLOP/s achieved\n",
                                 median > 0
                                     ? flopsPerStep / (median * 1e-3) / 1e12
                                     : 0.0);

  // One profiled (eager) run of each program.
  grad->setProfiling(true);
  update->setProfiling(true);
  bench::orDie(grad->run(), "profiled grad step");
  bench::orDie(update->run(), "profiled update step");
  printProfile("grad step", *grad, gradPredicted, false);
  printProfile("update step", *update, updatePredicted, true);
  return 0;
}
