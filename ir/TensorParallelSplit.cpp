// The tensor-parallel split of a model's parameters, by name.
#include "ir/TensorParallelSplit.h"

#include "llvm/ADT/Twine.h"

std::optional<mlir::llmc::TensorParallelSplit>
mlir::llmc::tensorParallelSplit(llvm::StringRef name, bool swiglu) {
  if (name == "wte" || name == "lm_head.weight")
    return TensorParallelSplit{0, 1, /*vocab=*/true};
  if (!name.starts_with("h."))
    return std::nullopt;
  auto is = [&](llvm::StringRef layer) {
    return name.ends_with(("." + layer + ".weight").str()) ||
           name.ends_with(("." + layer + ".bias").str());
  };
  if (is("attn.c_attn"))
    return TensorParallelSplit{0, 3};
  if (is("mlp.c_fc"))
    return TensorParallelSplit{0, swiglu ? 2 : 1};
  if ((is("attn.c_proj") || is("mlp.c_proj")) && name.ends_with(".weight"))
    return TensorParallelSplit{1, 1};
  return std::nullopt; // whole (a row-parallel bias is added once, after g)
}

int64_t mlir::llmc::vocabRowsPerRank(int64_t vocab, int64_t tp) {
  return (vocab + tp - 1) / tp;
}
