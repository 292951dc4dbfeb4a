// llmc-cpu-reference: the CPU executor's outputs for an artifact, weights
// and inputs, written as the reference llmc-cuda-run compares GPU results
// with. It can also write a seeded random inputs file (token ids below each
// input's id bound) so both sides run on the same data, and compile the
// artifact first from a model config or preset (what `llmc compile` does
// for @forward).
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "passes/Pipelines.h"
#include "runtime/Artifact.h"
#include "runtime/Executor.h"
#include "runtime/Generate.h"
#include "runtime/Weights.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <random>

namespace cl = llvm::cl;
using namespace llmc;
using namespace llmc::runtime;

static cl::opt<std::string> artifactPath(cl::Positional, cl::Required,
                                         cl::desc("<model.llmc>"));
static cl::opt<std::string> weightsPath(
    "weights", cl::desc("Parameters; default: seeded GPT-2 initialization"),
    cl::value_desc("file"));
static cl::opt<uint64_t> seed("seed", cl::desc("Initialization seed"),
                              cl::init(1337));
static cl::opt<std::string>
    inputsPath("inputs", cl::desc("Program inputs (safetensors)"),
               cl::value_desc("file"));
static cl::opt<std::string> makeInputs(
    "make-inputs",
    cl::desc("Write seeded random inputs (ids below each input's bound) to "
             "this file and use them"),
    cl::value_desc("file"));
static cl::opt<std::string> outputPath("o", cl::Required,
                                       cl::desc("Reference outputs file"),
                                       cl::value_desc("file"));
static cl::opt<int64_t> maxElements(
    "max-elements",
    cl::desc("Keep only the first N elements of larger outputs (flattened)"),
    cl::init(0));
static cl::opt<int> threads("cpu-threads", cl::desc("CPU threads"), cl::init(0));

static cl::opt<std::string> compileConfig(
    "compile",
    cl::desc("Compile this model config (YAML) or preset to <model.llmc> "
             "first"),
    cl::value_desc("config"));
static cl::opt<std::string> functionName(
    "function",
    cl::desc("Function to compile (--compile): forward, grad_step (the "
             "training pipeline's gradient step) or update_step"),
    cl::init("forward"));
static cl::opt<int64_t> batch("batch", cl::desc("Batch size (--compile)"),
                              cl::init(4));
static cl::opt<int64_t> seqLen("seq-len",
                               cl::desc("Sequence length (--compile)"),
                               cl::init(64));

/// `llmc compile` of @forward: config -> llmc IR -> compile pipeline ->
/// kir::Program -> artifact.
static llvm::Error compileArtifact() {
  llvm::Expected<mlir::llmc::ModelConfig> config =
      llvm::sys::fs::exists(compileConfig)
          ? mlir::llmc::loadModelConfigFile(compileConfig)
          : [&]() -> llvm::Expected<mlir::llmc::ModelConfig> {
              if (auto preset = mlir::llmc::getModelPreset(compileConfig))
                return *preset;
              return llvm::createStringError("no config or preset '" +
                                             compileConfig + "'");
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
  mlir::PassManager pm(&context);
  if (functionName == "forward")
    mlir::llmc::buildCompilePipeline(pm);
  else
    mlir::llmc::buildTrainingPipeline(pm, mlir::llmc::OptimizerPassOptions());
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

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "CPU reference outputs\n");
  if (!compileConfig.empty())
    if (llvm::Error error = compileArtifact())
      return fail(std::move(error));
  llvm::Expected<kir::Program> program = readArtifact(artifactPath);
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
    if (input.name == "dloss" && !inputs.count("dloss")) {
      inputs["dloss"] = HostTensor::fromF32({1.0f}, {});
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
    if (output.name == "loss" && tensor->dtype == kir::DType::F32)
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
