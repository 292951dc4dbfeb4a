// The persistent tensors of a training run: parameters, accumulated
// gradients and optimizer state, in host memory, shared by every program
// (forward, grad step, update step, programs for other sequence lengths)
// that binds them by name.
#ifndef LLMC_RUNTIME_PERSISTENTSTORE_H
#define LLMC_RUNTIME_PERSISTENTSTORE_H

#include "runtime/Exec/Executor.h"
#include "runtime/Exec/HostTensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace llmc::runtime {

/// Named host tensors, each one 64-byte-aligned allocation (kArenaAlignment)
/// created by its first bind, zero-filled or filled with the buffer's
/// initial value (kir::Buffer::initialValue), and kept until the store goes.
/// Addresses never change, so executors keep raw pointers into it; the
/// store must outlive them (they hold it by shared_ptr).
class PersistentStore : public TensorStore {
public:
  PersistentStore() = default;
  ~PersistentStore() override;
  PersistentStore(const PersistentStore &) = delete;
  PersistentStore &operator=(const PersistentStore &) = delete;

  /// The memory of tensor `name`, created as a tensor of `dtype` and `shape`
  /// whose every element is `initialValue` if the store has no such tensor
  /// (a later bind's initial value does not matter: the tensor exists). A
  /// tensor that exists with another dtype or shape is an error naming both.
  llvm::Expected<char *> bind(llvm::StringRef name, kir::DType dtype,
                              llvm::ArrayRef<int64_t> shape,
                              double initialValue = 0.0);

  /// Makes tensor `name` the `dtype`/`shape` tensor at `data` (64-byte
  /// aligned, not owned: the caller keeps it mapped until the store goes),
  /// without a copy: how an exported binary binds the weights in its own
  /// mapped file. Its programs must never write it (the memory may be read
  /// only); `set` on it is an error. An error if `name` exists already or
  /// `data` is misaligned.
  llvm::Error adopt(llvm::StringRef name, kir::DType dtype,
                    llvm::ArrayRef<int64_t> shape, const char *data);

  bool contains(llvm::StringRef name) const override;
  /// The names, sorted.
  std::vector<std::string> names() const override;
  /// A copy of tensor `name`; an error if there is none.
  llvm::Expected<HostTensor> get(llvm::StringRef name) const override;
  llvm::Expected<int64_t> bytes(llvm::StringRef name) const override;
  /// Copies `tensor` into `name` (binding it first, so dtype and shape must
  /// agree with an existing tensor).
  llvm::Error set(llvm::StringRef name, const HostTensor &tensor) override;
  const char *hostData(llvm::StringRef name) const override;
  /// In place: no copy.
  llvm::Error
  read(llvm::StringRef name,
       llvm::function_ref<llvm::Error(const TensorView &)> consume)
      const override;

  /// Counts writes to the store's tensors: set() and every executor run or
  /// copy that writes a parameter through its pointer (they call
  /// noteWrite()). What is derived from tensors' values (the CPU
  /// executor's 2:4 copies of weights) stays valid while it is unchanged.
  uint64_t writeCount() const { return writes.load(); }
  void noteWrite() { writes.fetch_add(1); }

private:
  bool isAdopted(llvm::StringRef name) const;
  std::atomic<uint64_t> writes{0};
  struct Entry {
    kir::DType dtype;
    std::vector<int64_t> shape;
    char *data = nullptr;
    int64_t bytes = 0;
    bool adopted = false; // external memory (adopt): neither freed nor set
    /// dtype, shape and bytes set; no memory yet.
    static Entry of(kir::DType dtype, llvm::ArrayRef<int64_t> shape);
  };
  mutable std::mutex mutex;
  std::map<std::string, Entry, std::less<>> entries;
};

/// `count` elements of `dtype`, each
/// `value` as that type stores it (round to nearest even for F16 and BF16):
/// how every store fills a persistent tensor with an initial value.
inline std::vector<char> filledElements(kir::DType dtype, int64_t count,
                                        double value) {
  std::vector<char> element(kir::dtypeBytes(dtype));
  auto put = [&](auto typed) {
    std::memcpy(element.data(), &typed, sizeof(typed));
  };
  switch (dtype) {
  case kir::DType::F32:
    put(float(value));
    break;
  case kir::DType::F16:
    put(floatToHalf(float(value)));
    break;
  case kir::DType::BF16:
    put(floatToBFloat16(float(value)));
    break;
  case kir::DType::I32:
    put(int32_t(value));
    break;
  case kir::DType::I64:
    put(int64_t(value));
    break;
  case kir::DType::I1:
    put(uint8_t(value != 0.0));
    break;
  }
  std::vector<char> bytes;
  bytes.reserve(count * element.size());
  for (int64_t i = 0; i < count; ++i)
    bytes.insert(bytes.end(), element.begin(), element.end());
  return bytes;
}

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_PERSISTENTSTORE_H
