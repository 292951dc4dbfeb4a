// A tiny GPT (two layers, dropout) compiled by the training pipeline with
// llmc-amp at fp16 or bf16 (or without, f32): the programs the f16/bf16
// tests run on the CPU and compile for CUDA.
#ifndef LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_TINYGPTAMP_H
#define LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_TINYGPTAMP_H

#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

namespace llmc::test {

constexpr const char *kTinyGptAmpConfig = R"yaml(
name: tiny-amp
n_layer: 2
n_head: 4
n_embd: 64
seq_len: 32
vocab_size: 96
activation: gelu
norm: layernorm
position: learned
tie_embeddings: true
dropout: 0.1
)yaml";

/// Function `function` (forward, grad_step or update_step) of the tiny GPT
/// at batch x seq, through llmc-training-pipeline with llmc-amp at
/// `precision` ("fp16", "bf16"; "" for none) and no loss scaling.
inline llvm::Expected<kir::Program>
compileTinyGpt(const char *precision, llvm::StringRef function,
               int64_t batch, int64_t seq) {
  auto config =
      mlir::llmc::parseModelConfig(kTinyGptAmpConfig, "tiny-amp.yaml");
  if (!config)
    return config.takeError();
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, *config, {batch, seq});
  if (!module)
    return module.takeError();
  mlir::llmc::TrainingPipelineOptions options;
  if (*precision)
    options.amp.emplace().precision = precision;
  mlir::PassManager pm(&context);
  mlir::llmc::buildTrainingPipeline(pm, options);
  if (mlir::failed(pm.run(**module)))
    return llvm::createStringError("the training pipeline failed");
  auto func = (*module)->lookupSymbol<mlir::func::FuncOp>(function);
  if (!func)
    return llvm::createStringError("no @" + function);
  auto program = mlir::llmc::lowerToProgram(func);
  if (mlir::failed(program))
    return llvm::createStringError("lowering @" + function + " failed");
  return std::move(*program);
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_TINYGPTAMP_H
