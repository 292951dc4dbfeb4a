// The walk over one row of a kernel that both emitters follow.
#include "ir/kernel/RowSchedule.h"

using namespace llmc;
using namespace llmc::kir;

RowSchedule::RowSchedule(const Kernel &kernel)
    : levels(computeLevels(kernel)) {
  int numPasses = 0;
  phases = computePhases(kernel, numPasses);
  rowValues.resize(numPasses + 1);
  reductionPasses.resize(numPasses);
  std::vector<llvm::SmallVector<int32_t>> reductionArgs(numPasses);
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    int32_t index = int32_t(i);
    if (instr.op == Op::Store) {
      (levels[i] == Level::Column ? columnStores : rowStores).push_back(index);
    } else if (isReduction(instr.op)) {
      reductionPasses[phases[i] - 1].reductions.push_back(index);
      reductionArgs[phases[i] - 1].push_back(instr.args[0]);
    } else if (levels[i] == Level::Row) {
      rowValues[phases[i]].push_back(index);
    }
  }
  for (int pass = 0; pass < numPasses; ++pass) {
    reductionPasses[pass].phase = pass + 1;
    reductionPasses[pass].needed =
        columnClosure(kernel, levels, reductionArgs[pass]);
  }
  storePass.needed = columnClosure(kernel, levels, columnStores);
}

void RowSchedule::walk(
    llvm::function_ref<void(llvm::ArrayRef<int32_t>)> emitRowValues,
    llvm::function_ref<void(const ColumnPass &)> emitColumnPass,
    llvm::function_ref<void(llvm::ArrayRef<int32_t>)> emitRowStores) const {
  emitRowValues(rowValues[0]);
  for (const ColumnPass &pass : reductionPasses) {
    emitColumnPass(pass);
    emitRowValues(rowValues[pass.phase]);
  }
  if (!columnStores.empty())
    emitColumnPass(storePass);
  emitRowStores(rowStores);
}
