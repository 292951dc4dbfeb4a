// llmc-cuda-run: runs a compiled llmc artifact on an NVIDIA GPU. Loads the
// program (its kernels are compiled with NVRTC at start, or taken from the
// artifact's CUDA section when it has one), parameters (safetensors, or the
// seeded GPT-2 initialization) and inputs (safetensors), runs N steps with
// CUDA graph replay, prints per-step device times (CUDA events) and the
// device time of each kernel (one profiled run), writes the outputs, and
// compares them with a reference file if given.
//
// With --update it trains instead: K steps of the grad step (the positional
// artifact, dloss = 1) then the update step over one CudaPersistentStore,
// each on its batch from the training inputs file, printing every step's
// loss, grad norm and device times, and compares the per-step losses, grad
// norms and final parameters and optimizer state with llmc-cpu-reference's
// (TrainingCheck.h). Both programs enqueue on one stream with no host wait
// inside a step (inputs staged through pinned memory, a graph launch each
// after the first step); the loss and grad norm come back asynchronously
// and step N's line is printed after step N+1 is enqueued (--sync-steps:
// each run waited for, with per-program device times).
//
// It links no LLVM/MLIR shared library, no BLAS and no CUDA library: only
// the runtime core and a static LLVMSupport, so it runs on a GPU machine
// that has nothing but the NVIDIA driver and CUDA's libraries.
#include "TrainingCheck.h"

#include "codegen/KernelToCuda/CudaCompiler.h"
#include "ir/kernel/Artifact.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaExecutor.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace cl = llvm::cl;

/// The tool's own options: --help lists these, not the libraries'.
static cl::OptionCategory toolOptions("llmc-cuda-run options");
using namespace llmc;
using namespace llmc::runtime;

static cl::opt<std::string> artifactPath(cl::Positional, cl::Required,
                                         cl::cat(toolOptions), cl::desc("<model.llmc>"));
static cl::opt<std::string>
    weightsPath("weights",
                cl::cat(toolOptions), cl::desc("Parameters (safetensors); default: the seeded "
                         "GPT-2 initialization"),
                cl::value_desc("file"));
static cl::opt<uint64_t> seed("seed", cl::cat(toolOptions), cl::desc("Initialization seed"),
                              cl::init(1337));
static cl::opt<std::string>
    inputsPath("inputs",
               cl::cat(toolOptions), cl::desc("Program inputs (tokens, targets, ...) as "
                        "safetensors; default: zeros"),
               cl::value_desc("file"));
static cl::opt<int> steps("steps", cl::cat(toolOptions), cl::desc("Timed runs"), cl::init(10));
static cl::opt<int> warmup("warmup", cl::cat(toolOptions), cl::desc("Untimed runs first"),
                           cl::init(2));
static cl::opt<std::string>
    outputPath("o",
               cl::cat(toolOptions), cl::desc("Write the outputs (and updated parameters) "
                        "of the last run as safetensors"),
               cl::value_desc("file"));
static cl::opt<std::string> referencePath(
    "reference",
    cl::cat(toolOptions), cl::desc("Compare outputs with these tensors (safetensors; a reference "
             "with fewer elements is compared with the output's first "
             "elements)"),
    cl::value_desc("file"));
static cl::opt<bool> noGraphs("no-graphs",
                              cl::cat(toolOptions), cl::desc("Launch every run eagerly"));
static cl::opt<bool> tf32("tf32", cl::cat(toolOptions), cl::desc("Allow TF32 in f32 GEMMs"));
static cl::opt<bool> noEpilogueFusion(
    "no-epilogue-fusion",
    cl::cat(toolOptions), cl::desc("Run every GEMM epilogue as its own kernel (none in cuBLASLt)"));
static cl::opt<bool> noMultiTensor(
    "no-multi-tensor",
    cl::cat(toolOptions), cl::desc("Launch every kernel step alone (no multi-tensor batches of "
             "same-body elementwise steps, e.g. the AdamW update, nor of "
             "per-tensor sums, e.g. the gradient norm's)"));
static cl::opt<bool> noProfile(
    "no-profile",
    cl::cat(toolOptions), cl::desc("Skip the profiled run (a training step accumulates into its "
             "state on every run)"));
static cl::opt<bool> saveParams("save-params",
                                cl::cat(toolOptions), cl::desc("Also write the parameters"));

static cl::opt<std::string> updatePath(
    "update",
    cl::cat(toolOptions), cl::desc("The update step's artifact: train --train-steps steps "
             "(<model.llmc> is the grad step, --inputs the training inputs "
             "of llmc-cpu-reference --update --make-inputs)"),
    cl::value_desc("file"));
static cl::opt<std::string> castPath(
    "cast",
    cl::cat(toolOptions), cl::desc("Mixed precision (--update): the @cast_weights artifact, run "
             "once on the store before the first step (llmc-cpu-reference "
             "--cast writes it)"),
    cl::value_desc("file"));
