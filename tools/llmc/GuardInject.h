// LLMC_GUARD_INJECT: the faults the training guard's tests provoke in
// `llmc run`, a comma-separated list of
//   lr_burst:STEP:FACTOR    multiply update STEP's learning rate by FACTOR
//   nan:STEP                NaN into the first element of the first weight
//                           (sorted by name) before step STEP
//   set:STEP:TENSOR:VALUE   VALUE (a number, nan or inf) into the first
//                           element of TENSOR before step STEP
// Each fires once (a rollback's retry of the step is clean), or every time
// the step runs with a `:repeat` suffix.
#ifndef LLMC_TOOLS_LLMC_GUARDINJECT_H
#define LLMC_TOOLS_LLMC_GUARDINJECT_H

#include "runtime/Exec/Executor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>

namespace mlir::llmc {

/// The hook for TrainerOptions::injectFault; an error names what is wrong
/// in `spec`.
llvm::Expected<std::function<llvm::Error(
    int64_t step, ::llmc::runtime::TensorStore &store, double &lrScale)>>
parseGuardInjection(llvm::StringRef spec);

} // namespace mlir::llmc

#endif // LLMC_TOOLS_LLMC_GUARDINJECT_H
