// CudaPersistentStore (device tensors by name, created zero-filled or at
// their initial value, copied in and out synchronously) and enterContext.
#include "runtime/Cuda/CudaDeviceStore.h"

#include "runtime/Exec/PersistentStore.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace llmc;
using namespace llmc::runtime;
using cuda::checkDriver;

/// Retains the device's primary context and makes it current.
llvm::Expected<CUcontext> llmc::cuda::enterContext(const cuda::DriverApi &cu, int index,
                                       CUdevice *deviceOut) {
  int count = 0;
  if (llvm::Error error = checkDriver(cu, cu.deviceGetCount(&count),
                                      "cuDeviceGetCount"))
    return error;
  if (index < 0 || index >= count)
    return llvm::createStringError(llvm::formatv(
        "CUDA device {0} does not exist ({1} device(s) found)", index, count));
  CUdevice device;
  if (llvm::Error error =
          checkDriver(cu, cu.deviceGet(&device, index), "cuDeviceGet"))
    return error;
  CUcontext context;
  if (llvm::Error error = checkDriver(
          cu, cu.devicePrimaryCtxRetain(&context, device),
          "cuDevicePrimaryCtxRetain"))
    return error;
  if (llvm::Error error =
          checkDriver(cu, cu.ctxSetCurrent(context), "cuCtxSetCurrent"))
    return error;
  if (deviceOut)
    *deviceOut = device;
  return context;
}

//===----------------------------------------------------------------------===//
// CudaPersistentStore
//===----------------------------------------------------------------------===//

llvm::Expected<std::shared_ptr<CudaPersistentStore>>
CudaPersistentStore::create(int device) {
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  llvm::Expected<CUcontext> context = cuda::enterContext(**cu, device);
  if (!context)
    return context.takeError();
  return std::shared_ptr<CudaPersistentStore>(new CudaPersistentStore());
}

CudaPersistentStore::~CudaPersistentStore() {
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu) {
    llvm::consumeError(cu.takeError());
    return;
  }
  for (auto &[name, entry] : entries)
    (*cu)->memFree(entry.address);
}

llvm::Expected<uint64_t>
CudaPersistentStore::bind(llvm::StringRef name, kir::DType dtype,
                          llvm::ArrayRef<int64_t> shape,
                          double initialValue) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it != entries.end()) {
    if (it->second.dtype != dtype || llvm::ArrayRef<int64_t>(it->second.shape) != shape)
      return llvm::createStringError(
          "persistent tensor '" + name + "' is " +
          kir::dtypeName(it->second.dtype) +
          kir::formatShape(it->second.shape) + " in the store, the program "
          "expects " + kir::dtypeName(dtype) + kir::formatShape(shape));
    return it->second.address;
  }
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  Entry entry{dtype, shape.vec(), 0, 0};
  entry.bytes = kir::dtypeBytes(dtype);
  for (int64_t size : shape)
    entry.bytes *= size;
  CUdeviceptr address = 0;
  if (llvm::Error error =
          checkDriver(**cu, (*cu)->memAlloc(&address, std::max<int64_t>(
                                                          entry.bytes, 1)),
                      "cuMemAlloc (persistent tensor)"))
    return error;
  if (llvm::Error error = checkDriver(
          **cu, (*cu)->memsetD8Async(address, 0, entry.bytes, nullptr),
          "cuMemsetD8Async"))
    return error;
  // Synchronized below, before `elements` goes.
  std::vector<char> elements;
  if (initialValue != 0.0) {
    elements = filledElements(dtype, entry.bytes / kir::dtypeBytes(dtype),
                              initialValue);
    if (llvm::Error error = checkDriver(
            **cu,
            (*cu)->memcpyHtoDAsync(address, elements.data(), elements.size(),
                                   nullptr),
            "cuMemcpyHtoD (initial value)"))
      return error;
  }
  if (llvm::Error error =
          checkDriver(**cu, (*cu)->ctxSynchronize(), "cuCtxSynchronize"))
    return error;
  entry.address = address;
  entries.emplace(name.str(), entry);
  return uint64_t(address);
}

bool CudaPersistentStore::contains(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  return entries.find(name) != entries.end();
}

std::vector<std::string> CudaPersistentStore::names() const {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::string> result;
  for (const auto &[name, entry] : entries)
    result.push_back(name);
  return result;
}

llvm::Expected<int64_t>
CudaPersistentStore::bytes(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it == entries.end())
    return llvm::createStringError("no persistent tensor '" + name + "'");
  return int64_t(it->second.bytes);
}

llvm::Expected<HostTensor>
CudaPersistentStore::get(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it == entries.end())
    return llvm::createStringError("no persistent tensor '" + name + "'");
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  HostTensor tensor = HostTensor::zeros(it->second.dtype, it->second.shape);
  if (llvm::Error error = checkDriver(
          **cu,
          (*cu)->memcpyDtoHAsync(tensor.bytes.data(), it->second.address,
                                 it->second.bytes, nullptr),
          "cuMemcpyDtoH"))
    return error;
  if (llvm::Error error =
          checkDriver(**cu, (*cu)->ctxSynchronize(), "cuCtxSynchronize"))
    return error;
  return tensor;
}

llvm::Error CudaPersistentStore::set(llvm::StringRef name,
                                     const HostTensor &tensor) {
  llvm::Expected<uint64_t> address = bind(name, tensor.dtype, tensor.shape);
  if (!address)
    return address.takeError();
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  if (llvm::Error error = checkDriver(
          **cu,
          (*cu)->memcpyHtoDAsync(*address, tensor.bytes.data(),
                                 tensor.bytes.size(), nullptr),
          "cuMemcpyHtoD"))
    return error;
  return checkDriver(**cu, (*cu)->ctxSynchronize(), "cuCtxSynchronize");
}