static cl::opt<int> trainSteps("train-steps",
                               cl::cat(toolOptions), cl::desc("Compared training steps (--update)"),
                               cl::init(1));
static cl::opt<bool> syncSteps(
    "sync-steps",
    cl::cat(toolOptions), cl::desc("Training: wait for each program's run (per-program device "
             "times) instead of enqueueing both on one stream and reading the "
             "loss and grad norm back one step later"));
static cl::opt<int> timingSteps(
    "timing-steps",
    cl::cat(toolOptions), cl::desc("Further training steps after the compared ones, timed only "
             "(their batches repeat the compared steps')"),
    cl::init(0));

static cl::opt<bool> compileOnly(
    "compile-only",
    cl::cat(toolOptions), cl::desc("Compile the program's CUDA modules (and --update's) with "
             "NVRTC, print what was compiled and exit: needs no GPU (scripts/"
             "gpu-check.sh --dry-run; the kernel cache it fills is the one a "
             "later run reads)"));

static cl::opt<int> cudaArch(
    "cuda-arch",
    cl::cat(toolOptions), cl::desc("Compile the kernels for this one SM only (90: H100, H200), "
             "no PTX, instead of sm_80 and sm_90 cubins and compute_80 PTX: a "
             "third of NVRTC's work and of the kernel cache"),
    cl::init(0));

static int fail(llvm::Error error) {
  llvm::errs() << "llmc-cuda-run: error: " << llvm::toString(std::move(error))
               << "\n";
  return 1;
}

/// Max abs and rel difference of `output` (first elements) from `reference`.
static void compare(llvm::StringRef name, const HostTensor &output,
                    const HostTensor &reference) {
  std::vector<float> got = output.toF32(), want = reference.toF32();
  if (want.size() > got.size()) {
    llvm::outs() << "compare " << name << ": reference has " << want.size()
                 << " elements, the output " << got.size() << "\n";
    return;
  }
  double maxAbs = 0, maxRel = 0, maxRef = 0;
  int64_t worst = 0, nonFinite = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++nonFinite;
      continue;
    }
    double diff = std::fabs(double(got[i]) - want[i]);
    if (diff > maxAbs) {
      maxAbs = diff;
      worst = i;
    }
    maxRef = std::max(maxRef, std::fabs(double(want[i])));
    maxRel =
        std::max(maxRel, diff / std::max(std::fabs(double(want[i])), 1e-6));
  }
  llvm::outs() << llvm::format(
      "compare %s: %zu elements%s: max abs diff %.3g (at %lld: gpu %.7g cpu "
      "%.7g), max rel diff %.3g, max |ref| %.4g, non-finite %lld\n",
      name.str().c_str(), want.size(),
      want.size() < got.size() ? " (leading)" : "", maxAbs, (long long)worst,
      got[worst], want[worst], maxRel, maxRef, (long long)nonFinite);
}

/// The executor options the flags ask for.
static CudaExecutorOptions executorOptions() {
  CudaExecutorOptions options;
  options.useGraphs = !noGraphs;
  options.allowTf32 = tf32;
  options.fuseEpilogues = !noEpilogueFusion;
  return options;
}

/// The compiler the executor gets: NVRTC, with the artifact's compiled
/// kernels if it has a CUDA section (`llmc compile --target=cuda`).
static cuda::CudaCompileFn compilerFor(const kir::ArtifactContents &contents) {
  cuda::CudaCompilerOptions options;
  options.multiTensor = !noMultiTensor;
  if (cudaArch > 0) {
    options.nvrtc.archs = {cudaArch};
    options.nvrtc.ptxArch = 0;
  }
  if (!contents.cuda)
    return cuda::cudaCompiler(std::move(options));
  const kir::CudaSection &section = *contents.cuda;
  cuda::CudaBinaries binaries;
  for (const kir::CudaSection::Cubin &cubin : section.cubins)
    binaries.cubins.push_back({cubin.arch, cubin.image});
  binaries.ptx = section.ptx;
  binaries.ptxArch = section.ptxArch;
  options.kernelBinaries = std::move(binaries);
  for (const kir::CudaSection::Launch &launch : section.launches) {
    cuda::CudaLaunch l;
    std::copy(launch.grid, launch.grid + 3, l.grid);
    std::copy(launch.block, launch.block + 3, l.block);
    l.sharedBytes = launch.sharedBytes;
    options.kernelLaunches.push_back(l);
  }
  return cuda::cudaCompiler(std::move(options));
}

/// Mean, median and min of `values`.
static std::string summary(std::vector<double> values) {
  if (values.empty())
    return "none";
  double mean = 0;
  for (double v : values)
    mean += v;
  mean /= values.size();
  std::sort(values.begin(), values.end());
  return llvm::formatv("mean {0:F3} ms, median {1:F3} ms, min {2:F3} ms", mean,
                       values[values.size() / 2], values.front())
      .str();
}

