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
/// the error says which phase failed. `weights` BF16 or F16:
/// storeParametersAs.
llvm::Expected<InferencePrograms>
compileInference(mlir::ModuleOp module, kir::DType weights = kir::DType::F32);

/// Stores the f32 parameters of both programs as `type` (BF16 or F16)
/// where every use of them in either program reads them through a kernel's
/// loads (which widen to f32) or as a GEMM's B (runNarrowGemm's tiles, and
/// the 16-bit-weight kernel for few rows; the program verifier allows this
/// one mix, f32 A): the linear weights, the embeddings, the norms' weights.
/// The rest keep f32 (a GEMM epilogue's bias reads f32; any other library
/// step). Activations, the KV cache and every sum stay f32. A narrowed
/// weight is no longer marked for the 2:4 kernels (they pack f32
/// parameters). Returns how many parameters were narrowed.
int64_t storeParametersAs(InferencePrograms &programs, kir::DType type);

} // namespace llmc

#endif // LLMC_CODEGEN_INFERENCE_H
