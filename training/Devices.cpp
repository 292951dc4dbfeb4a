// Opening the device of a session and making executors on it.
#include "training/Devices.h"

#include "codegen/KernelToCpu/KernelToCpu.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Exec/CpuBudget.h"
#ifdef LLMC_HAVE_NVRTC
#include "codegen/KernelToCuda/CudaCompiler.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaExecutor.h"
#endif

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <chrono>
#include <cstdlib>
#include <thread>

using namespace llmc;
using namespace llmc::training;

namespace {
/// This process's index among the ranks on its machine, as launchers tell
/// it (Open MPI, Slurm, MPICH, torchrun); 0 without one.
int localRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                           "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name)) {
      int rank = 0;
      if (!llvm::StringRef(value).getAsInteger(10, rank) && rank >= 0)
        return rank;
    }
  return 0;
}

} // namespace

llvm::Expected<Device> training::openDevice(const TrainingConfig &config) {
  Device device;
  device.threads = int(config.threads);
  if (config.device == "cpu") {
    device.hostStore = std::make_shared<runtime::PersistentStore>();
    device.store = device.hostStore;
    return device;
  }
#ifdef LLMC_HAVE_NVRTC
  // One GPU per rank of a machine: local rank r takes device r mod count.
  llvm::Expected<const cuda::DriverApi *> driver = cuda::loadDriver();
  if (!driver)
    return driver.takeError();
  int count = 0;
  if ((*driver)->init(0) == CUDA_SUCCESS)
    (*driver)->deviceGetCount(&count);
  device.cudaDevice = count > 0 ? localRank() % count : 0;
  auto store = runtime::CudaPersistentStore::create(device.cudaDevice);
  if (!store)
    return store.takeError();
  device.cudaStore = *store;
  device.store = *store;
  return device;
#else
  return llvm::createStringError(
      "device: cuda: this llmc was built without the CUDA toolkit");
#endif
}

/// The memory left where the run's tensors go: the GPU's free memory, or
/// the host's; nullopt when it cannot be told.
std::optional<runtime::AvailableMemory>
training::availableMemory(const Device &device) {
#ifdef LLMC_HAVE_NVRTC
  if (device.cudaStore) {
    llvm::Expected<const cuda::DriverApi *> driver = cuda::loadDriver();
    if (!driver) {
      llvm::consumeError(driver.takeError());
      return std::nullopt;
    }
    size_t free = 0, total = 0;
    if ((*driver)->memGetInfo(&free, &total) != CUDA_SUCCESS)
      return std::nullopt;
    return runtime::AvailableMemory{
        int64_t(free),
        llvm::formatv("the free memory of GPU {0}", device.cudaDevice).str()};
  }
#endif
  return runtime::availableHostMemory();
}

/// Creates an executor bound to the device's store, compiling its kernels
/// or loading them from the kernel cache (JIT on the CPU, NVRTC on a GPU).
llvm::Expected<std::unique_ptr<runtime::Executor>>
training::makeExecutor(kir::Program program, const Device &device,
                       llvm::StringRef what) {
#ifdef LLMC_HAVE_NVRTC
  if (device.cudaStore) {
    runtime::CudaExecutorOptions options;
    options.store = device.cudaStore;
    options.device = device.cudaDevice;
    size_t numKernels = program.kernels.size();
    auto start = std::chrono::steady_clock::now();
    auto executor = runtime::CudaExecutor::create(
        std::move(program), cuda::cudaCompiler(), options);
    if (!executor)
      return executor.takeError();
    if (llvm::Error err = (*executor)->setMesh(device.mesh))
      return err;
    if (device.phases)
      device.phases->end((what + ": kernels and buffers").str());
    *device.log << llvm::format(
        "llmc run: %-24s %3zu kernels for the GPU (%.2f s)\n",
        what.str().c_str(), numKernels,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
    return std::unique_ptr<runtime::Executor>(std::move(*executor));
  }
#endif
  int threads = device.threads;
  std::shared_ptr<runtime::PersistentStore> store = device.hostStore;
  std::vector<kir::Kernel> kernels = program.kernels;
  cpu::CacheStats stats;
  // A cache miss compiles the kernels on every core the run uses, in runs
  // of consecutive kernels linked as one (a bundle of objects).
  int parts = threads > 0
                  ? threads
                  : runtime::defaultThreadCount();
  auto compile = [&]() -> llvm::Expected<llvm::SmallVector<char, 0>> {
    auto objects = cpu::compileKernelsToObjects(kernels, parts);
    if (!objects)
      return objects.takeError();
    return cpu::bundleObjects(*objects);
  };
  auto executor = runtime::createCpuExecutor(
      std::move(program), compile, threads, &stats, {}, std::move(store));
  if (!executor)
    return executor.takeError();
  if (llvm::Error err = (*executor)->setMesh(device.mesh))
    return err;
  if (device.phases)
    device.phases->end((what + ": kernels and buffers").str());
  if (device.timings)
    device.timings->end(
        (what + (stats.hit ? ": kernel cache" : ": JIT") + ", buffers").str());
  *device.log << llvm::format(
      "llmc run: %-24s %3zu kernels %s (%.2f s)\n", what.str().c_str(),
      kernels.size(), stats.hit ? "from the kernel cache" : "JIT-compiled",
      stats.hit ? stats.loadSeconds : stats.compileSeconds + stats.loadSeconds);
  if (!stats.warning.empty())
    llvm::errs() << "llmc run: warning: " << stats.warning << "\n";
  return std::unique_ptr<runtime::Executor>(std::move(*executor));
}