/// Compares a reduced final tensor: `reference` is "sample.<name>" (N evenly
/// strided elements) or "sum.<name>" ({sum, sum |x|}) of the GPU's whole
/// tensor `whole`. Returns the max abs difference of the sample.
static double compareReduced(llvm::StringRef name, const HostTensor &whole,
                             const HostTensor &reference) {
  using namespace training_check;
  std::vector<float> want = reference.toF32();
  if (name.starts_with("sum.")) {
    std::vector<float> got = checksum(whole).toF32();
    llvm::outs() << llvm::format(
        "compare %s: gpu %.7g %.7g cpu %.7g %.7g (rel diff %.3g, %.3g)\n",
        name.str().c_str(), got[0], got[1], want[0], want[1],
        std::fabs(got[0] - want[0]) / std::max(std::fabs(want[1]), 1e-30f),
        std::fabs(got[1] - want[1]) / std::max(std::fabs(want[1]), 1e-30f));
    return 0;
  }
  HostTensor sample = sampleEvenly(whole, int64_t(want.size()));
  if (sample.numElements() != int64_t(want.size())) {
    llvm::outs() << "compare " << name << ": the reference has " << want.size()
                 << " elements, the tensor " << whole.numElements() << "\n";
    return INFINITY;
  }
  compare(name, sample, reference);
  std::vector<float> got = sample.toF32();
  double maxAbs = 0;
  for (size_t i = 0; i < want.size(); ++i)
    maxAbs = std::max(maxAbs, std::isfinite(got[i])
                                  ? std::fabs(double(got[i]) - want[i])
                                  : double(INFINITY));
  return maxAbs;
}

/// The two training programs over one store: the grad step, with the
/// weights loaded, and the update step, enqueued on the grad step's stream
/// unless --sync-steps. Says which device and what each program is.
struct TrainingExecutors {
  std::unique_ptr<CudaExecutor> grad, update;
};

/// --cast: the 16-bit weight copies written from the masters once, on the
/// grad step's stream, before the first step reads them.
static llvm::Error
runCastWeights(CudaExecutor &grad,
               const std::shared_ptr<CudaPersistentStore> &store) {
  if (castPath.empty())
    return llvm::Error::success();
  llvm::Expected<kir::ArtifactContents> contents =
      kir::readArtifactContents(castPath);
  if (!contents)
    return contents.takeError();
  CudaExecutorOptions options = executorOptions();
  options.store = store;
  options.shareStreamOf = &grad;
  options.useGraphs = false;
  cuda::CudaCompileFn compiler = compilerFor(*contents);
  llvm::Expected<std::unique_ptr<CudaExecutor>> cast = CudaExecutor::create(
      std::move(contents->program), compiler, std::move(options));
  if (!cast)
    return cast.takeError();
  return (*cast)->run();
}

static llvm::Expected<TrainingExecutors>
createTrainingExecutors(kir::ArtifactContents gradContents) {
  llvm::Expected<kir::ArtifactContents> updateContents =
      kir::readArtifactContents(updatePath);
  if (!updateContents)
    return updateContents.takeError();
  llvm::Expected<std::shared_ptr<CudaPersistentStore>> store =
      CudaPersistentStore::create();
  if (!store)
    return store.takeError();
  CudaExecutorOptions gradOptions = executorOptions();
  gradOptions.store = *store;
  cuda::CudaCompileFn gradCompiler = compilerFor(gradContents);
  llvm::Expected<std::unique_ptr<CudaExecutor>> grad = CudaExecutor::create(
      std::move(gradContents.program), gradCompiler, std::move(gradOptions));
  if (!grad)
    return grad.takeError();
  if (llvm::Error error = loadWeights(**grad, weightsPath, seed))
    return error;
  CudaExecutorOptions updateOptions = executorOptions();
  updateOptions.store = *store;
  // One stream: the update's work follows the grad step's without a host
  // wait (the grad executor, created first, outlives the update's).
  if (!syncSteps)
    updateOptions.shareStreamOf = grad->get();
  cuda::CudaCompileFn updateCompiler = compilerFor(*updateContents);
  llvm::Expected<std::unique_ptr<CudaExecutor>> update = CudaExecutor::create(
      std::move(updateContents->program), updateCompiler,
      std::move(updateOptions));
  if (!update)
    return update.takeError();
  if (llvm::Error error = runCastWeights(**grad, *store))
    return error;
  const CudaExecutorInfo &info = (*grad)->info();
  llvm::outs() << llvm::format("device: %s (sm_%d, %.1f GiB)\n",
                               info.deviceName.c_str(), info.computeCapability,
                               info.deviceMemoryBytes /
                                   double(int64_t(1) << 30));
  for (CudaExecutor *executor : {grad->get(), update->get()}) {
    const kir::Program &prog = executor->program();
    const CudaExecutorInfo &about = executor->info();
    llvm::outs() << llvm::format(
        "program %s: %zu steps (%zu kernels; %d kernel steps in %d "
        "multi-tensor launches), arena %.2f MiB, %.2f GFLOP per run, "
        "kernels %s\n",
        prog.function.c_str(), prog.steps.size(), prog.kernels.size(),
        about.multiTensorSteps, about.multiTensorLaunches,
        prog.arenaBytes / 1048576.0, kir::countFlops(prog) / 1e9,
        about.kernelsPrecompiled ? "from the artifact" : "compiled now");
  }
  return TrainingExecutors{std::move(*grad), std::move(*update)};
}

