// The KV-cache inference programs of a model loaded for the CPU: what
// `llmc generate` runs (and what `llmc export` compiles ahead of time).
#ifndef LLMC_TOOLS_LLMC_INFERENCE_H
#define LLMC_TOOLS_LLMC_INFERENCE_H

#include "codegen/Inference.h"
#include "frontend/GptBuilder.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Serve/CachedGenerate.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"

#include <functional>
#include <memory>

namespace llmc {

struct InferenceSession {
  std::unique_ptr<runtime::Executor> prefill, decode;
  /// The same executors where they run on the CPU (the 2:4 settings are
  /// theirs); null on a device.
  runtime::CpuExecutor *cpuPrefill = nullptr, *cpuDecode = nullptr;
  runtime::CachedGenerator generator;
};

/// Makes the executor of @prefill or @decode (`name`) on a device; both
/// must bind one store. What loadInference uses instead of the CPU's.
using InferenceExecutorFactory =
    std::function<llvm::Expected<std::unique_ptr<runtime::Executor>>(
        kir::Program program, llvm::StringRef name)>;

/// The stored weights' type of `precision` (fp32, bf16 or fp16: F32, BF16,
/// F16); an error naming --precision otherwise. What llmc generate and
/// llmc export accept.
llvm::Expected<kir::DType> inferenceWeightType(llvm::StringRef precision);

/// Builds @prefill and @decode of `config` with `shape` (frontend) and
/// compiles them to kernel-IR programs (codegen), kernels not yet compiled:
/// the part `llmc generate` and `llmc export` share.
llvm::Expected<InferencePrograms>
buildInferencePrograms(mlir::MLIRContext &context,
                       const mlir::llmc::ModelConfig &config,
                       mlir::llmc::InferenceShape shape,
                       kir::DType weights = kir::DType::F32);

/// Builds @prefill and @decode of `config` with `shape`, compiles them
/// (kernels from the kernel cache or JIT-compiled), binds both to one
/// store and loads `weights` (empty: GPT-2 initialization from `seed`).
/// Says what it compiled on `log`; `what` starts the message when the
/// programs do not fit in memory ("running model.llmc"). `weightsType`
/// BF16 or F16: the parameters stored so (storeParametersAs). `device`
/// set: the programs run on the executors it makes (a GPU) instead of the
/// CPU's.
llvm::Expected<InferenceSession>
loadInference(mlir::MLIRContext &context, const mlir::llmc::ModelConfig &config,
              mlir::llmc::InferenceShape shape, llvm::StringRef weights,
              uint64_t seed, int numThreads, llvm::StringRef what,
              llvm::raw_ostream &log, kir::DType weightsType = kir::DType::F32,
              const InferenceExecutorFactory &device = nullptr);

} // namespace llmc

#endif // LLMC_TOOLS_LLMC_INFERENCE_H
