// The least memory a model config can run in, computed from the config's
// sizes alone before any IR is built: what refuses an absurd model or batch
// (10^16 parameters, a batch of 10^11) in milliseconds, with the numbers,
// instead of after minutes of building and lowering the IR or an overflow.
#ifndef LLMC_TRAINING_MODELFLOOR_H
#define LLMC_TRAINING_MODELFLOOR_H

#include "frontend/ModelConfig.h"
#include "runtime/Exec/MemoryBudget.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace llmc::training {

/// A lower bound of what a run of the model holds at once: its parameters
/// (the embeddings, each block's attention query and output projections
/// and its MLP, a separate head when untied; biases, norms and key/value
/// projections, which grouped-query attention shrinks, are left out so the
/// bound stays below the plan) at `bytesPerParameter` each, and one batch's
/// fp32 logits.
struct ModelFloor {
  int64_t parameters = 0;
  int64_t bytesPerParameter = 0;
  int64_t parameterBytes = 0;
  int64_t batch = 0, seqLen = 0;
  int64_t logitsBytes = 0;
  int64_t total() const { return parameterBytes + logitsBytes; }
};

/// The floor of `config` for `batch` sequences of `seqLen` tokens, or an
/// error naming the product that overflows 64 bits. `what` names the
/// config in errors.
llvm::Expected<ModelFloor> modelFloor(const mlir::llmc::ModelConfig &config,
                                      int64_t batch, int64_t seqLen,
                                      int64_t bytesPerParameter,
                                      llvm::StringRef what);

/// An error when `floor` exceeds `available` (its parameters divided among
/// `ranks`, which may shard them), with the floor's numbers, then `advice`
/// (what would make it fit, or which flag goes on anyway).
llvm::Error checkFloorFits(const ModelFloor &floor,
                           const runtime::AvailableMemory &available,
                           int64_t ranks, llvm::StringRef what,
                           llvm::StringRef advice);

} // namespace llmc::training

#endif // LLMC_TRAINING_MODELFLOOR_H
