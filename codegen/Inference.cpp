// compileInference: the inference pipeline, then the lowering of @prefill
// and @decode.
#include "codegen/Inference.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

llvm::Expected<llmc::InferencePrograms>
llmc::compileInference(mlir::ModuleOp module) {
  mlir::PassManager pm(module.getContext());
  mlir::llmc::buildInferencePipeline(pm);
  if (mlir::failed(pm.run(module)))
    return llvm::createStringError("the inference pipeline failed (see the "
                                   "diagnostics above)");
  InferencePrograms programs;
  for (auto [name, program] :
       {std::pair<const char *, kir::Program *>{"prefill", &programs.prefill},
        {"decode", &programs.decode}}) {
    auto lowered = mlir::llmc::lowerFunction(module, name);
    if (!lowered)
      return lowered.takeError();
    if (!*lowered)
      return llvm::createStringError(llvm::Twine("the module has no @") +
                                     name + " (build it with "
                                            "buildInferenceModule)");
    *program = std::move(**lowered);
  }
  return programs;
}
