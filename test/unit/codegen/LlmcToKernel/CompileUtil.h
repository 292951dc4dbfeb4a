// Test helpers: a model config to a compiled program and a CPU executor,
// through the same path `llmc compile` and the runtime take.
#ifndef LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_COMPILEUTIL_H
#define LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_COMPILEUTIL_H

#include "codegen/KernelToCpu/KernelToCpu.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "frontend/GptBuilder.h"
#include "ir/LlmcDialect.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/Cpu/CpuExecutor.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

namespace llmc::test {

/// Runs the compile pipeline (or, with `fuse` false, only legality: every
/// op then becomes a kernel of its own) and lowers @forward to a program.
inline mlir::FailureOr<kir::Program> compileModule(mlir::ModuleOp module,
                                                   bool fuse = true) {
  mlir::PassManager pm(module.getContext());
  if (fuse)
    mlir::llmc::buildCompilePipeline(pm);
  else
    pm.addPass(mlir::llmc::createVerifyLegalityPass());
  if (mlir::failed(pm.run(module)))
    return mlir::failure();
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  return mlir::llmc::lowerToProgram(forward);
}

inline mlir::FailureOr<kir::Program>
compileConfig(mlir::MLIRContext &context, const mlir::llmc::ModelConfig &config,
              mlir::llmc::ForwardShape shape, bool fuse = true) {
  auto module = mlir::llmc::buildForwardModule(context, config, shape);
  if (!module) {
    llvm::consumeError(module.takeError());
    return mlir::failure();
  }
  return compileModule(**module, fuse);
}

inline llvm::Expected<std::unique_ptr<runtime::CpuExecutor>>
makeExecutor(kir::Program program, int threads = 0,
             std::shared_ptr<runtime::PersistentStore> store = nullptr) {
  std::vector<kir::Kernel> kernels = program.kernels;
  return runtime::createCpuExecutor(
      std::move(program),
      [&]() { return cpu::compileKernelsToObject(kernels); }, threads,
      nullptr, {}, std::move(store));
}

/// Parses `source` (llmc IR with any functions), runs llmc-fusion on it if
/// `fuse` (no legality check: training functions are not @forward) and
/// lowers function `name`.
inline mlir::FailureOr<kir::Program>
compileFunction(mlir::MLIRContext &context, llvm::StringRef source,
                llvm::StringRef name, bool fuse = true) {
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  if (!module)
    return mlir::failure();
  if (fuse) {
    mlir::PassManager pm(&context);
    pm.addPass(mlir::llmc::createFusionPass());
    if (mlir::failed(pm.run(*module)))
      return mlir::failure();
  }
  auto func = module->lookupSymbol<mlir::func::FuncOp>(name);
  if (!func)
    return mlir::failure();
  return mlir::llmc::lowerToProgram(func);
}

/// Parses `source` (llmc IR), compiles it with the compile pipeline and
/// loads it into a CPU executor.
inline llvm::Expected<std::unique_ptr<runtime::CpuExecutor>>
executorForSource(llvm::StringRef source) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  if (!module)
    return llvm::createStringError("the test's IR does not parse");
  auto program = compileModule(*module);
  if (mlir::failed(program))
    return llvm::createStringError("the test's IR does not compile");
  return makeExecutor(std::move(*program));
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_COMPILEUTIL_H
