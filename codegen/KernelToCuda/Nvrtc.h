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
#ifndef LLMC_RUNTIME_CUDA_NVRTC_H
#define LLMC_RUNTIME_CUDA_NVRTC_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::cuda {

/// A cubin compiled for one architecture.
struct Cubin {
  int arch = 0; // compute capability as major*10+minor: 80 -> sm_80
  std::vector<uint8_t> bytes;
};

/// What cuModuleLoadData takes: a cubin, or PTX text (NUL-terminated).
struct CudaImage {
  const void *data = nullptr;
  size_t size = 0;
  bool isPtx = false;
  int arch = 0; // the cubin's sm, or the PTX's compute_ version
};

/// The result of compiling one source.
struct CudaBinaries {
  std::vector<Cubin> cubins; // one per NvrtcOptions::archs, in that order
  std::string ptx;           // compute_<ptxArch> PTX; empty if not asked
  int ptxArch = 0;
  std::string log;           // NVRTC's warnings, if any

  /// The best image for a GPU of compute capability `cc` (major*10+minor):
  /// the cubin of the highest arch with the same major and a minor <= cc's
  /// (a cubin runs on later minors of its major), else the PTX if its
  /// arch <= cc, else an error naming what the binaries hold.
  llvm::Expected<CudaImage> imageFor(int cc) const;
};

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

struct NvrtcStats {
  bool cacheHit = false;
  bool corruptEntry = false; // an entry failed its checks and was replaced
  int compilations = 0;      // NVRTC programs compiled (one per arch + PTX)
  double compileSeconds = 0;
  std::string cachePath;
  std::string warning; // why the cache entry could not be written, if so
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

#endif // LLMC_RUNTIME_CUDA_NVRTC_H
