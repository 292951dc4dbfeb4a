// Device memory the CUDA executors share: the persistent store of named
// device tensors (parameters, gradients, optimizer state) with its uploads
// and downloads, and entering a device's primary context. An executor's
// own buffers (arena, inputs) are allocated in CudaExecutor.cpp.
#ifndef LLMC_RUNTIME_CUDA_CUDADEVICESTORE_H
#define LLMC_RUNTIME_CUDA_CUDADEVICESTORE_H

#include "ir/kernel/KernelIR.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Weights/Weights.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llmc::cuda {

/// Retains device `index`'s primary context and makes it current.
llvm::Expected<CUcontext> enterContext(const DriverApi &cu, int index,
                                       CUdevice *deviceOut = nullptr);

} // namespace llmc::cuda

namespace llmc::runtime {

/// Named device tensors (parameters, gradients, optimizer state) shared by
/// the executors of one training run; the device analogue of
/// PersistentStore. A tensor is created zero-filled by its first bind and
/// keeps its address until the store goes (executors hold it by
/// shared_ptr). Create it with CudaPersistentStore::create on the device the
/// executors use.
class CudaPersistentStore : public TensorStore {
public:
  /// On CUDA device `device` (its primary context; executors of the store
  /// must use the same device).
  static llvm::Expected<std::shared_ptr<CudaPersistentStore>>
  create(int device = 0);
  ~CudaPersistentStore() override;
  CudaPersistentStore(const CudaPersistentStore &) = delete;
  CudaPersistentStore &operator=(const CudaPersistentStore &) = delete;

  /// The device address of tensor `name`, created if new with every
  /// element `initialValue` (zeros by default); an existing tensor with
  /// another dtype or shape is an error naming both.
  llvm::Expected<uint64_t> bind(llvm::StringRef name, kir::DType dtype,
                                llvm::ArrayRef<int64_t> shape,
                                double initialValue = 0.0);
  bool contains(llvm::StringRef name) const override;
  std::vector<std::string> names() const override;
  llvm::Expected<HostTensor> get(llvm::StringRef name) const override;
  llvm::Expected<int64_t> bytes(llvm::StringRef name) const override;
  llvm::Error set(llvm::StringRef name, const HostTensor &tensor) override;

private:
  CudaPersistentStore() = default;
  struct Entry {
    kir::DType dtype;
    std::vector<int64_t> shape;
    uint64_t address = 0;
    int64_t bytes = 0;
  };
  mutable std::mutex mutex;
  std::map<std::string, Entry, std::less<>> entries;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CUDA_CUDADEVICESTORE_H
