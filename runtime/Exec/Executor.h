// The interfaces every execution backend implements (CpuExecutor in
// runtime/Cpu/, PersistentStore here, CudaExecutor and CudaPersistentStore
// in runtime/Cuda/): an executor binds tensors by name, runs the program's
// schedule and reads its outputs; a store holds the persistent tensors the
// executors of a run share. The driver (`--device`), text generation and
// the trainer work through them, so the backends are interchangeable.
#ifndef LLMC_RUNTIME_EXEC_EXECUTOR_H
#define LLMC_RUNTIME_EXEC_EXECUTOR_H

#include "ir/kernel/Program.h"
#include "runtime/Comm/Collectives.h"
#include "runtime/Exec/HostTensor.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::runtime {

class MemoryLedger;

/// A tensor where it lies: its dtype, shape and bytes.
struct TensorView {
  kir::DType dtype;
  llvm::ArrayRef<int64_t> shape;
  llvm::ArrayRef<char> bytes;
};

/// Named persistent tensors (parameters, gradients, optimizer state) that
/// the executors of one run share: PersistentStore in host memory,
/// CudaPersistentStore on a GPU. Checkpoints read and write them through
/// this interface.
class TensorStore {
public:
  virtual ~TensorStore() = default;
  virtual bool contains(llvm::StringRef name) const = 0;
  /// The names, sorted.
  virtual std::vector<std::string> names() const = 0;
  /// A host copy of tensor `name`; an error if there is none.
  virtual llvm::Expected<HostTensor> get(llvm::StringRef name) const = 0;
  /// The bytes tensor `name` takes in the store (no copy); an error if
  /// there is none.
  virtual llvm::Expected<int64_t> bytes(llvm::StringRef name) const = 0;
  /// Copies `tensor` into `name`; dtype and shape must agree with an
  /// existing tensor.
  virtual llvm::Error set(llvm::StringRef name, const HostTensor &tensor) = 0;
  /// The host memory of tensor `name` if it lives in this process's memory
  /// (null: on a device, or no such tensor); valid while the store lives.
  virtual const char *hostData(llvm::StringRef name) const { return nullptr; }
  /// Calls `consume` with tensor `name` (valid during the call): in place
  /// where it is in host memory, else through a host copy of that tensor
  /// alone. How a checkpoint streams the store to a file.
  virtual llvm::Error
  read(llvm::StringRef name,
       llvm::function_ref<llvm::Error(const TensorView &)> consume) const;
};

/// The collectives of an executor's runs so far: how many, the bytes each
/// rank sent into them, and the seconds the runs stood waiting for them
/// (communication that did not overlap compute).
struct CollectiveStats {
  int64_t collectives = 0;
  int64_t bytes = 0;
  double waitSeconds = 0;
};

class Executor {
public:
  virtual ~Executor() = default;

  virtual const kir::Program &program() const = 0;
  /// Copies a parameter, state or input in; the name, shape and dtype must
  /// match the program's, else the error says which tensor differs and how.
  virtual llvm::Error setTensor(llvm::StringRef name,
                                const HostTensor &tensor) = 0;
  /// Writes a parameter or state in place: `fill` gets its memory, in the
  /// program's dtype and layout, and writes every byte. The CPU executor
  /// hands out the persistent store's memory (no staging copy); this
  /// default stages a host tensor and calls setTensor.
  virtual llvm::Error
  writeTensor(llvm::StringRef name,
              llvm::function_ref<void(llvm::MutableArrayRef<char>)> fill);
  /// Sets every parameter from `tensors` through setTensor; a parameter
  /// missing from `tensors` is an error naming it (`source`: the file).
  llvm::Error setParams(const TensorMap &tensors, llvm::StringRef source);
  /// The parameters and the State buffers as host tensors, read through
  /// output().
  TensorMap params() const;
  TensorMap states() const;
  /// Whether the program takes the step scalar `scalar` as an input, or
  /// gives it (an output or an updated state), by the bindings' roles
  /// (ir/kernel/StepScalar.h), never by name.
  bool hasInput(kir::StepScalar scalar) const;
  bool hasOutput(kir::StepScalar scalar) const;
  /// Sets the f32 step-scalar input `scalar` when the program takes it; one
  /// it lacks (SGD has no bias corrections) is skipped.
  llvm::Error setScalar(kir::StepScalar scalar, double value);
  /// Sets AdamW's bias-correction inputs for update number `t` (1-based,
  /// skipped updates not counted) from the betas the program was compiled
  /// with (kir::biasCorrection); nothing for a program without them (SGD).
  llvm::Error setBiasCorrections(int64_t t);
  /// The f32 step-scalar output `scalar`; an error naming it when the
  /// program does not give it.
  llvm::Expected<double> scalarOutput(kir::StepScalar scalar) const;
  /// The (seed, step) of the program's random ops; none: nothing to do.
  virtual void setRng(uint64_t seed, uint64_t step) = 0;
  /// The communicators the program's collective steps run on (checked by
  /// checkMesh); without one, a program with collectives on an axis of
  /// more than one rank does not run. The mesh must outlive the executor.
  virtual llvm::Error setMesh(const Mesh &mesh) = 0;
  virtual CollectiveStats collectiveStats() const { return {}; }
  /// One line on the 2:4 sparse library path (which weights ran from a
  /// packed copy, on which instructions); empty where there is none.
  virtual std::string sparseSummary() const { return ""; }
  /// Adds the host memory this executor holds to `ledger`: its arena as
  /// "arena: <label>" (planned), inputs, scratch, JIT code and thread
  /// stacks. A device executor adds its arena as planned elsewhere.
  virtual void describeMemory(MemoryLedger &ledger,
                              llvm::StringRef label) const = 0;
  /// Runs the schedule once. A collective that fails (a rank that died or
  /// hangs) is an error naming the rank; the communicator is then broken
  /// and the job must end.
  virtual llvm::Error run() = 0;
  /// An output, or any buffer a binding names, as a host tensor.
  virtual llvm::Expected<HostTensor> output(llvm::StringRef name) const = 0;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_EXEC_EXECUTOR_H
