// llmc-cpu-reference: the CPU executor's outputs for an artifact, weights
// and inputs, written as the reference llmc-cuda-run compares GPU results
// with. It can also write a seeded random inputs file (token ids below each
// input's id bound) so both sides run on the same data, and compile the
// artifact first from a model config or preset (what `llmc compile` does
// for @forward).
//
// With --update it runs K training steps instead (the grad step with
// dloss = 1, then the AdamW update step, over one persistent store), each on
// a fresh seeded batch, and writes per-step losses and gradient norms and
// the final parameters and optimizer state (whole, or reduced as in
// TrainingCheck.h): the reference for llmc-cuda-run --update.
#include "TrainingCheck.h"

#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "ir/kernel/Artifact.h"
#include "passes/Pipelines.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <chrono>
#include <cmath>
#include <random>

namespace cl = llvm::cl;

/// The tool's own options: --help lists these, not the libraries'.
static cl::OptionCategory toolOptions("llmc-cpu-reference options");
using namespace llmc;
using namespace llmc::runtime;

static cl::opt<std::string> artifactPath(cl::Positional, cl::Required,
                                         cl::cat(toolOptions), cl::desc("<model.llmc>"));
static cl::opt<std::string>
    weightsPath("weights",
                cl::cat(toolOptions), cl::desc("Parameters; default: seeded GPT-2 initialization"),
                cl::value_desc("file"));
static cl::opt<uint64_t> seed("seed", cl::cat(toolOptions), cl::desc("Initialization seed"),
                              cl::init(1337));
static cl::opt<std::string> inputsPath("inputs",
                                       cl::cat(toolOptions), cl::desc("Program inputs (safetensors)"),
                                       cl::value_desc("file"));
static cl::opt<std::string> makeInputs(
    "make-inputs",
    cl::cat(toolOptions), cl::desc("Write seeded random inputs (ids below each input's bound) to "
             "this file and use them"),
    cl::value_desc("file"));
static cl::opt<std::string> outputPath("o", cl::Required,
                                       cl::cat(toolOptions), cl::desc("Reference outputs file"),
                                       cl::value_desc("file"));
static cl::opt<int64_t> maxElements(
    "max-elements",
    cl::cat(toolOptions), cl::desc("Keep only the first N elements of larger outputs (flattened)"),
    cl::init(0));
static cl::opt<int> threads("cpu-threads", cl::cat(toolOptions), cl::desc("CPU threads"),
                            cl::init(0));

static cl::opt<std::string> compileConfig(
    "compile",
    cl::cat(toolOptions), cl::desc("Compile this model config (YAML) or preset to <model.llmc> "
             "first"),
    cl::value_desc("config"));
static cl::opt<std::string> functionName(
    "function",
    cl::cat(toolOptions), cl::desc("Function to compile (--compile): forward, grad_step (the "
             "training pipeline's gradient step), update_step, or train "
             "(compileTrainingStep: the grad step to <model.llmc>, the update "
             "step to --update)"),
    cl::init("forward"));
static cl::opt<std::string> precision(
    "precision",
    cl::cat(toolOptions), cl::desc("Precision of the compiled training programs (--compile with "
             "--function train or grad_step): fp32 (default), bf16, or fp16 with "
             "loss scaling, as llmc run --device cuda compiles them"),
    cl::init("fp32"));
static cl::opt<bool> inputsOnly(
    "inputs-only",
    cl::cat(toolOptions), cl::desc("With --update --make-inputs: write the training inputs and "
             "stop (no CPU run): the inputs of a timed GPU run"));
static cl::opt<int64_t> batch("batch", cl::cat(toolOptions), cl::desc("Batch size (--compile)"),
                              cl::init(4));
static cl::opt<int64_t>
    seqLen("seq-len", cl::cat(toolOptions), cl::desc("Sequence length (--compile)"), cl::init(64));

static cl::opt<std::string> updatePath(
    "update",
    cl::cat(toolOptions), cl::desc("The update step's artifact: run --train-steps training steps "
             "(<model.llmc> is the grad step)"),
    cl::value_desc("file"));
