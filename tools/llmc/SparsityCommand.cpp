// `llmc sparsity check CKPT` (see SparsityCommand.h).
#include "tools/llmc/SparsityCommand.h"
#include "runtime/Weights/Checkpoint.h"
#include "runtime/Weights/Sparsity.h"

#include "llvm/Support/Format.h"

namespace rt = llmc::runtime;

llvm::Expected<bool> llmc::checkSparsity(llvm::StringRef path,
                                         llvm::raw_ostream &os) {
  llvm::Expected<rt::Checkpoint> checkpoint = rt::readCheckpoint(path);
  if (!checkpoint)
    return checkpoint.takeError();
  const rt::TensorMap &tensors = checkpoint->tensors;
  auto isState = [](llvm::StringRef name) {
    for (llvm::StringRef prefix : std::initializer_list<llvm::StringRef>{
             "adam_m.", "adam_v.", "momentum.",
             llmc::kir::stepScalarName(llmc::kir::StepScalar::LossScale)})
      if (name.starts_with(prefix))
        return true;
    return name.starts_with(rt::kSparsityMaskPrefix);
  };
  os << llvm::format("%-40s %-14s %7s  %-6s %s\n", "tensor", "shape",
                     "zeros", "2:4", "selected");
  int64_t selected = 0, failed = 0;
  for (const auto &[name, tensor] : tensors) {
    if (isState(name) || tensor.shape.size() != 2 || !tensor.isFloat())
      continue;
    std::vector<float> values = tensor.toF32();
    int64_t k = tensor.shape[1];
    std::string shape = std::to_string(tensor.shape[0]) + "x" +
                        std::to_string(k);
    auto maskIt = tensors.find((rt::kSparsityMaskPrefix + name).str());
    bool isSelected = maskIt != tensors.end();
    const char *verdict = "n/a";
    rt::TwoOfFourCheck check;
    std::string problem;
    if (k % 4 == 0) {
      check = rt::checkTwoOfFour(values, k);
      verdict = check.ok() ? "yes" : "no";
      if (!check.ok())
        problem = std::to_string(check.denseGroups) + " of " +
                  std::to_string(check.groups) +
                  " groups have more than 2 non-zeros";
    } else {
      check.elements = int64_t(values.size());
      for (float v : values)
        check.zeros += v == 0.0f;
      problem = "K = " + std::to_string(k) + " is not a multiple of 4";
    }
    if (isSelected) {
      ++selected;
      std::vector<float> mask = maskIt->second.toF32();
      int64_t outside = 0;
      for (size_t i = 0; i < values.size() && i < mask.size(); ++i)
        outside += mask[i] == 0.0f && values[i] != 0.0f;
      if (outside)
        problem += (problem.empty() ? "" : "; ") + std::to_string(outside) +
                   " non-zeros where the mask is 0";
      if (!check.ok() || outside)
        ++failed;
    }
    os << llvm::format("%-40s %-14s %6.1f%%  %-6s %s", name.c_str(),
                       shape.c_str(), 100.0 * check.zeroFraction(), verdict,
                       isSelected ? "yes" : "no");
    if (isSelected && !problem.empty())
      os << "  (" << problem << ")";
    os << "\n";
  }
  if (selected == 0) {
    os << path << ": no weight is selected (the checkpoint has no "
       << rt::kSparsityMaskPrefix << " states: a dense run)\n";
    return false;
  }
  os << llvm::format("%lld of %lld selected weights are 2:4 (step %lld)\n",
                     (long long)(selected - failed), (long long)selected,
                     (long long)checkpoint->step);
  return failed == 0;
}