/// One training run's state: the programs, the training inputs and the
/// reference, what the steps measured (per-step differences from the
/// reference, device and wall times) and the final parameters and optimizer
/// state (after --train-steps).
struct TrainingRun {
  TrainingRun(CudaExecutor &grad, CudaExecutor &update)
      : grad(grad), update(update) {}

  CudaExecutor &grad, &update;
  TensorMap inputs, reference;
  std::vector<double> gradMs, updateMs, deviceMs, wallMs;
  double maxLossDiff = 0, maxNormRelDiff = 0;
  TensorMap finalParams, finalStates;

  /// The training inputs' entry for `name` at `step`.
  llvm::Expected<const HostTensor *> stepInput(llvm::StringRef name,
                                               int64_t step) const {
    auto it = inputs.find(training_check::stepInputName(name.str(), step));
    if (it == inputs.end())
      return llvm::createStringError(llvm::Twine("the inputs have no ") +
                                     name + "." + llvm::Twine(step));
    return &it->second;
  }

  /// The reference's per-step value of `scalar` at `step`; NaN if it has
  /// none.
  double referenceAt(kir::StepScalar scalar, int64_t step) const {
    auto it = reference.find(kir::stepScalarName(scalar).str());
    if (it == reference.end() || step >= it->second.numElements())
      return NAN;
    return it->second.f32()[step];
  }

  /// One step's line: compared against the reference, or timed only.
  void report(int64_t step, double gpuLoss, double gpuNorm,
              const std::string &times) {
    if (step < trainSteps) {
      double cpuLoss = referenceAt(kir::StepScalar::Loss, step),
             cpuNorm = referenceAt(kir::StepScalar::GradNorm, step);
      maxLossDiff = std::max(maxLossDiff, std::fabs(gpuLoss - cpuLoss));
      maxNormRelDiff =
          std::max(maxNormRelDiff, std::fabs(gpuNorm - cpuNorm) / cpuNorm);
      llvm::outs() << llvm::format(
          "train step %lld: loss gpu %.7f cpu %.7f diff %.2e | grad_norm gpu "
          "%.7f cpu %.7f diff %.2e | %s\n",
          (long long)step, gpuLoss, cpuLoss, gpuLoss - cpuLoss, gpuNorm,
          cpuNorm, gpuNorm - cpuNorm, times.c_str());
    } else {
      llvm::outs() << llvm::format(
          "timing step %lld: loss %.7f grad_norm %.7f | %s\n",
          (long long)step, gpuLoss, gpuNorm, times.c_str());
    }
  }

  /// The per-step comparison's worst differences, with a reference.
  void printStepComparison() const {
    if (!reference.empty())
      llvm::outs() << llvm::format(
          "per-step comparison over %d steps: max |loss diff| %.3g, max "
          "grad_norm rel diff %.3g\n",
          trainSteps.getValue(), maxLossDiff, maxNormRelDiff);
  }
};

/// One step enqueued with no host wait: its batch (and RNG seed) staged
/// through pinned slots, both programs on one stream, the loss and grad
/// norm copied back behind them.
static llvm::Error enqueueTrainingStep(TrainingRun &run,
                                       CudaStepReadback &readback,
                                       int64_t step, bool hasRng) {
  int64_t batch = step % trainSteps;
  if (llvm::Error error = readback.beginStep(step))
    return error;
  auto stage = [&](CudaExecutor &executor,
                   llvm::StringRef name) -> llvm::Error {
    llvm::Expected<const HostTensor *> input = run.stepInput(name, batch);
    if (!input)
      return input.takeError();
    return executor.setInputAsync(name, **input);
  };
  for (const char *input : {"tokens", "targets"})
    if (llvm::Error error = stage(run.grad, input))
      return error;
  if (hasRng) {
    HostTensor rng = HostTensor::zeros(kir::DType::I64, {2});
    rng.i64()[0] = int64_t(seed);
    rng.i64()[1] = step;
    if (llvm::Error error = run.grad.setInputAsync(
            kir::stepScalarName(kir::StepScalar::Rng), rng))
      return error;
  }
  if (llvm::Error error = run.grad.enqueue())
    return error;
  for (kir::StepScalar input : training_check::updateScalarInputs)
    if (llvm::Error error = stage(run.update, kir::stepScalarName(input)))
      return error;
  if (llvm::Error error = run.update.enqueue())
    return error;
  return readback.push(step);
}

