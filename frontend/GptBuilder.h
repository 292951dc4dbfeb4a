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

/// Static shapes of the inference programs: `batch` sequences, a KV cache
/// of `maxContext` positions per sequence, prompts fed `prefillTokens` at a
/// time.
struct InferenceShape {
  int64_t batch = 1;
  int64_t maxContext = 0; // 0: the config's seq_len.
  int64_t prefillTokens = 64;
};

/// Returns a module holding the two inference programs of the model, built
/// by the same layers as @forward (so a checkpoint's parameters bind by
/// name), with dropout off:
///   func.func @prefill(params..., %tokens: tensor<BxPxi32>,
///                      %positions: tensor<BxPxi32>, caches...)
///       -> (tensor<BxVxf32>, caches...)
///   func.func @decode(params..., %tokens: tensor<Bx1xi32>,
///                     %positions: tensor<Bx1xi32>, caches...)
///       -> (tensor<BxVxf32>, caches...)
/// `positions` holds each token's place in its sequence (< maxContext). The
/// caches are `llmc.state` arguments `cache.h.<i>.attn.k` / `.v` of shape
/// [B, n_head, maxContext, head_dim], written at the tokens' positions by
/// `llmc.cache_write` and returned as their `llmc.updates`; attention sees
/// the cache slots up to each token's position. The logits (`llmc.output`
/// "logits") are those of each sequence's last token in the step. A prompt
/// shorter than a prefill chunk is padded by repeating its last token at
/// its last position: the copies write the same keys and values to the
/// same slot and end with the same logits.
llvm::Expected<OwningOpRef<ModuleOp>>
buildInferenceModule(MLIRContext &context, const ModelConfig &config,
                     InferenceShape shape);

} // namespace mlir::llmc

#endif // LLMC_FRONTEND_GPTBUILDER_H
