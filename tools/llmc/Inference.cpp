// loadInference: model config -> @prefill and @decode on one store.
#include "tools/llmc/Inference.h"

#include "codegen/KernelToCpu/KernelToCpu.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Exec/MemoryBudget.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/Format.h"

llvm::Expected<llmc::kir::DType>
llmc::inferenceWeightType(llvm::StringRef precision) {
  if (precision == "fp32")
    return kir::DType::F32;
  if (precision == "bf16")
    return kir::DType::BF16;
  if (precision == "fp16")
    return kir::DType::F16;
  return llvm::createStringError("--precision: expected fp32, bf16 or fp16, "
                                 "got '" +
                                 precision + "'");
}

llvm::Expected<llmc::InferencePrograms>
llmc::buildInferencePrograms(mlir::MLIRContext &context,
                             const mlir::llmc::ModelConfig &config,
                             mlir::llmc::InferenceShape shape,
                             kir::DType weights) {
  auto module = mlir::llmc::buildInferenceModule(context, config, shape);
  if (!module)
    return module.takeError();
  return compileInference(**module, weights);
}

llvm::Expected<llmc::InferenceSession>
llmc::loadInference(mlir::MLIRContext &context,
                    const mlir::llmc::ModelConfig &config,
                    mlir::llmc::InferenceShape shape, llvm::StringRef weights,
                    uint64_t seed, int numThreads, llvm::StringRef what,
                    llvm::raw_ostream &log, kir::DType weightsType,
                    const InferenceExecutorFactory &device) {
  llvm::Expected<InferencePrograms> programs =
      buildInferencePrograms(context, config, shape, weightsType);
  if (!programs)
    return programs.takeError();
  InferenceSession session;
  if (device) {
    for (auto [name, program, executor] :
         {std::tuple<const char *, kir::Program *,
                     std::unique_ptr<runtime::Executor> *>{
              "prefill", &programs->prefill, &session.prefill},
          {"decode", &programs->decode, &session.decode}}) {
      auto created = device(std::move(*program), name);
      if (!created)
        return created.takeError();
      *executor = std::move(*created);
    }
  } else {
    if (auto available = runtime::availableHostMemory())
      if (llvm::Error error = runtime::checkMemoryFits(
              runtime::memoryNeed({&programs->prefill, &programs->decode}),
              *available, what.str(),
              /*training=*/false))
        return error;
    auto store = std::make_shared<runtime::PersistentStore>();
    for (auto [name, program, executor] :
         {std::tuple<const char *, kir::Program *,
                     runtime::CpuExecutor **>{
              "prefill", &programs->prefill, &session.cpuPrefill},
          {"decode", &programs->decode, &session.cpuDecode}}) {
      std::vector<kir::Kernel> kernels = program->kernels;
      cpu::CacheStats stats;
      auto created = runtime::createCpuExecutor(
          std::move(*program),
          [&]() { return cpu::compileKernelsToObject(kernels); }, numThreads,
          &stats, {}, store);
      if (!created)
        return created.takeError();
      log << llvm::format("llmc: @%s: %zu kernels %s (%.2f s)\n", name,
                          kernels.size(),
                          stats.hit ? "loaded from the kernel cache"
                                    : "JIT-compiled",
                          stats.hit ? stats.loadSeconds
                                    : stats.compileSeconds + stats.loadSeconds);
      if (!stats.warning.empty())
        log << "llmc: warning: " << stats.warning << "\n";
      *executor = created->get();
      (name == llvm::StringRef("prefill") ? session.prefill : session.decode) =
          std::move(*created);
    }
  }
  // One store: the parameters loaded through @prefill are @decode's too.
  if (llvm::Error error = runtime::loadWeights(*session.prefill, weights, seed))
    return error;
  llvm::Expected<runtime::CachedGenerator> generator =
      runtime::CachedGenerator::create(*session.prefill, *session.decode);
  if (!generator)
    return generator.takeError();
  session.generator = *generator;
  return session;
}
