// llmc-opt: the pass driver lit tests run; the llmc registry and MlirOptMain.
#include "codegen/TrainingStep.h"
#include "ir/LlmcDialect.h"
#include "ir/ParseModule.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  mlir::llmc::registerLlmcPasses();
  // llmc-remat's budget policy plans memory as code generation does.
  mlir::llmc::registerRematPlannedPeak(mlir::llmc::plannedPeakBytes);
  mlir::llmc::registerLlmcPipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "llmc pass driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, input, output, registry));
  // MlirOptMain with the input read here, checked first
  // (mlir::llmc::findSourceProblem): hostile nesting cannot overflow the
  // parser's stack, a negative dimension gets a clear error.
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::llmc::findSourceProblem(file->getBuffer())) {
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
    mlir::MLIRContext context;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    (void)mlir::llmc::checkSource(sourceMgr, &context);
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> out =
      mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(out->os(), std::move(file), registry,
                                     config)))
    return 1;
  out->keep();
  return 0;
}
