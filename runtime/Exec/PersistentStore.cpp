// The persistent store: named, aligned host tensors, zero-initialized or
// filled with their initial value.
#include "runtime/Exec/PersistentStore.h"

#include "ir/kernel/Program.h"
#include "runtime/Exec/HostMemory.h"
#include "runtime/Exec/ParallelChunks.h"

#include <cstdlib>
#include <cstring>

using namespace llmc;
using namespace llmc::runtime;

PersistentStore::Entry
PersistentStore::Entry::of(kir::DType dtype, llvm::ArrayRef<int64_t> shape) {
  Entry entry;
  entry.dtype = dtype;
  entry.shape.assign(shape.begin(), shape.end());
  entry.bytes = kir::dtypeBytes(dtype);
  for (int64_t extent : shape)
    entry.bytes *= extent;
  return entry;
}

PersistentStore::~PersistentStore() {
  for (auto &[name, entry] : entries)
    if (!entry.adopted)
      std::free(entry.data);
}

llvm::Expected<char *> PersistentStore::bind(llvm::StringRef name,
                                             kir::DType dtype,
                                             llvm::ArrayRef<int64_t> shape,
                                             double initialValue) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it != entries.end()) {
    const Entry &entry = it->second;
    if (entry.dtype != dtype || llvm::ArrayRef<int64_t>(entry.shape) != shape)
      return llvm::createStringError(
          "persistent tensor '" + name + "' is " +
          kir::dtypeName(entry.dtype) + kir::formatShape(entry.shape) +
          ", a program binds it as " + kir::dtypeName(dtype) +
          kir::formatShape(shape));
    return entry.data;
  }
  Entry entry = Entry::of(dtype, shape);
  int64_t size = std::max<int64_t>(entry.bytes, 1);
  entry.data = allocateHostMemory(size);
  if (!entry.data)
    return llvm::createStringError("cannot allocate " + llvm::Twine(size) +
                                   " bytes for persistent tensor '" + name +
                                   "'");
  // Zeroed by all hardware threads: this is the first touch of the pages
  // (gradients and AdamW moments are 1.5 GB for GPT-2 124M), whose faults
  // are most of the cost.
  parallelChunks(size, int64_t(1) << 22, [&](int64_t begin, int64_t end) {
    std::memset(entry.data + begin, 0, end - begin);
  });
  if (initialValue != 0.0) {
    std::vector<char> elements = filledElements(
        dtype, entry.bytes / kir::dtypeBytes(dtype), initialValue);
    std::memcpy(entry.data, elements.data(), elements.size());
  }
  char *data = entry.data;
  entries.emplace(name.str(), std::move(entry));
  return data;
}

llvm::Error PersistentStore::adopt(llvm::StringRef name, kir::DType dtype,
                                   llvm::ArrayRef<int64_t> shape,
                                   const char *data) {
  if (reinterpret_cast<uintptr_t>(data) % kir::kArenaAlignment)
    return llvm::createStringError("persistent tensor '" + name +
                                   "': external memory is not " +
                                   llvm::Twine(kir::kArenaAlignment) +
                                   "-byte aligned");
  std::lock_guard<std::mutex> lock(mutex);
  Entry entry = Entry::of(dtype, shape);
  // Executors take char * to every persistent tensor; those of an adopted
  // one are only read (the exported binary checks that no step writes a
  // parameter before it adopts).
  entry.data = const_cast<char *>(data);
  entry.adopted = true;
  if (!entries.emplace(name.str(), std::move(entry)).second)
    return llvm::createStringError("persistent tensor '" + name +
                                   "' exists already");
  return llvm::Error::success();
}

bool PersistentStore::isAdopted(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  return it != entries.end() && it->second.adopted;
}

bool PersistentStore::contains(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  return entries.find(name) != entries.end();
}

std::vector<std::string> PersistentStore::names() const {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::string> result;
  for (const auto &[name, entry] : entries)
    result.push_back(name);
  return result;
}

llvm::Expected<int64_t> PersistentStore::bytes(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it == entries.end())
    return llvm::createStringError("no persistent tensor '" + name + "'");
  return it->second.bytes;
}

llvm::Expected<HostTensor> PersistentStore::get(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it == entries.end())
    return llvm::createStringError("no persistent tensor '" + name + "'");
  const Entry &entry = it->second;
  HostTensor tensor = HostTensor::zeros(entry.dtype, entry.shape);
  std::memcpy(tensor.bytes.data(), entry.data, entry.bytes);
  return tensor;
}

llvm::Error PersistentStore::set(llvm::StringRef name,
                                 const HostTensor &tensor) {
  llvm::Expected<char *> data = bind(name, tensor.dtype, tensor.shape);
  if (!data)
    return data.takeError();
  if (isAdopted(name))
    return llvm::createStringError("persistent tensor '" + name +
                                   "' is read-only (mapped from a file)");
  std::memcpy(*data, tensor.bytes.data(), tensor.bytes.size());
  noteWrite();
  return llvm::Error::success();
}

const char *PersistentStore::hostData(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  return it == entries.end() ? nullptr : it->second.data;
}

llvm::Error PersistentStore::read(
    llvm::StringRef name,
    llvm::function_ref<llvm::Error(const TensorView &)> consume) const {
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = entries.find(name);
    if (it == entries.end())
      return llvm::createStringError("no persistent tensor '" + name + "'");
    entry = it->second; // the data stays where it is until the store goes
  }
  return consume({entry.dtype, entry.shape,
                  llvm::ArrayRef<char>(entry.data, entry.bytes)});
}