/// The steps with no host wait inside a step (the default): step N's line
/// is printed once step N+1 is enqueued; the final tensors are read once,
/// after --train-steps.
static llvm::Error runEnqueuedSteps(TrainingRun &run) {
  llvm::Expected<std::unique_ptr<CudaStepReadback>> readback =
      CudaStepReadback::create(
          {{&run.grad, kir::stepScalarName(kir::StepScalar::Loss).str()},
           {&run.update,
            kir::stepScalarName(kir::StepScalar::GradNorm).str()}});
  if (!readback)
    return readback.takeError();
  bool hasRng = false;
  for (const kir::Binding &input : run.grad.program().inputs)
    hasRng |= input.scalar == kir::StepScalar::Rng;
  auto readOne = [&]() -> llvm::Error {
    llvm::Expected<CudaStepReadback::Landed> landed = (*readback)->pop();
    if (!landed)
      return landed.takeError();
    // Step 0 runs eagerly and captures the graphs; later steps replay.
    if (landed->step > 0)
      run.deviceMs.push_back(landed->deviceMilliseconds);
    run.report(landed->step, landed->values[0], landed->values[1],
               llvm::formatv("device {0:F3} ms (grad + update{1})",
                             landed->deviceMilliseconds,
                             landed->step > 0 ? ", graph replays"
                                              : ", eager + capture")
                   .str());
    return llvm::Error::success();
  };
  auto steady = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < trainSteps + timingSteps; ++step) {
    if (step == 1)
      steady = std::chrono::steady_clock::now();
    if (llvm::Error error =
            enqueueTrainingStep(run, **readback, step, hasRng))
      return error;
    if ((*readback)->inFlight() == 2)
      if (llvm::Error error = readOne())
        return error;
    if (step + 1 == trainSteps) {
      // Waits for the stream: once, for the comparison below.
      run.finalParams = run.grad.params();
      run.finalStates = run.update.states();
    }
  }
  while ((*readback)->inFlight())
    if (llvm::Error error = readOne())
      return error;
  int64_t steadySteps = trainSteps + timingSteps - 1;
  double steadyMs = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - steady)
                        .count() *
                    1e3;
  run.printStepComparison();
  llvm::outs() << "timed steps (graph replays, no host wait inside a "
                  "step): "
               << run.deviceMs.size() << "\n"
               << "  grad + update + read-back device: "
               << summary(run.deviceMs) << "\n";
  if (steadySteps > 0)
    llvm::outs() << llvm::format(
        "  wall per step, steps 1..%lld (host enqueueing ahead, the "
        "final parameters read once): %.3f ms\n",
        (long long)steadySteps, steadyMs / steadySteps);
  return llvm::Error::success();
}

/// The steps with --sync-steps: each program's run waited for, so each has
/// its own device time.
static llvm::Error runSyncedSteps(TrainingRun &run) {
  auto setInput = [&](CudaExecutor &executor, llvm::StringRef name,
                      int64_t batch) -> llvm::Error {
    llvm::Expected<const HostTensor *> input = run.stepInput(name, batch);
    if (!input)
      return input.takeError();
    return executor.setTensor(name, **input);
  };
  for (int64_t step = 0; step < trainSteps + timingSteps; ++step) {
    int64_t batch = step % trainSteps;
    bool replay = run.grad.replaysGraph() && run.update.replaysGraph();
    auto start = std::chrono::steady_clock::now();
    for (const char *input : {"tokens", "targets"})
      if (llvm::Error error = setInput(run.grad, input, batch))
        return error;
    run.grad.setRng(seed, step);
    if (llvm::Error error = run.grad.run())
      return error;
    for (kir::StepScalar input : training_check::updateScalarInputs)
      if (llvm::Error error =
              setInput(run.update, kir::stepScalarName(input), batch))
        return error;
    if (llvm::Error error = run.update.run())
      return error;
    double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count() *
        1e3;
    llvm::Expected<double> loss = run.grad.scalarOutput(kir::StepScalar::Loss);
    if (!loss)
      return loss.takeError();
    llvm::Expected<double> gradNorm =
        run.update.scalarOutput(kir::StepScalar::GradNorm);
    if (!gradNorm)
      return gradNorm.takeError();
    double g = run.grad.lastRunMilliseconds(),
           u = run.update.lastRunMilliseconds();
    if (replay) {
      run.gradMs.push_back(g);
      run.updateMs.push_back(u);
      run.deviceMs.push_back(g + u);
      run.wallMs.push_back(wall);
    }
    run.report(step, *loss, *gradNorm,
               llvm::formatv("grad {0:F3} ms, update {1:F3} ms, wall {2:F3} "
                             "ms ({3})",
                             g, u, wall, replay ? "graph replay" : "eager")
                   .str());
    if (step + 1 == trainSteps) {
      run.finalParams = run.grad.params();
      run.finalStates = run.update.states();
    }
  }
  run.printStepComparison();
  llvm::outs() << "timed steps (both programs replaying graphs): "
               << run.gradMs.size() << "\n"
               << "  grad step device time:   " << summary(run.gradMs) << "\n"
               << "  update step device time: " << summary(run.updateMs)
               << "\n"
               << "  grad + update device:    " << summary(run.deviceMs)
               << "\n"
               << "  whole step wall (host: inputs in, both runs, each "
                  "waited for): "
               << summary(run.wallMs) << "\n";
  return llvm::Error::success();
}

