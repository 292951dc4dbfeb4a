// The walk over one row of a kernel that both emitters follow (the CPU's,
// codegen/KernelToCpu, and the CUDA one, codegen/KernelToCuda): which
// row-level values come when, which reductions each pass over the columns
// accumulates and which column-level values it evaluates, and where the
// stores go. The emitters keep only what their target writes for each step.
#ifndef LLMC_IR_KERNEL_ROWSCHEDULE_H
#define LLMC_IR_KERNEL_ROWSCHEDULE_H

#include "ir/kernel/KernelIR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace llmc::kir {

/// One loop over the columns of a row.
struct ColumnPass {
  /// The reduction phase it completes (1, 2, ...), or 0 for the pass that
  /// stores the column-level values.
  int phase = 0;
  /// The reductions it accumulates, in body order (none for the stores).
  llvm::SmallVector<int32_t> reductions;
  /// The column-level values it evaluates (columnClosure of the
  /// reductions' arguments, or of the stores).
  llvm::BitVector needed;
};

/// A row is evaluated as:
///   rowValues[0];
///   for each reductionPasses[p]: the column loop, then rowValues[p + 1];
///   the column loop of storePass, if there are column-level stores;
///   rowStores.
/// Every row-level store thus follows every load of the row.
struct RowSchedule {
  explicit RowSchedule(const Kernel &kernel);

  std::vector<Level> levels; // computeLevels
  std::vector<int> phases;   // computePhases
  /// rowValues[p]: the row-level values of phase p that are neither stores
  /// nor reductions, in body order; one list per phase, 0 to the number of
  /// reduction passes.
  std::vector<llvm::SmallVector<int32_t>> rowValues;
  std::vector<ColumnPass> reductionPasses;
  ColumnPass storePass;                    // its stores: columnStores
  llvm::SmallVector<int32_t> columnStores; // column-level stores
  llvm::SmallVector<int32_t> rowStores;    // row-level stores

  /// Calls the emitter's three steps in the order above.
  void walk(llvm::function_ref<void(llvm::ArrayRef<int32_t>)> emitRowValues,
            llvm::function_ref<void(const ColumnPass &)> emitColumnPass,
            llvm::function_ref<void(llvm::ArrayRef<int32_t>)> emitRowStores)
      const;
};

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_ROWSCHEDULE_H
