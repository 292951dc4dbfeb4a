// The CUDA executor's compiler: a program's kernels emitted
// (KernelToCuda.h) and compiled by NVRTC, or taken from an artifact, plus
// the library module its library steps launch (flash attention,
// FlashAttention.h, and the embedding gradient) with one launch per
// library kernel, as the contract's CudaModules (ir/kernel/CudaModule.h).
// The runtime has no compiler of its own: callers hand cudaCompiler() to
// runtime::CudaExecutor::create.
#ifndef LLMC_CODEGEN_KERNELTOCUDA_CUDACOMPILER_H
#define LLMC_CODEGEN_KERNELTOCUDA_CUDACOMPILER_H

#include "codegen/KernelToCuda/FlashAttention.h"
#include "codegen/KernelToCuda/Nvrtc.h"
#include "ir/kernel/CudaModule.h"
#include "ir/kernel/Program.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace llmc::cuda {

struct CudaCompilerOptions {
  NvrtcOptions nvrtc;
  /// Binaries of emitCudaModule(program) compiled ahead of time (an
  /// artifact's CUDA section); none: compiled with NVRTC.
  std::optional<CudaBinaries> kernelBinaries;
  /// Their launches, one per program kernel (empty: chooseLaunch).
  std::vector<CudaLaunch> kernelLaunches;
  /// Run batches of same-body elementwise kernel steps as one multi-tensor
  /// launch each, and of same-body per-tensor sums (the gradient norm's
  /// sums of squares) as two (MultiTensor.h); only where the kernels are
  /// compiled now (precompiled binaries hold no batch kernels).
  bool multiTensor = true;
};

/// The source of the library module: flash attention for `variants` and
/// the embedding-gradient kernels (ABI in CudaModules' comment).
std::string cudaLibrarySource(llvm::ArrayRef<FlashAttentionVariant> variants);

/// Compiles (or takes from `options`) everything the CUDA executor loads
/// for `program`; attention steps get the tensor-core flash kernels where
/// usesTensorCores (f16/bf16, head size 64 or 128), else the CUDA-core
/// ones. Fails when NVRTC is missing or rejects a source, or when an
/// attention step's head size or type has no flash kernel.
llvm::Expected<CudaModules>
compileCudaModules(const kir::Program &program,
                   const CudaCompilerOptions &options = {});

/// compileCudaModules with `options`, as the executor's callback.
CudaCompileFn cudaCompiler(CudaCompilerOptions options = {});

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_KERNELTOCUDA_CUDACOMPILER_H
