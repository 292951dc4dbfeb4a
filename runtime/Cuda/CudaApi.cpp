// Loading the CUDA driver and cuBLASLt with dlopen/dlsym.
#include "runtime/Cuda/CudaApi.h"

#include <dlfcn.h>

#include <string>
#include <vector>

using namespace llmc;
using namespace llmc::cuda;

// The symbol a cuda.h name stands for: the macro is expanded first, so
// LLMC_SYMBOL(cuMemAlloc) is "cuMemAlloc_v2", the ABI cuda.h declares.
#define LLMC_STRINGIFY_EXPANDED(name) #name
#define LLMC_SYMBOL(name) LLMC_STRINGIFY_EXPANDED(name)

void *llmc::cuda::openFirstLibrary(const std::vector<std::string> &names,
                                   std::string &tried) {
  for (const std::string &name : names) {
    if (void *library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))
      return library;
    const char *why = dlerror();
    tried += "\n  " + (why ? std::string(why) : name);
  }
  return nullptr;
}

void *llmc::cuda::lookupSymbol(void *library, const char *symbol,
                               std::string &missing) {
  void *address = dlsym(library, symbol);
  if (!address && missing.empty())
    missing = symbol;
  return address;
}

namespace {

struct DriverState {
  DriverApi api{};
  std::string error; // empty when loaded
};

DriverState loadDriverOnce() {
  DriverState state;
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    state.error = std::string("no CUDA driver (libcuda.so.1) on this "
                              "machine: ") +
                  (why ? why : "dlopen failed") +
                  "; install the NVIDIA driver or run on a machine with a GPU";
    return state;
  }
  std::string missing;
  DriverApi &a = state.api;
#define LLMC_BIND(member, name) \
  bindSymbol(library, a.member, LLMC_SYMBOL(name), missing)
  LLMC_BIND(init, cuInit);
  LLMC_BIND(driverGetVersion, cuDriverGetVersion);
  LLMC_BIND(getErrorName, cuGetErrorName);
  LLMC_BIND(getErrorString, cuGetErrorString);
  LLMC_BIND(deviceGetCount, cuDeviceGetCount);
  LLMC_BIND(deviceGet, cuDeviceGet);
  LLMC_BIND(deviceGetName, cuDeviceGetName);
  LLMC_BIND(deviceGetAttribute, cuDeviceGetAttribute);
  LLMC_BIND(deviceTotalMem, cuDeviceTotalMem);
  LLMC_BIND(devicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  LLMC_BIND(devicePrimaryCtxRelease, cuDevicePrimaryCtxRelease);
  LLMC_BIND(ctxSetCurrent, cuCtxSetCurrent);
  LLMC_BIND(ctxSynchronize, cuCtxSynchronize);
  LLMC_BIND(memGetInfo, cuMemGetInfo);
  LLMC_BIND(memAlloc, cuMemAlloc);
  LLMC_BIND(memFree, cuMemFree);
  LLMC_BIND(memAllocHost, cuMemAllocHost);
  LLMC_BIND(memFreeHost, cuMemFreeHost);
  LLMC_BIND(memcpyHtoDAsync, cuMemcpyHtoDAsync);
  LLMC_BIND(memcpyDtoHAsync, cuMemcpyDtoHAsync);
  LLMC_BIND(memcpyDtoDAsync, cuMemcpyDtoDAsync);
  LLMC_BIND(memsetD8Async, cuMemsetD8Async);
  LLMC_BIND(moduleLoadData, cuModuleLoadData);
  LLMC_BIND(moduleUnload, cuModuleUnload);
  LLMC_BIND(moduleGetFunction, cuModuleGetFunction);
  LLMC_BIND(funcSetAttribute, cuFuncSetAttribute);
  LLMC_BIND(launchKernel, cuLaunchKernel);
  LLMC_BIND(streamCreate, cuStreamCreate);
  LLMC_BIND(streamDestroy, cuStreamDestroy);
  LLMC_BIND(streamSynchronize, cuStreamSynchronize);
  LLMC_BIND(streamBeginCapture, cuStreamBeginCapture);
  LLMC_BIND(streamEndCapture, cuStreamEndCapture);
  LLMC_BIND(graphInstantiate, cuGraphInstantiate);
  LLMC_BIND(graphLaunch, cuGraphLaunch);
  LLMC_BIND(graphDestroy, cuGraphDestroy);
  LLMC_BIND(graphExecDestroy, cuGraphExecDestroy);
  LLMC_BIND(eventCreate, cuEventCreate);
  LLMC_BIND(eventDestroy, cuEventDestroy);
  LLMC_BIND(eventRecord, cuEventRecord);
  LLMC_BIND(eventSynchronize, cuEventSynchronize);
  LLMC_BIND(eventElapsedTime, cuEventElapsedTime);
  LLMC_BIND(eventQuery, cuEventQuery);
  LLMC_BIND(streamWaitEvent, cuStreamWaitEvent);
#undef LLMC_BIND
  if (!missing.empty()) {
    state.error = "the CUDA driver (libcuda.so.1) lacks " + missing +
                  ": it is older than CUDA 13 needs; update the NVIDIA driver";
    return state;
  }
  CUresult result = a.init(0);
  if (result != CUDA_SUCCESS) {
    const char *name = nullptr;
    a.getErrorName(result, &name);
    state.error = std::string("cuInit failed: ") + (name ? name : "?") +
                  " (the CUDA driver is installed but no usable GPU was "
                  "found)";
  }
  return state;
}

struct CublasState {
  CublasLtApi api{};
  std::string error;
};

CublasState loadCublasOnce() {
  CublasState state;
  std::string tried;
  // The loader's search path first, then the toolkit this llmc was built
  // against (its lib64 is often not on the search path).
  std::vector<std::string> names = {"libcublasLt.so.13", "libcublasLt.so"};
#ifdef LLMC_CUDA_LIBRARY_DIR
  names.push_back(std::string(LLMC_CUDA_LIBRARY_DIR) + "/libcublasLt.so.13");
#endif
  names.push_back("/usr/local/cuda/lib64/libcublasLt.so.13");
  void *library = openFirstLibrary(names, tried);
  if (!library) {
    state.error = "cuBLASLt (libcublasLt.so.13) not found; install the CUDA "
                  "13 toolkit's cuBLAS or add its lib64 directory to "
                  "LD_LIBRARY_PATH; tried:" +
                  tried;
    return state;
  }
  std::string missing;
  CublasLtApi &a = state.api;
#define LLMC_BIND(member, name) bindSymbol(library, a.member, #name, missing)
  LLMC_BIND(create, cublasLtCreate);
  LLMC_BIND(destroy, cublasLtDestroy);
  LLMC_BIND(getVersion, cublasLtGetVersion);
  LLMC_BIND(getStatusString, cublasLtGetStatusString);
  LLMC_BIND(matmulDescCreate, cublasLtMatmulDescCreate);
  LLMC_BIND(matmulDescDestroy, cublasLtMatmulDescDestroy);
  LLMC_BIND(matmulDescSetAttribute, cublasLtMatmulDescSetAttribute);
  LLMC_BIND(matrixLayoutCreate, cublasLtMatrixLayoutCreate);
  LLMC_BIND(matrixLayoutDestroy, cublasLtMatrixLayoutDestroy);
  LLMC_BIND(matrixLayoutSetAttribute, cublasLtMatrixLayoutSetAttribute);
  LLMC_BIND(matmulPreferenceCreate, cublasLtMatmulPreferenceCreate);
  LLMC_BIND(matmulPreferenceDestroy, cublasLtMatmulPreferenceDestroy);
  LLMC_BIND(matmulPreferenceSetAttribute, cublasLtMatmulPreferenceSetAttribute);
  LLMC_BIND(matmulAlgoGetHeuristic, cublasLtMatmulAlgoGetHeuristic);
  LLMC_BIND(matmul, cublasLtMatmul);
#undef LLMC_BIND
  if (!missing.empty())
    state.error = "cuBLASLt lacks " + missing + "; it is older than CUDA 13";
  return state;
}

} // namespace

llvm::Expected<const DriverApi *> llmc::cuda::loadDriver() {
  static const DriverState state = loadDriverOnce();
  if (!state.error.empty())
    return llvm::createStringError(state.error);
  return &state.api;
}

llvm::Expected<const CublasLtApi *> llmc::cuda::loadCublasLt() {
  static const CublasState state = loadCublasOnce();
  if (!state.error.empty())
    return llvm::createStringError(state.error);
  return &state.api;
}

llvm::Error llmc::cuda::checkDriver(const DriverApi &api, CUresult result,
                                    const char *what) {
  if (result == CUDA_SUCCESS)
    return llvm::Error::success();
  const char *name = nullptr, *text = nullptr;
  api.getErrorName(result, &name);
  api.getErrorString(result, &text);
  return llvm::createStringError(std::string(what) + " failed: " +
                                 (name ? name : "unknown error") + " (" +
                                 (text ? text : "?") + ")");
}

llvm::Error llmc::cuda::checkCublas(const CublasLtApi &api,
                                    cublasStatus_t status, const char *what) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return llvm::Error::success();
  return llvm::createStringError(std::string(what) + " failed: " +
                                 api.getStatusString(status));
}
