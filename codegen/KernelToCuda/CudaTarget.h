// The CUDA target of `llmc compile --target=cuda`: a program's kernels
// emitted as one CUDA module, compiled by NVRTC for sm_80, sm_90 and
// compute_80 PTX, packed as an artifact's CUDA section.
#ifndef LLMC_CODEGEN_KERNELTOCUDA_CUDATARGET_H
#define LLMC_CODEGEN_KERNELTOCUDA_CUDATARGET_H

#include "ir/kernel/Program.h"
#include "ir/kernel/Artifact.h"
#include "codegen/KernelToCuda/Nvrtc.h"

#include "llvm/Support/Error.h"

namespace llmc::cuda {

/// Emits and compiles the program's kernels (`options`: by default sm_80,
/// sm_90 and compute_80 PTX, NVRTC's disk cache on) and returns the
/// artifact section: source, cubins, PTX, one launch per kernel. Fails when
/// NVRTC is missing or rejects the source.
llvm::Expected<kir::CudaSection>
buildCudaSection(const kir::Program &program, NvrtcStats *stats = nullptr,
                 const NvrtcOptions &options = {});

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_KERNELTOCUDA_CUDATARGET_H
