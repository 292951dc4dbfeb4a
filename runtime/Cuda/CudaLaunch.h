// CudaExecutor::Impl: the CUDA executor's device state and step launch plans.
#ifndef LLMC_RUNTIME_CUDA_CUDALAUNCH_H
#define LLMC_RUNTIME_CUDA_CUDALAUNCH_H

#include "ir/kernel/CudaModule.h"
#include "ir/kernel/Program.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaExecutor.h"

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::runtime {

// cuBLASLt's scratch space; 32 MiB is what NVIDIA recommends for Hopper.
inline constexpr size_t kGemmWorkspaceBytes = 32 << 20;

/// Private to the executor's sources: CudaExecutor.cpp creates and releases
/// it, CudaLaunch.cpp fills the plans and launches them.
struct CudaExecutor::Impl {
  struct GemmPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t layoutA = nullptr, layoutB = nullptr,
                           layoutC = nullptr;
    cublasLtMatmulAlgo_t algo{};
    CUdeviceptr a = 0, b = 0, c = 0; // cuBLASLt's A (our B), B (our A), C
    // The epilogue kernel cuBLASLt runs (None: the kernel runs after it).
    kir::EpilogueKind fused = kir::EpilogueKind::None;
    std::string name;
  };

  struct KernelPlan {
    CUfunction function = nullptr;
    cuda::CudaLaunch launch;
    std::vector<CUdeviceptr> operands;
    std::vector<void *> params; // &operands[i]
  };

  struct AttentionPlan {
    CUfunction forward = nullptr, dkdv = nullptr, dq = nullptr;
    cuda::CudaLaunch forwardLaunch, dkdvLaunch, dqLaunch;
    cuda::AttentionForwardArgs forwardArgs;
    cuda::AttentionBackwardArgs backwardArgs;
    std::string forwardName, dkdvName, dqName;
  };

  struct EmbeddingPlan {
    CUfunction zero = nullptr, scatter = nullptr;
    cuda::CudaLaunch zeroLaunch, scatterLaunch;
    // The arguments of both kernels, in order; pointers to them below.
    CUdeviceptr ids = 0, grad = 0, out = 0;
    long long idsOffset, idsStride, gradOffset, gradPosStride, gradColStride,
        outOffset, outRowStride, outColStride, positions, rows, channels;
  };

  const cuda::DriverApi *cu = nullptr;
  const cuda::CublasLtApi *lt = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr arena = 0, workspace = 0;
  std::vector<CUdeviceptr> owned; // inputs
  CUmodule kernelModule = nullptr, libraryModule = nullptr;
  cublasLtHandle_t ltHandle = nullptr;
  bool allowTf32 = false;

  std::vector<KernelPlan> kernels;             // per program kernel
  std::vector<GemmPlan> gemms;                 // per GEMM step, in order
  std::vector<AttentionPlan> attentions;       // per attention (grad) step
  std::vector<EmbeddingPlan> embeddings;       // per embedding-grad step
  std::vector<int32_t> stepPlan;               // step -> index in its list
  std::vector<CUevent> stepEvents;             // 2 per step, when profiling
  CUevent runStart = nullptr, runEnd = nullptr;

  ~Impl();
  llvm::Error launch(CUfunction function, const cuda::CudaLaunch &launch,
                     void **params);
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CUDA_CUDALAUNCH_H
