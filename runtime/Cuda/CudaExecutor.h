// Runs a kir::Program on an NVIDIA GPU: the one arena from the program's
// memory plan in device memory, parameters and state in a device store
// shared with other executors, kernel steps from the modules codegen
// compiles for it (a compile callback, ir/kernel/CudaModule.h; callers pass
// codegen/KernelToCuda/CudaCompiler.h's cudaCompiler()), GEMMs through
// cuBLASLt, attention and its gradient through flash attention kernels,
// embedding gradients by a deterministic per-channel scatter-add. After the
// first successful run the schedule is captured into a CUDA graph and
// replayed. The driver and cuBLASLt are loaded at run time (CudaApi.h): on
// a machine without them create() fails with an error that says so.
//
// Semantics match runtime/Cpu/CpuExecutor.h (CpuExecutor) step by step; GEMMs run
// in exact f32 (CUBLAS_COMPUTE_32F, no TF32) unless the options allow TF32,
// on f32 or f16/bf16 operands (CUDA_R_16F / CUDA_R_16BF A and B, C of the
// buffer's type: a narrow C is rounded by cuBLASLt, an f32 C accumulates);
// attention runs the flash kernels of the tensors' type (f32 accumulation).
#ifndef LLMC_RUNTIME_CUDA_CUDAEXECUTOR_H
#define LLMC_RUNTIME_CUDA_CUDAEXECUTOR_H

#include "ir/kernel/CudaModule.h"
#include "ir/kernel/Program.h"
#include "runtime/Cuda/CudaDeviceStore.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Weights/Weights.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace llmc::runtime {

struct CudaExecutorOptions {
  int device = 0;
  /// Capture the schedule into a CUDA graph after the first run and replay
  /// it (not while profiling: per-step events need eager launches).
  bool useGraphs = true;
  /// Let cuBLASLt use TF32 tensor cores for f32 GEMMs (faster, ~1e-3
  /// relative error; off by default so results match the CPU executor).
  bool allowTf32 = false;
  /// Run GEMM epilogue kernels that cuBLASLt can compute itself (bias,
  /// GELU + bias, GELU, the GELU gradient: kir::GemmStep::epilogueKind)
  /// inside the cuBLASLt call; off: every epilogue runs as its own kernel
  /// (to compare the two).
  bool fuseEpilogues = true;
  /// Shared parameters and state; null: a store of the executor's own.
  std::shared_ptr<CudaPersistentStore> store;
  /// Enqueue on this executor's stream instead of one of its own (it must
  /// outlive the new one): the grad and update programs of a training step
  /// then run back to back, ordered by the stream, with no host wait
  /// between them (enqueue()).
  const class CudaExecutor *shareStreamOf = nullptr;
};

/// Device time per kind of step and per kernel, accumulated while
/// profiling (CUDA events around each step).
struct CudaStepProfile {
  double kernelSeconds = 0, gemmSeconds = 0, attentionSeconds = 0;
  double attentionGradSeconds = 0, embeddingGradSeconds = 0;
  int64_t runs = 0;
  struct Entry {
    double seconds = 0;
    int64_t launches = 0;
  };
  /// Per kernel name ("gemm m x n x k" for GEMMs, flash kernels by name).
  std::map<std::string, Entry> perKernel;
};

/// What creation compiled or loaded, for people.
struct CudaExecutorInfo {
  std::string deviceName;
  int computeCapability = 0; // major*10+minor
  int64_t deviceMemoryBytes = 0;
  bool kernelsPrecompiled = false;
  cuda::NvrtcStats kernelStats, libraryStats; // NVRTC: emitted, attention
  std::string kernelImage;                    // "sm_90 cubin" or "PTX ..."
  // GEMM epilogue kernels cuBLASLt runs instead (kir::EpilogueKind).
  int fusedBiasEpilogues = 0;  // Bias
  int fusedGeluEpilogues = 0;  // GeluBias and Gelu
  int fusedDGeluEpilogues = 0; // DGelu
  // Multi-tensor launches (cuda::CudaKernelBatch) and the kernel steps
  // they run.
  int multiTensorLaunches = 0;
  int multiTensorSteps = 0;
};

class CudaExecutor : public Executor {
public:
  /// Fails with "no CUDA driver (libcuda.so.1) on this machine ..." where
  /// there is no driver, before it needs cuBLASLt or calls `compile`.
  /// `compile` gives the modules to load (codegen's cudaCompiler(): NVRTC,
  /// or an artifact's binaries); the runtime compiles nothing itself.
  static llvm::Expected<std::unique_ptr<CudaExecutor>>
  create(kir::Program program, const cuda::CudaCompileFn &compile,
         CudaExecutorOptions options = {});
  ~CudaExecutor();

  const kir::Program &program() const override { return prog; }
  const CudaExecutorInfo &info() const { return creationInfo; }
  const std::shared_ptr<CudaPersistentStore> &store() const {
    return persistent;
  }