static cl::opt<std::string> castPath(
    "cast",
    cl::cat(toolOptions), cl::desc("Mixed precision: the @cast_weights artifact, which writes the "
             "16-bit weight copies the other programs read; --compile "
             "--function train writes it, a training run runs it once before "
             "the first step"),
    cl::value_desc("file"));
static cl::opt<int> trainSteps("train-steps",
                               cl::cat(toolOptions), cl::desc("Training steps (--update)"),
                               cl::init(1));
static cl::opt<double> learningRate("lr", cl::cat(toolOptions), cl::desc("Learning rate (--update)"),
                                    cl::init(1e-3));
static cl::opt<int64_t> tokenRange(
    "token-range",
    cl::cat(toolOptions), cl::desc("Training batches draw ids from [0, min(N, bound)): a small "
             "alphabet the model can learn (--update --make-inputs)"),
    cl::init(16));
static cl::opt<int64_t> sampleElements(
    "sample-elements",
    cl::cat(toolOptions), cl::desc("Write final tensors as N evenly strided elements plus sums "
             "(--update; 0: whole)"),
    cl::init(0));

/// The training step's options as `llmc run --device cuda` compiles it, in
/// the --precision asked for.
static llvm::Expected<TrainingStepOptions> cudaTrainingOptions() {
  TrainingStepOptions options;
  options.forCuda = true;
  if (precision == "bf16")
    options.precision.kind = PrecisionConfig::Kind::BF16;
  else if (precision == "fp16")
    options.precision.kind = PrecisionConfig::Kind::FP16;
  else if (precision != "fp32")
    return llvm::createStringError("--precision: expected fp32, bf16 or "
                                   "fp16, got '" + precision + "'");
  return options;
}

/// `llmc compile` of @forward: config -> llmc IR -> compile pipeline ->
/// kir::Program -> artifact.
static llvm::Error compileArtifact() {
  llvm::Expected<mlir::llmc::ModelConfig> config =
      llvm::sys::fs::exists(compileConfig)
          ? mlir::llmc::loadModelConfigFile(compileConfig)
          : [&]() -> llvm::Expected<mlir::llmc::ModelConfig> {
    if (auto preset = mlir::llmc::getModelPreset(compileConfig))
      return *preset;
    return llvm::createStringError("no config or preset '" + compileConfig +
                                   "'");
  }();
  if (!config)
    return config.takeError();
  mlir::MLIRContext context;
  mlir::DialectRegistry registry;
  registry.insert<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  auto module =
      mlir::llmc::buildForwardModule(context, *config, {batch, seqLen});
  if (!module)
    return module.takeError();
  llvm::Expected<TrainingStepOptions> cuda = cudaTrainingOptions();
  if (!cuda)
    return cuda.takeError();
  if (functionName == "train") {
    if (updatePath.empty())
      return llvm::createStringError("--function train needs --update");
    // The programs llmc-cuda-run runs, as `llmc run` compiles for CUDA.
    llvm::Expected<TrainingStepPrograms> programs =
        training::compileTrainingStep(**module, *cuda);
    if (!programs)
      return programs.takeError();
    if (llvm::Error error = writeArtifact(artifactPath, programs->gradStep))
      return error;
    if (programs->castWeights) {
      if (castPath.empty())
        return llvm::createStringError(
            "--precision " + precision +
            ": the programs read 16-bit weight copies; name the file for "
            "their @cast_weights with --cast");
      if (llvm::Error error = writeArtifact(castPath, *programs->castWeights))
        return error;
    }
    return writeArtifact(updatePath, programs->updateStep);
  }
  mlir::PassManager pm(&context);
  if (functionName == "forward")
    mlir::llmc::buildCompilePipeline(pm);
  else
    mlir::llmc::buildTrainingPipeline(
        pm, training::trainingPipelineOptions(*cuda, **module));
  if (mlir::failed(pm.run(**module)))
    return llvm::createStringError("the compile pipeline failed");
  auto function = (*module)->lookupSymbol<mlir::func::FuncOp>(functionName);
  if (!function)
    return llvm::createStringError("no function '" + functionName + "'");
  mlir::FailureOr<kir::Program> program = mlir::llmc::lowerToProgram(function);
  if (mlir::failed(program))
    return llvm::createStringError("lowering to kernels failed");
  return writeArtifact(artifactPath, *program);
}

