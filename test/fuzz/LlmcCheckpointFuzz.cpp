// libFuzzer target: runtime::parseLlmcCheckpoint (llm.c's model files) on any
// bytes. The model dimensions it checks the file against come from the
// file's own header when they are small (so that a well-formed file gets
// past the header checks to the tensors), else from a fixed tiny model.
#include "test/fuzz/FuzzInput.h"

#include "runtime/Weights/Weights.h"

#include "llvm/Support/Endian.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  runtime::Gpt2Dims dims{/*nLayer=*/1, /*nHead=*/2, /*nEmbd=*/8,
                         /*seqLen=*/8, /*vocabSize=*/256};
  if (size >= 7 * 4) {
    auto field = [&](int i) {
      return int64_t(int32_t(llvm::support::endian::read32le(data + 4 * i)));
    };
    // llm.c's header: magic, version, maxT, V, L, NH, C.
    runtime::Gpt2Dims own{field(4), field(5), field(6), field(2), field(3)};
    if (own.nLayer >= 1 && own.nLayer <= 8 && own.nHead >= 1 &&
        own.nHead <= 64 && own.nEmbd >= 1 && own.nEmbd <= 1024 &&
        own.seqLen >= 1 && own.seqLen <= 1024 && own.vocabSize >= 1 &&
        own.vocabSize <= 4096)
      dims = own;
  }
  llvm::Expected<runtime::TensorMap> tensors =
      runtime::parseLlmcCheckpoint(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "<fuzz>", dims);
  if (!tensors)
    fuzz::expectMessage(tensors.takeError());
  return 0;
}
