// Reads parameter shapes and op counts from a model's @forward.
#include "frontend/ModelInfo.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace mlir::llmc;

ModelInfo mlir::llmc::getModelInfo(ModuleOp module) {
  ModelInfo info;
  if (auto config = module->getAttrOfType<DictionaryAttr>("llmc.model"))
    if (auto name = config.getAs<StringAttr>("name"))
      info.name = name.str();
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  FunctionType type = forward.getFunctionType();
  unsigned numParams = type.getNumInputs() - 2;
  for (unsigned i = 0; i < numParams; ++i) {
    auto tensor = cast<RankedTensorType>(type.getInput(i));
    auto name = forward.getArgAttrOfType<StringAttr>(i, "llmc.param");
    ParameterInfo param{name ? name.str() : "param#" + std::to_string(i),
                        tensor, tensor.getNumElements()};
    info.numParameters += param.numElements;
    info.parameterBytes +=
        param.numElements * tensor.getElementTypeBitWidth() / 8;
    info.parameters.push_back(std::move(param));
  }
  info.tokens = cast<RankedTensorType>(type.getInput(numParams));
  forward.walk([&](Operation *op) {
    if (op != forward.getOperation())
      ++info.opCounts[op->getName().getStringRef().str()];
  });
  return info;
}

static std::string shapeString(RankedTensorType type) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(type.getShape(), os, ", ");
  os << "] " << type.getElementType();
  return s;
}

// 124439808 -> "124,439,808".
static std::string withCommas(int64_t value) {
  std::string digits = std::to_string(value), result;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      result += ',';
    result += digits[i];
  }
  return result;
}

void mlir::llmc::printModelInfo(const ModelInfo &info, llvm::raw_ostream &os,
                                bool perTensor) {
  if (!info.name.empty())
    os << "model: " << info.name << "\n";
  os << "tokens per step: " << shapeString(info.tokens) << "\n";
  int64_t numOps = 0;
  for (const auto &entry : info.opCounts)
    numOps += entry.second;
  os << "ops in @forward: " << numOps << "\n";
  for (const auto &[name, count] : info.opCounts)
    os << llvm::format("  %-24s %6lld\n", name.c_str(), (long long)count);
  if (perTensor) {
    os << "parameters:\n";
    for (const ParameterInfo &p : info.parameters)
      os << llvm::format("  %-32s %-24s %15s\n", p.name.c_str(),
                         shapeString(p.type).c_str(),
                         withCommas(p.numElements).c_str());
  }
  os << "parameter tensors: " << info.parameters.size() << "\n";
  os << "total parameters: " << withCommas(info.numParameters) << " ("
     << llvm::format("%.1fM", info.numParameters / 1e6) << ", "
     << llvm::format("%.1f MiB", info.parameterBytes / (1024.0 * 1024.0))
     << ")\n";
}