static int fail(llvm::Error error) {
  llvm::errs() << "llmc-cpu-reference: error: "
               << llvm::toString(std::move(error)) << "\n";
  return 1;
}

static llvm::Error setStepInput(CpuExecutor &executor, llvm::StringRef name,
                                const TensorMap &inputs, int64_t step) {
  auto it = inputs.find(training_check::stepInputName(name.str(), step));
  if (it == inputs.end())
    return llvm::createStringError("the inputs have no " + name.str() + "." +
                                   std::to_string(step));
  return executor.setTensor(name, it->second);
}

/// One executor of an artifact, its kernels JIT-compiled, bound to `store`
/// (null: a store of its own).
static llvm::Expected<std::unique_ptr<CpuExecutor>>
loadTrainingProgram(llvm::StringRef path,
                    std::shared_ptr<PersistentStore> store) {
  llvm::Expected<kir::Program> program = kir::readArtifact(path);
  if (!program)
    return program.takeError();
  std::vector<kir::Kernel> kernels = program->kernels;
  return createCpuExecutor(
      std::move(*program),
      [kernels]() { return cpu::compileKernelsToObject(kernels); }, threads,
      nullptr, {}, std::move(store));
}

/// --make-inputs for --update: one seeded batch per step, rows of T+1 ids
/// from a small alphabet (tokens the first T, targets the last T), then
/// the step's optimizer scalars (the bias corrections from the betas the
/// update was compiled with); written to the file and returned.
static llvm::Expected<TensorMap>
makeTrainingInputs(const kir::Program &grad, const kir::Program &update) {
  using namespace training_check;
  std::vector<int64_t> shape;
  int64_t bound = 0;
  for (const kir::Binding &input : grad.inputs)
    if (input.name == "tokens") {
      shape = grad.buffers[input.buffer].shape;
      bound = grad.buffers[input.buffer].idBound;
    }
  if (shape.size() != 2 || bound <= 0)
    return llvm::createStringError("the grad step has no [B, T] "
                                   "tokens input with an id bound");
  int64_t range = std::min(tokenRange.getValue(), bound);
  std::mt19937_64 random(seed);
  TensorMap inputs;
  for (int64_t step = 0; step < trainSteps; ++step) {
    HostTensor tokens = HostTensor::zeros(kir::DType::I32, shape);
    HostTensor targets = HostTensor::zeros(kir::DType::I32, shape);
    std::vector<int32_t> row(shape[1] + 1);
    for (int64_t b = 0; b < shape[0]; ++b) {
      for (int32_t &id : row)
        id = int32_t(random() % uint64_t(range));
      for (int64_t t = 0; t < shape[1]; ++t) {
        tokens.i32()[b * shape[1] + t] = row[t];
        targets.i32()[b * shape[1] + t] = row[t + 1];
      }
    }
    inputs[stepInputName("tokens", step)] = std::move(tokens);
    inputs[stepInputName("targets", step)] = std::move(targets);
    for (kir::StepScalar scalar : updateScalarInputs) {
      llvm::Expected<double> value =
          scalar == kir::StepScalar::Lr
              ? llvm::Expected<double>(learningRate.getValue())
              : kir::biasCorrection(update, scalar, step + 1);
      if (!value)
        return value.takeError();
      std::string name = kir::stepScalarName(scalar).str();
      inputs[stepInputName(name, step)] =
          HostTensor::fromF32({float(*value)}, {});
      // Step 0's scalars under the plain names too: what a run of the
      // update program alone reads.
      if (step == 0)
        inputs[name] = HostTensor::fromF32({float(*value)}, {});
    }
  }
  if (llvm::Error error = writeSafetensors(makeInputs, inputs))
    return error;
  return inputs;
}

