// llmc-opt: the pass driver lit tests run; the llmc registry and MlirOptMain.
#include "codegen/Training.h"
#include "ir/LlmcDialect.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  mlir::llmc::registerLlmcPasses();
  // llmc-remat's budget policy plans memory as code generation does.
  mlir::llmc::registerRematPlannedPeak(mlir::llmc::plannedPeakBytes);
  mlir::llmc::registerLlmcPipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "llmc pass driver\n", registry));
}
