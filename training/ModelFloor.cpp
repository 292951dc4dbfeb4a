// The least memory a model config can run in (see ModelFloor.h).
#include "training/ModelFloor.h"

#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/FormatVariadic.h"

#include <initializer_list>
#include <optional>

using namespace llmc;
using mlir::llmc::ModelConfig;
using mlir::llmc::Position;

/// The product of `factors`, or nullopt where it overflows int64_t.
static std::optional<int64_t> product(std::initializer_list<int64_t> factors) {
  std::optional<int64_t> result = 1;
  for (int64_t factor : factors)
    if (!(result = llvm::checkedMul(*result, factor)))
      return std::nullopt;
  return result;
}

llvm::Expected<training::ModelFloor>
training::modelFloor(const ModelConfig &config, int64_t batch, int64_t seqLen,
                     int64_t bytesPerParameter, llvm::StringRef what) {
  auto overflow = [&](const llvm::Twine &quantity) {
    return llvm::createStringError(
        what + ": " + quantity +
        " overflows 64-bit byte counts; no machine holds such a model");
  };
  int64_t e = config.nEmbd, v = config.vocabSize, l = config.nLayer,
          f = config.ffnHidden ? config.ffnHidden : 4 * config.nEmbd;
  int64_t mlpMatrices =
      config.activation == mlir::llmc::Activation::SwiGlu ? 3 : 2;
  std::optional<int64_t> embeddings = product({v, e});
  std::optional<int64_t> positions =
      config.position == Position::Learned ? product({seqLen, e})
                                           : std::optional<int64_t>(0);
  std::optional<int64_t> attention = product({2, e, e});
  std::optional<int64_t> mlp = product({mlpMatrices, e, f});
  std::optional<int64_t> block =
      attention && mlp ? llvm::checkedAdd(*attention, *mlp) : std::nullopt;
  std::optional<int64_t> blocks =
      block ? llvm::checkedMul(*block, l) : std::nullopt;
  std::optional<int64_t> parameters = embeddings;
  for (std::optional<int64_t> part :
       {positions, blocks,
        config.tieEmbeddings ? std::optional<int64_t>(0) : embeddings})
    parameters = parameters && part ? llvm::checkedAdd(*parameters, *part)
                                    : std::nullopt;
  if (!parameters)
    return overflow(llvm::formatv("the parameter count (n_layer {0}, n_embd "
                                  "{1}, vocab_size {2}, seq_len {3})",
                                  l, e, v, seqLen));
  ModelFloor floor;
  floor.parameters = *parameters;
  floor.bytesPerParameter = bytesPerParameter;
  floor.batch = batch;
  floor.seqLen = seqLen;
  std::optional<int64_t> bytes = llvm::checkedMul(*parameters,
                                                  bytesPerParameter);
  if (!bytes)
    return overflow(llvm::formatv("{0} parameters x {1} bytes", *parameters,
                                  bytesPerParameter));
  floor.parameterBytes = *bytes;
  std::optional<int64_t> logits = product({batch, seqLen, v, 4});
  if (!logits)
    return overflow(llvm::formatv("the logits of a batch ({0} x seq_len {1} "
                                  "x vocab_size {2} x 4 bytes)",
                                  batch, seqLen, v));
  floor.logitsBytes = *logits;
  if (!llvm::checkedAdd(floor.parameterBytes, floor.logitsBytes))
    return overflow("the parameters and logits together");
  return floor;
}

llvm::Error training::checkFloorFits(const ModelFloor &floor,
                                     const runtime::AvailableMemory &available,
                                     int64_t ranks, llvm::StringRef what,
                                     llvm::StringRef advice) {
  // Ranks may split the parameters (ZeRO, tensor or pipeline parallel),
  // never one sequence's logits.
  int64_t need = floor.parameterBytes / std::max<int64_t>(ranks, 1) +
                 floor.logitsBytes;
  if (need <= available.bytes)
    return llvm::Error::success();
  std::string perRank =
      ranks > 1 ? llvm::formatv(" (the parameters split over {0} ranks)",
                                ranks)
                      .str()
                : "";
  return llvm::createStringError(llvm::formatv(
      "{0} needs at least {1}{2}: {3} parameters at {4} bytes ({5}) and the "
      "logits of a batch of {6} x {7} tokens ({8}), more than the {9} "
      "available ({10}); {11}",
      what, runtime::formatBytes(need), perRank, floor.parameters,
      floor.bytesPerParameter, runtime::formatBytes(floor.parameterBytes),
      floor.batch, floor.seqLen, runtime::formatBytes(floor.logitsBytes),
      runtime::formatBytes(available.bytes), available.source, advice));
}
