// libFuzzer target: model.mlir as `llmc compile` and `llmc run` read it
// (parseModuleSource: the nesting and negative-dimension checks, MLIR's
// parser, llmc's type and attribute parsers and op verifiers) and then
// llmc-verify-legality. A refusal must come with an error diagnostic; a
// module that is accepted must print and parse back to the same text.
#include "ir/LlmcDialect.h"
#include "ir/ParseModule.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;

/// The module as text, as `llmc compile --compile-to=...` prints it.
static std::string print(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static DialectRegistry registry = [] {
    DialectRegistry r;
    r.insert<llmc::LlmcDialect, func::FuncDialect>();
    return r;
  }();
  // A context per input: types and attributes of earlier inputs would
  // otherwise accumulate for the life of the process. No threads: the
  // pass manager would start a pool per context.
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  int errors = 0;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    errors += diag.getSeverity() == DiagnosticSeverity::Error;
    return success();
  });
  auto refused = [&](const char *what) {
    if (errors == 0) {
      llvm::errs() << "fuzz: " << what << " failed without an error\n";
      std::abort();
    }
    return 0;
  };

  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "model.mlir"),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module = llmc::parseModuleSource(sourceMgr, &context);
  if (!module)
    return refused("parsing");
  PassManager pm(&context);
  pm.addPass(llmc::createVerifyLegalityPass());
  if (failed(pm.run(*module)))
    return refused("llmc-verify-legality");

  std::string printed = print(*module);
  OwningOpRef<ModuleOp> again =
      parseSourceString<ModuleOp>(printed, ParserConfig(&context));
  if (!again) {
    llvm::errs() << "fuzz: the printed module does not parse:\n" << printed;
    std::abort();
  }
  if (print(*again) != printed) {
    llvm::errs() << "fuzz: the module prints differently after a round "
                    "trip:\n"
                 << printed << "\n---\n"
                 << print(*again);
    std::abort();
  }
  return 0;
}
