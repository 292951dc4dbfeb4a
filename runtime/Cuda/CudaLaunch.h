// CudaExecutor::Impl: the CUDA executor's device state and step launch plans.
#ifndef LLMC_RUNTIME_CUDA_CUDALAUNCH_H
#define LLMC_RUNTIME_CUDA_CUDALAUNCH_H

#include "ir/kernel/CudaModule.h"
#include "ir/kernel/Program.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaExecutor.h"
#include "runtime/Cuda/StepSlots.h"

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
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

  /// A multi-tensor launch (cuda::CudaKernelBatch): its table is device
  /// memory written once, at planning (the addresses never change). A Sum
  /// batch launches `total` after `function`, both with the partial sums
  /// (an elementwise kernel takes three arguments and ignores the fourth).
  struct BatchPlan {
    CUfunction function = nullptr, total = nullptr;
    cuda::CudaLaunch launch, totalLaunch;
    CUdeviceptr table = 0, partials = 0;
    long long members = 0, chunks = 0;
    void *params[4] = {&table, &members, &chunks, &partials};
    std::string name;
    std::vector<int64_t> hostTable; // the bytes copied in, until they land

    BatchPlan() = default;
    BatchPlan(const BatchPlan &) = delete; // params point into it
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
  // Multi-tensor launches; per step the batch it launches, kNoBatch, or
  // kInBatch (a later member of a batch launched before it).
  static constexpr int32_t kNoBatch = -1, kInBatch = -2;
  std::vector<std::unique_ptr<BatchPlan>> batches;
  std::vector<int32_t> stepBatch;
  std::vector<CUevent> stepEvents;             // 2 per step, when profiling
  bool ownsStream = true; // false: CudaExecutorOptions::shareStreamOf's
  // setInputAsync: pinned slots of every input's bytes, two generations,
  // each fenced by an event recorded after the enqueue that read it.
  char *staging = nullptr;
  std::vector<size_t> stagingOffset; // per program input binding
  size_t stagingBytes = 0;           // one slot
  CUevent stagingFences[2] = {nullptr, nullptr};
  std::unique_ptr<StagingSlots> stagingSlots;
  bool stagedThisGeneration = false;
  CUevent runStart = nullptr, runEnd = nullptr;

  ~Impl();
  llvm::Error launch(CUfunction function, const cuda::CudaLaunch &launch,
                     void **params);
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CUDA_CUDALAUNCH_H
