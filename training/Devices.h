// Where a session's steps run: the device (the CPU, or this rank's GPU),
// its persistent store, and the executors made for it from programs.
#ifndef LLMC_TRAINING_DEVICES_H
#define LLMC_TRAINING_DEVICES_H

#include "frontend/TrainConfig.h"
#include "ir/kernel/Program.h"
#include "runtime/Comm/Mesh.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Exec/MemoryBudget.h"
#include "runtime/Exec/MemoryReport.h"
#include "runtime/Exec/PersistentStore.h"
#include "training/StartupTimings.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>

namespace llmc::runtime {
class CudaPersistentStore;
} // namespace llmc::runtime

namespace llmc::training {

using mlir::llmc::TrainingConfig;

/// Where the steps run: the persistent tensors of the run and executors
/// bound to them, on the CPU or on a CUDA GPU.
struct Device {
  std::shared_ptr<runtime::TensorStore> store;
  std::shared_ptr<runtime::PersistentStore> hostStore;
  /// Set on a GPU (an llmc built with the CUDA toolkit); null on the CPU.
  std::shared_ptr<runtime::CudaPersistentStore> cudaStore;
  int threads = 0;
  int cudaDevice = 0; // --device cuda: the GPU of this rank
  /// Where progress lines go: stdout on rank 0, nowhere on the others.
  llvm::raw_ostream *log = &llvm::outs();
  /// The communicators of the mesh axes the programs' collectives use.
  runtime::Mesh mesh;
  /// Where the resident set stood after each phase of the setup.
  runtime::MemoryPhases *phases = nullptr;
  /// The start-up clock (--timings).
  StartupTimings *timings = nullptr;
};

/// Opens the config's device (`device: cpu` or `cuda`; a rank takes the
/// GPU of its local rank modulo the machine's GPUs).
llvm::Expected<Device> openDevice(const TrainingConfig &config);

/// The memory left where the run's tensors go: the GPU's free memory, or
/// the host's; nullopt when it cannot be told.
std::optional<runtime::AvailableMemory> availableMemory(const Device &device);

/// Creates an executor bound to the device's store, compiling its kernels
/// or loading them from the kernel cache (JIT on the CPU, NVRTC on a GPU).
/// `what` names it in the progress line and the timings.
llvm::Expected<std::unique_ptr<runtime::Executor>>
makeExecutor(kir::Program program, const Device &device, llvm::StringRef what);

} // namespace llmc::training

#endif // LLMC_TRAINING_DEVICES_H
