// What a model module holds, read from its IR: parameters and op counts.
#ifndef LLMC_FRONTEND_MODELINFO_H
#define LLMC_FRONTEND_MODELINFO_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

namespace mlir::llmc {

struct ParameterInfo {
  std::string name; // the `llmc.param` attribute, or "param#<index>"
  RankedTensorType type;
  int64_t numElements;
};

struct ModelInfo {
  std::string name; // from the `llmc.model` module attribute, if any
  std::vector<ParameterInfo> parameters;
  int64_t numParameters = 0;
  int64_t parameterBytes = 0;
  RankedTensorType tokens;
  std::map<std::string, int64_t> opCounts; // by op name, sorted
};

/// Reads @forward of a module that passed llmc-verify-legality.
ModelInfo getModelInfo(ModuleOp module);

/// Prints the summary; `perTensor` adds one line per parameter.
void printModelInfo(const ModelInfo &info, llvm::raw_ostream &os,
                    bool perTensor);

} // namespace mlir::llmc

#endif // LLMC_FRONTEND_MODELINFO_H