/// The final (after --train-steps) parameters and optimizer state against
/// the reference's reduced tensors ("sample.param.x", "sum.state.y", ...).
static void compareFinalTensors(TrainingRun &run) {
  double maxParamDiff = 0, maxStateDiff = 0;
  int64_t compared = 0;
  for (auto &[name, tensor] : run.reference) {
    llvm::StringRef ref(name);
    llvm::StringRef rest = ref.starts_with("sample.") ? ref.drop_front(7)
                           : ref.starts_with("sum.")  ? ref.drop_front(4)
                                                      : llvm::StringRef();
    if (rest.empty())
      continue;
    bool isParam = rest.consume_front("param.");
    if (!isParam && !rest.consume_front("state."))
      continue;
    TensorMap &finals = isParam ? run.finalParams : run.finalStates;
    auto it = finals.find(rest.str());
    if (it == finals.end()) {
      llvm::outs() << "compare " << name << ": no such tensor\n";
      continue;
    }
    double diff = compareReduced(name, it->second, tensor);
    ++compared;
    (isParam ? maxParamDiff : maxStateDiff) =
        std::max(isParam ? maxParamDiff : maxStateDiff, diff);
  }
  if (compared)
    llvm::outs() << llvm::format(
        "final tensors after %d steps: %lld compared; max abs diff: "
        "parameters %.3g, optimizer state %.3g\n",
        trainSteps.getValue(), (long long)compared, maxParamDiff, maxStateDiff);
}

/// K (+ timing) training steps: grad step then update step per step, over
/// one store. Times each program's run by CUDA events (graph replay after
/// each program's first, eager run) and the whole step by the host clock.
static llvm::Error runTraining(kir::ArtifactContents gradContents) {
  llvm::Expected<TrainingExecutors> executors =
      createTrainingExecutors(std::move(gradContents));
  if (!executors)
    return executors.takeError();
  TrainingRun run(*executors->grad, *executors->update);
  llvm::Expected<TensorMap> inputs = readSafetensors(inputsPath);
  if (!inputs)
    return inputs.takeError();
  run.inputs = std::move(*inputs);
  if (llvm::Error error = run.grad.setScalar(kir::StepScalar::DLoss, 1.0))
    return error;
  llvm::Expected<TensorMap> reference =
      referencePath.empty() ? TensorMap() : readSafetensors(referencePath);
  if (!reference)
    return reference.takeError();
  run.reference = std::move(*reference);

  if (llvm::Error error =
          syncSteps ? runSyncedSteps(run) : runEnqueuedSteps(run))
    return error;
  compareFinalTensors(run);
  if (!outputPath.empty()) {
    TensorMap outputs;
    for (auto &[name, tensor] : run.finalParams)
      outputs["param." + name] = std::move(tensor);
    if (llvm::Error error = writeSafetensors(outputPath, outputs))
      return error;
    llvm::outs() << "wrote " << outputPath << "\n";
  }
  return llvm::Error::success();
}

/// The device, the program and what setting it up took: where its kernels
/// came from, NVRTC, the epilogues cuBLASLt fuses, the multi-tensor
/// launches.
static void printSetup(const CudaExecutor &executor, double createSeconds) {
  const CudaExecutorInfo &info = executor.info();
  llvm::outs() << llvm::format("device: %s (sm_%d, %.1f GiB)\n",
                               info.deviceName.c_str(), info.computeCapability,
                               info.deviceMemoryBytes /
                                   double(int64_t(1) << 30));
  const kir::Program &prog = executor.program();
  int64_t gemms = 0, attention = 0;
  for (const kir::Step &step : prog.steps) {
    gemms += step.kind == kir::StepKind::Gemm;
    attention += step.kind == kir::StepKind::Attention ||
                 step.kind == kir::StepKind::AttentionGrad;
  }
  llvm::outs() << llvm::format(
      "program %s: %zu steps (%zu kernels, %lld GEMMs, %lld attention), "
      "arena %.2f MiB, %.1f GFLOP per run\n",
      prog.function.c_str(), prog.steps.size(), prog.kernels.size(),
      (long long)gemms, (long long)attention, prog.arenaBytes / 1048576.0,
      kir::countFlops(prog) / 1e9);
  llvm::outs() << llvm::format(
      "setup %.2f s: kernels %s (%s, NVRTC %s %.2f s), attention library "
      "NVRTC %s %.2f s; GEMM epilogues in cuBLASLt: %d bias, %d gelu, "
      "%d dgelu; %d kernel steps in %d multi-tensor launches\n",
      createSeconds,
      info.kernelsPrecompiled ? "from the artifact" : "compiled now",
      info.kernelImage.c_str(),
      info.kernelStats.cacheHit ? "cache hit" : "compiled",
      info.kernelStats.compileSeconds,
      info.libraryStats.cacheHit ? "cache hit" : "compiled",
      info.libraryStats.compileSeconds, info.fusedBiasEpilogues,
      info.fusedGeluEpilogues, info.fusedDGeluEpilogues,
      info.multiTensorSteps, info.multiTensorLaunches);
}

