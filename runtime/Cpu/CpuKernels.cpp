// Links a kernel object into the process with ORC's LLJIT.
#include "runtime/Cpu/CpuKernels.h"

#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

#include <mutex>

using namespace llmc::cpu;

CpuKernels::CpuKernels(std::unique_ptr<llvm::orc::LLJIT> jit)
    : jit(std::move(jit)) {}

CpuKernels::~CpuKernels() = default;

llvm::Expected<std::unique_ptr<CpuKernels>>
CpuKernels::load(llvm::ArrayRef<char> object, llvm::StringRef name) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto fail = [&](llvm::Error error) {
    return llvm::createStringError("cannot load CPU kernels '" + name +
                                   "': " + llvm::toString(std::move(error)));
  };
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit)
    return fail(jit.takeError());
  // The code may call the C runtime (memcpy, half-precision conversions):
  // resolve such symbols from this process.
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  if (!process)
    return fail(process.takeError());
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
      llvm::StringRef(object.data(), object.size()), name);
  if (llvm::Error error = (*jit)->addObjectFile(std::move(buffer)))
    return fail(std::move(error));
  return std::unique_ptr<CpuKernels>(new CpuKernels(std::move(*jit)));
}

llvm::Expected<CpuKernelFn> CpuKernels::lookup(llvm::StringRef name) const {
  auto address = jit->lookup(name);
  if (!address)
    return llvm::createStringError("CPU kernel '" + name +
                                   "' is not in the loaded object: " +
                                   llvm::toString(address.takeError()));
  return address->toPtr<CpuKernelFn>();
}
