// Compiling the inference programs of a model: @prefill and @decode with a
// KV cache (frontend/GptBuilder.h: buildInferenceModule), through the
// inference pipeline (fusion) and the lowering, as the training step is.
//
// How a runtime uses them (both bind the parameters and the caches, States
// named cache.h.<i>.attn.k/v, by name in one PersistentStore):
//   prefill  inputs tokens, positions [B, P] i32; outputs logits [B, V]
//            (each sequence's last token); writes the P tokens' keys and
//            values into the caches at their positions
//   decode   the same with one token per sequence ([B, 1])
// Position p of a sequence attends over cache slots 0..p, so a runtime
// feeds every position once, in order (a prompt padded by repeating its
// last token at its last position rewrites that slot with the same values).
#ifndef LLMC_CODEGEN_INFERENCE_H
#define LLMC_CODEGEN_INFERENCE_H

#include "ir/kernel/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace llmc {

struct InferencePrograms {
  kir::Program prefill, decode;
};

/// Runs the inference pipeline on `module` (from buildInferenceModule) and
/// lowers @prefill and @decode. Diagnostics go to the context's handler;
/// the error says which phase failed.
llvm::Expected<InferencePrograms> compileInference(mlir::ModuleOp module);

} // namespace llmc

#endif // LLMC_CODEGEN_INFERENCE_H