/// The program's inputs from --inputs (those it has); a gradient step's
/// seed d(loss) = 1 unless the inputs file sets it.
static llvm::Error bindInputs(CudaExecutor &executor) {
  const kir::Program &prog = executor.program();
  if (!inputsPath.empty()) {
    llvm::Expected<TensorMap> inputs = readSafetensors(inputsPath);
    if (!inputs)
      return inputs.takeError();
    for (const kir::Binding &input : prog.inputs) {
      auto it = inputs->find(input.name);
      if (it == inputs->end())
        continue;
      if (llvm::Error error = executor.setTensor(input.name, it->second))
        return error;
    }
  }
  for (const kir::Binding &input : prog.inputs)
    if (input.scalar == kir::StepScalar::DLoss && inputsPath.empty())
      if (llvm::Error error = executor.setScalar(kir::StepScalar::DLoss, 1.0))
        return error;
  return llvm::Error::success();
}

/// --warmup untimed then --steps timed runs, each one's device and wall
/// time, and the timed runs' summary. The first run is eager (and checks
/// every step); graphs replay after it.
static llvm::Error runTimedSteps(CudaExecutor &executor) {
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    executor.setRng(seed, i);
    bool replay = executor.replaysGraph();
    auto start = std::chrono::steady_clock::now();
    if (llvm::Error error = executor.run())
      return error;
    double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (i < warmup) {
      llvm::outs() << llvm::format(
          "warmup %d: device %.3f ms, wall %.3f ms%s\n", i,
          executor.lastRunMilliseconds(), wall * 1e3,
          replay ? " (graph replay)" : " (eager)");
      continue;
    }
    times.push_back(executor.lastRunMilliseconds());
    llvm::outs() << llvm::format("step %d: device %.3f ms, wall %.3f ms (%s)\n",
                                 i - warmup, executor.lastRunMilliseconds(),
                                 wall * 1e3, replay ? "graph replay" : "eager");
  }
  if (times.empty())
    return llvm::Error::success();
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double t : times)
    mean += t;
  mean /= times.size();
  double flops = kir::countFlops(executor.program());
  llvm::outs() << llvm::format(
      "steps: %zu, device time per step: mean %.3f ms, median %.3f ms, min "
      "%.3f ms (%.1f TFLOP/s at the median)\n",
      times.size(), mean, sorted[sorted.size() / 2], sorted.front(),
      flops / (sorted[sorted.size() / 2] * 1e-3) / 1e12);
  return llvm::Error::success();
}