/// --train-steps steps, each the grad step (its batch from `inputs`, dloss
/// = 1) then the update step (the step's lr and bias corrections), with
/// each step's loss and grad norm printed; the reference file gets the
/// per-step losses and norms and the final parameters and optimizer state
/// (reduced with --sample-elements).
static llvm::Error runTrainingSteps(CpuExecutor &grad, CpuExecutor &update,
                                    const TensorMap &inputs) {
  using namespace training_check;
  if (llvm::Error error = grad.setScalar(kir::StepScalar::DLoss, 1.0))
    return error;
  std::vector<float> losses, gradNorms;
  for (int64_t step = 0; step < trainSteps; ++step) {
    auto start = std::chrono::steady_clock::now();
    for (const char *input : {"tokens", "targets"})
      if (llvm::Error error = setStepInput(grad, input, inputs, step))
        return error;
    grad.setRng(seed, step);
    if (llvm::Error error = grad.run())
      return error;
    for (kir::StepScalar input : updateScalarInputs)
      if (llvm::Error error = setStepInput(update, kir::stepScalarName(input),
                                           inputs, step))
        return error;
    if (llvm::Error error = update.run())
      return error;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    llvm::Expected<double> loss = grad.scalarOutput(kir::StepScalar::Loss);
    if (!loss)
      return loss.takeError();
    llvm::Expected<double> gradNorm =
        update.scalarOutput(kir::StepScalar::GradNorm);
    if (!gradNorm)
      return gradNorm.takeError();
    losses.push_back(float(*loss));
    gradNorms.push_back(float(*gradNorm));
    llvm::outs() << llvm::format(
        "cpu step %lld: loss %.7f grad_norm %.7f (%.1f ms)\n", (long long)step,
        losses.back(), gradNorms.back(), seconds * 1e3);
  }

  TensorMap outputs;
  outputs[kir::stepScalarName(kir::StepScalar::Loss).str()] =
      HostTensor::fromF32(losses, {int64_t(losses.size())});
  outputs[kir::stepScalarName(kir::StepScalar::GradNorm).str()] =
      HostTensor::fromF32(gradNorms, {int64_t(gradNorms.size())});
  for (auto &[name, tensor] : grad.params())
    addReduced(outputs, "param." + name, tensor, sampleElements);
  for (auto &[name, tensor] : update.states())
    addReduced(outputs, "state." + name, tensor, sampleElements);
  if (llvm::Error error = writeSafetensors(outputPath, outputs))
    return error;
  llvm::outs() << "wrote " << outputPath << "\n";
  return llvm::Error::success();
}

