// What the CUDA benches share: dying with a message, the first GPU with its
// primary context and a stream (or, where there is none, a line saying
// nothing was measured), uploads, best-of-N timing with events, and NVRTC
// modules loaded for the device.
#ifndef LLMC_BENCH_CUDABENCH_H
#define LLMC_BENCH_CUDABENCH_H

#include "codegen/KernelToCuda/Nvrtc.h"
#include "runtime/Cuda/CudaApi.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

namespace llmc::bench {

/// The bench's name, the prefix of its messages (main sets it).
inline const char *&cudaBenchName() {
  static const char *name = "bench";
  return name;
}

/// Exits with the error's message (a bench has no recovery).
template <typename T> T orDie(llvm::Expected<T> value, const char *what) {
  if (!value) {
    llvm::errs() << cudaBenchName() << ": " << what << ": "
                 << llvm::toString(value.takeError()) << "\n";
    std::exit(1);
  }
  return std::move(*value);
}
inline void orDie(llvm::Error error, const char *what) {
  if (error) {
    llvm::errs() << cudaBenchName() << ": " << what << ": "
                 << llvm::toString(std::move(error)) << "\n";
    std::exit(1);
  }
}

struct CudaBenchGpu {
  const cuda::DriverApi *cu = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  int major = 0, minor = 0;
  std::string name;

  /// The first GPU, its primary context current, a stream. Where there is
  /// no driver, no GPU, or one below sm_80 (`why80`: what it lacks), prints
  /// "<bench>: ...: nothing measured" and returns nothing.
  static std::optional<CudaBenchGpu> open(const char *why80) {
    CudaBenchGpu gpu;
    llvm::Expected<const cuda::DriverApi *> driver = cuda::loadDriver();
    if (!driver) {
      llvm::outs() << cudaBenchName() << ": no GPU here ("
                   << llvm::toString(driver.takeError())
                   << "): nothing measured\n";
      return std::nullopt;
    }
    gpu.cu = *driver;
    int devices = 0;
    if (gpu.cu->deviceGetCount(&devices) != CUDA_SUCCESS || devices == 0) {
      llvm::outs() << cudaBenchName()
                   << ": the CUDA driver finds no GPU: nothing measured\n";
      return std::nullopt;
    }
    orDie(cuda::checkDriver(*gpu.cu, gpu.cu->deviceGet(&gpu.device, 0),
                            "cuDeviceGet"),
          "device");
    gpu.cu->deviceGetAttribute(
        &gpu.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, gpu.device);
    gpu.cu->deviceGetAttribute(
        &gpu.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, gpu.device);
    char name[256] = {};
    gpu.cu->deviceGetName(name, sizeof(name), gpu.device);
    gpu.name = name;
    if (gpu.major < 8) {
      llvm::outs() << cudaBenchName() << ": " << gpu.name << " (sm_"
                   << gpu.major << gpu.minor << ") has no " << why80
                   << " (sm_80 and later): nothing measured\n";
      return std::nullopt;
    }
    orDie(cuda::checkDriver(*gpu.cu,
                            gpu.cu->devicePrimaryCtxRetain(&gpu.context,
                                                           gpu.device),
                            "cuDevicePrimaryCtxRetain"),
          "context");
    gpu.cu->ctxSetCurrent(gpu.context);
    gpu.cu->streamCreate(&gpu.stream, CU_STREAM_NON_BLOCKING);
    return gpu;
  }

  /// "NAME (sm_XY)".
  std::string describe() const {
    return name + " (sm_" + std::to_string(major) + std::to_string(minor) +
           ")";
  }

  CUdeviceptr upload(const void *data, size_t bytes) {
    CUdeviceptr p = 0;
    orDie(cuda::checkDriver(*cu, cu->memAlloc(&p, bytes), "cuMemAlloc"),
          "allocate");
    orDie(cuda::checkDriver(*cu, cu->memcpyHtoDAsync(p, data, bytes, stream),
                            "cuMemcpyHtoDAsync"),
          "upload");
    return p;
  }

  /// Milliseconds of the best of `reps` runs of fn (events on the stream),
  /// after one warm-up run.
  template <typename Fn> double bestMs(int reps, Fn &&fn) {
    CUevent start, end;
    cu->eventCreate(&start, CU_EVENT_DEFAULT);
    cu->eventCreate(&end, CU_EVENT_DEFAULT);
    fn();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      cu->eventRecord(start, stream);
      fn();
      cu->eventRecord(end, stream);
      cu->eventSynchronize(end);
      float ms = 0;
      cu->eventElapsedTime(&ms, start, end);
      best = std::min(best, double(ms));
    }
    cu->eventDestroy(start);
    cu->eventDestroy(end);
    return best;
  }

  /// `source` compiled by NVRTC (sm_80, sm_90 cubins and compute_80 PTX,
  /// as compileOnly compiles it) and loaded for this device.
  CUmodule load(const std::string &source, const char *file) {
    cuda::NvrtcOptions options;
    cuda::CudaBinaries binaries =
        orDie(cuda::compileCuda(source, file, options), "NVRTC");
    cuda::CudaImage image =
        orDie(binaries.imageFor(major * 10 + minor), "module image");
    CUmodule module = nullptr;
    orDie(cuda::checkDriver(*cu, cu->moduleLoadData(&module, image.data),
                            "cuModuleLoadData"),
          "module");
    return module;
  }

  CUfunction function(CUmodule module, const std::string &kernel) {
    CUfunction fn = nullptr;
    orDie(cuda::checkDriver(*cu,
                            cu->moduleGetFunction(&fn, module, kernel.c_str()),
                            "cuModuleGetFunction"),
          "kernel");
    return fn;
  }

  /// Launches `fn` with its one by-value argument block.
  void launch(CUfunction fn, const cuda::CudaLaunch &shape, void *args,
              const char *what) {
    void *params[] = {args};
    orDie(cuda::checkDriver(
              *cu,
              cu->launchKernel(fn, unsigned(shape.grid[0]),
                               unsigned(shape.grid[1]), unsigned(shape.grid[2]),
                               shape.block[0], shape.block[1], shape.block[2],
                               0, stream, params, nullptr),
              "cuLaunchKernel"),
          what);
  }
};

/// --compile-only: `source` compiled by NVRTC as CudaBenchGpu::load
/// compiles it, with no driver (scripts/gpu-check.sh --dry-run: the sources
/// compile, and the kernel cache a GPU run reads is filled). Prints what it
/// did; exits 1 on a compile error.
inline int compileOnly(const std::string &source, const char *file) {
  cuda::NvrtcOptions options;
  llvm::Expected<cuda::CudaBinaries> binaries =
      cuda::compileCuda(source, file, options);
  if (!binaries) {
    llvm::errs() << cudaBenchName() << ": " << file << ": "
                 << llvm::toString(binaries.takeError()) << "\n";
    return 1;
  }
  llvm::outs() << cudaBenchName() << ": compiled " << file << " ("
               << binaries->cubins.size() << " cubins"
               << (binaries->ptx.empty() ? "" : " and PTX") << ")\n";
  return 0;
}

} // namespace llmc::bench

#endif // LLMC_BENCH_CUDABENCH_H
