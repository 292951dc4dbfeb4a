// The interface every execution backend implements (CpuExecutor in
// runtime/Executor.h, CudaExecutor in runtime/Cuda/CudaExecutor.h): bind
// tensors by name, run the program's schedule, read its outputs. The driver
// (`llmc inspect --run`, `llmc generate`, each with `--device`) and text
// generation work through it, so the backends are interchangeable.
#ifndef LLMC_RUNTIME_BACKEND_H
#define LLMC_RUNTIME_BACKEND_H

#include "codegen/Program.h"
#include "runtime/Weights.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace llmc::runtime {

class Executor {
public:
  virtual ~Executor() = default;

  virtual const kir::Program &program() const = 0;
  /// Copies a parameter, state or input in; the name, shape and dtype must
  /// match the program's, else the error says which tensor differs and how.
  virtual llvm::Error setTensor(llvm::StringRef name,
                                const HostTensor &tensor) = 0;
  /// Sets every parameter from `tensors` (`source` names the file).
  virtual llvm::Error setParams(const TensorMap &tensors,
                                llvm::StringRef source) = 0;
  /// The parameters and the State buffers as host tensors.
  virtual TensorMap params() const = 0;
  virtual TensorMap states() const = 0;
  /// The (seed, step) of the program's random ops; none: nothing to do.
  virtual void setRng(uint64_t seed, uint64_t step) = 0;
  /// Runs the schedule once.
  virtual llvm::Error run() = 0;
  /// An output, or any buffer a binding names, as a host tensor.
  virtual llvm::Expected<HostTensor> output(llvm::StringRef name) const = 0;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_BACKEND_H
