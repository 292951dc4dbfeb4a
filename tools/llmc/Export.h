// `llmc export`: a model's @prefill/@decode compiled ahead of time into one
// standalone executable, its weights, programs and tokenizer appended as a
// payload (runtime/Serve/ExportPayload.h); tools/exported/Main.cpp is its main.
#ifndef LLMC_TOOLS_LLMC_EXPORT_H
#define LLMC_TOOLS_LLMC_EXPORT_H

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <string>

namespace llmc {

struct ExportOptions {
  std::string model;   // an artifact with a model config (model.llmc)
  std::string weights; // empty: GPT-2 initialization from `seed`
  uint64_t seed = 1337;
  std::string tokenizer = "byte"; // or a GPT-2 BPE directory
  std::string precision = "fp32";
  std::string target = "cpu";
  std::string cpu; // LLVM CPU name; empty: this host's CPU
  int64_t batch = 1, maxContext = 0, prefillChunk = 64;
  std::string output;
};

/// Builds and writes the binary `options.output` (atomically); says what it
/// did on `log`. Errors name the option or file at fault.
llvm::Error exportBinary(mlir::MLIRContext &context,
                         const ExportOptions &options, llvm::raw_ostream &log);

/// `llmc inspect` of an exported binary: its --info, read without running
/// it.
llvm::Error printExportedBinary(llvm::StringRef path, llvm::raw_ostream &os);

} // namespace llmc

#endif // LLMC_TOOLS_LLMC_EXPORT_H
