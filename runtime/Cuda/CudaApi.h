// The CUDA driver API and cuBLASLt, loaded at run time with dlopen: tables of
// function pointers filled by dlsym. Nothing here links against CUDA, so a
// binary that includes it runs on machines without a GPU; there the loaders
// return an error that says what is missing. The toolkit headers give the
// types, enums and the versioned symbol names (cuda.h maps cuMemAlloc to
// cuMemAlloc_v2, and so on), never code.
#ifndef LLMC_RUNTIME_CUDA_CUDAAPI_H
#define LLMC_RUNTIME_CUDA_CUDAAPI_H

#include <cublasLt.h>
#include <cuda.h>

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace llmc::cuda {

/// The driver API functions llmc uses; each member has the type of the
/// function it is named after.
struct DriverApi {
  decltype(&::cuInit) init;
  decltype(&::cuDriverGetVersion) driverGetVersion;
  decltype(&::cuGetErrorName) getErrorName;
  decltype(&::cuGetErrorString) getErrorString;
  decltype(&::cuDeviceGetCount) deviceGetCount;
  decltype(&::cuDeviceGet) deviceGet;
  decltype(&::cuDeviceGetName) deviceGetName;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute;
  decltype(&::cuDeviceTotalMem) deviceTotalMem;
  decltype(&::cuDevicePrimaryCtxRetain) devicePrimaryCtxRetain;
  decltype(&::cuDevicePrimaryCtxRelease) devicePrimaryCtxRelease;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent;
  decltype(&::cuCtxSynchronize) ctxSynchronize;
  decltype(&::cuMemGetInfo) memGetInfo;
  decltype(&::cuMemAlloc) memAlloc;
  decltype(&::cuMemFree) memFree;
  decltype(&::cuMemAllocHost) memAllocHost;
  decltype(&::cuMemFreeHost) memFreeHost;
  decltype(&::cuMemcpyHtoDAsync) memcpyHtoDAsync;
  decltype(&::cuMemcpyDtoHAsync) memcpyDtoHAsync;
  decltype(&::cuMemcpyDtoDAsync) memcpyDtoDAsync;
  decltype(&::cuMemsetD8Async) memsetD8Async;
  decltype(&::cuModuleLoadData) moduleLoadData;
  decltype(&::cuModuleUnload) moduleUnload;
  decltype(&::cuModuleGetFunction) moduleGetFunction;
  decltype(&::cuFuncSetAttribute) funcSetAttribute;
  decltype(&::cuLaunchKernel) launchKernel;
  decltype(&::cuStreamCreate) streamCreate;
  decltype(&::cuStreamDestroy) streamDestroy;
  decltype(&::cuStreamSynchronize) streamSynchronize;
  decltype(&::cuStreamBeginCapture) streamBeginCapture;
  decltype(&::cuStreamEndCapture) streamEndCapture;
  decltype(&::cuGraphInstantiate) graphInstantiate;
  decltype(&::cuGraphLaunch) graphLaunch;
  decltype(&::cuGraphDestroy) graphDestroy;
  decltype(&::cuGraphExecDestroy) graphExecDestroy;
  decltype(&::cuEventCreate) eventCreate;
  decltype(&::cuEventDestroy) eventDestroy;
  decltype(&::cuEventRecord) eventRecord;
  decltype(&::cuEventSynchronize) eventSynchronize;
  decltype(&::cuEventElapsedTime) eventElapsedTime;
  decltype(&::cuEventQuery) eventQuery;
  decltype(&::cuStreamWaitEvent) streamWaitEvent;
};

/// The cuBLASLt functions llmc uses.
struct CublasLtApi {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtDestroy) destroy;
  decltype(&::cublasLtGetVersion) getVersion;
  decltype(&::cublasLtGetStatusString) getStatusString;
  decltype(&::cublasLtMatmulDescCreate) matmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) matmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) matmulDescSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) matrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) matrixLayoutDestroy;
  decltype(&::cublasLtMatrixLayoutSetAttribute) matrixLayoutSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) matmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) matmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute)
      matmulPreferenceSetAttribute;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) matmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmul) matmul;
};

/// dlopen()s the first of `names` that loads (RTLD_NOW | RTLD_LOCAL); null
/// when none does, with `tried` listing each failure on its own line. The
/// loaders of libcuda, cuBLASLt and NCCL share it.
void *openFirstLibrary(const std::vector<std::string> &names,
                       std::string &tried);

/// dlsym(library, symbol); null when missing, and then `missing` names the
/// first symbol missing so far.
void *lookupSymbol(void *library, const char *symbol, std::string &missing);

/// lookupSymbol into a typed slot of an API table.
template <typename Fn>
void bindSymbol(void *library, Fn &slot, const char *symbol,
                std::string &missing) {
  slot = reinterpret_cast<Fn>(lookupSymbol(library, symbol, missing));
}

/// Loads libcuda.so.1 once per process and calls cuInit(0). The error says
/// "no CUDA driver (libcuda.so.1) on this machine" when the library is
/// absent, and names the missing symbol or cuInit's error otherwise. Later
/// calls return the same table (or the same error).
llvm::Expected<const DriverApi *> loadDriver();

/// Loads libcublasLt.so.13 (or libcublasLt.so) once per process.
llvm::Expected<const CublasLtApi *> loadCublasLt();

/// "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or
/// success for CUDA_SUCCESS.
llvm::Error checkDriver(const DriverApi &api, CUresult result,
                        const char *what);
llvm::Error checkCublas(const CublasLtApi &api, cublasStatus_t status,
                        const char *what);

} // namespace llmc::cuda

#endif // LLMC_RUNTIME_CUDA_CUDAAPI_H