/// K training steps on the CPU: the grad step and the update step bound to
/// one persistent store, on the inputs of --inputs or --make-inputs.
static llvm::Error runTraining() {
  llvm::Expected<std::unique_ptr<CpuExecutor>> grad =
      loadTrainingProgram(artifactPath, nullptr);
  if (!grad)
    return grad.takeError();
  if (llvm::Error error = loadWeights(**grad, weightsPath, seed))
    return error;
  llvm::Expected<std::unique_ptr<CpuExecutor>> update =
      loadTrainingProgram(updatePath, (*grad)->store());
  if (!update)
    return update.takeError();
  llvm::Expected<TensorMap> inputs = makeInputs.empty()
                                         ? readSafetensors(inputsPath)
                                         : makeTrainingInputs((*grad)->program(),
                                                            (*update)->program());
  if (!inputs)
    return inputs.takeError();
  if (inputsOnly) {
    llvm::outs() << "wrote " << makeInputs << "\n";
    return llvm::Error::success();
  }
  if (!castPath.empty()) {
    llvm::Expected<std::unique_ptr<CpuExecutor>> cast =
        loadTrainingProgram(castPath, (*grad)->store());
    if (!cast)
      return cast.takeError();
    if (llvm::Error error = (*cast)->run())
      return error;
  }
  return runTrainingSteps(**grad, **update, *inputs);
}

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(toolOptions);
  cl::ParseCommandLineOptions(argc, argv, "CPU reference outputs\n");
  if (!compileConfig.empty())
    if (llvm::Error error = compileArtifact())
      return fail(std::move(error));
  if (inputsOnly && (updatePath.empty() || makeInputs.empty()))
    return fail(llvm::createStringError(
        "--inputs-only needs --update and --make-inputs"));
  if (!updatePath.empty()) {
    if (llvm::Error error = runTraining())
      return fail(std::move(error));
    return 0;
  }
  llvm::Expected<kir::Program> program = kir::readArtifact(artifactPath);
  if (!program)
    return fail(program.takeError());
  std::vector<kir::Kernel> kernels = program->kernels;
  auto executor = createCpuExecutor(
      std::move(*program),
      [&]() { return cpu::compileKernelsToObject(kernels); }, threads);
  if (!executor)
    return fail(executor.takeError());
  CpuExecutor &cpu = **executor;
  if (llvm::Error error = loadWeights(cpu, weightsPath, seed))
    return fail(std::move(error));
  const kir::Program &prog = cpu.program();

  TensorMap inputs;
  if (!makeInputs.empty()) {
    std::mt19937_64 random(seed);
    for (const kir::Binding &input : prog.inputs) {
      const kir::Buffer &buffer = prog.buffers[input.buffer];
      if (buffer.idBound <= 0 || buffer.dtype != kir::DType::I32)
        continue;
      HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
      for (int32_t &id : tensor.i32())
        id = int32_t(random() % uint64_t(buffer.idBound));
      inputs[input.name] = std::move(tensor);
    }
    if (llvm::Error error = writeSafetensors(makeInputs, inputs))
      return fail(std::move(error));
  } else if (!inputsPath.empty()) {
    llvm::Expected<TensorMap> read = readSafetensors(inputsPath);
    if (!read)
      return fail(read.takeError());
    inputs = std::move(*read);
  }
  // A gradient step's seed: d(loss) = 1.
  for (const kir::Binding &input : prog.inputs)
    if (input.scalar == kir::StepScalar::DLoss && !inputs.count(input.name)) {
      inputs[input.name] = HostTensor::fromF32({1.0f}, {});
      if (!makeInputs.empty())
        if (llvm::Error error = writeSafetensors(makeInputs, inputs))
          return fail(std::move(error));
    }
  for (auto &[name, tensor] : inputs)
    if (llvm::Error error = cpu.setTensor(name, tensor))
      return fail(std::move(error));
  cpu.setRng(seed, 0);
  if (llvm::Error error = cpu.run())
    return fail(std::move(error));

  TensorMap outputs;
  for (const kir::Binding &output : prog.outputs) {
    llvm::Expected<HostTensor> tensor = cpu.output(output.name);
    if (!tensor)
      return fail(tensor.takeError());
    if (output.scalar == kir::StepScalar::Loss &&
        tensor->dtype == kir::DType::F32)
      llvm::outs() << llvm::format("cpu loss: %.7f\n", tensor->f32()[0]);
    if (maxElements > 0 && tensor->numElements() > maxElements &&
        tensor->isFloat()) {
      std::vector<float> values = tensor->toF32();
      values.resize(maxElements);
      *tensor = HostTensor::fromF32(values, {maxElements});
    }
    outputs[output.name] = std::move(*tensor);
  }
  // A training step's persistent results (accumulated gradients).
  for (auto &[name, tensor] : cpu.states()) {
    if (maxElements > 0 && tensor.numElements() > maxElements) {
      std::vector<float> values = tensor.toF32();
      values.resize(maxElements);
      tensor = HostTensor::fromF32(values, {maxElements});
    }
    outputs["state." + name] = std::move(tensor);
  }
  if (llvm::Error error = writeSafetensors(outputPath, outputs))
    return fail(std::move(error));
  llvm::outs() << "wrote " << outputPath << "\n";
  return 0;
}
