// createCpuExecutor: a CPU executor whose kernels come from the kernel cache
// or the JIT (LLVM ORC). Kept out of Executor.cpp so that the executor links
// into exported binaries, whose kernels are linked ahead of time, without ORC.
#include "runtime/Cpu/CpuExecutor.h"

llvm::Expected<std::unique_ptr<llmc::runtime::CpuExecutor>>
llmc::runtime::createCpuExecutor(kir::Program program,
                                 cpu::CompileObjectFn compile, int numThreads,
                                 cpu::CacheStats *stats,
                                 const cpu::KernelCacheOptions &cache,
                                 std::shared_ptr<PersistentStore> store) {
  llvm::Expected<std::unique_ptr<cpu::CpuKernels>> code =
      cpu::loadCpuKernels(program.kernels, compile, stats, cache);
  if (!code)
    return code.takeError();
  std::vector<CpuKernelFn> fns;
  for (const kir::Kernel &kernel : program.kernels) {
    llvm::Expected<cpu::CpuKernelFn> fn = (*code)->lookup(kernel.name);
    if (!fn)
      return fn.takeError();
    fns.push_back(*fn);
  }
  llvm::Expected<std::unique_ptr<CpuExecutor>> executor = CpuExecutor::create(
      std::move(program), std::move(fns), numThreads, std::move(store));
  if (!executor)
    return executor.takeError();
  (*executor)->code = std::move(*code);
  return executor;
}
