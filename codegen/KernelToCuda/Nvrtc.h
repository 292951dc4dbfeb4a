// NVRTC, loaded at run time: CUDA C++ source -> cubins for sm_80 and sm_90
// plus PTX for compute_80 (forward compatibility: the driver JIT-compiles
// it for newer GPUs), with an on-disk cache. libnvrtc is dlopen'ed, never
// linked, so binaries built here run where no CUDA is installed; calls then
// fail with an error that says so. No MLIR, no CUDA headers needed.
//
// Usage:
//   llmc::cuda::NvrtcOptions options;             // sm_80 + sm_90 + PTX
//   llmc::cuda::NvrtcStats stats;
//   llvm::Expected<llmc::cuda::CudaBinaries> binaries =
//       llmc::cuda::compileCuda(source, "model.cu", options, &stats);
//   if (!binaries) ... // NVRTC missing, or its log with the source lines
//   llvm::Expected<llmc::cuda::CudaImage> image =
//       binaries->imageFor(/*computeCapability=*/90);
//   cuModuleLoadData(&module, image->data);       // cubin or PTX text
#ifndef LLMC_CODEGEN_KERNELTOCUDA_NVRTC_H
#define LLMC_CODEGEN_KERNELTOCUDA_NVRTC_H

#include "ir/kernel/CudaModule.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::cuda {

// Cubin, CudaImage, CudaBinaries and NvrtcStats are contract types
// (ir/kernel/CudaModule.h): the CUDA executor loads what this compiles.

struct NvrtcOptions {
  std::vector<int> archs = {80, 90}; // cubins: sm_80, sm_90
  int ptxArch = 80;                  // PTX for compute_80; 0: none
  /// Added to every compilation (e.g. "-lineinfo"). The defaults are
  /// -std=c++17, --fmad=true, no fast math (see Nvrtc.cpp), and the
  /// toolkit's include directory when NVRTC lacks built-in fp16 headers.
  std::vector<std::string> extraOptions;
  /// Cache directory; empty: $LLMC_CACHE_DIR, else ~/.cache/llmc.
  std::string cacheDirectory;
  bool cacheEnabled = true;
};

/// Whether libnvrtc can be loaded; if not, `why` says what was tried.
bool nvrtcAvailable(std::string *why = nullptr);

/// NVRTC's version (major, minor), or the load error.
llvm::Expected<std::pair<int, int>> nvrtcVersion();

/// Compiles `source` (`name` is the file name NVRTC's messages use) for
/// every arch in `options`, or loads the result from the cache (keyed by
/// SHA-256 of source, options and NVRTC version). On a compile error the
/// message holds NVRTC's log with each offending source line quoted.
llvm::Expected<CudaBinaries> compileCuda(llvm::StringRef source,
                                         llvm::StringRef name = "llmc.cu",
                                         const NvrtcOptions &options = {},
                                         NvrtcStats *stats = nullptr);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_KERNELTOCUDA_NVRTC_H