/// One profiled (eager, event per step) run: the time by kind of step,
/// then each kernel's, slowest first.
static llvm::Error runProfiled(CudaExecutor &executor) {
  executor.setProfiling(true);
  if (llvm::Error error = executor.run())
    return error;
  executor.setProfiling(false);
  const CudaStepProfile &profile = executor.profile();
  llvm::outs() << llvm::format(
      "profiled run (eager, events around each step): total %.3f ms; "
      "kernels %.3f ms, GEMMs %.3f ms, attention %.3f ms, attention grad "
      "%.3f ms, embedding grad %.3f ms\n",
      executor.lastRunMilliseconds(), profile.kernelSeconds * 1e3,
      profile.gemmSeconds * 1e3, profile.attentionSeconds * 1e3,
      profile.attentionGradSeconds * 1e3, profile.embeddingGradSeconds * 1e3);
  std::vector<std::pair<std::string, CudaStepProfile::Entry>> entries(
      profile.perKernel.begin(), profile.perKernel.end());
  std::sort(entries.begin(), entries.end(), [](auto &a, auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  for (auto &[name, entry] : entries)
    llvm::outs() << llvm::format("  %9.1f us  %3lld x  %s\n",
                                 entry.seconds * 1e6,
                                 (long long)entry.launches, name.c_str());
  return llvm::Error::success();
}

/// The last run's outputs (with the parameters if it updates them or
/// --save-params, and its persistent state), compared with --reference and
/// written to -o.
static llvm::Error compareAndWriteOutputs(CudaExecutor &executor) {
  const kir::Program &prog = executor.program();
  TensorMap outputs;
  for (const kir::Binding &output : prog.outputs) {
    llvm::Expected<HostTensor> tensor = executor.output(output.name);
    if (!tensor)
      return tensor.takeError();
    if (output.scalar == kir::StepScalar::Loss &&
        tensor->dtype == kir::DType::F32)
      llvm::outs() << llvm::format("loss: %.7f\n", tensor->f32()[0]);
    outputs[output.name] = std::move(*tensor);
  }
  if (saveParams || !prog.updates.empty())
    for (auto &[name, tensor] : executor.params())
      outputs["param." + name] = std::move(tensor);
  for (auto &[name, tensor] : executor.states())
    outputs["state." + name] = std::move(tensor);
  if (!referencePath.empty()) {
    llvm::Expected<TensorMap> reference = readSafetensors(referencePath);
    if (!reference)
      return reference.takeError();
    for (auto &[name, tensor] : *reference) {
      auto it = outputs.find(name);
      if (it == outputs.end()) {
        llvm::outs() << "compare " << name << ": no such output\n";
        continue;
      }
      compare(name, it->second, tensor);
    }
  }
  if (!outputPath.empty()) {
    if (llvm::Error error = writeSafetensors(outputPath, outputs))
      return error;
    llvm::outs() << "wrote " << outputPath << "\n";
  }
  return llvm::Error::success();
}

/// One program run --warmup + --steps times (and profiled once), its
/// outputs compared and written.
static llvm::Error runProgram(kir::ArtifactContents contents) {
  CudaExecutorOptions options = executorOptions();
  cuda::CudaCompileFn compiler = compilerFor(contents);
  auto startCreate = std::chrono::steady_clock::now();
  llvm::Expected<std::unique_ptr<CudaExecutor>> created = CudaExecutor::create(
      std::move(contents.program), compiler, std::move(options));
  if (!created)
    return created.takeError();
  if (llvm::Error error = loadWeights(**created, weightsPath, seed))
    return error;
  CudaExecutor &executor = **created;
  printSetup(executor, std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - startCreate)
                           .count());
  if (llvm::Error error = bindInputs(executor))
    return error;
  if (llvm::Error error = runTimedSteps(executor))
    return error;
  if (!noProfile)
    if (llvm::Error error = runProfiled(executor))
      return error;
  return compareAndWriteOutputs(executor);
}

/// --compile-only: the modules of `contents` (and of --update's artifact)
/// compiled as the executor would compile them, with no driver call.
static llvm::Error compileModules(const kir::ArtifactContents &contents) {
  std::vector<std::pair<std::string, const kir::ArtifactContents *>> all = {
      {artifactPath, &contents}};
  llvm::Expected<kir::ArtifactContents> update =
      updatePath.empty() ? kir::ArtifactContents()
                         : kir::readArtifactContents(updatePath);
  if (!update)
    return update.takeError();
  if (!updatePath.empty())
    all.push_back({updatePath, &*update});
  llvm::Expected<kir::ArtifactContents> cast =
      castPath.empty() ? kir::ArtifactContents()
                       : kir::readArtifactContents(castPath);
  if (!cast)
    return cast.takeError();
  if (!castPath.empty())
    all.push_back({castPath, &*cast});
  for (auto &[path, artifact] : all) {
    llvm::Expected<cuda::CudaModules> modules =
        compilerFor(*artifact)(artifact->program);
    if (!modules)
      return llvm::createStringError(path + ": " +
                                     llvm::toString(modules.takeError()));
    size_t cubins = modules->kernels.cubins.size();
    llvm::outs() << llvm::format(
        "compiled %s (@%s): %zu kernels (%s, %zu cubins, NVRTC %s %.2f s), "
        "%zu multi-tensor launches, attention library %s (%s %.2f s)\n",
        path.c_str(), artifact->program.function.c_str(),
        artifact->program.kernels.size(),
        modules->kernelsPrecompiled ? "from the artifact" : "compiled now",
        cubins, modules->kernelStats.cacheHit ? "cache hit" : "compiled",
        modules->kernelStats.compileSeconds, modules->batches.size(),
        modules->hasLibrary ? "yes" : "none",
        modules->libraryStats.cacheHit ? "cache hit" : "compiled",
        modules->libraryStats.compileSeconds);
  }
  return llvm::Error::success();
}

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(toolOptions);
  cl::ParseCommandLineOptions(argc, argv,
                              "llmc-cuda-run: run an llmc artifact on a GPU\n");
  llvm::Expected<kir::ArtifactContents> contents =
      kir::readArtifactContents(artifactPath);
  if (!contents)
    return fail(contents.takeError());
  if (compileOnly) {
    if (llvm::Error error = compileModules(*contents))
      return fail(std::move(error));
    return 0;
  }
  if (llvm::Error error = updatePath.empty()
                              ? runProgram(std::move(*contents))
                              : runTraining(std::move(*contents)))
    return fail(std::move(error));
  return 0;
}
