// The persistent tensors of a training run: parameters, accumulated
// gradients and optimizer state, in host memory, shared by every program
// (forward, grad step, update step, programs for other sequence lengths)
// that binds them by name.
#ifndef LLMC_RUNTIME_PERSISTENTSTORE_H
#define LLMC_RUNTIME_PERSISTENTSTORE_H

#include "runtime/Backend.h"
#include "runtime/Weights.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace llmc::runtime {

/// Named host tensors, each one 64-byte-aligned allocation (kArenaAlignment)
/// created zero-filled by its first bind and kept until the store goes.
/// Addresses never change, so executors keep raw pointers into it; the
/// store must outlive them (they hold it by shared_ptr).
class PersistentStore : public TensorStore {
public:
  PersistentStore() = default;
  ~PersistentStore() override;
  PersistentStore(const PersistentStore &) = delete;
  PersistentStore &operator=(const PersistentStore &) = delete;

  /// The memory of tensor `name`, created as zeros of `dtype` and `shape` if
  /// the store has no such tensor. A tensor that exists with another dtype
  /// or shape is an error naming both.
  llvm::Expected<char *> bind(llvm::StringRef name, kir::DType dtype,
                              llvm::ArrayRef<int64_t> shape);

  bool contains(llvm::StringRef name) const override;
  /// The names, sorted.
  std::vector<std::string> names() const override;
  /// A copy of tensor `name`; an error if there is none.
  llvm::Expected<HostTensor> get(llvm::StringRef name) const override;
  /// Copies `tensor` into `name` (binding it first, so dtype and shape must
  /// agree with an existing tensor).
  llvm::Error set(llvm::StringRef name, const HostTensor &tensor) override;

private:
  struct Entry {
    kir::DType dtype;
    std::vector<int64_t> shape;
    char *data = nullptr;
    int64_t bytes = 0;
  };
  mutable std::mutex mutex;
  std::map<std::string, Entry, std::less<>> entries;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_PERSISTENTSTORE_H
