// `llmc convert`: the trained parameters of an `llmc run` checkpoint as a
// safetensors file under Hugging Face names, or as an llm.c checkpoint.
#ifndef LLMC_TOOLS_LLMC_CONVERT_H
#define LLMC_TOOLS_LLMC_CONVERT_H

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"

#include <string>

namespace mlir::llmc {

struct ConvertOptions {
  std::string input;  // a checkpoint of llmc run (ZeRO: its main file)
  std::string output; // .safetensors or .bin
  std::string precision = "fp32"; // fp32, bf16, fp16
  std::string names = "hf";       // hf or llmc (safetensors only)
  // The weights selected for 2:4 (a sparsity_mask state) in the compressed
  // layout (runtime/Weights/Sparsity.h: writeTwoOfFour); llmc names, fp32 only.
  bool sparse = false;
};

/// Writes `options.output` atomically (nothing is left behind on an error)
/// and prints one line saying what it wrote. Errors name the file at fault.
llvm::Error convertCheckpoint(MLIRContext &context,
                              const ConvertOptions &options,
                              llvm::raw_ostream &os);

} // namespace mlir::llmc

#endif // LLMC_TOOLS_LLMC_CONVERT_H