  /// Copies a parameter, state or input in (inputs into their fixed device
  /// buffer, which graph replays read). Name, shape and dtype must match.
  llvm::Error setTensor(llvm::StringRef name, const HostTensor &tensor) override;
  void setRng(uint64_t seed, uint64_t step) override;

  /// Runs the schedule once and waits for it. Fails (before running
  /// anything) if an input id lies outside the table it indexes.
  /// The communicators of collective steps take device buffers (NCCL).
  /// A start waits for the stream's work, then issues the collective on
  /// the communicator's stream; its wait blocks until it is done, and the
  /// steps between run meanwhile. A program with collectives is not
  /// replayed as a CUDA graph.
  llvm::Error setMesh(const Mesh &mesh) override;
  llvm::Error run() override;

  /// The schedule on the stream without waiting for it (a training step
  /// with no host synchronization inside): a graph launch once one is
  /// captured, else an eager run that is then captured (programs with
  /// collectives are refused: their steps wait on the host). Errors of
  /// the work itself surface at the next wait (a read-back, output()).
  /// lastRunMilliseconds() is not updated; CudaStepReadback times steps.
  llvm::Error enqueue();
  /// An input for the next enqueue(), copied through pinned host memory
  /// (two generations of slots, runtime/Cuda/StepSlots.h) without waiting
  /// for the device; checked as setTensor checks.
  llvm::Error setInputAsync(llvm::StringRef name, const HostTensor &tensor);
  /// The stream the executor enqueues on (a CUstream), for people who
  /// order other work after it.
  void *streamHandle() const;
  void describeMemory(MemoryLedger &ledger,
                      llvm::StringRef label) const override;

  /// An output, parameter, state or input, as stored.
  llvm::Expected<HostTensor> output(llvm::StringRef name) const override;

  void setProfiling(bool enabled) { profiling = enabled; }
  const CudaStepProfile &profile() const { return stepProfile; }
  /// Device milliseconds of the last run (CUDA events around the whole
  /// schedule, graph or eager).
  double lastRunMilliseconds() const { return lastRunMs; }
  bool replaysGraph() const { return graphExec != nullptr; }

  struct Impl; // the CUDA-typed state (CudaLaunch.h)

private:
  friend class CudaStepReadback;
  /// Captures the schedule into graphExec (not run).
  llvm::Error captureGraph();
  CudaExecutor(kir::Program program);
  /// Loads `modules` and plans what each kernel and step launches
  /// (CudaLaunch.cpp).
  llvm::Error planLaunches(const cuda::CudaModules &modules,
                           const CudaExecutorOptions &options);
  /// Launches every step in order on the stream (CudaLaunch.cpp).
  llvm::Error enqueueSchedule(bool timed);
  llvm::Error checkIds() const;

  kir::Program prog;
  std::unique_ptr<Impl> impl;
  std::shared_ptr<CudaPersistentStore> persistent;
  CudaExecutorInfo creationInfo;
  std::vector<uint64_t> bases;                // per buffer: device address
  Mesh mesh;                                  // collectives' communicators
  std::vector<comm::Ticket> tickets;          // per CollectiveStart step
  std::map<int32_t, HostTensor> hostInputs;   // input buffer -> last value
  void *graphExec = nullptr;                  // CUgraphExec
  bool useGraphs = true;
  bool profiling = false;
  bool ranOnce = false;
  int64_t enqueued = 0; // enqueue() calls: the staging generation
  double lastRunMs = 0;
  CudaStepProfile stepProfile;
};

/// A training step's scalars (f32 outputs of executors that share one
/// stream: the loss, the grad norm) copied to pinned host memory after the
/// step and read when the host gets to them, so the trainer never waits
/// inside a step: per step beginStep(), the executors' enqueue()s, push();
/// pop() returns the oldest step's values once its copies have landed
/// (ReadbackSlots: at most `depth` steps in flight), with the device time
/// from beginStep to push (CUDA events).
class CudaStepReadback {
public:
  struct Value {
    const CudaExecutor *executor;
    std::string output;
  };
  static llvm::Expected<std::unique_ptr<CudaStepReadback>>
  create(std::vector<Value> values, int depth = 2);
  ~CudaStepReadback();

  /// Marks where step `step`'s device work starts (an event).
  llvm::Error beginStep(int64_t step);
  /// Enqueues the copies of step `step`'s values after its work.
  llvm::Error push(int64_t step);
  struct Landed {
    int64_t step;
    std::vector<float> values; // in create()'s order
    double deviceMilliseconds; // beginStep to push
  };
  llvm::Expected<Landed> pop();
  size_t inFlight() const;

  struct State; // CUDA-typed (CudaExecutor.cpp)

private:
  CudaStepReadback() = default;
  std::unique_ptr<State> state;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CUDA_CUDAEXECUTOR_H
