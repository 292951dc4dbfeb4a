// Builds the forward function of a GPT-2/OPT/Llama-style model in llmc IR.
#ifndef LLMC_FRONTEND_GPTBUILDER_H
#define LLMC_FRONTEND_GPTBUILDER_H

#include "frontend/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir::llmc {

/// Static shape of one forward call: `batch` sequences of `seqLen` tokens.
struct ForwardShape {
  int64_t batch = kDefaultMicroBatchSize;
  int64_t seqLen = 0; // 0: the config's seq_len.
};

/// Returns a module holding
///   func.func @forward(params..., %tokens: tensor<BxTxi32>,
///                      %targets: tensor<BxTxi32>)
///       -> (tensor<f32>, tensor<BxTxVxf32>)
/// returning the mean cross-entropy loss and the logits (which text
/// generation samples from).
/// Parameters carry their names as `llmc.param` argument attributes in the
/// PyTorch layout (linear weights [out, in]) and order of llm.c; the config
/// is recorded as the module attribute `llmc.model`. Fails (with a message)
/// for a shape the config cannot run, e.g. T above seq_len.
llvm::Expected<OwningOpRef<ModuleOp>>
buildForwardModule(MLIRContext &context, const ModelConfig &config,
                   ForwardShape shape);

} // namespace mlir::llmc

#endif // LLMC_FRONTEND_GPTBUILDER_H
